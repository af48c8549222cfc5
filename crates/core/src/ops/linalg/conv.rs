//! Conv and ConvInteger: N-D grouped convolution over `[N, C, spatial...]` inputs.
//!
//! The reference computes every output element as a plain sum in f64 (exact for ConvInteger's
//! 8-bit products), which makes it the ground truth for the fast kernels.

use super::conv_geometry::{for_each_index, ConvGeometry, ConvParams};
use super::tensor_from_sink;
use crate::op::{input, optional, output, required, Prototype};
use crate::ops::elementwise::unary::UnaryKind;
use crate::{op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// Resolved shapes of a convolution: geometry plus channel counts.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvShapes {
    pub batch: usize,
    pub in_channels: usize,
    pub out_channels: usize,
    pub group: usize,
    pub geometry: ConvGeometry,
}

impl ConvShapes {
    /// Checks `x: [N, C, D...]` and `w: [M, C/group, k...]` and resolves the geometry.
    pub fn new(
        params: &ConvParams,
        group: usize,
        x: &[usize],
        w: &[usize],
    ) -> OpResult<ConvShapes> {
        op_ensure!(
            x.len() >= 3,
            "input 0 (X) must have rank 3 or more ([N, C, spatial...]), got shape {x:?}"
        );
        op_ensure!(
            w.len() == x.len(),
            "input 1 (W) must have the rank of X ({}), got shape {w:?}",
            x.len()
        );
        op_ensure!(group >= 1, "group must be at least 1, got {group}");
        let (m, cg) = (w[0], w[1]);
        op_ensure!(
            cg.checked_mul(group) == Some(x[1]),
            "input 1 (W) shape {w:?}: {cg} channels per group x {group} groups does not match the {} channels of X {x:?}",
            x[1]
        );
        op_ensure!(
            m % group == 0,
            "input 1 (W) has {m} output channels, not divisible by group {group}"
        );
        let geometry = params.conv_geometry(&x[2..], &w[2..])?;
        Ok(ConvShapes {
            batch: x[0],
            in_channels: x[1],
            out_channels: m,
            group,
            geometry,
        })
    }

    pub fn output_shape(&self) -> Vec<usize> {
        let mut s = vec![self.batch, self.out_channels];
        s.extend_from_slice(&self.geometry.output);
        s
    }

    /// Checks an optional per-output-channel vector (bias, zero point) has `M` elements.
    fn check_per_channel(&self, t: Option<&[usize]>, what: &str) -> OpResult<()> {
        if let Some(s) = t {
            let n: usize = s.iter().product();
            op_ensure!(
                s.len() <= 1 && (n == self.out_channels || (what.contains("zero") && n == 1)),
                "{what} must be 1-D with {} elements, got shape {s:?}",
                self.out_channels
            );
        }
        Ok(())
    }
}

/// Plain N-D grouped convolution; pushes every output element in row-major order.
pub fn conv_reference(
    s: &ConvShapes,
    x: &[f64],
    w: &[f64],
    bias: Option<&[f64]>,
    sink: &mut dyn FnMut(f64),
) {
    let g = &s.geometry;
    let rank = g.input.len();
    let cg = s.in_channels / s.group;
    let mg = s.out_channels / s.group;
    let in_size: usize = g.input.iter().product();
    let k_size: usize = g.kernel.iter().product();
    let mut pos = vec![0usize; rank];
    for n in 0..s.batch {
        for m in 0..s.out_channels {
            let grp = m / mg;
            for_each_index(&g.output, |o| {
                let mut acc = bias.map_or(0.0, |b| b[m]);
                for c in 0..cg {
                    let x_base = (n * s.in_channels + grp * cg + c) * in_size;
                    let w_base = (m * cg + c) * k_size;
                    let mut ki = 0;
                    for_each_index(&g.kernel, |k| {
                        // Input position o*stride + k*dilation - pad_begin, skipped when in padding.
                        let mut inside = true;
                        for d in 0..rank {
                            let p = (o[d] * g.strides[d] + k[d] * g.dilations[d]) as i64
                                - g.pad_begin[d] as i64;
                            if p < 0 || p >= g.input[d] as i64 {
                                inside = false;
                            }
                            pos[d] = p.max(0) as usize;
                        }
                        if inside {
                            let off = pos.iter().zip(&g.input).fold(0, |o, (&p, &n)| o * n + p);
                            acc += x[x_base + off] * w[w_base + ki];
                        }
                        ki += 1;
                    });
                }
                sink(acc);
            });
        }
    }
}

