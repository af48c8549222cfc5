//! Depthwise 2-D convolution on blocked (NCHWc) tensors: every tap multiplies a pixel's eight
//! channels by the tap's eight weights, one register each. The input is read in place: the
//! taps of pixels whose window lies inside the image go without bounds tests, eight pixels at
//! a time; the few pixels whose window crosses the border go one by one with them.

use super::{activate_row, SendPtr, B};
use crate::fast::{input, output};
use crate::sgemm::Isa;
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::ops::nn::activation::Activation;
use ferrolite_core::plan::Kernel;
use ferrolite_core::{OpResult, Tensor};
use rayon::prelude::*;
use std::ops::Range;

/// Output pixels per register tile.
#[cfg(target_arch = "x86_64")]
const TILE: usize = 8;

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
}

/// One output row's geometry: the kernel rows inside the image and the output columns whose
/// windows lie inside the row.
struct RowPlan {
    kh: Range<usize>,
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
        Some(DepthwiseKernel {
            x: x.to_vec(),
            s,
            weights,
            bias: bias.map_or_else(|| vec![0.0; c], |b| b.to_vec()),
            act,
            isa,
        })
    }

    fn row_plan(&self, oy: usize) -> RowPlan {
        let g = &self.s.geometry;
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
    /// is `index % blocks`) from `plane`, the same plane of the input.
    fn rows(&self, plane: &[f32], y: SendPtr, index: usize, rows: Range<usize>) {
        let g = &self.s.geometry;
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
            let plan = self.row_plan(oy);
            // Border pixels one by one with bounds tests.
            for ox in (0..plan.inner.start).chain(plan.inner.end..ow) {
                let v = self.pixel(plane, w, &bias, oy, ox, &plan);
                out[ox * B..(ox + 1) * B].copy_from_slice(&v);
            }
            let inner = &mut out[plan.inner.start * B..plan.inner.end * B];
            match self.isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX2 and FMA (the Isa was detected); the inner pixels'
                // taps lie inside `plane` (RowPlan), whose size `inner_avx2` checks.
                Isa::Avx2Fma => unsafe { self.inner_avx2(plane, w, &bias, oy, &plan, inner) },
                _ => {
                    for (i, o) in inner.chunks_exact_mut(B).enumerate() {
                        let v = self.pixel(plane, w, &bias, oy, plan.inner.start + i, &plan);
                        o.copy_from_slice(&v);
                    }
                }
            }
            if self.act.is_some() {
                activate_row(self.isa, self.act, out);
            }
        }
    }

    /// One output pixel, taps tested against the image's edges.
    fn pixel(
        &self,
        plane: &[f32],
        w: &[f32],
        bias: &[f32; B],
        oy: usize,
        ox: usize,
        plan: &RowPlan,
    ) -> [f32; B] {
        let g = &self.s.geometry;
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

    /// The row's inner pixels (`out` holds them), [`TILE`] at a time then one by one.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn inner_avx2(
        &self,
        plane: &[f32],
        w: &[f32],
        bias: &[f32; B],
        oy: usize,
        plan: &RowPlan,
        out: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        let g = &self.s.geometry;
        let (ih, iw) = (g.input[0], g.input[1]);
        let (sw, dw, kw) = (g.strides[1], g.dilations[1], g.kernel[1]);
        assert!(plane.len() >= ih * iw * B && w.len() >= g.kernel[0] * kw * B);
        let n = out.len() / B;
        // The taps of inner pixel i: rows plan.kh, columns (first + i) * sw - pl + k * dw,
        // all inside the image.
        let x0 = plan.inner.start * sw - g.pad_begin[1].min(plan.inner.start * sw);
        let rows: Vec<usize> = plan
            .kh
            .clone()
            .map(|kh| (oy * g.strides[0] + kh * g.dilations[0] - g.pad_begin[0]) * iw)
            .collect();
        let (x, wp, o) = (plane.as_ptr(), w.as_ptr(), out.as_mut_ptr());
        // SAFETY: `bias` holds eight values.
        let bv = unsafe { _mm256_loadu_ps(bias.as_ptr()) };
        let mut i = 0;
        macro_rules! pixels {
            ($p:literal) => {{
                let mut acc = [bv; $p];
                for (r, kh) in rows.iter().zip(plan.kh.clone()) {
                    for k in 0..kw {
                        // SAFETY (loads): the tap lies inside the plane (RowPlan: rows
                        // inside the image, inner columns' windows inside the row) and the
                        // weight inside `w` (both asserted sizes).
                        let wv = unsafe { _mm256_loadu_ps(wp.add((kh * kw + k) * B)) };
                        let col = x0 + (i * sw) + k * dw;
                        for (p, a) in acc.iter_mut().enumerate() {
                            let xv = unsafe { _mm256_loadu_ps(x.add((r + col + p * sw) * B)) };
                            *a = _mm256_fmadd_ps(xv, wv, *a);
                        }
                    }
                }
                for (p, a) in acc.iter().enumerate() {
                    // SAFETY: pixel i + p < n lies inside `out`.
                    unsafe { _mm256_storeu_ps(o.add((i + p) * B), *a) };
                }
                i += $p;
            }};
        }
        while i + TILE <= n {
            pixels!(8);
        }
        while i < n {
            pixels!(1);
        }
    }
}

impl Kernel for DepthwiseKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let g = &self.s.geometry;
        let (oh, ow) = (g.output[0], g.output[1]);
        let blocks = self.s.out_channels / B;
        let y = output(outputs, 0, self.s.batch * blocks * oh * ow * B)?;
        let plane = g.input[0] * g.input[1] * B;
        let rows_per = (TASK_VALUES / (ow * B).max(1)).clamp(1, oh.max(1));
        let bands = oh.div_ceil(rows_per);
        let tasks = self.s.batch * blocks * bands;
        let yp = SendPtr(y.as_mut_ptr());
        let task = |t: usize| {
            let (item_block, band) = (t / bands, t % bands);
            let r0 = band * rows_per;
            // Batch items follow each other like further blocks, in the input and output.
            let xp = &x[item_block * plane..(item_block + 1) * plane];
            self.rows(xp, yp, item_block, r0..(r0 + rows_per).min(oh));
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
