//! Execution plans: instructions in order over numbered tensor slots, each with its kernel.
//!
//! A plan is built once per input-shape signature from an inferred graph. Static steps know their
//! output shapes and reuse the buffers of earlier runs; dynamic steps (see [`crate::infer`])
//! infer their shapes from the actual tensors when they run.

use crate::infer::{check_prototype, check_results, infer_node, node_error};
use crate::op::InferInput;
use crate::prepacked::Prepacks;
use crate::registry::{Considered, Selection};
use crate::scratch::{Scratch, ScratchNeed};
use crate::tensor::checked_numel;
use crate::{Error, Graph, Node, Op, OpResult, Result, Storage, Tensor, TensorInfo, ValueId};
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Computes one node. `outputs` arrive allocated with the planned shapes (zero-filled on the
/// first run, holding stale data afterwards); a kernel either writes into them or replaces them.
/// `scratch` holds at least what [`Kernel::scratch`] declared.
pub trait Kernel: Debug + Send + Sync {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        scratch: &Scratch,
    ) -> OpResult<()>;

    /// [`Kernel::run`] outside a plan (tests, tools, a kernel inside another): with scratch
    /// of its own for the current rayon pool.
    fn run_alone(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
        let scratch = Scratch::for_need(self.scratch(rayon::current_num_threads()));
        self.run(inputs, outputs, &scratch)
    }

    /// The scratch memory [`Kernel::run`] uses when it runs on `threads` workers, declared
    /// when the plan is built: the plan holds it and counts it against a session's memory cap.
    fn scratch(&self, _threads: usize) -> ScratchNeed {
        ScratchNeed::NONE
    }

    /// A short name for profiles and dumps.
    fn name(&self) -> &str;

    /// Whether the kernel writes into the `outputs` it is given. A kernel that replaces them
    /// (the reference) gets empty placeholders, so no planned buffer is wasted on it.
    fn writes_into_outputs(&self) -> bool {
        true
    }

    /// An input whose buffer output 0 may take over (an element-wise op whose output has that
    /// input's dtype and size). When the plan does so, `inputs[k]` arrives as `None` and
    /// `outputs[0]` holds that input's data; otherwise the call is the ordinary one.
    fn in_place_input(&self) -> Option<usize> {
        None
    }

    /// Bytes of weights this kernel prepacked (transformed copies it owns, for example packed
    /// GEMM panels, Winograd-transformed filters, requantization tables); 0 when it only reads
    /// its inputs. Counted against a session's memory cap.
    fn prepacked_bytes(&self) -> usize {
        0
    }
}

/// The kernel of last resort: the op's reference implementation.
#[derive(Debug)]
pub struct ReferenceKernel(pub Arc<dyn Op>);

impl Kernel for ReferenceKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &Scratch,
    ) -> OpResult<()> {
        let results = self.0.eval(inputs)?;
        if results.len() != outputs.len() {
            crate::op_bail!(
                "produced {} outputs, expected {}",
                results.len(),
                outputs.len()
            );
        }
        for (o, r) in outputs.iter_mut().zip(results) {
            *o = r;
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "reference"
    }

    fn writes_into_outputs(&self) -> bool {
        false
    }
}

/// What a kernel provider sees when choosing a kernel for a node.
pub struct KernelRequest<'a> {
    pub node: &'a Node,
    /// Input dtypes and shapes, with values for constants (weights to prepack).
    pub inputs: &'a [Option<InferInput<'a>>],
    pub outputs: &'a [TensorInfo],
    /// Where the kernel takes its prepacked weights ([`Prepacks::take`]): recorded for an
    /// optimized model, or stored in one.
    pub packs: &'a Prepacks,
}

/// Supplies optimised kernels for a device. Returning `None` falls back to the reference.
pub trait KernelProvider: Send + Sync {
    fn kernel(&self, req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>>;

    /// The kernel with the candidates considered for it (see [`crate::registry`]); the plan
    /// keeps them for `explain`. Providers without a registry report none.
    fn select(&self, req: &KernelRequest) -> Result<Selection<Box<dyn Kernel>>> {
        Ok(Selection {
            kernel: self.kernel(req)?,
            considered: Vec::new(),
        })
    }
}

/// A backend as a unit: the passes it adds after the device-independent ones (its layouts,
/// its fusions) and the kernels it picks per node.
pub trait Backend: KernelProvider {
    /// A short name ("cpu").
    fn name(&self) -> &str;

    /// What it runs on, for `info`, `bench` and `explain` ("cpu, avx2+fma").
    fn describe(&self) -> String;

