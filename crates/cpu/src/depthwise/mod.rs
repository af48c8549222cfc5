//! Direct 2-D depthwise convolution (group == C == M): each input plane is copied once into a
//! zero-padded, stride-deinterleaved buffer, so every kernel tap becomes a contiguous
//! multiply-add along the output row (vectorised by the compiler, and compiled per ISA in
//! `depthwise/avx2.rs`, reached through the ISA's table). 3x3 kernels sum all nine taps in one pass; at
//! stride 1 the whole plane is one flat run (see `Plane::flat`).
//!
//! Small planes (short output rows) give that row path too little to vectorise, so they take
//! a channel-blocked path instead: 8 channels are interleaved into a zero-padded
//! `[hp][wp][8]` buffer and every output pixel accumulates its 8 lanes over the taps, with the
//! weights repacked as `[taps][8]` per block of 8 channels.

use crate::sgemm::{activate, Isa};
use crate::split::{self, Cost};
use crate::stride2;
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::plan::Kernel;
use ferrolite_core::{op_ensure, OpError, OpResult, Tensor};

/// Geometry of one plane.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plane {
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    pt: usize,
    pl: usize,
    /// Padded rows and the length of one deinterleaved phase of a padded row.
    hp: usize,
    lp: usize,
    /// Padded row length (channel-blocked path).
    wp: usize,
}

/// Channels processed together by the channel-blocked path.
const LANES: usize = 8;
type Lanes = [f32; LANES];

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;

/// The SIMD pieces that the depthwise loops are generic over: plain Rust here ([`Plain`]),
/// intrinsics in the per-ISA files. The loops compiled with an ISA's features and its `Simd`
/// fill that ISA's [`Kernels`].
trait Simd {
    /// [`weighted_taps`] for nine taps; false where the ISA has no such loop.
    fn taps9(src: &[f32], offs: &[usize; 9], w: &[f32; 9], bias: f32, out: &mut [f32]) -> bool;
    /// `PX` adjacent output pixels whose receptive fields start at `buf[base + px * step]`,
    /// written as `[PX][8]` into `out`.
    #[allow(clippy::too_many_arguments)]
    fn blocked_pixels<const PX: usize>(
        buf: &[f32],
        taps: &Taps,
        w: &[Lanes],
        bias: &Lanes,
        base: usize,
        step: usize,
        out: &mut [f32],
    );
    /// Transposes an 8x8 block: `out[j][i] = rows[i][j]`.
    fn transpose8(rows: [&Lanes; LANES]) -> [Lanes; LANES];
}

/// Plain Rust (and NEON, aarch64's baseline, to which the plain loops vectorise).
struct Plain;

impl Simd for Plain {
    #[inline(always)]
    fn taps9(_: &[f32], _: &[usize; 9], _: &[f32; 9], _: f32, _: &mut [f32]) -> bool {
        false
    }

    #[inline(always)]
    fn blocked_pixels<const PX: usize>(
        buf: &[f32],
        taps: &Taps,
        w: &[Lanes],
        bias: &Lanes,
        base: usize,
        step: usize,
        out: &mut [f32],
    ) {
        blocked_pixels_plain::<PX>(buf, taps, w, bias, base, step, out)
    }

    #[inline(always)]
    fn transpose8(rows: [&Lanes; LANES]) -> [Lanes; LANES] {
        std::array::from_fn(|j| std::array::from_fn(|i| rows[i][j]))
    }
}

/// One output plane of the row path: (plane, x, w, bias, activation, y, scratch).
pub(crate) type PlaneFn =
    fn(&Plane, &[f32], &[f32], f32, Option<UnaryKind>, &mut [f32], &mut PlaneScratch);
/// One block of up to 8 channels of the channel-blocked path: (plane, taps, x, w, bias,
/// activation, y, channels, buffer).
pub(crate) type BlockedFn = fn(
    &Plane,
    &Taps,
    &[f32],
    &[Lanes],
    &Lanes,
    Option<UnaryKind>,
    &mut [f32],
    usize,
    &mut Vec<f32>,
);

/// The depthwise family's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    pub(crate) plane: PlaneFn,
    pub(crate) blocked: BlockedFn,
}

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    plane: |p, x, w, bias, act, y, scratch| {
        plane::<Plain>(Isa::Portable, p, x, w, bias, act, y, scratch)
    },
    blocked: blocked::<Plain>,
};

