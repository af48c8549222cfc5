//! Choosing the device a session runs on.

use ferrolite_core::device::fake::FakeDevice;
use ferrolite_core::device::{Device, Warnings};
use ferrolite_core::{Error, Result};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Where a session runs its graph: the CPU alone, or a device for the subgraphs it supports
/// with the CPU for the rest (see `docs/adding-a-device.md`).
#[derive(Clone, Default)]
pub enum DeviceOption {
    /// Everything on the CPU.
    #[default]
    Cpu,
    /// The wgpu GPU device (Vulkan, Metal, DX12); needs the `gpu` feature.
    Gpu,
    /// Any device, such as the fake device of the tests.
    Custom(Arc<dyn Device>),
}

impl fmt::Debug for DeviceOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceOption::Cpu => f.write_str("cpu"),
            DeviceOption::Gpu => f.write_str("gpu"),
            DeviceOption::Custom(d) => write!(f, "{}", d.name()),
        }
    }
}

impl FromStr for DeviceOption {
    type Err = Error;

    /// `cpu`, `gpu`, or a fake device (`fake`, `fake:ops=Conv+Relu`, `fake:fail=run`).
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cpu" => Ok(DeviceOption::Cpu),
            "gpu" => Ok(DeviceOption::Gpu),
            _ if s.starts_with("fake") => Ok(DeviceOption::Custom(Arc::new(FakeDevice::parse(s)?))),
            _ => Err(Error::Other(format!(
                "unknown device '{s}' (devices: cpu, gpu, fake[:ops=A+B,fail=compile|run])"
            ))),
        }
    }
}

/// Whether this build has the GPU device.
pub const GPU_AVAILABLE: bool = cfg!(feature = "gpu");

/// The device for an option: `None` for the CPU. A GPU that cannot be opened (no adapter) is
/// a warning and the CPU runs everything; a build without the GPU device is an error.
pub(crate) fn resolve(
    option: &DeviceOption,
    warnings: &Warnings,
) -> Result<Option<Arc<dyn Device>>> {
    match option {
        DeviceOption::Cpu => Ok(None),
        DeviceOption::Custom(d) => Ok(Some(d.clone())),
        DeviceOption::Gpu => open_gpu(warnings),
    }
}

#[cfg(feature = "gpu")]
fn open_gpu(warnings: &Warnings) -> Result<Option<Arc<dyn Device>>> {
    match ferrolite_gpu::GpuDevice::open() {
        Ok(d) => Ok(Some(Arc::new(d))),
        Err(e) => {
            warnings.push(format!("no GPU device ({e}); the session runs on the CPU"));
            Ok(None)
        }
    }
}

#[cfg(not(feature = "gpu"))]
fn open_gpu(_warnings: &Warnings) -> Result<Option<Arc<dyn Device>>> {
    Err(Error::Other(
        "this build of ferrolite has no GPU device: build it with the `gpu` feature".into(),
    ))
}
