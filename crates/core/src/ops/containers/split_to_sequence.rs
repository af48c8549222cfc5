//! SplitToSequence: splits a tensor along an axis into a sequence of tensors.
//!
//! Without `split`, into pieces of length 1 (the axis dropped unless `keepdims`); with a scalar
//! `split`, into pieces of that length (the last one shorter when it does not divide); with a
//! 1-D `split`, into pieces of those lengths.

use crate::op::{input, normalize_axis, optional, output, required, Prototype};
use crate::ops::shape::split::Split;
use crate::{op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SplitToSequence {
    pub axis: i64,
    /// Keep the split axis (length 1) when there is no `split` input.
    pub keepdims: bool,
}

impl Default for SplitToSequence {
    fn default() -> Self {
        SplitToSequence {
            axis: 0,
            keepdims: true,
        }
    }
}

impl SplitToSequence {
    /// The piece lengths along an axis of length `dim`.
    fn lengths(dim: usize, split: Option<&Tensor>) -> OpResult<Vec<usize>> {
        let Some(s) = split else {
            return Ok(vec![1; dim]);
        };
        let v = s.to_i64_vec();
        op_ensure!(
            v.iter().all(|&x| x >= 0),
            "input 1 (split) must not be negative, got {v:?}"
        );
        if s.rank() == 0 {
            let k = v[0] as usize;
            op_ensure!(
                k > 0 || dim == 0,
                "input 1 (split) is 0 for an axis of {dim}"
            );
            let mut out = vec![k; dim / k.max(1)];
            if !dim.is_multiple_of(k.max(1)) {
                out.push(dim % k);
            }
            return Ok(out);
        }
        op_ensure!(
            s.rank() == 1,
            "input 1 (split) must be a scalar or 1-D, has shape {:?}",
            s.shape()
        );
        let total = v.iter().try_fold(0usize, |a, &x| a.checked_add(x as usize));
        op_ensure!(
            total == Some(dim),
            "input 1 (split) {v:?} does not add up to the axis length {dim}"
        );
        Ok(v.into_iter().map(|x| x as usize).collect())
    }
}

impl Op for SplitToSequence {
    op_common!(
        "SplitToSequence",
        Prototype {
            inputs: &[
                input("input", DTypeSet::ALL),
                optional("split", DTypeSet::INDEX)
            ],
            outputs: &[output("output_sequence")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        normalize_axis(self.axis, ctx.shape(0)?.len())?;
        Ok(vec![TensorInfo::new(DType::Sequence, [])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let split = inputs.get(1).copied().flatten();
        let axis = normalize_axis(self.axis, x.rank())?;
        let lengths = Self::lengths(x.shape()[axis], split)?;
        let mut pieces = if lengths.is_empty() {
            Vec::new()
        } else {
            Split {
                axis: axis as i64,
                split: Some(lengths.iter().map(|&l| l as i64).collect()),
                num_outputs: lengths.len(),
            }
            .eval(&[Some(x)])?
        };
        if split.is_none() && !self.keepdims {
            let mut shape = x.shape().to_vec();
            shape.remove(axis);
            for p in &mut pieces {
                *p = p.reshaped(&shape)?;
            }
        }
        Ok(vec![Tensor::from_sequence(pieces)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(op: &SplitToSequence, split: Option<Tensor>) -> Vec<(Vec<usize>, Vec<f64>)> {
        let x = Tensor::from_vec(&[3, 2], (0..6).map(|v| v as f32).collect()).unwrap();
        let out = op.eval(&[Some(&x), split.as_ref()]).unwrap();
        out[0]
            .sequence()
            .unwrap()
            .iter()
            .map(|t| (t.shape().to_vec(), t.to_f64_vec()))
            .collect()
    }

    #[test]
    fn splits_by_ones_by_a_length_and_by_lengths() {
        let ones = split(&SplitToSequence::default(), None);
        assert_eq!(ones.len(), 3);
        assert_eq!(ones[1], (vec![1, 2], vec![2.0, 3.0]));
        let dropped = SplitToSequence {
            axis: -1,
            keepdims: false,
        };
        let cols = split(&dropped, None);
        assert_eq!(cols[1], (vec![3], vec![1.0, 3.0, 5.0]));
        let by_two = split(&SplitToSequence::default(), Some(Tensor::scalar(2i64)));
        assert_eq!(by_two[0].0, [2, 2]);
        assert_eq!(by_two[1], (vec![1, 2], vec![4.0, 5.0]));
        let listed = split(
            &SplitToSequence::default(),
            Some(Tensor::from_vec(&[2], vec![1i64, 2]).unwrap()),
        );
        assert_eq!(listed[1].0, [2, 2]);
        let x = Tensor::from_vec(&[3], vec![1.0f32; 3]).unwrap();
        let op = SplitToSequence::default();
        let bad = Tensor::from_vec(&[2], vec![1i64, 1]).unwrap();
        assert!(op.eval(&[Some(&x), Some(&bad)]).is_err());
        assert!(op.eval(&[Some(&x), Some(&Tensor::scalar(0i64))]).is_err());
        assert!(op.eval(&[Some(&x), Some(&Tensor::scalar(-1i64))]).is_err());
    }
}
