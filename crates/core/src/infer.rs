//! Whole-graph shape and dtype inference with constant folding.
//!
//! Given concrete input types, every node is checked against its prototype and its outputs are
//! inferred in topological order. Nodes whose inputs are all constant are evaluated with the
//! reference implementation and replaced by their results, which is how shape-computing chains
//! (Shape → Gather → Concat → Reshape) become constants before anything runs.
//!
//! A node whose value-dependent input is not constant after folding (or that reads such a node's
//! output) is *dynamic*: its output shapes are inferred at run time from the actual tensors.

use crate::op::{Arity, InferCtx, InferInput};
use crate::{Error, Graph, Node, Op, OpError, OpResult, Result, Tensor, TensorInfo};
use std::collections::HashSet;

/// Checks input count and dtypes of a node against its op's prototype.
pub fn check_prototype(op: &dyn Op, inputs: &[Option<InferInput>]) -> OpResult<()> {
    let proto = op.prototype();
    let mut i = 0;
    for spec in proto.inputs {
        match spec.arity {
            Arity::Required | Arity::Optional => {
                let given = inputs.get(i).copied().flatten();
                match given {
                    None if spec.arity == Arity::Required => {
                        return Err(OpError(format!(
                            "input {i} ({}) is required but missing",
                            spec.name
                        )))
                    }
                    None => {}
                    Some(x) => check_dtype(i, spec.name, spec.dtypes, x.dtype)?,
                }
                i += 1;
            }
            Arity::Variadic { min } => {
                let rest = inputs.len().saturating_sub(i);
                if rest < min {
                    return Err(OpError(format!(
                        "input {} needs at least {min} tensor(s), got {rest}",
                        spec.name
                    )));
                }
                for (k, x) in inputs[i..].iter().enumerate() {
                    match x {
                        Some(x) => check_dtype(i + k, spec.name, spec.dtypes, x.dtype)?,
                        None => {
                            return Err(OpError(format!(
                                "input {} ({}) of a variadic list is missing",
                                i + k,
                                spec.name
                            )))
                        }
                    }
                }
                i = inputs.len();
            }
        }
    }
    if inputs.len() > i {
        return Err(OpError(format!(
            "takes at most {i} input(s), got {}",
            inputs.len()
        )));
    }
    Ok(())
}

fn check_dtype(i: usize, name: &str, allowed: crate::DTypeSet, got: crate::DType) -> OpResult<()> {
    if allowed.contains(got) {
        Ok(())
    } else {
        Err(OpError(format!(
            "input {i} ({name}): expected dtype in {allowed}, got {got}"
        )))
    }
}

/// Wraps an op error with the node's name and op type.
pub fn node_error(node: &Node, e: impl std::fmt::Display) -> Error {
    Error::Node {
        node: node.name.clone(),
        op: node.op.name().to_string(),
        message: e.to_string(),
    }
}

/// Infers and checks the outputs of one node from its inputs (values given where known), and
/// checks the result against the node's output count.
pub fn infer_node(node: &Node, inputs: &[Option<InferInput>]) -> Result<Vec<TensorInfo>> {
    check_prototype(node.op.as_ref(), inputs).map_err(|e| node_error(node, e))?;
    let ctx = InferCtx { inputs };
    let outs = node.op.infer(&ctx).map_err(|e| node_error(node, e))?;
    if outs.len() != node.outputs.len() {
        return Err(node_error(
            node,
            format!(
                "the op yields {} output(s) but the node has {}",
                outs.len(),
                node.outputs.len()
            ),
        ));
    }
    Ok(outs)
}

/// Largest tensor (in bytes) that folding may create by default; bigger results stay computed
/// at run time so that a model cannot blow up prerun memory through folding.
pub const MAX_FOLD_BYTES: usize = 64 << 20;

/// Runs inference over the graph for concrete graph-input types (in `graph.inputs` order).
/// Folds constant subgraphs, removes the folded nodes, and returns the set of dynamic nodes (by
/// name; see the module docs).
pub fn infer_graph(graph: &mut Graph, input_types: &[TensorInfo]) -> Result<HashSet<String>> {
    infer_graph_folding(graph, input_types, MAX_FOLD_BYTES)
}

