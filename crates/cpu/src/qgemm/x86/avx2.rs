//! The int8 GEMM on AVX2: `vpmaddwd` on i16 pairs, exact (no 16-bit saturation), a 6x16 tile;
//! its epilogue compiled for AVX2.

use crate::qgemm::{Product, Sink};
use std::arch::x86_64::*;

pub const AVX2_MR: usize = 6;

pub const AVX2_NR: usize = 16;

/// AVX2 tile: `rows` is `[kp][6][2]` i16, `panel` `[kp][16][2]` i16.
pub fn tile_avx2(rows: &[i16], panel: &[i16], kp: usize, tile: &mut [i32]) {
    assert!(rows.len() >= kp * AVX2_MR * 2 && panel.len() >= kp * AVX2_NR * 2);
    assert!(tile.len() >= AVX2_MR * AVX2_NR);
    // SAFETY: the QPath::Avx2 path exists only on CPUs with AVX2 (the avx2 and avx512 tables);
    // the lengths were checked above.
    unsafe { tile_avx2_impl(rows.as_ptr(), panel.as_ptr(), kp, tile.as_mut_ptr()) }
}

#[target_feature(enable = "avx2")]
unsafe fn tile_avx2_impl(rows: *const i16, panel: *const i16, kp: usize, tile: *mut i32) {
    let mut acc = [[_mm256_setzero_si256(); 2]; AVX2_MR];
    for p in 0..kp {
        let pp = panel.add(p * AVX2_NR * 2);
        let b0 = _mm256_loadu_si256(pp as *const __m256i);
        let b1 = _mm256_loadu_si256(pp.add(16) as *const __m256i);
        let rp = rows.add(p * AVX2_MR * 2);
        for (r, acc) in acc.iter_mut().enumerate() {
            // One (k, k+1) pair of row r, in both halves of every 32-bit lane.
            let a = _mm256_set1_epi32((rp.add(r * 2) as *const i32).read_unaligned());
            acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(a, b0));
            acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(a, b1));
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        _mm256_storeu_si256(tile.add(r * AVX2_NR) as *mut __m256i, acc[0]);
        _mm256_storeu_si256(tile.add(r * AVX2_NR + 8) as *mut __m256i, acc[1]);
    }
}

/// The GEMM's table entry on AVX2: `vpmaddwd` on i16 pairs.
pub(crate) const AVX2: crate::qgemm::Kernels = crate::qgemm::Kernels {
    path: crate::qgemm::QPath::Avx2,
    indirect: None,
};

/// The epilogue compiled for AVX2, so that its loops vectorize 8 wide.
///
/// # Safety
/// As [`Product::epilogue`], on a CPU with AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(in crate::qgemm) unsafe fn epilogue_avx2(
    p: &Product,
    m0: usize,
    n0: usize,
    tile: &[i32],
    nr: usize,
    sink: Sink,
) {
    // SAFETY: the caller's contract.
    unsafe { p.epilogue_body(m0, n0, tile, nr, sink) }
}
