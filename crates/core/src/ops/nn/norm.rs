//! Normalizations: BatchNormalization (inference), InstanceNormalization, LayerNormalization,
//! GroupNormalization, LpNormalization, MeanVarianceNormalization and LRN.

use super::{split_at_axis, tensor_from_f64};
use crate::op::{
    input, normalize_axes, normalize_axis, optional, optional_output, output, required, Prototype,
};
use crate::ops::util::{broadcast_offsets, broadcast_shapes};
use crate::{op_bail, op_common, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// Mean and (biased) variance of a block.
fn moments(b: &[f64]) -> (f64, f64) {
    let n = b.len().max(1) as f64;
    let mean = b.iter().sum::<f64>() / n;
    let var = b.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, var)
}

/// Checks that input `i` is 1-D of length `n`.
fn check_vec(t: &[usize], i: usize, what: &str, n: usize) -> OpResult<()> {
    if t != [n] {
        op_bail!("input {i} ({what}) must have shape [{n}], got {t:?}");
    }
    Ok(())
}

fn channels(x: &[usize]) -> OpResult<usize> {
    if x.len() < 2 {
        op_bail!("input 0 must have rank >= 2 (N x C x ...), got shape {x:?}");
    }
    Ok(x[1])
}

/// BatchNormalization's inputs and output, both forms.
const BATCH_NORM: Prototype = Prototype {
    inputs: &[
        input("X", DTypeSet::FLOAT),
        input("scale", DTypeSet::FLOAT),
        input("B", DTypeSet::FLOAT),
        input("input_mean", DTypeSet::FLOAT),
        input("input_var", DTypeSet::FLOAT),
    ],
    outputs: &[output("Y")],
    value_inputs: &[],
};

/// BatchNormalization in inference form: `(x - mean) / sqrt(var + epsilon) * scale + B`
/// per channel.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BatchNorm {
    pub epsilon: f64,
}

impl Default for BatchNorm {
    fn default() -> Self {
        BatchNorm { epsilon: 1e-5 }
    }
}

impl Op for BatchNorm {
    fn pointwise(&self) -> bool {
        true
    }

    op_common!("BatchNormalization", BATCH_NORM);

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let c = channels(ctx.shape(0)?)?;
        for (i, w) in [(1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")] {
            check_vec(ctx.shape(i)?, i, w, c)?;
        }
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let c = channels(x.shape())?;
        let p: Vec<Vec<f64>> = (1..5)
            .map(|i| required(inputs, i).map(|t| t.to_f64_vec()))
            .collect::<OpResult<_>>()?;
        for (i, v) in p.iter().enumerate() {
            if v.len() != c {
                op_bail!("input {} must have {c} elements, got {}", i + 1, v.len());
            }
        }
        let inner: usize = x.shape()[2..].iter().product();
        let xs = x.to_f64_vec();
        let ys: Vec<f64> = xs
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let ch = (i / inner.max(1)) % c.max(1);
                (v - p[2][ch]) / (p[3][ch] + self.epsilon).sqrt() * p[0][ch] + p[1][ch]
            })
            .collect();
        Ok(vec![tensor_from_f64(x.dtype(), x.shape(), &ys)?])
    }
}

/// BatchNormalization before opset 9 with `spatial = 0`: statistics per element rather than
/// per channel, each input shaped like one sample (`C x D1 x ...`). A type of its own, so the
/// passes and kernels made for per-channel statistics never take it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BatchNormPerElement {
    pub epsilon: f64,
}

impl Op for BatchNormPerElement {
    fn pointwise(&self) -> bool {
        true
    }

