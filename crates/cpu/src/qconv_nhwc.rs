//! QLinearConv on channels-last tensors (`[N, H, W, C]`, made by the `layout-nhwc-int8` pass).
//!
//! Channels last turn the convolution around: output pixels are the GEMM's rows and output
//! channels its columns. A row is the pixel's patch, the `C` bytes of each tap's input pixel
//! one after another (the zero point where the tap falls outside the image), so it is gathered
//! with one copy per tap straight into the packed row layout, a few rows at a time, while the
//! weights are packed once as column panels (`k` ordered tap-major, channels inner). No
//! im2col matrix is written and read back, and the output comes out channels-last as the next
//! convolution reads it.
//!
//! Depthwise convolutions accumulate in i32 per pixel over whole vectors of channels, which
//! channels last keep contiguous.

use crate::backend::{constant, shape, Registry};
use crate::qconv::{flip, flipped_zero, multipliers, range};
use crate::qgemm::{requantize, Axis, Out, Packed, Product, QPath, Side, Source};
use crate::qparams::{qparams, QParams};
use crate::Isa;
use ferrolite_core::op::required;
use ferrolite_core::ops::layout::FROM_NHWC;
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::ops::quant::QLinearConv;
use ferrolite_core::plan::Kernel;
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::{op_ensure, DType, OpError, OpResult, Tensor};
use rayon::prelude::*;

#[derive(Debug)]
enum Strategy {
    /// The weights as GEMM column panels of depth `taps * C`, and their zero points as the
    /// GEMM sees them (s8), per output channel.
    Gemm {
        weights: Packed,
        zero: Vec<i32>,
        indirect: Option<Indirect>,
    },
    /// `w - w_zero` as `[taps][C]`, as i32 and as f32 (the AVX-512 kernel's), and the bias
    /// less the input zero point's share (`bias - x_zero * sum of w`, for kernels that sum
    /// raw inputs over every tap).
    Depthwise {
        weights: Vec<i32>,
        weights_f32: Vec<f32>,
        bias_less_zero: Vec<i32>,
    },
}

/// The AVX-512 VNNI path's per-column constants, padded to whole panels: the bias with the
/// activation zero point's correction (`bias - x_zero * column sum`), and the scale. Taken
/// when the weights have no zero points; an input whose channels are not a multiple of 4 (a
/// network's RGB input) is copied with its pixels padded to whole quads first.
#[derive(Debug)]
struct Indirect {
    add: Vec<i32>,
    scale: Vec<f32>,
    /// The input's channels padded to a multiple of 4.
    channels: usize,
}

#[derive(Debug)]
pub struct QConvNhwcKernel {
    path: QPath,
    isa: Isa,
    s: ConvShapes,
    /// Channels-last shapes.
    x_shape: Vec<usize>,
    y_shape: Vec<usize>,
    x: QParams,
    y: QParams,
    mult: Vec<f32>,
    bias: Vec<i32>,
    strategy: Strategy,
}

thread_local! {
    /// The packed patch rows of [`QConvNhwcKernel::run_gemm`], reused by every layer.
    static ROWS_SCRATCH: std::cell::RefCell<(Vec<u8>, Vec<i16>)> = Default::default();
}

/// Output pixels per GEMM task: whole row blocks, at least this many multiply-adds.
const TASK_WORK: usize = 1 << 18;

/// Why a QLinearConv cannot run channels-last (`None`: it can): the `layout-nhwc-int8` pass
/// converts only the nodes this kernel takes.
pub fn unsupported(c: &QLinearConv, x_shape: &[usize], w_shape: &[usize]) -> Option<String> {
    let s = match ConvShapes::new(&c.params, c.group, x_shape, w_shape) {
        Ok(s) => s,
        Err(e) => return Some(e.to_string()),
    };
    if s.geometry.input.len() != 2 {
        return Some("needs a 2-D convolution".into());
    }
    let depthwise = s.group == s.in_channels && s.group == s.out_channels;
    if s.group != 1 && !depthwise {
        return Some(format!(
            "grouped convolution ({} groups) is not depthwise",
            s.group
        ));
    }
    None
}