/// Output rows at most this long take the channel-blocked path, which always takes non-3x3
/// kernels. Measured: the flat stride-1 run wins from 28-wide rows (not at 14), the
/// stride-2 row path only above 32.
const BLOCKED_MAX_OW_STRIDE1: usize = 20;
const BLOCKED_MAX_OW: usize = 32;

#[derive(Debug)]
pub struct DepthwiseKernel {
    isa: Isa,
    p: Plane,
    channels: usize,
    batch: usize,
    x_shape: Vec<usize>,
    w_shape: Vec<usize>,
    y_shape: Vec<usize>,
    activation: Option<UnaryKind>,
    /// Take the channel-blocked path.
    blocked: bool,
    /// Constant weights repacked as `[block][taps][LANES]` (channel-blocked path).
    packed: Option<Vec<Lanes>>,
}

/// Repacks `[C, 1, kh, kw]` weights as `[C / 8 rounded up][taps][8]`, the tail block
/// zero-padded.
fn pack_weights(w: &[f32], channels: usize, taps: usize) -> Vec<Lanes> {
    let blocks = channels.div_ceil(LANES);
    let mut out = vec![[0.0; LANES]; blocks * taps];
    for (c, wc) in w.chunks_exact(taps).take(channels).enumerate() {
        let (b, l) = (c / LANES, c % LANES);
        for (t, &v) in wc.iter().enumerate() {
            out[b * taps + t][l] = v;
        }
    }
    out
}

impl DepthwiseKernel {
    /// `None` unless the conv is 2-D depthwise with one output channel per input channel.
    pub fn new(
        isa: Isa,
        s: &ConvShapes,
        activation: Option<UnaryKind>,
        x_shape: &[usize],
        w_shape: &[usize],
        w_value: Option<&Tensor>,
    ) -> Option<DepthwiseKernel> {
        let g = &s.geometry;
        if g.input.len() != 2
            || s.group != s.in_channels
            || s.out_channels != s.in_channels
            || s.group < 2
            || w_shape.get(1) != Some(&1)
        {
            return None;
        }
        let (ih, iw, oh, ow) = (g.input[0], g.input[1], g.output[0], g.output[1]);
        let (kh, kw, sh, sw) = (g.kernel[0], g.kernel[1], g.strides[0], g.strides[1]);
        let (dh, dw, pt, pl) = (
            g.dilations[0],
            g.dilations[1],
            g.pad_begin[0],
            g.pad_begin[1],
        );
        if [kh, kw, sh, sw, dh, dw].contains(&0) || oh == 0 || ow == 0 {
            return None;
        }
        let hp = (ih + pt).max((oh - 1) * sh + (kh - 1) * dh + 1);
        let wp = (iw + pl).max((ow - 1) * sw + (kw - 1) * dw + 1);
        let lp = wp.div_ceil(sw);
        // The padded buffer must stay reasonable (hostile pads).
        if hp.checked_mul(lp * sw)?.checked_mul(LANES)? > 1 << 26 {
            return None;
        }
        let max_ow = if (sh, sw) == (1, 1) {
            BLOCKED_MAX_OW_STRIDE1
        } else {
            BLOCKED_MAX_OW
        };
        let blocked = ow <= max_ow || (kh, kw) != (3, 3) || sw > 2;
        let taps = kh * kw;
        let packed = match w_value {
            Some(w) if blocked => {
                let wv = w.as_slice::<f32>().ok()?;
                (wv.len() == s.in_channels * taps).then(|| pack_weights(wv, s.in_channels, taps))
            }
            _ => None,
        };
        Some(DepthwiseKernel {
            isa,
            p: Plane {
                ih,
                iw,
                oh,
                ow,
                kh,
                kw,
                sh,
                sw,
                dh,
                dw,
                pt,
                pl,
                hp,
                lp,
                wp,
            },
            channels: s.in_channels,
            batch: s.batch,
            x_shape: x_shape.to_vec(),
            w_shape: w_shape.to_vec(),
            y_shape: s.output_shape(),
            activation,
            blocked,
            packed,
        })
    }
}

