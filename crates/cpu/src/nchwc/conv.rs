//! Ordinary (group 1) 2-D convolution with blocked output, reading a blocked input (or a
//! plain one whose channels do not fill blocks: a network's first layer).
//!
//! It needs no packing: for a row of up to five output pixels and two
//! blocks of eight output channels, each input channel's value at each pixel is broadcast and
//! multiplied into ten registers of accumulators, the weights of that input channel (eight
//! output channels per block) loaded once for the five pixels. The input is read in place (a
//! padded copy first where the convolution pads); weights are reordered once at prerun to
//! `[OC/8][input channel groups][KH][KW][channels per group][8]`.

use super::{activate_row, clamp_of, SendPtr, B};
use crate::kernel_io::{input, output};
use crate::sgemm::Isa;
use crate::split::{self, Cost};
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::plan::Kernel;
use ferrolite_core::prepacked::{Packed, Prepacks};
use ferrolite_core::scratch::{bytes_for, Scratch, ScratchNeed};
use ferrolite_core::{OpResult, Tensor};

/// Output pixels per register tile: ten accumulators, two weight vectors and a broadcast fit
/// the sixteen registers with room to spare. With six pixels (twelve accumulators) LLVM
/// spilled a register inside the channel loop, and 55-wide rows ran 7% slower.
const TILE: usize = 5;

/// The AVX-512 tile's pixels: with 32 registers, eight pixels by two 16-channel vectors
/// (sixteen accumulators, two weight vectors, a broadcast) are eight pixels of broadcasts
/// feeding sixteen 16-lane FMAs per input channel.
const TILE512: usize = 8;

/// Whether `isa` runs the 16-channel (two blocks a register) tiles.
fn wide(isa: Isa) -> bool {
    isa.has_avx512()
}

/// The most pixels of a row tile under `isa`.
fn tile_width(isa: Isa) -> usize {
    if wide(isa) {
        TILE512
    } else {
        TILE
    }
}

/// An input larger than this (about L2) is read in bands of rows of about [`BAND_BYTES`].
const L2_BYTES: usize = 256 << 10;
const BAND_BYTES: usize = 96 << 10;

/// Where a convolution reads its (padded) input.
#[derive(Clone, Debug)]
struct InputLayout {
    /// Input channel groups (blocks of 8, or all channels of a plain input) and their size.
    groups: usize,
    group_len: usize,
    /// Distance between channels of a group and between neighbouring pixels.
    channel_step: usize,
    pixel: usize,
    /// Padded height and width.
    ph: usize,
    pw: usize,
}

impl InputLayout {
    fn group_stride(&self) -> usize {
        self.ph * self.pw * self.pixel * if self.pixel == 1 { self.group_len } else { 1 }
    }
}

/// A 2-D convolution, group 1, on blocked output.
#[derive(Debug)]
pub(crate) struct ConvKernel {
    x: Vec<usize>,
    s: ConvShapes,
    layout: InputLayout,
    /// Tap offsets (in floats) from a window's first input value.
    taps: Vec<usize>,
    /// 1x1, stride 1, unpadded: output pixel p reads input pixel p, so the plane is one run
    /// of pixels, cut into rows of this width (tiles are not cut at the image's rows).
    flat_width: Option<usize>,
    /// `[OC / wblock][groups][KH][KW][group_len][wblock]`, zero-padded to whole `wblock`s.
    weights: Packed<f32>,
    /// Output channels per weight vector: 8 (AVX2, portable) or 16 (AVX-512: two blocks of
    /// the layout in one register).
    wblock: usize,
    /// One value per output channel, zero-padded like the weights.
    bias: Packed<f32>,
    act: Option<UnaryKind>,
    isa: Isa,
}

impl ConvKernel {
    /// `None` when the shapes are not a 2-D group-1 convolution with blocked output
    /// channels (and blocked input channels when `blocked_input`).
    pub(crate) fn new(
        isa: Isa,
        s: ConvShapes,
        blocked_input: bool,
        act: Option<UnaryKind>,
        x: &[usize],
        (w, bias): (&[f32], Option<&[f32]>),
        packs: &Prepacks,
    ) -> Option<Self> {
        let g = &s.geometry;
        if g.input.len() != 2 || !s.out_channels.is_multiple_of(B) {
            return None;
        }
        let (ic, oc) = (s.in_channels, s.out_channels);
        if s.group != 1
            || blocked_input && ic % B != 0
            || w.len() != oc * ic * g.kernel[0] * g.kernel[1]
        {
            return None;
        }
        let (kh, kw) = (g.kernel[0], g.kernel[1]);
        let ph = g.input[0] + g.pad_begin[0] + g.pad_end[0];
        let pw = g.input[1] + g.pad_begin[1] + g.pad_end[1];
        let (groups, group_len, channel_step, pixel) = if blocked_input {
            (ic / B, B, 1, B)
        } else {
            (1, ic, ph * pw, 1)
        };
        let layout = InputLayout {
            groups,
            group_len,
            channel_step,
            pixel,
            ph,
            pw,
        };
        let taps: Vec<usize> = (0..kh * kw)
            .map(|t| ((t / kw) * g.dilations[0] * pw + (t % kw) * g.dilations[1]) * pixel)
            .collect();
        let wblock = if wide(isa) { 2 * B } else { B };
        let oc_padded = oc.next_multiple_of(wblock);
        // Weights: [OC/wblock][groups][KH][KW][group_len][wblock], from an optimized model
        // when it holds them (ferrolite_core::prepacked).
        let kk = kh * kw;
        let desc = [oc_padded, groups, kk, group_len, wblock];
        let weights = packs.take(&desc, oc_padded * ic * kk, || {
            let mut packed = vec![0f32; oc_padded * ic * kk];
            // In the source's order (o, c, tap), with the destination's index built up rather
            // than divided out per value.
            for (o, filter) in w.chunks_exact(ic * kk).enumerate() {
                let o_base = o / wblock * groups;
                for (c, taps) in filter.chunks_exact(kk).enumerate() {
                    let (grp, j) = (c / group_len, c % group_len);
                    let base = (o_base + grp) * kk;
                    for (t, &v) in taps.iter().enumerate() {
                        packed[((base + t) * group_len + j) * wblock + o % wblock] = v;
                    }
                }
            }
            packed
        });
        let bias = packs.take(&[oc_padded], oc_padded, || {
            let mut b = bias.map_or_else(|| vec![0.0; oc], |b| b.to_vec());
            b.resize(oc_padded, 0.0);
            b
        });
        let flat = kh * kw == 1
            && g.strides == [1, 1]
            && g.pad_begin.iter().chain(&g.pad_end).all(|&p| p == 0);
        // Under AVX-512 a flat plane's rows are single tiles: its tiles run in one loop over
        // any run of pixels (`avx512::flat`), and rows that small let the threads split a
        // 7 x 7 plane evenly.
        let flat_width = flat.then_some(if wide(isa) {
            TILE512
        } else {
            8 * tile_width(isa)
        });
        Some(ConvKernel {
            x: x.to_vec(),
            s,
            layout,
            taps,
            flat_width,
            weights,
            wblock,
            bias,
            act,
            isa,
        })
    }

