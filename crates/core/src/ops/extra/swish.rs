//! Swish (opset 24): `x * sigmoid(alpha * x)`.

use crate::op::{input, output, required, Prototype};
use crate::ops::nn::tensor_from_f64;
use crate::{op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Swish {
    pub alpha: f64,
}

impl Default for Swish {
    fn default() -> Self {
        Swish { alpha: 1.0 }
    }
}

impl Op for Swish {
    op_common!(
        "Swish",
        Prototype {
            inputs: &[input("X", DTypeSet::FLOAT)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let y: Vec<f64> = x
            .to_f64_vec()
            .iter()
            .map(|&v| v / (1.0 + (-self.alpha * v).exp()))
            .collect();
        Ok(vec![tensor_from_f64(x.dtype(), x.shape(), &y)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        let x = Tensor::from_slice(&[2], &[0.0f32, 2.0]).unwrap();
        let y = Swish { alpha: 0.5 }.eval(&[Some(&x)]).unwrap()[0].to_f64_vec();
        // 2 * sigmoid(1) = 2 / (1 + e^-1)
        assert_eq!(y[0], 0.0);
        assert!((y[1] - 2.0 / (1.0 + (-1f64).exp())).abs() < 1e-6);
    }
}