/// Scratch of the row path for one plane geometry, kept across the planes of a run: the
/// padded (and stride-deinterleaved) plane, whose borders are never written after the first
/// zero fill, the flat run's output, and every tap's offset in the padded plane.
pub(crate) struct PlaneScratch {
    buf: Vec<f32>,
    padded: usize,
    offs: Vec<usize>,
}

impl PlaneScratch {
    fn new(p: &Plane) -> PlaneScratch {
        let (sw, lp) = (p.sw, p.lp);
        let row_len = sw * lp;
        // The flat run is rounded up to whole vectors (the extra outputs are dropped) and
        // reads up to (kw - 1) * dw past them, into zeros after the padded rows.
        let scratch = if p.flat() { p.flat_len() } else { 0 };
        let padded = if p.flat() {
            (p.hp * row_len).max(p.flat_len() + (p.kh - 1) * p.dh * row_len) + p.kw * p.dw
        } else {
            p.hp * row_len
        };
        // Offset of each tap from the first tap of output (0, 0) (divisions hoisted out of
        // the loops).
        let offs = (0..p.kh)
            .flat_map(|ky| {
                (0..p.kw).map(move |kx| {
                    let off = kx * p.dw;
                    ky * p.dh * row_len + (off % sw) * lp + off / sw
                })
            })
            .collect();
        PlaneScratch {
            buf: vec![0.0; padded + scratch],
            padded,
            offs,
        }
    }
}

impl Plane {
    /// Stride 1: the plane is one flat run, output (oy, ox) at `oy * row_len + ox` and every
    /// tap a fixed offset from it, computed into scratch and copied out without the padding
    /// columns. No per-row tails: narrow planes spent most of their time on those.
    fn flat(&self) -> bool {
        self.sw == 1 && self.sh == 1
    }

    /// Outputs the flat run computes: the plane in padded rows, rounded up to a multiple of
    /// 32 so the compiler's unrolled vector loop needs no scalar tail.
    fn flat_len(&self) -> usize {
        (self.oh * self.sw * self.lp).next_multiple_of(32)
    }
}

/// `dst.copy_from_slice(src)` in fixed-size pieces that stay inline: planes 7 to 56 wide
/// spent more on a `memcpy` call per row than on the row's convolution.
#[inline(always)]
fn copy_row(dst: &mut [f32], src: &[f32]) {
    let n = dst.len();
    let src = &src[..n];
    let mut i = 0;
    while i + 8 <= n {
        let s: &[f32; 8] = src[i..i + 8].try_into().expect("8 values");
        dst[i..i + 8].copy_from_slice(s);
        i += 8;
    }
    if i + 4 <= n {
        let s: &[f32; 4] = src[i..i + 4].try_into().expect("4 values");
        dst[i..i + 4].copy_from_slice(s);
        i += 4;
    }
    for (d, &v) in dst[i..].iter_mut().zip(&src[i..]).take(3) {
        *d = v;
    }
}

/// One output plane, `S`'s loops inside.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn plane<S: Simd>(
    isa: Isa,
    p: &Plane,
    x: &[f32],
    w: &[f32],
    bias: f32,
    act: Option<UnaryKind>,
    y: &mut [f32],
    scratch: &mut PlaneScratch,
) {
    let (sw, lp) = (p.sw, p.lp);
    // buf[(row * sw + phase) * lp + j] = padded[row][j * sw + phase].
    let row_len = sw * lp;
    let (buf, flat_out) = scratch.buf.split_at_mut(scratch.padded);
    for (r, src) in x.chunks_exact(p.iw).take(p.ih).enumerate() {
        let row = &mut buf[(r + p.pt) * sw * lp..][..sw * lp];
        if sw == 1 {
            copy_row(&mut row[p.pl..p.pl + p.iw], src);
        } else if sw == 2 {
            let (ph0, ph1) = row.split_at_mut(lp);
            stride2::split_padded_row(isa, src, p.pl, ph0, ph1);
        } else {
            // Phase r holds padded columns r, r + sw, ...; no division per element.
            for (r, dst) in row.chunks_exact_mut(lp).enumerate() {
                let mut c = r;
                for d in dst.iter_mut() {
                    if let Some(&v) = c.checked_sub(p.pl).and_then(|i| src.get(i)) {
                        *d = v;
                    }
                    c += sw;
                }
            }
        }
    }
    let ow = p.ow;
    let (buf, offs) = (&*buf, &scratch.offs);
    if p.flat() {
        taps::<S>(buf, offs, w, bias, flat_out);
        for (out, run) in y.chunks_exact_mut(ow).zip(flat_out.chunks(row_len)) {
            copy_row(out, run);
        }
        activate(act, &mut y[..p.oh * ow]);
        return;
    }
    for (oy, out) in y.chunks_exact_mut(ow).enumerate().take(p.oh) {
        taps::<S>(&buf[oy * p.sh * row_len..], offs, w, bias, out);
        activate(act, out);
    }
}

