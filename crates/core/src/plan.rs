//! Execution plans: instructions in order over numbered tensor slots, each with its kernel.
//!
//! A plan is built once per input-shape signature from an inferred graph. Static steps know their
//! output shapes and reuse the buffers of earlier runs; dynamic steps (see [`crate::infer`])
//! infer their shapes from the actual tensors when they run.

use crate::infer::{check_results, infer_node, node_error};
use crate::op::InferInput;
use crate::{Error, Graph, Node, Op, OpResult, Result, Tensor, TensorInfo, ValueId};
use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

/// Computes one node. `outputs` arrive allocated with the planned shapes (zero-filled on the
/// first run, holding stale data afterwards); a kernel either writes into them or replaces them.
pub trait Kernel: Debug + Send + Sync {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()>;

    /// A short name for profiles and dumps.
    fn name(&self) -> &str;
}

/// The kernel of last resort: the op's reference implementation.
#[derive(Debug)]
pub struct ReferenceKernel(pub Arc<dyn Op>);

impl Kernel for ReferenceKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
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
}

/// What a kernel provider sees when choosing a kernel for a node.
pub struct KernelRequest<'a> {
    pub node: &'a Node,
    /// Input dtypes and shapes, with values for constants (weights to prepack).
    pub inputs: &'a [Option<InferInput<'a>>],
    pub outputs: &'a [TensorInfo],
}

/// Supplies optimised kernels for a device. Returning `None` falls back to the reference.
pub trait KernelProvider: Send + Sync {
    fn kernel(&self, req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>>;
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
    inputs: Vec<Option<usize>>,
    outputs: Vec<usize>,
    /// Planned output types; `None` for a dynamic step.
    output_types: Option<Vec<TensorInfo>>,
    /// Slots whose last reader is this step (freed after it).
    frees: Vec<usize>,
}

/// A compiled plan for one input-shape signature.
#[derive(Debug)]
pub struct Plan {
    pub steps: Vec<Step>,
    slot_kind: Vec<SlotKind>,
    constants: Vec<Option<Tensor>>,
    output_slots: Vec<usize>,
    input_types: Vec<TensorInfo>,
    /// Buffers kept between runs, one set per concurrent run.
    pools: Mutex<Vec<Vec<Option<Tensor>>>>,
}

impl Plan {
    /// Builds a plan from a graph that went through [`crate::infer::infer_graph`].
    pub fn build(
        graph: &Graph,
        dynamic: &HashSet<String>,
        provider: Option<&dyn KernelProvider>,
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
            let (kernel, output_types): (Box<dyn Kernel>, _) = if is_dynamic {
                (Box::new(ReferenceKernel(node.op.clone())), None)
            } else {
                let infer_inputs: Vec<Option<InferInput>> = node
                    .inputs
                    .iter()
                    .map(|i| {
                        i.and_then(|v| {
                            let val = graph.value(v);
                            val.info.as_ref().map(|info| InferInput {
                                dtype: info.dtype,
                                shape: &info.shape,
                                value: val.constant.as_ref(),
                            })
                        })
                    })
                    .collect();
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
                };
                let picked = match provider {
                    Some(p) => p.kernel(&req)?,
                    None => None,
                };
                (
                    picked.unwrap_or_else(|| Box::new(ReferenceKernel(node.op.clone()))),
                    Some(outputs),
                )
            };
            steps.push(Step {
                node: node.clone(),
                kernel,
                inputs: ins,
                outputs: outs,
                output_types,
                frees: Vec::new(),
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
        for (s, si) in last_use {
            if slots.kind[s] == SlotKind::Temp && !keep.contains(&s) {
                steps[si].frees.push(s);
            }
        }
        let SlotTable {
            kind: slot_kind,
            constants,
            ..
        } = slots;
        Ok(Plan {
            steps,
            slot_kind,
            constants,
            output_slots,
            input_types,
            pools: Mutex::new(Vec::new()),
        })
    }

    pub fn input_types(&self) -> &[TensorInfo] {
        &self.input_types
    }

    /// Runs the plan on inputs given in graph-input order. Returns outputs in graph-output order.
    pub fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let mut pool = self
            .pools
            .lock()
            .map_err(|_| Error::Other("buffer pool poisoned".into()))?
            .pop()
            .unwrap_or_else(|| vec![None; self.slot_kind.len()]);
        let result = self.run_with(inputs, &mut pool);
        if let Ok(mut pools) = self.pools.lock() {
            pools.push(pool);
        }
        result
    }

    fn run_with(&self, inputs: &[&Tensor], pool: &mut [Option<Tensor>]) -> Result<Vec<Tensor>> {
        let mut vals: Vec<Option<Tensor>> = vec![None; self.slot_kind.len()];
        for (i, kind) in self.slot_kind.iter().enumerate() {
            match kind {
                SlotKind::Constant => vals[i] = self.constants[i].clone(),
                SlotKind::Input(k) => vals[i] = Some((*inputs[*k]).clone()),
                SlotKind::Temp => {}
            }
        }
        for step in &self.steps {
            let ins: Vec<Option<&Tensor>> = step
                .inputs
                .iter()
                .map(|s| s.and_then(|s| vals[s].as_ref()))
                .collect();
            if ins
                .iter()
                .zip(&step.inputs)
                .any(|(t, s)| s.is_some() && t.is_none())
            {
                return Err(node_error(&step.node, "an input was not computed"));
            }
            let types = match &step.output_types {
                Some(t) => t.clone(),
                None => {
                    let infer_inputs: Vec<Option<InferInput>> = ins
                        .iter()
                        .map(|t| {
                            t.map(|t| InferInput {
                                dtype: t.dtype(),
                                shape: t.shape(),
                                value: Some(t),
                            })
                        })
                        .collect();
                    infer_node(&step.node, &infer_inputs)?
                }
            };
            let mut outs = Vec::with_capacity(types.len());
            for (s, ty) in step.outputs.iter().zip(&types) {
                let reuse = pool[*s]
                    .take()
                    .filter(|t| t.dtype() == ty.dtype && t.shape() == ty.shape.as_slice());
                outs.push(match reuse {
                    Some(t) => t,
                    None => Tensor::zeros(ty.dtype, &ty.shape)?,
                });
            }
            step.kernel
                .run(&ins, &mut outs)
                .map_err(|e| node_error(&step.node, e))?;
            drop(ins);
            // Guards kernels (and the reference fallback) against producing the wrong type.
            check_results(&step.node, &types, &outs)?;
            for (s, t) in step.outputs.iter().zip(outs) {
                vals[*s] = Some(t);
            }
            for &s in &step.frees {
                pool[s] = vals[s].take();
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
