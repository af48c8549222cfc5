//! `layout-nchwc`: runs convolutions, pooling and the element-wise ops between them on blocked
//! NCHWc tensors (see [`crate::ops::layout`]), converting at the edges of each blocked region.
//!
//! Walking the nodes in order, a value gets a blocked twin when its producer runs blocked:
//! - a 2-D f32 Conv with constant weights, either ordinary (group 1) with output channels a
//!   multiple of the block, or depthwise with channels a multiple of the block; an ordinary Conv
//!   whose input channels are not a multiple of the block reads its plain input (a network's
//!   first layer);
//! - MaxPool / AveragePool (2-D, without indices), GlobalMaxPool / GlobalAveragePool and
//!   inference BatchNormalization, when their input has a twin;
//! - element-wise ops whose tensor inputs all have twins that broadcast to the output with
//!   whole channels (scalar constants are fine, per-channel constants get a blocked copy), and
//!   Concat over the channel axis of twins.
//!
//! Under AVX2 and the portable kernels, convolutions the CPU runs with Winograd
//! ([`crate::winograd::tile_for`]) stay plain, and so does a network made mostly of them (see
//! [`winograd_share`]). Under AVX-512 the blocked direct convolution (sixteen-lane tiles) is
//! faster than those Winograd kernels on every such convolution measured (resnet18's 3x3
//! convs: 180 against 90-155 GFLOP/s of direct-convolution work), so they are blocked too.
//! This is CPU policy, which is why the pass lives here and runs as one of
//! [`crate::CpuBackend`]'s passes, with the backend's ISA.
//!
//! The block (channels per blocked element) is the ISA's, from its kernel table (eight under
//! every table today): the pass writes it into each `ToNchwc` and `Nchwc` node, so an optimized
//! file states the block it was made for.
//!
//! Any other reader of a value that only exists blocked gets a `FromNchwc` in front; a Conv
//! that needs a blocked input that does not exist gets a `ToNchwc`. Graph outputs keep their
//! plain values.

use crate::winograd::tile_for;
use crate::Isa;
use ferrolite_core::ops::elementwise::binary::Binary;
use ferrolite_core::ops::elementwise::clip::Clip;
use ferrolite_core::ops::elementwise::unary::Unary;
use ferrolite_core::ops::layout::{blocked_shape, Nchwc, ReorderNchwc};
use ferrolite_core::ops::linalg::conv::{Conv, ConvShapes};
use ferrolite_core::ops::nn::norm::BatchNorm;
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};
use ferrolite_core::ops::shape::concat::Concat;
use ferrolite_core::passes::rewrite::{constant, info, input};
use ferrolite_core::passes::Pass;
use ferrolite_core::{DType, Graph, Node, Op, Result, TensorInfo, ValueId};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

pub struct LayoutNchwc {
    /// The ISA the kernels will run: it decides whether Winograd convolutions stay plain.
    pub isa: Isa,
}

impl LayoutNchwc {
    /// Whether the Winograd kernels beat the blocked direct convolution under this ISA (then
    /// Winograd convolutions, and networks made mostly of them, stay plain).
    pub fn prefers_winograd(&self) -> bool {
        // Where the blocked kernels have Winograd tiles of their own, nothing stays plain.
        !self.isa.table().nchwc.winograd
    }

    /// The channels per block under this ISA: its table's choice.
    pub fn block(&self) -> usize {
        self.isa.table().nchwc.block
    }
}

/// The 4-D f32 shape of `v` when it can be blocked by `block` channels.
fn blockable(g: &Graph, v: ValueId, block: usize) -> Option<&TensorInfo> {
    let i = info(g, v)?;
    (i.dtype == DType::F32 && blocked_shape(&i.shape, block).is_some()).then_some(i)
}

/// A Conv the blocked kernels handle: 2-D f32 with constant weights (and bias), output channels
/// a multiple of the block, group 1 or depthwise over blocks. Returns whether its input must be
/// blocked (`false`: an ordinary Conv reading its plain input, channels not a multiple of the
/// block) and its shapes.
fn blockable_conv(g: &Graph, n: &Node, conv: &Conv, block: usize) -> Option<(bool, ConvShapes)> {
    let (x, w) = (input(n, 0)?, input(n, 1)?);
    let xi = info(g, x)?;
    let wt = constant(g, w)?;
    blockable(g, *n.outputs.first()?, block)?;
    if xi.dtype != DType::F32 || xi.shape.len() != 4 || wt.dtype() != DType::F32 {
        return None;
    }
    let bias = n.inputs.get(2).copied().flatten();
    if bias.is_some_and(|b| constant(g, b).is_none()) {
        return None;
    }
    let s = conv.shapes(&xi.shape, wt.shape()).ok()?;
    let c = s.in_channels;
    let depthwise = conv.group == c && s.out_channels == c && c % block == 0;
    match conv.group {
        1 => Some((c % block == 0, s)),
        _ if depthwise => Some((true, s)),
        _ => None,
    }
}