/// ONNX Conv, with an optional fused epilogue activation (set by the fusion pass).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Conv {
    pub params: ConvParams,
    pub group: usize,
    /// Applied to every output element after the bias.
    pub activation: Option<UnaryKind>,
}

impl Default for Conv {
    fn default() -> Self {
        Conv {
            params: ConvParams::default(),
            group: 1,
            activation: None,
        }
    }
}

impl Conv {
    pub fn shapes(&self, x: &[usize], w: &[usize]) -> OpResult<ConvShapes> {
        ConvShapes::new(&self.params, self.group, x, w)
    }
}

impl Op for Conv {
    op_common!(
        "Conv",
        Prototype {
            inputs: &[
                input("X", DTypeSet::FLOAT),
                input("W", DTypeSet::FLOAT),
                optional("B", DTypeSet::FLOAT),
            ],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = ctx.dtype(0)?;
        op_ensure!(
            ctx.dtype(1)? == dt,
            "input 1 (W) is {}, expected {dt} like X",
            ctx.dtype(1)?
        );
        let s = self.shapes(ctx.shape(0)?, ctx.shape(1)?)?;
        if ctx.has(2) {
            op_ensure!(
                ctx.dtype(2)? == dt,
                "input 2 (B) is {}, expected {dt}",
                ctx.dtype(2)?
            );
            s.check_per_channel(Some(ctx.shape(2)?), "input 2 (B)")?;
        }
        Ok(vec![TensorInfo::new(dt, s.output_shape())])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let w = required(inputs, 1)?;
        let b = inputs.get(2).copied().flatten();
        let s = self.shapes(x.shape(), w.shape())?;
        s.check_per_channel(b.map(|b| b.shape()), "input 2 (B)")?;
        let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
        let bv = b.map(|b| b.to_f64_vec());
        let act = self.activation;
        let y = tensor_from_sink(x.dtype(), &s.output_shape(), |sink| {
            conv_reference(&s, &xv, &wv, bv.as_deref(), &mut |v| {
                sink(UnaryKind::apply_optional(act, v))
            })
        })?;
        Ok(vec![y])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        conv_flops(inputs, outputs, self.group)
    }
}

/// 2 x output elements x (weight elements per output channel).
pub(crate) fn conv_flops(inputs: &[Option<TensorInfo>], outputs: &[TensorInfo], _g: usize) -> u64 {
    match (inputs.get(1), outputs.first()) {
        (Some(Some(w)), Some(y)) => {
            let per: usize = w.shape.iter().skip(1).product();
            2 * (y.numel() as u64).saturating_mul(per as u64)
        }
        _ => 0,
    }
}

/// ONNX ConvInteger: 8-bit convolution with zero points, accumulating to i32.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvInteger {
    pub params: ConvParams,
    pub group: usize,
}

impl Default for ConvInteger {
    fn default() -> Self {
        ConvInteger {
            params: ConvParams::default(),
            group: 1,
        }
    }
}

const Q8: DTypeSet = DTypeSet(DType::U8.bit() | DType::I8.bit());

/// A zero point's values: one (per tensor) or `n` (per channel / row / column).
pub(crate) fn zero_points(t: Option<&Tensor>, n: usize, what: &str) -> OpResult<Vec<f64>> {
    match t {
        None => Ok(vec![0.0]),
        Some(t) => {
            op_ensure!(
                t.numel() == 1 || (t.rank() == 1 && t.numel() == n),
                "{what} must be a scalar or 1-D with {n} elements, got shape {:?}",
                t.shape()
            );
            Ok(t.to_f64_vec())
        }
    }
}

