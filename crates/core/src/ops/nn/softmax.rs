//! Softmax, LogSoftmax and Hardmax.
//!
//! From opset 13 they work along one axis. Before, the input was coerced to 2-D at `axis`
//! (dims before it flattened into rows, the rest into columns) and the op ran over each row:
//! `legacy_2d` selects that form.

use super::{split_at_axis, tensor_from_f64};
use crate::op::{input, normalize_axis, output, required, Prototype};
use crate::{op_bail, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SoftmaxKind {
    #[default]
    Softmax,
    LogSoftmax,
    /// 1 at the first maximum, 0 elsewhere.
    Hardmax,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Softmax {
    pub kind: SoftmaxKind,
    pub axis: i64,
    pub legacy_2d: bool,
}

impl Default for Softmax {
    fn default() -> Self {
        Softmax {
            kind: SoftmaxKind::Softmax,
            axis: -1,
            legacy_2d: false,
        }
    }
}

impl Softmax {
    /// (rows, length, inner stride) of the slices the op runs over.
    fn layout(&self, shape: &[usize]) -> OpResult<(usize, usize, usize)> {
        if self.legacy_2d {
            // Axis may equal the rank here (one column holding everything after it).
            let r = shape.len() as i64;
            let a = if self.axis < 0 {
                self.axis + r
            } else {
                self.axis
            };
            if a < 0 || a > r {
                op_bail!("axis {} is out of range for rank {r}", self.axis);
            }
            let rows: usize = shape[..a as usize].iter().product();
            let cols: usize = shape[a as usize..].iter().product();
            Ok((rows, cols, 1))
        } else {
            if shape.is_empty() {
                return Ok((1, 1, 1));
            }
            let axis = normalize_axis(self.axis, shape.len())?;
            Ok(split_at_axis(shape, axis))
        }
    }
}

impl Op for Softmax {
    fn name(&self) -> &'static str {
        match self.kind {
            SoftmaxKind::Softmax => "Softmax",
            SoftmaxKind::LogSoftmax => "LogSoftmax",
            SoftmaxKind::Hardmax => "Hardmax",
        }
    }

    fn prototype(&self) -> &'static Prototype {
        static P: Prototype = Prototype {
            inputs: &[input("input", DTypeSet::FLOAT)],
            outputs: &[output("output")],
            value_inputs: &[],
        };
        &P
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        self.layout(ctx.shape(0)?)?;
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let (outer, len, inner) = self.layout(x.shape())?;
        let xs = x.to_f64_vec();
        // An empty tensor may still declare huge other dims: its loops would count them.
        if xs.is_empty() {
            return Ok(vec![tensor_from_f64(x.dtype(), x.shape(), &[])?]);
        }
        let mut ys = vec![0.0; xs.len()];
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| o * len * inner + k * inner + i;
                let mut max = f64::NEG_INFINITY;
                let mut arg = 0;
                for k in 0..len {
                    if xs[at(k)] > max {
                        max = xs[at(k)];
                        arg = k;
                    }
                }
                match self.kind {
                    SoftmaxKind::Hardmax => {
                        if len > 0 {
                            ys[at(arg)] = 1.0;
                        }
                    }
                    _ => {
                        let sum: f64 = (0..len).map(|k| (xs[at(k)] - max).exp()).sum();
                        for k in 0..len {
                            let d = xs[at(k)] - max;
                            ys[at(k)] = if self.kind == SoftmaxKind::Softmax {
                                d.exp() / sum
                            } else {
                                d - sum.ln()
                            };
                        }
                    }
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
    fn an_empty_input_with_huge_dims_returns_at_once() {
        // A fuzz input: LogSoftmax over axis 1 of [3, 0, 2^40] used to loop 3 * 2^40 times.
        let x = Tensor::zeros(crate::DType::F32, &[3, 0, 1 << 40]).unwrap();
        for kind in [
            SoftmaxKind::Softmax,
            SoftmaxKind::LogSoftmax,
            SoftmaxKind::Hardmax,
        ] {
            let op = Softmax {
                kind,
                axis: 1,
                ..Default::default()
            };
            let y = op.eval(&[Some(&x)]).unwrap().remove(0);
            assert_eq!(y.shape(), &[3, 0, 1 << 40]);
            assert_eq!(y.numel(), 0);
        }
    }

    #[test]
    fn softmax_axes() {
        let x = f32t(&[2, 2], &[0., 1., 2., 2.]);
        let e = 1f64.exp();
        let s = Softmax::default().eval(&[Some(&x)]).unwrap();
        assert_close(&s[0], &[1. / (1. + e), e / (1. + e), 0.5, 0.5], 1e-6);
        let s0 = Softmax {
            axis: 0,
            ..Default::default()
        };
        let y = s0.eval(&[Some(&x)]).unwrap();
        let a = 1. / (1. + e * e);
        assert_close(&y[0], &[a, 1. / (1. + e), 1. - a, e / (1. + e)], 1e-6);
        let l = Softmax {
            kind: SoftmaxKind::LogSoftmax,
            ..Default::default()
        };
        let y = l.eval(&[Some(&x)]).unwrap();
        assert_close(
            &y[0],
            &[
                -(1. + e).ln(),
                1. - (1. + e).ln(),
                -(2f64.ln()),
                -(2f64.ln()),
            ],
            1e-6,
        );
    }

    #[test]
    fn legacy_coerces_to_2d() {
        // axis 1 of [1, 2, 2]: one row of 4.
        let x = f32t(&[1, 2, 2], &[0., 0., 0., 0.]);
        let s = Softmax {
            axis: 1,
            legacy_2d: true,
            ..Default::default()
        };
        assert_close(&s.eval(&[Some(&x)]).unwrap()[0], &[0.25; 4], 1e-7);
        let h = Softmax {
            kind: SoftmaxKind::Hardmax,
            axis: 1,
            legacy_2d: true,
        };
        let x = f32t(&[1, 2, 2], &[1., 3., 3., 2.]);
        assert_close(&h.eval(&[Some(&x)]).unwrap()[0], &[0., 1., 0., 0.], 0.0);
        let h13 = Softmax {
            kind: SoftmaxKind::Hardmax,
            axis: -1,
            legacy_2d: false,
        };
        assert_close(&h13.eval(&[Some(&x)]).unwrap()[0], &[0., 1., 1., 0.], 0.0);
        assert!(Softmax {
            axis: 3,
            ..Default::default()
        }
        .eval(&[Some(&x)])
        .is_err());
    }
}
