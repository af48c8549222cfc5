//! The session: a loaded model, its plans per input-shape signature, and a thread pool.
//!
//! A [`Session`] is `Send + Sync`: share it between threads (an `Arc<Session>` or scoped
//! threads) and call [`Session::run`] from all of them at once. The weights are shared; each run
//! takes its own set of intermediate buffers from the plan's pool, so concurrent runs never see
//! each other's data.

use crate::device::resolve;
use crate::model::{load_model, load_model_as, load_paddle, load_path, Format, Model};
use ferrolite_core::device::{Device, DeviceKernels, Warnings};
use ferrolite_core::format::{self, ModelInfo, Optimized};
use ferrolite_core::infer::{infer_graph_folding, MAX_FOLD_BYTES};
use ferrolite_core::ops::control::apply_memory_cap;
use ferrolite_core::passes::{
    optimize_folding, session_pipeline, Partition, PartitionReport, Pass,
};
use ferrolite_core::plan::{Backend, KernelProvider, Plan, ReferenceKernels};
use ferrolite_core::prepacked::Prepacks;
use ferrolite_core::{DType, DeclaredType, Dim, Error, Graph, Result, Tensor, TensorInfo};
use ferrolite_cpu::{CpuBackend, Isa, Precision};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod io;
mod memory;
mod options;
mod threads;

pub use io::{dims_str, IoInfo, Outputs, TensorView};
use memory::{check_plan_memory, check_tensor_sizes};
pub use memory::{graph_flops, node_flops};
pub use options::{pass_names, SessionOptions};
use threads::{pin_to_cpu, with_workers_polling};

/// The optimised graph and plan for one input-shape signature.
#[derive(Debug)]
pub struct Prepared {
    /// The graph after shape inference and the optimisation passes.
    pub graph: Graph,
    /// The compiled plan (kernels, buffer lifetimes).
    pub plan: Plan,
    /// Where the partition pass placed each node, when the session has a device.
    pub partition: Option<PartitionReport>,
    /// For an optimized model: how many of the prepacked buffers it stores the kernels took,
    /// of how many (the rest were packed again).
    pub stored_prepacked: (usize, usize),
}

impl Prepared {
    /// Dtype and shape of every graph output, in model order, as inferred for this signature.
    /// An output whose shape depends on values computed at run time has `None`.
    pub fn output_types(&self) -> Vec<Option<TensorInfo>> {
        self.graph
            .outputs
            .iter()
            .map(|&v| self.graph.value(v).info.clone())
            .collect()
    }

    /// Estimated floating-point operations of one run.
    pub fn flops(&self) -> u64 {
        graph_flops(&self.graph)
    }
}

/// What [`Session::run_profiled`] returns: the outputs, the time of each plan step, the plan.
pub type ProfiledRun = (Outputs, Vec<Duration>, Arc<Prepared>);

/// A loaded model ready to run. Plans are built per input-shape signature and cached.
///
/// ```
/// use ferrolite::{Session, SessionOptions, TensorView};
/// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/ppocr_cls/model.onnx");
/// let session = Session::from_path(path, SessionOptions::default().with_threads(1))?;
/// let input = &session.inputs()[0];
/// assert_eq!(input.name, "x");
/// // The model's H and W are symbolic; pick a concrete shape.
/// let shape = [1, 3, 48, 192];
/// let pixels = vec![0.0f32; 3 * 48 * 192];
/// let outputs = session.run_views(&[("x", TensorView::from_slice(&shape, &pixels)?)])?;
/// let probs = outputs.require(&session.outputs()[0].name)?.as_slice::<f32>()?;
/// assert_eq!(probs.len(), 2);
/// # Ok::<(), ferrolite::Error>(())
/// ```
pub struct Session {
    model: Model,
    options: SessionOptions,
    inputs: Vec<IoInfo>,
    outputs: Vec<IoInfo>,
    /// Always `Some` until drop.
    pool: Option<rayon::ThreadPool>,
    /// The pool's threads, joined on drop so that none outlives the session (leak checkers and
    /// hosts that unload the library see every thread finished).
    workers: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>>,
    plans: Mutex<PlanCache>,
    /// Runs in flight on this session's pool: the idle workers poll for work only while one
    /// run has the pool (see `in_pool`).
    in_flight: std::sync::atomic::AtomicUsize,
    device: Option<Arc<dyn Device>>,
    /// The CPU backend, with the one ISA every kernel of this session uses.
    cpu: CpuBackend,
    warnings: Warnings,
}