impl QConvNhwcKernel {
    fn new(
        isa: Isa,
        c: &QLinearConv,
        r: &ferrolite_core::plan::KernelRequest,
    ) -> Result<Self, String> {
        let info = |i: usize| {
            r.inputs
                .get(i)
                .and_then(|v| v.as_ref())
                .ok_or_else(|| format!("needs input {i}"))
        };
        let (xi, wi) = (info(0)?, info(3)?);
        if xi.shape.len() != 4 {
            return Err("needs a 4-D channels-last input".into());
        }
        let x_plain: Vec<usize> = FROM_NHWC.iter().map(|&a| xi.shape[a]).collect();
        if let Some(why) = unsupported(c, &x_plain, wi.shape) {
            return Err(why);
        }
        let s =
            ConvShapes::new(&c.params, c.group, &x_plain, wi.shape).map_err(|e| e.to_string())?;
        let m = s.out_channels;
        let x = qparams(r, xi.dtype, 1, 2, 1)?;
        let w = qparams(r, wi.dtype, 4, 5, m)?;
        let y_dtype = r
            .inputs
            .get(7)
            .and_then(|v| v.as_ref())
            .map_or(xi.dtype, |v| v.dtype);
        let y = qparams(r, y_dtype, 6, 7, 1)?;
        let w_val = constant(r, 3).ok_or("needs constant weights")?;
        let bias = match shape(r, 8) {
            None => vec![0; m],
            Some(_) => {
                let b = constant(r, 8).ok_or("needs a constant bias")?;
                if b.numel() != m || b.dtype() != DType::I32 {
                    return Err(format!("needs an i32 bias of {m} values"));
                }
                b.as_slice::<i32>().map_err(|e| e.to_string())?.to_vec()
            }
        };
        let path = QPath::for_isa(isa);
        let mult = multipliers(&x, &w, &y, m);
        let w_bytes = w_val.bytes();
        let taps: usize = s.geometry.kernel.iter().product();
        let w_zero = |ch: usize| w.zero[if w.zero.len() == 1 { 0 } else { ch }];
        let strategy = if s.group == 1 {
            let zero: Vec<i32> = (0..m)
                .map(|ch| flipped_zero(w_zero(ch), w.signed, true))
                .collect();
            #[cfg(target_arch = "x86_64")]
            let vnni = path == QPath::Avx512Vnni;
            #[cfg(not(target_arch = "x86_64"))]
            let vnni = false;
            let indirect = vnni && zero.iter().all(|&z| z == 0);
            // The indirect path reads whole quads per tap: channels padded to a multiple of 4
            // (weights of 0 there, stored so that the flip makes them 0).
            let cin = s.in_channels;
            let cin_p = if indirect {
                cin.next_multiple_of(4)
            } else {
                cin
            };
            let w_flip = flip(w.signed, true);
            // Column `o`, depth `t * C + c`: weight (o, c, tap t).
            let k = taps * cin_p;
            let mut cols = vec![w_flip; m * k];
            for o in 0..m {
                for ch in 0..cin {
                    for t in 0..taps {
                        cols[o * k + t * cin_p + ch] = w_bytes[(o * cin + ch) * taps + t];
                    }
                }
            }
            let packed = Packed::new(
                path,
                Side::Panels,
                k,
                m,
                Source {
                    data: &cols,
                    rs: k,
                    cs: 1,
                    flip: w_flip,
                    signed: true,
                },
            )
            .map_err(|e| e.to_string())?;
            let indirect = indirect.then(|| {
                let x_zero = flipped_zero(x.zero[0], x.signed, false);
                let width = m.next_multiple_of(path.tile().1);
                let mut add: Vec<i32> = (0..m).map(|o| bias[o] - x_zero * packed.sums[o]).collect();
                let mut scale = mult.clone();
                add.resize(width, 0);
                scale.resize(width, 0.0);
                Indirect {
                    add,
                    scale,
                    channels: cin_p,
                }
            });
            Strategy::Gemm {
                weights: packed,
                zero,
                indirect,
            }
        } else {
            let mut wt = vec![0i32; taps * m];
            for ch in 0..m {
                for t in 0..taps {
                    let b = w_bytes[ch * taps + t];
                    let v = if w.signed { b as i8 as i32 } else { b as i32 };
                    wt[t * m + ch] = v - w_zero(ch);
                }
            }
            let bias_less_zero = (0..m)
                .map(|ch| bias[ch] - x.zero[0] * wt[ch..].iter().step_by(m).sum::<i32>())
                .collect();
            Strategy::Depthwise {
                weights_f32: wt.iter().map(|&v| v as f32).collect(),
                weights: wt,
                bias_less_zero,
            }
        };
        Ok(QConvNhwcKernel {
            path,
            isa,
            x_shape: xi.shape.to_vec(),
            y_shape: [0, 2, 3, 1].iter().map(|&a| s.output_shape()[a]).collect(),
            s,
            x,
            y,
            mult,
            bias,
            strategy,
        })
    }