    op_common!("BatchNormalization", BATCH_NORM);

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.shape(0)?;
        channels(x)?;
        for (i, w) in [(1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")] {
            if ctx.shape(i)? != &x[1..] {
                op_bail!(
                    "input {i} ({w}) must have the shape of one sample, {:?}, got {:?}",
                    &x[1..],
                    ctx.shape(i)?
                );
            }
        }
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        channels(x.shape())?;
        let sample: usize = x.shape()[1..].iter().product();
        let p: Vec<Vec<f64>> = (1..5)
            .map(|i| required(inputs, i).map(|t| t.to_f64_vec()))
            .collect::<OpResult<_>>()?;
        for (i, v) in p.iter().enumerate() {
            if v.len() != sample {
                op_bail!(
                    "input {} must have {sample} elements, got {}",
                    i + 1,
                    v.len()
                );
            }
        }
        let ys: Vec<f64> = x
            .to_f64_vec()
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let e = i % sample.max(1);
                (v - p[2][e]) / (p[3][e] + self.epsilon).sqrt() * p[0][e] + p[1][e]
            })
            .collect();
        Ok(vec![tensor_from_f64(x.dtype(), x.shape(), &ys)?])
    }
}

/// InstanceNormalization: normalizes each (n, c) plane, then `* scale[c] + B[c]`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InstanceNorm {
    pub epsilon: f64,
}

impl Default for InstanceNorm {
    fn default() -> Self {
        InstanceNorm { epsilon: 1e-5 }
    }
}

impl Op for InstanceNorm {
    op_common!(
        "InstanceNormalization",
        Prototype {
            inputs: &[
                input("input", DTypeSet::FLOAT),
                input("scale", DTypeSet::FLOAT),
                input("B", DTypeSet::FLOAT),
            ],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let c = channels(ctx.shape(0)?)?;
        check_vec(ctx.shape(1)?, 1, "scale", c)?;
        check_vec(ctx.shape(2)?, 2, "B", c)?;
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let c = channels(x.shape())?;
        let (s, b) = (
            required(inputs, 1)?.to_f64_vec(),
            required(inputs, 2)?.to_f64_vec(),
        );
        if s.len() != c || b.len() != c {
            op_bail!("inputs 1 and 2 must have {c} elements");
        }
        let ys = group_normalize(&x.to_f64_vec(), x.shape(), c, self.epsilon, &s, &b, false);
        Ok(vec![tensor_from_f64(x.dtype(), x.shape(), &ys)?])
    }
}

/// Normalizes over groups of `c / groups` channels; scale/bias are per channel, or per group
/// when `per_group` is set.
fn group_normalize(
    xs: &[f64],
    shape: &[usize],
    groups: usize,
    eps: f64,
    scale: &[f64],
    bias: &[f64],
    per_group: bool,
) -> Vec<f64> {
    let c = shape[1];
    let spatial: usize = shape[2..].iter().product();
    let mut ys = vec![0.0; xs.len()];
    if groups == 0 {
        return ys;
    }
    let block = (c / groups) * spatial;
    if block == 0 {
        return ys;
    }
    for (bi, (src, dst)) in xs.chunks(block).zip(ys.chunks_mut(block)).enumerate() {
        let g = bi % groups;
        let (mean, var) = moments(src);
        let inv = 1.0 / (var + eps).sqrt();
        for (k, (d, v)) in dst.iter_mut().zip(src).enumerate() {
            let ch = g * (c / groups) + k / spatial.max(1);
            let a = if per_group { g } else { ch };
            *d = (v - mean) * inv * scale[a] + bias[a];
        }
    }
    ys
}

/// GroupNormalization. Opset 21 has per-channel scale and bias; opset 18 had them per group
/// (`per_group_affine`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GroupNorm {
    pub num_groups: i64,
    pub epsilon: f64,
    pub per_group_affine: bool,
}

impl Default for GroupNorm {
    fn default() -> Self {
        GroupNorm {
            num_groups: 1,
            epsilon: 1e-5,
            per_group_affine: false,
        }
    }
}

impl GroupNorm {
    fn check(&self, x: &[usize], s: &[usize], b: &[usize]) -> OpResult<usize> {
        let c = channels(x)?;
        let g = self.num_groups;
        if g <= 0 || c % g as usize != 0 {
            op_bail!("num_groups {g} must be positive and divide the {c} channels");
        }
        let n = if self.per_group_affine { g as usize } else { c };
        check_vec(s, 1, "scale", n)?;
        check_vec(b, 2, "bias", n)?;
        Ok(g as usize)
    }
}

