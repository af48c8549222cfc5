//! ferrolite CPU backend: fast f32 kernels for the compute-heavy and the common cheap ops,
//! registered per op type, dtype, layout and priority ([`backend::registry`]), all using the
//! one ISA a session picks ([`Isa`]), plus the CPU's own passes (the blocked NCHWc layout).
//! Anything no kernel takes runs its reference implementation.
//!
//! Kernels parallelise with plain rayon calls; the session runs plans inside its own rayon
//! thread pool, which sets the thread count.

pub mod backend;
pub mod conv;
pub mod conv_transpose;
pub mod depthwise;
mod elementwise;
mod fast;
pub mod fully_connected;
pub mod gemm;
pub mod isa;
mod layout_pass;
mod math;
pub mod matmul;
mod movement;
mod nchwc;
mod norm;
mod pool;
mod qconv;
mod qelementwise;
pub(crate) mod qgemm;
mod qlinear;
mod qmatmul;
mod qparams;
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
mod qtests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;

pub use backend::{CpuBackend, CpuContext};
pub use gemm::Sgemm;
pub use isa::Isa;
pub use layout_pass::LayoutNchwc;