    /// Writes output pixel `p`'s patch (image, row, column from `p`) into `buf`: for each tap,
    /// the input pixel's `C` bytes, or the zero point outside the image.
    fn patch(&self, x: &[u8], p: usize, buf: &mut [u8]) {
        let g = &self.s.geometry;
        let (ih, iw) = (g.input[0], g.input[1]);
        let (oh, ow) = (g.output[0], g.output[1]);
        let c = self.s.in_channels;
        let (b, oy, ox) = (p / (oh * ow), p / ow % oh, p % ow);
        let pad = self.x.zero[0] as u8;
        let image = &x[b * ih * iw * c..(b + 1) * ih * iw * c];
        let mut taps = buf.chunks_exact_mut(c);
        for ki in 0..g.kernel[0] {
            let iy = (oy * g.strides[0] + ki * g.dilations[0]).checked_sub(g.pad_begin[0]);
            for kj in 0..g.kernel[1] {
                let ix = (ox * g.strides[1] + kj * g.dilations[1]).checked_sub(g.pad_begin[1]);
                let dst = taps.next().expect("one segment per tap");
                match (iy, ix) {
                    (Some(iy), Some(ix)) if iy < ih && ix < iw => {
                        dst.copy_from_slice(&image[(iy * iw + ix) * c..][..c])
                    }
                    _ => dst.fill(pad),
                }
            }
        }
    }

    fn run_gemm(&self, weights: &Packed, w_zero: &[i32], x: &[u8], y: &mut [u8]) -> OpResult<()> {
        let m = self.s.out_channels;
        let k = weights.k();
        let pixels = y.len() / m.max(1);
        let mr = self.path.tile().0;
        // Whole row blocks per task, enough work each to pay for the task.
        let per = (TASK_WORK / (m * k).max(1)).next_multiple_of(mr).max(mr);
        let threads = rayon::current_num_threads().max(1);
        let per = per.min(pixels.div_ceil(threads * 4).next_multiple_of(mr));
        let x_flip = flip(self.x.signed, false);
        let x_zero = flipped_zero(self.x.zero[0], self.x.signed, false);
        let (lo, hi) = range(self.y.signed);
        // Row sums are needed only against weights with zero points.
        let sums = w_zero.iter().any(|&z| z != 0);
        let task = |(t, out): (usize, &mut [u8])| -> OpResult<()> {
            let first = t * per;
            let rows = out.len() / m;
            let storage = crate::scratch::with_taken(&ROWS_SCRATCH, std::mem::take);
            let packed =
                Packed::gathered_rows(self.path, k, rows, x_flip, sums, storage, |i, buf| {
                    self.patch(x, first + i, buf)
                })?;
            let result = Product {
                rows: &packed,
                panels: weights,
                rows_zero: Axis::All(x_zero),
                panels_zero: Axis::Cols(w_zero),
                bias: Some(Axis::Cols(&self.bias)),
                ldc: m,
            }
            .run(
                &mut Out::Quantized {
                    data: out,
                    signed: self.y.signed,
                    scale: Axis::Cols(&self.mult),
                    zero_point: self.y.zero[0],
                    lo,
                    hi,
                },
                false,
            );
            let storage = packed.into_storage();
            crate::scratch::with_taken(&ROWS_SCRATCH, |s| *s = storage);
            result
        };
        let chunk = (per * m).max(1);
        if pixels <= per {
            y.chunks_mut(chunk).enumerate().try_for_each(task)
        } else {
            y.par_chunks_mut(chunk).enumerate().try_for_each(task)
        }
    }