/// How a Conv runs blocked (see [`blockable_conv`]); `None` when it stays plain, which
/// includes the convolutions the CPU runs with Winograd (faster than the direct blocked
/// kernel).
fn conv_mode(g: &Graph, n: &Node, conv: &Conv, winograd: bool, block: usize) -> Option<bool> {
    let (blocked_input, s) = blockable_conv(g, n, conv, block)?;
    (!winograd || tile_for(&s).is_none()).then_some(blocked_input)
}

/// The share of the blockable convolutions' work in Winograd convolutions. A network made
/// mostly of them (ResNet) stays plain: blocking the rest would only add reorders around
/// them.
fn winograd_share(g: &Graph, block: usize) -> f64 {
    let (mut all, mut wide) = (0u64, 0u64);
    for n in &g.nodes {
        let Some(conv) = n.op.as_any().downcast_ref::<Conv>() else {
            continue;
        };
        let Some((_, s)) = blockable_conv(g, n, conv, block) else {
            continue;
        };
        let per_output = s.in_channels / conv.group * s.geometry.kernel.iter().product::<usize>();
        let outputs = s.batch * s.out_channels * s.geometry.output.iter().product::<usize>();
        let work = outputs as u64 * per_output as u64;
        all += work;
        if tile_for(&s).is_some() {
            wide += work;
        }
    }
    if all == 0 {
        0.0
    } else {
        wide as f64 / all as f64
    }
}

/// An inference BatchNormalization: a per-channel affine map whose statistics are constants.
fn per_channel(g: &Graph, n: &Node) -> bool {
    n.op.as_any().is::<BatchNorm>()
        && n.outputs.len() == 1
        && n.inputs.len() == 5
        && n.inputs[1..]
            .iter()
            .all(|v| v.is_some_and(|v| constant(g, v).is_some()))
}

/// Whether a pooling node can run blocked (its input permitting).
fn poolable(n: &Node) -> bool {
    let op = n.op.as_any();
    if let Some(p) = op.downcast_ref::<Pool>() {
        return p.kind != PoolKind::Lp && !p.with_indices && p.kernel_shape.len() == 2;
    }
    op.downcast_ref::<GlobalPool>()
        .is_some_and(|p| p.kind != PoolKind::Lp)
}

/// Whether a 4-D operand of shape `x` broadcasts to the output `y` with its channels whole:
/// blocked, it broadcasts the same way.
fn broadcasts_per_channel(x: &[usize], y: &[usize]) -> bool {
    x.len() == 4
        && y.len() == 4
        && x[1] == y[1]
        && [0, 2, 3].iter().all(|&d| x[d] == y[d] || x[d] == 1)
}

/// A blocked copy of constant `v` (padded to rank 4) when it broadcasts per channel to `y`
/// (a per-channel scale `[C, 1, 1]`, for instance).
fn blocked_constant(g: &mut Graph, v: ValueId, y: &[usize], block: usize) -> Option<ValueId> {
    let t = constant(g, v)?;
    if t.rank() > 4 || t.dtype() != DType::F32 {
        return None;
    }
    let mut shape = vec![1; 4 - t.rank()];
    shape.extend_from_slice(t.shape());
    if !broadcasts_per_channel(&shape, y) {
        return None;
    }
    let plain = t.reshaped(&shape).ok()?;
    let op = ReorderNchwc {
        to_blocked: true,
        block,
    };
    let blocked = op.eval(&[Some(&plain)]).ok()?.remove(0);
    let name = format!("{}/nchwc", g.value(v).name);
    Some(g.add_constant(name, blocked))
}

/// Whether the op computes each output element from the same position of its inputs.
fn elementwise(n: &Node) -> bool {
    let op = n.op.as_any();
    op.is::<Unary>()
        || op.is::<Clip>()
        || op
            .downcast_ref::<Binary>()
            .is_some_and(|b| b.legacy_axis.is_none())
}

