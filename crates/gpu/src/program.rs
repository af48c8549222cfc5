//! A compiled subgraph: every node lowered to dispatches over device buffers, built once.
//!
//! Compiling plans the buffers like the CPU's memory plan: every tensor the kernels write gets
//! a storage whose lifetime runs from its node to its last reader; storages whose lifetimes do
//! not overlap share a buffer (best fit), aliases (Reshape, Flatten, ...) share their input's
//! storage, and constants (weights) and derived data are uploaded once, here. A run writes the
//! inputs, records every dispatch into one compute pass, copies the outputs to mappable buffers
//! and submits that as one command buffer.

use crate::context::Gpu;
use crate::kernels::{self, Lowered, Operand};
use crate::wgsl;
use ferrolite_core::device::Executable;
use ferrolite_core::ops::device::copy::{CopyDirection, DeviceCopy};
use ferrolite_core::plan::KernelRequest;
use ferrolite_core::{DType, Error, Graph, Node, Result, Tensor, TensorInfo, ValueId};
use std::collections::HashMap;
use std::sync::Arc;

/// Read by the last output copy: never freed.
const END: usize = usize::MAX;

/// A tensor's place on the device before buffers are assigned.
struct Storage {
    bytes: u64,
    /// Node index that writes it (0 for inputs, which are written before the first node).
    first: usize,
    /// Node index of its last reader.
    last: usize,
    /// Uploaded at compile (weights, derived data); never shared.
    contents: Option<Vec<u8>>,
}

struct PlannedStep {
    step: kernels::Step,
    reads: Vec<usize>,
    write: usize,
}

struct Upload {
    input: usize,
    buffer: usize,
    shape: Vec<usize>,
}

struct Download {
    output: usize,
    buffer: usize,
    staging: wgpu::Buffer,
    bytes: u64,
    shape: Vec<usize>,
}

struct Dispatch {
    pipeline: Arc<wgpu::ComputePipeline>,
    bind_group: wgpu::BindGroup,
    groups: (u32, u32),
}

pub(crate) struct Program {
    gpu: Arc<Gpu>,
    buffers: Vec<wgpu::Buffer>,
    dispatches: Vec<Dispatch>,
    uploads: Vec<Upload>,
    downloads: Vec<Download>,
    inputs: usize,
    outputs: usize,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuProgram")
            .field("dispatches", &self.dispatches.len())
            .field("buffers", &self.buffers.len())
            .finish()
    }
}

fn bytes_of(shape: &[usize]) -> u64 {
    4 * shape.iter().map(|&d| d as u64).product::<u64>()
}

/// Buffer sizes: at least 4 bytes (wgpu rejects empty bindings), a multiple of 4.
fn buffer_size(bytes: u64) -> u64 {
    bytes.max(4).next_multiple_of(4)
}

fn f32_bytes(t: &Tensor) -> Result<Vec<u8>> {
    if t.dtype() == DType::F32 {
        Ok(t.bytes().to_vec())
    } else {
        Ok(t.cast(DType::F32)?.bytes().to_vec())
    }
}

/// Works out the storages of every tensor and the steps that read and write them.
struct Planner<'g> {
    graph: &'g Graph,
    storages: Vec<Storage>,
    of_value: HashMap<ValueId, usize>,
}

impl Planner<'_> {
    fn add(&mut self, bytes: u64, at: usize, contents: Option<Vec<u8>>) -> usize {
        self.storages.push(Storage {
            bytes,
            first: at,
            last: at,
            contents,
        });
        self.storages.len() - 1
    }

    /// The storage of a value read by node `at`: a tensor already on the device, or a constant
    /// uploaded now.
    fn read(&mut self, v: ValueId, at: usize, node: &Node) -> Result<usize> {
        if let Some(&s) = self.of_value.get(&v) {
            let st = &mut self.storages[s];
            if st.last != END {
                st.last = st.last.max(at);
            }
            return Ok(s);
        }
        let value = self.graph.value(v);
        let Some(c) = &value.constant else {
            return Err(node_error(
                node,
                format!("input '{}' is not on the device", value.name),
            ));
        };
        let data = f32_bytes(c)?;
        let s = self.add(data.len() as u64, 0, Some(data));
        self.storages[s].last = END;
        self.of_value.insert(v, s);
        Ok(s)
    }
}

fn node_error(node: &Node, message: String) -> Error {
    Error::Node {
        node: node.name.clone(),
        op: node.op.name().to_string(),
        message,
    }
}

