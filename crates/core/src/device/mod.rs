//! Devices: hardware other than the CPU cores that runs parts of a graph.
//!
//! A [`Device`] answers, node by node, whether it can run a node ([`Device::supports`]); the
//! partition pass ([`crate::passes::Partition`]) groups supported neighbours into
//! [`Subgraph`] nodes, and at prerun the device compiles each subgraph into an [`Executable`]
//! ([`Device::compile`]). There are two ways to write `compile`:
//!
//! - *kernels for single ops*: implement a [`KernelProvider`] whose kernels run on the device
//!   and call [`compile_with_kernels`], which plans the subgraph over them (the fake device);
//! - *whole subgraphs*: translate the subgraph into the device's own program and run that (the
//!   wgpu GPU device in `ferrolite-gpu` records one command buffer per run).
//!
//! Either way, when compiling fails or a run reports a failure, [`SubgraphKernel`] runs the same
//! subgraph on the CPU kernels instead and records a warning that names the subgraph and the
//! reason: a run never fails only because a device did.

pub mod fake;

use crate::ops::device::subgraph::Subgraph;
use crate::plan::{Kernel, KernelProvider, KernelRequest, Plan};
use crate::{Error, Graph, OpResult, Result, Tensor};
use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A device that runs subgraphs.
pub trait Device: Send + Sync + Debug {
    /// The name nodes are placed under (`gpu`, `fake`); also the `--device` value.
    fn name(&self) -> &str;

    /// What the device is, for people: the GPU's adapter and backend, for instance.
    fn describe(&self) -> String {
        self.name().to_string()
    }

    /// Whether the device can run this node with these input and output types: `Err` gives
    /// the reason it cannot (op, attribute, dtype, shape), for `explain`.
    fn supports(&self, req: &KernelRequest) -> std::result::Result<(), String>;

    /// Compiles a subgraph (a graph of canonical ops with inferred types, starting with
    /// CopyToDevice and ending with CopyToHost nodes) into something that runs it.
    fn compile(&self, subgraph: &Graph) -> Result<Box<dyn Executable>>;
}

/// A compiled subgraph.
pub trait Executable: Send + Sync + Debug {
    /// Runs on host inputs in the subgraph's input order, returning host outputs in its output
    /// order.
    fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>>;
}

/// Compiles a subgraph by planning it over a device's single-op kernels. Every node must get
/// a kernel from `kernels`: a node without one is an error (the device claimed an op it cannot
/// run), not a silent run on the host.
pub fn compile_with_kernels(
    graph: &Graph,
    kernels: &dyn KernelProvider,
) -> Result<Box<dyn Executable>> {
    struct Strict<'a>(&'a dyn KernelProvider);
    impl KernelProvider for Strict<'_> {
        fn kernel(&self, req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>> {
            match self.0.kernel(req)? {
                Some(k) => Ok(Some(k)),
                None => Err(Error::Node {
                    node: req.node.name.clone(),
                    op: req.node.op.name().to_string(),
                    message: "the device has no kernel for this node".into(),
                }),
            }
        }
    }
    let plan = Plan::build(graph, &HashSet::new(), Some(&Strict(kernels)))?;
    Ok(Box::new(PlanExecutable(plan)))
}

/// A subgraph planned over device kernels (see [`compile_with_kernels`]).
#[derive(Debug)]
struct PlanExecutable(Plan);

impl Executable for PlanExecutable {
    fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        self.0.run(inputs)
    }
}

/// Warnings a session collects (device fallbacks), also written to standard error.
#[derive(Clone, Debug, Default)]
pub struct Warnings {
    list: Arc<Mutex<Vec<String>>>,
    quiet: bool,
}

impl Warnings {
    /// Warnings that are collected but not printed.
    pub fn quiet() -> Self {
        Warnings {
            list: Arc::default(),
            quiet: true,
        }
    }

    pub fn push(&self, message: String) {
        if !self.quiet {
            eprintln!("warning: {message}");
        }
        if let Ok(mut l) = self.list.lock() {
            l.push(message);
        }
    }