    /// Output-channel blocks per work unit: two AVX2 tiles' worth, or two AVX-512 vectors'.
    fn unit_blocks(&self) -> usize {
        2 * self.wblock / B
    }

    /// Output rows as the work is cut: the image's, or runs of a flat plane.
    fn out_rows(&self) -> usize {
        let g = &self.s.geometry;
        match self.flat_width {
            Some(w) => (g.output[0] * g.output[1]).div_ceil(w),
            None => g.output[0],
        }
    }

    /// Output row `r`'s first pixel (in the plane) and width.
    fn row_span(&self, r: usize) -> (usize, usize) {
        let g = &self.s.geometry;
        let (oh, ow) = (g.output[0], g.output[1]);
        match self.flat_width {
            Some(w) => (r * w, w.min(oh * ow - r * w)),
            None => (r * ow, ow),
        }
    }

    fn pads(&self) -> bool {
        let g = &self.s.geometry;
        g.pad_begin.iter().chain(&g.pad_end).any(|&p| p > 0)
    }

    /// Copies one batch item's input into `dst` with zero padding around every plane.
    fn pad(&self, src: &[f32], dst: &mut [f32]) {
        let g = &self.s.geometry;
        let l = &self.layout;
        let (ih, iw) = (g.input[0], g.input[1]);
        let (pt, pl) = (g.pad_begin[0], g.pad_begin[1]);
        let u = l.pixel;
        let planes = src.len() / (ih * iw * u).max(1);
        let plane = l.ph * l.pw * u;
        split::for_chunks(dst, plane.max(1), 1, |s, out| {
            for (i, d) in out.chunks_exact_mut(plane.max(1)).enumerate() {
                let p = s / plane.max(1) + i;
                if p >= planes {
                    break;
                }
                let sp = &src[p * ih * iw * u..(p + 1) * ih * iw * u];
                super::pad_plane(sp, d, [ih, iw], [pt, pl], l.pw, u);
            }
        });
    }

