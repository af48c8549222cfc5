//! The blocked depthwise rows and 3x3 tiles under AVX2.

use super::*;

pub(crate) const KERNELS: Kernels = Kernels {
    plane_3x3: Some(plane),
    row: row::<false>,
    row_clamps: true,
};

/// [`plane_3x3`] with eight lanes.
///
/// # Safety
/// As [`Plane3x3Fn`]; reached only through the AVX2 table, whose CPUs have AVX2 and FMA.
unsafe fn plane(
    g: &ConvGeometry,
    plane: &[f32],
    w: &[f32],
    bias: &[f32; B],
    rows: Range<usize>,
    clamp: Option<(f32, f32)>,
    out: *mut f32,
) {
    // SAFETY: the CPU has AVX2 and FMA; `out` as the caller vouches.
    unsafe { plane_3x3(g, plane, w, bias, rows, clamp, false, out) }
}

/// [`row_avx2`], `WIDE` its AVX-512 variants (the AVX-512 table's entry).
#[allow(clippy::too_many_arguments)]
pub(super) fn row<const WIDE: bool>(
    g: &ConvGeometry,
    plane: &[f32],
    w: &[f32],
    bias: &[f32; B],
    oy: usize,
    plan: &RowPlan,
    clamp: Option<(f32, f32)>,
    out: &mut [f32],
) {
    // SAFETY: reached only through the AVX2 and AVX-512 tables, whose CPUs have AVX2 and FMA
    // (`WIDE` only through the AVX-512 ones, whose CPUs have AVX-512 too); `row_avx2` checks
    // the sizes its taps rely on.
    unsafe { row_avx2(g, plane, w, bias, oy, plan, clamp, WIDE, out) }
}

