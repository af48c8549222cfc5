//! QLinearConv on the integer GEMM: weights flipped to s8 and packed once, with their row
//! sums; activations (u8, or s8 flipped to u8) packed per run, through an im2col that pads
//! with the input's zero point (the quantized value of a real 0); bias, zero-point
//! corrections and per-channel requantization in the GEMM's epilogue.
//!
//! Depthwise convolutions have too little depth for the GEMM. They run the f32 depthwise
//! kernel on integer values instead, `x - x_zero` and `w - w_zero`: every product and every sum
//! of up to 256 taps stays below 2^24, where f32 represents integers exactly, so the result is
//! the exact integer sum. The bias is added in i32 afterwards.

use crate::backend::{constant, shape, Registry};
use crate::depthwise::DepthwiseKernel;
use crate::qgemm::{requantize, Axis, Out, Packed, Product, QPath, Side, Source};
use crate::qparams::{qparams, QParams};
use crate::split::{self, Cost};
use crate::Isa;
use ferrolite_core::op::required;
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::ops::quant::QLinearConv;
use ferrolite_core::plan::Kernel;
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::scratch::{bytes_for, Scratch, ScratchNeed};
use ferrolite_core::{op_ensure, DType, OpError, OpResult, Tensor};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

/// What flipping does to a zero point: the kernels see activations as u8 and weights as s8.
pub(crate) fn flipped_zero(z: i32, signed: bool, want_signed: bool) -> i32 {
    match (signed, want_signed) {
        (true, false) => z + 128,
        (false, true) => z - 128,
        _ => z,
    }
}

pub(crate) fn flip(signed: bool, want_signed: bool) -> u8 {
    if signed == want_signed {
        0
    } else {
        0x80
    }
}

/// The output's requantization: `x_scale * w_scale[c] / y_scale` per channel, in f32 as the
/// reference computes it.
pub(crate) fn multipliers(x: &QParams, w: &QParams, y: &QParams, channels: usize) -> Vec<f32> {
    (0..channels)
        .map(|c| {
            let ws = w.scale[if w.scale.len() == 1 { 0 } else { c }];
            (x.scale[0] * ws) / y.scale[0]
        })
        .collect()
}

pub(crate) fn range(signed: bool) -> (i32, i32) {
    if signed {
        (-128, 127)
    } else {
        (0, 255)
    }
}

#[derive(Debug)]
enum Strategy {
    /// Weights per group as GEMM rows.
    Gemm {
        groups: Vec<Packed<'static>>,
        pointwise: bool,
    },
    /// The f32 depthwise kernel on integer values, a few channels at a time (so the f32
    /// copies stay small and in cache).
    Depthwise(Vec<DepthwiseChunk>),
}

/// Channels `first..first + count` of a depthwise convolution: the f32 kernel for one image of
/// them, and their weights as integer-valued f32 (`w - w_zero`).
#[derive(Debug)]
struct DepthwiseChunk {
    first: usize,
    count: usize,
    kernel: DepthwiseKernel,
    weights: Tensor,
}

/// See [`QConvKernel::gemm_blocks`].
struct GemmBlocks {
    unit: usize,
    units: usize,
    per_block: usize,
    k: usize,
}

/// f32 values per depthwise chunk: about 64 KiB of input, a multiple of 8 channels (two
/// channels of a larger plane).
const DEPTHWISE_CHUNK_VALUES: usize = 1 << 14;

#[derive(Debug)]
pub struct QConvKernel {
    path: QPath,
    /// The session's ISA (the depthwise strategy's conversions).
    isa: Isa,
    s: ConvShapes,
    x_shape: Vec<usize>,
    y_shape: Vec<usize>,
    x: QParams,
    y: QParams,
    /// Zero point of the weights, per output channel, as the GEMM sees them (s8).
    w_zero: Vec<i32>,
    mult: Vec<f32>,
    bias: Vec<i32>,
    strategy: Strategy,
}

/// The most bytes of a block's patch matrix (and of its packed panels) in
/// [`QConvKernel::run_gemm`]: a few L2-sized blocks rather than one the size of the map.
const GEMM_BLOCK_BYTES: usize = 1 << 20;