    /// Output rows `rows` of output-channel blocks `ob..ob + nb` (up to
    /// [`Self::unit_blocks`], `ob` a multiple of it) from the padded input `x`, into `y`
    /// (this batch item's output).
    fn rows(&self, x: &[f32], y: SendPtr, ob: usize, nb: usize, rows: std::ops::Range<usize>) {
        let g = &self.s.geometry;
        let (oh, ow) = (g.output[0], g.output[1]);
        let plane = oh * ow * B;
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 and FMA (the Isa was detected).
            Isa::Avx2Fma => unsafe { avx2::rows(self, x, y, ob, nb, rows.clone()) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX-512F, BW, VL and DQ (the Isa was detected).
            Isa::Avx512 => unsafe { avx512::rows(self, x, y, ob, nb, rows.clone()) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: this call owns the rows (the callers split work by block and row).
            Isa::Neon | Isa::NeonDot => unsafe { neon::rows(self, x, y, ob, nb, rows.clone()) },
            Isa::Portable => self.for_each_tile(x, y, ob, rows.clone(), |t, n, out| {
                assert!(t.fits(n, nb));
                // SAFETY: the reads stay inside the tile's slices (asserted) and `out` holds
                // the tile (for_each_tile's contract).
                unsafe { portable(t, n, nb, out, plane) }
            }),
        }
        let in_tiles = self.isa.has_avx512() && hard_of(self.act).is_some();
        if self.act.is_some() && clamp_of(self.act).is_none() && !in_tiles {
            for oy in rows {
                for b in ob..ob + nb {
                    // SAFETY: this call owns output rows `rows` of blocks ob..ob + nb (the
                    // callers split work by block and row); the tiles wrote every value.
                    let (p0, n) = self.row_span(oy);
                    let row = unsafe {
                        std::slice::from_raw_parts_mut(y.0.add(b * plane + p0 * B), n * B)
                    };
                    activate_row(self.isa, self.act, row);
                }
            }
        }
    }

    /// Calls `f(tile, n, out)` for every tile of output rows `rows` from block `ob`, chunk of
    /// input channels by chunk; `out` points at the tile's first output,
    /// owned by this call (the callers split work by block and row).
    #[inline(always)]
    fn for_each_tile(
        &self,
        x: &[f32],
        y: SendPtr,
        ob: usize,
        rows: std::ops::Range<usize>,
        mut f: impl FnMut(&Tile, usize, *mut f32),
    ) {
        let g = &self.s.geometry;
        let l = &self.layout;
        let (oh, ow) = (g.output[0], g.output[1]);
        let (sh, sw) = (g.strides[0], g.strides[1]);
        let plane = oh * ow * B;
        let wb = self.wblock;
        // Weights per vector of `wb` output channels.
        let wlen = l.groups * self.taps.len() * l.group_len * wb;
        // Input channel groups in chunks whose weights (two blocks) stay in L1 over all the
        // rows: later chunks add to the outputs of the first.
        let per_group = self.taps.len() * l.group_len;
        let chunk = (256 / per_group.max(1)).clamp(1, l.groups.max(1));
        let chunks = l.groups.div_ceil(chunk);
        let clamp = clamp_of(self.act);
        // The AVX-512 tiles apply HardSigmoid and HardSwish in their registers.
        let hard = hard_of(self.act).filter(|_| self.isa.has_avx512());
        for ci in 0..chunks {
            let groups = ci * chunk..((ci + 1) * chunk).min(l.groups.max(1));
            for oy in rows.clone() {
                // Tiles as even as possible: a one-pixel tile would wait on its few chains.
                let (p0, width) = self.row_span(oy);
                let row_x = match self.flat_width {
                    Some(_) => p0 * l.pixel,
                    None => oy * sh * l.pw * l.pixel,
                };
                let tiles = width.div_ceil(tile_width(self.isa));
                let mut ox = 0;
                for i in 0..tiles {
                    let n = width / tiles + usize::from(i < width % tiles);
                    let x0 = row_x + ox * sw * l.pixel;
                    let t = Tile {
                        x: &x[x0..],
                        layout: l,
                        groups: groups.clone(),
                        accumulate: ci > 0,
                        clamp: clamp.filter(|_| ci + 1 == chunks),
                        hard: hard.filter(|_| ci + 1 == chunks),
                        taps: &self.taps,
                        px_step: sw * l.pixel,
                        w: &self.weights[ob * B / wb * wlen..],
                        w_block: wlen,
                        wblock: wb,
                        bias: &self.bias[ob * B..],
                    };
                    // Pixels ox..ox + n lie inside the row, inside the output.
                    let out = y.0.wrapping_add(ob * plane + (p0 + ox) * B);
                    f(&t, n, out);
                    ox += n;
                }
            }
        }
    }
}

impl Kernel for ConvKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let g = &self.s.geometry;
        let out_len = self.s.batch * self.s.out_channels * g.output[0] * g.output[1];
        let y = output(outputs, 0, out_len)?;
        let in_item = x.len() / self.s.batch.max(1);
        let out_item = out_len / self.s.batch.max(1);
        let l = &self.layout;
        let padded_len = l.groups * l.group_stride();
        let blocks = self.s.out_channels / B;
        // Work units: pairs (AVX-512: quads) of output-channel blocks by bands of rows, enough
        // of them to keep every thread busy. An input too big for L2 goes band by band, every
        // unit of blocks reading the band while it is in cache.
        let per_unit = self.unit_blocks();
        let pairs = blocks.div_ceil(per_unit);
        let oh = self.out_rows();
        // Per image.
        let flops = 2 * out_item * self.s.in_channels / self.s.group.max(1)
            * g.kernel.iter().product::<usize>();
        let threads = split::worth(Cost::flops(flops));
        let mut bands = if threads > 1 {
            (4 * threads).div_ceil(pairs)
        } else {
            1
        };
        // Unless the weights are the bigger stream (a wide 1x1 conv on a small plane): then
        // each pair of blocks reads its weights once, over all rows.
        let input_bytes = 4 * padded_len;
        if input_bytes > L2_BYTES && input_bytes > 4 * self.weights.len() {
            bands = bands.max(input_bytes / BAND_BYTES);
        }
        let mut bands = bands.clamp(1, oh.max(1));
        // Whole rounds of units for the threads: three units of blocks in three bands were
        // nine units, five for one thread and four for the other.
        while threads > 1 && !(pairs * bands).is_multiple_of(threads) && bands < oh {
            bands += 1;
        }
        scratch.with_shared(|shared| -> OpResult<()> {
            // The padded copy of one image.
            let buf: &mut [f32] = shared.take(if self.pads() { padded_len } else { 0 })?;
            for (xi, yi) in x
                .chunks_exact(in_item.max(1))
                .zip(y.chunks_exact_mut(out_item.max(1)))
            {
                let src: &[f32] = if self.pads() {
                    self.pad(xi, buf);
                    buf
                } else {
                    xi
                };
                let yp = SendPtr(yi.as_mut_ptr());
                let unit = |u: usize| {
                    let (part, pair) = (u / pairs, u % pairs);
                    let ob = pair * per_unit;
                    let nb = per_unit.min(blocks - ob);
                    // The bands' rows as even as the rows allow.
                    let rows = part * oh / bands..(part + 1) * oh / bands;
                    self.rows(src, yp, ob, nb, rows);
                };
                let units = pairs * bands;
                split::for_each_task(units, threads > 1, unit);
            }
            Ok(())
        })
    }

    fn name(&self) -> &str {
        "cpu.nchwc.conv"
    }

    fn scratch(&self, _threads: usize) -> ScratchNeed {
        let l = &self.layout;
        let padded = if self.pads() {
            l.groups * l.group_stride()
        } else {
            0
        };
        ScratchNeed::for_run(bytes_for::<f32>(padded))
    }

    fn prepacked_bytes(&self) -> usize {
        size_of_val(self.weights.as_slice()) + size_of_val(self.bias.as_slice())
    }
}

/// `clamp(alpha x + beta, 0, 1)`, times `x` when `times_x`: HardSigmoid and HardSwish.
#[derive(Clone, Copy, Debug)]
struct Hard {
    alpha: f32,
    beta: f32,
    times_x: bool,
}

/// The activations the AVX-512 tiles apply in their registers beyond Relu and Clip.
fn hard_of(act: Option<UnaryKind>) -> Option<Hard> {
    match act? {
        UnaryKind::HardSigmoid { alpha, beta } => Some(Hard {
            alpha,
            beta,
            times_x: false,
        }),
        UnaryKind::HardSwish => Some(Hard {
            alpha: 1.0 / 6.0,
            beta: 0.5,
            times_x: true,
        }),
        _ => None,
    }
}