/// One output row (`out`): the inner pixels [`TILE`] (then four, two) at a time without
/// bounds tests, the rest one by one with each kernel row's taps clipped to the image.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn row_avx2(
    g: &ConvGeometry,
    plane: &[f32],
    w: &[f32],
    bias: &[f32; B],
    oy: usize,
    plan: &RowPlan,
    clamp: Option<(f32, f32)>,
    wide: bool,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (ih, iw, ow) = (g.input[0], g.input[1], g.output[1]);
    let (sw, dw, kw, pl) = (g.strides[1], g.dilations[1], g.kernel[1], g.pad_begin[1]);
    assert!(plane.len() >= ih * iw * B && w.len() >= g.kernel[0] * kw * B);
    assert!(out.len() == ow * B && plan.inner.end <= ow);
    let (x, wp, o) = (plane.as_ptr(), w.as_ptr(), out.as_mut_ptr());
    // SAFETY: `bias` holds eight values.
    let bv = unsafe { _mm256_loadu_ps(bias.as_ptr()) };
    let bounds = bounds(clamp);
    // Kernel row kh's first input value (a row of the image).
    let row = |kh: usize| (oy * g.strides[0] + kh * g.dilations[0] - g.pad_begin[0]) * iw;
    // One pixel: each kernel row's taps inside the image summed on their own (the rows'
    // chains overlap), then added up.
    let single = |ox: usize| {
        let x0 = ox * sw;
        let lo = if x0 >= pl { 0 } else { (pl - x0).div_ceil(dw) };
        let hi = if pl + iw > x0 {
            (pl + iw - x0).div_ceil(dw).min(kw)
        } else {
            0
        };
        let taps = lo..hi.max(lo);
        // SAFETY: taps (kh in plan.kh, k in lo..hi) lie inside the image and `w`; pixel
        // ox < ow inside `out` (asserted).
        unsafe {
            pixel_avx2(
                x,
                wp,
                bv,
                plan.kh.clone(),
                row,
                x0 + lo * dw - pl,
                taps,
                kw,
                dw,
                bounds,
                o.add(ox * B),
            )
        };
    };
    for ox in (0..plan.inner.start).chain(plan.inner.end..ow) {
        single(ox);
    }
    // The inner pixels' taps all lie inside the image.
    let first = plan.inner.start;
    let n = plan.inner.end - first;
    let x0 = first * sw - pl.min(first * sw);
    let mut i = 0;
    if g.kernel == [3, 3] && dw == 1 && plan.kh.len() == 3 && n > 0 {
        // The common 3x3 kernel: its weights in registers, taps unrolled.
        // SAFETY: the weights hold 9 x 8 values (asserted); every tap of the n inner
        // pixels lies inside the image and each pixel inside `out`.
        unsafe {
            let wv: [__m256; 9] = std::array::from_fn(|t| _mm256_loadu_ps(wp.add(t * B)));
            let rows = [0, 1, 2].map(|kh| x.add((row(kh) + x0) * B));
            pixels_3x3(rows, sw, &wv, bv, bounds, n, wide, o.add(first * B));
        }
        return;
    }
    if wide && sw == 1 && dw == 1 && plan.kh.len() <= 16 {
        // Two pixels a zmm where the CPU has AVX-512 (5x5 kernels, say).
        let mut offsets = [0usize; 16];
        for (o, kh) in offsets.iter_mut().zip(plan.kh.clone()) {
            *o = row(kh);
        }
        let rows = &offsets[..plan.kh.len()];
        // SAFETY: the CPU has AVX-512F and DQ (`wide` says the Isa is Avx512); the inner
        // pixels' taps lie inside the image (RowPlan) and each pixel inside `out`.
        i = unsafe {
            avx512::inner_s1(
                x,
                wp,
                bias,
                rows,
                plan.kh.start,
                kw,
                x0,
                n,
                clamp,
                o.add(first * B),
            )
        };
    }
    macro_rules! pixels {
        ($p:literal) => {{
            let mut acc = [bv; $p];
            for kh in plan.kh.clone() {
                let r = row(kh);
                for k in 0..kw {
                    // SAFETY (loads): inner windows lie inside the image (RowPlan), the
                    // weights inside `w`.
                    let wv = unsafe { _mm256_loadu_ps(wp.add((kh * kw + k) * B)) };
                    let col = x0 + i * sw + k * dw;
                    for (p, a) in acc.iter_mut().enumerate() {
                        let xv = unsafe { _mm256_loadu_ps(x.add((r + col + p * sw) * B)) };
                        *a = _mm256_fmadd_ps(xv, wv, *a);
                    }
                }
            }
            for (p, a) in acc.iter().enumerate() {
                let a = _mm256_min_ps(_mm256_max_ps(*a, bounds.0), bounds.1);
                // SAFETY: inner pixel first + i + p < ow lies inside `out`.
                unsafe { _mm256_storeu_ps(o.add((first + i + p) * B), a) };
            }
            i += $p;
        }};
    }
    while i + TILE <= n {
        pixels!(8);
    }
    if i + 4 <= n {
        pixels!(4);
    }
    if i + 2 <= n {
        pixels!(2);
    }
    while i < n {
        single(first + i);
        i += 1;
    }
}

/// One pixel's sum over kernel rows `kh` (row `r(kh)` of the image) and taps `ks`, the first
/// at column `col0`, `dw` apart, stored at `out`: each row's taps summed on their own, so the
/// rows' chains of multiply-adds overlap.
///
/// # Safety
/// The CPU must support AVX2 and FMA; every tap must lie inside the plane at `x` and its
/// weight inside `w` (`[KH][KW][8]`, `kw` wide); `out` must hold eight values.
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn pixel_avx2(
    x: *const f32,
    w: *const f32,
    bias: std::arch::x86_64::__m256,
    kh: Range<usize>,
    r: impl Fn(usize) -> usize,
    col0: usize,
    ks: Range<usize>,
    kw: usize,
    dw: usize,
    bounds: (std::arch::x86_64::__m256, std::arch::x86_64::__m256),
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    let mut acc = bias;
    for h in kh {
        let base = r(h) + col0;
        let mut a = _mm256_setzero_ps();
        for (i, k) in ks.clone().enumerate() {
            // SAFETY: the caller's contract.
            let (xv, wv) = unsafe {
                (
                    _mm256_loadu_ps(x.add((base + i * dw) * B)),
                    _mm256_loadu_ps(w.add((h * kw + k) * B)),
                )
            };
            a = _mm256_fmadd_ps(xv, wv, a);
        }
        acc = _mm256_add_ps(acc, a);
    }
    let acc = _mm256_min_ps(_mm256_max_ps(acc, bounds.0), bounds.1);
    // SAFETY: the caller's contract.
    unsafe { _mm256_storeu_ps(out, acc) };
}

