//! partition: places groups of neighbouring nodes on a device.
//!
//! 1. *Mark*: ask the device about every node (op, attributes, dtypes, shapes); nodes whose
//!    shapes are only known at run time stay on the CPU.
//! 2. *Group*: seeds are taken in reverse topological order; from each, a depth-first walk
//!    over supported neighbours (producers first, then consumers) adds a node to the seed's
//!    group unless that would make a cycle between the group and the rest of the graph (some
//!    path leaving the group and coming back to it, where each group formed before counts as
//!    one node, as it will be one), which a single subgraph node could not run.
//! 3. *Drop* groups smaller than [`PartitionOptions::min_ops`], counting ops by work: each op
//!    counts one per [`WORK_UNIT_FLOPS`] it computes (at least one when it computes anything),
//!    so a lone small op does not pay for a copy in and a copy out, while a lone large
//!    convolution does; pure data movement counts nothing.
//! 4. *Replace* each group by a [`Subgraph`] node that keeps its nodes, with a CopyToDevice
//!    node per input and a CopyToHost node per output inside it.
//!
//! The decisions are kept in a [`PartitionReport`] for `ferrolite explain`.

use super::Pass;
use crate::device::Device;
use crate::ops::device::copy::DeviceCopy;
use crate::ops::device::subgraph::Subgraph;
use crate::plan::KernelRequest;
use crate::{Graph, NodeId, Result, TensorInfo, ValueId};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// FLOPs that count as one op when sizing a subgraph (about one element-wise op over a
/// 64x32x32 feature map).
pub const WORK_UNIT_FLOPS: u64 = 1 << 16;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionOptions {
    /// Subgraphs with fewer ops (counted by work) stay on the CPU.
    pub min_ops: u64,
}

impl Default for PartitionOptions {
    fn default() -> Self {
        PartitionOptions { min_ops: 4 }
    }
}

/// Where one node runs, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// In the subgraph with this index in [`PartitionReport::subgraphs`].
    Device(usize),
    /// On the CPU because the device does not support it (the device's reason).
    Unsupported(String),
    /// On the CPU because its output shapes are only known at run time.
    Dynamic,
    /// Supported, but its group (index in [`PartitionReport::dropped`]) was too small.
    TooSmall(usize),
}

/// One node of the graph the partition pass saw.
#[derive(Clone, Debug)]
pub struct NodePlacement {
    pub node: String,
    pub op: String,
    pub flops: u64,
    pub placement: Placement,
}

/// A tensor copied between host and device.
#[derive(Clone, Debug)]
pub struct Copy {
    pub value: String,
    pub bytes: u64,
}

/// A group of nodes: a subgraph placed on the device, or a group dropped as too small.
#[derive(Clone, Debug)]
pub struct GroupInfo {
    /// The subgraph node's name (for dropped groups, the name it would have had).
    pub name: String,
    pub nodes: usize,
    pub flops: u64,
    /// Size in ops counted by work (see the module docs).
    pub work_ops: u64,
    pub copies_in: Vec<Copy>,
    pub copies_out: Vec<Copy>,
}

/// What the partition pass decided.
#[derive(Clone, Debug, Default)]
pub struct PartitionReport {
    pub device: String,
    pub min_ops: u64,
    /// Every node, in graph order.
    pub nodes: Vec<NodePlacement>,
    pub subgraphs: Vec<GroupInfo>,
    pub dropped: Vec<GroupInfo>,
}

/// The partition pass for one device. Its last report is kept in `report`.
pub struct Partition {
    pub device: Arc<dyn Device>,
    pub options: PartitionOptions,
    pub report: Arc<Mutex<Option<PartitionReport>>>,
}

impl Partition {
    pub fn new(device: Arc<dyn Device>, options: PartitionOptions) -> Self {
        Partition {
            device,
            options,
            report: Arc::default(),
        }
    }
}

impl Pass for Partition {
    fn name(&self) -> &'static str {
        "partition"
    }

    fn description(&self) -> &'static str {
        "place groups of supported nodes on the session's device as subgraphs"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        let report = partition(graph, self.device.as_ref(), &self.options)?;
        let changed = !report.subgraphs.is_empty();
        if let Ok(mut r) = self.report.lock() {
            *r = Some(report);
        }
        Ok(changed)
    }
}

/// Work units of a node (see [`WORK_UNIT_FLOPS`]).
fn work_ops(flops: u64) -> u64 {
    flops.div_ceil(WORK_UNIT_FLOPS)
}