/// One row tile's operands.
struct Tile<'a> {
    /// The input from the tile's first window.
    x: &'a [f32],
    layout: &'a InputLayout,
    /// The input channel groups to sum over, into the output's values when
    /// `accumulate`, else from the bias.
    groups: std::ops::Range<usize>,
    accumulate: bool,
    /// Bounds every final value is clamped to (Relu, Clip).
    clamp: Option<(f32, f32)>,
    /// HardSigmoid or HardSwish on every final value (AVX-512 tiles only, see [`hard_of`]).
    hard: Option<Hard>,
    taps: &'a [usize],
    px_step: usize,
    /// The first block's weights and the distance to the next vector's (of `wblock` output
    /// channels).
    w: &'a [f32],
    w_block: usize,
    wblock: usize,
    bias: &'a [f32],
}

impl Tile<'_> {
    /// Whether every value a tile of `n` pixels and `nb` blocks of eight reads lies inside
    /// `x`, `w` and the bias.
    #[inline(always)]
    fn fits(&self, n: usize, nb: usize) -> bool {
        let nv = (nb * B).div_ceil(self.wblock);
        let l = self.layout;
        let last_px = (n - 1) * self.px_step + self.taps.last().copied().unwrap_or(0);
        let last_ch = (l.group_len - 1) * l.channel_step;
        let groups = self.groups.end;
        let reach_x = (groups.max(1) - 1) * l.group_stride() + last_px + last_ch + 1;
        let reach_w =
            (nv - 1) * self.w_block + groups * self.taps.len() * l.group_len * self.wblock;
        reach_x <= self.x.len() && reach_w <= self.w.len() && nv * self.wblock <= self.bias.len()
    }
}

/// The tile in plain Rust.
///
/// # Safety
/// `out` must hold `n` pixels of `nb` blocks at block stride `plane`; the reads must stay
/// inside the tile's slices (`Tile::fits`).
unsafe fn portable(t: &Tile, n: usize, nb: usize, out: *mut f32, plane: usize) {
    let l = t.layout;
    let mut acc = [[[0f32; B]; TILE]; 2];
    for (b, a) in acc.iter_mut().enumerate().take(nb) {
        for (i, p) in a.iter_mut().enumerate().take(n) {
            if t.accumulate {
                // SAFETY: the caller's contract (`out` holds the tile).
                let o = unsafe { std::slice::from_raw_parts(out.add(b * plane + i * B), B) };
                p.copy_from_slice(o);
            } else {
                p.copy_from_slice(&t.bias[b * B..b * B + B]);
            }
        }
    }
    let ntaps = t.taps.len();
    for grp in t.groups.clone() {
        for (ti, &off) in t.taps.iter().enumerate() {
            let xg = grp * l.group_stride() + off;
            let wg = (grp * ntaps + ti) * l.group_len * B;
            for c in 0..l.group_len {
                for (b, ab) in acc.iter_mut().enumerate().take(nb) {
                    let w = &t.w[b * t.w_block + wg + c * B..][..B];
                    for (p, a) in ab.iter_mut().enumerate().take(n) {
                        let x = t.x[xg + c * l.channel_step + p * t.px_step];
                        for j in 0..B {
                            a[j] += x * w[j];
                        }
                    }
                }
            }
        }
    }
    if let Some((lo, hi)) = t.clamp {
        for v in acc.iter_mut().flatten().flatten() {
            *v = v.max(lo).min(hi);
        }
    }
    for (b, ab) in acc.iter().enumerate().take(nb) {
        for (p, a) in ab.iter().enumerate().take(n) {
            // SAFETY: the caller's contract.
            unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), out.add(b * plane + p * B), B) };
        }
    }
}