/// [`infer_graph`] folding only results of at most `max_fold_bytes` each (a session with a
/// memory cap folds nothing bigger than its cap).
pub fn infer_graph_folding(
    graph: &mut Graph,
    input_types: &[TensorInfo],
    max_fold_bytes: usize,
) -> Result<HashSet<String>> {
    if input_types.len() != graph.inputs.len() {
        return Err(Error::Other(format!(
            "the graph has {} inputs, {} types given",
            graph.inputs.len(),
            input_types.len()
        )));
    }
    for (&id, t) in graph.inputs.clone().iter().zip(input_types) {
        graph.value_mut(id).info = Some(t.clone());
    }
    // Forget stale results of earlier inference (non-constant values).
    let inputs: HashSet<_> = graph.inputs.iter().copied().collect();
    for (i, v) in graph.values.iter_mut().enumerate() {
        if v.constant.is_none() && !inputs.contains(&crate::ValueId(i)) {
            v.info = None;
        }
    }

    let mut dynamic = HashSet::new();
    let mut folded = vec![false; graph.nodes.len()];
    // Indexed: the body writes to `graph.values` while reading `graph.nodes`.
    #[allow(clippy::needless_range_loop)]
    for ni in 0..graph.nodes.len() {
        let node = &graph.nodes[ni];
        let mut infer_inputs: Vec<Option<InferInput>> = Vec::with_capacity(node.inputs.len());
        let mut unknown = false;
        for slot in &node.inputs {
            match slot {
                None => infer_inputs.push(None),
                Some(v) => {
                    let val = graph.value(*v);
                    match &val.info {
                        Some(info) => infer_inputs.push(Some(InferInput {
                            dtype: info.dtype,
                            shape: &info.shape,
                            value: val.constant.as_ref(),
                        })),
                        None => {
                            unknown = true;
                            infer_inputs.push(None);
                        }
                    }
                }
            }
        }
        let value_missing = node
            .op
            .prototype()
            .value_inputs
            .iter()
            .any(|&k| matches!(infer_inputs.get(k), Some(Some(x)) if x.value.is_none()));
        if unknown || value_missing || node.op.shapes_known_by_running() {
            dynamic.insert(node.name.clone());
            continue;
        }
        let infos = infer_node(node, &infer_inputs)?;
        let all_const = infer_inputs.iter().flatten().all(|x| x.value.is_some());
        let small = infos.iter().all(|i| i.byte_size() <= max_fold_bytes);
        let outputs = node.outputs.clone();
        let from_shapes = node
            .op
            .fold_from_shapes(&InferCtx {
                inputs: &infer_inputs,
            })
            .transpose()
            .map_err(|e| node_error(node, e))?;
        let results = if from_shapes.is_some() {
            from_shapes
        } else if all_const && small && node.op.is_foldable() {
            let args: Vec<Option<&Tensor>> = infer_inputs
                .iter()
                .map(|x| x.and_then(|x| x.value))
                .collect();
            Some(node.op.eval(&args).map_err(|e| node_error(node, e))?)
        } else {
            None
        };
        if let Some(results) = results {
            check_results(node, &infos, &results)?;
            for (o, t) in outputs.iter().zip(results) {
                let v = graph.value_mut(*o);
                v.constant = Some(t);
                v.producer = None;
            }
            folded[ni] = true;
        }
        for (o, info) in outputs.iter().zip(infos) {
            graph.value_mut(*o).info = Some(info);
        }
    }
    let mut i = 0;
    graph.nodes.retain(|_| {
        i += 1;
        !folded[i - 1]
    });
    graph.sort()?;
    Ok(dynamic)
}

/// Checks that evaluated outputs match the inferred types.
pub fn check_results(node: &Node, infos: &[TensorInfo], results: &[Tensor]) -> Result<()> {
    if results.len() != infos.len() {
        return Err(node_error(
            node,
            format!(
                "produced {} outputs, expected {}",
                results.len(),
                infos.len()
            ),
        ));
    }
    for (k, (t, info)) in results.iter().zip(infos).enumerate() {
        if t.dtype() != info.dtype || t.shape() != info.shape.as_slice() {
            return Err(node_error(
                node,
                format!(
                    "output {k} is {}{:?}, but inference said {}{:?}",
                    t.dtype(),
                    t.shape(),
                    info.dtype,
                    info.shape
                ),
            ));
        }
    }
    Ok(())
}
