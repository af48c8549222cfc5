//! The int8 GEMM on AVX-VNNI: 256-bit `vpdpbusd` on byte quads (VEX-encoded, no AVX-512
//! needed), a 6x16 tile; the epilogue is AVX2's.

use std::arch::x86_64::*;

pub const AVX_VNNI_MR: usize = 6;

pub const AVX_VNNI_NR: usize = 16;

/// On AVX-VNNI (256-bit `vpdpbusd`, no AVX-512 VNNI, or a session at avx2 on a CPU with both).
pub(crate) const AVX_VNNI: crate::qgemm::Kernels = crate::qgemm::Kernels {
    path: crate::qgemm::QPath::AvxVnni,
    indirect: None,
};

/// AVX-VNNI tile (256-bit): `rows` is `[kq][6][4]` bytes, `panel` `[kq][16][4]` bytes; the
/// rows are the signed side when `rows_signed`, else the panel is.
pub fn tile_avx_vnni(rows: &[u8], panel: &[u8], kq: usize, rows_signed: bool, tile: &mut [i32]) {
    assert!(rows.len() >= kq * AVX_VNNI_MR * 4 && panel.len() >= kq * AVX_VNNI_NR * 4);
    assert!(tile.len() >= AVX_VNNI_MR * AVX_VNNI_NR);
    // SAFETY: QPath::AvxVnni exists only on CPUs with AVX2 and AVX-VNNI (`refined_x86` in
    // table.rs picks it by detection); the lengths were checked above.
    unsafe {
        if rows_signed {
            tile_avx_vnni_impl::<true>(rows.as_ptr(), panel.as_ptr(), kq, tile.as_mut_ptr())
        } else {
            tile_avx_vnni_impl::<false>(rows.as_ptr(), panel.as_ptr(), kq, tile.as_mut_ptr())
        }
    }
}

#[target_feature(enable = "avx2,avxvnni")]
unsafe fn tile_avx_vnni_impl<const ROWS_SIGNED: bool>(
    rows: *const u8,
    panel: *const u8,
    kq: usize,
    tile: *mut i32,
) {
    let mut acc = [[_mm256_setzero_si256(); 2]; AVX_VNNI_MR];
    for q in 0..kq {
        let pp = panel.add(q * AVX_VNNI_NR * 4);
        let b0 = _mm256_loadu_si256(pp as *const __m256i);
        let b1 = _mm256_loadu_si256(pp.add(32) as *const __m256i);
        let rp = rows.add(q * AVX_VNNI_MR * 4);
        for (r, acc) in acc.iter_mut().enumerate() {
            let a = _mm256_set1_epi32((rp.add(r * 4) as *const i32).read_unaligned());
            // The first source's bytes are the unsigned ones.
            if ROWS_SIGNED {
                acc[0] = _mm256_dpbusd_avx_epi32(acc[0], b0, a);
                acc[1] = _mm256_dpbusd_avx_epi32(acc[1], b1, a);
            } else {
                acc[0] = _mm256_dpbusd_avx_epi32(acc[0], a, b0);
                acc[1] = _mm256_dpbusd_avx_epi32(acc[1], a, b1);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        _mm256_storeu_si256(tile.add(r * AVX_VNNI_NR) as *mut __m256i, acc[0]);
        _mm256_storeu_si256(tile.add(r * AVX_VNNI_NR + 8) as *mut __m256i, acc[1]);
    }
}
