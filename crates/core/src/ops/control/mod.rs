//! Control flow: If, Loop, Scan and SequenceMap, whose attributes are graphs (subgraphs) run by the op.
//!
//! A subgraph reads its formal inputs (a Loop body's iteration number, condition and carried
//! values; a Scan body's states and slices) and may read values of the graphs around it. The
//! frontend turns those outer-scope reads into explicit inputs: each captured value becomes a
//! trailing input of the node and a trailing input of the subgraph, so a subgraph is a closed
//! [`Graph`] and the plan sees every dependency as an ordinary edge.
//!
//! Output shapes of these ops depend on values (the condition, the trip count, what the body
//! computes), so their nodes are dynamic steps ([`crate::Op::shapes_known_by_running`]): their
//! outputs are typed by what they produce. A subgraph is inferred and planned once per signature
//! of its input types, and that plan is reused for later runs and iterations with the same
//! types (a loop whose carried values keep their shapes plans its body once).

pub mod if_op;
pub mod loop_op;
pub mod scan;
pub mod sequence_map;

use crate::infer::infer_graph;
use crate::plan::Plan;
use crate::{op_bail, DType, Graph, OpError, OpResult, Tensor, TensorInfo};
use std::sync::{Arc, Mutex};

/// Applies a session's memory cap of `max_bytes` to the control flow of `graph`, at any depth
/// of subgraphs: what every Loop may hold in carried and scanned values (a loop that keeps
/// growing its values stops with an error there rather than at [`loop_op::MAX_BYTES`]), and
/// every tensor a subgraph's run makes ([`Plan::limit_tensors`]).
pub fn apply_memory_cap(graph: &mut Graph, max_bytes: usize) {
    let cap = |sub: &mut Subgraph| {
        sub.tensor_limit = sub.tensor_limit.min(max_bytes);
        apply_memory_cap(&mut sub.graph, max_bytes)
    };
    for node in &mut graph.nodes {
        let any = node.op.as_any();
        let capped: Arc<dyn crate::Op> = if let Some(l) = any.downcast_ref::<loop_op::Loop>() {
            let mut l = l.clone();
            l.max_bytes = l.max_bytes.min(max_bytes);
            cap(&mut l.body);
            Arc::new(l)
        } else if let Some(i) = any.downcast_ref::<if_op::If>() {
            let mut i = i.clone();
            cap(&mut i.then_branch);
            cap(&mut i.else_branch);
            Arc::new(i)
        } else if let Some(s) = any.downcast_ref::<scan::Scan>() {
            let mut s = s.clone();
            cap(&mut s.body);
            Arc::new(s)
        } else if let Some(m) = any.downcast_ref::<sequence_map::SequenceMap>() {
            let mut m = m.clone();
            cap(&mut m.body);
            Arc::new(m)
        } else {
            continue;
        };
        node.op = capped;
    }
}

/// Plans kept per subgraph: enough for the few signatures a body sees (a loop whose carried
/// values grow gets a new signature every iteration; the oldest plans are dropped).
const PLANS_KEPT: usize = 8;

/// A graph attribute: a closed graph (formal inputs, then captured outer values) with the
/// plans made for it.
pub struct Subgraph {
    pub graph: Graph,
    /// How many of the graph's inputs are formal; the rest are captured outer values.
    pub formal_inputs: usize,
    plans: Mutex<Vec<(Vec<TensorInfo>, Arc<Plan>)>>,
    /// The largest tensor a run of the graph may make ([`apply_memory_cap`]).
    tensor_limit: usize,
}

impl Subgraph {
    pub fn new(graph: Graph, formal_inputs: usize) -> Subgraph {
        Subgraph {
            graph,
            formal_inputs,
            plans: Mutex::new(Vec::new()),
            tensor_limit: crate::tensor::MAX_TENSOR_BYTES,
        }
    }

    /// How many captured outer values the graph reads (its trailing inputs).
    pub fn captured(&self) -> usize {
        self.graph.inputs.len() - self.formal_inputs
    }

    pub fn outputs(&self) -> usize {
        self.graph.outputs.len()
    }

    /// An empty tensor (shape `[0]`) of the type the graph declares for output `k` (f32 when it
    /// declares none): a scan output after no iteration.
    pub fn empty_output(&self, k: usize) -> OpResult<Tensor> {
        let dtype = self
            .graph
            .outputs
            .get(k)
            .and_then(|&o| self.graph.value(o).declared.as_ref())
            .map_or(DType::F32, |d| d.dtype);
        Ok(Tensor::zeros(dtype, &[0])?)
    }

    /// Runs the graph on its inputs (formal, then captured) with the reference kernels,
    /// planning it for these input types unless a plan for them is kept.
    pub fn run(&self, inputs: &[&Tensor]) -> OpResult<Vec<Tensor>> {
        if inputs.len() != self.graph.inputs.len() {
            crate::op_bail!(
                "the subgraph takes {} inputs, {} given",
                self.graph.inputs.len(),
                inputs.len()
            );
        }
        let types: Vec<TensorInfo> = inputs.iter().map(|t| TensorInfo::of(t)).collect();
        let plan = self.plan_for(&types)?;
        plan.run(inputs)
            .map_err(|e| OpError(format!("in the subgraph: {e}")))
    }

