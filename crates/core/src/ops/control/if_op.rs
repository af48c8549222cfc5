//! If: runs one of two subgraphs, chosen by a boolean condition.
//!
//! Inputs: the condition, then the outer values the branches capture (see the module
//! [`super`]); both branches take those captured values as their inputs, in that order.

use super::{truth, Subgraph};
use crate::op::{input, output, required, variadic, Prototype};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug)]
pub struct If {
    pub then_branch: Subgraph,
    pub else_branch: Subgraph,
}

impl Op for If {
    op_common!(
        "If",
        Prototype {
            inputs: &[
                input("cond", DTypeSet::BOOL),
                variadic("captured", DTypeSet::VALUE, 0)
            ],
            outputs: &[output("outputs")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        op_bail!("If's output types are known only by running the branch its condition picks")
    }

    fn shapes_known_by_running(&self) -> bool {
        true
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let cond = truth(required(inputs, 0)?, "input 0 (cond)")?;
        let captured: Vec<&Tensor> = inputs[1..].iter().flatten().copied().collect();
        let branch = if cond {
            &self.then_branch
        } else {
            &self.else_branch
        };
        branch.run(&captured)
    }

    fn is_foldable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::binary::{Binary, BinaryKind};
    use crate::Graph;
    use std::sync::Arc;

    /// A branch computing `x op y` over two captured values.
    fn branch(kind: BinaryKind) -> Subgraph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        let y = g.add_value("y");
        let z = g.add_value("z");
        g.inputs = vec![x, y];
        g.add_node(
            "op",
            Arc::new(Binary::new(kind)),
            vec![Some(x), Some(y)],
            vec![z],
        )
        .unwrap();
        g.outputs = vec![z];
        Subgraph::new(g, 0)
    }

    #[test]
    fn the_condition_picks_the_branch() {
        let op = If {
            then_branch: branch(BinaryKind::Add),
            else_branch: branch(BinaryKind::Mul),
        };
        let x = Tensor::from_vec(&[2], vec![2.0f32, 3.0]).unwrap();
        let y = Tensor::from_vec(&[2], vec![4.0f32, 5.0]).unwrap();
        for (c, want) in [(true, [6.0, 8.0]), (false, [8.0, 15.0])] {
            let cond = Tensor::from_bools(&[], &[c]).unwrap();
            let out = op.eval(&[Some(&cond), Some(&x), Some(&y)]).unwrap();
            assert_eq!(out[0].to_f64_vec(), want);
        }
        let two = Tensor::from_bools(&[2], &[true, false]).unwrap();
        assert!(op.eval(&[Some(&two), Some(&x), Some(&y)]).is_err());
        let cond = Tensor::from_bools(&[], &[true]).unwrap();
        assert!(op.eval(&[Some(&cond), Some(&x)]).is_err());
    }
}
