//! The fake device: a device without hardware, for testing partitioning and fallback (like
//! Paddle Lite's fake_device). It supports a configurable set of ops, computes through the
//! reference implementations (with real copies at CopyToDevice/CopyToHost, as if its memory
//! were separate), and can be told to fail compiling or running.
//!
//! On the command line: `--device fake`, `fake:ops=Conv+Relu`, `fake:fail=compile`,
//! `fake:ops=Conv,fail=run`.

use super::{compile_with_kernels, Device, Executable};
use crate::ops::device::copy::DeviceCopy;
use crate::plan::{Kernel, KernelProvider, KernelRequest, ReferenceKernel};
use crate::{Error, Graph, OpResult, Result, Tensor};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// When the fake device fails on purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FakeFailure {
    #[default]
    Never,
    /// Every compile fails.
    Compile,
    /// Every run fails before producing outputs.
    Run,
}

/// What the fake device did, shared with the test that made it.
#[derive(Debug, Default)]
pub struct FakeCounters {
    /// Subgraphs compiled.
    pub compiled: AtomicUsize,
    /// Subgraph runs that completed on the device.
    pub runs: AtomicUsize,
    /// Tensors copied host-to-device and device-to-host.
    pub copies: AtomicUsize,
}

#[derive(Clone, Debug, Default)]
pub struct FakeDevice {
    /// Supported op names; `None`: every op.
    pub ops: Option<BTreeSet<String>>,
    pub fail: FakeFailure,
    pub counters: Arc<FakeCounters>,
}

impl FakeDevice {
    /// A fake device for these ops.
    pub fn with_ops(ops: &[&str]) -> Self {
        FakeDevice {
            ops: Some(ops.iter().map(|s| s.to_string()).collect()),
            ..Default::default()
        }
    }

    pub fn failing(mut self, fail: FakeFailure) -> Self {
        self.fail = fail;
        self
    }

    /// Parses `fake[:ops=A+B,fail=compile|run]`.
    pub fn parse(spec: &str) -> Result<Self> {
        let bad = |what: &str| {
            Error::Other(format!(
                "bad fake device '{spec}': {what} (use fake, fake:ops=Conv+Relu, fake:fail=compile|run)"
            ))
        };
        let rest = match spec.strip_prefix("fake") {
            Some("") => return Ok(FakeDevice::default()),
            Some(r) => r.strip_prefix(':').ok_or_else(|| bad("expected ':'"))?,
            None => return Err(bad("not a fake device")),
        };
        let mut dev = FakeDevice::default();
        for part in rest.split(',') {
            match part.split_once('=') {
                Some(("ops", list)) => {
                    dev.ops = Some(list.split('+').map(str::to_string).collect());
                }
                Some(("fail", "compile")) => dev.fail = FakeFailure::Compile,
                Some(("fail", "run")) => dev.fail = FakeFailure::Run,
                _ => return Err(bad(&format!("unknown setting '{part}'"))),
            }
        }
        Ok(dev)
    }
}

impl Device for FakeDevice {
    fn name(&self) -> &str {
        "fake"
    }

    fn supports(&self, req: &KernelRequest) -> std::result::Result<(), String> {
        let op = req.node.op.name();
        match &self.ops {
            Some(ops) if !ops.contains(op) => {
                Err(format!("op {op} is not in the fake device's set"))
            }
            _ => Ok(()),
        }
    }

    fn compile(&self, subgraph: &Graph) -> Result<Box<dyn Executable>> {
        if self.fail == FakeFailure::Compile {
            return Err(Error::Other(
                "the fake device was told to fail compiling".into(),
            ));
        }
        let kernels = FakeKernels(self.counters.clone());
        let inner = compile_with_kernels(subgraph, &kernels)?;
        self.counters.compiled.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(FakeExecutable {
            inner,
            fail: self.fail,
            counters: self.counters.clone(),
        }))
    }
}

#[derive(Debug)]
struct FakeExecutable {
    inner: Box<dyn Executable>,
    fail: FakeFailure,
    counters: Arc<FakeCounters>,
}

impl Executable for FakeExecutable {
    fn run(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        if self.fail == FakeFailure::Run {
            return Err(Error::Other(
                "the fake device was told to fail running".into(),
            ));
        }
        let out = self.inner.run(inputs)?;
        self.counters.runs.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }
}

/// The fake device's kernels: copies are real copies (counted), everything else the reference.
struct FakeKernels(Arc<FakeCounters>);

impl KernelProvider for FakeKernels {
    fn kernel(&self, req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>> {
        if req.node.op.as_any().downcast_ref::<DeviceCopy>().is_some() {
            return Ok(Some(Box::new(FakeCopy(self.0.clone()))));
        }
        Ok(Some(Box::new(ReferenceKernel(req.node.op.clone()))))
    }
}

/// A copy into separate memory: the output never shares the input's buffer.
#[derive(Debug)]
struct FakeCopy(Arc<FakeCounters>);

impl Kernel for FakeCopy {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &crate::scratch::Scratch,
    ) -> OpResult<()> {
        let x = inputs
            .first()
            .copied()
            .flatten()
            .ok_or("input 0 is missing")?;
        let y = outputs.first_mut().ok_or("output 0 is missing")?;
        *y = Tensor::from_bytes(x.dtype(), x.shape(), x.bytes())?;
        self.0.copies.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn name(&self) -> &str {
        "fake-copy"
    }

    fn writes_into_outputs(&self) -> bool {
        false
    }
}
