use super::{Kernels, B};
use std::arch::x86_64::*;

pub(crate) const KERNELS: Kernels = Kernels {
    block: B,
    reorder_block: reorder,
    activate_row: activate_avx2,
    winograd: false,
    conv: super::conv::AVX2,
    depthwise: super::depthwise::avx2::KERNELS,
};

/// With the 16-channel tiles and the blocked Winograd kernels; still blocked by [`B`] (the
/// tiles cover two blocks).
pub(crate) const KERNELS_AVX512: Kernels = Kernels {
    winograd: true,
    conv: super::conv::AVX512,
    depthwise: super::depthwise::avx512::KERNELS,
    ..KERNELS
};

fn reorder(to_blocked: bool, src: &[f32], dst: &mut [f32], hw: usize) -> usize {
    assert!(src.len() >= B * hw && dst.len() >= B * hw);
    // SAFETY: reached only through the AVX2 and AVX-512 tables, whose CPUs have AVX2 and FMA;
    // both slices hold 8 x hw values (asserted).
    unsafe { reorder_block(to_blocked, src, dst, hw) }
}

fn activate_avx2(act: Option<super::UnaryKind>, row: &mut [f32]) {
    // SAFETY: as for `reorder`; `activate` is safe code.
    unsafe { activate(act, row) }
}

/// [`super::reorder_block`] for whole runs of eight pixels, as 8 x 8 transposes in
/// registers; returns how many pixels it did.
///
/// # Safety
/// The CPU must support AVX2; `src` and `dst` must hold `8 * hw` values.
#[target_feature(enable = "avx2,fma")]
unsafe fn reorder_block(to_blocked: bool, src: &[f32], dst: &mut [f32], hw: usize) -> usize {
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let mut p = 0;
    while p + B <= hw {
        // Plain: row j at j * hw + p; blocked: pixel p + i at (p + i) * 8.
        let (load, store) = if to_blocked {
            ((hw, 1), (B, B))
        } else {
            ((B, B), (hw, 1))
        };
        let mut r = [_mm256_setzero_ps(); B];
        for (i, v) in r.iter_mut().enumerate() {
            // SAFETY: inside `src` (the caller's contract; p + 8 <= hw).
            *v = unsafe { _mm256_loadu_ps(s.add(i * load.0 + p * load.1)) };
        }
        let t = transpose8(r);
        for (i, v) in t.iter().enumerate() {
            // SAFETY: inside `dst`, as above.
            unsafe { _mm256_storeu_ps(d.add(i * store.0 + p * store.1), *v) };
        }
        p += B;
    }
    p
}

/// The transpose of the 8 x 8 matrix whose rows are `r`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves.
    let a = [
        _mm256_unpacklo_ps(r[0], r[1]),
        _mm256_unpackhi_ps(r[0], r[1]),
        _mm256_unpacklo_ps(r[2], r[3]),
        _mm256_unpackhi_ps(r[2], r[3]),
        _mm256_unpacklo_ps(r[4], r[5]),
        _mm256_unpackhi_ps(r[4], r[5]),
        _mm256_unpacklo_ps(r[6], r[7]),
        _mm256_unpackhi_ps(r[6], r[7]),
    ];
    let b = [
        _mm256_shuffle_ps::<0x44>(a[0], a[2]),
        _mm256_shuffle_ps::<0xEE>(a[0], a[2]),
        _mm256_shuffle_ps::<0x44>(a[1], a[3]),
        _mm256_shuffle_ps::<0xEE>(a[1], a[3]),
        _mm256_shuffle_ps::<0x44>(a[4], a[6]),
        _mm256_shuffle_ps::<0xEE>(a[4], a[6]),
        _mm256_shuffle_ps::<0x44>(a[5], a[7]),
        _mm256_shuffle_ps::<0xEE>(a[5], a[7]),
    ];
    [
        _mm256_permute2f128_ps::<0x20>(b[0], b[4]),
        _mm256_permute2f128_ps::<0x20>(b[1], b[5]),
        _mm256_permute2f128_ps::<0x20>(b[2], b[6]),
        _mm256_permute2f128_ps::<0x20>(b[3], b[7]),
        _mm256_permute2f128_ps::<0x31>(b[0], b[4]),
        _mm256_permute2f128_ps::<0x31>(b[1], b[5]),
        _mm256_permute2f128_ps::<0x31>(b[2], b[6]),
        _mm256_permute2f128_ps::<0x31>(b[3], b[7]),
    ]
}

/// [`super::activate`] compiled for AVX2.
#[target_feature(enable = "avx2,fma")]
fn activate(act: Option<super::UnaryKind>, row: &mut [f32]) {
    super::activate(act, row)
}
