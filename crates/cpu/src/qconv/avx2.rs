//! The depthwise strategy's conversions compiled for AVX2, so their loops vectorise eight wide.

use super::Kernels;
use crate::table::compiled_with;

pub(crate) const KERNELS: Kernels = Kernels {
    centered,
    requantize_sums,
};

compiled_with! {
    #[target_feature(enable = "avx2")]
    fn centered(x: &[u8], signed: bool, zero: i32, out: &mut [f32]) {
        super::centered_impl(x, signed, zero, out)
    }
    fn requantize_sums(sum: &[f32], bias: i32, mult: f32, q: (i32, i32, i32, bool), out: &mut [u8]) {
        super::requantize_sums_impl(sum, bias, mult, q, out)
    }
}
