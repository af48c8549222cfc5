//! EyeLike: a 2-D tensor shaped like the input with ones on the `k`-th diagonal.

use crate::op::{input, output, required, Prototype};
use crate::{
    op_bail, op_common, DType, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EyeLike {
    /// Output dtype; `None` keeps the input's.
    pub dtype: Option<DType>,
    pub k: i64,
}

impl EyeLike {
    fn info(&self, dtype: DType, shape: &[usize]) -> OpResult<TensorInfo> {
        if shape.len() != 2 {
            op_bail!("input 0 must be 2-D, got {shape:?}");
        }
        Ok(TensorInfo::new(self.dtype.unwrap_or(dtype), shape))
    }
}

impl Op for EyeLike {
    op_common!(
        "EyeLike",
        Prototype {
            inputs: &[input("input", DTypeSet::ALL)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![self.info(ctx.dtype(0)?, ctx.shape(0)?)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let info = self.info(x.dtype(), x.shape())?;
        let (rows, cols) = (info.shape[0], info.shape[1]);
        let mut out = Tensor::zeros(info.dtype, &info.shape)?;
        crate::dispatch_all!(info.dtype, T => {
            let o = out.as_mut_slice::<T>()?;
            for i in 0..rows {
                let j = i as i128 + self.k as i128;
                if j >= 0 && j < cols as i128 {
                    o[i * cols + j as usize] = T::one();
                }
            }
        });
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eye() {
        let x = Tensor::zeros(DType::I32, &[2, 3]).unwrap();
        let y = EyeLike::default().eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].dtype(), DType::I32);
        assert_eq!(y[0].to_i64_vec(), vec![1, 0, 0, 0, 1, 0]);
        let e = EyeLike {
            dtype: Some(DType::F64),
            k: 1,
        };
        let y = e.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].dtype(), DType::F64);
        assert_eq!(y[0].to_f64_vec(), vec![0., 1., 0., 0., 0., 1.]);
        let e = EyeLike {
            dtype: Some(DType::Bool),
            k: -1,
        };
        assert_eq!(
            e.eval(&[Some(&x)]).unwrap()[0].to_i64_vec(),
            vec![0, 0, 0, 1, 0, 0]
        );
        assert!(EyeLike::default()
            .eval(&[Some(&Tensor::scalar(1.0f32))])
            .is_err());
    }
}
