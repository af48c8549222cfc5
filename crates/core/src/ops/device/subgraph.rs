//! Subgraph: nodes the partition pass placed on one device, kept as a graph of canonical ops.
//!
//! The inner graph starts with a CopyToDevice node per input and ends with a CopyToHost node per
//! output ([`super::copy`]). A device compiles the inner graph into its own executable; when it
//! cannot, the session runs the same inner graph on the CPU kernels. The reference evaluation
//! here runs it on the reference implementations.

use crate::op::{output, variadic};
use crate::plan::Plan;
use crate::{DTypeSet, Graph, InferCtx, Op, OpResult, Prototype, Tensor, TensorInfo};
use std::collections::HashSet;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct Subgraph {
    /// The device the partition pass placed it on.
    pub device: String,
    /// The placed nodes, with inferred types: inputs and outputs correspond to the node's.
    pub graph: Arc<Graph>,
}

static PROTOTYPE: Prototype = Prototype {
    inputs: &[variadic("inputs", DTypeSet::ANY, 0)],
    outputs: &[output("outputs")],
    value_inputs: &[],
};

impl Op for Subgraph {
    fn name(&self) -> &'static str {
        "Subgraph"
    }

    fn prototype(&self) -> &'static Prototype {
        &PROTOTYPE
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let g = &self.graph;
        crate::op_ensure!(
            ctx.len() == g.inputs.len(),
            "the subgraph has {} inputs, {} given",
            g.inputs.len(),
            ctx.len()
        );
        for (i, &v) in g.inputs.iter().enumerate() {
            let want = g.value(v).info.as_ref();
            let got = ctx.like(i)?;
            crate::op_ensure!(
                want == Some(&got),
                "input {i} ('{}') is {:?}, the subgraph was built for {:?}",
                g.value(v).name,
                got,
                want
            );
        }
        g.outputs
            .iter()
            .map(|&v| {
                g.value(v).info.clone().ok_or_else(|| {
                    crate::OpError(format!("output '{}' has no type", g.value(v).name))
                })
            })
            .collect()
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let plan = Plan::build(&self.graph, &HashSet::new(), None)?;
        let ins: Vec<&Tensor> = inputs
            .iter()
            .enumerate()
            .map(|(i, x)| x.ok_or_else(|| crate::OpError(format!("input {i} is missing"))))
            .collect::<OpResult<_>>()?;
        Ok(plan.run(&ins)?)
    }

    fn flops(&self, _inputs: &[Option<TensorInfo>], _outputs: &[TensorInfo]) -> u64 {
        self.graph.flops()
    }

    fn is_foldable(&self) -> bool {
        false
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
