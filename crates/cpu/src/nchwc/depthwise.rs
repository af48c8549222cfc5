//! Depthwise 2-D convolution on blocked (NCHWc) tensors: every tap multiplies a pixel's eight
//! channels by the tap's eight weights, one register each. Pixels whose window lies inside
//! the image go without bounds tests, eight (then four, two) at a time; 3x3 kernels, the
//! common case, with their weights in registers and taps unrolled. A padded plane up to
//! about L2's size goes band by band through a padded copy of the rows each band reads, so
//! every pixel is such an inner one. A larger plane is read in place (a copy would stream it
//! through memory twice): pixels whose window crosses the border go one by one, each kernel
//! row's taps clipped to the image.

use super::{activate_row, clamp_of, SendPtr, B};
use crate::kernel_io::{input, output};
use crate::sgemm::Isa;
use crate::split::{self, Cost};
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::ops::linalg::conv_geometry::ConvGeometry;
use ferrolite_core::plan::Kernel;
use ferrolite_core::scratch::{bytes_for, Scratch, ScratchNeed};
use ferrolite_core::{OpResult, Tensor};
use std::ops::Range;

/// Output pixels per register tile.
#[cfg(target_arch = "x86_64")]
const TILE: usize = 8;

/// A band's padded copy of its input rows is kept to about this size (so it stays in L1),
/// and at least [`MIN_BAND_ROWS`] output rows (so rows read twice stay few).
const BAND_BYTES: usize = 32 << 10;
const MIN_BAND_ROWS: usize = 8;
/// Padded planes up to this size are copied band by band (56 x 56 pixels: 1.1x faster than
/// in place; 112 x 112: 1.1-1.15x slower).
const COPIED_PLANE_BYTES: usize = 160 << 10;

/// Bands of output rows computed from a zero-padded copy of the input rows they read, so
/// every pixel's window lies inside the copy: no pixel needs bounds tests.
#[derive(Debug)]
struct Bands {
    /// Output rows per band (the last band may have fewer).
    rows: usize,
    /// The geometry of one band's copy: input rows of a full band, padded width, no pads.
    geometry: ConvGeometry,
}

impl Bands {
    /// `None` when the convolution has no padding or a large plane: those are read in place
    /// (copying a plane larger than L2 cost more than the bounds tests it saves).
    fn new(g: &ConvGeometry) -> Option<Bands> {
        let pw = g.input[1] + g.pad_begin[1] + g.pad_end[1];
        let ph = g.input[0] + g.pad_begin[0] + g.pad_end[0];
        let pads = g.pad_begin.iter().chain(&g.pad_end).any(|&p| p > 0);
        if !pads || ph * pw * B * 4 > COPIED_PLANE_BYTES {
            return None;
        }
        let (sh, reach) = (g.strides[0], (g.kernel[0] - 1) * g.dilations[0] + 1);
        let input_rows = |r: usize| (r.max(1) - 1) * sh + reach;
        let fit = (1..=g.output[0])
            .take_while(|&r| input_rows(r) * pw * B * 4 <= BAND_BYTES)
            .last()
            .unwrap_or(1);
        let rows = fit.max(MIN_BAND_ROWS).min(g.output[0]).max(1);
        Some(Bands {
            rows,
            geometry: ConvGeometry {
                input: vec![input_rows(rows), pw],
                output: vec![rows, g.output[1]],
                pad_begin: vec![0, 0],
                pad_end: vec![0, 0],
                ..g.clone()
            },
        })
    }

    /// Floats of a band's padded copy.
    fn copy_len(&self) -> usize {
        self.geometry.input[0] * self.geometry.input[1] * B
    }

    /// Band `band`'s input rows of `src` (one plane, geometry `g`) with their padding, in
    /// `buf`: rows of the padded image from the band's first output row's window on, zeros
    /// past the image.
    fn copy<'a>(
        &self,
        g: &ConvGeometry,
        band: usize,
        src: &[f32],
        buf: &'a mut [f32],
    ) -> &'a [f32] {
        let (ih, iw, pt, pl) = (g.input[0], g.input[1], g.pad_begin[0], g.pad_begin[1]);
        let [rows, pw] = [self.geometry.input[0], self.geometry.input[1]];
        let first = band * self.rows * g.strides[0];
        let dst = &mut buf[..rows * pw * B];
        // Zero rows above the image, then image rows from `skip`, then zeros below.
        let (top, skip) = (pt.saturating_sub(first).min(rows), first.saturating_sub(pt));
        let n = ih.saturating_sub(skip).min(rows - top);
        let src = &src[(skip * iw * B).min(src.len())..][..n * iw * B];
        super::pad_plane(src, dst, [n, iw], [top, pl], pw, B);
        dst
    }
}

