//! The convolution's im2col packing compiled for AVX2 (sixteen values are two moves).

use super::{Kernels, PhasePlanes};
use crate::table::compiled_with;

pub(crate) const KERNELS: Kernels = Kernels { phase_pack };

compiled_with! {
    #[target_feature(enable = "avx2")]
    fn phase_pack(f: &PhasePlanes, xp: &[f32], ow: usize, p0: usize, np: usize, buf: &mut [f32]) {
        f.pack_impl(xp, ow, p0, np, buf)
    }
}