impl Op for GroupNorm {
    op_common!(
        "GroupNormalization",
        Prototype {
            inputs: &[
                input("X", DTypeSet::FLOAT),
                input("scale", DTypeSet::FLOAT),
                input("bias", DTypeSet::FLOAT),
            ],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        self.check(ctx.shape(0)?, ctx.shape(1)?, ctx.shape(2)?)?;
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let (s, b) = (required(inputs, 1)?, required(inputs, 2)?);
        let g = self.check(x.shape(), s.shape(), b.shape())?;
        let ys = group_normalize(
            &x.to_f64_vec(),
            x.shape(),
            g,
            self.epsilon,
            &s.to_f64_vec(),
            &b.to_f64_vec(),
            self.per_group_affine,
        );
        Ok(vec![tensor_from_f64(x.dtype(), x.shape(), &ys)?])
    }
}

/// LayerNormalization over the axes from `axis` on; Scale and B broadcast onto X. Optional
/// outputs Mean and InvStdDev (shape of X with the normalized axes set to 1).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LayerNorm {
    pub axis: i64,
    pub epsilon: f64,
    /// ONNX `stash_type`: 1 gives f32 Mean/InvStdDev; otherwise they take X's dtype.
    pub stash_type: i64,
    /// 1 to 3: Y, Mean, InvStdDev.
    pub num_outputs: usize,
}

impl Default for LayerNorm {
    fn default() -> Self {
        LayerNorm {
            axis: -1,
            epsilon: 1e-5,
            stash_type: 1,
            num_outputs: 1,
        }
    }
}

impl LayerNorm {
    fn check(
        &self,
        x: &[usize],
        s: &[usize],
        b: Option<&[usize]>,
    ) -> OpResult<(usize, Vec<usize>)> {
        if !(1..=3).contains(&self.num_outputs) {
            op_bail!(
                "LayerNormalization has 1 to 3 outputs, got {}",
                self.num_outputs
            );
        }
        let axis = normalize_axis(self.axis, x.len())?;
        for (i, t) in [(1, Some(s)), (2, b)] {
            if let Some(t) = t {
                if broadcast_shapes(x, t)? != x {
                    op_bail!("input {i} of shape {t:?} does not broadcast onto X {x:?}");
                }
            }
        }
        let mut stat = x.to_vec();
        stat[axis..].fill(1);
        Ok((axis, stat))
    }
}

impl Op for LayerNorm {
    op_common!(
        "LayerNormalization",
        Prototype {
            inputs: &[
                input("X", DTypeSet::FLOAT),
                input("Scale", DTypeSet::FLOAT),
                optional("B", DTypeSet::FLOAT),
            ],
            outputs: &[
                output("Y"),
                optional_output("Mean"),
                optional_output("InvStdDev")
            ],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let b = if ctx.has(2) {
            Some(ctx.shape(2)?)
        } else {
            None
        };
        let (_, stat) = self.check(ctx.shape(0)?, ctx.shape(1)?, b)?;
        let dt = ctx.dtype(0)?;
        let st = if self.stash_type == 1 { DType::F32 } else { dt };
        let mut outs = vec![ctx.like(0)?];
        for _ in 1..self.num_outputs {
            outs.push(TensorInfo::new(st, stat.clone()));
        }
        Ok(outs)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let s = required(inputs, 1)?;
        let b = inputs.get(2).copied().flatten();
        let (axis, stat) = self.check(x.shape(), s.shape(), b.map(|b| b.shape()))?;
        let so = broadcast_offsets(s.shape(), x.shape());
        let sv = s.to_f64_vec();
        let (bv, bo) = match b {
            Some(b) => (b.to_f64_vec(), broadcast_offsets(b.shape(), x.shape())),
            None => (vec![0.0], vec![0; x.numel()]),
        };
        let (outer, _, _) = split_at_axis(x.shape(), axis);
        let inner: usize = x.shape()[axis..].iter().product();
        let xs = x.to_f64_vec();
        let mut ys = vec![0.0; xs.len()];
        let (mut means, mut invs) = (Vec::with_capacity(outer), Vec::with_capacity(outer));
        for o in 0..outer {
            let r = o * inner..(o + 1) * inner;
            let (mean, var) = moments(&xs[r.clone()]);
            let inv = 1.0 / (var + self.epsilon).sqrt();
            for i in r {
                ys[i] = (xs[i] - mean) * inv * sv[so[i]] + bv[bo[i]];
            }
            means.push(mean);
            invs.push(inv);
        }
        let st = if self.stash_type == 1 {
            DType::F32
        } else {
            x.dtype()
        };
        let mut outs = vec![tensor_from_f64(x.dtype(), x.shape(), &ys)?];
        if self.num_outputs > 1 {
            outs.push(tensor_from_f64(st, &stat, &means)?);
        }
        if self.num_outputs > 2 {
            outs.push(tensor_from_f64(st, &stat, &invs)?);
        }
        Ok(outs)
    }
}

/// LpNormalization: `x / ||x||_p` along `axis` (p is 1 or 2). A zero norm gives NaN, as the
/// ONNX reference does.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LpNorm {
    pub axis: i64,
    pub p: i64,
}

