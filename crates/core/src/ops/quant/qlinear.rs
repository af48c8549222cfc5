//! QLinearMatMul and QLinearConv: integer products of zero-point-centered 8-bit operands,
//! requantized to the output scale and zero point.

use super::{int_range, Q8};
use crate::op::{input, optional, output, required, Prototype};
use crate::ops::linalg::conv::{conv_reference, ConvShapes};
use crate::ops::linalg::conv_geometry::ConvParams;
use crate::ops::linalg::matmul::{matmul_reference, MatMulShapes};
use crate::{
    op_common, op_ensure, DType, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

pub(super) fn opt<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).copied().flatten()
}

/// The single value of a per-tensor scale or zero point (0 when absent).
pub(super) fn scalar_of(t: Option<&Tensor>, what: &str) -> OpResult<f64> {
    match t {
        None => Ok(0.0),
        Some(t) => {
            op_ensure!(
                t.numel() == 1,
                "{what} must have one element, got shape {:?}",
                t.shape()
            );
            Ok(t.to_f64_vec()[0])
        }
    }
}

/// Rounds to the scale's float dtype (the reference computes scale products in it).
pub(super) fn in_dtype(d: DType, v: f64) -> f64 {
    crate::dispatch_float!(d, T => { T::from_f64(v).to_f64() }, v)
}

/// Writes `round(v)` to the output type, saturated or (`wrap`) modulo 256.
pub(super) fn requantize(
    to: DType,
    shape: &[usize],
    wrap: bool,
    vals: impl Iterator<Item = f64>,
) -> OpResult<Tensor> {
    let (lo, hi) = if wrap {
        (i32::MIN as f64, i32::MAX as f64)
    } else {
        int_range(to).unwrap_or((0.0, 255.0))
    };
    let mut out = Tensor::zeros(to, shape)?;
    crate::dispatch_all!(to, T => {
        for (o, v) in out.as_mut_slice::<T>()?.iter_mut().zip(vals) {
            // `from_i64` on u8/i8 truncates to the low byte, i.e. wraps.
            let r = v.round_ties_even().clamp(lo, hi);
            *o = T::from_i64(if r.is_nan() { 0 } else { r as i64 });
        }
    });
    Ok(out)
}

/// ONNX QLinearMatMul (per-tensor scales and zero points).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QLinearMatMul;

