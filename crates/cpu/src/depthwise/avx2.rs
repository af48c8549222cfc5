//! The depthwise loops on AVX2 + FMA: the nine-tap row loop, the channel-blocked pixels and
//! the 8x8 transposes in intrinsics, and the generic loops compiled around them.

use super::{Kernels, Lanes, Plane, PlaneScratch, Simd, Taps, LANES};
use crate::isa::Isa;
use crate::table::compiled_with;
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use std::arch::x86_64::*;

pub(crate) const KERNELS: Kernels = Kernels { plane, blocked };

compiled_with! {
    #[target_feature(enable = "avx2,fma")]
    fn plane(
        p: &Plane,
        x: &[f32],
        w: &[f32],
        bias: f32,
        act: Option<UnaryKind>,
        y: &mut [f32],
        scratch: &mut PlaneScratch,
    ) {
        super::plane::<Avx2>(Isa::Avx2Fma, p, x, w, bias, act, y, scratch)
    }
    fn blocked(
        p: &Plane,
        taps: &Taps,
        x: &[f32],
        w: &[Lanes],
        bias: &Lanes,
        act: Option<UnaryKind>,
        y: &mut [f32],
        nc: usize,
        buf: &mut Vec<f32>,
    ) {
        super::blocked::<Avx2>(p, taps, x, w, bias, act, y, nc, buf)
    }
}

/// The AVX2 + FMA pieces. Used only inside the functions above, which run only on CPUs with
/// AVX2 and FMA (the AVX2 tables).
struct Avx2;

impl Simd for Avx2 {
    #[inline(always)]
    fn taps9(src: &[f32], offs: &[usize; 9], w: &[f32; 9], bias: f32, out: &mut [f32]) -> bool {
        // SAFETY: reached only from this file's table entries (see `Avx2`).
        unsafe { taps9_avx2(src, offs, w, bias, out) };
        true
    }

    #[inline(always)]
    fn blocked_pixels<const PX: usize>(
        buf: &[f32],
        taps: &Taps,
        w: &[Lanes],
        bias: &Lanes,
        base: usize,
        step: usize,
        out: &mut [f32],
    ) {
        // SAFETY: as for `taps9`; the function asserts the bounds of its loads and stores.
        unsafe { blocked_pixels_avx::<PX>(buf, taps, w, bias, base, step, out) }
    }

    #[inline(always)]
    fn transpose8(rows: [&Lanes; LANES]) -> [Lanes; LANES] {
        // SAFETY: as for `taps9`.
        unsafe { transpose8_avx(rows) }
    }
}

/// [`weighted_taps`] for nine taps: four vectors of outputs at a time, then single vectors,
/// then single values, each tap's weight in a register (fused multiply-adds in tap order).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn taps9_avx2(src: &[f32], offs: &[usize; 9], w: &[f32; 9], bias: f32, out: &mut [f32]) {
    let n = out.len();
    let end = offs.iter().max().map_or(0, |&m| m + n);
    assert!(end <= src.len());
    let wv: [__m256; 9] = std::array::from_fn(|t| _mm256_set1_ps(w[t]));
    let b = _mm256_set1_ps(bias);
    let mut i = 0;
    while i + 32 <= n {
        let mut acc = [b; 4];
        for (&off, &wt) in offs.iter().zip(&wv) {
            // SAFETY: reads 32 floats from off + i, and off + i + 32 <= max(offs) + n <= len
            // (asserted above).
            let s = unsafe { src.as_ptr().add(off + i) };
            for (u, a) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                *a = _mm256_fmadd_ps(unsafe { _mm256_loadu_ps(s.add(8 * u)) }, wt, *a);
            }
        }
        for (u, a) in acc.iter().enumerate() {
            // SAFETY: i + 32 <= n = out.len().
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i + 8 * u), *a) };
        }
        i += 32;
    }
    // Rows of stride-2 planes (28 to 112 outputs) end in a few single vectors.
    while i + 8 <= n {
        let mut acc = b;
        for (&off, &wt) in offs.iter().zip(&wv) {
            // SAFETY: reads 8 floats from off + i, within max(offs) + n (asserted above).
            acc = _mm256_fmadd_ps(
                unsafe { _mm256_loadu_ps(src.as_ptr().add(off + i)) },
                wt,
                acc,
            );
        }
        // SAFETY: i + 8 <= n = out.len().
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i), acc) };
        i += 8;
    }
    for (j, o) in out.iter_mut().enumerate().skip(i) {
        *o = offs
            .iter()
            .zip(w)
            .fold(bias, |acc, (&off, &wt)| src[off + j].mul_add(wt, acc));
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn blocked_pixels_avx<const PX: usize>(
    buf: &[f32],
    taps: &Taps,
    w: &[Lanes],
    bias: &Lanes,
    base: usize,
    step: usize,
    out: &mut [f32],
) {
    let end = base + (PX - 1) * step + taps.max + LANES;
    assert!(end <= buf.len() && w.len() >= taps.offs.len() && out.len() >= PX * LANES);
    // SAFETY: `bias` is a whole [f32; 8].
    let mut acc = [unsafe { _mm256_loadu_ps(bias.as_ptr()) }; PX];
    for (&off, wt) in taps.offs.iter().zip(w) {
        // SAFETY: `wt` is a whole [f32; 8]; every input load reads 8 floats starting at
        // base + px * step + off <= base + (PX - 1) * step + taps.max, which `end` bounds
        // by buf.len() (asserted above; taps.max is the largest offset).
        unsafe {
            let wv = _mm256_loadu_ps(wt.as_ptr());
            let src = buf.as_ptr().add(base + off);
            for (px, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(src.add(px * step)), wv, *a);
            }
        }
    }
    for (px, a) in acc.iter().enumerate() {
        // SAFETY: out holds at least PX * 8 floats (asserted above).
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(px * LANES), *a) };
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn transpose8_avx(rows: [&Lanes; LANES]) -> [Lanes; LANES] {
    // SAFETY: every load reads one whole `[f32; 8]` through a valid reference.
    let r: [__m256; 8] = std::array::from_fn(|i| unsafe { _mm256_loadu_ps(rows[i].as_ptr()) });
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let s0 = _mm256_shuffle_ps(t0, t2, 0x44);
    let s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    let s2 = _mm256_shuffle_ps(t1, t3, 0x44);
    let s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    let s4 = _mm256_shuffle_ps(t4, t6, 0x44);
    let s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    let s6 = _mm256_shuffle_ps(t5, t7, 0x44);
    let s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    let o = [
        _mm256_permute2f128_ps(s0, s4, 0x20),
        _mm256_permute2f128_ps(s1, s5, 0x20),
        _mm256_permute2f128_ps(s2, s6, 0x20),
        _mm256_permute2f128_ps(s3, s7, 0x20),
        _mm256_permute2f128_ps(s0, s4, 0x31),
        _mm256_permute2f128_ps(s1, s5, 0x31),
        _mm256_permute2f128_ps(s2, s6, 0x31),
        _mm256_permute2f128_ps(s3, s7, 0x31),
    ];
    let mut out = [[0.0; LANES]; LANES];
    for (d, v) in out.iter_mut().zip(o) {
        // SAFETY: the store writes one whole `[f32; 8]` through a valid reference.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), v) };
    }
    out
}
