//! ConvTranspose: the gradient of Conv with respect to its input ("deconvolution").
//!
//! `W` is `[C, M/group, k...]`; the output has `M` channels. Pads are computed from
//! `output_shape` or `auto_pad` per the ONNX spec, and may come out negative (an output larger
//! than the natural one), which the reference handles by bounds checks.

use super::conv_geometry::{for_each_index, AutoPad, ConvParams};
use super::tensor_from_sink;
use crate::op::{input, optional, output, required, Prototype};
use crate::ops::elementwise::unary::UnaryKind;
use crate::{op_bail, op_common, op_ensure, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConvTranspose {
    pub params: ConvParams,
    pub group: usize,
    /// Fused epilogue activation, applied after the bias (set by the fusion pass).
    pub activation: Option<UnaryKind>,
    /// Extra size added at the end of each spatial dimension. Default: all 0.
    pub output_padding: Option<Vec<usize>>,
    /// Requested spatial output shape (the last `rank` values are used); pads are then derived.
    pub output_shape: Option<Vec<usize>>,
}

impl Default for ConvTranspose {
    fn default() -> Self {
        ConvTranspose {
            params: ConvParams::default(),
            group: 1,
            activation: None,
            output_padding: None,
            output_shape: None,
        }
    }
}

/// Resolved ConvTranspose shapes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvTransposeShapes {
    pub batch: usize,
    pub in_channels: usize,
    pub out_channels: usize,
    pub group: usize,
    pub input: Vec<usize>,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// May be negative when `output_shape` asks for more than the natural size.
    pub pad_begin: Vec<i64>,
    pub output: Vec<usize>,
}

impl ConvTransposeShapes {
    pub fn output_shape(&self) -> Vec<usize> {
        let mut s = vec![self.batch, self.out_channels];
        s.extend_from_slice(&self.output);
        s
    }
}

fn to_i64(v: usize) -> OpResult<i64> {
    i64::try_from(v).map_err(|_| crate::OpError(format!("size {v} is too large")))
}

impl ConvTranspose {
    pub fn shapes(&self, x: &[usize], w: &[usize]) -> OpResult<ConvTransposeShapes> {
        op_ensure!(
            x.len() >= 3,
            "input 0 (X) must have rank 3 or more ([N, C, spatial...]), got shape {x:?}"
        );
        op_ensure!(
            w.len() == x.len(),
            "input 1 (W) must have the rank of X ({}), got shape {w:?}",
            x.len()
        );
        let group = self.group;
        op_ensure!(group >= 1, "group must be at least 1, got {group}");
        op_ensure!(
            w[0] == x[1] && x[1].is_multiple_of(group),
            "input 1 (W) shape {w:?} must start with the {} channels of X, divisible by group {group}",
            x[1]
        );
        let out_channels = w[1]
            .checked_mul(group)
            .ok_or_else(|| crate::OpError("too many output channels".into()))?;
        let rank = x.len() - 2;
        let input = x[2..].to_vec();
        let (kernel, strides, dilations) = self.params.kernel_strides_dilations(&w[2..])?;
        let out_pad = match &self.output_padding {
            None => vec![0; rank],
            Some(p) => {
                op_ensure!(
                    p.len() == rank,
                    "output_padding {p:?} must have {rank} values"
                );
                p.clone()
            }
        };
        let requested: Option<Vec<usize>> = match (&self.output_shape, self.params.auto_pad) {
            (Some(s), _) => {
                op_ensure!(
                    s.len() >= rank,
                    "output_shape {s:?} must have at least {rank} values"
                );
                Some(s[s.len() - rank..].to_vec())
            }
            (None, AutoPad::SameUpper | AutoPad::SameLower) => Some(
                input
                    .iter()
                    .zip(&strides)
                    .map(|(&i, &s)| i.checked_mul(s))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| crate::OpError("output size overflows".into()))?,
            ),
            (None, _) => None,
        };
        let (pb, pe) = match self.params.auto_pad {
            AutoPad::NotSet => self.params.explicit_pads(rank)?,
            _ => (vec![0; rank], vec![0; rank]),
        };
        let mut pad_begin = vec![0i64; rank];
        let mut output = vec![0usize; rank];
        for i in 0..rank {
            op_ensure!(kernel[i] >= 1, "kernel_shape {kernel:?} has a zero size");
            // Natural size: stride*(in-1) + output_padding + dil*(k-1) + 1.
            let natural = to_i64(strides[i])?
                .checked_mul(to_i64(input[i])? - 1)
                .and_then(|v| v.checked_add(to_i64(out_pad[i]).ok()?))
                .and_then(|v| {
                    v.checked_add(
                        to_i64(dilations[i])
                            .ok()?
                            .checked_mul(to_i64(kernel[i]).ok()? - 1)?,
                    )
                })
                .and_then(|v| v.checked_add(1))
                .ok_or_else(|| crate::OpError("output size overflows".into()))?;
            match &requested {
                Some(req) => {
                    let total = natural - to_i64(req[i])?;
                    pad_begin[i] = if self.params.auto_pad == AutoPad::SameUpper {
                        total.div_euclid(2)
                    } else {
                        total - total.div_euclid(2)
                    };
                    output[i] = req[i];
                }
                None => {
                    let out = natural - to_i64(pb[i])? - to_i64(pe[i])?;
                    if out < 0 {
                        op_bail!(
                            "spatial dimension {i}: pads {:?} leave no output",
                            self.params.pads
                        );
                    }
                    pad_begin[i] = to_i64(pb[i])?;
                    output[i] = out as usize;
                }
            }
        }
        Ok(ConvTransposeShapes {
            batch: x[0],
            in_channels: x[1],
            out_channels,
            group,
            input,
            kernel,
            strides,
            dilations,
            pad_begin,
            output,
        })
    }
}

