//! Softmax rows compiled for AVX-512, with fused multiply-adds in `exp`.

use super::Kernels;
use crate::table::compiled_with;

pub(crate) const KERNELS: Kernels = Kernels { row };

compiled_with! {
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    fn row(x: &[f32], y: &mut [f32], log: bool) {
        super::row_impl::<true>(x, y, log)
    }
}
