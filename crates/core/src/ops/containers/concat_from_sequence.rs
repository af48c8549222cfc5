//! ConcatFromSequence: joins a sequence's tensors along an axis, or stacks them along a new one
//! (`new_axis`).

use crate::op::{input, output, required, Prototype};
use crate::ops::shape::concat::Concat;
use crate::{op_bail, op_common, op_ensure, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConcatFromSequence {
    pub axis: i64,
    /// Stack along a new axis inserted at `axis` (which may then be the rank itself).
    pub new_axis: bool,
}

impl Op for ConcatFromSequence {
    op_common!(
        "ConcatFromSequence",
        Prototype {
            inputs: &[input("input_sequence", DTypeSet::SEQUENCE)],
            outputs: &[output("concat_result")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        op_bail!(
            "ConcatFromSequence's type is that of the sequence's tensors, known only by running it"
        )
    }

    fn shapes_known_by_running(&self) -> bool {
        true
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let items = required(inputs, 0)?.sequence()?;
        let Some(first) = items.first() else {
            op_bail!("the sequence is empty: there is nothing to concatenate");
        };
        op_ensure!(
            items.iter().all(|t| t.dtype().is_bytes()),
            "concatenating {} tensors is not supported",
            first.dtype()
        );
        if !self.new_axis {
            let refs: Vec<Option<&Tensor>> = items.iter().map(Some).collect();
            return Concat { axis: self.axis }.eval(&refs);
        }
        // Stacking: give every tensor a length-1 axis at `axis`, then concatenate there.
        let rank = first.rank() as i64;
        let axis = if self.axis < 0 {
            self.axis + rank + 1
        } else {
            self.axis
        };
        op_ensure!(
            (0..=rank).contains(&axis),
            "axis {} is outside [{}, {rank}] for stacking rank-{rank} tensors",
            self.axis,
            -rank - 1
        );
        let expanded = items
            .iter()
            .map(|t| {
                let mut shape = t.shape().to_vec();
                op_ensure!(
                    shape.len() as i64 == rank,
                    "tensors of ranks {rank} and {} cannot be stacked",
                    shape.len()
                );
                shape.insert(axis as usize, 1);
                Ok(t.reshaped(&shape)?)
            })
            .collect::<OpResult<Vec<Tensor>>>()?;
        let refs: Vec<Option<&Tensor>> = expanded.iter().map(Some).collect();
        Concat { axis }.eval(&refs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concatenates_or_stacks() {
        let a = Tensor::from_vec(&[1, 2], vec![1.0f32, 2.0]).unwrap();
        let b = Tensor::from_vec(&[1, 2], vec![3.0f32, 4.0]).unwrap();
        let seq = Tensor::from_sequence(vec![a, b]);
        let run = |axis, new_axis| {
            ConcatFromSequence { axis, new_axis }
                .eval(&[Some(&seq)])
                .map(|o| (o[0].shape().to_vec(), o[0].to_f64_vec()))
        };
        assert_eq!(
            run(0, false).unwrap(),
            (vec![2, 2], vec![1.0, 2.0, 3.0, 4.0])
        );
        assert_eq!(
            run(1, false).unwrap(),
            (vec![1, 4], vec![1.0, 2.0, 3.0, 4.0])
        );
        assert_eq!(
            run(0, true).unwrap(),
            (vec![2, 1, 2], vec![1.0, 2.0, 3.0, 4.0])
        );
        assert_eq!(
            run(-1, true).unwrap(),
            (vec![1, 2, 2], vec![1.0, 3.0, 2.0, 4.0])
        );
        assert!(run(2, false).is_err());
        assert!(run(3, true).is_err());
        let empty = Tensor::from_sequence(Vec::new());
        assert!(ConcatFromSequence::default().eval(&[Some(&empty)]).is_err());
    }
}
