//! ferrolite's GPU device: WGSL compute kernels on wgpu (Vulkan, Metal, DX12), in f32.
//!
//! The device compiles whole subgraphs (see `ferrolite_core::device`): at prerun each node of
//! a subgraph is lowered to compute dispatches over device buffers (the `kernels` module says
//! what each op becomes), weights are uploaded once, and every run is one command submission
//! that writes the inputs, dispatches every kernel in order and copies the outputs back. `supports`
//! runs the same lowering without touching the GPU, so a node it accepts always compiles; its
//! `Err` is the reason the node stays on the CPU (for `ferrolite explain`).
//!
//! Kernels: convolution (plain, depthwise, grouped; 1-D and 2-D) and ConvTranspose, MatMul,
//! Gemm and FullyConnected with their fused epilogues, element-wise unary and binary ops with
//! broadcasting and the common activations, BatchNormalization, Max/Average/global pooling,
//! Concat, Split, Slice, Transpose, Pad, Reshape-like aliases, Softmax/LogSoftmax, Resize,
//! LayerNormalization and the Reduce ops.

mod context;
mod kernels;
mod program;
mod wgsl;

use context::Gpu;
use ferrolite_core::device::{Device, Executable};
use ferrolite_core::plan::KernelRequest;
use ferrolite_core::{Graph, Result};
use std::sync::Arc;

/// The wgpu GPU device.
pub struct GpuDevice {
    gpu: Arc<Gpu>,
}

impl GpuDevice {
    /// Opens the first GPU wgpu finds (a high-performance one preferred); `WGPU_BACKEND`
    /// (vulkan, metal, dx12) narrows the search. An error when there is none.
    pub fn open() -> Result<GpuDevice> {
        Ok(GpuDevice {
            gpu: Arc::new(Gpu::open()?),
        })
    }

    /// The adapter's name and backend, such as "llvmpipe (LLVM 15.0.6, 256 bits) on Vulkan".
    pub fn adapter(&self) -> String {
        format!("{} on {:?}", self.gpu.info.name, self.gpu.info.backend)
    }
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuDevice({})", self.adapter())
    }
}

impl Device for GpuDevice {
    fn name(&self) -> &str {
        "gpu"
    }

    fn describe(&self) -> String {
        format!("gpu: {}", self.adapter())
    }

    fn supports(&self, req: &KernelRequest) -> std::result::Result<(), String> {
        kernels::lower(req, &self.gpu.limits).map(|_| ())
    }

    fn compile(&self, subgraph: &Graph) -> Result<Box<dyn Executable>> {
        Ok(Box::new(program::Program::compile(
            self.gpu.clone(),
            subgraph,
        )?))
    }
}
