//! Flatten: reshape to 2-D, `[prod(dims[..axis]), prod(dims[axis..])]`.

use super::common::numel_of;
use crate::op::{input, output, required, Prototype};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Flatten {
    /// Split point, in `[-rank, rank]`.
    pub axis: i64,
}

impl Default for Flatten {
    fn default() -> Self {
        Flatten { axis: 1 }
    }
}

impl Flatten {
    pub fn output_shape(&self, input: &[usize]) -> OpResult<Vec<usize>> {
        let r = input.len() as i64;
        let a = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        };
        if a < 0 || a > r {
            op_bail!("axis {} is out of range for rank {r}", self.axis);
        }
        let a = a as usize;
        Ok(vec![numel_of(&input[..a])?, numel_of(&input[a..])?])
    }
}

impl Op for Flatten {
    op_common!(
        "Flatten",
        Prototype {
            inputs: &[input("input", DTypeSet::ANY)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(
            ctx.dtype(0)?,
            self.output_shape(ctx.shape(0)?)?,
        )])
    }

    fn output_aliases_input(&self) -> bool {
        true
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        Ok(vec![x.reshaped(&self.output_shape(x.shape())?)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes() {
        let f = |axis| Flatten { axis }.output_shape(&[2, 3, 4, 5]);
        assert_eq!(f(0).unwrap(), vec![1, 120]);
        assert_eq!(f(1).unwrap(), vec![2, 60]);
        assert_eq!(f(4).unwrap(), vec![120, 1]);
        assert_eq!(f(-1).unwrap(), vec![24, 5]);
        assert_eq!(f(-4).unwrap(), vec![1, 120]);
        assert!(f(5).is_err());
        assert!(f(-5).is_err());
        // A zero dimension lets the other dimensions be huge; their product must not overflow.
        let big = Flatten { axis: 2 }.output_shape(&[1 << 40, 1 << 40, 0]);
        assert!(big.is_err());
        let x = Tensor::from_vec(&[2, 2], vec![1i8, 2, 3, 4]).unwrap();
        let y = Flatten { axis: 0 }.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 4]);
        assert!(y[0].shares_data_with(&x));
    }
}
