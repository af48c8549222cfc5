//! ferrolite CPU kernels: fast f32 paths for the compute-heavy ops, offered to plans through
//! [`CpuKernels`] (a [`KernelProvider`]). Anything not handled here runs its reference kernel.
//!
//! Kernels parallelise with plain rayon calls; the session runs plans inside its own rayon
//! thread pool, which sets the thread count.

pub mod conv;
pub mod conv_transpose;
pub mod depthwise;
mod elementwise;
mod fast;
pub mod fully_connected;
pub mod gemm;
mod math;
pub mod matmul;
mod movement;
mod nchwc;
mod norm;
mod pool;
mod reduce;
mod resize;
mod scratch;
pub mod sgemm;
mod softmax;
mod stride2;
pub mod winograd;

#[cfg(test)]
mod fast_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;

use ferrolite_core::ops::linalg::conv::Conv;
use ferrolite_core::ops::linalg::conv_transpose::ConvTranspose;
use ferrolite_core::ops::linalg::fully_connected::FullyConnected;
use ferrolite_core::ops::linalg::gemm::Gemm as GemmOp;
use ferrolite_core::ops::linalg::matmul::MatMul;
use ferrolite_core::plan::{Kernel, KernelProvider, KernelRequest};
use ferrolite_core::{DType, Result};
use fully_connected::FullyConnectedKernel;
pub use gemm::Sgemm;

/// The CPU kernel provider.
#[derive(Clone, Debug, Default)]
pub struct CpuKernels {
    gemm: Sgemm,
}

impl CpuKernels {
    /// A provider using a given GEMM (e.g. the portable microkernels).
    pub fn with_gemm(gemm: Sgemm) -> Self {
        CpuKernels { gemm }
    }

    /// The kernel for a request, or `None` when the op, dtypes or shapes are not handled.
    fn pick(&self, req: &KernelRequest) -> Option<Box<dyn Kernel>> {
        if let Some(k) = fast::pick(req) {
            return Some(k);
        }
        let all_f32 = req.inputs.iter().flatten().all(|i| i.dtype == DType::F32)
            && req.outputs.iter().all(|o| o.dtype == DType::F32);
        if !all_f32 {
            return None;
        }
        if let Some(k) = nchwc::pick(self.gemm.isa, req) {
            return Some(k);
        }
        let shape = |i: usize| req.inputs.get(i).and_then(|x| x.as_ref()).map(|x| x.shape);
        let op = req.node.op.as_any();
        if let Some(c) = op.downcast_ref::<Conv>() {
            let (x, w) = (shape(0)?, shape(1)?);
            let s = c.shapes(x, w).ok()?;
            if let Some(b) = shape(2) {
                if b.iter().product::<usize>() != s.out_channels {
                    return None;
                }
            }
            let w_value = req.inputs.get(1)?.as_ref()?.value;
            return conv::build(self.gemm, s, c.activation, x, w, w_value).ok()?;
        }
        if let Some(c) = op.downcast_ref::<ConvTranspose>() {
            let (x, w) = (shape(0)?, shape(1)?);
            let s = c.shapes(x, w).ok()?;
            let w_value = req.inputs.get(1)?.as_ref()?.value;
            let k =
                conv_transpose::ConvTransposeKernel::new(self.gemm, s, c.activation, x, w, w_value);
            return Some(Box::new(k.ok()??));
        }
        if op.downcast_ref::<MatMul>().is_some() {
            let b_value = req.inputs.get(1)?.as_ref()?.value;
            let k = matmul::MatMulKernel::new(self.gemm, shape(0)?, shape(1)?, b_value).ok()?;
            return Some(Box::new(k));
        }
        if let Some(g) = op.downcast_ref::<GemmOp>() {
            let k = matmul::GemmKernel::new(
                self.gemm,
                g.clone(),
                shape(0)?,
                shape(1)?,
                shape(2),
                req.inputs.get(1)?.as_ref()?.value,
            )
            .ok()?;
            return Some(Box::new(k));
        }
        if let Some(fc) = op.downcast_ref::<FullyConnected>() {
            let w_value = req.inputs.get(1)?.as_ref()?.value;
            let k = FullyConnectedKernel::new(
                self.gemm,
                fc.activation,
                shape(0)?,
                shape(1)?,
                w_value,
                shape(2),
            )
            .ok()?;
            return Some(Box::new(k));
        }
        None
    }
}

impl KernelProvider for CpuKernels {
    fn kernel(&self, req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>> {
        Ok(self.pick(req))
    }
}
