//! The Winograd transforms compiled for AVX2 + FMA, so their loops use 8-wide vectors.

use super::{Kernels, WinogradKernel};
use crate::table::compiled_with;
use ferrolite_core::scratch::{Carve, Scratch};
use ferrolite_core::OpResult;

pub(crate) const KERNELS: Kernels = Kernels { block };

compiled_with! {
    #[target_feature(enable = "avx2,fma")]
    fn block(
        k: &WinogradKernel,
        x: &[f32],
        ty0: usize,
        ty1: usize,
        bias: Option<&[f32]>,
        out: &mut [&mut [f32]],
        carve: &mut Carve,
        scratch: &Scratch,
        inner: usize,
    ) -> OpResult<()> {
        k.block_impl(x, ty0, ty1, bias, out, carve, scratch, inner)
    }
}