/// [`weighted_taps`], through the ISA's nine-tap loop where it has one and the kernel is 3x3.
#[inline(always)]
fn taps<S: Simd>(src: &[f32], offs: &[usize], w: &[f32], bias: f32, out: &mut [f32]) {
    if let (Ok(o), Ok(w9)) = (<&[usize; 9]>::try_from(offs), <&[f32; 9]>::try_from(w)) {
        if S::taps9(src, o, w9, bias, out) {
            return;
        }
    }
    weighted_taps(src, offs, w, bias, out);
}

/// `out[i] = bias + sum over taps t of w[t] * src[offs[t] + i]`: one pass for 3x3 kernels,
/// tap by tap otherwise (both vectorise along `out`).
#[inline(always)]
fn weighted_taps(src: &[f32], offs: &[usize], w: &[f32], bias: f32, out: &mut [f32]) {
    let n = out.len();
    let tap = |t: usize| &src[offs[t]..offs[t] + n];
    if let (9, Ok(w)) = (offs.len(), <&[f32; 9]>::try_from(&w[..w.len().min(9)])) {
        let (a0, a1, a2) = (tap(0), tap(1), tap(2));
        let (b0, b1, b2) = (tap(3), tap(4), tap(5));
        let (c0, c1, c2) = (tap(6), tap(7), tap(8));
        for i in 0..n {
            let s0 = a0[i] * w[0] + a1[i] * w[1] + a2[i] * w[2];
            let s1 = b0[i] * w[3] + b1[i] * w[4] + b2[i] * w[5];
            let s2 = c0[i] * w[6] + c1[i] * w[7] + c2[i] * w[8];
            out[i] = bias + (s0 + s1 + s2);
        }
    } else {
        out.fill(bias);
        for (t, &wv) in w.iter().enumerate().take(offs.len()) {
            for (o, &s) in out.iter_mut().zip(tap(t)) {
                *o += wv * s;
            }
        }
    }
}

/// Offsets (in floats) of every tap inside the interleaved padded buffer, relative to the
/// output pixel's origin, and their maximum (bounds the unchecked loads).
pub(crate) struct Taps {
    offs: Vec<usize>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    max: usize,
}

impl Taps {
    fn new(p: &Plane) -> Taps {
        let offs: Vec<usize> = (0..p.kh)
            .flat_map(|ky| (0..p.kw).map(move |kx| (ky * p.dh * p.wp + kx * p.dw) * LANES))
            .collect();
        let max = offs.iter().copied().max().unwrap_or(0);
        Taps { offs, max }
    }
}

/// `PX` adjacent output pixels whose receptive fields start at `buf[base + px * step]`,
/// written as `[PX][8]` into `out`, in plain Rust ([`Simd::blocked_pixels`]).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn blocked_pixels_plain<const PX: usize>(
    buf: &[f32],
    taps: &Taps,
    w: &[Lanes],
    bias: &Lanes,
    base: usize,
    step: usize,
    out: &mut [f32],
) {
    let mut acc = [*bias; PX];
    for (&off, wt) in taps.offs.iter().zip(w) {
        for (px, a) in acc.iter_mut().enumerate() {
            let s = &buf[base + px * step + off..][..LANES];
            for l in 0..LANES {
                a[l] += s[l] * wt[l];
            }
        }
    }
    for (o, a) in out[..PX * LANES].chunks_exact_mut(LANES).zip(&acc) {
        o.copy_from_slice(a);
    }
}