/// Output rows `rows` of a plane ([`unpadded_3x3`] geometry `g`) from `out` (the plane's
/// first value): weights loaded once, each row's pixels in tiles, clamped to `clamp`.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `out` must hold the plane's output and no one else
/// write these rows meanwhile.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn plane_3x3(
    g: &ConvGeometry,
    plane: &[f32],
    w: &[f32],
    bias: &[f32; B],
    rows: Range<usize>,
    clamp: Option<(f32, f32)>,
    wide: bool,
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    let (ih, iw, ow) = (g.input[0], g.input[1], g.output[1]);
    let (sh, dh) = (g.strides[0], g.dilations[0]);
    assert!(unpadded_3x3(g) && plane.len() >= ih * iw * B && w.len() >= 9 * B);
    assert!(rows.end <= g.output[0] && (rows.end == 0 || (rows.end - 1) * sh + 2 * dh < ih));
    assert!(ow == 0 || (ow - 1) * g.strides[1] + 2 < iw);
    let bounds = bounds(clamp);
    // SAFETY: the weights hold 9 x 8 values and the bias 8 (asserted); output rows below
    // g.output[0] and their windows lie inside the plane (asserted), `out` as the caller
    // vouches.
    unsafe {
        let wv: [__m256; 9] = std::array::from_fn(|t| _mm256_loadu_ps(w.as_ptr().add(t * B)));
        let bv = _mm256_loadu_ps(bias.as_ptr());
        let x = plane.as_ptr();
        for oy in rows {
            let rows = [0, 1, 2].map(|kh| x.add((oy * sh + kh * dh) * iw * B));
            pixels_3x3(
                rows,
                g.strides[1],
                &wv,
                bv,
                bounds,
                ow,
                wide,
                out.add(oy * ow * B),
            );
        }
    }
}

/// `n` output pixels of a 3x3 kernel (dilation 1 across, stride `S`) whose windows lie
/// inside the image: pixel `p`'s kernel row `kh` starts at `rows[kh] + p * S * 8`. Weights
/// `w` (`[3][3]` taps of eight channels), clamped to `bounds` and stored from `out`.
///
/// # Safety
/// The CPU must support AVX2 and FMA; the taps must lie inside the plane and `out` hold
/// `n * 8` values.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn inner_3x3<const S: usize>(
    rows: [*const f32; 3],
    w: &[std::arch::x86_64::__m256; 9],
    bias: std::arch::x86_64::__m256,
    bounds: (std::arch::x86_64::__m256, std::arch::x86_64::__m256),
    n: usize,
    out: *mut f32,
) {
    // SAFETY: the caller's contract.
    unsafe { tiles_3x3::<S, 4>(rows, w, bias, bounds, n, out) }
}