/// Work per task: about this many output values.
const TASK_VALUES: usize = 16 << 10;

#[derive(Debug)]
pub(crate) struct DepthwiseKernel {
    x: Vec<usize>,
    s: ConvShapes,
    /// `[C/8][KH][KW][8]`.
    weights: Vec<f32>,
    bias: Vec<f32>,
    act: Option<UnaryKind>,
    isa: Isa,
    /// How a padded input is copied band by band (see `run`); `None` when it is read in place.
    bands: Option<Bands>,
}

/// One output row's geometry: the kernel rows inside the image and the output columns whose
/// windows lie inside the row.
struct RowPlan {
    kh: Range<usize>,
    // The portable path tests every tap.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    inner: Range<usize>,
}

impl DepthwiseKernel {
    /// `None` unless a 2-D depthwise convolution (channels a multiple of 8) with known weights.
    pub(crate) fn new(
        isa: Isa,
        s: ConvShapes,
        act: Option<UnaryKind>,
        x: &[usize],
        w: &[f32],
        bias: Option<&[f32]>,
    ) -> Option<Self> {
        let c = s.in_channels;
        let g = &s.geometry;
        if g.input.len() != 2 || s.group != c || s.out_channels != c || !c.is_multiple_of(B) {
            return None;
        }
        let kk = g.kernel[0] * g.kernel[1];
        if w.len() != c * kk {
            return None;
        }
        let mut weights = vec![0f32; w.len()];
        for (i, &v) in w.iter().enumerate() {
            let (ch, t) = (i / kk, i % kk);
            weights[((ch / B) * kk + t) * B + ch % B] = v;
        }
        let bands = Bands::new(g);
        Some(DepthwiseKernel {
            x: x.to_vec(),
            bands,
            s,
            weights,
            bias: bias.map_or_else(|| vec![0.0; c], |b| b.to_vec()),
            act,
            isa,
        })
    }

    fn row_plan(g: &ConvGeometry, oy: usize) -> RowPlan {
        let (ih, iw) = (g.input[0], g.input[1]);
        let inside = |k: usize| {
            let iy = oy * g.strides[0] + k * g.dilations[0];
            iy >= g.pad_begin[0] && iy - g.pad_begin[0] < ih
        };
        let lo = (0..g.kernel[0]).find(|&k| inside(k)).unwrap_or(g.kernel[0]);
        let hi = (lo..g.kernel[0])
            .find(|&k| !inside(k))
            .unwrap_or(g.kernel[0]);
        let (sw, pl) = (g.strides[1], g.pad_begin[1]);
        let reach = (g.kernel[1] - 1) * g.dilations[1];
        let first = pl.div_ceil(sw).min(g.output[1]);
        let end = if iw + pl > reach {
            (iw + pl - reach).div_ceil(sw).clamp(first, g.output[1])
        } else {
            first
        };
        RowPlan {
            kh: lo..hi,
            inner: first..end,
        }
    }

