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
//! Depthwise convolutions work on whole vectors of channels, which channels last keep
//! contiguous: on AVX-512, bands of output rows whose input rows are converted once to
//! `x - x_zero` in f32 (exact: every sum of up to 256 taps stays below 2^24), eight output
//! pixels per step; elsewhere i32 sums per pixel.

use crate::backend::{constant, shape, Registry};
use crate::qconv::{flip, flipped_zero, multipliers, range};
use crate::qgemm::{requantize, Axis, Out, Packed, Product, QPath, Side, Source};
use crate::qparams::{qparams, QParams};
use crate::split::{self, Cost};
use crate::Isa;
use ferrolite_core::op::required;
use ferrolite_core::ops::layout::FROM_NHWC;
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::ops::quant::QLinearConv;
use ferrolite_core::plan::Kernel;
use ferrolite_core::registry::DTypes;
use ferrolite_core::scratch::{Scratch, ScratchNeed};
use ferrolite_core::{op_ensure, DType, OpError, OpResult, Tensor};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

/// The i32 sums of output pixel (`r` = image * out_h + out_y, `ox`) of a depthwise
/// convolution, bias included: (kernel, w, x, r, ox, acc).
pub(crate) type PixelFn = fn(&QConvNhwcKernel, &[i32], &[u8], usize, usize, &mut [i32]);

/// Output rows `first..first + rows` of image `b`, channels `channels`, of a depthwise
/// convolution, sixteen channels at a time, summed in f32 (see `avx512.rs`).
///
/// # Safety
/// `out` points at output row `first` of image `b` and is valid for `rows` whole rows, whose
/// channels `channels` (from a multiple of 16) no other thread writes meanwhile; `w` is the
/// kernel's `[taps][C rounded up to 16]` f32 weights (with whether sums may start from the
/// bias); the kernel has at most 256 taps. `buf` (scratch starting on a 64-byte line) holds
/// the band: [`QConvNhwcKernel::band_floats`].
pub(crate) type BandFn = unsafe fn(
    &QConvNhwcKernel,
    (&[f32], bool),
    &[u8],
    (usize, usize, usize),
    std::ops::Range<usize>,
    *mut u8,
    &mut [f32],
);

/// The channels-last QLinearConv's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    pub(crate) depthwise_pixel: PixelFn,
    /// None where the ISA has no band loop (the pixels' i32 sums run instead).
    pub(crate) depthwise_band: Option<BandFn>,
}

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    depthwise_pixel,
    depthwise_band: None,
};