    /// Its passes, run after the device-independent pipeline, in order.
    fn passes(&self) -> Vec<Box<dyn crate::passes::Pass>>;
}

/// A provider with no kernels: every node runs its reference implementation.
pub struct ReferenceKernels;

impl KernelProvider for ReferenceKernels {
    fn kernel(&self, _req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>> {
        Ok(None)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotKind {
    Constant,
    Input(usize),
    Temp,
}

/// Numbers the values a plan touches.
#[derive(Default)]
struct SlotTable {
    of: HashMap<ValueId, usize>,
    kind: Vec<SlotKind>,
    constants: Vec<Option<Tensor>>,
}

impl SlotTable {
    fn get(&mut self, v: ValueId, kind: SlotKind, constant: Option<Tensor>) -> usize {
        if let Some(&s) = self.of.get(&v) {
            return s;
        }
        self.kind.push(kind);
        self.constants.push(constant);
        self.of.insert(v, self.kind.len() - 1);
        self.kind.len() - 1
    }
}

#[derive(Debug)]
pub struct Step {
    pub node: Node,
    pub kernel: Box<dyn Kernel>,
    /// The kernels the provider considered for this node and why it passed over the others.
    pub considered: Vec<Considered>,
    inputs: Vec<Option<usize>>,
    outputs: Vec<usize>,
    /// Planned output types; `None` for a dynamic step.
    output_types: Option<Vec<TensorInfo>>,
    /// Slots whose last reader is this step (freed after it).
    frees: Vec<usize>,
    /// The input whose buffer output 0 takes over, when the kernel allows it and this step is
    /// the input's last reader.
    in_place: Option<usize>,
}

/// Intermediate tensor sizes of a plan (inputs and constants excluded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Number of intermediate tensors (step outputs, graph outputs included).
    pub intermediates: usize,
    /// Sum of the sizes of all intermediates whose size is known at prerun.
    pub intermediate_bytes: u64,
    /// Most bytes of intermediates alive at once, by the plan's lifetimes: what an arena that
    /// places tensors by lifetime needs at least.
    pub peak_live_bytes: u64,
    /// Outputs of dynamic steps, whose sizes are only known at run time (counted as 0 above).
    pub unknown: usize,
    /// Bytes of the buffers the memory plan shares between intermediates by lifetime.
    pub arena_bytes: u64,
    /// Number of those shared buffers.
    pub arena_buffers: usize,
    /// The kernels' scratch: the most any one step declared (see [`Kernel::scratch`]).
    pub scratch: ScratchNeed,
    /// The workers `scratch` was declared for.
    pub threads: usize,
}

/// Whether `step` may write output 0 over input `k` (see [`Kernel::in_place_input`]): the input
/// is an intermediate read last here, once, and has output 0's dtype and size.
fn in_place_candidate(
    graph: &Graph,
    step: &Step,
    si: usize,
    last_use: &HashMap<usize, usize>,
    kind: &[SlotKind],
    keep: &HashSet<usize>,
) -> Option<usize> {
    let k = step.kernel.in_place_input()?;
    let s = (*step.inputs.get(k)?)?;
    let out_ty = step.output_types.as_ref()?.first()?;
    let in_ty = graph.value((*step.node.inputs.get(k)?)?).info.as_ref()?;
    let same_size = in_ty.dtype.size() == out_ty.dtype.size() && in_ty.numel() == out_ty.numel();
    let once = step.inputs.iter().flatten().filter(|&&x| x == s).count() == 1;
    let ok = kind[s] == SlotKind::Temp
        && !keep.contains(&s)
        && !keep.contains(step.outputs.first()?)
        && last_use.get(&s) == Some(&si)
        && once
        && same_size;
    ok.then_some(k)
}

/// Where intermediates live: buffers shared by tensors whose lifetimes do not overlap.
#[derive(Debug, Default)]
struct MemoryPlan {
    /// The buffer of each slot; `None` for inputs, constants, graph outputs (handed to the
    /// caller), dynamic outputs and outputs of kernels that allocate their own.
    buffer_of: Vec<Option<usize>>,
    /// Size of each buffer in bytes.
    buffer_bytes: Vec<u64>,
}

impl MemoryPlan {
    /// Greedy by size: the largest tensors are placed first, each in the smallest buffer that
    /// is free over its whole lifetime, or in a new one. A step's outputs are alive together
    /// with its inputs. Outputs that share their input's data (Reshape) join its group, which
    /// then lives as long as all its members.
    fn build(steps: &[Step], slot_kind: &[SlotKind], keep: &HashSet<usize>) -> MemoryPlan {
        let n = slot_kind.len();
        let mut bytes: Vec<Option<u64>> = vec![None; n];
        let mut first = vec![usize::MAX; n];
        let mut last = vec![0usize; n];
        // Union-find over alias groups.
        let mut parent: Vec<usize> = (0..n).collect();
        fn find(parent: &mut [usize], mut s: usize) -> usize {
            while parent[s] != s {
                parent[s] = parent[parent[s]];
                s = parent[s];
            }
            s
        }
        let mut excluded = vec![false; n];
        for (si, step) in steps.iter().enumerate() {
            for s in step.inputs.iter().flatten() {
                last[*s] = last[*s].max(si);
            }
            for (k, &s) in step.outputs.iter().enumerate() {
                first[s] = first[s].min(si);
                last[s] = last[s].max(si);
                match &step.output_types {
                    Some(types) if step.kernel.writes_into_outputs() || k == 0 => {
                        let ty = &types[k];
                        bytes[s] = Some((ty.numel() as u64).saturating_mul(ty.dtype.size() as u64));
                    }
                    _ => excluded[s] = true,
                }
            }
            if let (Some(k), Some(&o)) = (step.in_place, step.outputs.first()) {
                if let Some(Some(i)) = step.inputs.get(k) {
                    let (ri, ro) = (find(&mut parent, *i), find(&mut parent, o));
                    parent[ro] = ri;
                }
            }
            let alias = !step.kernel.writes_into_outputs() && step.node.op.output_aliases_input();
            if alias {
                if let (Some(Some(i)), Some(&o)) = (step.inputs.first(), step.outputs.first()) {
                    if slot_kind[*i] == SlotKind::Temp {
                        let (ri, ro) = (find(&mut parent, *i), find(&mut parent, o));
                        parent[ro] = ri;
                    } else {
                        excluded[o] = true;
                    }
                }
            } else if !step.kernel.writes_into_outputs() {
                // The reference allocates its own outputs.
                for &s in &step.outputs {
                    excluded[s] = true;
                }
            }
        }
        for &s in keep {
            excluded[s] = true;
        }
        // Per group: lifetime, size, and whether any member rules the group out.
        let mut group_span: HashMap<usize, (usize, usize, u64, bool)> = HashMap::new();
        for s in 0..n {
            if slot_kind[s] != SlotKind::Temp || first[s] == usize::MAX {
                continue;
            }
            let r = find(&mut parent, s);
            let e = group_span.entry(r).or_insert((usize::MAX, 0, 0, false));
            e.0 = e.0.min(first[s]);
            e.1 = e.1.max(last[s]);
            e.2 = e.2.max(bytes[s].unwrap_or(0));
            e.3 |= excluded[s] || bytes[s].is_none();
        }
        // An alias group's root may be the only member that an aliasing reference kernel did
        // not allocate: the group is placed if none of its members is excluded.
        let mut groups: Vec<(usize, usize, usize, u64)> = group_span
            .into_iter()
            .filter(|(_, (_, _, b, ex))| !ex && *b > 0)
            .map(|(r, (f, l, b, _))| (r, f, l, b))
            .collect();
        groups.sort_by(|a, b| b.3.cmp(&a.3).then(a.1.cmp(&b.1)).then(a.0.cmp(&b.0)));
        let mut plan = MemoryPlan {
            buffer_of: vec![None; n],
            buffer_bytes: Vec::new(),
        };
        let mut busy: Vec<Vec<(usize, usize)>> = Vec::new();
        let mut group_buffer: HashMap<usize, usize> = HashMap::new();
        for &(root, f, l, b) in &groups {
            let free = |spans: &Vec<(usize, usize)>| spans.iter().all(|&(a, z)| z < f || a > l);
            // Buffers are created largest first, so every existing one is big enough.
            let pick = (0..busy.len())
                .filter(|&k| free(&busy[k]))
                .min_by_key(|&k| plan.buffer_bytes[k]);
            let k = match pick {
                Some(k) => k,
                None => {
                    plan.buffer_bytes.push(b);
                    busy.push(Vec::new());
                    busy.len() - 1
                }
            };
            busy[k].push((f, l));
            group_buffer.insert(root, k);
        }
        for s in 0..n {
            if slot_kind[s] == SlotKind::Temp && first[s] != usize::MAX {
                let r = find(&mut parent, s);
                plan.buffer_of[s] = group_buffer.get(&r).copied();
            }
        }
        plan
    }
}

/// Time spent in one op type during a profiled run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpTypeTime {
    pub op_type: String,
    /// Steps of this type.
    pub count: usize,
    pub time: Duration,
}

/// A compiled plan for one input-shape signature.
#[derive(Debug)]
pub struct Plan {
    pub steps: Vec<Step>,
    slot_kind: Vec<SlotKind>,
    constants: Vec<Option<Tensor>>,
    output_slots: Vec<usize>,
    input_types: Vec<TensorInfo>,
    memory: MemoryPlan,
    /// The memory plan's buffers kept between runs, one set per concurrent run.
    pools: Mutex<Vec<RunBuffers>>,
    /// The largest output a dynamic step may produce (a session's memory cap): the sizes
    /// that are only known at run time are bounded too.
    tensor_limit: usize,
}

/// Bytes of a tensor of type `t` (saturating: a shape too large for memory is over any limit).
fn info_bytes(t: &TensorInfo) -> usize {
    checked_numel(&t.shape).map_or(usize::MAX, |n| n.saturating_mul(t.dtype.size()))
}

/// What one run of a plan works in: the memory plan's buffers and the kernels' scratch.
#[derive(Debug)]
struct RunBuffers {
    tensors: Vec<Option<Storage>>,
    scratch: Scratch,
}

impl Plan {
    /// Builds a plan from a graph that went through [`crate::infer::infer_graph`].
    pub fn build(
        graph: &Graph,
        dynamic: &HashSet<String>,
        provider: Option<&dyn KernelProvider>,
    ) -> Result<Plan> {
        Plan::build_with_prepacks(graph, dynamic, provider, Prepacks::none())
    }