fn info(graph: &Graph, v: ValueId) -> Result<TensorInfo> {
    graph
        .value(v)
        .info
        .clone()
        .ok_or_else(|| Error::Other(format!("'{}' has no inferred type", graph.value(v).name)))
}

impl Program {
    pub(crate) fn compile(gpu: Arc<Gpu>, graph: &Graph) -> Result<Program> {
        let input_pos: HashMap<ValueId, usize> = graph
            .inputs
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, i))
            .collect();
        let output_pos: HashMap<ValueId, usize> = graph
            .outputs
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, i))
            .collect();
        let mut planner = Planner {
            graph,
            storages: Vec::new(),
            of_value: HashMap::new(),
        };
        // (input position, storage, shape) and (output position, storage, shape)
        let mut uploads = Vec::new();
        let mut downloads = Vec::new();
        let mut steps: Vec<(usize, PlannedStep)> = Vec::new();
        for (j, node) in graph.nodes.iter().enumerate() {
            let first_input = node.inputs.first().copied().flatten();
            if let Some(copy) = node.op.as_any().downcast_ref::<DeviceCopy>() {
                let x = first_input.ok_or_else(|| node_error(node, "no input".into()))?;
                let y = node.outputs[0];
                let shape = info(graph, y)?.shape;
                match copy.direction {
                    CopyDirection::ToDevice => {
                        let &pos = input_pos.get(&x).ok_or_else(|| {
                            node_error(node, "copies a tensor that is not a subgraph input".into())
                        })?;
                        if info(graph, x)?.dtype != DType::F32 {
                            return Err(node_error(node, "the GPU holds f32 tensors only".into()));
                        }
                        let s = planner.add(bytes_of(&shape), 0, None);
                        planner.of_value.insert(y, s);
                        uploads.push((pos, s, shape));
                    }
                    CopyDirection::ToHost => {
                        let s = planner.read(x, j, node)?;
                        planner.storages[s].last = END;
                        let &pos = output_pos.get(&y).ok_or_else(|| {
                            node_error(node, "copies back a tensor that is not an output".into())
                        })?;
                        downloads.push((pos, s, shape));
                    }
                }
                continue;
            }
            let infer_inputs = graph.infer_inputs(node);
            let outputs: Vec<TensorInfo> = node
                .outputs
                .iter()
                .map(|&o| info(graph, o))
                .collect::<Result<_>>()?;
            let req = KernelRequest {
                node,
                inputs: &infer_inputs,
                outputs: &outputs,
                packs: ferrolite_core::prepacked::Prepacks::none(),
            };
            match kernels::lower(&req, &gpu.limits).map_err(|r| node_error(node, r))? {
                Lowered::Alias => {
                    let x = first_input.ok_or_else(|| node_error(node, "no input".into()))?;
                    let s = planner.read(x, j, node)?;
                    planner.of_value.insert(node.outputs[0], s);
                }
                Lowered::Steps {
                    scratch,
                    steps: node_steps,
                } => {
                    let outs: Vec<usize> = outputs
                        .iter()
                        .map(|o| planner.add(bytes_of(&o.shape), j, None))
                        .collect();
                    for (&v, &s) in node.outputs.iter().zip(&outs) {
                        planner.of_value.insert(v, s);
                    }
                    let scr: Vec<usize> = scratch
                        .iter()
                        .map(|&n| planner.add(4 * n as u64, j, None))
                        .collect();
                    for step in node_steps {
                        let mut resolve = |op: &Operand| -> Result<usize> {
                            match op {
                                Operand::Input(i) => {
                                    let v = node.inputs.get(*i).copied().flatten().ok_or_else(
                                        || node_error(node, format!("input {i} is missing")),
                                    )?;
                                    planner.read(v, j, node)
                                }
                                Operand::Output(i) => outs.get(*i).copied().ok_or_else(|| {
                                    node_error(node, format!("output {i} is missing"))
                                }),
                                Operand::Scratch(k) => scr.get(*k).copied().ok_or_else(|| {
                                    node_error(node, format!("scratch {k} is missing"))
                                }),
                                Operand::Data(d) => {
                                    let bytes: Vec<u8> =
                                        bytemuck::cast_slice(d.as_slice()).to_vec();
                                    let s = planner.add(bytes.len() as u64, 0, Some(bytes));
                                    planner.storages[s].last = END;
                                    Ok(s)
                                }
                            }
                        };
                        let reads = step
                            .reads
                            .iter()
                            .map(|(op, _)| resolve(op))
                            .collect::<Result<Vec<_>>>()?;
                        let write = resolve(&step.write)?;
                        steps.push((j, PlannedStep { step, reads, write }));
                    }
                }
            }
        }
        if downloads.len() != graph.outputs.len() {
            return Err(Error::Other(format!(
                "{} of the subgraph's {} outputs are copied back",
                downloads.len(),
                graph.outputs.len()
            )));
        }
        Self::build(gpu, graph, planner.storages, steps, uploads, downloads)
    }

    /// Assigns buffers to storages and creates the dispatches.
    fn build(
        gpu: Arc<Gpu>,
        graph: &Graph,
        storages: Vec<Storage>,
        steps: Vec<(usize, PlannedStep)>,
        uploads: Vec<(usize, usize, Vec<usize>)>,
        downloads: Vec<(usize, usize, Vec<usize>)>,
    ) -> Result<Program> {
        let device = &gpu.device;
        let turn = gpu
            .exclusive
            .lock()
            .map_err(|_| Error::Other("a GPU run panicked before".into()))?;
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC;
        let mut buffers: Vec<wgpu::Buffer> = Vec::new();
        let new_buffer = |buffers: &mut Vec<wgpu::Buffer>, bytes: u64| {
            buffers.push(device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: buffer_size(bytes),
                usage,
                mapped_at_creation: false,
            }));
            buffers.len() - 1
        };
        // Storage -> buffer: constants get their own; the rest share by lifetime.
        let mut buffer_of = vec![usize::MAX; storages.len()];
        let mut sizes: Vec<u64> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut by_first: Vec<usize> = (0..storages.len()).collect();
        by_first.sort_by_key(|&s| storages[s].first);
        let mut by_last: Vec<usize> = (0..storages.len()).collect();
        by_last.sort_by_key(|&s| storages[s].last);
        let (mut next_first, mut next_last) = (0, 0);
        let last_node = graph.nodes.len();
        for j in 0..=last_node {
            while next_first < by_first.len() && storages[by_first[next_first]].first == j {
                let s = by_first[next_first];
                next_first += 1;
                let st = &storages[s];
                if let Some(data) = &st.contents {
                    let b = new_buffer(&mut buffers, st.bytes);
                    sizes.push(buffer_size(st.bytes));
                    if !data.is_empty() {
                        gpu.queue.write_buffer(&buffers[b], 0, data);
                    }
                    buffer_of[s] = b;
                    continue;
                }
                let need = buffer_size(st.bytes);
                let best = free
                    .iter()
                    .enumerate()
                    .filter(|(_, &b)| sizes[b] >= need)
                    .min_by_key(|(_, &b)| sizes[b])
                    .map(|(k, _)| k);
                buffer_of[s] = match best {
                    Some(k) => free.swap_remove(k),
                    None => {
                        sizes.push(need);
                        new_buffer(&mut buffers, st.bytes)
                    }
                };
            }
            while next_last < by_last.len() && storages[by_last[next_last]].last == j {
                let s = by_last[next_last];
                next_last += 1;
                if storages[s].contents.is_none() && buffer_of[s] != usize::MAX {
                    free.push(buffer_of[s]);
                }
            }
        }
        let mut dispatches = Vec::new();
        for (_, planned) in &steps {
            let Some(groups) = wgsl::dispatch_size(planned.step.grid) else {
                continue;
            };
            let count = u32::try_from(planned.step.grid.count())
                .map_err(|_| Error::Other("a GPU step has more than 2^32 items".into()))?;
            let mut params = vec![count];
            params.extend_from_slice(&planned.step.params);
            let pbuf = device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: buffer_size(4 * params.len() as u64),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            gpu.queue
                .write_buffer(&pbuf, 0, bytemuck::cast_slice(params.as_slice()));
            let source = wgsl::shader(&planned.step);
            let pipeline = gpu.pipeline(&source, planned.reads.len())?;
            let layouts = gpu.layouts(planned.reads.len())?;
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: pbuf.as_entire_binding(),
            }];
            for (k, &s) in planned.reads.iter().chain([&planned.write]).enumerate() {
                entries.push(wgpu::BindGroupEntry {
                    binding: k as u32 + 1,
                    resource: buffers[buffer_of[s]].as_entire_binding(),
                });
            }
            let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &layouts.0,
                entries: &entries,
            });
            dispatches.push(Dispatch {
                pipeline,
                bind_group,
                groups,
            });
        }
        let uploads = uploads
            .into_iter()
            .map(|(input, s, shape)| Upload {
                input,
                buffer: buffer_of[s],
                shape,
            })
            .collect();
        let downloads = downloads
            .into_iter()
            .map(|(output, s, shape)| {
                let bytes = bytes_of(&shape);
                let staging = device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: buffer_size(bytes),
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                Download {
                    output,
                    buffer: buffer_of[s],
                    staging,
                    bytes,
                    shape,
                }
            })
            .collect();
        if let Some(e) = pollster::block_on(validation.pop()) {
            return Err(Error::Other(format!("GPU: {e}")));
        }
        if let Some(e) = pollster::block_on(oom.pop()) {
            return Err(Error::Other(format!("GPU: out of memory: {e}")));
        }
        drop(turn);
        Ok(Program {
            gpu,
            buffers,
            dispatches,
            uploads,
            downloads,
            inputs: graph.inputs.len(),
            outputs: graph.outputs.len(),
        })
    }
}

