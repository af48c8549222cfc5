//! `lookup-int8`: an 8-bit value computed element by element from one other 8-bit value, through
//! any chain of element-wise ops, has only 256 possible results: it becomes one
//! [`QLinearLookup`] whose table is the chain itself evaluated on all 256 inputs.
//!
//! The quantized hard-swish is the common case: `x * HardSigmoid(x)` as DequantizeLinear ->
//! HardSigmoid -> QuantizeLinear -> QLinearMul (onnxruntime's QOperator form) or
//! DequantizeLinear -> HardSwish -> QuantizeLinear (QDQ). Each element then costs one table
//! read instead of four passes, and since the table is filled by the same reference ops on
//! the same values, the result is the same bit for bit.

use super::rewrite::{constant, info};
use super::Pass;
use crate::ops::quant::QLinearLookup;
use crate::{DType, Graph, Node, Result, Tensor, ValueId};
use std::collections::HashMap;
use std::sync::Arc;

pub struct LookupInt8;

/// The element-wise ops a chain may pass through (with their other operands single constant
/// values: a scale, a zero point, a clip bound).
const ELEMENTWISE: [&str; 25] = [
    "DequantizeLinear",
    "QuantizeLinear",
    "QdqBinary",
    "QLinearAdd",
    "QLinearMul",
    "QLinearSigmoid",
    "QLinearLeakyRelu",
    "QLinearLookup",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Relu",
    "Clip",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Tanh",
    "Neg",
    "Abs",
    "Exp",
    "Erf",
    "Gelu",
    "Softplus",
];

/// The most nodes one chain may hold (the search stays local).
const MAX_CHAIN: usize = 16;

fn is_8bit(d: DType) -> bool {
    matches!(d, DType::U8 | DType::I8)
}

/// The chain of nodes ending at node `end` (indices, ascending) and its one 8-bit input, when
/// every node is element-wise over `shape` and every other operand a single constant.
fn chain(
    g: &Graph,
    producer: &HashMap<ValueId, usize>,
    end: usize,
) -> Option<(Vec<usize>, ValueId)> {
    let y = *g.nodes[end].outputs.first()?;
    let shape = &info(g, y)?.shape;
    let mut nodes = vec![end];
    let mut leaf: Option<ValueId> = None;
    let mut stack = vec![end];
    while let Some(i) = stack.pop() {
        let n = &g.nodes[i];
        if n.outputs.len() != 1 || !ELEMENTWISE.contains(&n.op.name()) {
            return None;
        }
        for v in n.inputs.iter().flatten() {
            let vi = info(g, *v)?;
            if vi.shape.iter().product::<usize>() == 1 && vi.shape != *shape {
                // A scale, a zero point, a bound: the table bakes it in.
                constant(g, *v)?;
                continue;
            }
            if vi.shape != *shape {
                return None;
            }
            match producer.get(v) {
                Some(&p) if ELEMENTWISE.contains(&g.nodes[p].op.name()) => {
                    if !nodes.contains(&p) {
                        if nodes.len() == MAX_CHAIN {
                            return None;
                        }
                        nodes.push(p);
                        stack.push(p);
                    }
                }
                _ => {
                    if !is_8bit(vi.dtype) || leaf.is_some_and(|l| l != *v) {
                        return None;
                    }
                    leaf = Some(*v);
                }
            }
        }
    }
    nodes.sort_unstable();
    Some((nodes, leaf?))
}

/// The chain's output for every byte of its input `x` (of type `dtype`), run through the
/// nodes' reference implementations.
fn table(g: &Graph, nodes: &[usize], x: ValueId, dtype: DType, rank: usize) -> Option<[u8; 256]> {
    let mut shape = vec![1; rank.max(1)];
    *shape.last_mut()? = 256;
    let all: Vec<u8> = (0..=255).collect();
    let mut values: HashMap<ValueId, Tensor> = HashMap::new();
    values.insert(x, Tensor::from_bytes(dtype, &shape, &all).ok()?);
    for &i in nodes {
        let n = &g.nodes[i];
        let inputs: Vec<Option<&Tensor>> = n
            .inputs
            .iter()
            .map(|v| v.and_then(|v| values.get(&v).or_else(|| constant(g, v))))
            .collect();
        let out = n.op.eval(&inputs).ok()?.into_iter().next()?;
        values.insert(n.outputs[0], out);
    }
    let y = values.get(&g.nodes[*nodes.last()?].outputs[0])?;
    (is_8bit(y.dtype()) && y.numel() == 256).then(|| y.bytes().try_into().ok())?
}