    /// Pointers to the taps of output pixels `first..first + count` (`taps` per pixel, pixel
    /// after pixel) into `ptrs`: each tap's input pixel, or `zero` (the zero point, a real 0)
    /// outside the image and for pixels past the end.
    #[cfg(target_arch = "x86_64")]
    fn tap_pointers(
        &self,
        (x, c): (&[u8], usize),
        zero: &[u8],
        first: usize,
        count: usize,
        ptrs: &mut [*const u8],
    ) {
        let g = &self.s.geometry;
        let (ih, iw) = (g.input[0], g.input[1]);
        let (oh, ow) = (g.output[0], g.output[1]);
        let pixels = self.s.batch * oh * ow;
        if g.kernel == [1, 1] && g.strides == [1, 1] && g.pad_begin == [0, 0] {
            // A pointwise convolution's patch is its own pixel.
            for (p, ptr) in (first..first + count).zip(ptrs.iter_mut()) {
                *ptr = if p < pixels {
                    x[p * c..][..c].as_ptr()
                } else {
                    zero.as_ptr()
                };
            }
            return;
        }
        let mut at = ptrs.iter_mut();
        for p in first..first + count {
            let (b, oy, ox) = (p / (oh * ow), p / ow % oh, p % ow);
            for ki in 0..g.kernel[0] {
                let iy = (oy * g.strides[0] + ki * g.dilations[0]).checked_sub(g.pad_begin[0]);
                for kj in 0..g.kernel[1] {
                    let ix = (ox * g.strides[1] + kj * g.dilations[1]).checked_sub(g.pad_begin[1]);
                    let ptr = match (iy, ix) {
                        (Some(iy), Some(ix)) if p < pixels && iy < ih && ix < iw => {
                            x[((b * ih + iy) * iw + ix) * c..][..c].as_ptr()
                        }
                        _ => zero.as_ptr(),
                    };
                    *at.next().expect("taps per pixel") = ptr;
                }
            }
        }
    }

