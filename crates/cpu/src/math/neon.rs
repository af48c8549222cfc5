//! The math slice loops for NEON: aarch64's baseline, where `mul_add` is one instruction, so
//! the fused blocks vectorise to it without a target_feature build.

use super::Kernels;

pub(crate) const KERNELS: Kernels = Kernels {
    map: super::map_fused,
};