impl Executable for Program {
    fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let _turn = self
            .gpu
            .exclusive
            .lock()
            .map_err(|_| Error::Other("a GPU run panicked before".into()))?;
        if inputs.len() != self.inputs {
            return Err(Error::Other(format!(
                "the subgraph takes {} inputs, {} given",
                self.inputs,
                inputs.len()
            )));
        }
        let (device, queue) = (&self.gpu.device, &self.gpu.queue);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        for up in &self.uploads {
            let t = inputs[up.input];
            if t.dtype() != DType::F32 || t.shape() != up.shape.as_slice() {
                return Err(Error::Other(format!(
                    "input {} is {} {:?}, the subgraph was compiled for f32 {:?}",
                    up.input,
                    t.dtype(),
                    t.shape(),
                    up.shape
                )));
            }
            if t.byte_len() > 0 {
                queue.write_buffer(&self.buffers[up.buffer], 0, t.bytes());
            }
        }
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("ferrolite subgraph"),
        });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: None,
            });
            for d in &self.dispatches {
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, &d.bind_group, &[]);
                pass.dispatch_workgroups(d.groups.0, d.groups.1, 1);
            }
        }
        for dl in &self.downloads {
            if dl.bytes > 0 {
                encoder.copy_buffer_to_buffer(
                    &self.buffers[dl.buffer],
                    0,
                    &dl.staging,
                    0,
                    dl.bytes,
                );
            }
        }
        queue.submit([encoder.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        let mut waiting = 0;
        for (k, dl) in self.downloads.iter().enumerate() {
            if dl.bytes > 0 {
                let tx = tx.clone();
                dl.staging
                    .slice(..dl.bytes)
                    .map_async(wgpu::MapMode::Read, move |r| {
                        let _ = tx.send((k, r.map_err(|e| e.to_string())));
                    });
                waiting += 1;
            }
        }
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Other(format!("GPU: waiting for the run: {e}")))?;
        for _ in 0..waiting {
            let (k, r) = rx
                .recv()
                .map_err(|_| Error::Other("GPU: an output was never mapped".into()))?;
            r.map_err(|e| Error::Other(format!("GPU: reading output {k}: {e}")))?;
        }
        if let Some(e) = pollster::block_on(validation.pop()) {
            return Err(Error::Other(format!("GPU: {e}")));
        }
        if let Some(e) = self.gpu.take_uncaptured() {
            return Err(Error::Other(format!("GPU: {e}")));
        }
        let mut outputs: Vec<Option<Tensor>> = vec![None; self.outputs];
        for dl in &self.downloads {
            let t = if dl.bytes == 0 {
                Tensor::zeros(DType::F32, &dl.shape)?
            } else {
                let slice = dl.staging.slice(..dl.bytes);
                let view = slice
                    .get_mapped_range()
                    .map_err(|e| Error::Other(format!("GPU: reading an output: {e}")))?;
                let t = Tensor::from_bytes(DType::F32, &dl.shape, &view);
                drop(view);
                dl.staging.unmap();
                t?
            };
            outputs[dl.output] = Some(t);
        }
        outputs
            .into_iter()
            .enumerate()
            .map(|(k, t)| t.ok_or_else(|| Error::Other(format!("output {k} was not produced"))))
            .collect()
    }
}
