//! The NHWC 8-bit MaxPool rows compiled for AVX-512, their byte loops 64 wide.

use super::{Kernels, QMaxPoolNhwc};
use crate::table::compiled_with;

pub(crate) const KERNELS: Kernels = Kernels { row };

compiled_with! {
    #[target_feature(enable = "avx512f,avx512bw")]
    fn row(k: &QMaxPoolNhwc, image: &[u8], oy: usize, out: &mut [u8]) {
        k.row_impl(image, oy, out)
    }
}
