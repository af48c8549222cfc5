//! `lookup-int8`: an 8-bit value computed element by element from one other 8-bit value, through
//! any chain of element-wise ops, has only 256 possible results: it becomes one
//! [`QLinearLookup`] whose table is the chain itself evaluated on all 256 inputs.
//!
//! The quantized hard-swish is the common case: `x * HardSigmoid(x)` as DequantizeLinear ->
//! HardSigmoid -> QuantizeLinear -> QLinearMul (onnxruntime's QOperator form) or
//! DequantizeLinear -> HardSwish -> QuantizeLinear (QDQ). Each element then costs one table
//! read instead of four passes, and since the table is filled by the same reference ops on
//! the same values, the result is the same bit for bit.
//!
//! A chain whose other operands are constants per channel (a BatchNormalization, a Mul by a
//! `[1, C, 1, 1]` scale) becomes a [`QLinearChannelLookup`], a table per channel: a QDQ
//! model's `DequantizeLinear -> BatchNormalization -> QuantizeLinear` (ppocrv4_det's head,
//! after a ConvTranspose) no longer writes two f32 maps.

use super::rewrite::{constant, info};
use super::Pass;
use crate::ops::nn::norm::BatchNorm;
use crate::ops::quant::{QLinearChannelLookup, QLinearLookup};
use crate::{DType, Graph, Node, Op, Result, Tensor, ValueId};
use std::collections::HashMap;
use std::sync::Arc;

pub struct LookupInt8;

/// The most nodes one chain may hold (the search stays local).
const MAX_CHAIN: usize = 16;

fn is_8bit(d: DType) -> bool {
    matches!(d, DType::U8 | DType::I8)
}

/// Whether input `slot` of node `n`, of shape `s`, is a constant per channel (axis 1) of
/// `out`: a BatchNormalization's parameters, or an operand that broadcasts along every other
/// axis (`[1, C, 1, 1]`, `[C, 1, 1]`).
fn per_channel(n: &Node, slot: usize, s: &[usize], out: &[usize]) -> bool {
    if out.len() < 3 || out[1] < 2 {
        return false;
    }
    if n.op.as_any().is::<BatchNorm>() {
        return slot >= 1 && s == [out[1]];
    }
    let Some(pad) = out.len().checked_sub(s.len()) else {
        return false;
    };
    (0..out.len()).all(|k| {
        let d = if k < pad { 1 } else { s[k - pad] };
        d == if k == 1 { out[1] } else { 1 }
    })
}

