//! Where: `condition ? X : Y`, all three broadcast together.

use super::same_dtype;
use crate::op::{input, output, required, Prototype};
use crate::ops::util::{broadcast_all, broadcast_offsets};
use crate::{dispatch_all, op_common, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Where;

impl Op for Where {
    op_common!(
        "Where",
        Prototype {
            inputs: &[
                input("condition", DTypeSet::BOOL),
                input("X", DTypeSet::ALL),
                input("Y", DTypeSet::ALL),
            ],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = ctx.dtype(1)?;
        same_dtype(2, dt, ctx.dtype(2)?)?;
        let shape = broadcast_all([ctx.shape(0)?, ctx.shape(1)?, ctx.shape(2)?])?;
        Ok(vec![TensorInfo::new(dt, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let c = required(inputs, 0)?;
        let x = required(inputs, 1)?;
        let y = required(inputs, 2)?;
        same_dtype(0, DType::Bool, c.dtype())?;
        let dt = x.dtype();
        same_dtype(2, dt, y.dtype())?;
        let shape = broadcast_all([c.shape(), x.shape(), y.shape()])?;
        // Allocate the output first: it checks the size before the offset tables are built.
        let mut out = Tensor::zeros(dt, &shape)?;
        let co = broadcast_offsets(c.shape(), &shape);
        let xo = broadcast_offsets(x.shape(), &shape);
        let yo = broadcast_offsets(y.shape(), &shape);
        let cv = c.as_slice::<u8>()?;
        dispatch_all!(dt, T => {
            let xv = x.as_slice::<T>()?;
            let yv = y.as_slice::<T>()?;
            for (i, o) in out.as_mut_slice::<T>()?.iter_mut().enumerate() {
                *o = if cv[co[i]] != 0 { xv[xo[i]] } else { yv[yo[i]] };
            }
        });
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, f32s, run};
    use super::*;

    #[test]
    fn selects_with_broadcasting() {
        let c = Tensor::from_bools(&[2, 1], &[true, false]).unwrap();
        let x = f32s(&[2], &[1.0, 2.0]);
        let y = f32s(&[], &[9.0]);
        let out = run(&Where, &[Some(&c), Some(&x), Some(&y)]).remove(0);
        assert_eq!(out.shape(), &[2, 2]);
        assert_close(&out, &[1.0, 2.0, 9.0, 9.0]);
        let xi = Tensor::from_vec(&[2], vec![1i64, 2]).unwrap();
        let yi = Tensor::from_vec(&[2], vec![-1i64, -2]).unwrap();
        let c2 = Tensor::from_bools(&[2], &[false, true]).unwrap();
        let o = run(&Where, &[Some(&c2), Some(&xi), Some(&yi)]).remove(0);
        assert_eq!(o.to_i64_vec(), vec![-1, 2]);
        assert!(Where.eval(&[Some(&c2), Some(&x), Some(&yi)]).is_err());
    }
}