impl Default for LpNorm {
    fn default() -> Self {
        LpNorm { axis: -1, p: 2 }
    }
}

impl Op for LpNorm {
    op_common!(
        "LpNormalization",
        Prototype {
            inputs: &[input("input", DTypeSet::FLOAT)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        normalize_axis(self.axis, ctx.shape(0)?.len())?;
        if !matches!(self.p, 1 | 2) {
            op_bail!("p must be 1 or 2, got {}", self.p);
        }
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let axis = normalize_axis(self.axis, x.rank())?;
        let (outer, len, inner) = split_at_axis(x.shape(), axis);
        let xs = x.to_f64_vec();
        let mut ys = vec![0.0; xs.len()];
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| o * len * inner + k * inner + i;
                let norm = if self.p == 1 {
                    (0..len).map(|k| xs[at(k)].abs()).sum::<f64>()
                } else {
                    (0..len).map(|k| xs[at(k)] * xs[at(k)]).sum::<f64>().sqrt()
                };
                for k in 0..len {
                    ys[at(k)] = xs[at(k)] / norm;
                }
            }
        }
        Ok(vec![tensor_from_f64(x.dtype(), x.shape(), &ys)?])
    }
}

/// MeanVarianceNormalization: `(x - mean) / (sqrt(var) + 1e-9)` over `axes`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MeanVarianceNorm {
    pub axes: Vec<i64>,
}

impl Default for MeanVarianceNorm {
    fn default() -> Self {
        MeanVarianceNorm {
            axes: vec![0, 2, 3],
        }
    }
}

