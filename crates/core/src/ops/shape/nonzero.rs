//! NonZero: the coordinates of the non-zero elements, as an i64 `[rank, count]` tensor in
//! row-major order. The output shape depends on the data, so input 0 is value-dependent.

use crate::op::{input, output, required, Prototype};
use crate::ops::util::strides;
use crate::{op_common, DType, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NonZero;

/// Flat positions of the non-zero elements (NaN counts as non-zero).
fn positions(x: &Tensor) -> OpResult<Vec<usize>> {
    crate::dispatch_all!(x.dtype(), T => {
        let s = x.as_slice::<T>()?;
        Ok(s.iter().enumerate().filter(|(_, &v)| v != T::zero()).map(|(i, _)| i).collect())
    })
}

/// A rank-0 input is treated as shape `[1]`, as numpy does.
fn rank_of(shape: &[usize]) -> usize {
    shape.len().max(1)
}

impl Op for NonZero {
    op_common!(
        "NonZero",
        Prototype {
            inputs: &[input("X", DTypeSet::ALL)],
            outputs: &[output("Y")],
            value_inputs: &[0],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.value(0)?;
        let n = positions(x)?.len();
        Ok(vec![TensorInfo::new(
            DType::I64,
            vec![rank_of(x.shape()), n],
        )])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let pos = positions(x)?;
        let shape: Vec<usize> = if x.rank() == 0 {
            vec![1]
        } else {
            x.shape().to_vec()
        };
        let st = strides(&shape);
        let (r, n) = (shape.len(), pos.len());
        let mut out = Tensor::zeros(DType::I64, &[r, n])?;
        let o = out.as_mut_slice::<i64>()?;
        for (k, &p) in pos.iter().enumerate() {
            for d in 0..r {
                o[d * n + k] = ((p / st[d]) % shape[d]) as i64;
            }
        }
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonzero() {
        let x = Tensor::from_bools(&[2, 2], &[true, false, true, true]).unwrap();
        let y = NonZero.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[2, 3]);
        assert_eq!(y[0].to_i64_vec(), vec![0, 1, 1, 0, 0, 1]);
        let f = Tensor::from_vec(&[3], vec![0.0f32, -0.0, f32::NAN]).unwrap();
        let y = NonZero.eval(&[Some(&f)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 1]);
        assert_eq!(y[0].to_i64_vec(), vec![2]);
        let e = Tensor::zeros(DType::I32, &[2, 0]).unwrap();
        assert_eq!(NonZero.eval(&[Some(&e)]).unwrap()[0].shape(), &[2, 0]);
    }
}
