//! The memory cap (`SessionOptions::max_memory`) checked at prerun, and the FLOP counts.

use ferrolite_core::plan::Plan;
use ferrolite_core::{Error, Graph, Node, Result};

/// Refuses a plan whose weights, arena, kernels' scratch (at `threads` workers) and prepacked
/// weights together pass the cap, and limits each tensor of its runs to the cap (the sizes
/// only known at run time).
pub(super) fn check_plan_memory(
    graph: &Graph,
    plan: &mut Plan,
    threads: usize,
    limit: Option<u64>,
) -> Result<()> {
    let Some(limit) = limit else { return Ok(()) };
    plan.limit_tensors(usize::try_from(limit).unwrap_or(usize::MAX))?;
    let memory = plan.memory_stats(threads);
    let needed = weight_bytes(graph)
        .saturating_add(memory.arena_bytes)
        .saturating_add(memory.scratch.bytes(threads))
        .saturating_add(plan.prepacked_bytes());
    if needed > limit {
        return Err(Error::MemoryLimit {
            what: "the plan (weights, arena, kernels' scratch and prepacked weights)".into(),
            needed,
            limit,
        });
    }
    Ok(())
}

/// Bytes of the graph's constants (weights and folded values).
fn weight_bytes(graph: &Graph) -> u64 {
    graph
        .values
        .iter()
        .filter_map(|v| v.constant.as_ref())
        .map(|t| t.byte_len() as u64)
        .sum()
}

/// Refuses, before anything is prepacked or allocated, a plan with a tensor over the per-tensor
/// limit ([`ferrolite_core::tensor::MAX_TENSOR_BYTES`]) and, with a memory cap, one whose
/// weights, or any one tensor with them, would not fit. Shapes computed from the file (by
/// ConstantOfShape, Expand, Tile, Range, Resize, Pad, ...) are known here, after inference.
pub(super) fn check_tensor_sizes(graph: &Graph, cap: Option<u64>) -> Result<()> {
    let weights = weight_bytes(graph);
    if let Some(cap) = cap.filter(|&cap| weights > cap) {
        return Err(Error::MemoryLimit {
            what: "the weights".into(),
            needed: weights,
            limit: cap,
        });
    }
    let per_tensor = ferrolite_core::tensor::MAX_TENSOR_BYTES as u64;
    for v in &graph.values {
        let Some(info) = &v.info else { continue };
        if v.constant.is_some() {
            continue;
        }
        let bytes = info.byte_size() as u64;
        let over = if bytes > per_tensor {
            Some((bytes, per_tensor, ""))
        } else {
            cap.map(|cap| (weights.saturating_add(bytes), cap, " with the weights"))
                .filter(|&(needed, cap, _)| needed > cap)
        };
        if let Some((needed, limit, with)) = over {
            let producer = v
                .producer
                .and_then(|p| graph.nodes.get(p.0))
                .map(|n| format!(" (output of node '{}', {})", n.name, n.op.name()));
            return Err(Error::MemoryLimit {
                what: format!(
                    "tensor '{}' {}{:?}{}{with}",
                    v.name,
                    info.dtype,
                    info.shape,
                    producer.unwrap_or_default()
                ),
                needed,
                limit,
            });
        }
    }
    Ok(())
}

/// Sum of the ops' FLOP estimates over a graph whose shapes are inferred.
pub fn graph_flops(graph: &Graph) -> u64 {
    graph.flops()
}

/// The FLOP estimate of one node of `graph` (0 when its shapes are not known at prerun).
pub fn node_flops(graph: &Graph, n: &Node) -> u64 {
    graph.node_flops(n)
}