    fn plan_for(&self, types: &[TensorInfo]) -> OpResult<Arc<Plan>> {
        let kept = |plans: &Vec<(Vec<TensorInfo>, Arc<Plan>)>| {
            plans
                .iter()
                .find(|(t, _)| t.as_slice() == types)
                .map(|(_, p)| p.clone())
        };
        if let Some(p) = kept(&*self.plans.lock().map_err(poisoned)?) {
            return Ok(p);
        }
        let mut graph = self.graph.clone();
        let dynamic =
            infer_graph(&mut graph, types).map_err(|e| OpError(format!("in the subgraph: {e}")))?;
        let mut plan = Plan::build(&graph, &dynamic, None)
            .map_err(|e| OpError(format!("in the subgraph: {e}")))?;
        plan.limit_tensors(self.tensor_limit)
            .map_err(|e| OpError(format!("in the subgraph: {e}")))?;
        let plan = Arc::new(plan);
        let mut plans = self.plans.lock().map_err(poisoned)?;
        if plans.len() >= PLANS_KEPT {
            plans.remove(0);
        }
        plans.push((types.to_vec(), plan.clone()));
        Ok(plan)
    }
}

fn poisoned<T>(_: T) -> OpError {
    OpError("a subgraph's plan cache is poisoned".into())
}

impl Clone for Subgraph {
    fn clone(&self) -> Self {
        let mut copy = Subgraph::new(self.graph.clone(), self.formal_inputs);
        copy.tensor_limit = self.tensor_limit;
        copy
    }
}

impl std::fmt::Debug for Subgraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Subgraph({} nodes, {} formal + {} captured inputs, {} outputs)",
            self.graph.nodes.len(),
            self.formal_inputs,
            self.captured(),
            self.outputs()
        )
    }
}

/// A scalar (or one-element) boolean, such as a condition.
pub(crate) fn truth(t: &Tensor, what: &str) -> OpResult<bool> {
    crate::op_ensure!(
        t.numel() == 1,
        "{what} must hold one value, has shape {:?}",
        t.shape()
    );
    match t.to_f64_vec().first() {
        Some(v) => Ok(*v != 0.0),
        None => op_bail!("{what} must be a number or a bool, is {}", t.dtype()),
    }
}

/// Bytes of one step along `axis`, and how many such runs there are before it.
fn split_at_axis(shape: &[usize], axis: usize, dtype: DType) -> (usize, usize) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product::<usize>() * dtype.size();
    (outer, inner)
}

/// Entry `index` of `t` along `axis`, with that axis removed.
pub(crate) fn take_along(t: &Tensor, axis: usize, index: usize) -> OpResult<Tensor> {
    let shape = t.shape();
    crate::op_ensure!(
        axis < shape.len() && index < shape[axis],
        "index {index} on axis {axis} is outside shape {shape:?}"
    );
    let (outer, inner) = split_at_axis(shape, axis, t.dtype());
    let bytes = t.bytes();
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        let at = (o * shape[axis] + index) * inner;
        out.extend_from_slice(&bytes[at..at + inner]);
    }
    let mut rest = shape.to_vec();
    rest.remove(axis);
    Ok(Tensor::from_bytes(t.dtype(), &rest, &out)?)
}

/// Stacks tensors of one type along a new axis `axis`.
pub(crate) fn stack_along(parts: &[Tensor], axis: usize) -> OpResult<Tensor> {
    let Some(first) = parts.first() else {
        crate::op_bail!("nothing to stack");
    };
    for p in parts {
        crate::op_ensure!(
            p.dtype() == first.dtype() && p.shape() == first.shape(),
            "the values to stack differ: {:?} {:?} and {:?} {:?} (every iteration must give the same type)",
            first.dtype(),
            first.shape(),
            p.dtype(),
            p.shape()
        );
    }
    crate::op_ensure!(
        axis <= first.rank(),
        "axis {axis} is outside rank {} + 1",
        first.rank()
    );
    let mut shape = first.shape().to_vec();
    shape.insert(axis, parts.len());
    let (outer, _) = split_at_axis(&shape, axis, first.dtype());
    let inner = first.byte_len() / outer.max(1);
    let mut out = Vec::with_capacity(first.byte_len() * parts.len());
    for o in 0..outer {
        for p in parts {
            out.extend_from_slice(&p.bytes()[o * inner..(o + 1) * inner]);
        }
    }
    Ok(Tensor::from_bytes(first.dtype(), &shape, &out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_and_stack_are_inverse_on_every_axis() {
        let t = Tensor::from_vec(&[2, 3, 4], (0..24).map(|v| v as f32).collect()).unwrap();
        for axis in 0..3 {
            let parts: Vec<Tensor> = (0..t.shape()[axis])
                .map(|i| take_along(&t, axis, i).unwrap())
                .collect();
            assert_eq!(
                stack_along(&parts, axis).unwrap().to_f64_vec(),
                t.to_f64_vec()
            );
        }
        // Entry 1 along axis 1 of [2,3,4]: rows 4..8 and 16..20.
        let mid = take_along(&t, 1, 1).unwrap();
        assert_eq!(mid.shape(), &[2, 4]);
        assert_eq!(
            mid.to_f64_vec(),
            vec![4.0, 5.0, 6.0, 7.0, 16.0, 17.0, 18.0, 19.0]
        );
        assert!(take_along(&t, 1, 3).is_err());
        assert!(stack_along(&[], 0).is_err());
    }
}
