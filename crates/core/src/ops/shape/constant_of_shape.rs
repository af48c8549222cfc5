//! ConstantOfShape: a tensor of the shape given by a value-dependent input, filled with one
//! value whose dtype is the output's (default f32 0).

use super::common::numel_of;
use crate::op::{input, output, required, Prototype};
use crate::ops::util::{read_i64s, to_dim};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ConstantOfShape {
    /// One element; its dtype is the output dtype.
    pub value: Tensor,
}

impl Default for ConstantOfShape {
    fn default() -> Self {
        ConstantOfShape {
            value: Tensor::scalar(0.0f32),
        }
    }
}

impl ConstantOfShape {
    fn shape(&self, t: &Tensor) -> OpResult<Vec<usize>> {
        if self.value.numel() != 1 {
            op_bail!(
                "value must hold one element, got shape {:?}",
                self.value.shape()
            );
        }
        let s = read_i64s(t, "input 0 (shape)", 64)?
            .iter()
            .map(|&d| to_dim(d, "input 0 (shape) entry"))
            .collect::<OpResult<Vec<_>>>()?;
        numel_of(&s)?;
        Ok(s)
    }
}

impl Op for ConstantOfShape {
    op_common!(
        "ConstantOfShape",
        Prototype {
            inputs: &[input("input", DTypeSet::I64)],
            outputs: &[output("output")],
            value_inputs: &[0],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(
            self.value.dtype(),
            self.shape(ctx.value(0)?)?,
        )])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let shape = self.shape(required(inputs, 0)?)?;
        let mut out = Tensor::zeros(self.value.dtype(), &shape)?;
        let v = self.value.bytes();
        for chunk in out.bytes_mut().chunks_exact_mut(v.len()) {
            chunk.copy_from_slice(v);
        }
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills() {
        let s = Tensor::from_vec(&[2], vec![2i64, 3]).unwrap();
        let y = ConstantOfShape::default().eval(&[Some(&s)]).unwrap();
        assert_eq!(y[0].dtype(), crate::DType::F32);
        assert_eq!(y[0].to_f64_vec(), vec![0.0; 6]);
        let c = ConstantOfShape {
            value: Tensor::from_vec(&[1], vec![7i32]).unwrap(),
        };
        let y = c.eval(&[Some(&s)]).unwrap();
        assert_eq!(y[0].to_i64_vec(), vec![7; 6]);
        let z = Tensor::from_vec(&[1], vec![0i64]).unwrap();
        assert_eq!(c.eval(&[Some(&z)]).unwrap()[0].shape(), &[0]);
        let neg = Tensor::from_vec(&[1], vec![-1i64]).unwrap();
        assert!(c.eval(&[Some(&neg)]).is_err());
        let e = Tensor::zeros(crate::DType::I64, &[0]).unwrap();
        assert_eq!(c.eval(&[Some(&e)]).unwrap()[0].to_i64_vec(), vec![7]);
    }
}
