//! The element-wise loops for NEON, aarch64's baseline: the plain loops vectorise to it
//! without a target_feature build, and the unary ops take the math functions' NEON builds.

use super::Kernels;
use crate::isa::Isa;

pub(crate) const KERNELS: Kernels = Kernels {
    unary: |kind, x, y| super::apply_unary_impl(Isa::Neon, kind, x, y),
    ..super::PORTABLE
};