    /// All warnings so far, oldest first.
    pub fn all(&self) -> Vec<String> {
        self.list.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// Runs a [`Subgraph`] node: on its device's executable, or on the CPU when the device could
/// not compile it or failed a run (from then on, for this plan).
pub struct SubgraphKernel {
    node: String,
    subgraph: Subgraph,
    executable: Option<Box<dyn Executable>>,
    device_failed: AtomicBool,
    cpu: Arc<dyn KernelProvider>,
    fallback: OnceLock<std::result::Result<Plan, String>>,
    warnings: Warnings,
}

impl SubgraphKernel {
    /// Compiles `subgraph` on `device`; a compile error becomes a warning and the CPU runs it.
    pub fn new(
        node: &str,
        subgraph: &Subgraph,
        device: &dyn Device,
        cpu: Arc<dyn KernelProvider>,
        warnings: Warnings,
    ) -> Self {
        let executable = match device.compile(&subgraph.graph) {
            Ok(e) => Some(e),
            Err(e) => {
                warnings.push(format!(
                    "subgraph '{node}' could not be compiled for device '{}' ({e}); it runs on the CPU",
                    device.name()
                ));
                None
            }
        };
        SubgraphKernel {
            node: node.to_string(),
            subgraph: subgraph.clone(),
            executable,
            device_failed: AtomicBool::new(false),
            cpu,
            fallback: OnceLock::new(),
            warnings,
        }
    }

    /// Whether the device runs the subgraph (false once it fell back to the CPU).
    pub fn on_device(&self) -> bool {
        self.executable.is_some() && !self.device_failed.load(Ordering::Relaxed)
    }

    fn run_on_cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let plan = self.fallback.get_or_init(|| {
            Plan::build(
                &self.subgraph.graph,
                &HashSet::new(),
                Some(self.cpu.as_ref()),
            )
            .map_err(|e| e.to_string())
        });
        match plan {
            Ok(p) => p.run(inputs),
            Err(e) => Err(Error::Other(e.clone())),
        }
    }
}

impl Kernel for SubgraphKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &crate::scratch::Scratch,
    ) -> OpResult<()> {
        let ins: Vec<&Tensor> = inputs
            .iter()
            .enumerate()
            .map(|(i, x)| x.ok_or_else(|| crate::OpError(format!("input {i} is missing"))))
            .collect::<OpResult<_>>()?;
        let mut results = None;
        if let (Some(exe), false) = (&self.executable, self.device_failed.load(Ordering::Relaxed)) {
            match exe.run(&ins) {
                Ok(r) if r.len() == outputs.len() => results = Some(r),
                Ok(r) => self.device_failure(format!(
                    "it returned {} outputs instead of {}",
                    r.len(),
                    outputs.len()
                )),
                Err(e) => self.device_failure(e.to_string()),
            }
        }
        let results = match results {
            Some(r) => r,
            None => self.run_on_cpu(&ins)?,
        };
        for (o, r) in outputs.iter_mut().zip(results) {
            *o = r;
        }
        Ok(())
    }

    fn name(&self) -> &str {
        if self.on_device() {
            "device"
        } else {
            "device-fallback"
        }
    }

    fn writes_into_outputs(&self) -> bool {
        false
    }

    /// The CPU fallback's prepacked weights, once it was built.
    fn prepacked_bytes(&self) -> usize {
        match self.fallback.get() {
            Some(Ok(p)) => usize::try_from(p.prepacked_bytes()).unwrap_or(usize::MAX),
            _ => 0,
        }
    }
}

impl Debug for SubgraphKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubgraphKernel")
            .field("node", &self.node)
            .field("device", &self.subgraph.device)
            .field("on_device", &self.on_device())
            .finish()
    }
}

impl SubgraphKernel {
    fn device_failure(&self, reason: String) {
        if !self.device_failed.swap(true, Ordering::Relaxed) {
            self.warnings.push(format!(
                "subgraph '{}' failed on device '{}' ({reason}); it runs on the CPU from now on",
                self.node, self.subgraph.device
            ));
        }
    }
}

/// The kernel provider of a session with devices: [`Subgraph`] nodes are compiled on their
/// device, every other node (and a subgraph the device cannot run) goes to the CPU provider.
pub struct DeviceKernels {
    pub devices: Vec<Arc<dyn Device>>,
    pub cpu: Arc<dyn KernelProvider>,
    pub warnings: Warnings,
}

impl KernelProvider for DeviceKernels {
    fn select(&self, req: &KernelRequest) -> Result<crate::registry::Selection<Box<dyn Kernel>>> {
        if req.node.op.as_any().is::<Subgraph>() {
            return Ok(crate::registry::Selection {
                kernel: self.kernel(req)?,
                considered: Vec::new(),
            });
        }
        self.cpu.select(req)
    }

    fn kernel(&self, req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>> {
        let Some(sub) = req.node.op.as_any().downcast_ref::<Subgraph>() else {
            return self.cpu.kernel(req);
        };
        let device = self
            .devices
            .iter()
            .find(|d| d.name() == sub.device)
            .ok_or_else(|| Error::Node {
                node: req.node.name.clone(),
                op: "Subgraph".into(),
                message: format!("no device named '{}' in this session", sub.device),
            })?;
        Ok(Some(Box::new(SubgraphKernel::new(
            &req.node.name,
            sub,
            device.as_ref(),
            self.cpu.clone(),
            self.warnings.clone(),
        ))))
    }
}