    /// Output rows `rows` of channel block `cb` from `plane`, the same plane of the input,
    /// whose geometry is `g` (the convolution's, or a band's padded copy); row `oy` of the
    /// output goes to `out + oy * ow * 8`.
    fn rows(&self, g: &ConvGeometry, plane: &[f32], out: SendPtr, cb: usize, rows: Range<usize>) {
        let ow = g.output[1];
        let kk = g.kernel[0] * g.kernel[1];
        let w = &self.weights[cb * kk * B..(cb + 1) * kk * B];
        let bias: [f32; B] = self.bias[cb * B..(cb + 1) * B]
            .try_into()
            .expect("8 values");
        let clamp = clamp_of(self.act);
        #[cfg(target_arch = "x86_64")]
        if self.isa.has_avx2() && unpadded_3x3(g) && (clamp.is_some() || self.act.is_none()) {
            if self.isa == Isa::Avx512 && g.strides[1] == 1 {
                // SAFETY: the CPU has AVX-512F and DQ (the Isa was detected); the function
                // checks the sizes its taps rely on; this call owns the rows (as below).
                unsafe { avx512::plane_3x3_s1(g, plane, w, &bias, rows, clamp, out.0) };
                return;
            }
            // SAFETY: the CPU has AVX2 and FMA (the Isa was detected); `plane_3x3` checks
            // the sizes its taps rely on; this call owns the rows (as below).
            unsafe {
                plane_3x3(
                    g,
                    plane,
                    w,
                    &bias,
                    rows,
                    clamp,
                    self.isa == Isa::Avx512,
                    out.0,
                )
            };
            return;
        }
        for oy in rows {
            // SAFETY: the callers split work by block and row, so this call owns the row.
            let out = unsafe { std::slice::from_raw_parts_mut(out.0.add(oy * ow * B), ow * B) };
            let plan = Self::row_plan(g, oy);
            match self.isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX2 and FMA (the Isa was detected); `row_avx2` checks
                // the sizes its taps rely on.
                Isa::Avx2Fma | Isa::Avx512 => unsafe {
                    row_avx2(
                        g,
                        plane,
                        w,
                        &bias,
                        oy,
                        &plan,
                        clamp,
                        self.isa == Isa::Avx512,
                        out,
                    )
                },
                #[cfg(target_arch = "aarch64")]
                Isa::Neon | Isa::NeonDot => row_neon(g, plane, w, &bias, oy, &plan, out),
                _ => {
                    for (ox, o) in out.chunks_exact_mut(B).enumerate() {
                        o.copy_from_slice(&pixel(g, plane, w, &bias, oy, ox, &plan));
                    }
                }
            }
            // The AVX2 rows clamp Relu and Clip in registers.
            if self.act.is_some() && (clamp.is_none() || !self.isa.has_avx2()) {
                activate_row(self.isa, self.act, out);
            }
        }
    }
}

/// One output pixel, taps tested against the image's edges.
fn pixel(
    g: &ConvGeometry,
    plane: &[f32],
    w: &[f32],
    bias: &[f32; B],
    oy: usize,
    ox: usize,
    plan: &RowPlan,
) -> [f32; B] {
    let iw = g.input[1];
    let mut acc = *bias;
    for kh in plan.kh.clone() {
        let iy = oy * g.strides[0] + kh * g.dilations[0] - g.pad_begin[0];
        for kw in 0..g.kernel[1] {
            let ix = ox * g.strides[1] + kw * g.dilations[1];
            if ix < g.pad_begin[1] || ix - g.pad_begin[1] >= iw {
                continue;
            }
            let at = (iy * iw + ix - g.pad_begin[1]) * B;
            let (x, wt) = (&plane[at..at + B], &w[(kh * g.kernel[1] + kw) * B..][..B]);
            for j in 0..B {
                acc[j] += x[j] * wt[j];
            }
        }
    }
    acc
}

/// One output row (`out`) under NEON: the inner pixels eight (then four, two, one) at a time
/// without bounds tests, a block's eight channels in two vectors, each tap's weights loaded
/// once for the pixels; the border pixels through [`pixel`]. The activation runs after.
#[cfg(target_arch = "aarch64")]
fn row_neon(
    g: &ConvGeometry,
    plane: &[f32],
    w: &[f32],
    bias: &[f32; B],
    oy: usize,
    plan: &RowPlan,
    out: &mut [f32],
) {
    let (ih, iw, ow) = (g.input[0], g.input[1], g.output[1]);
    let (sw, dw, kw, pl) = (g.strides[1], g.dilations[1], g.kernel[1], g.pad_begin[1]);
    assert!(plane.len() >= ih * iw * B && w.len() >= g.kernel[0] * kw * B);
    assert!(out.len() == ow * B && plan.inner.end <= ow);
    for ox in (0..plan.inner.start).chain(plan.inner.end..ow) {
        out[ox * B..(ox + 1) * B].copy_from_slice(&pixel(g, plane, w, bias, oy, ox, plan));
    }
    // Kernel row kh's first input value (a row of the image).
    let row = |kh: usize| (oy * g.strides[0] + kh * g.dilations[0] - g.pad_begin[0]) * iw;
    let first = plan.inner.start;
    let n = plan.inner.end - first;
    let x0 = first * sw - pl.min(first * sw);
    let (x, wp, o) = (plane.as_ptr(), w.as_ptr(), out.as_mut_ptr());
    let mut i = 0;
    macro_rules! pixels {
        ($p:literal) => {{
            // SAFETY: the inner pixels' taps (kernel rows in plan.kh, every column) lie inside
            // the image (RowPlan), their weights inside `w` (asserted), and pixels
            // first + i.. first + i + $p inside `out` (i + $p <= n, inner.end <= ow).
            unsafe {
                let out = o.add((first + i) * B);
                inner_neon::<$p>(
                    x,
                    wp,
                    bias,
                    plan.kh.clone(),
                    row,
                    kw,
                    x0 + i * sw,
                    sw,
                    dw,
                    out,
                )
            };
            i += $p;
        }};
    }
    while i + 8 <= n {
        pixels!(8);
    }
    if i + 4 <= n {
        pixels!(4);
    }
    if i + 2 <= n {
        pixels!(2);
    }
    while i < n {
        pixels!(1);
    }
}