    /// [`Plan::build`] whose kernels record their prepacked weights into `packs`, or take
    /// stored ones from it (see [`crate::prepacked`]).
    pub fn build_with_prepacks(
        graph: &Graph,
        dynamic: &HashSet<String>,
        provider: Option<&dyn KernelProvider>,
        packs: &Prepacks,
    ) -> Result<Plan> {
        let mut slots = SlotTable::default();
        let mut input_types = Vec::new();
        for (i, &v) in graph.inputs.iter().enumerate() {
            slots.get(v, SlotKind::Input(i), None);
            input_types.push(graph.value(v).info.clone().ok_or_else(|| {
                Error::Other(format!("input '{}' has no type", graph.value(v).name))
            })?);
        }
        let mut steps = Vec::with_capacity(graph.nodes.len());
        for node in &graph.nodes {
            let mut ins = Vec::with_capacity(node.inputs.len());
            for inp in &node.inputs {
                ins.push(inp.map(|v| {
                    let val = graph.value(v);
                    match &val.constant {
                        Some(c) => slots.get(v, SlotKind::Constant, Some(c.clone())),
                        None => slots.get(v, SlotKind::Temp, None),
                    }
                }));
            }
            let outs: Vec<usize> = node
                .outputs
                .iter()
                .map(|&o| slots.get(o, SlotKind::Temp, None))
                .collect();
            let is_dynamic = dynamic.contains(&node.name);
            let (kernel, considered, output_types): (Box<dyn Kernel>, _, _) = if is_dynamic {
                (Box::new(ReferenceKernel(node.op.clone())), Vec::new(), None)
            } else {
                let infer_inputs = graph.infer_inputs(node);
                let outputs: Vec<TensorInfo> =
                    node.outputs
                        .iter()
                        .map(|o| {
                            graph.value(*o).info.clone().ok_or_else(|| {
                                node_error(node, "output type unknown after inference")
                            })
                        })
                        .collect::<Result<_>>()?;
                let req = KernelRequest {
                    node,
                    inputs: &infer_inputs,
                    outputs: &outputs,
                    packs,
                };
                packs.set_node(&node.name);
                // Strings, sequences and optionals are not bytes: only reference
                // implementations handle them.
                let bytes_only = infer_inputs.iter().flatten().all(|x| x.dtype.is_bytes())
                    && outputs.iter().all(|o| o.dtype.is_bytes());
                let picked = match provider {
                    Some(p) if bytes_only => p.select(&req)?,
                    _ => Selection {
                        kernel: None,
                        considered: Vec::new(),
                    },
                };
                (
                    picked
                        .kernel
                        .unwrap_or_else(|| Box::new(ReferenceKernel(node.op.clone()))),
                    picked.considered,
                    Some(outputs),
                )
            };
            steps.push(Step {
                node: node.clone(),
                kernel,
                considered,
                inputs: ins,
                outputs: outs,
                output_types,
                frees: Vec::new(),
                in_place: None,
            });
        }
        let mut output_slots = Vec::new();
        for &o in &graph.outputs {
            let val = graph.value(o);
            let s = match &val.constant {
                Some(c) => slots.get(o, SlotKind::Constant, Some(c.clone())),
                None => *slots.of.get(&o).ok_or_else(|| {
                    Error::InvalidModel(format!("output '{}' is never computed", val.name))
                })?,
            };
            output_slots.push(s);
        }
        // Lifetimes: free each temporary after its last reader, unless it is a graph output.
        let keep: HashSet<usize> = output_slots.iter().copied().collect();
        let mut last_use: HashMap<usize, usize> = HashMap::new();
        for (si, step) in steps.iter().enumerate() {
            for s in step.inputs.iter().flatten() {
                last_use.insert(*s, si);
            }
        }
        for (si, step) in steps.iter().enumerate() {
            // Outputs nobody reads (MaxPool's indices, say) die with their step.
            for &s in &step.outputs {
                last_use.entry(s).or_insert(si);
            }
        }
        for (&s, &si) in &last_use {
            if slots.kind[s] == SlotKind::Temp && !keep.contains(&s) {
                steps[si].frees.push(s);
            }
        }
        for (si, step) in steps.iter_mut().enumerate() {
            step.in_place = in_place_candidate(graph, step, si, &last_use, &slots.kind, &keep);
        }
        let SlotTable {
            kind: slot_kind,
            constants,
            ..
        } = slots;
        let memory = MemoryPlan::build(&steps, &slot_kind, &keep);
        Ok(Plan {
            steps,
            slot_kind,
            constants,
            output_slots,
            input_types,
            memory,
            pools: Mutex::new(Vec::new()),
            tensor_limit: crate::tensor::MAX_TENSOR_BYTES,
        })
    }