#[derive(Debug)]
enum Strategy {
    /// The weights as GEMM column panels of depth `taps * C`, and their zero points as the
    /// GEMM sees them (s8), per output channel.
    Gemm {
        weights: Packed<'static>,
        zero: Vec<i32>,
        indirect: Option<Indirect>,
    },
    /// `w - w_zero` as `[taps][C]`, and as f32 `[taps][C rounded up to 16]` (the AVX-512
    /// kernel's, whose loads are whole vectors; the padding is 0); whether the AVX-512 f32
    /// sums may start from the bias and stay exact.
    Depthwise {
        weights: Vec<i32>,
        /// On 64-byte lines, as the band's pixels are (see `depthwise_band`).
        weights_f32: ferrolite_core::prepacked::Packed<f32>,
        bias_in_sum: bool,
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
    /// The table's in-place tile.
    #[cfg(target_arch = "x86_64")]
    tile: crate::qgemm::x86::IndirectTile,
}

/// The channels-last input the AVX-512 VNNI path's tap pointers point into: `h` x `w` pixels
/// of `c` bytes per image, `pad` rows and columns of padding before it (0 for a copy padded
/// in place), and whether a pointer covers a whole kernel row (`kw` pixels one after another,
/// inside a padded copy) or one tap.
#[cfg(target_arch = "x86_64")]
struct TapSource<'a> {
    data: &'a [u8],
    h: usize,
    w: usize,
    c: usize,
    pad: [usize; 2],
    kernel_rows: bool,
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

/// Multiply-adds of a GEMM task's patch block at the least: a block gathers its patches
/// before its product, and blocks of half this ran mobilenet_v2 int8 7% slower at one thread.
const BLOCK_MACS: usize = 1 << 18;

/// Weights past this many bytes (beyond a core's share of L2) are streamed once per layer:
/// tasks of few pixels each re-read them all from L3 (resnet18's 512-channel 3x3 layers,
/// 2.4 MB of weights on a 7x7 map, ran seven row blocks as seven tasks and reached half
/// the speed of the layers before them).
const STREAMED_WEIGHTS: usize = 1 << 19;

/// The most bytes of packed patch rows per task where the weights are streamed.
const STREAMED_ROWS_BYTES: usize = 1 << 20;

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
        let taps: usize = s.geometry.kernel.iter().product();
        // AMX tiles for deep ordinary convolutions where the CPU has them; not for a few
        // input channels (an RGB stem), whose patches gather a few bytes per tap, where the
        // VNNI path reads them in place.
        let path = match s.group {
            1 if s.in_channels >= 16 => QPath::for_isa(isa).amx_if_pays(taps * s.in_channels, m),
            _ => QPath::for_isa(isa),
        };
        let mult = multipliers(&x, &w, &y, m);
        let w_bytes = w_val.bytes();
        let w_zero = |ch: usize| w.zero[if w.zero.len() == 1 { 0 } else { ch }];
        let strategy = if s.group == 1 {
            let zero: Vec<i32> = (0..m)
                .map(|ch| flipped_zero(w_zero(ch), w.signed, true))
                .collect();
            // The table's tile that reads the activations in place, where the ISA's GEMM path
            // has one and the AMX tiles did not take the product.
            #[cfg(target_arch = "x86_64")]
            let in_place = {
                let table = &isa.table().qgemm;
                table.indirect.filter(|_| path == table.path)
            };
            #[cfg(not(target_arch = "x86_64"))]
            let in_place: Option<std::convert::Infallible> = None;
            let indirect = in_place.is_some() && zero.iter().all(|&z| z == 0);
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
            let packed = Packed::new_weights(
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
                r.packs,
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
                    #[cfg(target_arch = "x86_64")]
                    tile: in_place.expect("indirect only with the table's tile"),
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
            let mp = m.next_multiple_of(16);
            let mut weights_f32 = vec![0f32; taps * mp];
            for t in 0..taps {
                for ch in 0..m {
                    weights_f32[t * mp + ch] = wt[t * m + ch] as f32;
                }
            }
            // The AVX-512 sums start from the bias where every partial sum stays below 2^24
            // with it (|x w| <= 255 * 255 per tap), so f32 holds them exactly.
            let bound = taps as u64 * 255 * 255;
            let bias_in_sum = bias
                .iter()
                .all(|&b| b.unsigned_abs() as u64 + bound < 1 << 24);
            Strategy::Depthwise {
                weights_f32: ferrolite_core::prepacked::Packed::from_vec(weights_f32),
                weights: wt,
                bias_in_sum,
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

    /// Output pixels per task of [`QConvNhwcKernel::run_gemm`] on `threads` workers, and
    /// whether the weights are streamed. Large weights: as many pixels per task as fit a patch
    /// block, the threads splitting the output channels (the GEMM's columns) inside each, so
    /// every weight is read once per block. Otherwise whole row blocks per task, enough work
    /// each to pay for the task, the threads splitting the pixels.
    fn gemm_tasks(&self, k: usize, threads: usize) -> (usize, bool) {
        let m = self.s.out_channels;
        let pixels = self.s.batch * self.s.geometry.output.iter().product::<usize>();
        let mr = self.path.tile().0;
        let threads = threads.max(1);
        let streamed = m * k > STREAMED_WEIGHTS;
        let per = if streamed {
            (STREAMED_ROWS_BYTES / k.max(1))
                .next_multiple_of(mr)
                .max(mr)
        } else {
            let per = (BLOCK_MACS / (m * k).max(1)).next_multiple_of(mr).max(mr);
            per.min(
                pixels
                    .div_ceil(threads * split::BALANCE)
                    .next_multiple_of(mr),
            )
        };
        (per, streamed)
    }

    fn run_gemm(
        &self,
        weights: &Packed,
        w_zero: &[i32],
        x: &[u8],
        y: &mut [u8],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let m = self.s.out_channels;
        let k = weights.k();
        let pixels = y.len() / m.max(1);
        let (per, streamed) = self.gemm_tasks(k, split::threads());
        let x_flip = flip(self.x.signed, false);
        let x_zero = flipped_zero(self.x.zero[0], self.x.signed, false);
        let (lo, hi) = range(self.y.signed);
        // Row sums are needed only against weights with zero points.
        let sums = w_zero.iter().any(|&z| z != 0);
        let task = |(t, out): (usize, &mut [u8])| -> OpResult<()> {
            let first = t * per;
            let rows = out.len() / m;
            // The task's packed patches, in its worker's region.
            scratch.with_thread(|own| {
                let storage = Packed::lent(own, Packed::gathered_lens(self.path, k, rows))?;
                let packed =
                    Packed::gathered_rows(self.path, k, rows, x_flip, sums, storage, |i, buf| {
                        self.patch(x, first + i, buf)
                    })?;
                Product {
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
                    streamed,
                )
            })
        };
        // Streamed weights: the tasks take turns, the threads splitting each one's columns.
        let tasks = split::Tasks {
            count: if streamed {
                1
            } else {
                pixels.div_ceil(per.max(1))
            },
            per: (per * m).max(1),
        };
        split::try_chunks(y, tasks, |start, out| task((start / tasks.per, out)))
    }

    /// The input extent along spatial `axis` (0 rows, 1 columns) with the padding: what the
    /// last output reads, or the padded image, whichever is larger.
    fn padded_extent(&self, axis: usize) -> usize {
        let g = &self.s.geometry;
        let last = (g.output[axis].max(1) - 1) * g.strides[axis]
            + (g.kernel[axis] - 1) * g.dilations[axis];
        (last + 1).max(g.pad_begin[axis] + g.input[axis])
    }

    /// Pointers to the taps of output pixels `first..first + count` (pixel after pixel) into
    /// `ptrs`: each tap's input pixel in `src` (or, with `src.kernel_rows`, each kernel row's
    /// first pixel), or `zero` (the zero point, a real 0) outside the image and for pixels past
    /// the end. Pixels follow each other, so their coordinates are stepped, not divided out.
    #[cfg(target_arch = "x86_64")]
    fn tap_pointers(
        &self,
        src: &TapSource,
        zero: &[u8],
        first: usize,
        count: usize,
        ptrs: &mut [*const u8],
    ) {
        let g = &self.s.geometry;
        let (oh, ow) = (g.output[0].max(1), g.output[1].max(1));
        let pixels = self.s.batch * g.output[0] * g.output[1];
        let (zero, base, c) = (zero.as_ptr(), src.data.as_ptr(), src.c);
        let last = (first + count).min(pixels);
        if g.kernel == [1, 1] && g.strides == [1, 1] && src.pad == [0, 0] {
            // A pointwise convolution's patch is its own pixel.
            for (p, ptr) in (first..first + count).zip(ptrs.iter_mut()) {
                *ptr = if p < last {
                    base.wrapping_add(p * c)
                } else {
                    zero
                };
            }
            return;
        }
        let kw = if src.kernel_rows { 1 } else { g.kernel[1] };
        let per = g.kernel[0] * kw;
        let (h, w) = (src.h as isize, src.w as isize);
        // The window's last row and column, from its first.
        let (y_span, x_span) = (
            ((g.kernel[0] - 1) * g.dilations[0]) as isize,
            ((kw - 1) * g.dilations[1]) as isize,
        );
        let (row_step, col_step) = (g.dilations[0] * src.w * c, g.dilations[1] * c);
        let (mut b, mut oy, mut ox) = (first / (oh * ow), first / ow % oh, first % ow);
        for (p, taps) in (first..first + count).zip(ptrs.chunks_exact_mut(per)) {
            if p >= last {
                taps.fill(zero);
                continue;
            }
            let y0 = (oy * g.strides[0]) as isize - src.pad[0] as isize;
            let x0 = (ox * g.strides[1]) as isize - src.pad[1] as isize;
            let image = base.wrapping_add(b * src.h * src.w * c);
            if y0 >= 0 && x0 >= 0 && y0 + y_span < h && x0 + x_span < w {
                // The whole window inside the image (most pixels): no tap to check.
                let mut line = image.wrapping_add((y0 as usize * src.w + x0 as usize) * c);
                for row in taps.chunks_exact_mut(kw) {
                    let mut at = line;
                    for ptr in row {
                        *ptr = at;
                        at = at.wrapping_add(col_step);
                    }
                    line = line.wrapping_add(row_step);
                }
            } else {
                let dilations = (kw, g.dilations[0], g.dilations[1]);
                Self::border_taps((image, zero), (y0, x0), (h, w, c), dilations, taps);
            }
            ox += 1;
            if ox == ow {
                ox = 0;
                oy += 1;
                if oy == oh {
                    oy = 0;
                    b += 1;
                }
            }
        }
    }

    /// The taps of a pixel whose window (first row `y0`, column `x0`) crosses the image's
    /// border: `zero` for those outside.
    #[cfg(target_arch = "x86_64")]
    fn border_taps(
        (image, zero): (*const u8, *const u8),
        (y0, x0): (isize, isize),
        (h, w, c): (isize, isize, usize),
        (kw, dy, dx): (usize, usize, usize),
        taps: &mut [*const u8],
    ) {
        for (ki, row) in taps.chunks_exact_mut(kw).enumerate() {
            let iy = y0 + (ki * dy) as isize;
            if iy < 0 || iy >= h {
                row.fill(zero);
                continue;
            }
            let line = image.wrapping_add(iy as usize * w as usize * c);
            for (kj, ptr) in row.iter_mut().enumerate() {
                let ix = x0 + (kj * dx) as isize;
                *ptr = if ix < 0 || ix >= w {
                    zero
                } else {
                    line.wrapping_add(ix as usize * c)
                };
            }
        }
    }

    /// The GEMM on AVX-512 VNNI reading the activations in place through tap pointers,
    /// requantized per column in registers (the table's `qgemm.indirect` tile).
    #[cfg(target_arch = "x86_64")]
    fn run_indirect(
        &self,
        weights: &Packed,
        ind: &Indirect,
        x: &[u8],
        y: &mut [u8],
    ) -> OpResult<()> {
        use crate::qgemm::x86::{ColumnQuantized, IndirectRows, VNNI_MR, VNNI_NR};
        use crate::qgemm::SendPtr;
        let m = self.s.out_channels;
        op_ensure!(
            x.len() == self.x_shape.iter().product::<usize>() && y.len().is_multiple_of(m.max(1)),
            "channels-last convolution buffers do not match the kernel"
        );
        let (cin, c) = (self.s.in_channels, ind.channels);
        let g = &self.s.geometry;
        let padded: Vec<u8>;
        let src = if c == cin {
            TapSource {
                data: x,
                h: g.input[0],
                w: g.input[1],
                c,
                pad: [g.pad_begin[0], g.pad_begin[1]],
                kernel_rows: false,
            }
        } else {
            // Channels padded to whole quads need a copy; padded spatially as well, every tap
            // lies inside it and a kernel row (of dilation 1) is one run of `kw * c` bytes:
            // one pointer per kernel row instead of one per tap (a 3-channel stem has one
            // quad per tap, where fetching the tap's pointer cost as much as its product).
            let (ih, iw) = (g.input[0], g.input[1]);
            let (h, w) = (self.padded_extent(0), self.padded_extent(1));
            let (top, left) = (g.pad_begin[0], g.pad_begin[1]);
            let mut p = vec![self.x.zero[0] as u8; self.s.batch * h * w * c];
            // Row by row in parallel; a pixel's few bytes one by one (a copy call each cost
            // more than the bytes).
            let workers = split::worth(Cost::bytes(2 * p.len()));
            split::for_rows(&mut p, w * c, workers, |r, dst| {
                let (b, py) = (r / h, r % h);
                let Some(iy) = py.checked_sub(top).filter(|&iy| iy < ih) else {
                    return;
                };
                let row = &x[(b * ih + iy) * iw * cin..][..iw * cin];
                let dst = &mut dst[left * c..(left + iw) * c];
                for (d, s) in dst.chunks_exact_mut(c).zip(row.chunks_exact(cin)) {
                    for (d, &s) in d.iter_mut().zip(s) {
                        *d = s;
                    }
                }
            });
            padded = p;
            TapSource {
                data: &padded,
                h,
                w,
                c,
                pad: [0, 0],
                kernel_rows: g.dilations[1] == 1,
            }
        };
        // Bytes per pointer and pointers per pixel.
        let (run, taps) = if src.kernel_rows {
            (g.kernel[1] * c, g.kernel[0])
        } else {
            (c, g.kernel[0] * g.kernel[1])
        };
        let pixels = y.len() / m.max(1);
        let (mb, nb) = (pixels.div_ceil(VNNI_MR), m.div_ceil(VNNI_NR));
        let zero = vec![self.x.zero[0] as u8; run];
        let (lo, hi) = range(self.y.signed);
        let flip = flip(self.x.signed, false);
        let out = SendPtr(y.as_mut_ptr());
        // The larger operand is streamed once and the smaller re-read from cache: row blocks
        // outside when the patches outweigh the weights (many pixels), panels outside when
        // the weights do (a deep layer over a few pixels).
        let rows_outside = pixels >= m;
        let outer = if rows_outside { mb } else { nb };
        let workers = split::worth(Cost::flops(2 * pixels * m * taps * run));
        let tasks = if workers <= 1 {
            1
        } else {
            (workers * split::BALANCE).min(outer)
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
                    quads: run / 4,
                    flip,
                };
                // SAFETY: the table offers this tile only on CPUs with AVX-512 VNNI; every
                // pointer starts `run` bytes of the input or of `zero` (a kernel row lies
                // inside the padded copy: its extents cover the last output's taps); tile
                // (ib, jp) is this task's alone and inside the output (rows and cols clipped
                // to it).
                unsafe { (ind.tile)(&rows, weights.panel_bytes(jp), &q) };
            };
            let range = t * per..((t + 1) * per).min(outer);
            if rows_outside {
                for ib in range {
                    self.tap_pointers(&src, &zero, ib * VNNI_MR, VNNI_MR, &mut ptrs);
                    for jp in 0..nb {
                        one(ib, jp, &ptrs);
                    }
                }
            } else {
                for ib in 0..mb {
                    self.tap_pointers(&src, &zero, ib * VNNI_MR, VNNI_MR, &mut ptrs);
                    for jp in range.clone() {
                        one(ib, jp, &ptrs);
                    }
                }
            }
        };
        split::for_each_task(tasks, true, task);
        Ok(())
    }

    fn run_depthwise(
        &self,
        w: &[i32],
        (wf, bias_in_sum): (&[f32], bool),
        x: &[u8],
        y: &mut [u8],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let c = self.s.out_channels;
        let ow = self.s.geometry.output[1];
        // The bands sum in f32, exact up to 256 taps (see `Kernels::depthwise_band`).
        if let Some(depthwise_band) = self.depthwise_bands(wf) {
            use crate::qgemm::SendPtr;
            let oh = self.s.geometry.output[0];
            op_ensure!(
                y.len() == self.s.batch * oh * ow * c,
                "depthwise output does not match the kernel"
            );
            // The bands are cut for the pool's threads (the scratch was declared so); the
            // work decides whether they spread.
            let threads = split::threads();
            let taps = self.s.geometry.kernel.iter().product::<usize>();
            let parallel = split::worth(Cost::flops(2 * y.len() * taps)) > 1;
            let band = self.depthwise_band_rows(threads);
            let band_floats = self.band_floats(threads);
            let bands = self.s.batch * oh.div_ceil(band);
            // Tasks split the channel groups too where the bands alone would not give every
            // thread several (a deep layer on a 7x7 map is one band): splitting its rows
            // instead converted the rows each band shares with the next again.
            let groups = c.div_ceil(16);
            let splits = if threads <= 1 {
                1
            } else {
                (4 * threads).div_ceil(bands).clamp(1, groups)
            };
            let per_split = groups.div_ceil(splits);
            let out = SendPtr(y.as_mut_ptr());
            let task = |t: usize| {
                let (bi, split) = (t / splits, t % splits);
                let (b, first) = (bi / oh.div_ceil(band), bi % oh.div_ceil(band) * band);
                let rows = band.min(oh - first);
                let g0 = (split * per_split).min(groups);
                let g1 = ((split + 1) * per_split).min(groups);
                // The band's f32 rows in the task's worker's region.
                scratch.with_thread(|own| -> OpResult<()> {
                    let buf: &mut [f32] = own.take(band_floats)?;
                    // SAFETY: the band loop is the session's ISA's (the CPU has its features);
                    // task `t` alone
                    // writes rows `first..first + rows` of image `b`, channels
                    // `16 * g0..16 * g1` (clipped to C), inside `y` (checked above); `buf`
                    // holds a whole band and starts on a line (scratch does).
                    unsafe {
                        let at = out.get().add((b * oh + first) * ow * c);
                        let w = (wf, bias_in_sum);
                        let channels = g0 * 16..g1 * 16;
                        depthwise_band(self, w, x, (b, first, rows), channels, at, buf)
                    };
                    Ok(())
                })
            };
            return split::try_for_each_task(bands * splits, parallel, task);
        }
        let (lo, hi) = range(self.y.signed);
        let pixel = self.isa.table().qconv_nhwc.depthwise_pixel;
        let row = |(r, out): (usize, &mut [u8])| {
            let mut acc = vec![0i32; c];
            let mut vals = vec![0f32; c];
            for (ox, dst) in out.chunks_exact_mut(c).enumerate() {
                pixel(self, w, x, r, ox, &mut acc);
                for ((v, &a), &s) in vals.iter_mut().zip(&acc).zip(&self.mult) {
                    *v = a as f32 * s;
                }
                requantize(&vals, self.y.zero[0], lo, hi, self.y.signed, dst);
            }
        };
        let taps = self.s.geometry.kernel.iter().product::<usize>();
        let workers = split::worth(Cost::flops(2 * y.len() * taps));
        split::for_rows(y, ow * c, workers, |r, out| row((r, out)));
        Ok(())
    }

    /// The band loop the depthwise convolution runs ([`Kernels::depthwise_band`]), if any:
    /// the ISA's table has one, and the f32 weights `wf` (`[taps][C rounded up to 16]`) have at
    /// most 256 taps, below which the f32 sums stay exact.
    fn depthwise_bands(&self, wf: &[f32]) -> Option<BandFn> {
        let band = self.isa.table().qconv_nhwc.depthwise_band?;
        (wf.len() <= 256 * self.s.out_channels.next_multiple_of(16)).then_some(band)
    }

    /// The padded input row width (in pixels) the output row reads: left padding, the image,
    /// and what the right padding adds.
    fn band_width(&self) -> usize {
        self.padded_extent(1)
    }

    /// Floats of one band of [`Kernels::depthwise_band`] on `threads` workers: its padded
    /// input rows for sixteen channels.
    fn band_floats(&self, threads: usize) -> usize {
        let g = &self.s.geometry;
        let rows = self.depthwise_band_rows(threads);
        let band_h = (rows - 1) * g.strides[0] + (g.kernel[0] - 1) * g.dilations[0] + 1;
        band_h * self.band_width() * 16
    }

    /// Output rows per band task: enough tasks for every thread (four each), and a band's
    /// input rows as f32 within about 256 KiB, the size of a core's L2 share.
    fn depthwise_band_rows(&self, threads: usize) -> usize {
        let g = &self.s.geometry;
        let oh = g.output[0];
        // A band holds sixteen channels at a time.
        let row_bytes = self.band_width() * 16 * 4;
        let fit = ((256 << 10) / row_bytes.max(1) / g.strides[0]).max(1);
        // One thread takes the largest bands (each band converts its overlap with the next
        // again).
        let tasks = if threads <= 1 { 1 } else { 4 * threads };
        // Rows split over threads only where the channel groups cannot keep them busy.
        let groups = self.s.out_channels.div_ceil(16);
        let spread = (self.s.batch * oh * groups).div_ceil(tasks).max(1);
        fit.min(spread).min(oh.max(1))
    }
}

/// `acc[c] = bias[c] + sum over taps inside the image of (x - x_zero) * w` (taps outside add
/// nothing: they hold the zero point, a real 0). Plain loops over channels, which the callers'
/// target features vectorize.
#[inline(always)]
fn depthwise_pixel(k: &QConvNhwcKernel, w: &[i32], x: &[u8], r: usize, ox: usize, acc: &mut [i32]) {
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

impl Kernel for QConvNhwcKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        scratch: &Scratch,
    ) -> OpResult<()> {
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
            Strategy::Gemm { weights, zero, .. } => self.run_gemm(weights, zero, xb, yb, scratch),
            Strategy::Depthwise {
                weights,
                weights_f32,
                bias_in_sum,
            } => self.run_depthwise(weights, (&weights_f32[..], *bias_in_sum), xb, yb, scratch),
        }
    }

    fn scratch(&self, threads: usize) -> ScratchNeed {
        match &self.strategy {
            #[cfg(target_arch = "x86_64")]
            Strategy::Gemm {
                indirect: Some(_), ..
            } => ScratchNeed::NONE,
            Strategy::Gemm { weights, .. } => {
                let (per, _) = self.gemm_tasks(weights.k(), threads);
                let lens = Packed::gathered_lens(self.path, weights.k(), per);
                ScratchNeed::for_each_thread(Packed::scratch_bytes(lens))
            }
            Strategy::Depthwise { weights_f32, .. }
                if self.depthwise_bands(weights_f32).is_some() =>
            {
                ScratchNeed::for_each_thread(ferrolite_core::scratch::bytes_for::<f32>(
                    self.band_floats(threads),
                ))
            }
            Strategy::Depthwise { .. } => ScratchNeed::NONE,
        }
    }

    fn name(&self) -> &str {
        match self.strategy {
            #[cfg(target_arch = "x86_64")]
            Strategy::Gemm { .. } if self.path == QPath::Amx => "cpu.qconv.nhwc.amx",
            Strategy::Gemm { .. } => "cpu.qconv.nhwc.gemm",
            Strategy::Depthwise { .. } => "cpu.qconv.nhwc.depthwise",
        }
    }

    fn prepacked_bytes(&self) -> usize {
        let weights = match &self.strategy {
            Strategy::Gemm {
                weights,
                zero,
                indirect,
            } => {
                weights.bytes()
                    + size_of_val(zero.as_slice())
                    + indirect.as_ref().map_or(0, |i| {
                        size_of_val(i.add.as_slice()) + size_of_val(i.scale.as_slice())
                    })
            }
            Strategy::Depthwise {
                weights,
                weights_f32,
                ..
            } => size_of_val(weights.as_slice()) + weights_f32.bytes(),
        };
        weights + size_of_val(self.mult.as_slice()) + size_of_val(self.bias.as_slice())
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<QLinearConv>(
        "cpu.qconv.nhwc",
        "QLinearConv",
        10,
        DTypes::Any,
        ferrolite_core::ops::layout::NHWC,
        |c, r| QConvNhwcKernel::new(r.cx.isa, c, r.req).map(|k| Box::new(k) as Box<dyn Kernel>),
    );
}