/// The chain of nodes ending at node `end` (indices, ascending), its one 8-bit input, and
/// whether it reads constants per channel, when every node is element-wise over `shape` and
/// every other operand a constant single value or value per channel. The walk goes back
/// through every element-wise producer, or with `first_8bit` stops at the first 8-bit value
/// of each branch (a chain after an 8-bit op with two data inputs, which the longest walk
/// passes and then finds two inputs).
fn chain(
    g: &Graph,
    producer: &HashMap<ValueId, usize>,
    end: usize,
    first_8bit: bool,
) -> Option<(Vec<usize>, ValueId, bool)> {
    let y = *g.nodes[end].outputs.first()?;
    let shape = &info(g, y)?.shape;
    let mut nodes = vec![end];
    let mut leaf: Option<ValueId> = None;
    let mut channels = false;
    let mut stack = vec![end];
    while let Some(i) = stack.pop() {
        let n = &g.nodes[i];
        // Element-wise ops (`Op::pointwise`), with their other operands single constant
        // values (a scale, a zero point, a clip bound) or constants per channel.
        if n.outputs.len() != 1 || !n.op.pointwise() {
            return None;
        }
        for (slot, v) in n.inputs.iter().enumerate() {
            let Some(v) = v else { continue };
            let vi = info(g, *v)?;
            if vi.shape.iter().product::<usize>() == 1 && vi.shape != *shape {
                // A scale, a zero point, a bound: the table bakes it in.
                constant(g, *v)?;
                continue;
            }
            if per_channel(n, slot, &vi.shape, shape) && constant(g, *v).is_some() {
                // A normalization's or a scaling's value per channel: a table per channel.
                channels = true;
                continue;
            }
            if vi.shape != *shape {
                return None;
            }
            let expand = !(first_8bit && is_8bit(vi.dtype));
            match producer.get(v) {
                Some(&p) if expand && g.nodes[p].op.pointwise() => {
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
    Some((nodes, leaf?, channels))
}

/// The chain's output for every byte of its input `x` (of type `dtype`), run through the
/// nodes' reference implementations: 256 bytes, or with `channels` of them 256 per channel.
fn table(
    g: &Graph,
    nodes: &[usize],
    x: ValueId,
    dtype: DType,
    rank: usize,
    channels: usize,
) -> Option<Vec<u8>> {
    let mut shape = vec![1; rank.max(1)];
    *shape.last_mut()? = 256;
    if channels > 1 {
        shape[1] = channels;
    }
    let all: Vec<u8> = (0..channels.max(1) * 256).map(|i| i as u8).collect();
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
    (is_8bit(y.dtype()) && y.numel() == all.len()).then(|| y.bytes().to_vec())
}

impl Pass for LookupInt8 {
    fn name(&self) -> &'static str {
        "lookup-int8"
    }

    fn description(&self) -> &'static str {
        "replace an 8-bit value computed element by element from one other 8-bit value (a quantized hard-swish, say) by a 256-entry table, or by a table per channel when the chain reads constants per channel (a BatchNormalization)"
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
            let channels = if rank >= 3 { yi.shape[1] } else { 1 };
            let found =
                chain(graph, &producer, end, false).or_else(|| chain(graph, &producer, end, true));
            let Some((nodes, x, per_channel)) = found else {
                continue;
            };
            // One node is a table already (or as cheap as one).
            if nodes.len() < 2 {
                continue;
            }
            let Some(x_dtype) = info(graph, x).map(|i| i.dtype) else {
                continue;
            };
            let channels = if per_channel { channels } else { 1 };
            let Some(table) = table(graph, &nodes, x, x_dtype, rank, channels) else {
                continue;
            };
            let op: Arc<dyn Op> = if per_channel {
                Arc::new(QLinearChannelLookup {
                    tables: table,
                    output: dtype,
                })
            } else {
                let Ok(table) = <[u8; 256]>::try_from(table) else {
                    continue;
                };
                Arc::new(QLinearLookup {
                    table: Arc::new(table),
                    output: dtype,
                })
            };
            let name = graph.nodes[end].name.clone();
            graph.nodes[end] = Node {
                name,
                op,
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

    #[test]
    fn a_chain_after_a_two_input_op_becomes_one_table() {
        // QLinearAdd(x, c) reads two bytes per element, but the quantized HardSigmoid after it
        // reads only its output: that chain is a table.
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let other = g.add_constant("c", every_byte(DType::U8));
        let (s, z) = (
            g.add_constant("as", Tensor::scalar(0.05f32)),
            g.add_constant("az", Tensor::scalar(3u8)),
        );
        let a = node(&mut g, "add", QLinearAdd, &[x, s, z, other, s, z, s, z]);
        let y = qdq(&mut g, a, DType::U8, &hard_sigmoid);
        g.outputs.push(y);
        check_fusion(&g, &every_byte(DType::U8), &["QLinearAdd", "QLinearLookup"]);
    }

    #[test]
    fn batch_norm_between_dq_and_q_becomes_a_table_per_channel() {
        // DequantizeLinear -> BatchNormalization (4 channels) -> Mul by a [1, 4, 1, 1] scale ->
        // QuantizeLinear, on int8: the same bytes from one table per channel.
        use crate::ops::nn::norm::BatchNorm;
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let f = |g: &mut Graph, d: ValueId| {
            let param = |g: &mut Graph, n: &str, v: [f32; 4]| {
                g.add_constant(n, Tensor::from_vec(&[4], v.to_vec()).unwrap())
            };
            let scale = param(g, "gamma", [1.5, -0.7, 0.2, 3.0]);
            let bias = param(g, "beta", [0.1, -2.0, 0.0, 0.5]);
            let mean = param(g, "mean", [0.3, 1.0, -1.0, 0.0]);
            let var = param(g, "var", [2.0, 0.5, 1.0, 4.0]);
            let bn = BatchNorm { epsilon: 1e-5 };
            let b = node(g, "bn", bn, &[d, scale, bias, mean, var]);
            let per = Tensor::from_vec(&[1, 4, 1, 1], vec![0.5f32, 2.0, -1.0, 1.0]).unwrap();
            let per = g.add_constant("per", per);
            node(g, "mul", Binary::new(BinaryKind::Mul), &[b, per])
        };
        let y = qdq(&mut g, x, DType::I8, &f);
        g.outputs.push(y);
        let opt = check_fusion(&g, &every_byte(DType::I8), &["QLinearChannelLookup"]);
        let op = opt.nodes[0]
            .op
            .as_any()
            .downcast_ref::<QLinearChannelLookup>();
        assert_eq!(op.map(|o| o.channels()), Some(4));
    }
}