/// Calls an ISA module's `$tile::<P, NB, LEN>` (`P` pixels of up to [`TILE`], `NB` blocks,
/// `LEN` channels a group: 8 for a blocked input and 3 for an RGB image unroll the channel
/// loop, 0 for any other) for `n` pixels and `nb` blocks. Expands to an unsafe call: the
/// caller's contract is the tile function's.
#[allow(unused_macros)]
macro_rules! dispatch_tile {
    ($tile:ident, $t:expr, $n:expr, $nb:expr, $out:expr, $plane:expr) => {{
        macro_rules! go {
            ($p:literal) => {
                match ($nb, $t.layout.group_len) {
                    (2, B) => $tile::<$p, 2, B>($t, $out, $plane),
                    (2, 3) => $tile::<$p, 2, 3>($t, $out, $plane),
                    (2, _) => $tile::<$p, 2, 0>($t, $out, $plane),
                    (_, B) => $tile::<$p, 1, B>($t, $out, $plane),
                    (_, 3) => $tile::<$p, 1, 3>($t, $out, $plane),
                    (_, _) => $tile::<$p, 1, 0>($t, $out, $plane),
                }
            };
        }
        const _: () = assert!(TILE == 5);
        match $n {
            5 => go!(5),
            4 => go!(4),
            3 => go!(3),
            2 => go!(2),
            _ => go!(1),
        }
    }};
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{ConvKernel, SendPtr, Tile, B, TILE};
    use std::arch::x86_64::*;

    /// [`ConvKernel::rows`]'s tiles, inlined into one AVX2 function.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; the call must own the rows (as `rows`).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows(
        k: &ConvKernel,
        x: &[f32],
        y: SendPtr,
        ob: usize,
        nb: usize,
        rows: std::ops::Range<usize>,
    ) {
        let g = &k.s.geometry;
        let plane = g.output[0] * g.output[1] * B;
        k.for_each_tile(x, y, ob, rows, |t, n, out| {
            assert!(t.fits(n, nb));
            // SAFETY: the CPU has AVX2 and FMA (the caller's contract); the reads stay inside
            // the tile's slices (asserted) and `out` holds the tile (for_each_tile's contract).
            unsafe { conv(t, n, nb, out, plane) }
        })
    }

    /// An ordinary convolution's tile: dispatches to the monomorphised kernels.
    ///
    /// # Safety
    /// As `portable`, and the CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn conv(t: &Tile, n: usize, nb: usize, out: *mut f32, plane: usize) {
        // SAFETY: the caller's contract.
        unsafe { dispatch_tile!(conv_tile, t, n, nb, out, plane) }
    }

    /// `P` pixels of `NB` blocks; `LEN` channels per group when known (8: a blocked input,
    /// one float apart; 3: an RGB image's planes), so the channel loop is unrolled, or 0.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn conv_tile<const P: usize, const NB: usize, const LEN: usize>(
        t: &Tile,
        out: *mut f32,
        plane: usize,
    ) {
        let l = t.layout;
        let (x, w) = (t.x.as_ptr(), t.w.as_ptr());
        // Pixel-major, like the GEMM microkernel's rows: each broadcast feeds both blocks.
        let mut acc = [[_mm256_setzero_ps(); NB]; P];
        for (p, a) in acc.iter_mut().enumerate() {
            for (b, v) in a.iter_mut().enumerate() {
                // SAFETY: `out` holds the tile (the caller's contract); the bias NB blocks
                // (Tile::fits).
                *v = unsafe {
                    if t.accumulate {
                        _mm256_loadu_ps(out.add(b * plane + p * B))
                    } else {
                        _mm256_loadu_ps(t.bias.as_ptr().add(b * B))
                    }
                };
            }
        }
        let (len, step) = match LEN {
            B => (B, 1),
            0 => (l.group_len, l.channel_step),
            n => (n, l.channel_step),
        };
        let (ntaps, gs, px, wb) = (t.taps.len(), l.group_stride(), t.px_step, t.w_block);
        for grp in t.groups.clone() {
            for (ti, &off) in t.taps.iter().enumerate() {
                // SAFETY (all reads below): inside `x` and `w` (Tile::fits).
                unsafe {
                    let xp = x.add(grp * gs + off);
                    let wp = w.add((grp * ntaps + ti) * len * B);
                    for c in 0..len {
                        channel::<P, NB>(&mut acc, xp.add(c * step), px, wp.add(c * B), wb);
                    }
                }
            }
        }
        for (p, a) in acc.iter().enumerate() {
            for (b, v) in a.iter().enumerate() {
                // SAFETY: `out` holds the tile (the caller's contract).
                unsafe { _mm256_storeu_ps(out.add(b * plane + p * B), clamp(t, *v)) };
            }
        }
    }

    /// One input channel's step: `acc[p][b] += x[p * px] * w[b * wb..][..8]`.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; the reads must lie inside the input and weights.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn channel<const P: usize, const NB: usize>(
        acc: &mut [[__m256; NB]; P],
        x: *const f32,
        px: usize,
        w: *const f32,
        wb: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let mut wv = [_mm256_setzero_ps(); NB];
            for (b, v) in wv.iter_mut().enumerate() {
                *v = _mm256_loadu_ps(w.add(b * wb));
            }
            for (p, row) in acc.iter_mut().enumerate() {
                let xv = _mm256_broadcast_ss(&*x.add(p * px));
                for (a, wv) in row.iter_mut().zip(&wv) {
                    *a = _mm256_fmadd_ps(*wv, xv, *a);
                }
            }
        }
    }

    /// `v` clamped to the tile's bounds: `max_ps(v, lo)` is `lo` for a NaN `v`, as `f32::max`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn clamp(t: &Tile, v: __m256) -> __m256 {
        match t.clamp {
            Some((lo, hi)) => {
                _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(lo)), _mm256_set1_ps(hi))
            }
            None => v,
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{clamp_of, hard_of, ConvKernel, Hard, SendPtr, Tile, B, TILE512};
    use std::arch::x86_64::*;

    /// [`ConvKernel::rows`]'s tiles, inlined into one AVX-512 function.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, BW, VL and DQ; the call must own the rows (as `rows`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    pub(super) unsafe fn rows(
        k: &ConvKernel,
        x: &[f32],
        y: SendPtr,
        ob: usize,
        nb: usize,
        rows: std::ops::Range<usize>,
    ) {
        let g = &k.s.geometry;
        let plane = g.output[0] * g.output[1] * B;
        if k.flat_width.is_some() && k.layout.pixel == B {
            if rows.is_empty() {
                return;
            }
            let (p0, _) = k.row_span(rows.start);
            let (p1, n1) = k.row_span(rows.end - 1);
            let pixels = p0..p1 + n1;
            // SAFETY: the caller's contract; `flat` checks the sizes it relies on.
            unsafe {
                match nb {
                    1 => flat::<0, true>(k, x, y, ob, nb, pixels),
                    2 => flat::<1, false>(k, x, y, ob, nb, pixels),
                    3 => flat::<1, true>(k, x, y, ob, nb, pixels),
                    _ => flat::<2, false>(k, x, y, ob, nb, pixels),
                }
            }
            return;
        }
        k.for_each_tile(x, y, ob, rows, |t, n, out| {
            assert!(t.fits(n, nb) && t.wblock == 2 * B && nb <= 4);
            // SAFETY: the CPU has AVX-512 (the caller's contract); the reads stay inside the
            // tile's slices (asserted) and `out` holds the tile (for_each_tile's contract).
            unsafe { conv(t, n, nb, out, plane) }
        })
    }

    /// A flat 1x1 convolution (stride 1, no padding, blocked input) on output pixels
    /// `pixels` of blocks `ob..ob + nb` (`nb` = `2 NV`, plus one when `HALF`: an odd last
    /// block in a 256-bit register, which Zen 4 multiplies at half a zmm's cost where a
    /// zero-padded zmm cost a whole one): the tiles of eight pixels in one loop, everything
    /// a tile needs but its pixels worked out once.
    /// Through [`ConvKernel::for_each_tile`], which builds and checks a `Tile` and
    /// dispatches on its size for every eight pixels, the short-depth pointwise layers
    /// (16 to 32 input channels: 256 to 512 multiply-adds a tile) spent about a third of
    /// their time outside the multiply-adds: mobilenet_v2's 16 -> 96 expansion at 112 x 112
    /// ran at 70-75 GFLOP/s on one Zen 4 core, where this loop runs at 100 or more.
    ///
    /// # Safety
    /// The CPU must support AVX-512F, BW, VL and DQ; the call must own these pixels of
    /// these blocks (as `rows`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    unsafe fn flat<const NV: usize, const HALF: bool>(
        k: &ConvKernel,
        x: &[f32],
        y: SendPtr,
        ob: usize,
        nb: usize,
        pixels: std::ops::Range<usize>,
    ) {
        let g = &k.s.geometry;
        let hw = g.output[0] * g.output[1];
        let l = &k.layout;
        let (plane, wb) = (hw * B, k.wblock);
        let groups = l.groups;
        // Weights per vector of 16 output channels: [groups][8][16].
        let wlen = groups * B * wb;
        let w = &k.weights[ob * B / wb * wlen..];
        let bias = &k.bias[ob * B..];
        let vectors = NV + usize::from(HALF);
        assert!(wb == 2 * B && 2 * NV + usize::from(HALF) == nb && ob.is_multiple_of(2));
        assert!(pixels.end <= hw && x.len() >= groups * plane);
        assert!(w.len() >= vectors * wlen && bias.len() >= vectors * wb);
        // Input channel groups in chunks (as for_each_tile): later chunks add to the
        // outputs of the first.
        let chunk = (256 / B).clamp(1, groups.max(1));
        let chunks = groups.div_ceil(chunk);
        let clamp = clamp_of(k.act);
        let hard = hard_of(k.act);
        let (x, w, b, y) = (x.as_ptr(), w.as_ptr(), bias.as_ptr(), y.0);
        for ci in 0..chunks {
            let grp = ci * chunk..((ci + 1) * chunk).min(groups);
            let last = ci + 1 == chunks;
            let epi = Epi {
                accumulate: ci > 0,
                clamp: clamp.filter(|_| last),
                hard: hard.filter(|_| last),
            };
            // Tiles as even as possible (49 pixels as seven of seven, not six of eight and
            // a lone pixel waiting on its chains of multiply-adds).
            let n = pixels.len();
            let tiles = n.div_ceil(8);
            let mut p = pixels.start;
            for i in 0..tiles {
                let len = n / tiles + usize::from(i < n % tiles);
                let grp = grp.clone();
                macro_rules! tile {
                    ($p:literal) => {
                        flat_tile::<$p, NV, HALF>(x, w, b, y, p, grp, plane, wlen, ob, epi)
                    };
                }
                // SAFETY (all tiles): pixels p..p + len of the plane (asserted inside it),
                // input groups grp of `x` (asserted), NV vectors of weights and bias
                // (asserted); the output blocks ob..ob + nb at these pixels are this call's.
                unsafe {
                    match len {
                        8 => tile!(8),
                        7 => tile!(7),
                        6 => tile!(6),
                        5 => tile!(5),
                        4 => tile!(4),
                        3 => tile!(3),
                        2 => tile!(2),
                        _ => tile!(1),
                    }
                }
                p += len;
            }
        }
    }

    /// What a flat tile does around its multiply-adds.
    #[derive(Clone, Copy)]
    struct Epi {
        /// Start from the output's values (a later chunk of input channels), else the bias.
        accumulate: bool,
        clamp: Option<(f32, f32)>,
        hard: Option<super::Hard>,
    }

    /// `P` pixels from pixel `p` of [`flat`]'s blocks: `x` the input (groups `plane`
    /// apart), `w` the unit's weights (vectors `wlen` apart), `b` its bias, `y` the output.
    ///
    /// # Safety
    /// As [`flat`] for these pixels.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn flat_tile<const P: usize, const NV: usize, const HALF: bool>(
        x: *const f32,
        w: *const f32,
        b: *const f32,
        y: *mut f32,
        p: usize,
        groups: std::ops::Range<usize>,
        plane: usize,
        wlen: usize,
        ob: usize,
        epi: Epi,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let out = y.add(ob * plane + p * B);
            // Block `j`'s value at pixel i.
            let at = |j: usize, i: usize| out.add(j * plane + i * B);
            let mut acc = [[_mm512_setzero_ps(); NV]; P];
            let mut half = [_mm256_setzero_ps(); P];
            for i in 0..P {
                for (v, r) in acc[i].iter_mut().enumerate() {
                    *r = if epi.accumulate {
                        let lo = _mm256_loadu_ps(at(2 * v, i));
                        let hi = _mm256_loadu_ps(at(2 * v + 1, i));
                        _mm512_insertf32x8::<1>(_mm512_castps256_ps512(lo), hi)
                    } else {
                        _mm512_loadu_ps(b.add(v * 2 * B))
                    };
                }
                if HALF {
                    half[i] = if epi.accumulate {
                        _mm256_loadu_ps(at(2 * NV, i))
                    } else {
                        _mm256_loadu_ps(b.add(NV * 2 * B))
                    };
                }
            }
            for g in groups {
                let xp = x.add(g * plane + p * B);
                let wp = w.add(g * B * 2 * B);
                for c in 0..B {
                    let wc = wp.add(c * 2 * B);
                    let wv: [__m512; NV] =
                        std::array::from_fn(|v| _mm512_loadu_ps(wc.add(v * wlen)));
                    let wh = if HALF {
                        _mm256_loadu_ps(wc.add(NV * wlen))
                    } else {
                        _mm256_setzero_ps()
                    };
                    for i in 0..P {
                        let xv = _mm512_set1_ps(*xp.add(i * B + c));
                        for (a, wv) in acc[i].iter_mut().zip(&wv) {
                            *a = _mm512_fmadd_ps(*wv, xv, *a);
                        }
                        if HALF {
                            half[i] = _mm256_fmadd_ps(wh, _mm512_castps512_ps256(xv), half[i]);
                        }
                    }
                }
            }
            for i in 0..P {
                for (v, r) in acc[i].iter().enumerate() {
                    let r = bound(epi.clamp, epi.hard, *r);
                    _mm256_storeu_ps(at(2 * v, i), _mm512_castps512_ps256(r));
                    _mm256_storeu_ps(at(2 * v + 1, i), _mm512_extractf32x8_ps::<1>(r));
                }
                if HALF {
                    let r = bound(epi.clamp, epi.hard, _mm512_castps256_ps512(half[i]));
                    _mm256_storeu_ps(at(2 * NV, i), _mm512_castps512_ps256(r));
                }
            }
        }
    }

    /// An ordinary convolution's tile of `n` pixels and `nb` blocks of eight: dispatches to
    /// the monomorphised kernels.
    ///
    /// # Safety
    /// As `portable`, and the CPU must support AVX-512F, BW, VL and DQ.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    unsafe fn conv(t: &Tile, n: usize, nb: usize, out: *mut f32, plane: usize) {
        macro_rules! go {
            ($p:literal) => {
                // SAFETY: the caller's contract.
                unsafe {
                    // A plain input's channels (an RGB image's three planes) go through
                    // the loop one at a time: unrolled, LLVM hoisted all three channels'
                    // broadcasts and spilled accumulators (the 7x7 stem ran at 60% of the
                    // blocked convs' speed).
                    match (nb > 2, t.layout.group_len) {
                        (true, B) => conv_tile::<$p, 2, B>(t, nb, out, plane),
                        (true, _) => conv_tile::<$p, 2, 0>(t, nb, out, plane),
                        (false, B) => conv_tile::<$p, 1, B>(t, nb, out, plane),
                        (false, _) => conv_tile::<$p, 1, 0>(t, nb, out, plane),
                    }
                }
            };
        }
        const _: () = assert!(TILE512 == 8);
        match n {
            8 => go!(8),
            7 => go!(7),
            6 => go!(6),
            5 => go!(5),
            4 => go!(4),
            3 => go!(3),
            2 => go!(2),
            _ => go!(1),
        }
    }

    /// `P` pixels of `NV` vectors of sixteen output channels (blocks `2v` and `2v + 1` of
    /// the layout in vector `v`; `nb` blocks are real, the rest of the last vector is zero
    /// padding and not stored); `LEN` as in the AVX2 tile.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    unsafe fn conv_tile<const P: usize, const NV: usize, const LEN: usize>(
        t: &Tile,
        nb: usize,
        out: *mut f32,
        plane: usize,
    ) {
        let l = t.layout;
        let (x, w) = (t.x.as_ptr(), t.w.as_ptr());
        let mut acc = [[_mm512_setzero_ps(); NV]; P];
        for (p, a) in acc.iter_mut().enumerate() {
            for (v, r) in a.iter_mut().enumerate() {
                // SAFETY: `out` holds the tile's nb blocks (the caller's contract); the bias
                // holds NV vectors (Tile::fits).
                *r = unsafe {
                    if t.accumulate {
                        let lo = _mm256_loadu_ps(out.add(2 * v * plane + p * B));
                        let hi = if 2 * v + 1 < nb {
                            _mm256_loadu_ps(out.add((2 * v + 1) * plane + p * B))
                        } else {
                            _mm256_setzero_ps()
                        };
                        _mm512_insertf32x8::<1>(_mm512_castps256_ps512(lo), hi)
                    } else {
                        _mm512_loadu_ps(t.bias.as_ptr().add(v * 2 * B))
                    }
                };
            }
        }
        let (len, step) = match LEN {
            B => (B, 1),
            0 => (l.group_len, l.channel_step),
            n => (n, l.channel_step),
        };
        let wide = 2 * B;
        let (ntaps, gs, px, wb) = (t.taps.len(), l.group_stride(), t.px_step, t.w_block);
        for grp in t.groups.clone() {
            for (ti, &off) in t.taps.iter().enumerate() {
                // SAFETY (all reads below): inside `x` and `w` (Tile::fits).
                unsafe {
                    let xp = x.add(grp * gs + off);
                    let wp = w.add((grp * ntaps + ti) * len * wide);
                    for c in 0..len {
                        channel::<P, NV>(&mut acc, xp.add(c * step), px, wp.add(c * wide), wb);
                    }
                }
            }
        }
        for (p, a) in acc.iter().enumerate() {
            for (v, r) in a.iter().enumerate() {
                let r = clamp(t, *r);
                // SAFETY: `out` holds the tile's nb blocks (the caller's contract).
                unsafe {
                    let lo = _mm512_castps512_ps256(r);
                    _mm256_storeu_ps(out.add(2 * v * plane + p * B), lo);
                    if 2 * v + 1 < nb {
                        let hi = _mm512_extractf32x8_ps::<1>(r);
                        _mm256_storeu_ps(out.add((2 * v + 1) * plane + p * B), hi);
                    }
                }
            }
        }
    }

    /// One input channel's step: `acc[p][v] += x[p * px] * w[v * wb..][..16]`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; the reads must lie inside the input and weights.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    #[inline]
    unsafe fn channel<const P: usize, const NV: usize>(
        acc: &mut [[__m512; NV]; P],
        x: *const f32,
        px: usize,
        w: *const f32,
        wb: usize,
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            let mut wv = [_mm512_setzero_ps(); NV];
            for (v, r) in wv.iter_mut().enumerate() {
                *r = _mm512_loadu_ps(w.add(v * wb));
            }
            for (p, row) in acc.iter_mut().enumerate() {
                let xv = _mm512_set1_ps(*x.add(p * px));
                for (a, wv) in row.iter_mut().zip(&wv) {
                    *a = _mm512_fmadd_ps(*wv, xv, *a);
                }
            }
        }
    }

    /// `v` clamped to the tile's bounds, as the AVX2 tile's `clamp`, or through its
    /// HardSigmoid or HardSwish.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    #[inline]
    fn clamp(t: &Tile, v: __m512) -> __m512 {
        bound(t.clamp, t.hard, v)
    }

    /// `v` clamped to `clamp`, or through `hard` (HardSigmoid or HardSwish).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
    #[inline]
    fn bound(clamp: Option<(f32, f32)>, hard: Option<Hard>, v: __m512) -> __m512 {
        if let Some(h) = hard {
            let g = _mm512_fmadd_ps(v, _mm512_set1_ps(h.alpha), _mm512_set1_ps(h.beta));
            let g = _mm512_min_ps(_mm512_max_ps(g, _mm512_setzero_ps()), _mm512_set1_ps(1.0));
            return if h.times_x { _mm512_mul_ps(v, g) } else { g };
        }
        match clamp {
            Some((lo, hi)) => {
                _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(hi))
            }
            None => v,
        }
    }
}