impl Op for QLinearMatMul {
    op_common!(
        "QLinearMatMul",
        Prototype {
            inputs: &[
                input("a", Q8),
                input("a_scale", DTypeSet::FLOAT),
                optional("a_zero_point", Q8),
                input("b", Q8),
                input("b_scale", DTypeSet::FLOAT),
                optional("b_zero_point", Q8),
                input("y_scale", DTypeSet::FLOAT),
                optional("y_zero_point", Q8),
            ],
            outputs: &[output("y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = MatMulShapes::new(ctx.shape(0)?, ctx.shape(3)?)?;
        let to = if ctx.has(7) {
            ctx.dtype(7)?
        } else {
            ctx.dtype(0)?
        };
        Ok(vec![TensorInfo::new(to, s.output)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 3)?;
        let s = MatMulShapes::new(a.shape(), b.shape())?;
        let a_scale = required(inputs, 1)?;
        let az = scalar_of(opt(inputs, 2), "input 2 (a_zero_point)")? as i64;
        let n = s.n;
        // B's scale and zero point: one, or one per column.
        let per_column = |t: &Tensor, what: &str| -> OpResult<Vec<f64>> {
            op_ensure!(
                t.numel() == 1 || (t.rank() == 1 && t.numel() == n),
                "{what} must be a scalar or 1-D with {n} elements, got shape {:?}",
                t.shape()
            );
            Ok(t.to_f64_vec())
        };
        let bz = match opt(inputs, 5) {
            Some(t) => per_column(t, "input 5 (b_zero_point)")?,
            None => vec![0.0],
        };
        let sa = scalar_of(Some(a_scale), "input 1 (a_scale)")?;
        let sb = per_column(required(inputs, 4)?, "input 4 (b_scale)")?;
        let sy = scalar_of(Some(required(inputs, 6)?), "input 6 (y_scale)")?;
        let yz_t = opt(inputs, 7);
        let yz = scalar_of(yz_t, "input 7 (y_zero_point)")?;
        let sd = a_scale.dtype();
        let at = |v: &[f64], j: usize| v[if v.len() == 1 { 0 } else { j }];
        let mult: Vec<f64> = (0..n)
            .map(|j| in_dtype(sd, in_dtype(sd, sa * at(&sb, j)) / sy))
            .collect();
        let av: Vec<i64> = a.to_i64_vec().iter().map(|v| v - az).collect();
        let bv: Vec<i64> = b
            .to_i64_vec()
            .iter()
            .enumerate()
            .map(|(i, v)| v - at(&bz, i % n.max(1)) as i64)
            .collect();
        let mut acc = Vec::with_capacity(s.output.iter().product());
        matmul_reference(&s, &av, &bv, 0i64, |c, x, y| c + x * y, &mut |v| {
            acc.push(v)
        });
        let to = yz_t.map_or(a.dtype(), |t| t.dtype());
        // The ONNX reference (and so the node tests) converts with numpy's `astype`, which wraps
        // out-of-range results instead of saturating.
        let y = requantize(
            to,
            &s.output,
            true,
            acc.iter()
                .enumerate()
                .map(|(i, &c)| c as f64 * mult[i % n.max(1)] + yz),
        )?;
        Ok(vec![y])
    }
}

/// ONNX QLinearConv: per-tensor input scale, per-tensor or per-output-channel weight scale and
/// zero point, optional i32 bias added before requantization.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QLinearConv {
    pub params: ConvParams,
    pub group: usize,
}

impl Default for QLinearConv {
    fn default() -> Self {
        QLinearConv {
            params: ConvParams::default(),
            group: 1,
        }
    }
}

impl Op for QLinearConv {
    op_common!(
        "QLinearConv",
        Prototype {
            inputs: &[
                input("x", Q8),
                input("x_scale", DTypeSet::of(DType::F32)),
                optional("x_zero_point", Q8),
                input("w", Q8),
                input("w_scale", DTypeSet::of(DType::F32)),
                optional("w_zero_point", Q8),
                input("y_scale", DTypeSet::of(DType::F32)),
                optional("y_zero_point", Q8),
                optional("B", DTypeSet::of(DType::I32)),
            ],
            outputs: &[output("y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = ConvShapes::new(&self.params, self.group, ctx.shape(0)?, ctx.shape(3)?)?;
        let to = if ctx.has(7) {
            ctx.dtype(7)?
        } else {
            ctx.dtype(0)?
        };
        Ok(vec![TensorInfo::new(to, s.output_shape())])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        // The weights are input 3 (Conv's input 1).
        let shifted = [None, inputs.get(3).cloned().flatten()];
        crate::ops::linalg::conv::conv_flops(&shifted, outputs, self.group)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let w = required(inputs, 3)?;
        let s = ConvShapes::new(&self.params, self.group, x.shape(), w.shape())?;
        let m = s.out_channels;
        let per_channel = |t: &Tensor, what: &str| -> OpResult<Vec<f64>> {
            op_ensure!(
                t.numel() == 1 || (t.rank() == 1 && t.numel() == m),
                "{what} must be a scalar or 1-D with {m} elements, got shape {:?}",
                t.shape()
            );
            Ok(t.to_f64_vec())
        };
        let xz = scalar_of(opt(inputs, 2), "input 2 (x_zero_point)")?;
        let wz = match opt(inputs, 5) {
            Some(t) => per_channel(t, "input 5 (w_zero_point)")?,
            None => vec![0.0],
        };
        let sx = scalar_of(Some(required(inputs, 1)?), "input 1 (x_scale)")?;
        let sw = per_channel(required(inputs, 4)?, "input 4 (w_scale)")?;
        let sy = scalar_of(Some(required(inputs, 6)?), "input 6 (y_scale)")?;
        let yz_t = opt(inputs, 7);
        let yz = scalar_of(yz_t, "input 7 (y_zero_point)")?;
        let bias = match opt(inputs, 8) {
            Some(b) => {
                op_ensure!(
                    b.rank() == 1 && b.numel() == m,
                    "input 8 (B) must be 1-D with {m} elements, got shape {:?}",
                    b.shape()
                );
                Some(b.to_f64_vec())
            }
            None => None,
        };
        let xv: Vec<f64> = x.to_f64_vec().iter().map(|v| v - xz).collect();
        let per = w.numel() / m.max(1);
        let wv: Vec<f64> = w
            .to_f64_vec()
            .iter()
            .enumerate()
            .map(|(i, v)| v - if wz.len() == 1 { wz[0] } else { wz[i / per] })
            .collect();
        let mut acc = Vec::new();
        conv_reference(&s, &xv, &wv, bias.as_deref(), &mut |v| acc.push(v));
        let shape = s.output_shape();
        let spatial: usize = shape[2..].iter().product();
        // x_scale * w_scale / y_scale in f32, per output channel.
        let mult: Vec<f64> = sw
            .iter()
            .map(|&w| ((sx * w) as f32 / sy as f32) as f64)
            .collect();
        let to = yz_t.map_or(x.dtype(), |t| t.dtype());
        let vals = acc.iter().enumerate().map(|(i, &c)| {
            let ch = (i / spatial.max(1)) % m.max(1);
            c * if mult.len() == 1 { mult[0] } else { mult[ch] } + yz
        });
        Ok(vec![requantize(to, &shape, false, vals)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::testutil::{f32s, run};

    #[test]
    fn qlinear_matmul() {
        // A = [[2, 4]] - 1, B = [[1], [3]] - 1: (1*0 + 3*2) = 6; 6 * (0.5 * 2 / 0.25) = 24, + 10.
        let a = Tensor::from_vec(&[1, 2], vec![2u8, 4]).unwrap();
        let b = Tensor::from_vec(&[2, 1], vec![1u8, 3]).unwrap();
        let one = Tensor::scalar(1u8);
        let y = run(
            &QLinearMatMul,
            &[
                Some(&a),
                Some(&f32s(&[], &[0.5])),
                Some(&one),
                Some(&b),
                Some(&f32s(&[], &[2.0])),
                Some(&one),
                Some(&f32s(&[], &[0.25])),
                Some(&Tensor::scalar(10u8)),
            ],
        )
        .remove(0);
        assert_eq!(y.as_slice::<u8>().unwrap(), &[34]);
        // 6 * 0.5 * 2 / 0.0625 = 96, + 100 = 196: wraps to -60 in i8 like the reference.
        let a = Tensor::from_vec(&[1, 2], vec![2i8, 4]).unwrap();
        let b = Tensor::from_vec(&[2, 1], vec![1i8, 3]).unwrap();
        let one = Tensor::scalar(1i8);
        let y = run(
            &QLinearMatMul,
            &[
                Some(&a),
                Some(&f32s(&[], &[0.5])),
                Some(&one),
                Some(&b),
                Some(&f32s(&[], &[2.0])),
                Some(&one),
                Some(&f32s(&[], &[0.0625])),
                Some(&Tensor::scalar(100i8)),
            ],
        )
        .remove(0);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[-60]);
    }

    #[test]
    fn qlinear_conv() {
        // 1x1 kernel, two output channels with per-channel weight scale; saturation at 127.
        let x = Tensor::from_vec(&[1, 1, 1, 2], vec![3i8, -1]).unwrap();
        let w = Tensor::from_vec(&[2, 1, 1, 1], vec![2i8, 100]).unwrap();
        let y = run(
            &QLinearConv::default(),
            &[
                Some(&x),
                Some(&f32s(&[], &[1.0])),
                Some(&Tensor::scalar(-1i8)),
                Some(&w),
                Some(&f32s(&[2], &[0.5, 1.0])),
                None,
                Some(&f32s(&[], &[1.0])),
                Some(&Tensor::scalar(0i8)),
                Some(&Tensor::from_vec(&[2], vec![1i32, 0]).unwrap()),
            ],
        )
        .remove(0);
        // ch0: (4*2 + 1) * 0.5 = 4.5 -> 4, (0*2 + 1) * 0.5 = 0.5 -> 0; ch1: 400 -> 127, 0.
        assert_eq!(y.as_slice::<i8>().unwrap(), &[4, 0, 127, 0]);
    }
}