/// `dst[i][l] = x[l][i]` for `nc` planes of `n` values; lanes `nc..8` get zeros.
#[inline(always)]
fn interleave<S: Simd>(x: &[f32], n: usize, nc: usize, dst: &mut [f32]) {
    const ZERO: Lanes = [0.0; LANES];
    let mut i = 0;
    while i + LANES <= n {
        let rows: [&Lanes; LANES] = std::array::from_fn(|l| {
            if l < nc {
                x[l * n + i..][..LANES].try_into().unwrap_or(&ZERO)
            } else {
                &ZERO
            }
        });
        let t = S::transpose8(rows);
        for (d, t) in dst[i * LANES..][..LANES * LANES]
            .chunks_exact_mut(LANES)
            .zip(&t)
        {
            d.copy_from_slice(t);
        }
        i += LANES;
    }
    for (j, d) in dst.chunks_exact_mut(LANES).enumerate().take(n).skip(i) {
        for (l, v) in d.iter_mut().enumerate() {
            *v = if l < nc { x[l * n + j] } else { 0.0 };
        }
    }
}

/// `y[l][i] = src[i][l]` for `nc` planes of `n` values.
#[inline(always)]
fn deinterleave<S: Simd>(src: &[f32], n: usize, nc: usize, y: &mut [f32]) {
    let mut i = 0;
    while i + LANES <= n {
        let block = &src[i * LANES..][..LANES * LANES];
        let rows: [&Lanes; LANES] = std::array::from_fn(|p| {
            block[p * LANES..][..LANES]
                .try_into()
                .unwrap_or(&[0.0; LANES])
        });
        let t = S::transpose8(rows);
        for (l, t) in t.iter().enumerate().take(nc) {
            y[l * n + i..][..LANES].copy_from_slice(t);
        }
        i += LANES;
    }
    for (j, s) in src.chunks_exact(LANES).enumerate().take(n).skip(i) {
        for (l, &v) in s.iter().enumerate().take(nc) {
            y[l * n + j] = v;
        }
    }
}

/// One block of `nc <= 8` channels (`x` and `y` hold their `nc` planes). `buf` is scratch
/// that keeps its zero borders between blocks of the same geometry.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn blocked<S: Simd>(
    p: &Plane,
    taps: &Taps,
    x: &[f32],
    w: &[Lanes],
    bias: &Lanes,
    act: Option<UnaryKind>,
    y: &mut [f32],
    nc: usize,
    buf: &mut Vec<f32>,
) {
    let (in_plane, out_plane) = (p.ih * p.iw, p.oh * p.ow);
    let padded = p.hp * p.wp * LANES;
    let total = padded + (in_plane + out_plane) * LANES;
    if buf.len() != total {
        buf.clear();
        buf.resize(total, 0.0);
    }
    let (pad, rest) = buf.split_at_mut(padded);
    let (xi, yo) = rest.split_at_mut(in_plane * LANES);
    // Only the interior of `pad` is ever written, so its borders stay zero.
    interleave::<S>(x, in_plane, nc, xi);
    for (r, src) in xi.chunks_exact(p.iw * LANES).enumerate() {
        pad[((r + p.pt) * p.wp + p.pl) * LANES..][..p.iw * LANES].copy_from_slice(src);
    }
    let pad = &*pad;
    let step = p.sw * LANES;
    for (oy, row) in yo.chunks_exact_mut(p.ow * LANES).enumerate() {
        // Several pixels at once: independent accumulators hide the FMA latency.
        let mut ox = 0;
        let origin = oy * p.sh * p.wp * LANES;
        while ox + 8 <= p.ow {
            let (base, out) = (origin + ox * step, &mut row[ox * LANES..]);
            S::blocked_pixels::<8>(pad, taps, w, bias, base, step, out);
            ox += 8;
        }
        let (base, row) = (origin + ox * step, &mut row[ox * LANES..]);
        match p.ow - ox {
            7 => S::blocked_pixels::<7>(pad, taps, w, bias, base, step, row),
            6 => S::blocked_pixels::<6>(pad, taps, w, bias, base, step, row),
            5 => S::blocked_pixels::<5>(pad, taps, w, bias, base, step, row),
            4 => S::blocked_pixels::<4>(pad, taps, w, bias, base, step, row),
            3 => S::blocked_pixels::<3>(pad, taps, w, bias, base, step, row),
            2 => S::blocked_pixels::<2>(pad, taps, w, bias, base, step, row),
            1 => S::blocked_pixels::<1>(pad, taps, w, bias, base, step, row),
            _ => {}
        }
    }
    activate(act, yo);
    deinterleave::<S>(yo, out_plane, nc, y);
}