/// The AVX2 tiles' NEON twin: a block of eight channels is two 4-lane vectors, so the five
/// pixels by two blocks take twenty of aarch64's 32 registers, the weights four.
#[cfg(target_arch = "aarch64")]
mod neon {
    use super::{ConvKernel, SendPtr, Tile, B, TILE};
    use std::arch::aarch64::*;

    /// Vectors of a block.
    const VB: usize = B / 4;

    /// [`ConvKernel::rows`]'s tiles.
    ///
    /// # Safety
    /// The call must own the rows (as `rows`).
    pub(super) unsafe fn rows(
        k: &ConvKernel,
        x: &[f32],
        y: SendPtr,
        ob: usize,
        nb: usize,
        rows: std::ops::Range<usize>,
    ) {
        let g = &k.s.geometry;
        let plane = g.output[0] * g.output[1] * B;
        k.for_each_tile(x, y, ob, rows, |t, n, out| {
            assert!(t.fits(n, nb));
            // SAFETY: the reads stay inside the tile's slices (asserted) and `out` holds the
            // tile (for_each_tile's contract).
            unsafe { conv(t, n, nb, out, plane) }
        })
    }

    /// An ordinary convolution's tile: dispatches to the monomorphised kernels.
    ///
    /// # Safety
    /// As `portable`.
    unsafe fn conv(t: &Tile, n: usize, nb: usize, out: *mut f32, plane: usize) {
        // SAFETY: the caller's contract.
        unsafe { dispatch_tile!(conv_tile, t, n, nb, out, plane) }
    }

