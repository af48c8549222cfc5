//! The x86 integer GEMM, one file per instruction set: AVX2 `vpmaddwd` on i16 pairs
//! ([`avx2`]), AVX-VNNI ([`avx_vnni`]) and AVX-512 VNNI ([`avx512`]) `vpdpbusd` on byte quads,
//! and the AMX tiles ([`amx`]). Each computes a whole `MR x NR` tile over all of `k` in
//! registers (AMX in its tile registers). Each file's `Kernels` constant is its entry in the
//! microkernel table (`crate::table`); the packing shared by the quad paths is here (SSE2,
//! part of x86-64).

mod amx;
mod avx2;
mod avx512;
mod avx_vnni;

pub use amx::*;
pub use avx2::*;
pub use avx512::*;
pub use avx_vnni::*;

use std::arch::x86_64::*;

/// The quad layout of `quads` groups of four rows (row stride `ld`) over `lanes` columns (a
/// multiple of 16): quad `q` of column `l` at `dst + q * step + 4 l`, every byte XORed with
/// `flip`.
///
/// # Safety
/// Rows `0..4 * quads` hold `lanes` bytes each at `src + row * ld`; `dst` holds `quads`
/// groups of `step >= 4 * lanes` bytes.
pub unsafe fn interleave_quads(
    src: *const u8,
    ld: usize,
    quads: usize,
    lanes: usize,
    flip: u8,
    dst: *mut u8,
    step: usize,
) {
    // SSE2 is part of x86-64.
    let x = _mm_set1_epi8(flip as i8);
    for q in 0..quads {
        let rows = src.add(4 * q * ld);
        let out = dst.add(q * step);
        for l in (0..lanes).step_by(16) {
            let ld_row = |t: usize| {
                _mm_xor_si128(_mm_loadu_si128(rows.add(t * ld + l) as *const __m128i), x)
            };
            let (a, b, c, d) = (ld_row(0), ld_row(1), ld_row(2), ld_row(3));
            let ab_lo = _mm_unpacklo_epi8(a, b);
            let ab_hi = _mm_unpackhi_epi8(a, b);
            let cd_lo = _mm_unpacklo_epi8(c, d);
            let cd_hi = _mm_unpackhi_epi8(c, d);
            let o = out.add(4 * l) as *mut __m128i;
            _mm_storeu_si128(o, _mm_unpacklo_epi16(ab_lo, cd_lo));
            _mm_storeu_si128(o.add(1), _mm_unpackhi_epi16(ab_lo, cd_lo));
            _mm_storeu_si128(o.add(2), _mm_unpacklo_epi16(ab_hi, cd_hi));
            _mm_storeu_si128(o.add(3), _mm_unpackhi_epi16(ab_hi, cd_hi));
        }
    }
}