/// `P` inner pixels from column `col` (`sw` apart), stored at `out`: bias plus, over kernel
/// rows `kh` (row `r(kh)` of the image) and `kw` taps `dw` apart, input times weight
/// (`[KH][KW][8]`).
///
/// # Safety
/// Every tap must lie inside the plane at `x` and its weight inside `w`; `out` must hold
/// `P * 8` floats.
#[cfg(target_arch = "aarch64")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn inner_neon<const P: usize>(
    x: *const f32,
    w: *const f32,
    bias: &[f32; B],
    kh: Range<usize>,
    r: impl Fn(usize) -> usize,
    kw: usize,
    col: usize,
    sw: usize,
    dw: usize,
    out: *mut f32,
) {
    use std::arch::aarch64::*;
    // SAFETY: the caller's contract; `bias` holds eight values.
    unsafe {
        let b = [vld1q_f32(bias.as_ptr()), vld1q_f32(bias.as_ptr().add(4))];
        let mut acc = [b; P];
        for h in kh {
            let base = r(h) + col;
            for k in 0..kw {
                let wk = w.add((h * kw + k) * B);
                let (w0, w1) = (vld1q_f32(wk), vld1q_f32(wk.add(4)));
                let xk = x.add((base + k * dw) * B);
                for (p, a) in acc.iter_mut().enumerate() {
                    let xp = xk.add(p * sw * B);
                    a[0] = vfmaq_f32(a[0], vld1q_f32(xp), w0);
                    a[1] = vfmaq_f32(a[1], vld1q_f32(xp.add(4)), w1);
                }
            }
        }
        for (p, a) in acc.iter().enumerate() {
            vst1q_f32(out.add(p * B), a[0]);
            vst1q_f32(out.add(p * B + 4), a[1]);
        }
    }
}