impl Pass for LayoutNchwc {
    fn name(&self) -> &'static str {
        "layout-nchwc"
    }

    fn description(&self) -> &'static str {
        "run Conv, pooling and the element-wise ops between them on blocked NCHWc tensors"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        let (winograd, block) = (self.prefers_winograd(), self.block());
        if winograd && winograd_share(graph, block) >= 0.5 {
            return Ok(false);
        }
        rewrite_with_twins(
            graph,
            &mut |g, nodes, twin, node, y| convert(g, nodes, twin, node, y, winograd, block),
            |g, plain, blocked| reorder(g, plain, blocked, false, block),
        )
    }
}

/// Rewrites a node into its twin-layout form (writing `y`'s new twin), or `None` when it stays
/// as it is; it may push nodes it needs first (a conversion of an input).
pub(crate) type Convert<'a> = dyn FnMut(
        &mut Graph,
        &mut Vec<Node>,
        &mut HashMap<ValueId, ValueId>,
        &Node,
        ValueId,
    ) -> Option<Node>
    + 'a;

/// The walk of the layout passes: in node order, each single-output node either gets its
/// twin-layout form from `convert`, or stays and reads plain values, with `back(plain, twin)`
/// (a node writing `plain` from `twin`) in front for each value that only exists as a twin.
/// Graph outputs are converted back at once, so their twins die early.
pub(crate) fn rewrite_with_twins(
    graph: &mut Graph,
    convert: &mut Convert,
    back: impl Fn(&Graph, ValueId, ValueId) -> Node,
) -> Result<bool> {
    let old = std::mem::take(&mut graph.nodes);
    let mut nodes: Vec<Node> = Vec::with_capacity(old.len());
    // The twin of each plain value that has one.
    let mut twin: HashMap<ValueId, ValueId> = HashMap::new();
    // Plain values whose producer now makes the twin instead (until a `back` node does).
    let mut unproduced: HashSet<ValueId> = HashSet::new();
    let mut changed = false;
    for mut node in old {
        let y = node.outputs.first().copied();
        let converted: Option<Node> = match y {
            Some(y) if node.outputs.len() == 1 => convert(graph, &mut nodes, &mut twin, &node, y),
            _ => None,
        };
        if let Some(conv) = converted {
            let y = y.expect("converted nodes have an output");
            nodes.push(conv);
            if graph.outputs.contains(&y) {
                nodes.push(back(graph, y, twin[&y]));
            } else {
                unproduced.insert(y);
            }
            changed = true;
            continue;
        }
        // A plain reader: convert back what it reads.
        for v in node.inputs.iter_mut().flatten() {
            if unproduced.remove(v) {
                nodes.push(back(graph, *v, twin[v]));
            }
        }
        nodes.push(node);
    }
    graph.nodes = nodes;
    graph.sort()?;
    graph.remove_dead_nodes();
    Ok(changed)
}

/// A `ToNchwc` (or `FromNchwc`) node writing `to` from `from`.
fn reorder(g: &Graph, plain: ValueId, blocked: ValueId, to_blocked: bool, block: usize) -> Node {
    let (from, to) = if to_blocked {
        (plain, blocked)
    } else {
        (blocked, plain)
    };
    let op = ReorderNchwc { to_blocked, block };
    Node {
        name: format!("{}/{}", g.value(plain).name, op.name()),
        op: Arc::new(op),
        inputs: vec![Some(from)],
        outputs: vec![to],
    }
}

/// A new value for plain `v` blocked by `block` channels.
fn add_twin(g: &mut Graph, v: ValueId, block: usize) -> ValueId {
    let i = g
        .value(v)
        .info
        .clone()
        .expect("blockable values have types");
    let shape = blocked_shape(&i.shape, block).expect("blockable values have blockable shapes");
    let name = format!("{}/nchwc", g.value(v).name);
    let t = g.add_value(name);
    g.value_mut(t).info = Some(TensorInfo::new(i.dtype, shape));
    t
}