impl QConvKernel {
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
        let s =
            ConvShapes::new(&c.params, c.group, xi.shape, wi.shape).map_err(|e| e.to_string())?;
        if s.geometry.input.len() != 2 {
            return Err("needs a 2-D convolution".into());
        }
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
        let k = wi.shape[1..].iter().product::<usize>();
        let w_zero: Vec<i32> = (0..m)
            .map(|c| {
                flipped_zero(
                    w.zero[if w.zero.len() == 1 { 0 } else { c }],
                    w.signed,
                    true,
                )
            })
            .collect();
        let g = &s.geometry;
        let taps = g.kernel.iter().product::<usize>();
        let depthwise = s.group == s.in_channels && s.group == m && s.group > 1 && taps < 256;
        let strategy = if depthwise {
            // Integer-valued f32 weights, w - w_zero.
            let wf: Vec<f32> = w_bytes
                .iter()
                .enumerate()
                .map(|(i, &b)| {
                    let v = if w.signed { b as i8 as i32 } else { b as i32 };
                    let z = w.zero[if w.zero.len() == 1 { 0 } else { i / taps }];
                    (v - z) as f32
                })
                .collect();
            let plane: usize = xi.shape[2..].iter().product::<usize>().max(1);
            // At least eight chunks where the channels allow, so that threads share a layer.
            // Planes of more than a chunk's values go two channels at a time (the f32 kernel
            // takes them one row path per plane): eight would hold 6.5 MB of f32 copies for
            // ppocrv4_det's 320x320 layers.
            let per = if plane > DEPTHWISE_CHUNK_VALUES {
                2
            } else {
                (DEPTHWISE_CHUNK_VALUES / plane)
                    .min(m.div_ceil(8))
                    .next_multiple_of(8)
                    .clamp(8, m.max(8))
            };
            let mut chunks = Vec::new();
            let mut first = 0;
            while first < m {
                // A last single channel joins the chunk before it (the f32 kernel needs two).
                let count = match m - first {
                    left if left <= per + 1 => left,
                    _ => per,
                };
                let x_shape = [&[1, count][..], &xi.shape[2..]].concat();
                let w_shape = [&[count][..], &wi.shape[1..]].concat();
                let cs = ConvShapes::new(&c.params, count, &x_shape, &w_shape)
                    .map_err(|e| e.to_string())?;
                let part = wf[first * taps..(first + count) * taps].to_vec();
                let weights = Tensor::from_vec(&w_shape, part).map_err(|e| e.to_string())?;
                let kernel =
                    DepthwiseKernel::new(isa, &cs, None, &x_shape, &w_shape, Some(&weights))
                        .ok_or("needs a depthwise shape the f32 depthwise kernel takes")?;
                chunks.push(DepthwiseChunk {
                    first,
                    count,
                    kernel,
                    weights,
                });
                first += count;
            }
            Strategy::Depthwise(chunks)
        } else {
            let mg = m / s.group;
            let groups = (0..s.group)
                .map(|gi| {
                    Packed::new_weights(
                        path,
                        Side::Rows,
                        k,
                        mg,
                        Source {
                            data: &w_bytes[gi * mg * k..],
                            rs: k,
                            cs: 1,
                            flip: flip(w.signed, true),
                            signed: true,
                        },
                        r.packs,
                    )
                })
                .collect::<OpResult<Vec<_>>>()
                .map_err(|e| e.to_string())?;
            let pointwise = g.kernel == [1, 1]
                && g.strides == [1, 1]
                && g.pad_begin == [0, 0]
                && g.pad_end == [0, 0];
            Strategy::Gemm { groups, pointwise }
        };
        Ok(QConvKernel {
            path,
            isa,
            y_shape: s.output_shape(),
            x_shape: xi.shape.to_vec(),
            s,
            x,
            y,
            w_zero,
            mult,
            bias,
            strategy,
        })
    }

    /// Group `g`'s input planes of one image as `im2col_rows` reads them: as they are, or with
    /// a horizontal stride, each input row split into its `sw` column phases (in `phases`), so
    /// that every output row's taps are a contiguous run of a phase.
    fn phase_split<'a>(&self, x: &'a [u8], g: usize, phases: &'a mut [u8]) -> &'a [u8] {
        let geo = &self.s.geometry;
        let (ih, iw, sw) = (geo.input[0], geo.input[1], geo.strides[1]);
        let cg = self.s.in_channels / self.s.group;
        let planes = &x[g * cg * ih * iw..(g + 1) * cg * ih * iw];
        if sw == 1 {
            return planes;
        }
        // Columns per phase of an input row.
        let pcols = iw.div_ceil(sw);
        let phases = &mut phases[..self.phases_len(false)];
        let split = |(src, dst): (&[u8], &mut [u8])| {
            for (p, part) in dst.chunks_exact_mut(pcols).enumerate() {
                for (d, &v) in part.iter_mut().zip(src[p.min(iw)..].iter().step_by(sw)) {
                    *d = v;
                }
            }
        };
        let rows = planes
            .chunks_exact(iw)
            .zip(phases.chunks_exact_mut(sw * pcols));
        rows.for_each(split);
        phases
    }

    /// The `[C/group * kh * kw, (oy1 - oy0) * ow]` patch matrix of output rows `oy0..oy1`, from
    /// `source` ([`QConvKernel::phase_split`]'s), out-of-image taps holding `pad` (the input's
    /// zero point, a real 0). Every byte is written (the buffer is reused between runs and
    /// blocks, so it is not cleared first).
    fn im2col_rows(&self, source: &[u8], (oy0, oy1): (usize, usize), pad: u8, buf: &mut [u8]) {
        let geo = &self.s.geometry;
        let (ih, iw) = (geo.input[0], geo.input[1]);
        let ow = geo.output[1];
        let (kh, kw) = (geo.kernel[0], geo.kernel[1]);
        let (sh, sw) = (geo.strides[0], geo.strides[1]);
        let (dh, dw) = (geo.dilations[0], geo.dilations[1]);
        let (ph, pw) = (geo.pad_begin[0], geo.pad_begin[1]);
        let n = (oy1 - oy0) * ow;
        let buf = &mut buf[..self.patch_len(false, n)];
        // An input row's length among the phases (the whole row when sw is 1).
        let pcols = iw.div_ceil(sw);
        let line = sw * pcols;
        // Row r of the patch matrix: channel r / (kh kw) of the group, tap (r / kw % kh, r % kw).
        let fill = |(r, dst): (usize, &mut [u8])| {
            let (c, ki, kj) = (r / (kh * kw), r / kw % kh, r % kw);
            let plane = &source[c * ih * line..(c + 1) * ih * line];
            // Output columns whose tap lands inside the row: ox in [lo, hi).
            let off = kj * dw;
            let lo = pw.saturating_sub(off).div_ceil(sw).min(ow);
            let hi = (iw + pw).saturating_sub(off).div_ceil(sw).clamp(lo, ow);
            // Input column of output lo, and where that column sits among the phases.
            let first = (lo * sw + off).saturating_sub(pw);
            let at = first % sw * pcols + first / sw;
            // Output rows of the block whose tap row is inside the image: oy in [top, bottom),
            // at `(oy - oy0) * ow` in `dst`.
            let top = ph.saturating_sub(ki * dh).div_ceil(sh).clamp(oy0, oy1);
            let bottom = (ih + ph)
                .saturating_sub(ki * dh)
                .div_ceil(sh)
                .clamp(top, oy1);
            let (t, b) = ((top - oy0) * ow, (bottom - oy0) * ow);
            dst[..t].fill(pad);
            dst[b..].fill(pad);
            if lo == hi || top == bottom {
                dst[t..b].fill(pad);
                return;
            }
            let iy = |oy: usize| oy * sh + ki * dh - ph;
            if line * sh == ow {
                // Input rows follow each other exactly as output rows do (a stride-1 "same"
                // convolution): one copy for all rows, then the few columns outside the image
                // set to the pad, column by column (strided stores, not a memset call per row).
                let from = iy(top) * line + at;
                let len = (bottom - top - 1) * ow + hi - lo;
                dst[t + lo..][..len].copy_from_slice(&plane[from..from + len]);
                for j in (0..lo).chain(hi..ow) {
                    for oy in top..bottom {
                        dst[(oy - oy0) * ow + j] = pad;
                    }
                }
                return;
            }
            for (oy, out) in (top..bottom).zip(dst[t..b].chunks_exact_mut(ow)) {
                out[..lo].fill(pad);
                out[lo..hi].copy_from_slice(&plane[iy(oy) * line + at..][..hi - lo]);
                out[hi..].fill(pad);
            }
        };
        let cost = Cost::bytes(2 * buf.len());
        split::for_rows(buf, n, split::worth(cost), |r, dst| fill((r, dst)));
    }

    fn run_gemm(
        &self,
        groups: &[Packed],
        pointwise: bool,
        x: &[u8],
        y: &mut [u8],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let s = &self.s;
        let (in_plane, out_plane) = (
            s.geometry.input.iter().product::<usize>(),
            s.geometry.output.iter().product::<usize>(),
        );
        let (cg, mg) = (s.in_channels / s.group, s.out_channels / s.group);
        let x_zero = flipped_zero(self.x.zero[0], self.x.signed, false);
        let (lo, hi) = range(self.y.signed);
        let GemmBlocks {
            unit,
            units,
            per_block,
            k,
        } = self.gemm_blocks(groups, pointwise);
        // The patch matrix, the phase-split input and the packed activations of a block, in
        // the shared region.
        scratch.with_shared(|shared| -> OpResult<()> {
            let buf: &mut [u8] = shared.take(self.patch_len(pointwise, per_block * unit))?;
            let phases: &mut [u8] = shared.take(self.phases_len(pointwise))?;
            let lens = Packed::panels_lens(self.path, k, per_block * unit);
            let mut packing = shared.take_region(Packed::scratch_bytes(lens))?;
            for b in 0..s.batch {
                let xb = &x[b * s.in_channels * in_plane..(b + 1) * s.in_channels * in_plane];
                let yb =
                    &mut y[b * s.out_channels * out_plane..(b + 1) * s.out_channels * out_plane];
                for (g, rows) in groups.iter().enumerate() {
                    let source = if pointwise {
                        &xb[g * cg * in_plane..(g + 1) * cg * in_plane]
                    } else {
                        self.phase_split(xb, g, phases)
                    };
                    for u0 in (0..units).step_by(per_block.max(1)) {
                        let u1 = (u0 + per_block).min(units);
                        let (c0, n) = (u0 * unit, (u1 - u0) * unit);
                        let (src, ld) = if pointwise {
                            (&source[c0..], in_plane)
                        } else {
                            self.im2col_rows(source, (u0, u1), self.x.zero[0] as u8, buf);
                            (&buf[..], n)
                        };
                        let panels = Packed::activation_panels(
                            self.path,
                            src,
                            k,
                            n,
                            ld,
                            flip(self.x.signed, false),
                            self.w_zero.iter().any(|&z| z != 0),
                            Packed::lent(
                                &mut packing.carve(),
                                Packed::panels_lens(self.path, k, n),
                            )?,
                        )?;
                        let chans = g * mg..(g + 1) * mg;
                        Product {
                            rows,
                            panels: &panels,
                            rows_zero: Axis::Rows(&self.w_zero[chans.clone()]),
                            panels_zero: Axis::All(x_zero),
                            bias: Some(Axis::Rows(&self.bias[chans.clone()])),
                            ldc: out_plane,
                        }
                        .run(
                            &mut Out::Quantized {
                                data: &mut yb[chans.start * out_plane + c0..chans.end * out_plane],
                                signed: self.y.signed,
                                scale: Axis::Rows(&self.mult[chans]),
                                zero_point: self.y.zero[0],
                                lo,
                                hi,
                            },
                            true,
                        )?;
                    }
                }
            }
            Ok(())
        })
    }

    /// How [`QConvKernel::run_gemm`] cuts the output: blocks of `per_block` units of `unit`
    /// columns (whole output rows where a patch matrix is built), each block's patch matrix
    /// and packed panels within about `GEMM_BLOCK_BYTES` (a whole 320 x 320 map's were 22 MB
    /// apiece in ppocrv4_det); `k` is the products' depth.
    fn gemm_blocks(&self, groups: &[Packed], pointwise: bool) -> GemmBlocks {
        let out_plane = self.s.geometry.output.iter().product::<usize>();
        let unit = if pointwise {
            1
        } else {
            self.s.geometry.output[1]
        };
        let units = out_plane / unit.max(1);
        let k = groups.first().map_or(0, |r| r.k());
        let per_block = if pointwise {
            (GEMM_BLOCK_BYTES / k.max(1)).next_multiple_of(64)
        } else {
            (GEMM_BLOCK_BYTES / (k * unit).max(1)).max(1)
        };
        GemmBlocks {
            unit,
            units,
            per_block: per_block.min(units).max(1),
            k,
        }
    }

    /// Bytes of the patch matrix of `n` output columns (none for a pointwise conv, whose B is
    /// its input).
    fn patch_len(&self, pointwise: bool, n: usize) -> usize {
        let geo = &self.s.geometry;
        let cg = self.s.in_channels / self.s.group;
        if pointwise {
            0
        } else {
            cg * geo.kernel[0] * geo.kernel[1] * n
        }
    }

    /// Bytes of a group's phase-split input ([`QConvKernel::phase_split`]).
    fn phases_len(&self, pointwise: bool) -> usize {
        let geo = &self.s.geometry;
        let (ih, iw, sw) = (geo.input[0], geo.input[1], geo.strides[1]);
        if pointwise || sw == 1 {
            0
        } else {
            self.s.in_channels / self.s.group * ih * sw * iw.div_ceil(sw)
        }
    }

    fn run_depthwise(
        &self,
        chunks: &[DepthwiseChunk],
        x: &[u8],
        y: &mut [u8],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let out_plane: usize = self.y_shape[2..].iter().product();
        let channels = self.s.out_channels;
        op_ensure!(
            y.len() == self.s.batch * channels * out_plane,
            "depthwise output does not match the kernel"
        );
        let y_len = y.len();
        let work = y_len * self.s.geometry.kernel.iter().product::<usize>();
        // Every (image, chunk) pair writes its own channels' planes.
        let mut tasks = Vec::with_capacity(self.s.batch * chunks.len());
        for (b, mut image) in y.chunks_mut((channels * out_plane).max(1)).enumerate() {
            for ch in chunks {
                let (dst, rest) = image.split_at_mut(ch.count * out_plane);
                tasks.push((b, ch, dst));
                image = rest;
            }
        }
        // Each chunk converts its channels to f32 and back around the f32 kernel.
        let cost = Cost {
            flops: 2 * work,
            bytes: (x.len() + y_len) * (1 + 2 * size_of::<f32>()),
        };
        let parallel = split::workers(cost, split::threads()) > 1;
        split::try_for_each_item(tasks, parallel, |(b, ch, dst)| {
            self.depthwise_chunk(b, ch, x, dst, scratch)
        })
    }

    /// Channels `ch` of image `b`: converts them to f32, runs the f32 kernel and requantizes
    /// its sums into `dst`.
    fn depthwise_chunk(
        &self,
        b: usize,
        ch: &DepthwiseChunk,
        x: &[u8],
        dst: &mut [u8],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let in_plane: usize = self.x_shape[2..].iter().product();
        let out_plane: usize = self.y_shape[2..].iter().product();
        let (xz, signed) = (self.x.zero[0], self.x.signed);
        let kernels = &self.isa.table().qconv;
        let (lo, hi) = range(self.y.signed);
        let q = (self.y.zero[0], lo, hi, self.y.signed);
        let base = b * self.s.out_channels + ch.first;
        let src = x
            .get(base * in_plane..(base + ch.count) * in_plane)
            .ok_or_else(|| OpError("depthwise input does not match the kernel".into()))?;
        // The chunk's f32 input and sums, in its worker's region.
        scratch.with_thread(|own| -> OpResult<()> {
            let xf: &mut [f32] = own.take(ch.count * in_plane)?;
            let sums: &mut [f32] = own.take(ch.count * out_plane)?;
            (kernels.centered)(src, signed, xz, xf);
            ch.kernel
                .compute(xf, ch.weights.as_slice::<f32>()?, None, sums)?;
            let sums: &[f32] = sums;
            let planes = dst
                .chunks_mut(out_plane.max(1))
                .zip(sums.chunks(out_plane.max(1)));
            for (i, (out, a)) in planes.enumerate() {
                let c = ch.first + i;
                (kernels.requantize_sums)(a, self.bias[c], self.mult[c], q, out);
            }
            Ok(())
        })
    }
}