/// Partitions `graph` in place for `device` and reports the decisions.
pub fn partition(
    graph: &mut Graph,
    device: &dyn Device,
    options: &PartitionOptions,
) -> Result<PartitionReport> {
    graph.sort()?;
    let n = graph.nodes.len();
    let mut placement: Vec<Placement> = Vec::with_capacity(n);
    let mut flops = Vec::with_capacity(n);
    for node in &graph.nodes {
        flops.push(graph.node_flops(node));
        let outputs: Option<Vec<TensorInfo>> = node
            .outputs
            .iter()
            .map(|&o| graph.value(o).info.clone())
            .collect();
        let inputs = graph.infer_inputs(node);
        let inputs_known = node
            .inputs
            .iter()
            .zip(&inputs)
            .all(|(v, i)| v.is_none() || i.is_some());
        let p = match outputs {
            Some(outputs) if inputs_known => {
                let req = KernelRequest {
                    node,
                    inputs: &inputs,
                    outputs: &outputs,
                    packs: crate::prepacked::Prepacks::none(),
                };
                match device.supports(&req) {
                    Ok(()) => Placement::Device(usize::MAX),
                    Err(why) => Placement::Unsupported(why),
                }
            }
            _ => Placement::Dynamic,
        };
        placement.push(p);
    }
    let supported: Vec<bool> = placement
        .iter()
        .map(|p| matches!(p, Placement::Device(_)))
        .collect();
    let groups = group_nodes(graph, &supported);

    let mut report = PartitionReport {
        device: device.name().to_string(),
        min_ops: options.min_ops,
        ..Default::default()
    };
    let mut kept: Vec<Vec<usize>> = Vec::new();
    for members in groups {
        let info = GroupInfo {
            name: format!("{}_subgraph_{}", device.name(), kept.len()),
            nodes: members.len(),
            flops: members.iter().map(|&i| flops[i]).sum(),
            work_ops: members.iter().map(|&i| work_ops(flops[i])).sum(),
            copies_in: Vec::new(),
            copies_out: Vec::new(),
        };
        if info.work_ops < options.min_ops {
            for &i in &members {
                placement[i] = Placement::TooSmall(report.dropped.len());
            }
            report.dropped.push(info);
        } else {
            for &i in &members {
                placement[i] = Placement::Device(kept.len());
            }
            report.subgraphs.push(info);
            kept.push(members);
        }
    }
    report.nodes = graph
        .nodes
        .iter()
        .zip(&placement)
        .zip(&flops)
        .map(|((node, p), &f)| NodePlacement {
            node: node.name.clone(),
            op: node.op.name().to_string(),
            flops: f,
            placement: p.clone(),
        })
        .collect();
    for (k, members) in kept.iter().enumerate() {
        let (copies_in, copies_out) = replace_group(graph, members, device.name(), k)?;
        report.subgraphs[k].copies_in = copies_in;
        report.subgraphs[k].copies_out = copies_out;
    }
    if !kept.is_empty() {
        let gone: HashSet<usize> = kept.iter().flatten().copied().collect();
        let mut i = 0;
        graph.nodes.retain(|_| {
            i += 1;
            !gone.contains(&(i - 1))
        });
        graph.sort()?;
    }
    Ok(report)
}

/// Groups supported nodes (indices into a sorted graph's nodes) without making cycles.
fn group_nodes(graph: &Graph, supported: &[bool]) -> Vec<Vec<usize>> {
    let n = graph.nodes.len();
    let consumers = graph.consumers();
    let producers_of = |i: usize| -> Vec<usize> {
        graph.nodes[i]
            .inputs
            .iter()
            .flatten()
            .filter_map(|v| graph.value(*v).producer.map(|p| p.0))
            .collect()
    };
    let consumers_of = |i: usize| -> Vec<usize> {
        graph.nodes[i]
            .outputs
            .iter()
            .filter_map(|o| consumers.get(o))
            .flatten()
            .map(|c: &NodeId| c.0)
            .collect()
    };
    let mut group: Vec<Option<usize>> = vec![None; n];
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for seed in (0..n).rev() {
        if !supported[seed] || group[seed].is_some() {
            continue;
        }
        let g = groups.len();
        group[seed] = Some(g);
        groups.push(vec![seed]);
        let mut stack = vec![seed];
        while let Some(x) = stack.pop() {
            for y in producers_of(x).into_iter().chain(consumers_of(x)) {
                if !supported[y] || group[y].is_some() {
                    continue;
                }
                group[y] = Some(g);
                groups[g].push(y);
                if has_cycle(g, &groups, &group, &consumers_of) {
                    group[y] = None;
                    groups[g].pop();
                } else {
                    stack.push(y);
                }
            }
        }
    }
    for members in &mut groups {
        members.sort_unstable();
    }
    // Graph order: the first subgraph is the one nearest the inputs.
    groups.sort_by_key(|m| m[0]);
    groups
}