    /// Limits every step's outputs to `bytes` (never above
    /// [`crate::tensor::MAX_TENSOR_BYTES`]): planned outputs now, with an error naming the
    /// first one over; the outputs of dynamic steps during each run. A session with a memory
    /// cap plans so, and so do the subgraphs of its control flow.
    pub fn limit_tensors(&mut self, bytes: usize) -> Result<()> {
        self.tensor_limit = bytes.min(crate::tensor::MAX_TENSOR_BYTES);
        for step in &self.steps {
            for (i, t) in step.output_types.iter().flatten().enumerate() {
                self.check_output_size(step, i, info_bytes(t))?;
            }
        }
        Ok(())
    }

    /// The error for output `i` of `step` needing `bytes`, when that is over the limit.
    fn check_output_size(&self, step: &Step, i: usize, bytes: usize) -> Result<()> {
        if bytes <= self.tensor_limit {
            return Ok(());
        }
        Err(Error::MemoryLimit {
            what: format!(
                "output {i} of node '{}' ({})",
                step.node.name,
                step.node.op.name()
            ),
            needed: bytes as u64,
            limit: self.tensor_limit as u64,
        })
    }

    /// A free set of run buffers: one a finished run left, or new ones. Scratch has a
    /// region per worker of the pool the run is on.
    fn take_buffers(&self) -> Result<RunBuffers> {
        let kept = self
            .pools
            .lock()
            .map_err(|_| Error::Other("buffer pool poisoned".into()))?
            .pop();
        let threads = rayon::current_num_threads();
        // Scratch is sized when a set is made (or the pool's size changed), not every run.
        let scratch = || Scratch::new(self.scratch_need(threads), threads);
        Ok(match kept {
            Some(b) if b.scratch.threads() == threads => b,
            Some(b) => RunBuffers {
                tensors: b.tensors,
                scratch: scratch(),
            },
            None => RunBuffers {
                tensors: std::iter::repeat_with(|| None)
                    .take(self.memory.buffer_bytes.len())
                    .collect(),
                scratch: scratch(),
            },
        })
    }

    fn put_back(&self, buffers: RunBuffers) {
        if let Ok(mut pools) = self.pools.lock() {
            pools.push(buffers);
        }
    }

    /// The most scratch any step declared for `threads` workers.
    pub fn scratch_need(&self, threads: usize) -> ScratchNeed {
        self.steps
            .iter()
            .map(|s| s.kernel.scratch(threads))
            .fold(ScratchNeed::NONE, ScratchNeed::max)
    }

    pub fn input_types(&self) -> &[TensorInfo] {
        &self.input_types
    }