impl Op for ConvInteger {
    op_common!(
        "ConvInteger",
        Prototype {
            inputs: &[
                input("x", Q8),
                input("w", Q8),
                optional("x_zero_point", Q8),
                optional("w_zero_point", Q8),
            ],
            outputs: &[output("y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = ConvShapes::new(&self.params, self.group, ctx.shape(0)?, ctx.shape(1)?)?;
        for (i, of) in [(2, 0), (3, 1)] {
            if ctx.has(i) {
                op_ensure!(
                    ctx.dtype(i)? == ctx.dtype(of)?,
                    "input {i} (zero point) is {}, expected {} like input {of}",
                    ctx.dtype(i)?,
                    ctx.dtype(of)?
                );
            }
        }
        if ctx.has(2) {
            let n: usize = ctx.shape(2)?.iter().product();
            op_ensure!(
                n == 1,
                "input 2 (x_zero_point) must have one element, got {n}"
            );
        }
        if ctx.has(3) {
            s.check_per_channel(Some(ctx.shape(3)?), "input 3 (w_zero_point)")?;
        }
        Ok(vec![TensorInfo::new(DType::I32, s.output_shape())])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let w = required(inputs, 1)?;
        let s = ConvShapes::new(&self.params, self.group, x.shape(), w.shape())?;
        let xz = zero_points(
            inputs.get(2).copied().flatten(),
            1,
            "input 2 (x_zero_point)",
        )?;
        let wz = zero_points(
            inputs.get(3).copied().flatten(),
            s.out_channels,
            "input 3 (w_zero_point)",
        )?;
        let xv: Vec<f64> = x.to_f64_vec().iter().map(|v| v - xz[0]).collect();
        let per = w.numel() / s.out_channels.max(1);
        let wv: Vec<f64> = w
            .to_f64_vec()
            .iter()
            .enumerate()
            .map(|(i, v)| v - if wz.len() == 1 { wz[0] } else { wz[i / per] })
            .collect();
        let y = tensor_from_sink(DType::I32, &s.output_shape(), |sink| {
            conv_reference(&s, &xv, &wv, None, sink)
        })?;
        Ok(vec![y])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        conv_flops(inputs, outputs, self.group)
    }
}

#[cfg(test)]
mod tests {
    use super::super::conv_geometry::AutoPad;
    use super::*;

    fn t(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(shape, v).unwrap()
    }

    fn seq(n: usize) -> Vec<f32> {
        (0..n).map(|i| i as f32).collect()
    }

    #[test]
    fn basic_conv_with_and_without_padding() {
        // ONNX test_basic_conv_*: 5x5 input 0..24, 3x3 ones kernel.
        let x = t(&[1, 1, 5, 5], seq(25));
        let w = t(&[1, 1, 3, 3], vec![1.0; 9]);
        let y = Conv::default().eval(&[Some(&x), Some(&w), None]).unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 3, 3]);
        assert_eq!(
            y[0].as_slice::<f32>().unwrap(),
            &[54., 63., 72., 99., 108., 117., 144., 153., 162.]
        );
        let mut c = Conv::default();
        c.params.pads = Some(vec![1, 1, 1, 1]);
        let y = c.eval(&[Some(&x), Some(&w), None]).unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 5, 5]);
        let v = y[0].as_slice::<f32>().unwrap();
        assert_eq!(&v[..5], &[12., 21., 27., 33., 24.]);
        assert_eq!(v[6], 54.0);
        assert_eq!(v[24], 1.0 * (18. + 19. + 23. + 24.));
    }

    #[test]
    fn strides_asymmetric_pads_and_same_lower() {
        let x = t(&[1, 1, 7, 5], seq(35));
        let w = t(&[1, 1, 3, 3], vec![1.0; 9]);
        let mut c = Conv::default();
        c.params.strides = Some(vec![2, 2]);
        c.params.pads = Some(vec![1, 0, 1, 0]);
        let y = c.eval(&[Some(&x), Some(&w), None]).unwrap();
        // ONNX test_conv_with_strides_and_asymmetric_padding.
        assert_eq!(y[0].shape(), &[1, 1, 4, 2]);
        assert_eq!(
            y[0].as_slice::<f32>().unwrap(),
            &[21., 33., 99., 117., 189., 207., 171., 183.]
        );
        let mut s = Conv::default();
        s.params.strides = Some(vec![2, 2]);
        s.params.auto_pad = AutoPad::SameLower;
        let x = t(&[1, 1, 5, 5], seq(25));
        let y = s.eval(&[Some(&x), Some(&w), None]).unwrap();
        // ONNX test_conv_with_autopad_same.
        assert_eq!(
            y[0].as_slice::<f32>().unwrap(),
            &[12., 27., 24., 63., 108., 81., 72., 117., 84.]
        );
    }

    #[test]
    fn groups_bias_dilation_1d() {
        // Depthwise 1-D, two channels, kernel [1, 1] dilated by 2, bias 10/20.
        let x = t(&[1, 2, 4], vec![1., 2., 3., 4., 10., 20., 30., 40.]);
        let w = t(&[2, 1, 2], vec![1., 1., 1., -1.]);
        let b = t(&[2], vec![10., 20.]);
        let c = Conv {
            params: ConvParams {
                dilations: Some(vec![2]),
                ..Default::default()
            },
            group: 2,
            activation: None,
        };
        let y = c.eval(&[Some(&x), Some(&w), Some(&b)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 2, 2]);
        // The fused epilogue applies after the bias: ch1's first value 0 stays, others clip.
        let clipped = Conv {
            activation: Some(UnaryKind::Clip { min: 1.0, max: 6.0 }),
            ..c.clone()
        };
        let yc = clipped.eval(&[Some(&x), Some(&w), Some(&b)]).unwrap();
        let want: Vec<f32> = y[0]
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.clamp(1.0, 6.0))
            .collect();
        assert_eq!(yc[0].as_slice::<f32>().unwrap(), want.as_slice());
        // ch0: 1+3+10, 2+4+10; ch1: 10-30+20, 20-40+20.
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[14., 16., 0., 0.]);
        // Channel mismatch and wrong bias are errors.
        let bad = t(&[2, 2, 2], vec![0.; 8]);
        assert!(c.eval(&[Some(&x), Some(&bad), None]).is_err());
        let bad_b = t(&[3], vec![0.; 3]);
        assert!(c.eval(&[Some(&x), Some(&w), Some(&bad_b)]).is_err());
    }

    #[test]
    fn conv_3d_and_f64() {
        let x = Tensor::from_vec(&[1, 1, 2, 2, 2], (0..8).map(|i| i as f64).collect()).unwrap();
        let w = Tensor::from_vec(&[1, 1, 2, 2, 2], vec![1.0f64; 8]).unwrap();
        let y = Conv::default().eval(&[Some(&x), Some(&w), None]).unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 1, 1, 1]);
        assert_eq!(y[0].as_slice::<f64>().unwrap(), &[28.0]);
    }

    #[test]
    fn conv_integer_with_zero_points() {
        // ONNX test_convinteger_without_padding: x 2..10 (3x3), zp 1, w ones 2x2.
        let x = Tensor::from_vec(&[1, 1, 3, 3], (2u8..11).collect()).unwrap();
        let w = Tensor::from_vec(&[1, 1, 2, 2], vec![1u8; 4]).unwrap();
        let zp = Tensor::scalar(1u8);
        let y = ConvInteger::default()
            .eval(&[Some(&x), Some(&w), Some(&zp), None])
            .unwrap();
        assert_eq!(y[0].dtype(), DType::I32);
        assert_eq!(y[0].as_slice::<i32>().unwrap(), &[12, 16, 24, 28]);
        // Per-channel w zero point.
        let w2 = Tensor::from_vec(&[2, 1, 1, 1], vec![3i8, -2]).unwrap();
        let x2 = Tensor::from_vec(&[1, 1, 1, 1], vec![5i8]).unwrap();
        let wz = Tensor::from_vec(&[2], vec![1i8, -1]).unwrap();
        let y = ConvInteger::default()
            .eval(&[Some(&x2), Some(&w2), None, Some(&wz)])
            .unwrap();
        assert_eq!(y[0].as_slice::<i32>().unwrap(), &[10, -5]);
    }
}