impl Kernel for DepthwiseKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let (xv, wv) = crate::conv::data_and_weights(inputs, &self.x_shape, &self.w_shape)?;
        let bias = crate::conv::bias_input(inputs, self.channels)?;
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        op_ensure!(
            y.shape() == self.y_shape.as_slice(),
            "output has shape {:?}, expected {:?}",
            y.shape(),
            self.y_shape
        );
        self.compute(xv, wv, bias, y.as_mut_slice::<f32>()?)
    }
    fn name(&self) -> &str {
        if self.blocked {
            "cpu.conv.depthwise_c8"
        } else {
            "cpu.conv.depthwise"
        }
    }

    fn prepacked_bytes(&self) -> usize {
        self.packed.as_deref().map_or(0, size_of_val)
    }
}

impl DepthwiseKernel {
    /// The convolution of `xv` by `wv` (plus `bias`) into `yv`, at the shapes the kernel was
    /// built for: [`Kernel::run`] on slices (the int8 depthwise runs it on its f32 copies).
    pub(crate) fn compute(
        &self,
        xv: &[f32],
        wv: &[f32],
        bias: Option<&[f32]>,
        yv: &mut [f32],
    ) -> OpResult<()> {
        let p = self.p;
        let (in_plane, out_plane, taps) = (p.ih * p.iw, p.oh * p.ow, p.kh * p.kw);
        op_ensure!(
            xv.len() == self.batch * self.channels * in_plane
                && wv.len() == self.channels * taps
                && yv.len() == self.batch * self.channels * out_plane,
            "depthwise conv: buffer sizes differ from the plan"
        );
        if yv.is_empty() {
            return Ok(());
        }
        let kernels = &self.isa.table().depthwise;
        let act = self.activation;
        if self.blocked {
            let repacked;
            let wp = match &self.packed {
                Some(w) => w.as_slice(),
                None => {
                    repacked = pack_weights(wv, self.channels, taps);
                    repacked.as_slice()
                }
            };
            self.run_blocked(xv, wp, bias, yv);
            return Ok(());
        }
        let one = |scratch: &mut PlaneScratch, (i, out): (usize, &mut [f32])| {
            let c = i % self.channels;
            let x = &xv[i * in_plane..(i + 1) * in_plane];
            let w = &wv[c * taps..(c + 1) * taps];
            let b = bias.map_or(0.0, |b| b[c]);
            (kernels.plane)(&p, x, w, b, act, out, scratch)
        };
        let cost = Cost {
            flops: 2 * yv.len() * taps,
            bytes: (xv.len() + yv.len()) * size_of::<f32>(),
        };
        split::row_chunks(yv, out_plane, split::worth(cost), |first, ys| {
            let mut scratch = PlaneScratch::new(&p);
            for (i, out) in ys.chunks_mut(out_plane.max(1)).enumerate() {
                one(&mut scratch, (first + i, out));
            }
        });
        Ok(())
    }
}

impl DepthwiseKernel {
    /// The channel-blocked path: one task per (batch item, block of 8 channels).
    fn run_blocked(&self, xv: &[f32], w: &[Lanes], bias: Option<&[f32]>, yv: &mut [f32]) {
        let p = self.p;
        let (in_plane, out_plane, taps) = (p.ih * p.iw, p.oh * p.ow, p.kh * p.kw);
        let (c, act) = (self.channels, self.activation);
        let kernels = &self.isa.table().depthwise;
        let tp = Taps::new(&p);
        let one = |buf: &mut Vec<f32>, (n, b, y): (usize, usize, &mut [f32])| {
            let c0 = b * LANES;
            let nc = (c - c0).min(LANES);
            let x = &xv[(n * c + c0) * in_plane..][..nc * in_plane];
            let w = &w[b * taps..][..taps];
            let mut bl = [0.0; LANES];
            if let Some(bv) = bias {
                bl[..nc].copy_from_slice(&bv[c0..c0 + nc]);
            }
            (kernels.blocked)(&p, &tp, x, w, &bl, act, y, nc, buf)
        };
        // Each batch item's planes split into blocks of 8 (the last may be short).
        let cost = Cost {
            flops: 2 * yv.len() * taps,
            bytes: (xv.len() + yv.len()) * size_of::<f32>(),
        };
        let mut blocks: Vec<_> = yv
            .chunks_mut(c * out_plane)
            .enumerate()
            .flat_map(|(n, yn)| {
                yn.chunks_mut(LANES * out_plane)
                    .enumerate()
                    .map(move |(b, y)| (n, b, y))
            })
            .collect();
        let tasks = split::cut(blocks.len(), 1, split::worth(cost), split::BALANCE);
        split::chunks(&mut blocks, tasks, |_, mine| {
            let mut buf = Vec::new();
            for (n, b, y) in mine.iter_mut() {
                one(&mut buf, (*n, *b, &mut **y));
            }
        });
    }
}

