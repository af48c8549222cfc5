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
    isa.table().nchwc.conv.wide
}

/// [`ConvKernel::rows`]'s tiles: (kernel, x, y, ob, nb, rows).
///
/// # Safety
/// The call must own the rows (as `rows`).
pub(crate) type RowsFn =
    unsafe fn(&ConvKernel, &[f32], SendPtr, usize, usize, std::ops::Range<usize>);

/// The blocked direct convolution's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    pub(crate) rows: RowsFn,
    /// 16-channel tiles (two blocks a register), which also apply HardSigmoid and HardSwish
    /// in their registers.
    pub(crate) wide: bool,
}

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    rows: portable_rows,
    wide: false,
};

#[cfg(target_arch = "x86_64")]
pub(crate) const AVX2: Kernels = Kernels {
    rows: avx2::rows,
    wide: false,
};

#[cfg(target_arch = "x86_64")]
pub(crate) const AVX512: Kernels = Kernels {
    rows: avx512::rows,
    wide: true,
};

#[cfg(target_arch = "aarch64")]
pub(crate) const NEON: Kernels = Kernels {
    rows: neon::rows,
    wide: false,
};

/// [`RowsFn`] in plain Rust.
///
/// # Safety
/// As [`RowsFn`].
unsafe fn portable_rows(
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
        unsafe { portable(t, n, nb, out, plane) }
    })
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
        let kernels = &self.isa.table().nchwc.conv;
        // SAFETY: the ISA's tiles run on a CPU with its features (`Isa::table`); this call
        // owns the rows (the callers split work by block and row).
        unsafe { (kernels.rows)(self, x, y, ob, nb, rows.clone()) };
        let in_tiles = kernels.wide && hard_of(self.act).is_some();
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
        let hard = hard_of(self.act).filter(|_| wide(self.isa));
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
mod avx2;

#[cfg(target_arch = "x86_64")]
mod avx512;

/// The AVX2 tiles' NEON twin: a block of eight channels is two 4-lane vectors, so the five
/// pixels by two blocks take twenty of aarch64's 32 registers, the weights four.
#[cfg(target_arch = "aarch64")]
mod neon;
