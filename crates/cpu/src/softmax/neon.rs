//! Softmax rows for NEON: aarch64's baseline, where `mul_add` is one instruction, so `exp`
//! takes its fused form without a target_feature build.

use super::Kernels;

pub(crate) const KERNELS: Kernels = Kernels {
    row: super::row_impl::<true>,
};