/// The QLinearConv family's part of an ISA's microkernel table ([`crate::table`]): the depthwise
/// strategy's conversions around its f32 kernel.
pub(crate) struct Kernels {
    /// `out = x - zero` as f32 (the exact integer value): (x, signed, zero, out).
    pub(crate) centered: fn(&[u8], bool, i32, &mut [f32]),
    /// `out = requantize((sum + bias) * mult)`, the sum being an exact integer in f32 (a bias
    /// past 2^24 rounds there, far below the final rounding); `q` is the output's (zero, lo,
    /// hi, signed): (sum, bias, mult, q, out).
    pub(crate) requantize_sums: RequantizeSumsFn,
}

/// See [`Kernels::requantize_sums`].
pub(crate) type RequantizeSumsFn = fn(&[f32], i32, f32, (i32, i32, i32, bool), &mut [u8]);

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    centered: centered_impl,
    requantize_sums: requantize_sums_impl,
};

#[inline(always)]
fn centered_impl(x: &[u8], signed: bool, zero: i32, out: &mut [f32]) {
    if signed {
        for (o, &b) in out.iter_mut().zip(x) {
            *o = (b as i8 as i32 - zero) as f32;
        }
    } else {
        for (o, &b) in out.iter_mut().zip(x) {
            *o = (b as i32 - zero) as f32;
        }
    }
}