impl Op for MeanVarianceNorm {
    op_common!(
        "MeanVarianceNormalization",
        Prototype {
            inputs: &[input("X", DTypeSet::FLOAT)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        normalize_axes(&self.axes, ctx.shape(0)?.len())?;
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let axes = normalize_axes(&self.axes, x.rank())?;
        let keep: Vec<usize> = x
            .shape()
            .iter()
            .enumerate()
            .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
            .collect();
        let map = broadcast_offsets(&keep, x.shape());
        let n_out: usize = keep.iter().product();
        let count = (x.numel() / n_out.max(1)).max(1) as f64;
        let xs = x.to_f64_vec();
        let mut mean = vec![0.0; n_out];
        for (v, &o) in xs.iter().zip(&map) {
            mean[o] += v / count;
        }
        let mut var = vec![0.0; n_out];
        for (v, &o) in xs.iter().zip(&map) {
            var[o] += (v - mean[o]) * (v - mean[o]) / count;
        }
        let ys: Vec<f64> = xs
            .iter()
            .zip(&map)
            .map(|(v, &o)| (v - mean[o]) / (var[o].sqrt() + 1e-9))
            .collect();
        Ok(vec![tensor_from_f64(x.dtype(), x.shape(), &ys)?])
    }
}

/// LRN: `x / (bias + alpha / size * sum of squares over nearby channels) ^ beta`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Lrn {
    pub size: i64,
    pub alpha: f64,
    pub beta: f64,
    pub bias: f64,
}

impl Default for Lrn {
    fn default() -> Self {
        Lrn {
            size: 1,
            alpha: 1e-4,
            beta: 0.75,
            bias: 1.0,
        }
    }
}

impl Op for Lrn {
    op_common!(
        "LRN",
        Prototype {
            inputs: &[input("X", DTypeSet::FLOAT)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        channels(ctx.shape(0)?)?;
        if self.size <= 0 {
            op_bail!("size must be positive, got {}", self.size);
        }
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let c = channels(x.shape())?;
        if self.size <= 0 {
            op_bail!("size must be positive, got {}", self.size);
        }
        let (outer, _, inner) = split_at_axis(x.shape(), 1);
        let before = ((self.size - 1) / 2) as usize;
        let after = (self.size as usize - 1) - before;
        let xs = x.to_f64_vec();
        let mut ys = vec![0.0; xs.len()];
        for n in 0..outer {
            for ch in 0..c {
                let lo = ch.saturating_sub(before);
                let hi = (ch + after).min(c - 1);
                for i in 0..inner {
                    let at = |k: usize| (n * c + k) * inner + i;
                    let sq: f64 = (lo..=hi).map(|k| xs[at(k)] * xs[at(k)]).sum();
                    let d = (self.bias + self.alpha / self.size as f64 * sq).powf(self.beta);
                    ys[at(ch)] = xs[at(ch)] / d;
                }
            }
        }
        Ok(vec![tensor_from_f64(x.dtype(), x.shape(), &ys)?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, f32t};
    use super::*;

    #[test]
    fn batch_and_instance() {
        let x = f32t(&[1, 2, 2], &[1., 3., 10., 20.]);
        let v = |a: f32, b: f32| f32t(&[2], &[a, b]);
        let y = BatchNorm { epsilon: 0.0 }
            .eval(&[
                Some(&x),
                Some(&v(2., 1.)),
                Some(&v(1., 0.)),
                Some(&v(1., 10.)),
                Some(&v(4., 25.)),
            ])
            .unwrap();
        assert_close(&y[0], &[1., 3., 0., 2.], 1e-7);
        let y = InstanceNorm { epsilon: 0.0 }
            .eval(&[Some(&x), Some(&v(1., 2.)), Some(&v(0., 1.))])
            .unwrap();
        assert_close(&y[0], &[-1., 1., -1., 3.], 1e-7);
        assert!(BatchNorm::default()
            .eval(&[
                Some(&x),
                Some(&v(1., 1.)),
                Some(&v(1., 1.)),
                Some(&v(1., 1.)),
                Some(&f32t(&[1], &[1.]))
            ])
            .is_err());
    }

    #[test]
    fn batch_norm_per_element() {
        // x [2, 1, 2]: two samples of one channel and two elements, each element its own
        // statistics: (x - mean) / sqrt(var) * scale + B.
        let x = f32t(&[2, 1, 2], &[1., 3., 5., 7.]);
        let p = |a: f32, b: f32| f32t(&[1, 2], &[a, b]);
        let ins = [p(2., 1.), p(0., 1.), p(1., 3.), p(4., 1.)];
        let y = BatchNormPerElement { epsilon: 0.0 }
            .eval(&[
                Some(&x),
                Some(&ins[0]),
                Some(&ins[1]),
                Some(&ins[2]),
                Some(&ins[3]),
            ])
            .unwrap();
        assert_close(&y[0], &[0., 1., 4., 5.], 1e-7);
        // Per-channel statistics are not one sample's shape.
        let c = f32t(&[1], &[1.]);
        let bad = [Some(&x), Some(&c), Some(&c), Some(&c), Some(&c)];
        assert!(BatchNormPerElement { epsilon: 0.0 }.eval(&bad).is_err());
    }

    #[test]
    fn layer_norm_with_stats() {
        let x = f32t(&[2, 2], &[1., 3., 2., 2.]);
        let ln = LayerNorm {
            epsilon: 0.0,
            num_outputs: 3,
            ..Default::default()
        };
        let s = f32t(&[2], &[2., 1.]);
        let b = f32t(&[2], &[0., 1.]);
        let y = ln.eval(&[Some(&x), Some(&s), Some(&b)]).unwrap();
        // Row 1 has zero variance: 0 * inf is NaN, so use an epsilon for that row's check.
        assert_close(
            &y[0].reshaped(&[4]).unwrap(),
            &[-2., 2., f64::NAN, f64::NAN],
            1e-7,
        );
        assert_eq!(y[1].shape(), &[2, 1]);
        assert_close(&y[1], &[2., 2.], 0.0);
        assert_close(&y[2], &[1., f64::INFINITY], 0.0);
        let ln = LayerNorm {
            axis: 0,
            epsilon: 1.0,
            ..Default::default()
        };
        let y = ln.eval(&[Some(&x), Some(&f32t(&[], &[1.])), None]).unwrap();
        // mean 2, var 0.5 over all four.
        let k = 1.0 / 1.5f64.sqrt();
        assert_close(&y[0], &[-k, k, 0., 0.], 1e-6);
    }

    #[test]
    fn group_norm_both_affine_forms() {
        let x = f32t(&[1, 4, 1], &[1., 3., 5., 5.]);
        let g = GroupNorm {
            num_groups: 2,
            epsilon: 0.0,
            per_group_affine: false,
        };
        let s = f32t(&[4], &[1., 1., 1., 1.]);
        let b = f32t(&[4], &[0., 0., 7., 7.]);
        let y = g.eval(&[Some(&x), Some(&s), Some(&b)]).unwrap();
        assert_close(&y[0], &[-1., 1., f64::NAN, f64::NAN], 0.0);
        let g18 = GroupNorm {
            num_groups: 2,
            epsilon: 1.0,
            per_group_affine: true,
        };
        let y = g18
            .eval(&[
                Some(&x),
                Some(&f32t(&[2], &[2., 1.])),
                Some(&f32t(&[2], &[0., 7.])),
            ])
            .unwrap();
        let k = 2.0 / 2f64.sqrt();
        assert_close(&y[0], &[-k, k, 7., 7.], 1e-6);
        assert!(GroupNorm {
            num_groups: 3,
            ..Default::default()
        }
        .eval(&[Some(&x), Some(&s), Some(&b)])
        .is_err());
    }

    #[test]
    fn lp_mvn_lrn() {
        let x = f32t(&[2, 2], &[3., 4., 0., 0.]);
        let y = LpNorm::default().eval(&[Some(&x)]).unwrap();
        assert_close(&y[0], &[0.6, 0.8, f64::NAN, f64::NAN], 1e-7);
        let y = LpNorm { axis: 0, p: 1 }.eval(&[Some(&x)]).unwrap();
        assert_close(&y[0], &[1., 1., 0., 0.], 0.0);
        let m = MeanVarianceNorm { axes: vec![1] };
        let y = m.eval(&[Some(&x)]).unwrap();
        assert_close(&y[0], &[-1., 1., 0., 0.], 1e-7);
        let x = f32t(&[1, 3, 1], &[1., 2., 3.]);
        let l = Lrn {
            size: 2,
            alpha: 2.0,
            beta: 1.0,
            bias: 1.0,
        };
        // Windows: c0 -> {0, 1}, c1 -> {1, 2}, c2 -> {2}.
        let y = l.eval(&[Some(&x)]).unwrap();
        assert_close(&y[0], &[1. / 6., 2. / 14., 3. / 10.], 1e-6);
    }
}