    /// The GEMM on AVX-512 VNNI reading the activations in place through tap pointers,
    /// requantized per column in registers ([`x86::tile_vnni_indirect`]).
    #[cfg(target_arch = "x86_64")]
    fn run_indirect(
        &self,
        weights: &Packed,
        ind: &Indirect,
        x: &[u8],
        y: &mut [u8],
    ) -> OpResult<()> {
        use crate::qgemm::x86::{self, ColumnQuantized, IndirectRows, VNNI_MR, VNNI_NR};
        use crate::qgemm::SendPtr;
        let m = self.s.out_channels;
        let taps: usize = self.s.geometry.kernel.iter().product();
        op_ensure!(
            x.len() == self.x_shape.iter().product::<usize>() && y.len().is_multiple_of(m.max(1)),
            "channels-last convolution buffers do not match the kernel"
        );
        let (cin, c) = (self.s.in_channels, ind.channels);
        let padded: Vec<u8>;
        let x = if c == cin {
            x
        } else {
            let mut p = vec![self.x.zero[0] as u8; x.len() / cin.max(1) * c];
            for (dst, src) in p.chunks_exact_mut(c).zip(x.chunks_exact(cin)) {
                dst[..cin].copy_from_slice(src);
            }
            padded = p;
            &padded
        };
        let pixels = y.len() / m.max(1);
        let (mb, nb) = (pixels.div_ceil(VNNI_MR), m.div_ceil(VNNI_NR));
        let zero = vec![self.x.zero[0] as u8; c];
        let (lo, hi) = range(self.y.signed);
        let flip = flip(self.x.signed, false);
        let out = SendPtr(y.as_mut_ptr());
        // The larger operand is streamed once and the smaller re-read from cache: row blocks
        // outside when the patches outweigh the weights (many pixels), panels outside when
        // the weights do (a deep layer over a few pixels).
        let rows_outside = pixels >= m;
        let outer = if rows_outside { mb } else { nb };
        let threads = rayon::current_num_threads().max(1);
        let work = pixels * m * taps * c;
        let tasks = if threads <= 1 || work < TASK_WORK {
            1
        } else {
            (threads * 4).min(outer)
        };
        let per = outer.div_ceil(tasks);
        let task = |t: usize| {
            let mut ptrs = vec![std::ptr::null::<u8>(); VNNI_MR * taps];
            let one = |ib: usize, jp: usize, ptrs: &[*const u8]| {
                let (m0, n0) = (ib * VNNI_MR, jp * VNNI_NR);
                let q = ColumnQuantized {
                    add: ind.add[n0..n0 + VNNI_NR].try_into().expect("whole panels"),
                    scale: ind.scale[n0..n0 + VNNI_NR]
                        .try_into()
                        .expect("whole panels"),
                    zero: self.y.zero[0],
                    lo,
                    hi,
                    // SAFETY (offset): pixel m0, channel n0 lies inside the output.
                    dst: unsafe { out.get().add(m0 * m + n0) },
                    ldc: m,
                    rows: (pixels - m0).min(VNNI_MR),
                    cols: (m - n0).min(VNNI_NR),
                };
                let rows = IndirectRows {
                    ptrs,
                    taps,
                    quads: c / 4,
                    flip,
                };
                // SAFETY: the path is AVX-512 VNNI only on CPUs with it; every pointer is a
                // tap's `c` bytes of `x` or of `zero`; tile (ib, jp) is this task's alone and
                // inside the output (rows and cols clipped to it).
                unsafe { x86::tile_vnni_indirect(&rows, weights.panel_bytes(jp), &q) };
            };
            let range = t * per..((t + 1) * per).min(outer);
            if rows_outside {
                for ib in range {
                    self.tap_pointers((x, c), &zero, ib * VNNI_MR, VNNI_MR, &mut ptrs);
                    for jp in 0..nb {
                        one(ib, jp, &ptrs);
                    }
                }
            } else {
                for ib in 0..mb {
                    self.tap_pointers((x, c), &zero, ib * VNNI_MR, VNNI_MR, &mut ptrs);
                    for jp in range.clone() {
                        one(ib, jp, &ptrs);
                    }
                }
            }
        };
        if tasks == 1 {
            task(0);
        } else {
            (0..tasks).into_par_iter().for_each(task);
        }
        Ok(())
    }

    fn run_depthwise(
        &self,
        w: &[i32],
        (wf, bias_less_zero): (&[f32], &[i32]),
        x: &[u8],
        y: &mut [u8],
    ) -> OpResult<()> {
        let c = self.s.out_channels;
        let ow = self.s.geometry.output[1];
        let (lo, hi) = range(self.y.signed);
        let row = |(r, out): (usize, &mut [u8])| {
            // The AVX-512 row sums in f32, exact up to 256 taps (see `depthwise_row`).
            #[cfg(target_arch = "x86_64")]
            if self.isa.has_avx512() && wf.len() <= 256 * c {
                // SAFETY: the session's ISA is AVX-512, which the CPU has; `out` is output row
                // `r`, `ow * c` bytes.
                return unsafe { avx512::depthwise_row(self, (wf, bias_less_zero), x, r, out) };
            }
            let mut acc = vec![0i32; c];
            let mut vals = vec![0f32; c];
            for (ox, dst) in out.chunks_exact_mut(c).enumerate() {
                depthwise_pixel(self, w, x, r, ox, &mut acc);
                for ((v, &a), &s) in vals.iter_mut().zip(&acc).zip(&self.mult) {
                    *v = a as f32 * s;
                }
                requantize(&vals, self.y.zero[0], lo, hi, self.y.signed, dst);
            }
        };
        if y.len() >= 1 << 14 {
            y.par_chunks_mut((ow * c).max(1)).enumerate().for_each(row);
        } else {
            y.chunks_mut((ow * c).max(1)).enumerate().for_each(row);
        }
        Ok(())
    }
}

