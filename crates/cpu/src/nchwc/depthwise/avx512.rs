use super::avx2::{plane_3x3, row};
use super::{unpadded_3x3, Kernels, B};
use ferrolite_core::ops::linalg::conv_geometry::ConvGeometry;
use std::arch::x86_64::*;
use std::ops::Range;

pub(crate) const KERNELS: Kernels = Kernels {
    plane_3x3: Some(plane),
    row: row::<true>,
    row_clamps: true,
};

/// Stride 1 across: [`plane_3x3_s1`], two pixels a register; otherwise AVX2's tiles with their
/// AVX-512 variants.
///
/// # Safety
/// As [`super::Plane3x3Fn`]; reached only through the AVX-512 tables, whose CPUs have
/// AVX-512 F/BW/VL/DQ, AVX2 and FMA.
unsafe fn plane(
    g: &ConvGeometry,
    plane: &[f32],
    w: &[f32],
    bias: &[f32; B],
    rows: Range<usize>,
    clamp: Option<(f32, f32)>,
    out: *mut f32,
) {
    // SAFETY: the CPU has the features (as above); `out` as the caller vouches.
    unsafe {
        if g.strides[1] == 1 {
            plane_3x3_s1(g, plane, w, bias, rows, clamp, out)
        } else {
            plane_3x3(g, plane, w, bias, rows, clamp, true, out)
        }
    }
}

/// The `n` inner pixels of a stride-1, dilation-1 row, two a register: kernel row
/// `kh0 + j` reads image row `rows[j]` (a value offset) from column `x0`; weights
/// `[KH][kw][8]` at `w`. Returns `n`, the pixels it did.
///
/// A row goes in as few passes as it can (up to eight pairs a pass, so a 14-pixel row is
/// one pass of seven): each pass reloads every weight, and a pass of few pairs waits on
/// its chains of multiply-adds. An odd last pixel rides in the low half of the last
/// pair, its loads and store masked to its eight lanes.
///
/// # Safety
/// The CPU must support AVX-512F and DQ; every tap of the pixels must lie inside the
/// plane at `x` and `out` hold `n * 8` values.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn inner_s1(
    x: *const f32,
    w: *const f32,
    bias: &[f32; B],
    rows: &[usize],
    kh0: usize,
    kw: usize,
    x0: usize,
    n: usize,
    clamp: Option<(f32, f32)>,
    out: *mut f32,
) -> usize {
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let bounds = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
    // SAFETY: eight values of bias; the taps and outputs as the caller vouches.
    unsafe {
        let bv = _mm512_broadcast_f32x8(_mm256_loadu_ps(bias.as_ptr()));
        let row = Row {
            x,
            w,
            rows,
            kh0,
            kw,
        };
        let mut i = 0;
        while i < n {
            let left = n - i;
            let pairs = left.div_ceil(2).min(8);
            // The last pair's lanes: both pixels, or the low one alone.
            let last: __mmask16 = if 2 * pairs > left { 0x00ff } else { 0xffff };
            let (at, o) = (x0 + i, out.add(i * B));
            match pairs {
                8 => row.pass::<8>(at, bv, bounds, last, o),
                7 => row.pass::<7>(at, bv, bounds, last, o),
                6 => row.pass::<6>(at, bv, bounds, last, o),
                5 => row.pass::<5>(at, bv, bounds, last, o),
                4 => row.pass::<4>(at, bv, bounds, last, o),
                3 => row.pass::<3>(at, bv, bounds, last, o),
                2 => row.pass::<2>(at, bv, bounds, last, o),
                _ => row.pass::<1>(at, bv, bounds, last, o),
            }
            i += left.min(2 * pairs);
        }
        n
    }
}

/// [`inner_s1`]'s operands for one output row.
struct Row<'a> {
    x: *const f32,
    w: *const f32,
    rows: &'a [usize],
    kh0: usize,
    kw: usize,
}

impl Row<'_> {
    /// `T` pairs of pixels from column `x0`, the last pair's lanes masked to `last`.
    ///
    /// # Safety
    /// As [`inner_s1`] for these pixels; the CPU must support AVX-512F.
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    #[inline]
    unsafe fn pass<const T: usize>(
        &self,
        x0: usize,
        bias: __m512,
        bounds: (__m512, __m512),
        last: __mmask16,
        out: *mut f32,
    ) {
        let mut acc = [bias; T];
        for (j, &r) in self.rows.iter().enumerate() {
            for k in 0..self.kw {
                // SAFETY: the weights, taps and outputs as the caller vouches; the masked
                // lanes are neither read nor written.
                unsafe {
                    let wt = self.w.add(((self.kh0 + j) * self.kw + k) * B);
                    let wv = _mm512_broadcast_f32x8(_mm256_loadu_ps(wt));
                    let at = self.x.add((r + x0 + k) * B);
                    for (p, a) in acc.iter_mut().enumerate() {
                        let xv = if p + 1 == T {
                            _mm512_maskz_loadu_ps(last, at.add(2 * p * B))
                        } else {
                            _mm512_loadu_ps(at.add(2 * p * B))
                        };
                        *a = _mm512_fmadd_ps(xv, wv, *a);
                    }
                }
            }
        }
        for (p, a) in acc.iter().enumerate() {
            let a = _mm512_min_ps(_mm512_max_ps(*a, bounds.0), bounds.1);
            // SAFETY: as above.
            unsafe {
                if p + 1 == T {
                    _mm512_mask_storeu_ps(out.add(2 * p * B), last, a);
                } else {
                    _mm512_storeu_ps(out.add(2 * p * B), a);
                }
            }
        }
    }
}

