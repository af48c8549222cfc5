//! The unary loops compiled for AVX-512, sixteen wide, with the math functions' AVX-512
//! builds; the binary and Clip loops are AVX2's, as memory bounds them.

use super::Kernels;
use crate::isa::Isa;
use crate::table::compiled_with;
use ferrolite_core::ops::elementwise::unary::UnaryKind;

pub(crate) const KERNELS: Kernels = Kernels {
    unary,
    ..super::avx2::KERNELS
};

compiled_with! {
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    fn unary(kind: UnaryKind, x: &[f32], y: &mut [f32]) {
        super::apply_unary_impl(Isa::Avx512, kind, x, y)
    }
}
