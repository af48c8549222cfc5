//! CumSum: cumulative sum along an axis given as a scalar input, optionally exclusive
//! (each output excludes its own element) and/or reversed.

use super::{int_from_i128, int_to_i128, split_at_axis};
use crate::op::{input, normalize_axis, output, required, Prototype};
use crate::{
    dispatch_all, op_bail, op_common, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CumSum {
    pub exclusive: bool,
    pub reverse: bool,
}

fn read_axis(t: &Tensor) -> OpResult<i64> {
    if t.numel() != 1 || t.rank() > 1 {
        op_bail!("input 1 (axis) must be a scalar, got shape {:?}", t.shape());
    }
    Ok(t.to_i64_vec()[0])
}

impl Op for CumSum {
    op_common!(
        "CumSum",
        Prototype {
            inputs: &[
                input("x", DTypeSet::NUMERIC),
                input("axis", DTypeSet::INDEX)
            ],
            outputs: &[output("y")],
            // The output shape does not depend on the axis, so it need not be constant.
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.shape(0)?;
        if x.is_empty() {
            op_bail!("input 0 must have rank >= 1");
        }
        if let Some(v) = ctx.input(1)?.value {
            normalize_axis(read_axis(v)?, x.len())?;
        }
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let axis = normalize_axis(read_axis(required(inputs, 1)?)?, x.rank())?;
        let (outer, len, inner) = split_at_axis(x.shape(), axis);
        let mut out = Tensor::zeros(x.dtype(), x.shape())?;
        dispatch_all!(x.dtype(), T => {
            let xs = x.as_slice::<T>()?;
            let ys = out.as_mut_slice::<T>()?;
            let float = T::DTYPE.is_float();
            for o in 0..outer {
                for i in 0..inner {
                    let (mut fsum, mut isum) = (0f64, 0i128);
                    for step in 0..len {
                        let j = if self.reverse { len - 1 - step } else { step };
                        let at = o * len * inner + j * inner + i;
                        let v = xs[at];
                        if self.exclusive {
                            ys[at] = if float { T::from_f64(fsum) } else { int_from_i128(isum) };
                        }
                        if float {
                            fsum += v.to_f64();
                        } else {
                            isum = isum.wrapping_add(int_to_i128(v));
                        }
                        if !self.exclusive {
                            ys[at] = if float { T::from_f64(fsum) } else { int_from_i128(isum) };
                        }
                    }
                }
            }
        });
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(c: &CumSum, x: &Tensor, axis: i32) -> Vec<f64> {
        let a = Tensor::scalar(axis);
        c.eval(&[Some(x), Some(&a)]).unwrap()[0].to_f64_vec()
    }

    #[test]
    fn modes() {
        let x = Tensor::from_vec(&[5], vec![1.0f64, 2., 3., 4., 5.]).unwrap();
        assert_eq!(run(&CumSum::default(), &x, 0), vec![1., 3., 6., 10., 15.]);
        let ex = CumSum {
            exclusive: true,
            reverse: false,
        };
        assert_eq!(run(&ex, &x, 0), vec![0., 1., 3., 6., 10.]);
        let rev = CumSum {
            exclusive: false,
            reverse: true,
        };
        assert_eq!(run(&rev, &x, 0), vec![15., 14., 12., 9., 5.]);
        let both = CumSum {
            exclusive: true,
            reverse: true,
        };
        assert_eq!(run(&both, &x, -1), vec![14., 12., 9., 5., 0.]);
        let m = Tensor::from_vec(&[2, 3], vec![1i32, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(run(&CumSum::default(), &m, 0), vec![1., 2., 3., 5., 7., 9.]);
        assert_eq!(
            run(&CumSum::default(), &m, 1),
            vec![1., 3., 6., 4., 9., 15.]
        );
        assert!(CumSum::default()
            .eval(&[Some(&m), Some(&Tensor::scalar(2i64))])
            .is_err());
    }
}