/// The i32 sums of output pixel (`r` = image * out_h + out_y, `ox`) of a depthwise
/// convolution, bias included (the portable and AVX2 sessions' path).
fn depthwise_pixel(k: &QConvNhwcKernel, w: &[i32], x: &[u8], r: usize, ox: usize, acc: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if k.isa.has_avx2() {
            // SAFETY: the session's ISA includes AVX2, which the CPU has.
            return unsafe { depthwise_pixel_avx2(k, w, x, r, ox, acc) };
        }
    }
    depthwise_pixel_body(k, w, x, r, ox, acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn depthwise_pixel_avx2(
    k: &QConvNhwcKernel,
    w: &[i32],
    x: &[u8],
    r: usize,
    ox: usize,
    acc: &mut [i32],
) {
    depthwise_pixel_body(k, w, x, r, ox, acc)
}

/// `acc[c] = bias[c] + sum over taps inside the image of (x - x_zero) * w` (taps outside add
/// nothing: they hold the zero point, a real 0). Plain loops over channels, which the callers'
/// target features vectorize.
#[inline(always)]
fn depthwise_pixel_body(
    k: &QConvNhwcKernel,
    w: &[i32],
    x: &[u8],
    r: usize,
    ox: usize,
    acc: &mut [i32],
) {
    let g = &k.s.geometry;
    let (ih, iw) = (g.input[0], g.input[1]);
    let oh = g.output[0];
    let c = k.s.out_channels;
    let (b, oy) = (r / oh, r % oh);
    let image = &x[b * ih * iw * c..(b + 1) * ih * iw * c];
    let z = k.x.zero[0];
    acc.copy_from_slice(&k.bias);
    for ki in 0..g.kernel[0] {
        let Some(iy) = (oy * g.strides[0] + ki * g.dilations[0]).checked_sub(g.pad_begin[0]) else {
            continue;
        };
        if iy >= ih {
            continue;
        }
        for kj in 0..g.kernel[1] {
            let Some(ix) = (ox * g.strides[1] + kj * g.dilations[1]).checked_sub(g.pad_begin[1])
            else {
                continue;
            };
            if ix >= iw {
                continue;
            }
            let t = ki * g.kernel[1] + kj;
            let px = &image[(iy * iw + ix) * c..][..c];
            let wt = &w[t * c..][..c];
            if k.x.signed {
                for ((a, &v), &wv) in acc.iter_mut().zip(px).zip(wt) {
                    *a += (v as i8 as i32 - z) * wv;
                }
            } else {
                for ((a, &v), &wv) in acc.iter_mut().zip(px).zip(wt) {
                    *a += (v as i32 - z) * wv;
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::QConvNhwcKernel;
    use crate::qconv::range;
    use std::arch::x86_64::*;

    /// Output row `r` (image * out_h + out_y) of a depthwise convolution, sixteen channels at
    /// a time: i32 sums of `x * w` over the taps, then the bias less the zero point's share,
    /// then the requantization, in registers.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL; `out` holds the row (`out_w * C` bytes); `w` is the
    /// kernel's `[taps][C]` weights as f32, `bias` its bias less the zero point's share, `x`
    /// its input.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn depthwise_row(
        k: &QConvNhwcKernel,
        (w, bias): (&[f32], &[i32]),
        x: &[u8],
        r: usize,
        out: &mut [u8],
    ) {
        let g = &k.s.geometry;
        let (ih, iw) = (g.input[0], g.input[1]);
        let (oh, ow) = (g.output[0], g.output[1]);
        let c = k.s.out_channels;
        let kw = g.kernel[1];
        assert!(out.len() == ow * c && w.len() == g.kernel[0] * kw * c);
        assert!(bias.len() == c && k.mult.len() == c);
        let (b, oy) = (r / oh, r % oh);
        let image = &x[b * ih * iw * c..(b + 1) * ih * iw * c];
        // The kernel rows inside the image.
        let rows: Vec<(usize, usize)> = (0..g.kernel[0])
            .filter_map(|ki| {
                let iy = (oy * g.strides[0] + ki * g.dilations[0]).checked_sub(g.pad_begin[0])?;
                (iy < ih).then_some((ki, iy))
            })
            .collect();
        let (lo, hi) = range(k.y.signed);
        let (vlo, vhi) = (_mm512_set1_epi32(lo), _mm512_set1_epi32(hi));
        let zero_out = _mm512_set1_epi32(k.y.zero[0]);
        let (flo, fhi) = (_mm512_set1_ps(-4_000_000.0), _mm512_set1_ps(4_000_000.0));
        // Taps outside the image read a run of the zero point, so that every pixel sums all
        // taps of raw x and the zero point's share, `x_zero * sum of w`, is one subtraction
        // per channel, taken out of the bias.
        let zero = vec![k.x.zero[0] as u8; c];
        let taps_n = g.kernel[0] * kw;
        let mut taps: Vec<*const u8> = vec![zero.as_ptr(); taps_n];
        for ox in 0..ow {
            taps.fill(zero.as_ptr());
            for &(ki, iy) in &rows {
                for kj in 0..kw {
                    let Some(ix) =
                        (ox * g.strides[1] + kj * g.dilations[1]).checked_sub(g.pad_begin[1])
                    else {
                        continue;
                    };
                    if ix < iw {
                        taps[ki * kw + kj] = image[(iy * iw + ix) * c..][..c].as_ptr();
                    }
                }
            }
            let dst = out.as_mut_ptr().add(ox * c);
            for c0 in (0..c).step_by(16) {
                let n = (c - c0).min(16);
                let mask: __mmask16 = ((1u32 << n) - 1) as u16;
                // Integer-valued f32 products and sums stay below 2^24 (|x w| < 2^16, at most
                // 256 taps), where f32 is exact: FMA gives the integer sum.
                let mut sum = _mm512_setzero_ps();
                for (t, &px) in taps.iter().enumerate() {
                    let bytes = _mm_maskz_loadu_epi8(mask, px.add(c0) as *const i8);
                    let v = if k.x.signed {
                        _mm512_cvtepi8_epi32(bytes)
                    } else {
                        _mm512_cvtepu8_epi32(bytes)
                    };
                    let wv = _mm512_maskz_loadu_ps(mask, w.as_ptr().add(t * c + c0));
                    sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), wv, sum);
                }
                let bias = _mm512_maskz_loadu_epi32(mask, bias.as_ptr().add(c0));
                let acc = _mm512_add_epi32(_mm512_cvtps_epi32(sum), bias);
                let scale = _mm512_maskz_loadu_ps(mask, k.mult.as_ptr().add(c0));
                let f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale);
                let f = _mm512_min_ps(_mm512_max_ps(f, flo), fhi);
                // Rounds half to even (the default rounding mode).
                let q = _mm512_add_epi32(_mm512_cvtps_epi32(f), zero_out);
                let q = _mm512_min_epi32(_mm512_max_epi32(q, vlo), vhi);
                _mm_mask_storeu_epi8(dst.add(c0) as *mut i8, mask, _mm512_cvtepi32_epi8(q));
            }
        }
    }
}

impl Kernel for QConvNhwcKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
        let x = required(inputs, 0)?;
        op_ensure!(
            x.shape() == self.x_shape.as_slice(),
            "input 0 has shape {:?}, the kernel was built for {:?}",
            x.shape(),
            self.x_shape
        );
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        op_ensure!(
            y.shape() == self.y_shape.as_slice(),
            "output has shape {:?}, expected {:?}",
            y.shape(),
            self.y_shape
        );
        let xb = x.bytes();
        let yb = y.bytes_mut();
        match &self.strategy {
            #[cfg(target_arch = "x86_64")]
            Strategy::Gemm {
                weights,
                indirect: Some(ind),
                ..
            } => self.run_indirect(weights, ind, xb, yb),
            Strategy::Gemm { weights, zero, .. } => self.run_gemm(weights, zero, xb, yb),
            Strategy::Depthwise {
                weights,
                weights_f32,
                bias_less_zero,
            } => self.run_depthwise(weights, (weights_f32, bias_less_zero), xb, yb),
        }
    }

    fn name(&self) -> &str {
        match self.strategy {
            Strategy::Gemm { .. } => "cpu.qconv.nhwc.gemm",
            Strategy::Depthwise { .. } => "cpu.qconv.nhwc.depthwise",
        }
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<QLinearConv>(
        "cpu.qconv.nhwc",
        "QLinearConv",
        10,
        DTypes::Any,
        Layout::Nhwc,
        |c, r| QConvNhwcKernel::new(r.cx.isa, c, r.req).map(|k| Box::new(k) as Box<dyn Kernel>),
    );
}
