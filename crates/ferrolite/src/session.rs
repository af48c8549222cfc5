//! The session: a loaded model, its plans per input-shape signature, and a thread pool.

use crate::model::{load_model, Model};
use ferrolite_core::passes::{default_pipeline, optimize, Pass};
use ferrolite_core::plan::Plan;
use ferrolite_core::{DType, Dim, Error, Graph, Node, Result, Tensor, TensorInfo};
use ferrolite_cpu::CpuKernels;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a session is built.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Worker threads for kernels; 0 means one per core.
    pub threads: usize,
    /// Passes to skip, by name (see [`pass_names`]).
    pub disabled_passes: Vec<String>,
    /// Use the optimised CPU kernels (false: reference implementations only, for debugging).
    pub optimized_kernels: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            threads: 0,
            disabled_passes: Vec::new(),
            optimized_kernels: true,
        }
    }
}

/// Names and descriptions of the passes, in order.
pub fn pass_names() -> Vec<(&'static str, &'static str)> {
    default_pipeline()
        .iter()
        .map(|p| (p.name(), p.description()))
        .collect()
}

/// A model input or output as the model declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoInfo {
    pub name: String,
    pub dtype: DType,
    /// Declared dims (symbolic ones by name); `None` if the model does not say.
    pub shape: Option<Vec<Dim>>,
}

impl IoInfo {
    /// The declared shape with symbolic dims set to 1 (a shape to try when none is given).
    pub fn default_shape(&self) -> Vec<usize> {
        match &self.shape {
            Some(dims) => dims
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => *n,
                    Dim::Symbolic(_) => 1,
                })
                .collect(),
            None => Vec::new(),
        }
    }

    /// Checks a concrete shape against the declaration (rank and fixed dims).
    pub fn check_shape(&self, shape: &[usize]) -> Result<()> {
        let Some(dims) = &self.shape else {
            return Ok(());
        };
        let err = |message: String| Error::Input {
            name: self.name.clone(),
            message,
        };
        if dims.len() != shape.len() {
            return Err(err(format!(
                "expected rank {} ({}), got shape {:?}",
                dims.len(),
                dims_str(dims),
                shape
            )));
        }
        for (i, (d, &s)) in dims.iter().zip(shape).enumerate() {
            if let Dim::Fixed(n) = d {
                if *n != s {
                    return Err(err(format!(
                        "dimension {i} must be {n} ({}), got shape {:?}",
                        dims_str(dims),
                        shape
                    )));
                }
            }
        }
        Ok(())
    }
}

/// `[N,3,224,224]`-style rendering of declared dims.
pub fn dims_str(dims: &[Dim]) -> String {
    let d: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", d.join(","))
}

/// The optimised graph and plan for one input-shape signature.
#[derive(Debug)]
pub struct Prepared {
    pub graph: Graph,
    pub plan: Plan,
}

impl Prepared {
    /// Estimated floating-point operations of one run.
    pub fn flops(&self) -> u64 {
        graph_flops(&self.graph)
    }
}

/// Sum of the ops' FLOP estimates over a graph whose shapes are inferred.
pub fn graph_flops(graph: &Graph) -> u64 {
    graph.nodes.iter().map(|n| node_flops(graph, n)).sum()
}

/// The FLOP estimate of one node of `graph` (0 when its shapes are not known at prerun).
pub fn node_flops(graph: &Graph, n: &Node) -> u64 {
    let ins: Vec<Option<TensorInfo>> = n
        .inputs
        .iter()
        .map(|i| i.and_then(|v| graph.value(v).info.clone()))
        .collect();
    let outs: Option<Vec<TensorInfo>> = n
        .outputs
        .iter()
        .map(|o| graph.value(*o).info.clone())
        .collect();
    outs.map(|o| n.op.flops(&ins, &o)).unwrap_or(0)
}

/// What [`Session::run_profiled`] returns: the outputs, the time of each plan step, the plan.
pub type ProfiledRun = (Outputs, Vec<Duration>, Arc<Prepared>);

/// The outputs of a run, in model order, by name.
#[derive(Clone, Debug)]
pub struct Outputs(pub Vec<(String, Tensor)>);

impl Outputs {
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    pub fn iter(&self) -> impl Iterator<Item = &(String, Tensor)> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_vec(self) -> Vec<(String, Tensor)> {
        self.0
    }
}

/// A loaded model ready to run. Plans are built per input-shape signature and cached.
pub struct Session {
    model: Model,
    options: SessionOptions,
    inputs: Vec<IoInfo>,
    outputs: Vec<IoInfo>,
    pool: rayon::ThreadPool,
    plans: Mutex<HashMap<Vec<Vec<usize>>, Arc<Prepared>>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

impl Session {
    /// Loads a model file (ONNX).
    pub fn from_path(path: impl AsRef<Path>, options: SessionOptions) -> Result<Session> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        let model = load_model(&bytes, path.parent())?;
        Session::from_model(model, options)
    }

    /// Loads a model from memory. External tensor data is not available this way.
    pub fn from_bytes(bytes: &[u8], options: SessionOptions) -> Result<Session> {
        Session::from_model(load_model(bytes, None)?, options)
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
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(options.threads)
            .build()
            .map_err(|e| Error::Other(format!("could not start the thread pool: {e}")))?;
        Ok(Session {
            model,
            options,
            inputs,
            outputs,
            pool,
            plans: Mutex::new(HashMap::new()),
        })
    }

    pub fn inputs(&self) -> &[IoInfo] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[IoInfo] {
        &self.outputs
    }

    /// The graph as loaded, before shape inference and passes.
    pub fn graph(&self) -> &Graph {
        &self.model.graph
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Default input shapes: declared dims with symbolic ones set to 1.
    pub fn default_shapes(&self) -> Vec<Vec<usize>> {
        self.inputs.iter().map(|i| i.default_shape()).collect()
    }

    /// Builds (or fetches from the cache) the plan for these input shapes, in input order.
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
        let pipeline: Vec<Box<dyn Pass>> = default_pipeline();
        let dynamic = optimize(&mut graph, &types, &pipeline, &self.options.disabled_passes)?;
        let provider = CpuKernels::default();
        let plan = if self.options.optimized_kernels {
            Plan::build(&graph, &dynamic, Some(&provider))?
        } else {
            Plan::build(&graph, &dynamic, None)?
        };
        let prepared = Arc::new(Prepared { graph, plan });
        self.lock_plans()?.insert(key, prepared.clone());
        Ok(prepared)
    }

    fn lock_plans(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, HashMap<Vec<Vec<usize>>, Arc<Prepared>>>> {
        self.plans
            .lock()
            .map_err(|_| Error::Other("plan cache poisoned".into()))
    }

    /// Runs the model. Every input must be given by name; outputs come back in model order.
    pub fn run(&self, inputs: &[(&str, Tensor)]) -> Result<Outputs> {
        let (ordered, prepared) = self.order_inputs(inputs)?;
        let results = self.pool.install(|| prepared.plan.run(&ordered))?;
        Ok(self.name_outputs(results))
    }

    /// [`Session::run`] that also times every step of the plan (see
    /// [`ferrolite_core::plan::Plan::run_profiled`]); the plan comes back to name the steps.
    pub fn run_profiled(&self, inputs: &[(&str, Tensor)]) -> Result<ProfiledRun> {
        let (ordered, prepared) = self.order_inputs(inputs)?;
        let (results, times) = self.pool.install(|| prepared.plan.run_profiled(&ordered))?;
        Ok((self.name_outputs(results), times, prepared))
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
        inputs: &'a [(&str, Tensor)],
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
                .map(|(_, t)| t)
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
}
