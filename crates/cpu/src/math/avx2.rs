//! The math slice loops compiled for AVX2 + FMA (eight lanes).

use super::{Kernels, MathFn};
use crate::table::compiled_with;

pub(crate) const KERNELS: Kernels = Kernels { map };

compiled_with! {
    #[target_feature(enable = "avx2,fma")]
    fn map(f: MathFn, x: &[f32], y: &mut [f32]) {
        super::map_fused(f, x, y)
    }
}
