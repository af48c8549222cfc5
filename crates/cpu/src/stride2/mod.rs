//! Stride-2 access turned into contiguous access: splitting a row into its even and odd
//! elements lets stride-2 windows (pooling, depthwise convolution, im2col) run as plain
//! vector loops. AVX2 shuffles do the split where the ISA's table has them (`avx2.rs`).

use crate::isa::Isa;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;

/// The stride-2 family's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    /// Splits the pairs of `src` in whole vector blocks: evens into the last slice when the
    /// first is `None` (the odd elements dropped), else evens into the first and odds into
    /// the last. Returns how many pairs it handled; the caller does the rest. `src` must hold
    /// two values per element of the last slice, and the first as many as the last.
    pub(crate) deinterleave: DeinterleaveFn,
}

/// See [`Kernels::deinterleave`].
pub(crate) type DeinterleaveFn = fn(&[f32], Option<&mut [f32]>, &mut [f32]) -> usize;

/// No vector loop: the callers' scalar loops do every pair.
pub(crate) const PORTABLE: Kernels = Kernels {
    deinterleave: |_, _, _| 0,
};

/// `even[i] = src[2 i]` and `odd[i] = src[2 i + 1]` for `i < n`, where `n` is the shorter
/// of `even`, `odd` and the pairs in `src`; nothing beyond is written.
pub(crate) fn deinterleave(isa: Isa, src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    let n = even.len().min(odd.len()).min(src.len() / 2);
    let (src, even, odd) = (&src[..2 * n], &mut even[..n], &mut odd[..n]);
    // Where the vector loop stopped.
    let done = (isa.table().stride2.deinterleave)(src, Some(even), odd);
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
    // The vector loop reads whole pairs: the last element (no partner) is done below.
    let pairs = &src[..2 * last];
    let done = (isa.table().stride2.deinterleave)(pairs, None, &mut dst[..last]);
    for (i, d) in dst.iter_mut().enumerate().skip(done) {
        *d = src[2 * i];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deinterleave_matches_indexing() {
        for (isa, len) in crate::tests::tested_isas()
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
        for (isa, len) in crate::tests::tested_isas()
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
        for (isa, n) in crate::tests::tested_isas()
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