    /// Runs the plan on inputs given in graph-input order. Returns outputs in graph-output order.
    pub fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let mut buffers = self.take_buffers()?;
        let result = self.run_with(inputs, &mut buffers, None);
        self.put_back(buffers);
        result
    }

    /// Like [`Plan::run`], also returning the wall time of each step (indexed like
    /// [`Plan::steps`]): the kernel plus its share of bookkeeping (output buffers, checks).
    pub fn run_profiled(&self, inputs: &[&Tensor]) -> Result<(Vec<Tensor>, Vec<Duration>)> {
        let mut buffers = self.take_buffers()?;
        let mut times = Vec::with_capacity(self.steps.len());
        let result = self.run_with(inputs, &mut buffers, Some(&mut times));
        self.put_back(buffers);
        result.map(|outs| (outs, times))
    }

    /// Bytes of prepacked weights the plan's kernels own (see [`Kernel::prepacked_bytes`]).
    pub fn prepacked_bytes(&self) -> u64 {
        self.steps
            .iter()
            .map(|s| s.kernel.prepacked_bytes() as u64)
            .fold(0, u64::saturating_add)
    }

    /// Sizes of the intermediate tensors, from the planned types and the lifetimes, and the
    /// kernels' scratch on `threads` workers.
    pub fn memory_stats(&self, threads: usize) -> MemoryStats {
        let mut bytes = vec![0u64; self.slot_kind.len()];
        let mut stats = MemoryStats::default();
        for step in &self.steps {
            match &step.output_types {
                Some(types) => {
                    for (&s, ty) in step.outputs.iter().zip(types) {
                        bytes[s] = (ty.numel() as u64).saturating_mul(ty.dtype.size() as u64);
                    }
                }
                None => stats.unknown += step.outputs.len(),
            }
        }
        // Replays the run: outputs come alive when their step starts (its inputs are still
        // live then) and die after their last reader; graph outputs live to the end.
        let mut live = 0u64;
        for step in &self.steps {
            for &s in &step.outputs {
                live = live.saturating_add(bytes[s]);
                stats.intermediates += 1;
                stats.intermediate_bytes = stats.intermediate_bytes.saturating_add(bytes[s]);
            }
            stats.peak_live_bytes = stats.peak_live_bytes.max(live);
            for &s in &step.frees {
                live = live.saturating_sub(bytes[s]);
            }
        }
        stats.arena_bytes = self.memory.buffer_bytes.iter().sum();
        stats.arena_buffers = self.memory.buffer_bytes.len();
        stats.scratch = self.scratch_need(threads);
        stats.threads = threads;
        stats
    }