/// Plain ConvTranspose; pushes every output element in row-major order. Each input element
/// scatters into the outputs `o = i*stride + k*dilation - pad_begin` its taps reach, so the
/// work follows the input and the kernel, not the output times the kernel (a wide kernel over
/// a large output made the gathering form take seconds for a few million products).
pub fn conv_transpose_reference(
    s: &ConvTransposeShapes,
    x: &[f64],
    w: &[f64],
    bias: Option<&[f64]>,
    sink: &mut dyn FnMut(f64),
) {
    let rank = s.input.len();
    let cg = s.in_channels / s.group;
    let mg = s.out_channels / s.group;
    let in_size: usize = s.input.iter().product();
    let k_size: usize = s.kernel.iter().product();
    let out_size: usize = s.output.iter().product();
    let mut y = vec![0f64; s.batch * s.out_channels * out_size];
    for n in 0..s.batch {
        for ci in 0..s.in_channels {
            let grp = ci / cg;
            let xs = &x[(n * s.in_channels + ci) * in_size..][..in_size];
            let mut ii = 0;
            for_each_index(&s.input, |p| {
                let xv = xs[ii];
                ii += 1;
                let mut ki = 0;
                for_each_index(&s.kernel, |k| {
                    let mut off = Some(0usize);
                    for d in 0..rank {
                        let o = (p[d] * s.strides[d]) as i128 + (k[d] * s.dilations[d]) as i128
                            - s.pad_begin[d] as i128;
                        off = off
                            .filter(|_| o >= 0 && o < s.output[d] as i128)
                            .map(|off| off * s.output[d] + o as usize);
                    }
                    if let Some(off) = off {
                        for mm in 0..mg {
                            let m = grp * mg + mm;
                            y[(n * s.out_channels + m) * out_size + off] +=
                                xv * w[(ci * mg + mm) * k_size + ki];
                        }
                    }
                    ki += 1;
                });
            });
        }
    }
    for (i, v) in y.into_iter().enumerate() {
        let m = (i / out_size) % s.out_channels.max(1);
        sink(v + bias.map_or(0.0, |b| b[m]));
    }
}

impl Op for ConvTranspose {
    op_common!(
        "ConvTranspose",
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
        for i in [1, 2] {
            if ctx.has(i) {
                op_ensure!(
                    ctx.dtype(i)? == dt,
                    "input {i} is {}, expected {dt} like X",
                    ctx.dtype(i)?
                );
            }
        }
        let s = self.shapes(ctx.shape(0)?, ctx.shape(1)?)?;
        if ctx.has(2) {
            check_bias(ctx.shape(2)?, s.out_channels)?;
        }
        Ok(vec![TensorInfo::new(dt, s.output_shape())])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let w = required(inputs, 1)?;
        let b = inputs.get(2).copied().flatten();
        let s = self.shapes(x.shape(), w.shape())?;
        if let Some(b) = b {
            check_bias(b.shape(), s.out_channels)?;
        }
        let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
        let bv = b.map(|b| b.to_f64_vec());
        let act = self.activation;
        let y = tensor_from_sink(x.dtype(), &s.output_shape(), |sink| {
            conv_transpose_reference(&s, &xv, &wv, bv.as_deref(), &mut |v| {
                sink(UnaryKind::apply_optional(act, v))
            })
        })?;
        Ok(vec![y])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], _outputs: &[TensorInfo]) -> u64 {
        match (inputs.first(), inputs.get(1)) {
            (Some(Some(x)), Some(Some(w))) => {
                let per: usize = w.shape.iter().skip(1).product();
                2 * (x.numel() as u64).saturating_mul(per as u64)
            }
            _ => 0,
        }
    }
}

