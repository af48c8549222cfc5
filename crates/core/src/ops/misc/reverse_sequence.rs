//! ReverseSequence: reverses the first `sequence_lens[b]` steps along the time axis of every
//! batch entry.

use crate::op::{input, output, required, Prototype};
use crate::ops::util::strides;
use crate::{op_bail, op_common, op_ensure, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReverseSequence {
    pub batch_axis: usize,
    pub time_axis: usize,
}

impl Default for ReverseSequence {
    fn default() -> Self {
        ReverseSequence {
            batch_axis: 1,
            time_axis: 0,
        }
    }
}

impl ReverseSequence {
    fn check(&self, x: &[usize], lens: &[usize]) -> OpResult<()> {
        op_ensure!(
            x.len() >= 2,
            "input 0 (input): expected rank >= 2, got {x:?}"
        );
        let (b, t) = (self.batch_axis, self.time_axis);
        op_ensure!(
            b < 2 && t < 2 && b != t,
            "batch_axis {b} and time_axis {t} must be 0 and 1 in some order"
        );
        op_ensure!(
            lens == [x[b]],
            "input 1 (sequence_lens): expected shape [{}], got {lens:?}",
            x[b]
        );
        Ok(())
    }
}

impl Op for ReverseSequence {
    op_common!(
        "ReverseSequence",
        Prototype {
            inputs: &[
                input("input", DTypeSet::ALL),
                input("sequence_lens", DTypeSet::I64)
            ],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        self.check(ctx.shape(0)?, ctx.shape(1)?)?;
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let lens = required(inputs, 1)?;
        self.check(x.shape(), lens.shape())?;
        let shape = x.shape();
        let st = strides(shape);
        let (ba, ta) = (self.batch_axis, self.time_axis);
        let inner: usize = shape[2..].iter().product();
        let esz = x.dtype().size();
        let src = x.bytes();
        // Steps past a sequence's length stay as they are: start from a copy.
        let mut out = Tensor::from_bytes(x.dtype(), shape, src)?;
        let dst = out.bytes_mut();
        for (b, len) in lens.to_i64_vec().into_iter().enumerate() {
            if len < 0 || len as usize > shape[ta] {
                op_bail!(
                    "input 1 (sequence_lens): {len} is outside [0, {}]",
                    shape[ta]
                );
            }
            let len = len as usize;
            for t in 0..len {
                let from = (b * st[ba] + t * st[ta]) * esz;
                let to = (b * st[ba] + (len - 1 - t) * st[ta]) * esz;
                dst[to..to + inner * esz].copy_from_slice(&src[from..from + inner * esz]);
            }
        }
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_time_major() {
        // x[t, b]: column b reversed over its first lens[b] rows.
        let x = Tensor::from_vec(&[3, 2], vec![1.0f32, 10., 2., 20., 3., 30.]).unwrap();
        let lens = Tensor::from_vec(&[2], vec![3i64, 2]).unwrap();
        let y = ReverseSequence::default()
            .eval(&[Some(&x), Some(&lens)])
            .unwrap();
        assert_eq!(y[0].to_f64_vec(), vec![3., 20., 2., 10., 1., 30.]);
        let bad = Tensor::from_vec(&[2], vec![4i64, 0]).unwrap();
        assert!(ReverseSequence::default()
            .eval(&[Some(&x), Some(&bad)])
            .is_err());
    }
}
