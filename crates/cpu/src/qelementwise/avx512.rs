//! DynamicQuantizeLinear's quantizing pass compiled for AVX-512; the rest is AVX2's.

use super::Kernels;
use crate::table::compiled_with;

pub(crate) const KERNELS: Kernels = Kernels {
    quantize_u8,
    ..super::avx2::KERNELS
};

compiled_with! {
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2")]
    fn quantize_u8(x: &[f32], scale: f32, zero: i32, y: &mut [u8]) {
        super::quantize_u8_impl(x, scale, zero, y)
    }
}