fn check_bias(shape: &[usize], m: usize) -> OpResult<()> {
    op_ensure!(
        shape == [m],
        "input 2 (B) must have shape [{m}], got {shape:?}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(shape, v).unwrap()
    }

    fn seq(n: usize) -> Vec<f32> {
        (0..n).map(|i| i as f32).collect()
    }

    fn run(c: &ConvTranspose, x: &Tensor, w: &Tensor) -> Tensor {
        c.eval(&[Some(x), Some(w), None]).unwrap().remove(0)
    }

    #[test]
    fn onnx_1d() {
        // ONNX test_convtranspose_1d: x [0,1,2], W ones [1,2,3].
        let y = run(
            &ConvTranspose::default(),
            &t(&[1, 1, 3], seq(3)),
            &t(&[1, 2, 3], vec![1.; 6]),
        );
        assert_eq!(y.shape(), &[1, 2, 5]);
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[0., 1., 3., 3., 2., 0., 1., 3., 3., 2.]
        );
    }

    #[test]
    fn onnx_2d_default() {
        // ONNX test_convtranspose: 3x3 arange, W ones [1,2,3,3] -> 5x5 per channel.
        let y = run(
            &ConvTranspose::default(),
            &t(&[1, 1, 3, 3], seq(9)),
            &t(&[1, 2, 3, 3], vec![1.; 18]),
        );
        assert_eq!(y.shape(), &[1, 2, 5, 5]);
        let v = y.as_slice::<f32>().unwrap();
        assert_eq!(&v[..10], &[0., 1., 3., 3., 2., 3., 8., 15., 12., 7.]);
        assert_eq!(v[12], 36.);
    }

    #[test]
    fn autopad_same_upper_and_output_shape() {
        let x = t(&[1, 1, 3, 3], seq(9));
        let w = t(&[1, 2, 3, 3], vec![1.; 18]);
        let mut c = ConvTranspose::default();
        c.params.strides = Some(vec![2, 2]);
        c.params.auto_pad = AutoPad::SameUpper;
        let y = run(&c, &x, &w);
        assert_eq!(y.shape(), &[1, 2, 6, 6]);
        // ONNX test_convtranspose_autopad_same first rows.
        assert_eq!(
            &y.as_slice::<f32>().unwrap()[..12],
            &[0., 0., 1., 1., 3., 2., 0., 0., 1., 1., 3., 2.]
        );
        // ONNX test_convtranspose_pads: strides 3x2, pads [1,2,1,2] -> 7x3.
        let mut p = ConvTranspose::default();
        p.params.strides = Some(vec![3, 2]);
        p.params.pads = Some(vec![1, 2, 1, 2]);
        let y = run(&p, &x, &w);
        assert_eq!(y.shape(), &[1, 2, 7, 3]);
        assert_eq!(
            &y.as_slice::<f32>().unwrap()[..6],
            &[1., 1., 3., 1., 1., 3.]
        );
        // ONNX test_convtranspose_output_shape: natural 9x7, requested 10x8: total padding -1,
        // so the extra row/column goes at the end.
        let mut o = ConvTranspose::default();
        o.params.strides = Some(vec![3, 2]);
        o.output_shape = Some(vec![10, 8]);
        let s = o.shapes(&[1, 1, 3, 3], &[1, 2, 3, 3]).unwrap();
        assert_eq!(
            (s.output.clone(), s.pad_begin.clone()),
            (vec![10, 8], vec![0, 0])
        );
        let y = run(&o, &x, &w);
        assert_eq!(
            &y.as_slice::<f32>().unwrap()[..8],
            &[0., 0., 1., 1., 3., 2., 2., 0.]
        );
        // Requested 8x6: total padding 1; NOTSET puts it at the beginning, SAME_UPPER at the end.
        o.output_shape = Some(vec![1, 2, 8, 6]);
        assert_eq!(
            o.shapes(&[1, 1, 3, 3], &[1, 2, 3, 3]).unwrap().pad_begin,
            vec![1, 1]
        );
        o.params.auto_pad = AutoPad::SameUpper;
        assert_eq!(
            o.shapes(&[1, 1, 3, 3], &[1, 2, 3, 3]).unwrap().pad_begin,
            vec![0, 0]
        );
    }

    #[test]
    fn dilations_groups_bias() {
        // ONNX test_convtranspose_dilations: x [[3,8,1],[9,5,7],[3,2,6]], w [[7,2],[1,9]], dil 2.
        let x = t(&[1, 1, 3, 3], vec![3., 8., 1., 9., 5., 7., 3., 2., 6.]);
        let w = t(&[1, 1, 2, 2], vec![7., 2., 1., 9.]);
        let mut c = ConvTranspose::default();
        c.params.dilations = Some(vec![2, 2]);
        let y = run(&c, &x, &w);
        assert_eq!(y.shape(), &[1, 1, 5, 5]);
        assert_eq!(
            &y.as_slice::<f32>().unwrap()[..10],
            &[21., 56., 13., 16., 2., 63., 35., 67., 10., 14.]
        );
        // Two groups of one channel each; bias per output channel.
        let x = t(&[1, 2, 2], vec![1., 2., 10., 20.]);
        let w = t(&[2, 1, 1], vec![2., 3.]);
        let b = t(&[2], vec![0.5, -0.5]);
        let g = ConvTranspose {
            group: 2,
            ..Default::default()
        };
        let y = g.eval(&[Some(&x), Some(&w), Some(&b)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[2.5, 4.5, 29.5, 59.5]);
        assert!(g
            .eval(&[Some(&x), Some(&w), Some(&t(&[3], vec![0.; 3]))])
            .is_err());
    }
}
