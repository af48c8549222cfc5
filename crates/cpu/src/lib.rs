//! ferrolite CPU backend: fast f32 kernels for the compute-heavy and the common cheap ops,
//! registered per op type, dtype, layout and priority ([`backend::registry`]), all using the
//! one ISA a session picks ([`Isa`]), plus the CPU's own passes (the blocked NCHWc layout).
//! Anything no kernel takes runs its reference implementation.
//!
//! Kernels spread their work over threads through one splitter (`split.rs`), which weighs a
//! run's cost against the thread count; the session runs plans inside its own rayon thread
//! pool, which sets that count.

// The SIMD kernels are x86_64-only so far: elsewhere the ISA arguments that pick them, and the
// fields and helpers only they read, go unused (the NEON kernels will use them).
#![cfg_attr(
    not(target_arch = "x86_64"),
    allow(unused_variables, unused_mut, dead_code)
)]

pub mod backend;
pub mod conv;
pub mod conv_transpose;
pub mod depthwise;
mod elementwise;
pub mod fully_connected;
pub mod gemm;
pub mod isa;
mod kernel_io;
#[cfg(feature = "analysis")]
mod layout_nhwc;
#[cfg(feature = "analysis")]
mod layout_pass;
mod math;
pub mod matmul;
mod movement;
mod nchwc;
mod norm;
mod pool;
mod qconv;
mod qconv_nhwc;
mod qelementwise;
pub(crate) mod qgemm;
mod qlinear;
mod qmatmul;
mod qparams;
mod qpool_nhwc;
mod reduce;
mod resize;
pub mod sgemm;
mod softmax;
mod split;
mod stride2;
mod table;
pub mod winograd;

#[cfg(test)]
mod tests;

pub use backend::{CpuBackend, CpuContext, Precision};
pub use gemm::Sgemm;
pub use isa::Isa;
#[cfg(feature = "analysis")]
pub use layout_nhwc::LayoutNhwcInt8;
#[cfg(feature = "analysis")]
pub use layout_pass::LayoutNchwc;