/// The blocked form of `node` (writing `y`'s new twin), or `None` when it stays plain. May
/// emit a `ToNchwc` for a Conv's input.
fn convert(
    g: &mut Graph,
    nodes: &mut Vec<Node>,
    twin: &mut HashMap<ValueId, ValueId>,
    node: &Node,
    y: ValueId,
    winograd: bool,
    block: usize,
) -> Option<Node> {
    blockable(g, y, block)?;
    let op = node.op.as_any();
    let (new_op, inputs): (Arc<dyn Op>, Vec<Option<ValueId>>) =
        if let Some(conv) = op.downcast_ref::<Conv>() {
            let blocked_input = conv_mode(g, node, conv, winograd, block)?;
            let mut inputs = node.inputs.clone();
            if blocked_input {
                let x = input(node, 0)?;
                let xt = match twin.get(&x) {
                    Some(&t) => t,
                    None => {
                        let t = add_twin(g, x, block);
                        nodes.push(reorder(g, x, t, true, block));
                        twin.insert(x, t);
                        t
                    }
                };
                inputs[0] = Some(xt);
            }
            let inner = node.op.clone();
            (
                Arc::new(Nchwc {
                    inner,
                    blocked_input,
                    block,
                }),
                inputs,
            )
        } else if poolable(node) || per_channel(g, node) {
            let mut inputs = node.inputs.clone();
            inputs[0] = Some(*twin.get(&input(node, 0)?)?);
            let inner = node.op.clone();
            let op = Nchwc {
                inner,
                blocked_input: true,
                block,
            };
            (Arc::new(op), inputs)
        } else if elementwise(node) {
            let y_shape = info(g, y)?.shape.clone();
            let mut inputs = node.inputs.clone();
            for (i, v) in inputs.iter_mut().enumerate() {
                let Some(v) = v else { continue };
                let vi = info(g, *v)?;
                // Clip's bounds and scalar operands are shape-free.
                let scalar = vi.shape.iter().product::<usize>() == 1 && constant(g, *v).is_some();
                if scalar && (i > 0 || !op.is::<Clip>()) {
                    continue;
                }
                *v = match twin.get(v) {
                    Some(&t) if broadcasts_per_channel(&vi.shape, &y_shape) => t,
                    Some(_) => return None,
                    None => blocked_constant(g, *v, &y_shape, block)?,
                };
            }
            (node.op.clone(), inputs)
        } else if let Some(c) = op.downcast_ref::<Concat>() {
            if ferrolite_core::op::normalize_axis(c.axis, 4).ok()? != 1 {
                return None;
            }
            let inputs = node
                .inputs
                .iter()
                .map(|v| twin.get(&(*v)?).copied().map(Some))
                .collect::<Option<Vec<_>>>()?;
            (Arc::new(Concat { axis: 1 }), inputs)
        } else {
            return None;
        };
    let yt = add_twin(g, y, block);
    twin.insert(y, yt);
    Some(Node {
        name: node.name.clone(),
        op: new_op,
        inputs,
        outputs: vec![yt],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrolite_core::ops::elementwise::binary::BinaryKind;
    use ferrolite_core::ops::elementwise::unary::UnaryKind;
    use ferrolite_core::ops::shape::flatten::Flatten;
    use ferrolite_core::passes::testutil::{check_pipeline, data};
    use ferrolite_core::passes::{session_pipeline, Pass};
    use ferrolite_core::plan::Backend;

    /// The device-independent passes, then the CPU backend's.
    fn cpu_pipeline() -> Vec<Box<dyn Pass>> {
        session_pipeline(None, crate::CpuBackend::default().passes())
    }

    fn check_passes(
        g: &Graph,
        x: &ferrolite_core::Tensor,
        ops: &[&str],
        disabled: &[&str],
    ) -> Graph {
        check_pipeline(g, x, ops, &cpu_pipeline, disabled)
    }

    fn relu() -> Arc<dyn Op> {
        Arc::new(Unary {
            kind: UnaryKind::Relu,
        })
    }

    /// A squeezenet fire module and a mobilenet residual block on a `[1, c, 6, 7]` input,
    /// ending in a global pool and a Flatten.
    fn net(g: &mut Graph, c: usize) -> ValueId {
        let x = g.add_value("x");
        g.inputs.push(x);
        let conv = |g: &mut Graph,
                    name: &str,
                    x: ValueId,
                    cin: usize,
                    cout: usize,
                    k: usize,
                    group: usize| {
            let w = g.add_constant(format!("{name}.w"), data(&[cout, cin / group, k, k], 0.3));
            let b = g.add_constant(format!("{name}.b"), data(&[cout], 0.1));
            let p = k / 2;
            let mut op = Conv {
                group,
                activation: Some(UnaryKind::Relu),
                ..Conv::default()
            };
            op.params.pads = Some(vec![p, p, p, p]);
            g.add_op(name, Arc::new(op), vec![Some(x), Some(w), Some(b)], 1)
                .unwrap()[0]
        };
        let first = conv(g, "first", x, c, 16, 3, 1);
        let pool = Pool {
            kind: PoolKind::Max,
            kernel_shape: vec![3, 3],
            strides: vec![2, 2],
            ..Pool::default()
        };
        let p = g
            .add_op("pool", Arc::new(pool), vec![Some(first)], 1)
            .unwrap()[0];
        let e1 = conv(g, "e1", p, 16, 8, 1, 1);
        let e3 = conv(g, "e3", p, 16, 8, 3, 1);
        let cat = g
            .add_op(
                "cat",
                Arc::new(Concat { axis: -3 }),
                vec![Some(e1), Some(e3)],
                1,
            )
            .unwrap()[0];
        let dw = conv(g, "dw", cat, 16, 16, 3, 16);
        let add = Arc::new(Binary::new(BinaryKind::Add));
        let sum = g.add_op("add", add, vec![Some(dw), Some(cat)], 1).unwrap()[0];
        let r = g.add_op("relu", relu(), vec![Some(sum)], 1).unwrap()[0];
        let half = g.add_constant("half", data(&[1], 0.5));
        let mul = Arc::new(Binary::new(BinaryKind::Mul));
        let m = g.add_op("mul", mul, vec![Some(r), Some(half)], 1).unwrap()[0];
        let gp = g
            .add_op("gap", Arc::new(GlobalPool::default()), vec![Some(m)], 1)
            .unwrap()[0];
        let f = g
            .add_op("flat", Arc::new(Flatten { axis: 1 }), vec![Some(gp)], 1)
            .unwrap()[0];
        g.outputs.push(f);
        g.outputs.push(e1);
        f
    }

    /// The optimised [`net`]: blocked throughout, unblocked for the graph outputs.
    const BLOCKED_NET: [&str; 13] = [
        "NchwcConv",
        "NchwcMaxPool",
        "NchwcConv",
        "FromNchwc",
        "NchwcConv",
        "Concat",
        "NchwcConv",
        "Add",
        "Relu",
        "Mul",
        "NchwcGlobalAveragePool",
        "FromNchwc",
        "Flatten",
    ];

    #[test]
    fn blocks_a_whole_cnn_and_unblocks_at_the_edges() {
        // 3 input channels: the first Conv reads the plain input.
        let mut g = Graph::new();
        net(&mut g, 3);
        let x = data(&[1, 3, 6, 7], 1.0);
        check_passes(&g, &x, &BLOCKED_NET, &[]);
    }

    #[test]
    fn blocks_a_plain_input_once_for_all_its_readers() {
        let mut g = Graph::new();
        net(&mut g, 8);
        let x = data(&[1, 8, 6, 7], 1.0);
        let ops: Vec<&str> = ["ToNchwc"].into_iter().chain(BLOCKED_NET).collect();
        let opt = check_passes(&g, &x, &ops, &[]);
        // The graph outputs keep their names and plain shapes.
        assert_eq!(
            opt.value(opt.outputs[1]).info.as_ref().unwrap().shape,
            [1, 8, 2, 3]
        );
    }

    #[test]
    fn leaves_unblockable_graphs_alone() {
        // 12 output channels: nothing can be blocked, and the pass can be disabled.
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let w = g.add_constant("w", data(&[12, 8, 1, 1], 0.3));
        let y = g
            .add_op("conv", Arc::new(Conv::default()), vec![Some(x), Some(w)], 1)
            .unwrap()[0];
        let r = g.add_op("relu", relu(), vec![Some(y)], 1).unwrap()[0];
        g.outputs.push(r);
        let x = data(&[1, 8, 4, 4], 1.0);
        check_passes(&g, &x, &["Conv"], &[]);
        let mut g = Graph::new();
        net(&mut g, 8);
        let x = data(&[1, 8, 6, 7], 1.0);
        let opt = check_passes(
            &g,
            &x,
            &[
                "Conv",
                "MaxPool",
                "Conv",
                "Conv",
                "Concat",
                "Conv",
                "Add",
                "Relu",
                "Mul",
                "GlobalAveragePool",
                "Flatten",
            ],
            &["layout-nchwc"],
        );
        assert!(opt.nodes.iter().all(|n| !n.op.name().contains("Nchwc")));
    }
}
