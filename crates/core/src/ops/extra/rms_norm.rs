//! RMSNormalization: `X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * scale`.

use crate::op::{input, normalize_axis, output, required, Prototype};
use crate::ops::nn::tensor_from_f64;
use crate::ops::util::{broadcast_offsets, broadcast_shapes};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RmsNorm {
    pub axis: i64,
    pub epsilon: f64,
    /// Precision of the intermediate statistics; the reference always uses f64.
    pub stash_type: i64,
}

impl Default for RmsNorm {
    fn default() -> Self {
        RmsNorm {
            axis: -1,
            epsilon: 1e-5,
            stash_type: 1,
        }
    }
}

impl RmsNorm {
    fn check(&self, x: &[usize], s: &[usize]) -> OpResult<usize> {
        let axis = normalize_axis(self.axis, x.len())?;
        if broadcast_shapes(s, x)? != x {
            op_bail!("input 1 (scale) {s:?} does not broadcast to input 0 {x:?}");
        }
        Ok(axis)
    }
}

impl Op for RmsNorm {
    op_common!(
        "RMSNormalization",
        Prototype {
            inputs: &[input("X", DTypeSet::FLOAT), input("scale", DTypeSet::FLOAT)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        self.check(ctx.shape(0)?, ctx.shape(1)?)?;
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (x, s) = (required(inputs, 0)?, required(inputs, 1)?);
        let axis = self.check(x.shape(), s.shape())?;
        let inner: usize = x.shape()[axis..].iter().product();
        let xv = x.to_f64_vec();
        let sv = s.to_f64_vec();
        let so = broadcast_offsets(s.shape(), x.shape());
        let mut y = vec![0.0; xv.len()];
        for (bi, (block, yb)) in xv
            .chunks(inner.max(1))
            .zip(y.chunks_mut(inner.max(1)))
            .enumerate()
        {
            let ms = block.iter().map(|v| v * v).sum::<f64>() / inner as f64;
            let r = 1.0 / (ms + self.epsilon).sqrt();
            for (j, (yo, &v)) in yb.iter_mut().zip(block).enumerate() {
                *yo = v * r * sv[so[bi * inner + j]];
            }
        }
        Ok(vec![tensor_from_f64(x.dtype(), x.shape(), &y)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_of_three_four() {
        // rms([3, 4]) = sqrt(12.5); eps 0.
        let x = Tensor::from_slice(&[1, 2], &[3.0f32, 4.0]).unwrap();
        let s = Tensor::from_slice(&[2], &[1.0f32, 2.0]).unwrap();
        let n = RmsNorm {
            epsilon: 0.0,
            ..Default::default()
        };
        let y = n.eval(&[Some(&x), Some(&s)]).unwrap()[0].to_f64_vec();
        let r = 12.5f64.sqrt();
        assert!((y[0] - 3.0 / r).abs() < 1e-6 && (y[1] - 8.0 / r).abs() < 1e-6);
        let bad = Tensor::from_slice(&[3], &[1.0f32, 2.0, 3.0]).unwrap();
        assert!(n.eval(&[Some(&x), Some(&bad)]).is_err());
    }
}