    /// `P` pixels of `NB` blocks; `LEN` channels per group when known (8: a blocked input;
    /// 3: an RGB image), so the channel loop is unrolled, or 0.
    ///
    /// # Safety
    /// As `portable`.
    #[inline]
    unsafe fn conv_tile<const P: usize, const NB: usize, const LEN: usize>(
        t: &Tile,
        out: *mut f32,
        plane: usize,
    ) {
        let l = t.layout;
        let (x, w) = (t.x.as_ptr(), t.w.as_ptr());
        let mut acc = [[[vdupq_n_f32(0.0); VB]; NB]; P];
        for (p, a) in acc.iter_mut().enumerate() {
            for (b, v) in a.iter_mut().enumerate() {
                for (h, v) in v.iter_mut().enumerate() {
                    // SAFETY: `out` holds the tile (the caller's contract); the bias NB
                    // blocks (Tile::fits).
                    *v = unsafe {
                        if t.accumulate {
                            vld1q_f32(out.add(b * plane + p * B + 4 * h))
                        } else {
                            vld1q_f32(t.bias.as_ptr().add(b * B + 4 * h))
                        }
                    };
                }
            }
        }
        let (len, step) = match LEN {
            B => (B, 1),
            0 => (l.group_len, l.channel_step),
            n => (n, l.channel_step),
        };
        let (ntaps, gs, px, wb) = (t.taps.len(), l.group_stride(), t.px_step, t.w_block);
        for grp in t.groups.clone() {
            for (ti, &off) in t.taps.iter().enumerate() {
                // SAFETY (all reads below): inside `x` and `w` (Tile::fits).
                unsafe {
                    let xp = x.add(grp * gs + off);
                    let wp = w.add((grp * ntaps + ti) * len * B);
                    for c in 0..len {
                        let xc = xp.add(c * step);
                        let wc = wp.add(c * B);
                        let wv: [[float32x4_t; VB]; NB] = std::array::from_fn(|b| {
                            std::array::from_fn(|h| vld1q_f32(wc.add(b * wb + 4 * h)))
                        });
                        for (p, row) in acc.iter_mut().enumerate() {
                            let xv = *xc.add(p * px);
                            for (a, wv) in row.iter_mut().zip(&wv) {
                                for (a, &wv) in a.iter_mut().zip(wv) {
                                    *a = vfmaq_n_f32(*a, wv, xv);
                                }
                            }
                        }
                    }
                }
            }
        }
        let bounds = t.clamp.map(|(lo, hi)| (vdupq_n_f32(lo), vdupq_n_f32(hi)));
        for (p, a) in acc.iter().enumerate() {
            for (b, v) in a.iter().enumerate() {
                for (h, &v) in v.iter().enumerate() {
                    // `vmaxq_f32` returns NaN for a NaN lane where `f32::max` returns the
                    // bound; `vmaxnmq_f32` matches `f32::max`.
                    let v = match bounds {
                        Some((lo, hi)) => vminnmq_f32(vmaxnmq_f32(v, lo), hi),
                        None => v,
                    };
                    // SAFETY: `out` holds the tile (the caller's contract).
                    unsafe { vst1q_f32(out.add(b * plane + p * B + 4 * h), v) };
                }
            }
        }
    }
}
