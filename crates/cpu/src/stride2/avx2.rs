//! The even/odd split in AVX2 shuffles, and the three taps of stride-2 windows of width 3
//! that the pooling kernels take from it.

use super::Kernels;
use std::arch::x86_64::*;

pub(crate) const KERNELS: Kernels = Kernels { deinterleave };

fn deinterleave(src: &[f32], even: Option<&mut [f32]>, odd_or_evens: &mut [f32]) -> usize {
    let n = odd_or_evens.len();
    assert!(src.len() >= 2 * n && even.as_ref().is_none_or(|e| e.len() >= n));
    // SAFETY: reached only through the tables of ISAs whose CPUs have AVX2; the lengths are
    // asserted just above.
    unsafe { deinterleave_blocks(src, even, odd_or_evens) }
}

/// The three taps of eight stride-2 windows of width 3 over 17 consecutive values (`a`:
/// values 0..8, `b`: 8..16, `c`: value 16 in every lane): values 0, 2, .., 14; 1, 3, ..,
/// 15; and 2, 4, .., 16. Lane `j` of the three is window `j`'s taps.
#[target_feature(enable = "avx2")]
pub(crate) fn window3_taps(a: __m256, b: __m256, c: __m256) -> [__m256; 3] {
    let (even, odd) = (evens(a, b), odds(a, b));
    // The even values moved down a lane, value 16 last.
    let next = _mm256_permutevar8x32_ps(even, _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0));
    [even, odd, _mm256_blend_ps::<0x80>(next, c)]
}

/// Values 0, 2, .., 14 of the 16 in `a` (0..8) and `b` (8..16).
#[target_feature(enable = "avx2")]
#[inline]
fn evens(a: __m256, b: __m256) -> __m256 {
    // Per 128-bit lane: a0 a2 b0 b2 | a4 a6 b4 b6; the 64-bit chunk order 0, 2, 1, 3
    // then restores a0 a2 a4 a6 b0 b2 b4 b6.
    let e = _mm256_castps_pd(_mm256_shuffle_ps::<0x88>(a, b));
    _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(e))
}

/// Values 1, 3, .., 15 of the 16 in `a` and `b` (as [`evens`]).
#[target_feature(enable = "avx2")]
#[inline]
fn odds(a: __m256, b: __m256) -> __m256 {
    let o = _mm256_castps_pd(_mm256_shuffle_ps::<0xDD>(a, b));
    _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(o))
}

/// Splits whole blocks of 8 pairs: evens into `odd_or_evens` when `even` is `None` (the
/// odd elements are dropped), else evens into `even` and odds into `odd_or_evens`.
/// Returns how many pairs it handled (a multiple of 8).
///
/// # Safety
/// The CPU must support AVX2; `src` must hold `2 n` values where `n` is the length of
/// `odd_or_evens` (and of `even` when given).
#[target_feature(enable = "avx2")]
unsafe fn deinterleave_blocks(
    src: &[f32],
    mut even: Option<&mut [f32]>,
    odd_or_evens: &mut [f32],
) -> usize {
    let n = odd_or_evens.len();
    debug_assert!(src.len() >= 2 * n && even.as_ref().is_none_or(|e| e.len() >= n));
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: pairs i..i + 8 lie inside src (2 n values), outputs i..i + 8 inside
        // the output slices (n values each).
        unsafe {
            let a = _mm256_loadu_ps(src.as_ptr().add(2 * i));
            let b = _mm256_loadu_ps(src.as_ptr().add(2 * i + 8));
            let e = evens(a, b);
            match even.as_deref_mut() {
                Some(even) => {
                    _mm256_storeu_ps(even.as_mut_ptr().add(i), e);
                    _mm256_storeu_ps(odd_or_evens.as_mut_ptr().add(i), odds(a, b));
                }
                None => _mm256_storeu_ps(odd_or_evens.as_mut_ptr().add(i), e),
            }
        }
        i += 8;
    }
    i
}
