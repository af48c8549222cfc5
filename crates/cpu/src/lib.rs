//! ferrolite CPU kernels: fast f32 paths for the compute-heavy ops, offered to plans through
//! [`CpuKernels`] (a [`KernelProvider`]). Anything not handled here runs its reference kernel.
//!
//! Kernels parallelise with plain rayon calls; the session runs plans inside its own rayon
//! thread pool, which sets the thread count.

pub mod conv;
pub mod fully_connected;
pub mod gemm;
pub mod matmul;

#[cfg(test)]
mod tests;

use ferrolite_core::ops::linalg::conv::Conv;
use ferrolite_core::ops::linalg::fully_connected::FullyConnected;
use ferrolite_core::ops::linalg::gemm::Gemm as GemmOp;
use ferrolite_core::ops::linalg::matmul::MatMul;
use ferrolite_core::plan::{Kernel, KernelProvider, KernelRequest};
use ferrolite_core::{DType, Result};
use fully_connected::{FullyConnectedKernel, WithActivation};
use gemm::{Gemm, MatrixMultiply};
use std::sync::Arc;

/// The CPU kernel provider.
#[derive(Clone, Debug)]
pub struct CpuKernels {
    gemm: Arc<dyn Gemm>,
}

impl Default for CpuKernels {
    fn default() -> Self {
        CpuKernels {
            gemm: Arc::new(MatrixMultiply),
        }
    }
}

impl CpuKernels {
    /// A provider using another GEMM implementation.
    pub fn with_gemm(gemm: Arc<dyn Gemm>) -> Self {
        CpuKernels { gemm }
    }

    /// The kernel for a request, or `None` when the op, dtypes or shapes are not handled.
    fn pick(&self, req: &KernelRequest) -> Option<Box<dyn Kernel>> {
        let all_f32 = req.inputs.iter().flatten().all(|i| i.dtype == DType::F32)
            && req.outputs.iter().all(|o| o.dtype == DType::F32);
        if !all_f32 {
            return None;
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
            let k = conv::ConvKernel::new(self.gemm.clone(), s, x, w, w_value).ok()??;
            // ConvKernel has no epilogue of its own yet.
            return Some(WithActivation::wrap(Box::new(k), c.activation));
        }
        if op.downcast_ref::<MatMul>().is_some() {
            let k = matmul::MatMulKernel::new(self.gemm.clone(), shape(0)?, shape(1)?).ok()?;
            return Some(Box::new(k));
        }
        if let Some(g) = op.downcast_ref::<GemmOp>() {
            let plain = GemmOp {
                activation: None,
                ..g.clone()
            };
            let k =
                matmul::GemmKernel::new(self.gemm.clone(), plain, shape(0)?, shape(1)?, shape(2))
                    .ok()?;
            return Some(WithActivation::wrap(Box::new(k), g.activation));
        }
        if let Some(fc) = op.downcast_ref::<FullyConnected>() {
            let w_value = req.inputs.get(1)?.as_ref()?.value;
            let k = FullyConnectedKernel::new(
                self.gemm.clone(),
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