#[cfg(test)]
mod bench {
    use super::*;

    /// `cargo test --release -p ferrolite-cpu -- --ignored --nocapture depthwise_speed`
    #[test]
    #[ignore]
    fn depthwise_speed() {
        let kernels = &Isa::detect().table().depthwise;
        let start = std::time::Instant::now();
        let cpu = || start.elapsed().as_secs_f64();
        for &(c, h, s, k) in &[
            (96usize, 112usize, 2usize, 3usize),
            (32, 112, 1, 3),
            (144, 56, 1, 3),
            (144, 56, 2, 3),
            (192, 28, 1, 3),
            (240, 28, 1, 5),
            (192, 28, 2, 3),
            (384, 14, 1, 3),
            (576, 14, 1, 5),
            (576, 14, 2, 5),
            (576, 7, 1, 5),
            (960, 7, 1, 3),
        ] {
            let pad = k / 2;
            let o = (h + 2 * pad - k) / s + 1;
            let hp = (h + pad).max((o - 1) * s + k);
            let p = Plane {
                ih: h,
                iw: h,
                oh: o,
                ow: o,
                kh: k,
                kw: k,
                sh: s,
                sw: s,
                dh: 1,
                dw: 1,
                pt: pad,
                pl: pad,
                hp,
                lp: hp.div_ceil(s),
                wp: hp,
            };
            let x = vec![0.5f32; c * h * h];
            let w = vec![0.1f32; c * k * k];
            let wb = pack_weights(&w, c, k * k);
            let tp = Taps::new(&p);
            let mut y = vec![0.0f32; c * o * o];
            let mut buf: Vec<f32> = Vec::new();
            let mut scratch = PlaneScratch::new(&p);
            let reps = (4_000_000 / (c * o * o * k * k)).max(2);
            let mut dt_row = f64::MAX;
            for _ in 0..7 {
                let t = cpu();
                for _ in 0..reps {
                    for (xc, yc) in x.chunks_exact(h * h).zip(y.chunks_exact_mut(o * o)) {
                        (kernels.plane)(&p, xc, &w[..k * k], 0.0, None, yc, &mut scratch)
                    }
                }
                dt_row = dt_row.min((cpu() - t) / reps as f64);
            }
            let mut dt_blk = f64::MAX;
            for _ in 0..7 {
                let t = cpu();
                for _ in 0..reps {
                    for (b, (xc, yc)) in x
                        .chunks(LANES * h * h)
                        .zip(y.chunks_mut(LANES * o * o))
                        .enumerate()
                    {
                        let nc = xc.len() / (h * h);
                        let wt = &wb[b * k * k..][..k * k];
                        (kernels.blocked)(&p, &tp, xc, wt, &[0.0; LANES], None, yc, nc, &mut buf)
                    }
                }
                dt_blk = dt_blk.min((cpu() - t) / reps as f64);
            }
            let gf = |dt: f64| (c * o * o * k * k * 2) as f64 / dt / 1e9;
            println!(
                "{c}x{h}x{h} k{k} s{s}: row {:.3} ms {:.1} GFLOP/s, blocked {:.3} ms {:.1} GFLOP/s",
                dt_row * 1e3,
                gf(dt_row),
                dt_blk * 1e3,
                gf(dt_blk)
            );
        }
    }
}
