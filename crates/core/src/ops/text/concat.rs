//! StringConcat: joins two string tensors element by element, with numpy broadcasting.

use super::broadcast_strings;
use crate::op::{input, output, required, Prototype};
use crate::ops::util::broadcast_shapes;
use crate::{op_common, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StringConcat;

impl Op for StringConcat {
    op_common!(
        "StringConcat",
        Prototype {
            inputs: &[input("X", DTypeSet::STRING), input("Y", DTypeSet::STRING)],
            outputs: &[output("Z")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let shape = broadcast_shapes(ctx.shape(0)?, ctx.shape(1)?)?;
        Ok(vec![TensorInfo::new(DType::String, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (shape, joined) =
            broadcast_strings(required(inputs, 0)?, required(inputs, 1)?, |x, y| {
                format!("{x}{y}")
            })?;
        Ok(vec![Tensor::from_strings(&shape, joined)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(shape: &[usize], v: &[&str]) -> Tensor {
        Tensor::from_strings(shape, v.iter().map(|s| s.to_string()).collect()).unwrap()
    }

    #[test]
    fn joins_with_broadcasting() {
        let x = strings(&[2, 1], &["a", "é"]);
        let y = strings(&[3], &["1", "", "üx"]);
        let out = StringConcat.eval(&[Some(&x), Some(&y)]).unwrap().remove(0);
        assert_eq!(out.shape(), &[2, 3]);
        assert_eq!(out.strings().unwrap(), ["a1", "a", "aüx", "é1", "é", "éüx"]);
        let n = Tensor::from_vec(&[1], vec![1.0f32]).unwrap();
        assert!(StringConcat.eval(&[Some(&x), Some(&n)]).is_err());
    }
}
