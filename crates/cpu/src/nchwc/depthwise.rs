//! Depthwise 2-D convolution on blocked (NCHWc) tensors: every tap multiplies a pixel's eight
//! channels by the tap's eight weights, one register each. Pixels whose window lies inside
//! the image go without bounds tests, eight (then four, two) at a time; those whose window
//! crosses the border go one by one, each kernel row's taps clipped to the image. A large
//! plane is read in place (copying it with its padding would stream it through memory twice);
//! a small padded one is first copied with its padding into L1, so all its pixels are inner.

use super::{activate_row, SendPtr, B};
use crate::fast::{input, output};
use crate::sgemm::Isa;
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::ops::linalg::conv_geometry::ConvGeometry;
use ferrolite_core::ops::nn::activation::Activation;
use ferrolite_core::plan::Kernel;
use ferrolite_core::{OpResult, Tensor};
use rayon::prelude::*;
use std::ops::Range;

/// Output pixels per register tile.
#[cfg(target_arch = "x86_64")]
const TILE: usize = 8;

/// A padded input plane up to this size is copied with its padding (see `run`).
const SMALL_PLANE_BYTES: usize = 32 << 10;

thread_local! {
    static PADDED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One block's plane `src` (geometry `g`) with its zero padding, in `buf`.
fn padded_plane<'a>(g: &ConvGeometry, src: &[f32], buf: &'a mut Vec<f32>) -> &'a [f32] {
    let (ih, iw, pt, pl) = (g.input[0], g.input[1], g.pad_begin[0], g.pad_begin[1]);
    let pw = iw + pl + g.pad_end[1];
    let ph = ih + pt + g.pad_end[0];
    let dst = crate::scratch::grown(buf, ph * pw * B);
    super::pad_plane(src, dst, [ih, iw], [pt, pl], pw, B);
    dst
}

/// The geometry of a padded copy of the input plane, when the plane is small and padded.
fn padded_geometry(g: &ConvGeometry) -> Option<ConvGeometry> {
    let padded: Vec<usize> = (0..2)
        .map(|d| g.input[d] + g.pad_begin[d] + g.pad_end[d])
        .collect();
    let pads = g.pad_begin.iter().chain(&g.pad_end).any(|&p| p > 0);
    (pads && padded[0] * padded[1] * B * 4 <= SMALL_PLANE_BYTES).then(|| ConvGeometry {
        input: padded,
        pad_begin: vec![0, 0],
        pad_end: vec![0, 0],
        ..g.clone()
    })
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
    act: Option<Activation>,
    isa: Isa,
    /// The geometry of a padded copy of a small padded plane (see `run`), `None` otherwise.
    padded: Option<ConvGeometry>,
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
        act: Option<Activation>,
        x: &[usize],
        w: &[f32],
        bias: Option<&[f32]>,
    ) -> Option<Self> {
        let c = s.in_channels;
        let g = &s.geometry;
        if g.input.len() != 2 || s.group != c || s.out_channels != c || c % B != 0 {
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
        let padded = padded_geometry(g);
        Some(DepthwiseKernel {
            x: x.to_vec(),
            padded,
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

    /// Output rows `rows` of output plane `index` (batch item by channel block; the block
    /// is `index % blocks`) from `plane`, the same plane of the input, whose geometry is `g`
    /// (the convolution's, or that of a padded copy).
    fn rows(&self, g: &ConvGeometry, plane: &[f32], y: SendPtr, index: usize, rows: Range<usize>) {
        let (oh, ow) = (g.output[0], g.output[1]);
        let kk = g.kernel[0] * g.kernel[1];
        let cb = index % (self.s.out_channels / B);
        let w = &self.weights[cb * kk * B..(cb + 1) * kk * B];
        let bias: [f32; B] = self.bias[cb * B..(cb + 1) * B]
            .try_into()
            .expect("8 values");
        for oy in rows {
            // SAFETY: the callers split work by block and row, so this call owns the row.
            let out = unsafe {
                std::slice::from_raw_parts_mut(y.0.add((index * oh + oy) * ow * B), ow * B)
            };
            let plan = Self::row_plan(g, oy);
            match self.isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX2 and FMA (the Isa was detected); `row_avx2` checks
                // the sizes its taps rely on.
                Isa::Avx2Fma => unsafe { row_avx2(g, plane, w, &bias, oy, &plan, out) },
                _ => {
                    for (ox, o) in out.chunks_exact_mut(B).enumerate() {
                        o.copy_from_slice(&pixel(g, plane, w, &bias, oy, ox, &plan));
                    }
                }
            }
            if self.act.is_some() {
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

/// One output row (`out`): the inner pixels [`TILE`] (then four, two) at a time without
/// bounds tests, the rest one by one with each kernel row's taps clipped to the image.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_avx2(
    g: &ConvGeometry,
    plane: &[f32],
    w: &[f32],
    bias: &[f32; B],
    oy: usize,
    plan: &RowPlan,
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
                // SAFETY: inner pixel first + i + p < ow lies inside `out`.
                unsafe { _mm256_storeu_ps(o.add((first + i + p) * B), *a) };
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
    // SAFETY: the caller's contract.
    unsafe { _mm256_storeu_ps(out, acc) };
}

impl Kernel for DepthwiseKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let g = &self.s.geometry;
        let (oh, ow) = (g.output[0], g.output[1]);
        let blocks = self.s.out_channels / B;
        let y = output(outputs, 0, self.s.batch * blocks * oh * ow * B)?;
        let plane = g.input[0] * g.input[1] * B;
        // Whole small planes per task (each pads its plane once), bands of big ones.
        let rows_per = if self.padded.is_some() {
            oh.max(1)
        } else {
            (TASK_VALUES / (ow * B).max(1)).clamp(1, oh.max(1))
        };
        let bands = oh.div_ceil(rows_per);
        let tasks = self.s.batch * blocks * bands;
        let yp = SendPtr(y.as_mut_ptr());
        // A small plane is copied with its padding first (it stays in L1): every pixel is
        // then an inner one, in tiles, instead of the border ones going one by one.
        let task = |t: usize| {
            let (item_block, band) = (t / bands, t % bands);
            let r0 = band * rows_per;
            let rows = r0..(r0 + rows_per).min(oh);
            // Batch items follow each other like further blocks, in the input and output.
            let xp = &x[item_block * plane..(item_block + 1) * plane];
            match &self.padded {
                Some(pg) => crate::scratch::with_taken(&PADDED, |buf| {
                    let copy = padded_plane(g, xp, buf);
                    self.rows(pg, copy, yp, item_block, rows);
                }),
                None => self.rows(g, xp, yp, item_block, rows),
            }
        };
        if rayon::current_num_threads() > 1 && tasks > 1 {
            (0..tasks).into_par_iter().for_each(task);
        } else {
            (0..tasks).for_each(task);
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.nchwc.depthwise"
    }
}