/// [`super::plane_3x3`] for stride 1 across, two pixels a register.
///
/// # Safety
/// The CPU must support AVX-512F and DQ (and AVX2 and FMA); `out` as
/// [`super::plane_3x3`].
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
pub(super) unsafe fn plane_3x3_s1(
    g: &ConvGeometry,
    plane: &[f32],
    w: &[f32],
    bias: &[f32; B],
    rows: Range<usize>,
    clamp: Option<(f32, f32)>,
    out: *mut f32,
) {
    let (ih, iw, ow) = (g.input[0], g.input[1], g.output[1]);
    let (sh, dh) = (g.strides[0], g.dilations[0]);
    assert!(unpadded_3x3(g) && g.strides[1] == 1);
    assert!(plane.len() >= ih * iw * B && w.len() >= 9 * B);
    assert!(rows.end <= g.output[0] && (rows.end == 0 || (rows.end - 1) * sh + 2 * dh < ih));
    assert!(ow == 0 || ow + 1 < iw);
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let bounds = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
    // SAFETY: the weights hold 9 x 8 values and the bias 8 (asserted); output rows below
    // g.output[0] and their windows lie inside the plane (asserted), `out` as the caller
    // vouches.
    unsafe {
        let wv: [__m512; 9] =
            std::array::from_fn(|t| _mm512_broadcast_f32x8(_mm256_loadu_ps(w.as_ptr().add(t * B))));
        let bv = _mm512_broadcast_f32x8(_mm256_loadu_ps(bias.as_ptr()));
        let x = plane.as_ptr();
        for oy in rows {
            let rows = [0, 1, 2].map(|kh| x.add((oy * sh + kh * dh) * iw * B));
            let o = out.add(oy * ow * B);
            // As few passes as can be (see `inner_s1`), an odd last pixel masked.
            let mut i = 0;
            while i < ow {
                let left = ow - i;
                let pairs = left.div_ceil(2).min(8);
                let last: __mmask16 = if 2 * pairs > left { 0x00ff } else { 0xffff };
                let (at, o) = (i * B, o.add(i * B));
                match pairs {
                    8 => tile::<8>(rows, at, &wv, bv, bounds, last, o),
                    7 => tile::<7>(rows, at, &wv, bv, bounds, last, o),
                    6 => tile::<6>(rows, at, &wv, bv, bounds, last, o),
                    5 => tile::<5>(rows, at, &wv, bv, bounds, last, o),
                    4 => tile::<4>(rows, at, &wv, bv, bounds, last, o),
                    3 => tile::<3>(rows, at, &wv, bv, bounds, last, o),
                    2 => tile::<2>(rows, at, &wv, bv, bounds, last, o),
                    _ => tile::<1>(rows, at, &wv, bv, bounds, last, o),
                }
                i += left.min(2 * pairs);
            }
        }
    }
}

/// `T` pairs of pixels from `rows[kh] + at`, stored from `out`, the last pair's lanes
/// masked to `last`.
///
/// # Safety
/// As [`super::tile_3x3`] for these pixels at stride 1; the CPU must support AVX-512F.
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[inline]
unsafe fn tile<const T: usize>(
    rows: [*const f32; 3],
    at: usize,
    w: &[__m512; 9],
    bias: __m512,
    bounds: (__m512, __m512),
    last: __mmask16,
    out: *mut f32,
) {
    let mut acc = [bias; T];
    for (kh, r) in rows.iter().enumerate() {
        for kw in 0..3 {
            for (p, a) in acc.iter_mut().enumerate() {
                // SAFETY: taps (kh, kw) of the pixels lie inside the plane (the caller's
                // contract); masked lanes are not read.
                let xv = unsafe {
                    let xp = r.add(at + (2 * p + kw) * B);
                    if p + 1 == T {
                        _mm512_maskz_loadu_ps(last, xp)
                    } else {
                        _mm512_loadu_ps(xp)
                    }
                };
                *a = _mm512_fmadd_ps(xv, w[kh * 3 + kw], *a);
            }
        }
    }
    for (p, a) in acc.iter().enumerate() {
        let a = _mm512_min_ps(_mm512_max_ps(*a, bounds.0), bounds.1);
        // SAFETY: the pixels lie inside `out` (the caller's contract); masked lanes are
        // not written.
        unsafe {
            if p + 1 == T {
                _mm512_mask_storeu_ps(out.add(2 * p * B), last, a);
            } else {
                _mm512_storeu_ps(out.add(2 * p * B), a);
            }
        }
    }
}

/// [`inner_3x3`] in tiles of eight pixels, compiled for AVX-512: its 32 registers hold the
/// nine weights and eight accumulators, where AVX2's sixteen hold four accumulators and
/// spilled a weight, reloaded for every pixel.
///
/// # Safety
/// As [`inner_3x3`]; the CPU must support AVX-512F and VL.
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
pub(super) unsafe fn inner_3x3_wide<const S: usize>(
    rows: [*const f32; 3],
    w: &[std::arch::x86_64::__m256; 9],
    bias: std::arch::x86_64::__m256,
    bounds: (std::arch::x86_64::__m256, std::arch::x86_64::__m256),
    n: usize,
    out: *mut f32,
) {
    // SAFETY: the caller's contract.
    unsafe { super::avx2::tiles_3x3::<S, 8>(rows, w, bias, bounds, n, out) }
}
