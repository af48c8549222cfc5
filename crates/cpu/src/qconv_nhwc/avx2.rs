//! The channels-last depthwise QLinearConv's pixel sums compiled for AVX2, so their loops over
//! channels vectorise.

use super::{Kernels, QConvNhwcKernel};
use crate::table::compiled_with;

pub(crate) const KERNELS: Kernels = Kernels {
    depthwise_pixel,
    ..super::PORTABLE
};

compiled_with! {
    #[target_feature(enable = "avx2,fma")]
    fn depthwise_pixel(k: &QConvNhwcKernel, w: &[i32], x: &[u8], r: usize, ox: usize, acc: &mut [i32]) {
        super::depthwise_pixel(k, w, x, r, ox, acc)
    }
}
