//! The depthwise strategy's conversions on sixteen lanes (the compiler's own vectorisation of
//! the portable loops stays at eight even when AVX-512 is enabled).

use super::Kernels;
use crate::table::compiled_with;
use std::arch::x86_64::*;

pub(crate) const KERNELS: Kernels = Kernels {
    centered,
    requantize_sums,
};

compiled_with! {
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn centered(x: &[u8], signed: bool, zero: i32, out: &mut [f32]) {
        let n = x.len().min(out.len());
        let z = _mm512_set1_epi32(zero);
        let mut i = 0;
        while i < n {
            let m: __mmask16 = ((1u32 << (n - i).min(16)) - 1) as u16;
            // SAFETY: whole vectors lie inside the n values of both slices, the last one is
            // masked to them.
            unsafe {
                let p = x.as_ptr().add(i);
                let b = if i + 16 <= n {
                    _mm_loadu_si128(p as *const __m128i)
                } else {
                    _mm_maskz_loadu_epi8(m, p as *const i8)
                };
                let v = if signed {
                    _mm512_cvtepi8_epi32(b)
                } else {
                    _mm512_cvtepu8_epi32(b)
                };
                let f = _mm512_cvtepi32_ps(_mm512_sub_epi32(v, z));
                if i + 16 <= n {
                    _mm512_storeu_ps(out.as_mut_ptr().add(i), f);
                } else {
                    _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), m, f);
                }
            }
            i += 16;
        }
    }
    /// `cvtps` rounds half to even, as the magic-number rounding of `requantize` does.
    fn requantize_sums(sum: &[f32], bias: i32, mult: f32, q: (i32, i32, i32, bool), out: &mut [u8]) {
        let n = sum.len().min(out.len());
        let (b, s) = (_mm512_set1_ps(bias as f32), _mm512_set1_ps(mult));
        // SAFETY: Narrow::new needs AVX-512F and BW, which this table's CPUs have.
        let narrow = unsafe { crate::qgemm::x86::Narrow::new(q.0, q.1, q.2) };
        let mut i = 0;
        while i < n {
            let m: __mmask16 = ((1u32 << (n - i).min(16)) - 1) as u16;
            // SAFETY: whole vectors lie inside the n values of both slices, the last one is
            // masked to them.
            unsafe {
                let a = if i + 16 <= n {
                    _mm512_loadu_ps(sum.as_ptr().add(i))
                } else {
                    _mm512_maskz_loadu_ps(m, sum.as_ptr().add(i))
                };
                let f = _mm512_mul_ps(_mm512_add_ps(a, b), s);
                let (dst, bytes) = (out.as_mut_ptr().add(i), narrow.bytes(f));
                if i + 16 <= n {
                    _mm_storeu_si128(dst as *mut __m128i, bytes);
                } else {
                    _mm_mask_storeu_epi8(dst as *mut i8, m, bytes);
                }
            }
            i += 16;
        }
    }
}
