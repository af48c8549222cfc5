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
pub(crate) struct RowPlan {
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
        let k = &self.isa.table().nchwc.depthwise;
        if let Some(plane_3x3) = k.plane_3x3 {
            if unpadded_3x3(g) && (clamp.is_some() || self.act.is_none()) {
                // SAFETY: the ISA's loop runs on a CPU with its features (`Isa::table`); it
                // checks the sizes its taps rely on; this call owns the rows (as below).
                unsafe { plane_3x3(g, plane, w, &bias, rows, clamp, out.0) };
                return;
            }
        }
        for oy in rows {
            // SAFETY: the callers split work by block and row, so this call owns the row.
            let out = unsafe { std::slice::from_raw_parts_mut(out.0.add(oy * ow * B), ow * B) };
            let plan = Self::row_plan(g, oy);
            (k.row)(g, plane, w, &bias, oy, &plan, clamp, out);
            // Rows that clamp Relu and Clip in registers leave only the other activations.
            if self.act.is_some() && (clamp.is_none() || !k.row_clamps) {
                activate_row(self.isa, self.act, out);
            }
        }
    }
}

/// The blocked depthwise convolution's part of an ISA's microkernel table
/// ([`crate::table`]).
pub(crate) struct Kernels {
    /// Whole output rows of an unpadded 3x3 kernel, if the ISA has such a loop.
    pub(crate) plane_3x3: Option<Plane3x3Fn>,
    pub(crate) row: RowFn,
    /// Whether `row` applies a clamp (Relu, Clip) in its registers.
    pub(crate) row_clamps: bool,
}

/// Output rows `rows` of an unpadded 3x3 depthwise convolution of one block's plane:
/// (geometry, plane, weights, bias, rows, clamp, out), row `oy` going to `out + oy * ow * 8`.
///
/// # Safety
/// `out` is valid for those rows, which no other thread writes meanwhile.
pub(crate) type Plane3x3Fn =
    unsafe fn(&ConvGeometry, &[f32], &[f32], &[f32; B], Range<usize>, Option<(f32, f32)>, *mut f32);

/// One output row: (geometry, plane, weights, bias, oy, plan, clamp, out).
pub(crate) type RowFn =
    fn(&ConvGeometry, &[f32], &[f32], &[f32; B], usize, &RowPlan, Option<(f32, f32)>, &mut [f32]);

/// Plain Rust, pixel by pixel; the activation runs after.
pub(crate) const PORTABLE: Kernels = Kernels {
    plane_3x3: None,
    row: |g, plane, w, bias, oy, plan, _, out| {
        for (ox, o) in out.chunks_exact_mut(B).enumerate() {
            o.copy_from_slice(&pixel(g, plane, w, bias, oy, ox, plan));
        }
    },
    row_clamps: false,
};

/// NEON rows; the activation runs after.
#[cfg(target_arch = "aarch64")]
pub(crate) const NEON: Kernels = Kernels {
    row: |g, plane, w, bias, oy, plan, _, out| neon::row_neon(g, plane, w, bias, oy, plan, out),
    ..PORTABLE
};

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

/// Whether `g` is a 3x3 kernel without padding, dilation 1 across and stride 1 or 2 across:
/// every window of every row lies inside the image ([`Kernels::plane_3x3`]).
fn unpadded_3x3(g: &ConvGeometry) -> bool {
    g.kernel == [3, 3]
        && g.pad_begin.iter().chain(&g.pad_end).all(|&p| p == 0)
        && g.dilations[1] == 1
        && (g.strides[1] == 1 || g.strides[1] == 2)
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
/// The stride-1 kernels on 16 lanes: one zmm holds two neighbouring pixels' eight
/// channels, which lie side by side in the blocked layout, so a tap is one load and one FMA
/// for two pixels.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;

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