    /// Sums per-step times (from [`Plan::run_profiled`]) by op type, slowest first.
    pub fn time_by_op_type(&self, times: &[Duration]) -> Vec<OpTypeTime> {
        let mut by: HashMap<&str, OpTypeTime> = HashMap::new();
        for (step, &t) in self.steps.iter().zip(times) {
            let name = step.node.op.name();
            let e = by.entry(name).or_insert_with(|| OpTypeTime {
                op_type: name.to_string(),
                count: 0,
                time: Duration::ZERO,
            });
            e.count += 1;
            e.time += t;
        }
        let mut v: Vec<OpTypeTime> = by.into_values().collect();
        v.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| a.op_type.cmp(&b.op_type)));
        v
    }

    fn run_with(
        &self,
        inputs: &[&Tensor],
        buffers: &mut RunBuffers,
        mut profile: Option<&mut Vec<Duration>>,
    ) -> Result<Vec<Tensor>> {
        let RunBuffers {
            tensors: pool,
            scratch,
        } = buffers;
        let mut vals: Vec<Option<Tensor>> = vec![None; self.slot_kind.len()];
        for (i, kind) in self.slot_kind.iter().enumerate() {
            match kind {
                SlotKind::Constant => vals[i] = self.constants[i].clone(),
                SlotKind::Input(k) => vals[i] = Some((*inputs[*k]).clone()),
                SlotKind::Temp => {}
            }
        }
        for step in &self.steps {
            // Only read the clock when profiling.
            let started = profile.is_some().then(Instant::now);
            if step
                .inputs
                .iter()
                .any(|s| s.is_some_and(|s| vals[s].is_none()))
            {
                return Err(node_error(&step.node, "an input was not computed"));
            }
            // Output 0 takes over the input's memory when nothing else holds it.
            let mut taken: Option<Storage> = None;
            let mut in_place = None;
            if let Some(k) = step.in_place {
                if let Some(Some(s)) = step.inputs.get(k) {
                    if vals[*s].as_ref().is_some_and(Tensor::is_unique) {
                        taken = vals[*s].take().and_then(Tensor::into_storage);
                        in_place = taken.is_some().then_some(k);
                    }
                }
            }
            let ins: Vec<Option<&Tensor>> = step
                .inputs
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    if in_place == Some(i) {
                        None
                    } else {
                        s.and_then(|s| vals[s].as_ref())
                    }
                })
                .collect();
            let by_running = step.output_types.is_none() && step.node.op.shapes_known_by_running();
            let infer_inputs = || -> Vec<Option<InferInput>> {
                ins.iter()
                    .map(|t| {
                        t.map(|t| InferInput {
                            dtype: t.dtype(),
                            shape: t.shape(),
                            value: Some(t),
                        })
                    })
                    .collect()
            };
            let types = match &step.output_types {
                Some(t) => t.clone(),
                // Typed below, by what the kernel (the reference) produces; the inputs are
                // still checked against the prototype, which inference never saw.
                None if by_running => {
                    check_prototype(step.node.op.as_ref(), &infer_inputs())
                        .map_err(|e| node_error(&step.node, e))?;
                    Vec::new()
                }
                None => {
                    let types = infer_node(&step.node, &infer_inputs())?;
                    for (i, t) in types.iter().enumerate() {
                        self.check_output_size(step, i, info_bytes(t))?;
                    }
                    types
                }
            };
            let mut outs = Vec::with_capacity(step.outputs.len());
            let writes = step.kernel.writes_into_outputs();
            if by_running {
                for _ in &step.outputs {
                    outs.push(Tensor::zeros(crate::DType::F32, &[0])?);
                }
            }
            for (s, ty) in step.outputs.iter().zip(&types) {
                outs.push(if writes {
                    let storage = match taken.take() {
                        Some(st) => Some(st),
                        None => self.memory.buffer_of[*s].and_then(|b| pool[b].take()),
                    };
                    Tensor::with_storage(ty.dtype, &ty.shape, storage)?
                } else {
                    // Replaced by the kernel.
                    Tensor::zeros(ty.dtype, &[0])?
                });
            }
            step.kernel
                .run(&ins, &mut outs, scratch)
                .map_err(|e| node_error(&step.node, e))?;
            drop(ins);
            // Guards kernels (and the reference fallback) against producing the wrong type.
            // Ops typed by running have nothing to check against (their count is checked by
            // the reference kernel).
            if by_running {
                for (i, t) in outs.iter().enumerate() {
                    self.check_output_size(step, i, t.byte_len())?;
                }
            } else {
                check_results(&step.node, &types, &outs)?;
            }
            for (s, t) in step.outputs.iter().zip(outs) {
                vals[*s] = Some(t);
            }
            for &s in &step.frees {
                let freed = vals[s].take();
                // A buffer still shared (an output that aliases it, a caller's copy) is not
                // reused; the plan allocates afresh instead.
                if let (Some(b), Some(t)) = (self.memory.buffer_of[s], freed) {
                    if let Some(st) = t.into_storage() {
                        let keep_old = pool[b].as_ref().is_some_and(|o| o.bytes() >= st.bytes());
                        if !keep_old {
                            pool[b] = Some(st);
                        }
                    }
                }
            }
            if let (Some(times), Some(t0)) = (profile.as_deref_mut(), started) {
                times.push(t0.elapsed());
            }
        }
        self.output_slots
            .iter()
            .map(|&s| {
                vals[s]
                    .clone()
                    .ok_or_else(|| Error::Other("an output was not computed".into()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infer::infer_graph;
    use crate::ops::elementwise::binary::{Binary, BinaryKind};
    use crate::ops::elementwise::unary::{Unary, UnaryKind};
    use crate::DType;

    fn unary(kind: UnaryKind) -> Arc<dyn Op> {
        Arc::new(Unary { kind })
    }

    /// a = Relu(x), b = Neg(a), c = Relu(b), y = a + c, over `n` f32s.
    fn plan(n: usize) -> Plan {
        plan_with(n, None)
    }

    /// [`plan`] with kernels from `provider`.
    fn plan_with(n: usize, provider: Option<&dyn KernelProvider>) -> Plan {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let a = g
            .add_op("a", unary(UnaryKind::Relu), vec![Some(x)], 1)
            .unwrap()[0];
        let b = g
            .add_op("b", unary(UnaryKind::Neg), vec![Some(a)], 1)
            .unwrap()[0];
        let c = g
            .add_op("c", unary(UnaryKind::Relu), vec![Some(b)], 1)
            .unwrap()[0];
        let add = Arc::new(Binary::new(BinaryKind::Add));
        let y = g.add_op("y", add, vec![Some(a), Some(c)], 1).unwrap()[0];
        g.outputs.push(y);
        let dynamic = infer_graph(&mut g, &[TensorInfo::new(DType::F32, vec![n])]).unwrap();
        Plan::build(&g, &dynamic, provider).unwrap()
    }

    #[test]
    fn memory_stats_follow_lifetimes() {
        let m = plan(256).memory_stats(1);
        // Four 1 KiB intermediates; at most a, b, c (or a, c, y) are alive together.
        assert_eq!(m.intermediates, 4);
        assert_eq!(m.intermediate_bytes, 4096);
        assert_eq!(m.peak_live_bytes, 3072);
        assert_eq!(m.unknown, 0);
    }

    /// A reference kernel that declares `shared` and `per_thread` bytes of scratch and, in
    /// each of `tasks` parallel tasks, fills its thread's region; `extra` bytes more than it
    /// declared are taken from the shared region.
    #[derive(Debug)]
    struct Scratching {
        inner: ReferenceKernel,
        need: ScratchNeed,
        tasks: usize,
        extra: usize,
    }

    impl Kernel for Scratching {
        fn run(
            &self,
            inputs: &[Option<&Tensor>],
            outputs: &mut [Tensor],
            scratch: &Scratch,
        ) -> OpResult<()> {
            use rayon::prelude::*;
            scratch.with_shared(|c| -> OpResult<()> {
                let all: &mut [u8] = c.take(self.need.shared + self.extra)?;
                all.fill(1);
                Ok(())
            })?;
            (0..self.tasks).into_par_iter().try_for_each(|t| {
                scratch.with_thread(|c| -> OpResult<()> {
                    let own: &mut [f32] = c.take(self.need.per_thread / 4)?;
                    own.fill(t as f32);
                    // Another task on this thread in between would have changed it.
                    assert!(own.iter().all(|&v| v == t as f32));
                    Ok(())
                })
            })?;
            self.inner.run(inputs, outputs, scratch)
        }
        fn name(&self) -> &str {
            "scratching"
        }
        fn writes_into_outputs(&self) -> bool {
            false
        }
        fn scratch(&self, _threads: usize) -> ScratchNeed {
            self.need
        }
    }

    /// Builds plans of `Relu(x)` whose kernel declares `need`.
    struct ScratchingKernels {
        need: ScratchNeed,
        extra: usize,
    }

    impl KernelProvider for ScratchingKernels {
        fn kernel(&self, req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>> {
            Ok(Some(Box::new(Scratching {
                inner: ReferenceKernel(req.node.op.clone()),
                need: self.need,
                tasks: 64,
                extra: self.extra,
            })))
        }
    }

    #[test]
    fn kernels_get_the_scratch_they_declare_and_no_more() {
        let need = ScratchNeed {
            shared: 1000,
            per_thread: 4096,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let xt = Tensor::from_vec(&[4], vec![-1.0f32, 2.0, -3.0, 4.0]).unwrap();
        let provider = ScratchingKernels { need, extra: 0 };
        let plan = plan_with(4, Some(&provider));
        let m = plan.memory_stats(3);
        assert_eq!((m.scratch, m.threads), (need, 3));
        assert_eq!(m.scratch.bytes(3), 1000 + 3 * 4096);
        for _ in 0..3 {
            let y = pool.install(|| plan.run(&[&xt])).unwrap();
            // y = relu(x) + relu(-relu(x)) = relu(x).
            assert_eq!(y[0].to_f64_vec(), [0.0, 2.0, 0.0, 4.0]);
        }
        // A kernel taking more than it declared fails, naming scratch.
        let greedy = ScratchingKernels { need, extra: 64 };
        let plan = plan_with(4, Some(&greedy));
        let e = pool.install(|| plan.run(&[&xt])).unwrap_err().to_string();
        assert!(e.contains("scratch") && e.contains("'a'"), "{e}");
    }

    /// A reference kernel that claims `n` bytes of prepacked weights.
    #[derive(Debug)]
    struct Prepacking(ReferenceKernel, usize);

    impl Kernel for Prepacking {
        fn run(
            &self,
            inputs: &[Option<&Tensor>],
            outputs: &mut [Tensor],
            scratch: &Scratch,
        ) -> OpResult<()> {
            self.0.run(inputs, outputs, scratch)
        }
        fn name(&self) -> &str {
            "prepacking"
        }
        fn writes_into_outputs(&self) -> bool {
            false
        }
        fn prepacked_bytes(&self) -> usize {
            self.1
        }
    }

    /// Relu prepacks 100 bytes, everything else none.
    struct PrepackingRelu;

    impl KernelProvider for PrepackingRelu {
        fn kernel(&self, req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>> {
            let k = ReferenceKernel(req.node.op.clone());
            Ok(Some(if req.node.op.name() == "Relu" {
                Box::new(Prepacking(k, 100))
            } else {
                Box::new(k)
            }))
        }
    }

    #[test]
    fn prepacked_bytes_sum_over_steps() {
        assert_eq!(plan(256).prepacked_bytes(), 0);
        // Two Relu steps (a and c) of 100 bytes each.
        assert_eq!(plan_with(16, Some(&PrepackingRelu)).prepacked_bytes(), 200);
    }

    /// Runs the reference, then copies into the planned outputs (as fast kernels do).
    #[derive(Debug)]
    struct CopyingKernel(Arc<dyn Op>);

    impl Kernel for CopyingKernel {
        fn run(
            &self,
            inputs: &[Option<&Tensor>],
            outputs: &mut [Tensor],
            _scratch: &Scratch,
        ) -> OpResult<()> {
            for (o, r) in outputs.iter_mut().zip(self.0.eval(inputs)?) {
                o.bytes_mut().copy_from_slice(r.bytes());
            }
            Ok(())
        }
        fn name(&self) -> &str {
            "copying"
        }
    }

    /// Like [`CopyingKernel`], and computes unary ops over their input's buffer when the plan
    /// lets it.
    #[derive(Debug)]
    struct InPlaceKernel(Arc<dyn Op>);

    impl Kernel for InPlaceKernel {
        fn run(
            &self,
            inputs: &[Option<&Tensor>],
            outputs: &mut [Tensor],
            _scratch: &Scratch,
        ) -> OpResult<()> {
            let own = outputs[0].clone();
            let x = inputs[0].unwrap_or(&own);
            let r = self.0.eval(&[Some(x)])?.remove(0);
            outputs[0].bytes_mut().copy_from_slice(r.bytes());
            Ok(())
        }
        fn name(&self) -> &str {
            "in-place"
        }
        fn in_place_input(&self) -> Option<usize> {
            Some(0)
        }
    }

    struct InPlace;

    impl KernelProvider for InPlace {
        fn kernel(&self, req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>> {
            Ok(Some(if req.node.op.name() == "Add" {
                Box::new(CopyingKernel(req.node.op.clone()))
            } else {
                Box::new(InPlaceKernel(req.node.op.clone()))
            }))
        }
    }

    #[test]
    fn in_place_only_over_a_last_read() {
        // a = Relu(x), b = Neg(a), c = Relu(b), d = a + c, y = Neg(d) (graph output).
        // b cannot take a's buffer (d reads a later); c takes b's; d gets a new one; y, a
        // graph output, has its own memory.
        let n = 256;
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let op1 = |g: &mut Graph, name: &str, kind: UnaryKind, v| {
            g.add_op(name, unary(kind), vec![Some(v)], 1).unwrap()[0]
        };
        let a = op1(&mut g, "a", UnaryKind::Relu, x);
        let b = op1(&mut g, "b", UnaryKind::Neg, a);
        let c = op1(&mut g, "c", UnaryKind::Relu, b);
        let add = Arc::new(Binary::new(BinaryKind::Add));
        let d = g.add_op("d", add, vec![Some(a), Some(c)], 1).unwrap()[0];
        let y = op1(&mut g, "y", UnaryKind::Neg, d);
        g.outputs.push(y);
        let dynamic = infer_graph(&mut g, &[TensorInfo::new(DType::F32, vec![n])]).unwrap();
        let reference = Plan::build(&g, &dynamic, None).unwrap();
        let planned = Plan::build(&g, &dynamic, Some(&InPlace)).unwrap();
        let in_place: Vec<Option<usize>> = planned.steps.iter().map(|s| s.in_place).collect();
        assert_eq!(in_place, vec![None, None, Some(0), None, None]);
        // a [0, 3], {b, c} [1, 3], d [3, 4]: three buffers, all needed at step 3.
        let m = planned.memory_stats(1);
        assert_eq!((m.arena_buffers, m.arena_bytes), (3, 3072));
        for k in 0..3 {
            let x = Tensor::from_vec(&[n], (0..n).map(|i| i as f32 - 60.0 * k as f32).collect())
                .unwrap();
            let want = reference.run(&[&x]).unwrap();
            let got = planned.run(&[&x]).unwrap();
            assert_eq!(got[0].to_f64_vec(), want[0].to_f64_vec());
        }
    }

    struct Copying;

    impl KernelProvider for Copying {
        fn kernel(&self, req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>> {
            if req.node.op.output_aliases_input() {
                return Ok(None);
            }
            Ok(Some(Box::new(CopyingKernel(req.node.op.clone()))))
        }
    }

    #[test]
    fn arena_shares_buffers_by_lifetime() {
        use crate::ops::shape::reshape::Reshape;
        // x -> a = Relu -> r = Reshape(a) -> b = Neg(r) -> c = Relu(b) -> y = Neg(c).
        // {a, r} share data and live over steps 0..=2, b over 2..=3, c over 3..=4: a and c
        // can take one buffer, b another; y is a graph output and gets its own memory.
        let n = 256;
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let a = g
            .add_op("a", unary(UnaryKind::Relu), vec![Some(x)], 1)
            .unwrap()[0];
        let shape = g.add_constant("shape", Tensor::from_vec(&[2], vec![16i64, 16]).unwrap());
        let r = g
            .add_op(
                "r",
                Arc::new(Reshape::default()),
                vec![Some(a), Some(shape)],
                1,
            )
            .unwrap()[0];
        let b = g
            .add_op("b", unary(UnaryKind::Neg), vec![Some(r)], 1)
            .unwrap()[0];
        let c = g
            .add_op("c", unary(UnaryKind::Relu), vec![Some(b)], 1)
            .unwrap()[0];
        let y = g
            .add_op("y", unary(UnaryKind::Neg), vec![Some(c)], 1)
            .unwrap()[0];
        g.outputs.push(y);
        let dynamic = infer_graph(&mut g, &[TensorInfo::new(DType::F32, vec![n])]).unwrap();
        let reference = Plan::build(&g, &dynamic, None).unwrap();
        let planned = Plan::build(&g, &dynamic, Some(&Copying)).unwrap();
        let m = planned.memory_stats(1);
        assert_eq!(
            planned.steps.len(),
            5,
            "{:?}",
            planned
                .steps
                .iter()
                .map(|s| s.node.name.clone())
                .collect::<Vec<_>>()
        );
        assert_eq!(m.intermediate_bytes, 5 * 1024, "{m:?}");
        assert_eq!(m.arena_buffers, 2);
        assert_eq!(m.arena_bytes, 2048);
        assert_eq!(reference.memory_stats(1).arena_bytes, 0);
        for k in 0..3 {
            let x = Tensor::from_vec(&[n], (0..n).map(|i| i as f32 - 100.0 * k as f32).collect())
                .unwrap();
            let want = reference.run(&[&x]).unwrap();
            let got = planned.run(&[&x]).unwrap();
            assert_eq!(got[0].shape(), &[16, 16]);
            assert_eq!(got[0].to_f64_vec(), want[0].to_f64_vec());
        }
    }

    #[test]
    fn profiled_run_times_every_step() {
        let n = 1 << 20;
        let p = plan(n);
        let x = Tensor::from_vec(&[n], (0..n).map(|i| i as f32 - 1000.0).collect()).unwrap();
        let plain = p.run(&[&x]).unwrap();
        let t0 = Instant::now();
        let (outs, times) = p.run_profiled(&[&x]).unwrap();
        let total = t0.elapsed();
        assert_eq!(outs[0].to_f64_vec(), plain[0].to_f64_vec());
        assert_eq!(times.len(), p.steps.len());
        let sum: Duration = times.iter().sum();
        // The steps are the run, up to copying the input and collecting the outputs.
        assert!(sum <= total, "{sum:?} > {total:?}");
        assert!(sum * 2 >= total, "steps {sum:?} of {total:?}");

        let by_type = p.time_by_op_type(&times);
        let names: Vec<(&str, usize)> = by_type
            .iter()
            .map(|o| (o.op_type.as_str(), o.count))
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, vec![("Add", 1), ("Neg", 1), ("Relu", 2)]);
        let relu: Duration = times[0] + times[2];
        assert_eq!(
            by_type.iter().find(|o| o.op_type == "Relu").unwrap().time,
            relu
        );
        assert_eq!(by_type.iter().map(|o| o.time).sum::<Duration>(), sum);
        assert!(by_type.windows(2).all(|w| w[0].time >= w[1].time));
    }
}