#[inline(always)]
fn requantize_sums_impl(
    sum: &[f32],
    bias: i32,
    mult: f32,
    q: (i32, i32, i32, bool),
    out: &mut [u8],
) {
    let bias = bias as f32;
    let mut vals = [0f32; 256];
    for (out, a) in out.chunks_mut(256).zip(sum.chunks(256)) {
        let v = &mut vals[..a.len()];
        for (o, &a) in v.iter_mut().zip(a) {
            *o = (a + bias) * mult;
        }
        requantize(v, q.0, q.1, q.2, q.3, out);
    }
}

impl Kernel for QConvKernel {
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
            Strategy::Gemm { groups, pointwise } => {
                self.run_gemm(groups, *pointwise, xb, yb, scratch)
            }
            Strategy::Depthwise(chunks) => self.run_depthwise(chunks, xb, yb, scratch),
        }
    }

    fn scratch(&self, _threads: usize) -> ScratchNeed {
        match &self.strategy {
            Strategy::Gemm { groups, pointwise } => {
                let b = self.gemm_blocks(groups, *pointwise);
                let n = b.per_block * b.unit;
                ScratchNeed::for_run(
                    bytes_for::<u8>(self.patch_len(*pointwise, n))
                        + bytes_for::<u8>(self.phases_len(*pointwise))
                        + Packed::scratch_bytes(Packed::panels_lens(self.path, b.k, n)),
                )
            }
            Strategy::Depthwise(chunks) => {
                let in_plane: usize = self.x_shape[2..].iter().product();
                let out_plane: usize = self.y_shape[2..].iter().product();
                let chunk = |c: &DepthwiseChunk| {
                    bytes_for::<f32>(c.count * in_plane) + bytes_for::<f32>(c.count * out_plane)
                };
                ScratchNeed::for_each_thread(chunks.iter().map(chunk).max().unwrap_or(0))
            }
        }
    }

    fn name(&self) -> &str {
        match self.strategy {
            Strategy::Gemm { .. } => "cpu.qconv.gemm",
            Strategy::Depthwise(_) => "cpu.qconv.depthwise",
        }
    }

    fn prepacked_bytes(&self) -> usize {
        let weights = match &self.strategy {
            Strategy::Gemm { groups, .. } => groups.iter().map(Packed::bytes).sum(),
            Strategy::Depthwise(chunks) => chunks
                .iter()
                .map(|c| c.kernel.prepacked_bytes() + c.weights.byte_len())
                .sum::<usize>(),
        };
        weights
            + size_of_val(self.w_zero.as_slice())
            + size_of_val(self.mult.as_slice())
            + size_of_val(self.bias.as_slice())
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<QLinearConv>(
        "cpu.qconv",
        "QLinearConv",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |c, r| QConvKernel::new(r.cx.isa, c, r.req).map(|k| Box::new(k) as Box<dyn Kernel>),
    );
}
