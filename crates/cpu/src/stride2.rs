//! Stride-2 access turned into contiguous access: splitting a row into its even and odd
//! elements lets stride-2 windows (pooling, depthwise convolution, im2col) run as plain
//! vector loops. AVX2 shuffles do the split where the CPU has them (picked at run time).

use crate::isa::Isa;

/// `even[i] = src[2 i]` and `odd[i] = src[2 i + 1]` for `i < n`, where `n` is the shorter
/// of `even`, `odd` and the pairs in `src`; nothing beyond is written.
pub(crate) fn deinterleave(isa: Isa, src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    let n = even.len().min(odd.len()).min(src.len() / 2);
    let (src, even, odd) = (&src[..2 * n], &mut even[..n], &mut odd[..n]);
    // Where the vector loop stopped (mutated only on x86_64).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: the CPU has AVX2 (an Isa other than Portable exists only then); the slices hold n pairs and n values.
        done = unsafe { avx2::deinterleave(src, Some(even), odd) };
    }
    for ((e, o), pair) in even[done..]
        .iter_mut()
        .zip(&mut odd[done..])
        .zip(src[2 * done..].chunks_exact(2))
    {
        *e = pair[0];
        *o = pair[1];
    }
}

/// Writes a row that starts `pad` columns into a padded row to the padded row's even and odd
/// columns (`even[j]` is padded column `2 j`, `odd[j]` column `2 j + 1`); the padding
/// columns are left as they are. Both phases must hold `(pad + src.len()).div_ceil(2)` values.
pub(crate) fn split_padded_row(
    isa: Isa,
    src: &[f32],
    pad: usize,
    even: &mut [f32],
    odd: &mut [f32],
) {
    // Input column t is padded column t + pad: with an odd pad, input pairs start on an odd
    // column.
    let (first, second, o0, o1) = if pad.is_multiple_of(2) {
        (even, odd, pad / 2, pad / 2)
    } else {
        (odd, even, pad / 2, pad / 2 + 1)
    };
    let n = src.len() / 2;
    if src.len() % 2 == 1 {
        first[o0 + n] = src[2 * n];
    }
    deinterleave(isa, src, &mut first[o0..o0 + n], &mut second[o1..o1 + n]);
}

/// `dst[i] = src[2 i]` for every `i < dst.len()`; `src` must hold `2 dst.len() - 1` values.
pub(crate) fn evens(isa: Isa, src: &[f32], dst: &mut [f32]) {
    let n = dst.len();
    let Some(last) = n.checked_sub(1) else {
        return;
    };
    let src = &src[..2 * last + 1];
    // Where the vector loop stopped (mutated only on x86_64).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // The vector loop reads whole pairs: the last element (no partner) is done below.
        let pairs = &src[..2 * last];
        // SAFETY: the CPU has AVX2 (the Isa says so); pairs holds `last` pairs and dst
        // more than `last` values.
        done = unsafe { avx2::deinterleave(pairs, None, &mut dst[..last]) };
    }
    for (i, d) in dst.iter_mut().enumerate().skip(done) {
        *d = src[2 * i];
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

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
    pub(super) unsafe fn deinterleave(
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deinterleave_matches_indexing() {
        for (isa, len) in Isa::available()
            .into_iter()
            .flat_map(|i| (0..40).map(move |l| (i, l)))
        {
            let src: Vec<f32> = (0..len).map(|i| i as f32).collect();
            let n = len / 2;
            let (mut e, mut o) = (vec![-1.0; n + 1], vec![-1.0; n + 1]);
            deinterleave(isa, &src, &mut e, &mut o);
            for i in 0..n {
                assert_eq!(
                    (e[i], o[i]),
                    (src[2 * i], src[2 * i + 1]),
                    "len {len} i {i}"
                );
            }
            assert_eq!(
                (e[n], o[n]),
                (-1.0, -1.0),
                "len {len}: wrote past the pairs"
            );
        }
    }

    #[test]
    fn split_padded_row_places_every_column() {
        for (isa, len) in Isa::available()
            .into_iter()
            .flat_map(|i| (0..21usize).map(move |l| (i, l)))
        {
            for pad in 0..4usize {
                let src: Vec<f32> = (1..=len).map(|i| i as f32).collect();
                let half = (pad + len).div_ceil(2);
                let (mut e, mut o) = (vec![0.0; half], vec![0.0; half]);
                split_padded_row(isa, &src, pad, &mut e, &mut o);
                for col in 0..2 * half {
                    let got = if col % 2 == 0 { e[col / 2] } else { o[col / 2] };
                    let want = col.checked_sub(pad).and_then(|t| src.get(t)).copied();
                    assert_eq!(got, want.unwrap_or(0.0), "len {len} pad {pad} column {col}");
                }
            }
        }
    }

    #[test]
    fn evens_matches_indexing() {
        for (isa, n) in Isa::available()
            .into_iter()
            .flat_map(|i| (0..30).map(move |l| (i, l)))
        {
            let src: Vec<f32> = (0..(2 * n).max(1) - 1).map(|i| i as f32 * 0.5).collect();
            let mut d = vec![-1.0; n];
            evens(isa, &src, &mut d);
            for (i, &v) in d.iter().enumerate() {
                assert_eq!(v, src[2 * i], "n {n} i {i}");
            }
        }
    }
}
