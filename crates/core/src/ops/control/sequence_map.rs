//! SequenceMap: runs its body once per item of the input sequence, and gathers each body
//! output into a sequence.
//!
//! Inputs: the sequence, then additional inputs (sequences of the same length, read item by
//! item, or tensors, passed whole to every run), then the outer values the body captures.

use super::Subgraph;
use crate::op::{input, output, required, variadic, Prototype};
use crate::{op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug)]
pub struct SequenceMap {
    /// Formal inputs: the sequence and the additional inputs; then the captured values.
    pub body: Subgraph,
}

impl Op for SequenceMap {
    op_common!(
        "SequenceMap",
        Prototype {
            inputs: &[
                input("input_sequence", DTypeSet::SEQUENCE),
                variadic("additional_inputs", DTypeSet::VALUE, 0)
            ],
            outputs: &[output("out_sequence")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![
            TensorInfo::new(DType::Sequence, []);
            self.body.outputs()
        ])
    }

    fn is_foldable(&self) -> bool {
        false
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let formal = self.body.formal_inputs;
        op_ensure!(
            inputs.len() == formal + self.body.captured() && formal >= 1,
            "expected {formal} inputs and {} captured values, got {} inputs",
            self.body.captured(),
            inputs.len()
        );
        let args: Vec<&Tensor> = (0..inputs.len())
            .map(|i| required(inputs, i))
            .collect::<OpResult<_>>()?;
        let n = args[0].sequence()?.len();
        for (k, a) in args[1..formal].iter().enumerate() {
            if let Ok(items) = a.sequence() {
                op_ensure!(
                    items.len() == n,
                    "additional input {k} holds {} tensors, the input sequence {n}",
                    items.len()
                );
            }
        }
        let mut gathered: Vec<Vec<Tensor>> = vec![Vec::with_capacity(n); self.body.outputs()];
        for i in 0..n {
            let run_args: Vec<&Tensor> = args
                .iter()
                .enumerate()
                .map(|(k, a)| match a.sequence() {
                    Ok(items) if k < formal => &items[i],
                    _ => *a,
                })
                .collect();
            let outs = self
                .body
                .run(&run_args)
                .map_err(|e| crate::OpError(format!("item {i}: {}", e.0)))?;
            for (list, t) in gathered.iter_mut().zip(outs) {
                list.push(t);
            }
        }
        Ok(gathered.into_iter().map(Tensor::from_sequence).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::binary::{Binary, BinaryKind};
    use crate::Graph;
    use std::sync::Arc;

    /// A body computing `item + y`.
    fn add_body() -> Subgraph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        let y = g.add_value("y");
        let z = g.add_value("z");
        g.inputs = vec![x, y];
        g.add_node(
            "add",
            Arc::new(Binary::new(BinaryKind::Add)),
            vec![Some(x), Some(y)],
            vec![z],
        )
        .unwrap();
        g.outputs = vec![z];
        Subgraph::new(g, 2)
    }

    #[test]
    fn maps_items_with_a_tensor_or_a_second_sequence() {
        let op = SequenceMap { body: add_body() };
        let f = |v: &[f32]| Tensor::from_vec(&[v.len()], v.to_vec()).unwrap();
        let seq = Tensor::from_sequence(vec![f(&[1.0, 2.0]), f(&[3.0])]);
        let y = f(&[10.0]);
        let out = op.eval(&[Some(&seq), Some(&y)]).unwrap();
        let items = out[0].sequence().unwrap();
        assert_eq!(items[0].to_f64_vec(), [11.0, 12.0]);
        assert_eq!(items[1].to_f64_vec(), [13.0]);
        let other = Tensor::from_sequence(vec![f(&[1.0]), f(&[2.0])]);
        let out = op.eval(&[Some(&seq), Some(&other)]).unwrap();
        let items = out[0].sequence().unwrap();
        assert_eq!(items[0].to_f64_vec(), [2.0, 3.0]);
        assert_eq!(items[1].to_f64_vec(), [5.0]);
        let short = Tensor::from_sequence(vec![f(&[1.0])]);
        assert!(op.eval(&[Some(&seq), Some(&short)]).is_err());
        let empty = Tensor::from_sequence(Vec::new());
        let out = op.eval(&[Some(&empty), Some(&y)]).unwrap();
        assert!(out[0].sequence().unwrap().is_empty());
    }
}