/// Plans by input-shape signature.
type PlanCache = HashMap<Vec<Vec<usize>>, Arc<Prepared>>;

impl Drop for Session {
    fn drop(&mut self) {
        // Dropping the pool asks its threads to stop; then wait for them.
        drop(self.pool.take());
        let handles = match self.workers.lock() {
            Ok(mut w) => std::mem::take(&mut *w),
            Err(_) => return,
        };
        // A session dropped on a pool thread (possible only through a leaked reference) cannot
        // wait for its own thread; the threads still exit, unjoined.
        if rayon::current_thread_index().is_some() {
            return;
        }
        for h in handles {
            let _ = h.join();
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

// Sessions are shared between threads; keep it that way.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Session>();
    assert_send_sync::<Outputs>();
    assert_send_sync::<Prepared>();
};

impl Session {
    /// Loads a model file: ONNX, or a Paddle model (a folder with `__model__`, `model` or
    /// `*.pdmodel`, or a `.pdmodel` file with its sibling `.pdiparams`). External ONNX tensor
    /// data is read from the file's folder.
    ///
    /// ```
    /// use ferrolite::{Session, SessionOptions};
    /// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/ppocr_cls/model.onnx");
    /// let session = Session::from_path(path, SessionOptions::default())?;
    /// assert_eq!(session.inputs().len(), 1);
    /// # Ok::<(), ferrolite::Error>(())
    /// ```
    pub fn from_path(path: impl AsRef<Path>, options: SessionOptions) -> Result<Session> {
        Session::from_model(load_path(path.as_ref())?, options)
    }

    /// Loads a Paddle model from its program file (or folder) and, optionally, its params
    /// file (combined) or folder (one file per variable).
    pub fn from_paddle(
        model: impl AsRef<Path>,
        params: Option<&Path>,
        options: SessionOptions,
    ) -> Result<Session> {
        Session::from_model(load_paddle(model.as_ref(), params)?, options)
    }

    /// Loads a model from memory. External tensor data is not available this way.
    ///
    /// ```
    /// use ferrolite::{Session, SessionOptions};
    /// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/ppocr_cls/model.onnx");
    /// let bytes = std::fs::read(path).unwrap();
    /// let opts = SessionOptions::default().with_threads(2).disable_pass("dead-code");
    /// let session = Session::from_bytes(&bytes, opts)?;
    /// assert_eq!(session.outputs().len(), 1);
    /// # Ok::<(), ferrolite::Error>(())
    /// ```
    pub fn from_bytes(bytes: &[u8], options: SessionOptions) -> Result<Session> {
        Session::from_model(load_model(bytes, None)?, options)
    }

    /// Loads a model of a named format from memory (`None`: detect it from the bytes).
    pub fn from_bytes_as(
        format: Option<Format>,
        bytes: &[u8],
        options: SessionOptions,
    ) -> Result<Session> {
        let format = match format {
            Some(f) => f,
            None => Format::detect(bytes)?,
        };
        Session::from_model(load_model_as(format, bytes, None)?, options)
    }

    /// Wraps an already loaded model.
    pub fn from_model(model: Model, options: SessionOptions) -> Result<Session> {
        let g = &model.graph;
        let io = |v: ferrolite_core::ValueId| -> Result<IoInfo> {
            let val = g.value(v);
            let declared = val.declared.as_ref().ok_or_else(|| {
                Error::InvalidModel(format!("'{}' has no declared type", val.name))
            })?;
            Ok(IoInfo {
                name: val.name.clone(),
                dtype: declared.dtype,
                shape: declared.shape.clone(),
            })
        };
        let inputs = g
            .inputs
            .iter()
            .map(|&v| io(v))
            .collect::<Result<Vec<_>>>()?;
        let outputs = g
            .outputs
            .iter()
            .map(|&v| {
                io(v).or_else(|_| {
                    // An output without a declared type is still an output; its dtype is known
                    // after the first prerun.
                    Ok(IoInfo {
                        name: g.value(v).name.clone(),
                        dtype: g.value(v).info.as_ref().map_or(DType::F32, |i| i.dtype),
                        shape: None,
                    })
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let workers: Arc<Mutex<Vec<std::thread::JoinHandle<()>>>> = Arc::default();
        let spawned = workers.clone();
        // One worker has nothing to share its CPU with; pinning would only constrain it.
        let pin = options.pin_threads && options.threads != 1;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(options.threads)
            .thread_name(|i| format!("ferrolite-{i}"))
            .start_handler(move |i| {
                if pin {
                    pin_to_cpu(i)
                }
            })
            .spawn_handler(move |thread| {
                let mut b = std::thread::Builder::new();
                if let Some(name) = thread.name() {
                    b = b.name(name.to_owned());
                }
                if let Some(size) = thread.stack_size() {
                    b = b.stack_size(size);
                }
                let handle = b.spawn(|| thread.run())?;
                if let Ok(mut w) = spawned.lock() {
                    w.push(handle);
                }
                Ok(())
            })
            .build()
            .map_err(|e| Error::Other(format!("could not start the thread pool: {e}")))?;
        let warnings = Warnings::default();
        let device = resolve(&options.device, &warnings)?;
        // An optimized model runs the ISA it was written for, unless one is asked for.
        let env_isa = std::env::var(ferrolite_cpu::isa::ISA_ENV).unwrap_or_default();
        let file_isa = match &model.optimized {
            Some(o)
                if options.isa.is_none() && env_isa.trim().is_empty() && o.isa != "reference" =>
            {
                Some(o.isa.clone())
            }
            _ => None,
        };
        let cpu = match &file_isa {
            Some(isa) => CpuBackend::choose(Some(isa)).map_err(|e| {
                Error::Other(format!(
                    "this model was optimized for the {isa} CPU kernels, which this CPU cannot \
                     run ({e}): write it again with `ferrolite opt --isa ...` for this CPU"
                ))
            })?,
            None => CpuBackend::choose(options.isa.as_deref()).map_err(Error::Other)?,
        }
        .with_precision(options.precision);
        Ok(Session {
            model,
            options,
            device,
            cpu,
            warnings,
            inputs,
            outputs,
            pool: Some(pool),
            workers,
            plans: Mutex::new(HashMap::new()),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The model's inputs, in order, as declared.
    ///
    /// ```
    /// use ferrolite::{Dim, DType, Session, SessionOptions};
    /// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/ppocr_cls/model.onnx");
    /// let session = Session::from_path(path, SessionOptions::default())?;
    /// let x = &session.inputs()[0];
    /// assert_eq!((x.name.as_str(), x.dtype), ("x", DType::F32));
    /// let dims = x.shape.as_ref().unwrap();
    /// assert_eq!(dims[1], Dim::Fixed(3));
    /// assert!(matches!(dims[3], Dim::Symbolic(_))); // the width is dynamic
    /// # Ok::<(), ferrolite::Error>(())
    /// ```
    pub fn inputs(&self) -> &[IoInfo] {
        &self.inputs
    }

    /// The model's outputs, in order, as declared.
    pub fn outputs(&self) -> &[IoInfo] {
        &self.outputs
    }

    /// The input with this name.
    pub fn input(&self, name: &str) -> Option<&IoInfo> {
        self.inputs.iter().find(|i| i.name == name)
    }

    /// The output with this name.
    pub fn output(&self, name: &str) -> Option<&IoInfo> {
        self.outputs.iter().find(|i| i.name == name)
    }

    /// The device the session places subgraphs on (`None`: the CPU runs everything).
    pub fn device(&self) -> Option<&Arc<dyn Device>> {
        self.device.as_ref()
    }

    /// The instruction set of this session's CPU kernels.
    pub fn isa(&self) -> Isa {
        self.cpu.isa()
    }

    /// How close this session's f32 CPU kernels stay to the exact result.
    pub fn precision(&self) -> Precision {
        self.cpu.precision()
    }

    /// The CPU backend, as `info` and `explain` describe it ("cpu, avx2+fma").
    pub fn cpu_description(&self) -> String {
        self.cpu.describe()
    }

    /// The warnings so far (a device that could not compile or run a subgraph, which then ran
    /// on the CPU). They are also written to standard error.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.all()
    }

    /// The options the session was built with.
    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// The graph as loaded, before shape inference and passes.
    pub fn graph(&self) -> &Graph {
        &self.model.graph
    }

    /// The decoded model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The number of kernel worker threads.
    pub fn threads(&self) -> usize {
        self.pool.as_ref().map_or(0, |p| p.current_num_threads())
    }

    /// Default input shapes: declared dims with symbolic ones set to 1.
    pub fn default_shapes(&self) -> Vec<Vec<usize>> {
        self.inputs.iter().map(|i| i.default_shape()).collect()
    }

    /// Builds (or fetches from the cache) the plan for these input shapes, in input order:
    /// shape inference, the optimisation passes and kernel selection happen here, so the first
    /// [`Session::run`] with these shapes does not pay for them. Output shapes are known after it.
    ///
    /// ```
    /// use ferrolite::{Session, SessionOptions};
    /// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/ppocr_cls/model.onnx");
    /// let session = Session::from_path(path, SessionOptions::default())?;
    /// let prepared = session.prerun(&[vec![1, 3, 48, 320]])?;
    /// let out = prepared.output_types()[0].clone().unwrap();
    /// assert_eq!(out.shape, vec![1, 2]);
    /// // A wrong rank or a wrong fixed dimension is refused.
    /// assert!(session.prerun(&[vec![1, 4, 48, 320]]).is_err());
    /// # Ok::<(), ferrolite::Error>(())
    /// ```
    pub fn prerun(&self, shapes: &[Vec<usize>]) -> Result<Arc<Prepared>> {
        if shapes.len() != self.inputs.len() {
            return Err(Error::Other(format!(
                "the model has {} inputs, {} shapes given",
                self.inputs.len(),
                shapes.len()
            )));
        }
        for (info, s) in self.inputs.iter().zip(shapes) {
            info.check_shape(s)?;
        }
        let key = shapes.to_vec();
        if let Some(p) = self.lock_plans()?.get(&key) {
            return Ok(p.clone());
        }
        let types: Vec<TensorInfo> = self
            .inputs
            .iter()
            .zip(shapes)
            .map(|(i, s)| TensorInfo::new(i.dtype, s.clone()))
            .collect();
        let mut graph = self.model.graph.clone();
        if let Some(cap) = self.options.max_memory {
            apply_memory_cap(&mut graph, usize::try_from(cap).unwrap_or(usize::MAX));
        }
        // Reference kernels only: no CPU kernels, and no CPU layout for them to run on.
        let (cpu, cpu_passes): (Arc<dyn KernelProvider>, Vec<Box<dyn Pass>>) =
            if self.options.optimized_kernels {
                (Arc::new(self.cpu), self.cpu.passes())
            } else {
                (Arc::new(ReferenceKernels), Vec::new())
            };
        let limit = self.options.max_memory;
        let fold = self.fold_limit();
        if let Some(optimized) = &self.model.optimized {
            let prepared = Arc::new(self.prerun_optimized(optimized, &key, &types, fold)?);
            self.lock_plans()?.insert(key, prepared.clone());
            return Ok(prepared);
        }
        let (mut plan, partition) = match &self.device {
            None => {
                let pipeline = session_pipeline(None, cpu_passes);
                let disabled = &self.options.disabled_passes;
                let dynamic = optimize_folding(&mut graph, &types, &pipeline, disabled, fold)?;
                check_tensor_sizes(&graph, limit)?;
                (Plan::build(&graph, &dynamic, Some(cpu.as_ref()))?, None)
            }
            Some(device) => {
                let pass = Partition::new(device.clone(), self.options.partition.clone());
                let report = pass.report.clone();
                let pipeline = session_pipeline(Some(pass), cpu_passes);
                let disabled = &self.options.disabled_passes;
                let dynamic = optimize_folding(&mut graph, &types, &pipeline, disabled, fold)?;
                check_tensor_sizes(&graph, limit)?;
                let provider = DeviceKernels {
                    devices: vec![device.clone()],
                    cpu,
                    warnings: self.warnings.clone(),
                };
                let plan = Plan::build(&graph, &dynamic, Some(&provider))?;
                let report = report.lock().ok().and_then(|mut r| r.take());
                (plan, report)
            }
        };
        check_plan_memory(&graph, &mut plan, self.threads(), limit)?;
        let prepared = Arc::new(Prepared {
            graph,
            plan,
            partition,
            stored_prepacked: (0, 0),
        });
        self.lock_plans()?.insert(key, prepared.clone());
        Ok(prepared)
    }

    /// The largest result constant folding may create: with a cap, nothing bigger than it.
    fn fold_limit(&self) -> usize {
        self.options.max_memory.map_or(MAX_FOLD_BYTES, |cap| {
            MAX_FOLD_BYTES.min(usize::try_from(cap).unwrap_or(usize::MAX))
        })
    }

    /// The CPU kernels' name as optimized models record it: the ISA, or `reference`.
    fn kernels_name(&self) -> &'static str {
        if self.options.optimized_kernels {
            self.cpu.isa().name()
        } else {
            "reference"
        }
    }

    /// Plans an optimized model's graph as it is: shape inference (which also checks the
    /// file's graph) and kernel selection, no passes.
    fn prerun_optimized(
        &self,
        optimized: &Optimized,
        shapes: &[Vec<usize>],
        types: &[TensorInfo],
        fold: usize,
    ) -> Result<Prepared> {
        if self.device.is_some() {
            return Err(Error::Other(
                "an optimized model runs on the CPU it was written for; to partition a model \
                 for a device, load its source model"
                    .into(),
            ));
        }
        if shapes != optimized.input_shapes.as_slice() {
            return Err(Error::Other(format!(
                "this model was optimized for input shapes {:?}, not {shapes:?}",
                optimized.input_shapes
            )));
        }
        let kernels = self.kernels_name();
        if optimized.isa == "reference" && kernels != "reference" {
            return Err(Error::Other(
                "this model was optimized for the reference kernels: run it with them \
                 (--reference, SessionOptions::optimized_kernels = false)"
                    .into(),
            ));
        }
        if optimized.isa != kernels {
            return Err(Error::Other(format!(
                "this model was optimized for the {} CPU kernels and this session runs {kernels} \
                 (the CPU, FERROLITE_ISA or SessionOptions::isa): write it again with \
                 `ferrolite opt` on this machine",
                optimized.isa
            )));
        }
        // The kernels take their prepacked weights from the file where it has them.
        let stored = Prepacks::replaying(&optimized.packed);
        let mut prepared = self.plan_as_is(&self.model.graph, types, fold, &stored)?;
        let used = stored.used();
        prepared.stored_prepacked = (used, optimized.packed.len());
        Ok(prepared)
    }

    /// Plans a graph that has been through the passes already: shape inference and kernel
    /// selection only.
    fn plan_as_is(
        &self,
        graph: &Graph,
        types: &[TensorInfo],
        fold: usize,
        packs: &Prepacks,
    ) -> Result<Prepared> {
        let mut graph = graph.clone();
        if let Some(cap) = self.options.max_memory {
            apply_memory_cap(&mut graph, usize::try_from(cap).unwrap_or(usize::MAX));
        }
        let dynamic = infer_graph_folding(&mut graph, types, fold)?;
        check_tensor_sizes(&graph, self.options.max_memory)?;
        let cpu: Arc<dyn KernelProvider> = if self.options.optimized_kernels {
            Arc::new(self.cpu)
        } else {
            Arc::new(ReferenceKernels)
        };
        let mut plan = Plan::build_with_prepacks(&graph, &dynamic, Some(cpu.as_ref()), packs)?;
        check_plan_memory(&graph, &mut plan, self.threads(), self.options.max_memory)?;
        Ok(Prepared {
            graph,
            plan,
            partition: None,
            stored_prepacked: (0, 0),
        })
    }

    /// The model in ferrolite's optimized format (docs/format.md), as `ferrolite opt` writes
    /// it: the graph after every pass for `shapes` (by default the declared input shapes, when
    /// they are all fixed), for this session's CPU kernels. A model with symbolic dims and no
    /// `shapes` is written as its frontend built it, and its passes run at prerun.
    pub fn optimized_model_bytes(&self, shapes: Option<&[Vec<usize>]>) -> Result<Vec<u8>> {
        let m = &self.model;
        let info = ModelInfo {
            source_format: m.format.to_string(),
            producer: m.producer.clone(),
            opsets: m.opsets.clone(),
            metadata: m.metadata.clone(),
        };
        let version = env!("CARGO_PKG_VERSION");
        if self.device.is_some() {
            return Err(Error::Other(
                "optimized models are written for the CPU; create the session without a device"
                    .into(),
            ));
        }
        let fixed = self.inputs.iter().all(|i| {
            i.shape
                .as_ref()
                .is_some_and(|s| s.iter().all(|d| matches!(d, Dim::Fixed(_))))
        });
        let shapes = match shapes {
            Some(s) => s.to_vec(),
            None if fixed || m.optimized.is_some() => self.default_shapes(),
            None => return format::write(&m.graph, &info, None, version),
        };
        let prepared = self.prerun(&shapes)?;
        let mut graph = prepared.graph.clone();
        // The inputs are declared with the shapes the graph was optimized for.
        for (&v, shape) in graph.inputs.clone().iter().zip(&shapes) {
            let dtype = graph.value(v).info.as_ref().map_or(DType::F32, |i| i.dtype);
            graph.value_mut(v).declared = Some(DeclaredType {
                dtype,
                shape: Some(shape.iter().map(|&d| Dim::Fixed(d)).collect()),
            });
        }
        // And the outputs with the shapes inference gave them.
        for &v in &graph.outputs.clone() {
            if let Some(info) = graph.value(v).info.clone() {
                graph.value_mut(v).declared = Some(DeclaredType {
                    dtype: info.dtype,
                    shape: Some(info.shape.iter().map(|&d| Dim::Fixed(d)).collect()),
                });
            }
        }
        // Plan the graph as a load will, keeping the prepacked weights its kernels make.
        let types: Vec<TensorInfo> = self
            .inputs
            .iter()
            .zip(&shapes)
            .map(|(i, s)| TensorInfo::new(i.dtype, s.clone()))
            .collect();
        let recording = Prepacks::recording();
        self.plan_as_is(&graph, &types, self.fold_limit(), &recording)?;
        let packed = recording.into_records();
        let optimized = Optimized {
            input_shapes: shapes,
            isa: self.kernels_name().to_string(),
            packed,
        };
        format::write(&graph, &info, Some(&optimized), version)
    }

    fn lock_plans(&self) -> Result<std::sync::MutexGuard<'_, PlanCache>> {
        self.plans
            .lock()
            .map_err(|_| Error::Other("plan cache poisoned".into()))
    }

    /// Runs the model. Every input must be given by name; outputs come back in model order.
    /// The tensors are handed to the kernels without copying.
    ///
    /// ```
    /// use ferrolite::{DType, Session, SessionOptions, Tensor};
    /// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/ppocr_cls/model.onnx");
    /// let session = Session::from_path(path, SessionOptions::default())?;
    /// let x = Tensor::full(DType::F32, &[1, 3, 48, 192], 0.25)?;
    /// let outputs = session.run(&[("x", x)])?;
    /// let (name, probs) = &outputs.iter().next().unwrap();
    /// assert_eq!(probs.shape(), &[1, 2]);
    /// assert_eq!(outputs[name.as_str()].shape(), &[1, 2]);
    /// // Unknown or missing inputs are errors, not panics.
    /// assert!(session.run(&[]).is_err());
    /// # Ok::<(), ferrolite::Error>(())
    /// ```
    pub fn run(&self, inputs: &[(&str, Tensor)]) -> Result<Outputs> {
        let refs: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
        self.run_refs(&refs)
    }

    /// [`Session::run`] that also times every step of the plan (see
    /// [`ferrolite_core::plan::Plan::run_profiled`]); the plan comes back to name the steps.
    pub fn run_profiled(&self, inputs: &[(&str, Tensor)]) -> Result<ProfiledRun> {
        let refs: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
        let (ordered, prepared) = self.order_inputs(&refs)?;
        let (results, times) = self.in_pool(|| prepared.plan.run_profiled(&ordered))?;
        Ok((self.name_outputs(results), times, prepared))
    }

    /// Runs the model on borrowed tensors (no copy).
    pub fn run_refs(&self, inputs: &[(&str, &Tensor)]) -> Result<Outputs> {
        let (ordered, prepared) = self.order_inputs(inputs)?;
        let results = self.in_pool(|| prepared.plan.run(&ordered))?;
        Ok(self.name_outputs(results))
    }

    /// Runs `f` on the session's thread pool.
    fn in_pool<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        use std::sync::atomic::Ordering;
        struct Leave<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let alone = self.in_flight.fetch_add(1, Ordering::AcqRel) == 0;
        let _leave = Leave(&self.in_flight);
        match &self.pool {
            // Polling workers run other jobs while they wait; with several runs sharing the
            // pool, a poller could end up waiting above a job of its own run on one worker's
            // stack and never return (the soak test hung so once). Only a run alone polls.
            Some(pool) if pool.current_num_threads() > 1 && alone => {
                pool.install(|| with_workers_polling(f))
            }
            Some(pool) => pool.install(f),
            None => f(),
        }
    }

    fn name_outputs(&self, results: Vec<Tensor>) -> Outputs {
        Outputs(
            self.outputs
                .iter()
                .map(|o| o.name.clone())
                .zip(results)
                .collect(),
        )
    }

    /// Checks named inputs and puts them in model order; fetches the plan for their shapes.
    fn order_inputs<'a>(
        &self,
        inputs: &'a [(&str, &'a Tensor)],
    ) -> Result<(Vec<&'a Tensor>, Arc<Prepared>)> {
        for (name, _) in inputs {
            if !self.inputs.iter().any(|i| i.name == *name) {
                let known: Vec<&str> = self.inputs.iter().map(|i| i.name.as_str()).collect();
                return Err(Error::Input {
                    name: name.to_string(),
                    message: format!("the model has no such input (inputs: {})", known.join(", ")),
                });
            }
        }
        let mut ordered: Vec<&Tensor> = Vec::with_capacity(self.inputs.len());
        for info in &self.inputs {
            let t = inputs
                .iter()
                .find(|(n, _)| *n == info.name)
                .map(|(_, t)| *t)
                .ok_or_else(|| Error::Input {
                    name: info.name.clone(),
                    message: "missing".into(),
                })?;
            if t.dtype() != info.dtype {
                return Err(Error::Input {
                    name: info.name.clone(),
                    message: format!("expected dtype {}, got {}", info.dtype, t.dtype()),
                });
            }
            info.check_shape(t.shape())?;
            ordered.push(t);
        }
        let shapes: Vec<Vec<usize>> = ordered.iter().map(|t| t.shape().to_vec()).collect();
        let prepared = self.prerun(&shapes)?;
        Ok((ordered, prepared))
    }

    /// Runs the model on borrowed slices (see [`TensorView`]).
    ///
    /// ```
    /// use ferrolite::{Session, SessionOptions, TensorView};
    /// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/ppocr_cls/model.onnx");
    /// let session = Session::from_path(path, SessionOptions::default())?;
    /// let image: Vec<f32> = (0..3 * 48 * 192).map(|i| (i % 7) as f32 / 7.0).collect();
    /// let outputs = session.run_views(&[("x", TensorView::from_slice(&[1, 3, 48, 192], &image)?)])?;
    /// let probs = outputs.require("save_infer_model/scale_0.tmp_1")?.as_slice::<f32>()?;
    /// assert!((probs[0] + probs[1] - 1.0).abs() < 1e-5); // softmax
    /// # Ok::<(), ferrolite::Error>(())
    /// ```
    pub fn run_views(&self, inputs: &[(&str, TensorView<'_>)]) -> Result<Outputs> {
        let owned: Vec<(&str, Tensor)> = inputs
            .iter()
            .map(|(n, v)| Ok((*n, v.to_tensor()?)))
            .collect::<Result<_>>()?;
        self.run(&owned)
    }

    /// Runs the model and returns only the named outputs, in the order asked.
    ///
    /// ```
    /// use ferrolite::{DType, Session, SessionOptions, Tensor};
    /// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/ppocr_cls/model.onnx");
    /// let session = Session::from_path(path, SessionOptions::default())?;
    /// let x = Tensor::zeros(DType::F32, &[1, 3, 48, 96])?;
    /// let out = session.run_for(&[("x", &x)], &["save_infer_model/scale_0.tmp_1"])?;
    /// assert_eq!(out[0].shape(), &[1, 2]);
    /// assert!(session.run_for(&[("x", &x)], &["nope"]).is_err());
    /// # Ok::<(), ferrolite::Error>(())
    /// ```
    pub fn run_for(&self, inputs: &[(&str, &Tensor)], names: &[&str]) -> Result<Vec<Tensor>> {
        for n in names {
            if self.output(n).is_none() {
                let known: Vec<&str> = self.outputs.iter().map(|o| o.name.as_str()).collect();
                return Err(Error::Other(format!(
                    "no output named '{n}' (outputs: {})",
                    known.join(", ")
                )));
            }
        }
        let outputs = self.run_refs(inputs)?;
        names.iter().map(|n| outputs.require(n).cloned()).collect()
    }
}