/// The `n` pixels of [`inner_3x3`] in tiles of `T` (4 or 8), then of four, then the rest:
/// inlined into its callers, which choose the instruction set.
///
/// # Safety
/// As [`inner_3x3`]; the caller's instruction set must include AVX2 and FMA.
#[inline(always)]
pub(super) unsafe fn tiles_3x3<const S: usize, const T: usize>(
    rows: [*const f32; 3],
    w: &[std::arch::x86_64::__m256; 9],
    bias: std::arch::x86_64::__m256,
    bounds: (std::arch::x86_64::__m256, std::arch::x86_64::__m256),
    n: usize,
    out: *mut f32,
) {
    let mut i = 0;
    // SAFETY (all calls): pixels i.. of the n the caller vouches for; the caller has AVX2
    // and FMA.
    unsafe {
        while i + T <= n {
            tile_3x3::<S, T>(rows, i * S * B, w, bias, bounds, out.add(i * B));
            i += T;
        }
        if i + 4 <= n {
            tile_3x3::<S, 4>(rows, i * S * B, w, bias, bounds, out.add(i * B));
            i += 4;
        }
        match n - i {
            3 => tile_3x3::<S, 3>(rows, i * S * B, w, bias, bounds, out.add(i * B)),
            2 => tile_3x3::<S, 2>(rows, i * S * B, w, bias, bounds, out.add(i * B)),
            1 => tile_3x3::<S, 1>(rows, i * S * B, w, bias, bounds, out.add(i * B)),
            _ => {}
        }
    }
}

/// [`inner_3x3`] at stride `s`: strides 1 and 2 in tiles (of eight pixels when `wide`),
/// others one pixel at a time.
///
/// # Safety
/// As [`inner_3x3`] with stride `s`; the CPU must support AVX-512F and VL when `wide`.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn pixels_3x3(
    rows: [*const f32; 3],
    s: usize,
    w: &[std::arch::x86_64::__m256; 9],
    bias: std::arch::x86_64::__m256,
    bounds: (std::arch::x86_64::__m256, std::arch::x86_64::__m256),
    n: usize,
    wide: bool,
    out: *mut f32,
) {
    // SAFETY (all calls): the caller's contract.
    unsafe {
        match (s, wide) {
            (1, true) => super::avx512::inner_3x3_wide::<1>(rows, w, bias, bounds, n, out),
            (2, true) => super::avx512::inner_3x3_wide::<2>(rows, w, bias, bounds, n, out),
            (1, false) => inner_3x3::<1>(rows, w, bias, bounds, n, out),
            (2, false) => inner_3x3::<2>(rows, w, bias, bounds, n, out),
            _ => {
                for i in 0..n {
                    tile_3x3::<1, 1>(rows, i * s * B, w, bias, bounds, out.add(i * B));
                }
            }
        }
    }
}

/// The bounds a tile clamps to: Relu's or Clip's, or none (infinities).
#[target_feature(enable = "avx2,fma")]
pub(super) fn bounds(
    clamp: Option<(f32, f32)>,
) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
    use std::arch::x86_64::_mm256_set1_ps;
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    (_mm256_set1_ps(lo), _mm256_set1_ps(hi))
}

/// `T` pixels of [`inner_3x3`], their kernel rows from `rows[kh] + at`.
///
/// # Safety
/// As [`inner_3x3`] for these `T` pixels.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) unsafe fn tile_3x3<const S: usize, const T: usize>(
    rows: [*const f32; 3],
    at: usize,
    w: &[std::arch::x86_64::__m256; 9],
    bias: std::arch::x86_64::__m256,
    bounds: (std::arch::x86_64::__m256, std::arch::x86_64::__m256),
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    let mut acc = [bias; T];
    for (kh, r) in rows.iter().enumerate() {
        for kw in 0..3 {
            for (p, a) in acc.iter_mut().enumerate() {
                // SAFETY: tap (kh, kw) of pixel p lies inside the plane (the caller's
                // contract).
                let xv = unsafe { _mm256_loadu_ps(r.add(at + (p * S + kw) * B)) };
                *a = _mm256_fmadd_ps(xv, w[kh * 3 + kw], *a);
            }
        }
    }
    for (p, a) in acc.iter().enumerate() {
        let a = _mm256_min_ps(_mm256_max_ps(*a, bounds.0), bounds.1);
        // SAFETY: pixel p lies inside `out` (the caller's contract).
        unsafe { _mm256_storeu_ps(out.add(p * B), a) };
    }
}
