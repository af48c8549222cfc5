//! The quantizing loops compiled for AVX2, and the range pass in AVX2 intrinsics.

use super::Kernels;
use crate::table::compiled_with;
use std::arch::x86_64::*;

pub(crate) const KERNELS: Kernels = Kernels {
    quantize,
    dequantize,
    min_max,
    quantize_u8,
};

compiled_with! {
    #[target_feature(enable = "avx2")]
    fn quantize(x: &[f32], scale: f32, zero: i32, lo: i32, hi: i32, signed: bool, y: &mut [u8]) {
        super::quantize_impl(x, scale, zero, lo, hi, signed, y)
    }
    fn dequantize(x: &[u8], scale: f32, zero: i32, signed: bool, y: &mut [f32]) {
        super::dequantize_impl(x, scale, zero, signed, y)
    }
    fn quantize_u8(x: &[f32], scale: f32, zero: i32, y: &mut [u8]) {
        super::quantize_u8_impl(x, scale, zero, y)
    }
    /// The range on four vectors of running minima and maxima (one scalar fold is a chain of
    /// dependent steps).
    fn min_max(x: &[f32]) -> (f32, f32) {
        const L: usize = 32;
        let mut lo = [_mm256_setzero_ps(); 4];
        let mut hi = [_mm256_setzero_ps(); 4];
        let mut chunks = x.chunks_exact(L);
        for c in &mut chunks {
            for (j, (l, h)) in lo.iter_mut().zip(&mut hi).enumerate() {
                // SAFETY: eight of the chunk's 32 values.
                let v = unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * j)) };
                // min_ps(v, l) is l where v is NaN: NaNs are skipped.
                *l = _mm256_min_ps(v, *l);
                *h = _mm256_max_ps(v, *h);
            }
        }
        let mut out = [0f32; 8];
        let (mut a, mut b) = (0f32, 0f32);
        for (l, h) in lo.iter().zip(&hi) {
            // SAFETY: eight floats each.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), *l) };
            a = out.iter().fold(a, |m, &v| m.min(v));
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), *h) };
            b = out.iter().fold(b, |m, &v| m.max(v));
        }
        chunks
            .remainder()
            .iter()
            .fold((a, b), |(lo, hi), &v| (lo.min(v), hi.max(v)))
    }
}