/// Whether some path leaves group `g` and comes back into it. The other groups count as
/// single nodes, as they become single subgraph nodes: a path may enter one at any member
/// and leave it from any other.
fn has_cycle(
    g: usize,
    groups: &[Vec<usize>],
    group: &[Option<usize>],
    consumers_of: &dyn Fn(usize) -> Vec<usize>,
) -> bool {
    let (mut seen, mut seen_groups) = (HashSet::new(), HashSet::new());
    let mut stack: Vec<usize> = groups[g]
        .iter()
        .flat_map(|&m| consumers_of(m))
        .filter(|&c| group[c] != Some(g))
        .collect();
    while let Some(x) = stack.pop() {
        match group[x] {
            Some(h) if h == g => return true,
            Some(h) => {
                if seen_groups.insert(h) {
                    stack.extend(groups[h].iter().flat_map(|&m| consumers_of(m)));
                }
            }
            None => {
                if seen.insert(x) {
                    stack.extend(consumers_of(x));
                }
            }
        }
    }
    false
}

/// Adds the subgraph node for `members` (their removal is left to the caller). Returns the
/// copies in and out.
fn replace_group(
    graph: &mut Graph,
    members: &[usize],
    device: &str,
    index: usize,
) -> Result<(Vec<Copy>, Vec<Copy>)> {
    let in_group: HashSet<usize> = members.iter().copied().collect();
    let consumers = graph.consumers();
    // Values read after the subgraph: by a node outside it, or as a graph output.
    let leaves = |graph: &Graph, o: ValueId| {
        graph.outputs.contains(&o)
            || consumers
                .get(&o)
                .is_some_and(|cs| cs.iter().any(|c| !in_group.contains(&c.0)))
    };
    let bytes = |graph: &Graph, v: ValueId| {
        graph
            .value(v)
            .info
            .as_ref()
            .map_or(0, |t| (t.numel() * t.dtype.size()) as u64)
    };
    let mut inner = Graph::new();
    let mut map: HashMap<ValueId, ValueId> = HashMap::new();
    let (mut outer_in, mut outer_out) = (Vec::new(), Vec::new());
    let (mut copies_in, mut copies_out) = (Vec::new(), Vec::new());
    for &i in members {
        let node = graph.nodes[i].clone();
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for v in &node.inputs {
            let Some(v) = *v else {
                inputs.push(None);
                continue;
            };
            if let Some(&m) = map.get(&v) {
                inputs.push(Some(m));
                continue;
            }
            let val = graph.value(v).clone();
            let m = match &val.constant {
                Some(c) => inner.add_constant(val.name.clone(), c.clone()),
                None => {
                    // A tensor from outside: an input of the subgraph, copied to the device.
                    let host = inner.add_value(val.name.clone());
                    inner.value_mut(host).info = val.info.clone();
                    inner.inputs.push(host);
                    let dev = inner.add_value(format!("{}@{device}", val.name));
                    inner.value_mut(dev).info = val.info.clone();
                    inner.add_node(
                        format!("copy_in_{}", val.name),
                        Arc::new(DeviceCopy::to_device(device)),
                        vec![Some(host)],
                        vec![dev],
                    )?;
                    outer_in.push(Some(v));
                    copies_in.push(Copy {
                        value: val.name.clone(),
                        bytes: bytes(graph, v),
                    });
                    dev
                }
            };
            map.insert(v, m);
            inputs.push(Some(m));
        }
        let mut outputs = Vec::with_capacity(node.outputs.len());
        for &o in &node.outputs {
            let val = graph.value(o);
            let name = if leaves(graph, o) {
                format!("{}@{device}", val.name)
            } else {
                val.name.clone()
            };
            let m = inner.add_value(name);
            inner.value_mut(m).info = val.info.clone();
            map.insert(o, m);
            outputs.push(m);
        }
        inner.add_node(node.name.clone(), node.op.clone(), inputs, outputs.clone())?;
        for (&o, &m) in node.outputs.iter().zip(&outputs) {
            if leaves(graph, o) {
                let val = graph.value(o);
                let host = inner.add_value(val.name.clone());
                inner.value_mut(host).info = val.info.clone();
                inner.add_node(
                    format!("copy_out_{}", val.name),
                    Arc::new(DeviceCopy::to_host(device)),
                    vec![Some(m)],
                    vec![host],
                )?;
                inner.outputs.push(host);
                outer_out.push(o);
                copies_out.push(Copy {
                    value: val.name.clone(),
                    bytes: bytes(graph, o),
                });
            }
        }
    }
    inner.sort()?;
    for &o in &outer_out {
        graph.value_mut(o).producer = None;
    }
    let name = format!("{device}_subgraph_{index}");
    let op = Subgraph {
        device: device.to_string(),
        graph: Arc::new(inner),
    };
    graph.add_node(name, Arc::new(op), outer_in, outer_out)?;
    Ok((copies_in, copies_out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::fake::{FakeDevice, FakeFailure};
    use crate::device::{DeviceKernels, Warnings};
    use crate::infer::infer_graph;
    use crate::ops::device::copy::CopyDirection;
    use crate::ops::elementwise::binary::{Binary, BinaryKind};
    use crate::ops::elementwise::unary::{Unary, UnaryKind};
    use crate::ops::linalg::matmul::MatMul;
    use crate::plan::{Plan, ReferenceKernels};
    use crate::{Op, Tensor};
    use std::sync::atomic::Ordering;

    fn un(kind: UnaryKind) -> Arc<dyn Op> {
        Arc::new(Unary { kind })
    }

    fn bin(kind: BinaryKind) -> Arc<dyn Op> {
        Arc::new(Binary::new(kind))
    }

    /// Adds a node with one output, returning the output.
    fn node(g: &mut Graph, name: &str, op: Arc<dyn Op>, inputs: &[ValueId]) -> ValueId {
        let ins = inputs.iter().map(|&v| Some(v)).collect();
        g.add_op(name, op, ins, 1).unwrap()[0]
    }

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(shape, v.to_vec()).unwrap()
    }

    fn assert_same(got: &[Tensor], want: &[Tensor]) {
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(want) {
            assert_eq!(a.shape(), b.shape());
            assert_eq!(a.to_f64_vec(), b.to_f64_vec());
        }
    }

    /// A graph partitioned for a device, with the outputs it computes.
    struct Partitioned {
        graph: Graph,
        report: PartitionReport,
        outputs: Vec<Tensor>,
    }

    /// Infers `g` for `inputs` and partitions it for `device`; checks that the partitioned graph
    /// sorts, infers again, and computes the unpartitioned graph's outputs both on the reference
    /// kernels and with its subgraphs compiled for the device.
    fn partitioned(
        g: &Graph,
        inputs: &[&Tensor],
        device: &FakeDevice,
        min_ops: u64,
    ) -> Partitioned {
        let types: Vec<TensorInfo> = inputs.iter().map(|t| TensorInfo::of(t)).collect();
        let mut plain = g.clone();
        infer_graph(&mut plain, &types).unwrap();
        let want = Plan::build(&plain, &HashSet::new(), None)
            .unwrap()
            .run(inputs)
            .unwrap();
        let mut graph = plain.clone();
        let report = partition(&mut graph, device, &PartitionOptions { min_ops }).unwrap();
        graph.sort().unwrap();
        infer_graph(&mut graph.clone(), &types).unwrap();
        let outputs = Plan::build(&graph, &HashSet::new(), None)
            .unwrap()
            .run(inputs)
            .unwrap();
        assert_same(&outputs, &want);
        let kernels = DeviceKernels {
            devices: vec![Arc::new(device.clone())],
            cpu: Arc::new(ReferenceKernels),
            warnings: Warnings::quiet(),
        };
        let on_device = Plan::build(&graph, &HashSet::new(), Some(&kernels))
            .unwrap()
            .run(inputs)
            .unwrap();
        assert_same(&on_device, &want);
        assert!(
            kernels.warnings.all().is_empty(),
            "{:?}",
            kernels.warnings.all()
        );
        Partitioned {
            graph,
            report,
            outputs,
        }
    }

    fn placement<'a>(r: &'a PartitionReport, node: &str) -> &'a Placement {
        &r.nodes.iter().find(|n| n.node == node).unwrap().placement
    }

    fn ops(g: &Graph) -> Vec<&str> {
        g.nodes.iter().map(|n| n.op.name()).collect()
    }

    fn subgraph(node: &crate::Node) -> &Subgraph {
        node.op.as_any().downcast_ref::<Subgraph>().unwrap()
    }

    /// x -> relu1 -> add1(+1) -> mul1(square) -> NEG -> add2(+x) -> mul2(square) -> NEG -> abs3:
    /// Neg is unsupported, so the supported runs on either side of it are the groups.
    #[test]
    fn chain_splits_at_unsupported_ops() {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let one = g.add_constant("one", Tensor::scalar(1.0f32));
        let r1 = node(&mut g, "relu1", un(UnaryKind::Relu), &[x]);
        let a1 = node(&mut g, "add1", bin(BinaryKind::Add), &[r1, one]);
        let m1 = node(&mut g, "mul1", bin(BinaryKind::Mul), &[a1, a1]);
        let n1 = node(&mut g, "neg1", un(UnaryKind::Neg), &[m1]);
        let a2 = node(&mut g, "add2", bin(BinaryKind::Add), &[n1, x]);
        let m2 = node(&mut g, "mul2", bin(BinaryKind::Mul), &[a2, a2]);
        let n2 = node(&mut g, "neg2", un(UnaryKind::Neg), &[m2]);
        let y = node(&mut g, "abs3", un(UnaryKind::Abs), &[n2]);
        g.outputs.push(y);
        let x = f32s(&[6], &[-1.0, 2.0, -3.0, 4.0, 0.5, -0.5]);
        let device = FakeDevice::with_ops(&["Relu", "Add", "Mul", "Abs"]);
        let p = partitioned(&g, &[&x], &device, 2);

        assert_eq!(ops(&p.graph), ["Subgraph", "Neg", "Subgraph", "Neg", "Abs"]);
        let r = &p.report;
        assert_eq!(r.device, "fake");
        assert_eq!(r.min_ops, 2);
        for n in ["relu1", "add1", "mul1"] {
            assert_eq!(placement(r, n), &Placement::Device(0), "{n}");
        }
        for n in ["add2", "mul2"] {
            assert_eq!(placement(r, n), &Placement::Device(1), "{n}");
        }
        for n in ["neg1", "neg2"] {
            assert_eq!(
                placement(r, n),
                &Placement::Unsupported("op Neg is not in the fake device's set".into())
            );
        }
        // A lone element-wise op over 6 elements is one op by work, fewer than 2.
        assert_eq!(placement(r, "abs3"), &Placement::TooSmall(0));
        assert_eq!(r.dropped.len(), 1);
        assert_eq!((r.dropped[0].nodes, r.dropped[0].work_ops), (1, 1));
        let names: Vec<&str> = r.subgraphs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["fake_subgraph_0", "fake_subgraph_1"]);
        assert_eq!(r.subgraphs[0].nodes, 3);
        assert_eq!(r.subgraphs[0].work_ops, 3);
        assert_eq!(r.subgraphs[0].flops, 18);
        let names: Vec<&str> = p.graph.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names[0], "fake_subgraph_0");
        assert_eq!(names[2], "fake_subgraph_1");

        // By hand: relu -> [0,2,0,4,.5,0], +1, squared -> [1,9,1,25,2.25,1], negated, +x ->
        // [-2,-7,-4,-21,-1.75,-1.5], squared, negated, abs.
        let y = p.outputs[0].as_slice::<f32>().unwrap();
        assert_eq!(y, [4.0, 49.0, 16.0, 441.0, 3.0625, 2.25]);
    }

    /// x -> A -> B (unsupported) -> D and A -> C -> D: A, C and D in one subgraph would need
    /// B's result inside it while B needs A's: a cycle through the subgraph node.
    #[test]
    fn diamond_around_an_unsupported_op_does_not_merge_into_a_cycle() {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let a = node(&mut g, "A", un(UnaryKind::Relu), &[x]);
        let b = node(&mut g, "B", un(UnaryKind::Neg), &[a]);
        let c = node(&mut g, "C", un(UnaryKind::Abs), &[a]);
        let d = node(&mut g, "D", bin(BinaryKind::Add), &[b, c]);
        g.outputs.push(d);
        let x = f32s(&[4], &[-1.0, 2.0, -3.0, 4.0]);
        let device = FakeDevice::with_ops(&["Relu", "Abs", "Add"]);
        let p = partitioned(&g, &[&x], &device, 1);

        let r = &p.report;
        let (pa, pc, pd) = (placement(r, "A"), placement(r, "C"), placement(r, "D"));
        assert!(!(pa == pc && pc == pd), "A, C, D together: {pa:?}");
        // The walk from D takes C, then refuses A.
        assert_eq!(pc, &Placement::Device(1));
        assert_eq!(pd, &Placement::Device(1));
        assert_eq!(pa, &Placement::Device(0));
        assert!(matches!(placement(r, "B"), Placement::Unsupported(_)));
        assert_eq!(ops(&p.graph), ["Subgraph", "Neg", "Subgraph"]);
        // D = -relu(x) + |relu(x)| = 0.
        assert_eq!(p.outputs[0].as_slice::<f32>().unwrap(), [0.0; 4]);
    }

    /// Two groups that are each fine alone but would feed each other once each is one node:
    /// p -> RELU -> a and b -> RELU -> r, with {a, b, d} grouped first (from d) and {p, r}
    /// second. The second group must not take p and r together.
    #[test]
    fn groups_do_not_make_a_cycle_between_subgraphs() {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let p = node(&mut g, "p", un(UnaryKind::Neg), &[x]);
        let u1 = node(&mut g, "u1", un(UnaryKind::Relu), &[p]);
        let a = node(&mut g, "a", un(UnaryKind::Abs), &[u1]);
        let b = node(&mut g, "b", un(UnaryKind::Neg), &[x]);
        let u2 = node(&mut g, "u2", un(UnaryKind::Relu), &[b]);
        let r = node(&mut g, "r", bin(BinaryKind::Add), &[p, u2]);
        let d = node(&mut g, "d", bin(BinaryKind::Add), &[a, b]);
        g.outputs.extend([r, d]);
        let x = f32s(&[3], &[-1.0, 0.5, 2.0]);
        let device = FakeDevice::with_ops(&["Neg", "Abs", "Add"]);
        let p = partitioned(&g, &[&x], &device, 1);
        let r = &p.report;
        for n in ["a", "b", "d"] {
            assert_eq!(placement(r, n), placement(r, "d"), "{n}");
        }
        assert_ne!(placement(r, "p"), placement(r, "r"));
        // p = b = -x = [1, -0.5, -2]; r = p + relu(b) and d = |relu(p)| + b: [2, -0.5, -2].
        assert_eq!(p.outputs[0].as_slice::<f32>().unwrap(), [2.0, -0.5, -2.0]);
        assert_eq!(p.outputs[1].as_slice::<f32>().unwrap(), [2.0, -0.5, -2.0]);
    }

    /// A lone tiny op is not worth two copies; a lone 256x256x256 MatMul is; `min_ops` decides.
    #[test]
    fn small_groups_are_dropped_by_work() {
        let device = FakeDevice::with_ops(&["Relu", "MatMul"]);
        let mut tiny = Graph::new();
        let x = tiny.add_value("x");
        tiny.inputs.push(x);
        let y = node(&mut tiny, "relu", un(UnaryKind::Relu), &[x]);
        tiny.outputs.push(y);
        let xt = f32s(&[4], &[-1.0, 2.0, -3.0, 4.0]);
        let p = partitioned(&tiny, &[&xt], &device, PartitionOptions::default().min_ops);
        assert_eq!(placement(&p.report, "relu"), &Placement::TooSmall(0));
        assert!(p.report.subgraphs.is_empty());
        assert_eq!(ops(&p.graph), ["Relu"]);
        let p = partitioned(&tiny, &[&xt], &device, 1);
        assert_eq!(placement(&p.report, "relu"), &Placement::Device(0));
        assert_eq!(ops(&p.graph), ["Subgraph"]);
        assert_eq!(
            p.outputs[0].as_slice::<f32>().unwrap(),
            [0.0, 2.0, 0.0, 4.0]
        );

        let n = 256;
        let mut big = Graph::new();
        let a = big.add_value("a");
        big.inputs.push(a);
        // B[k][j] = j, so with A all ones Y[i][j] = 256 j.
        let bv: Vec<f32> = (0..n * n).map(|i| (i % n) as f32).collect();
        let b = big.add_constant("b", f32s(&[n, n], &bv));
        let y = node(&mut big, "matmul", Arc::new(MatMul), &[a, b]);
        big.outputs.push(y);
        let at = Tensor::from_vec(&[n, n], vec![1.0f32; n * n]).unwrap();
        let p = partitioned(&big, &[&at], &device, PartitionOptions::default().min_ops);
        assert_eq!(placement(&p.report, "matmul"), &Placement::Device(0));
        let sub = &p.report.subgraphs[0];
        assert_eq!(sub.flops, 2 * 256 * 256 * 256);
        assert_eq!(sub.work_ops, 512);
        // The weight goes in with the subgraph, not as a copy.
        assert_eq!(sub.copies_in.len(), 1);
        assert_eq!(sub.copies_in[0].value, "a");
        assert_eq!(sub.copies_in[0].bytes, 256 * 256 * 4);
        let yv = p.outputs[0].as_slice::<f32>().unwrap();
        assert_eq!(yv[3], 768.0);
        assert_eq!(yv[n * n - 1], 255.0 * 256.0);
        let p = partitioned(&big, &[&at], &device, 513);
        assert_eq!(placement(&p.report, "matmul"), &Placement::TooSmall(0));
        assert_eq!(ops(&p.graph), ["MatMul"]);
    }

    /// s = x + z; r = relu(s); y = r * r; n = -s (unsupported): the subgraph {add, relu, mul}
    /// copies x and z in, and s (read by n outside) and y (a graph output) out.
    #[test]
    fn copies_sit_at_every_boundary() {
        let mut g = Graph::new();
        let x = g.add_value("x");
        let z = g.add_value("z");
        g.inputs.extend([x, z]);
        let s = node(&mut g, "add", bin(BinaryKind::Add), &[x, z]);
        let r = node(&mut g, "relu", un(UnaryKind::Relu), &[s]);
        let y = node(&mut g, "mul", bin(BinaryKind::Mul), &[r, r]);
        let n = node(&mut g, "neg", un(UnaryKind::Neg), &[s]);
        g.outputs.extend([y, n]);
        let xt = f32s(&[2, 2], &[1.0, -2.0, 3.0, -4.0]);
        let zt = f32s(&[2, 2], &[0.5, 0.5, -5.0, 5.0]);
        let device = FakeDevice::with_ops(&["Add", "Relu", "Mul"]);
        let p = partitioned(&g, &[&xt, &zt], &device, 1);

        assert_eq!(ops(&p.graph), ["Subgraph", "Neg"]);
        let info = &p.report.subgraphs[0];
        let names = |c: &[Copy]| c.iter().map(|c| c.value.clone()).collect::<Vec<_>>();
        assert_eq!(names(&info.copies_in), ["x", "z"]);
        assert_eq!(names(&info.copies_out), ["add:0", "mul:0"]);
        assert!(info
            .copies_in
            .iter()
            .chain(&info.copies_out)
            .all(|c| c.bytes == 16));

        let outer = &p.graph.nodes[0];
        let inner = &subgraph(outer).graph;
        assert_eq!(subgraph(outer).device, "fake");
        assert_eq!(ops(inner)[..2], ["CopyToDevice", "CopyToDevice"]);
        let count = |dir: CopyDirection| {
            inner
                .nodes
                .iter()
                .filter_map(|n| n.op.as_any().downcast_ref::<DeviceCopy>())
                .filter(|c| c.direction == dir && c.device == "fake")
                .count()
        };
        assert_eq!(count(CopyDirection::ToDevice), 2);
        assert_eq!(count(CopyDirection::ToHost), 2);
        // Inputs and outputs correspond by position to the subgraph node's, each read by one
        // CopyToDevice and written by one CopyToHost.
        assert_eq!(inner.inputs.len(), outer.inputs.len());
        assert_eq!(inner.outputs.len(), outer.outputs.len());
        let consumers = inner.consumers();
        for (&v, outer_v) in inner.inputs.iter().zip(&outer.inputs) {
            assert_eq!(inner.value(v).name, p.graph.value(outer_v.unwrap()).name);
            let readers = &consumers[&v];
            assert_eq!(readers.len(), 1);
            assert_eq!(inner.nodes[readers[0].0].op.name(), "CopyToDevice");
        }
        for (&v, &outer_v) in inner.outputs.iter().zip(&outer.outputs) {
            assert_eq!(inner.value(v).name, p.graph.value(outer_v).name);
            let producer = inner.value(v).producer.unwrap();
            assert_eq!(inner.nodes[producer.0].op.name(), "CopyToHost");
        }
        // s is read inside (relu) and outside (neg): the outside reads the copy out.
        let neg = &p.graph.nodes[1];
        assert_eq!(neg.inputs[0], Some(outer.outputs[0]));
        assert_eq!(p.graph.value(s).producer, Some(NodeId(0)));

        // s = [1.5, -1.5, -2, 1]: y = relu(s)^2, n = -s.
        assert_eq!(
            p.outputs[0].as_slice::<f32>().unwrap(),
            [2.25, 0.0, 0.0, 1.0]
        );
        assert_eq!(
            p.outputs[1].as_slice::<f32>().unwrap(),
            [-1.5, 1.5, 2.0, -1.0]
        );
    }

    #[test]
    fn device_kernels_run_compile_and_fall_back() {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let r = node(&mut g, "relu", un(UnaryKind::Relu), &[x]);
        let y = node(&mut g, "neg", un(UnaryKind::Neg), &[r]);
        g.outputs.push(y);
        let xt = f32s(&[3], &[-1.0, 0.5, 2.0]);
        for fail in [FakeFailure::Never, FakeFailure::Compile, FakeFailure::Run] {
            let device = FakeDevice::with_ops(&["Relu", "Neg"]).failing(fail);
            let mut graph = g.clone();
            infer_graph(&mut graph, &[TensorInfo::of(&xt)]).unwrap();
            partition(&mut graph, &device, &PartitionOptions { min_ops: 1 }).unwrap();
            let warnings = Warnings::quiet();
            let kernels = DeviceKernels {
                devices: vec![Arc::new(device.clone())],
                cpu: Arc::new(ReferenceKernels),
                warnings: warnings.clone(),
            };
            let plan = Plan::build(&graph, &HashSet::new(), Some(&kernels)).unwrap();
            for _ in 0..2 {
                let y = plan.run(&[&xt]).unwrap().remove(0);
                assert_eq!(y.as_slice::<f32>().unwrap(), [-0.0, -0.5, -2.0]);
            }
            let c = &device.counters;
            let (compiled, runs, copies) = (
                c.compiled.load(Ordering::Relaxed),
                c.runs.load(Ordering::Relaxed),
                c.copies.load(Ordering::Relaxed),
            );
            let w = warnings.all();
            match fail {
                FakeFailure::Never => {
                    // One copy in and one out per run.
                    assert_eq!((compiled, runs, copies), (1, 2, 4));
                    assert!(w.is_empty(), "{w:?}");
                }
                FakeFailure::Compile => {
                    assert_eq!((compiled, runs), (0, 0));
                    assert_eq!(w.len(), 1);
                    assert!(
                        w[0].contains("'fake_subgraph_0' could not be compiled"),
                        "{w:?}"
                    );
                    assert!(w[0].contains("told to fail compiling"), "{w:?}");
                }
                FakeFailure::Run => {
                    assert_eq!((compiled, runs), (1, 0));
                    // Once: the second run goes straight to the CPU.
                    assert_eq!(w.len(), 1);
                    assert!(w[0].contains("'fake_subgraph_0' failed on device"), "{w:?}");
                    assert!(w[0].contains("told to fail running"), "{w:?}");
                }
            }
        }
    }

    #[test]
    fn dot_draws_subgraphs_as_clusters() {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let r = node(&mut g, "relu", un(UnaryKind::Relu), &[x]);
        let a = node(&mut g, "abs", un(UnaryKind::Abs), &[r]);
        let n = node(&mut g, "neg", un(UnaryKind::Neg), &[a]);
        g.outputs.extend([a, n]);
        let device = FakeDevice::with_ops(&["Relu", "Abs"]);
        let p = partitioned(&g, &[&f32s(&[2], &[-1.0, 1.0])], &device, 1);
        let dot = p.graph.to_dot();
        assert!(dot.contains("subgraph cluster_s0_ {"), "{dot}");
        assert!(dot.contains("label=\"fake_subgraph_0 (fake)\""), "{dot}");
        for op in ["CopyToDevice", "Relu", "Abs", "CopyToHost", "Neg"] {
            assert!(dot.contains(&format!("label=\"{op}\\n")), "{op}: {dot}");
        }
        assert!(!dot.contains("Subgraph\\n"), "{dot}");
        // x goes into the copy in, the copy out gives abs:0, which neg reads.
        assert!(dot.contains("  v0 -> s0_n0;"), "{dot}");
        assert!(dot.contains("  s0_n3 -> v2;"), "{dot}");
        assert!(dot.contains("  v2 -> n1;"), "{dot}");
        // Every edge joins drawn nodes, each drawn once.
        let mut declared = HashSet::new();
        for line in dot.lines().filter(|l| l.contains(" [shape=")) {
            let id = line.split_whitespace().next().unwrap();
            assert!(declared.insert(id), "{id} drawn twice: {dot}");
        }
        for line in dot.lines().filter(|l| l.contains(" -> ")) {
            for id in line.trim().trim_end_matches(';').split(" -> ") {
                assert!(declared.contains(id), "{id} is not drawn: {dot}");
            }
        }
    }

    /// A small deterministic generator for the random graphs below.
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) % n as u64) as usize
        }
    }

    /// Random DAGs with random supported sets: partitioning never makes a cycle (between a
    /// subgraph and the rest, or between two subgraphs) and never changes the results.
    #[test]
    fn random_graphs_partition_without_cycles() {
        let kinds = [
            un(UnaryKind::Relu),
            un(UnaryKind::Neg),
            un(UnaryKind::Abs),
            un(UnaryKind::Sin),
            bin(BinaryKind::Add),
            bin(BinaryKind::Sub),
        ];
        let xt = f32s(&[3], &[-1.0, 0.25, 2.0]);
        let mut rng = Lcg(7);
        for case in 0..2000 {
            let mut g = Graph::new();
            let x = g.add_value("x");
            g.inputs.push(x);
            let mut values = vec![x];
            let n = 4 + rng.below(16);
            for i in 0..n {
                let op = kinds[rng.below(kinds.len())].clone();
                let arity = op.prototype().inputs.len();
                let ins: Vec<ValueId> = (0..arity)
                    .map(|_| {
                        // Mostly recent values, for long paths.
                        let back = rng.below(values.len().min(6)) + 1;
                        values[values.len() - back]
                    })
                    .collect();
                values.push(node(&mut g, &format!("n{i}"), op, &ins));
            }
            let consumers = g.consumers();
            g.outputs = values[1..]
                .iter()
                .copied()
                .filter(|v| !consumers.contains_key(v) || rng.below(4) == 0)
                .collect();
            let supported: Vec<&str> = kinds
                .iter()
                .map(|k| k.name())
                .filter(|_| rng.below(3) != 0)
                .collect();
            let device = FakeDevice::with_ops(&supported);
            let p = partitioned(&g, &[&xt], &device, 1);
            let placed = p
                .report
                .nodes
                .iter()
                .filter(|n| matches!(n.placement, Placement::Device(_)))
                .count();
            let inner: usize = p
                .graph
                .nodes
                .iter()
                .filter_map(|n| n.op.as_any().downcast_ref::<Subgraph>())
                .map(|s| s.graph.nodes.len() - s.graph.inputs.len() - s.graph.outputs.len())
                .sum();
            assert_eq!(placed, inner, "case {case}");
        }
    }
}
