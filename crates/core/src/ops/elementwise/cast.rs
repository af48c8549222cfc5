//! Cast, CastLike and Identity.
//!
//! Conversions follow [`Tensor::cast`]: float to int truncates toward zero and saturates (NaN
//! becomes 0), anything to bool is `!= 0`, float narrowing rounds to nearest even.

use crate::op::{input, output, required, Prototype};
use crate::{op_common, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// Converts to the dtype `to`.
#[derive(Clone, Debug, PartialEq)]
pub struct Cast {
    pub to: DType,
}

impl Op for Cast {
    op_common!(
        "Cast",
        Prototype {
            inputs: &[input("input", DTypeSet::ALL)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(self.to, ctx.shape(0)?)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        Ok(vec![required(inputs, 0)?.cast(self.to)?])
    }
}

/// Converts input 0 to the dtype of input 1 (whose values are not read).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CastLike;

impl Op for CastLike {
    op_common!(
        "CastLike",
        Prototype {
            inputs: &[
                input("input", DTypeSet::ALL),
                input("target_type", DTypeSet::ALL),
            ],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(ctx.dtype(1)?, ctx.shape(0)?)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let to = required(inputs, 1)?.dtype();
        Ok(vec![required(inputs, 0)?.cast(to)?])
    }
}

/// The input, unchanged (the data is shared, not copied).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Identity;

impl Op for Identity {
    op_common!(
        "Identity",
        Prototype {
            inputs: &[input("input", DTypeSet::ALL)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        Ok(vec![required(inputs, 0)?.clone()])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{f32s, run};
    use super::*;

    #[test]
    fn casts() {
        let x = f32s(&[4], &[-1.7, 0.0, 2.9, 300.0]);
        let y = run(&Cast { to: DType::I32 }, &[Some(&x)]).remove(0);
        assert_eq!(y.dtype(), DType::I32);
        assert_eq!(y.to_i64_vec(), vec![-1, 0, 2, 300]);
        let b = run(&Cast { to: DType::Bool }, &[Some(&x)]).remove(0);
        assert_eq!(b.to_i64_vec(), vec![1, 0, 1, 1]);
        let h = run(&Cast { to: DType::BF16 }, &[Some(&x)]).remove(0);
        assert_eq!(h.dtype(), DType::BF16);
        assert_eq!(h.to_f64_vec()[3], 300.0);
        let like = Tensor::from_vec(&[1], vec![0u8]).unwrap();
        let z = run(&CastLike, &[Some(&x), Some(&like)]).remove(0);
        assert_eq!(z.dtype(), DType::U8);
        assert_eq!(z.to_i64_vec(), vec![0, 0, 2, 255]);
    }

    #[test]
    fn identity_shares() {
        let x = f32s(&[2], &[1.0, 2.0]);
        let y = run(&Identity, &[Some(&x)]).remove(0);
        assert!(y.shares_data_with(&x));
    }
}