impl Pass for LookupInt8 {
    fn name(&self) -> &'static str {
        "lookup-int8"
    }

    fn description(&self) -> &'static str {
        "replace an 8-bit value computed element by element from one other 8-bit value (a quantized hard-swish, say) by a 256-entry table"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        let mut changed = false;
        // A rewrite keeps every node's place and outputs (only the inputs of the node it
        // replaces change), so the producers stay as found here.
        let producer: HashMap<ValueId, usize> = graph
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| n.outputs.iter().map(move |&v| (v, i)))
            .collect();
        for end in 0..graph.nodes.len() {
            let Some(&y) = graph.nodes[end].outputs.first() else {
                continue;
            };
            let Some(yi) = info(graph, y) else { continue };
            if !is_8bit(yi.dtype) || graph.nodes[end].outputs.len() != 1 {
                continue;
            }
            let (dtype, rank) = (yi.dtype, yi.shape.len());
            let Some((nodes, x)) = chain(graph, &producer, end) else {
                continue;
            };
            // One node is a table already (or as cheap as one).
            if nodes.len() < 2 {
                continue;
            }
            let Some(x_dtype) = info(graph, x).map(|i| i.dtype) else {
                continue;
            };
            let Some(table) = table(graph, &nodes, x, x_dtype, rank) else {
                continue;
            };
            let name = graph.nodes[end].name.clone();
            graph.nodes[end] = Node {
                name,
                op: Arc::new(QLinearLookup {
                    table: Arc::new(table),
                    output: dtype,
                }),
                inputs: vec![Some(x)],
                outputs: vec![y],
            };
            changed = true;
        }
        if changed {
            graph.remove_dead_nodes();
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::binary::{Binary, BinaryKind};
    use crate::ops::elementwise::unary::{Unary, UnaryKind};
    use crate::ops::quant::{
        DequantizeLinear, QLinearAdd, QLinearMul, QLinearSigmoid, QuantizeLinear,
    };
    use crate::passes::testutil::check_fusion;
    use crate::Op;

    /// Every byte value, four times over, as `dtype` of shape `[1, 4, 8, 8]`.
    fn every_byte(dtype: DType) -> Tensor {
        let v: Vec<u8> = (0..256).map(|i| i as u8).collect();
        Tensor::from_bytes(dtype, &[1, 4, 8, 8], &v).unwrap()
    }

    fn node(g: &mut Graph, name: &str, op: impl Op + 'static, inputs: &[ValueId]) -> ValueId {
        let inputs = inputs.iter().map(|&v| Some(v)).collect();
        g.add_op(name, Arc::new(op), inputs, 1).unwrap()[0]
    }

    /// `x` of `dtype` dequantized, then `f`, then quantized to `dtype`.
    fn qdq(
        g: &mut Graph,
        x: ValueId,
        dtype: DType,
        f: &dyn Fn(&mut Graph, ValueId) -> ValueId,
    ) -> ValueId {
        let zero = |g: &mut Graph, n: &str, v: u8| {
            let t = Tensor::from_bytes(dtype, &[], &[v]).unwrap();
            g.add_constant(n, t)
        };
        let (s, z) = (
            g.add_constant("s", Tensor::scalar(0.05f32)),
            zero(g, "z", 3),
        );
        let d = node(g, "dq", DequantizeLinear::default(), &[x, s, z]);
        let h = f(g, d);
        let (s2, z2) = (
            g.add_constant("s2", Tensor::scalar(0.02f32)),
            zero(g, "z2", 7),
        );
        node(g, "q", QuantizeLinear::default(), &[h, s2, z2])
    }

    fn hard_sigmoid(g: &mut Graph, v: ValueId) -> ValueId {
        let kind = UnaryKind::HARD_SIGMOID;
        node(g, "hs", Unary { kind }, &[v])
    }

    #[test]
    fn qoperator_hard_swish_becomes_one_table() {
        // x * HardSigmoid(x) as onnxruntime's QOperator form writes it.
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let h = qdq(&mut g, x, DType::U8, &hard_sigmoid);
        let (s, z) = (
            g.add_constant("ms", Tensor::scalar(0.05f32)),
            g.add_constant("mz", Tensor::scalar(3u8)),
        );
        let (s2, z2) = (
            g.add_constant("ms2", Tensor::scalar(0.02f32)),
            g.add_constant("mz2", Tensor::scalar(7u8)),
        );
        let (ys, yz) = (
            g.add_constant("ys", Tensor::scalar(0.03f32)),
            g.add_constant("yz", Tensor::scalar(128u8)),
        );
        let y = node(&mut g, "mul", QLinearMul, &[x, s, z, h, s2, z2, ys, yz]);
        g.outputs.push(y);
        // Same output for every input byte, as one table.
        check_fusion(&g, &every_byte(DType::U8), &["QLinearLookup"]);
    }

    #[test]
    fn qdq_chain_becomes_one_table() {
        // DequantizeLinear -> x * HardSigmoid(x) -> Add 1 -> QuantizeLinear, on int8.
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let f = |g: &mut Graph, d: ValueId| {
            let h = hard_sigmoid(g, d);
            let m = node(g, "mul", Binary::new(BinaryKind::Mul), &[d, h]);
            let one = g.add_constant("one", Tensor::scalar(1.0f32));
            node(g, "add", Binary::new(BinaryKind::Add), &[m, one])
        };
        let y = qdq(&mut g, x, DType::I8, &f);
        g.outputs.push(y);
        check_fusion(&g, &every_byte(DType::I8), &["QLinearLookup"]);
    }

    #[test]
    fn two_inputs_stay() {
        // The sum of x and a constant tensor depends on two bytes per element: no table.
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let other = g.add_constant("c", every_byte(DType::U8));
        let (s, z) = (
            g.add_constant("s", Tensor::scalar(0.05f32)),
            g.add_constant("z", Tensor::scalar(3u8)),
        );
        let y = node(&mut g, "add", QLinearAdd, &[x, s, z, other, s, z, s, z]);
        let y = node(&mut g, "sigmoid", QLinearSigmoid, &[y, s, z, s, z]);
        g.outputs.push(y);
        check_fusion(
            &g,
            &every_byte(DType::U8),
            &["QLinearAdd", "QLinearSigmoid"],
        );
    }
}
