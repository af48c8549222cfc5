//! The element-wise loops compiled for AVX2 + FMA, so they vectorise eight wide.

use super::{BinOp, Kernels, Src};
use crate::isa::Isa;
use crate::table::compiled_with;
use ferrolite_core::ops::elementwise::unary::UnaryKind;

pub(crate) const KERNELS: Kernels = Kernels {
    binary_row,
    unary,
    clip,
};

compiled_with! {
    #[target_feature(enable = "avx2,fma")]
    fn binary_row(op: BinOp, a: Src, b: Src, o: &mut [f32]) {
        super::run_row_impl(op, a, b, o)
    }
    fn unary(kind: UnaryKind, x: &[f32], y: &mut [f32]) {
        super::apply_unary_impl(Isa::Avx2Fma, kind, x, y)
    }
    fn clip(lo: f32, hi: f32, x: &[f32], y: &mut [f32]) {
        super::clip_impl(lo, hi, x, y)
    }
}