/// One output row (`out`): the inner pixels [`TILE`] (then four, two) at a time without
/// bounds tests, the rest one by one with each kernel row's taps clipped to the image.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn row_avx2(
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn pixel_avx2(
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

/// Whether `g` is a 3x3 kernel without padding, dilation 1 across and stride 1 or 2 across:
/// every window of every row lies inside the image ([`plane_3x3`]).
#[cfg(target_arch = "x86_64")]
fn unpadded_3x3(g: &ConvGeometry) -> bool {
    g.kernel == [3, 3]
        && g.pad_begin.iter().chain(&g.pad_end).all(|&p| p == 0)
        && g.dilations[1] == 1
        && (g.strides[1] == 1 || g.strides[1] == 2)
}

/// Output rows `rows` of a plane ([`unpadded_3x3`] geometry `g`) from `out` (the plane's
/// first value): weights loaded once, each row's pixels in tiles, clamped to `clamp`.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `out` must hold the plane's output and no one else
/// write these rows meanwhile.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn plane_3x3(
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn inner_3x3<const S: usize>(
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
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn tiles_3x3<const S: usize, const T: usize>(
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn pixels_3x3(
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
            (1, true) => inner_3x3_wide::<1>(rows, w, bias, bounds, n, out),
            (2, true) => inner_3x3_wide::<2>(rows, w, bias, bounds, n, out),
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

/// [`inner_3x3`] in tiles of eight pixels, compiled for AVX-512: its 32 registers hold the
/// nine weights and eight accumulators, where AVX2's sixteen hold four accumulators and
/// spilled a weight, reloaded for every pixel.
///
/// # Safety
/// As [`inner_3x3`]; the CPU must support AVX-512F and VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
unsafe fn inner_3x3_wide<const S: usize>(
    rows: [*const f32; 3],
    w: &[std::arch::x86_64::__m256; 9],
    bias: std::arch::x86_64::__m256,
    bounds: (std::arch::x86_64::__m256, std::arch::x86_64::__m256),
    n: usize,
    out: *mut f32,
) {
    // SAFETY: the caller's contract.
    unsafe { tiles_3x3::<S, 8>(rows, w, bias, bounds, n, out) }
}

/// The bounds a tile clamps to: Relu's or Clip's, or none (infinities).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn bounds(clamp: Option<(f32, f32)>) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m256) {
    use std::arch::x86_64::_mm256_set1_ps;
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    (_mm256_set1_ps(lo), _mm256_set1_ps(hi))
}

/// `T` pixels of [`inner_3x3`], their kernel rows from `rows[kh] + at`.
///
/// # Safety
/// As [`inner_3x3`] for these `T` pixels.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile_3x3<const S: usize, const T: usize>(
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

/// The stride-1 kernels on 16 lanes: one zmm holds two neighbouring pixels' eight
/// channels, which lie side by side in the blocked layout, so a tap is one load and one FMA
/// for two pixels.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{unpadded_3x3, B};

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
    use ferrolite_core::ops::linalg::conv_geometry::ConvGeometry;
    use std::arch::x86_64::*;
    use std::ops::Range;

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
            let wv: [__m512; 9] = std::array::from_fn(|t| {
                _mm512_broadcast_f32x8(_mm256_loadu_ps(w.as_ptr().add(t * B)))
            });
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
}

impl Kernel for DepthwiseKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let g = &self.s.geometry;
        let (oh, ow) = (g.output[0], g.output[1]);
        let blocks = self.s.out_channels / B;
        let y = output(outputs, 0, self.s.batch * blocks * oh * ow * B)?;
        let plane = g.input[0] * g.input[1] * B;
        // A padded input goes band by band through a padded copy of the rows each band
        // reads (in L1): every pixel's window then lies inside it, and every pixel runs in
        // tiles. An unpadded one is read in place, in bands of about TASK_VALUES outputs.
        let rows_per = match &self.bands {
            Some(b) => b.rows,
            None => (TASK_VALUES / (ow * B).max(1)).clamp(1, oh.max(1)),
        };
        let bands = oh.div_ceil(rows_per);
        let tasks = self.s.batch * blocks * bands;
        let y_len = y.len();
        let yp = SendPtr(y.as_mut_ptr());
        let task = |t: usize| -> OpResult<()> {
            let (item_block, band) = (t / bands, t % bands);
            let r0 = band * rows_per;
            let rows = r0..(r0 + rows_per).min(oh);
            // Batch items follow each other like further blocks, in the input and output.
            let xp = &x[item_block * plane..(item_block + 1) * plane];
            let cb = item_block % blocks;
            // (The whole SendPtr is captured: it is Sync, its pointer field is not.)
            let y = yp;
            // SAFETY (pointer offsets): rows of this plane of the output, which holds
            // batch * blocks planes of oh * ow pixels.
            let out = |r: usize| SendPtr(unsafe { y.0.add((item_block * oh + r) * ow * B) });
            match &self.bands {
                // The copy in the task's worker's region of scratch.
                Some(b) => scratch.with_thread(|own| {
                    let copy = b.copy(g, band, xp, own.take(b.copy_len())?);
                    self.rows(&b.geometry, copy, out(r0), cb, 0..rows.len());
                    Ok(())
                }),
                None => {
                    self.rows(g, xp, out(0), cb, rows);
                    Ok(())
                }
            }
        };
        let cost = Cost {
            flops: 2 * y_len * g.kernel[0] * g.kernel[1],
            bytes: (x.len() + y_len) * size_of::<f32>(),
        };
        split::try_for_each_task(tasks, split::worth(cost) > 1, task)
    }

    fn name(&self) -> &str {
        "cpu.nchwc.depthwise"
    }

    fn scratch(&self, _threads: usize) -> ScratchNeed {
        let copy = self
            .bands
            .as_ref()
            .map_or(0, |b| bytes_for::<f32>(b.copy_len()));
        ScratchNeed::for_each_thread(copy)
    }

    fn prepacked_bytes(&self) -> usize {
        size_of_val(self.weights.as_slice()) + size_of_val(self.bias.as_slice())
    }
}
