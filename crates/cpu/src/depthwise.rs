//! Direct 2-D depthwise convolution (group == C == M): each input plane is copied once into a
//! zero-padded, stride-deinterleaved buffer, so every kernel tap becomes a contiguous
//! multiply-add along the output row (vectorised by the compiler; compiled a second time with
//! AVX2 + FMA enabled and picked at run time). 3x3 kernels sum all nine taps in one pass; at
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
struct Plane {
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
struct PlaneScratch {
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

/// One output plane. `AVX` runs the flat 3x3 run with FMA intrinsics.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn plane<const AVX: bool>(
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
        taps::<AVX>(buf, offs, w, bias, flat_out);
        for (out, run) in y.chunks_exact_mut(ow).zip(flat_out.chunks(row_len)) {
            copy_row(out, run);
        }
        activate(act, &mut y[..p.oh * ow]);
        return;
    }
    for (oy, out) in y.chunks_exact_mut(ow).enumerate().take(p.oh) {
        taps::<AVX>(&buf[oy * p.sh * row_len..], offs, w, bias, out);
        activate(act, out);
    }
}

/// [`weighted_taps`], through the AVX2 nine-tap kernel when `AVX` and the kernel is 3x3.
#[inline(always)]
fn taps<const AVX: bool>(src: &[f32], offs: &[usize], w: &[f32], bias: f32, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if let (true, Ok(o), Ok(w9)) = (AVX, <&[usize; 9]>::try_from(offs), <&[f32; 9]>::try_from(w)) {
        // SAFETY: AVX is only true in code reached from `plane_avx2`, which runs only when
        // the CPU supports AVX2 and FMA.
        unsafe { taps9_avx2(src, o, w9, bias, out) };
        return;
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn plane_avx2(
    p: &Plane,
    x: &[f32],
    w: &[f32],
    bias: f32,
    act: Option<UnaryKind>,
    y: &mut [f32],
    scratch: &mut PlaneScratch,
) {
    plane::<true>(Isa::Avx2Fma, p, x, w, bias, act, y, scratch)
}

/// [`weighted_taps`] for nine taps: four vectors of outputs at a time, then single vectors,
/// then single values, each tap's weight in a register (fused multiply-adds in tap order).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn taps9_avx2(src: &[f32], offs: &[usize; 9], w: &[f32; 9], bias: f32, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = out.len();
    let end = offs.iter().max().map_or(0, |&m| m + n);
    assert!(end <= src.len());
    let wv: [__m256; 9] = std::array::from_fn(|t| _mm256_set1_ps(w[t]));
    let b = _mm256_set1_ps(bias);
    let mut i = 0;
    while i + 32 <= n {
        let mut acc = [b; 4];
        for (&off, &wt) in offs.iter().zip(&wv) {
            // SAFETY: reads 32 floats from off + i, and off + i + 32 <= max(offs) + n <= len
            // (asserted above).
            let s = unsafe { src.as_ptr().add(off + i) };
            for (u, a) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                *a = _mm256_fmadd_ps(unsafe { _mm256_loadu_ps(s.add(8 * u)) }, wt, *a);
            }
        }
        for (u, a) in acc.iter().enumerate() {
            // SAFETY: i + 32 <= n = out.len().
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i + 8 * u), *a) };
        }
        i += 32;
    }
    // Rows of stride-2 planes (28 to 112 outputs) end in a few single vectors.
    while i + 8 <= n {
        let mut acc = b;
        for (&off, &wt) in offs.iter().zip(&wv) {
            // SAFETY: reads 8 floats from off + i, within max(offs) + n (asserted above).
            acc = _mm256_fmadd_ps(
                unsafe { _mm256_loadu_ps(src.as_ptr().add(off + i)) },
                wt,
                acc,
            );
        }
        // SAFETY: i + 8 <= n = out.len().
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i), acc) };
        i += 8;
    }
    for (j, o) in out.iter_mut().enumerate().skip(i) {
        *o = offs
            .iter()
            .zip(w)
            .fold(bias, |acc, (&off, &wt)| src[off + j].mul_add(wt, acc));
    }
}

/// Offsets (in floats) of every tap inside the interleaved padded buffer, relative to the
/// output pixel's origin, and their maximum (bounds the unchecked loads).
struct Taps {
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
/// written as `[PX][8]` into `out`. `AVX` runs the FMA intrinsics version.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn blocked_pixels<const PX: usize, const AVX: bool>(
    buf: &[f32],
    taps: &Taps,
    w: &[Lanes],
    bias: &Lanes,
    base: usize,
    step: usize,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if AVX {
        // SAFETY: AVX is only true in code reached from `blocked_avx2`, which runs only when
        // the CPU supports AVX2 and FMA.
        unsafe { blocked_pixels_avx::<PX>(buf, taps, w, bias, base, step, out) };
        return;
    }
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn blocked_pixels_avx<const PX: usize>(
    buf: &[f32],
    taps: &Taps,
    w: &[Lanes],
    bias: &Lanes,
    base: usize,
    step: usize,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let end = base + (PX - 1) * step + taps.max + LANES;
    assert!(end <= buf.len() && w.len() >= taps.offs.len() && out.len() >= PX * LANES);
    // SAFETY: `bias` is a whole [f32; 8].
    let mut acc = [unsafe { _mm256_loadu_ps(bias.as_ptr()) }; PX];
    for (&off, wt) in taps.offs.iter().zip(w) {
        // SAFETY: `wt` is a whole [f32; 8]; every input load reads 8 floats starting at
        // base + px * step + off <= base + (PX - 1) * step + taps.max, which `end` bounds
        // by buf.len() (asserted above; taps.max is the largest offset).
        unsafe {
            let wv = _mm256_loadu_ps(wt.as_ptr());
            let src = buf.as_ptr().add(base + off);
            for (px, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(src.add(px * step)), wv, *a);
            }
        }
    }
    for (px, a) in acc.iter().enumerate() {
        // SAFETY: out holds at least PX * 8 floats (asserted above).
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(px * LANES), *a) };
    }
}

/// Transposes an 8x8 block: `out[j][i] = rows[i][j]`.
#[inline(always)]
fn transpose8<const AVX: bool>(rows: [&Lanes; LANES]) -> [Lanes; LANES] {
    #[cfg(target_arch = "x86_64")]
    if AVX {
        // SAFETY: AVX is only true in code reached from `blocked_avx2`, which runs only when
        // the CPU supports AVX2 and FMA.
        return unsafe { transpose8_avx(rows) };
    }
    std::array::from_fn(|j| std::array::from_fn(|i| rows[i][j]))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose8_avx(rows: [&Lanes; LANES]) -> [Lanes; LANES] {
    use std::arch::x86_64::*;
    // SAFETY: every load reads one whole `[f32; 8]` through a valid reference.
    let r: [__m256; 8] = std::array::from_fn(|i| unsafe { _mm256_loadu_ps(rows[i].as_ptr()) });
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let s0 = _mm256_shuffle_ps(t0, t2, 0x44);
    let s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    let s2 = _mm256_shuffle_ps(t1, t3, 0x44);
    let s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    let s4 = _mm256_shuffle_ps(t4, t6, 0x44);
    let s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    let s6 = _mm256_shuffle_ps(t5, t7, 0x44);
    let s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    let o = [
        _mm256_permute2f128_ps(s0, s4, 0x20),
        _mm256_permute2f128_ps(s1, s5, 0x20),
        _mm256_permute2f128_ps(s2, s6, 0x20),
        _mm256_permute2f128_ps(s3, s7, 0x20),
        _mm256_permute2f128_ps(s0, s4, 0x31),
        _mm256_permute2f128_ps(s1, s5, 0x31),
        _mm256_permute2f128_ps(s2, s6, 0x31),
        _mm256_permute2f128_ps(s3, s7, 0x31),
    ];
    let mut out = [[0.0; LANES]; LANES];
    for (d, v) in out.iter_mut().zip(o) {
        // SAFETY: the store writes one whole `[f32; 8]` through a valid reference.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), v) };
    }
    out
}

/// `dst[i][l] = x[l][i]` for `nc` planes of `n` values; lanes `nc..8` get zeros.
#[inline(always)]
fn interleave<const AVX: bool>(x: &[f32], n: usize, nc: usize, dst: &mut [f32]) {
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
        let t = transpose8::<AVX>(rows);
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
fn deinterleave<const AVX: bool>(src: &[f32], n: usize, nc: usize, y: &mut [f32]) {
    let mut i = 0;
    while i + LANES <= n {
        let block = &src[i * LANES..][..LANES * LANES];
        let rows: [&Lanes; LANES] = std::array::from_fn(|p| {
            block[p * LANES..][..LANES]
                .try_into()
                .unwrap_or(&[0.0; LANES])
        });
        let t = transpose8::<AVX>(rows);
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
fn blocked<const AVX: bool>(
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
    interleave::<AVX>(x, in_plane, nc, xi);
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
            blocked_pixels::<8, AVX>(pad, taps, w, bias, base, step, out);
            ox += 8;
        }
        let (base, row) = (origin + ox * step, &mut row[ox * LANES..]);
        match p.ow - ox {
            7 => blocked_pixels::<7, AVX>(pad, taps, w, bias, base, step, row),
            6 => blocked_pixels::<6, AVX>(pad, taps, w, bias, base, step, row),
            5 => blocked_pixels::<5, AVX>(pad, taps, w, bias, base, step, row),
            4 => blocked_pixels::<4, AVX>(pad, taps, w, bias, base, step, row),
            3 => blocked_pixels::<3, AVX>(pad, taps, w, bias, base, step, row),
            2 => blocked_pixels::<2, AVX>(pad, taps, w, bias, base, step, row),
            1 => blocked_pixels::<1, AVX>(pad, taps, w, bias, base, step, row),
            _ => {}
        }
    }
    activate(act, yo);
    deinterleave::<AVX>(yo, out_plane, nc, y);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn blocked_avx2(
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
    blocked::<true>(p, taps, x, w, bias, act, y, nc, buf)
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
        let isa = self.isa;
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
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: Avx2Fma is only chosen when the CPU supports AVX2 and FMA.
                Isa::Avx2Fma | Isa::Avx512 => unsafe { plane_avx2(&p, x, w, b, act, out, scratch) },
                // Portable and NEON: the plain loops (NEON is aarch64's baseline, so they
                // vectorise to it there).
                _ => plane::<false>(isa, &p, x, w, b, act, out, scratch),
            }
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
        let (c, isa, act) = (self.channels, self.isa, self.activation);
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
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: Avx2Fma is only chosen when the CPU supports AVX2 and FMA.
                Isa::Avx2Fma | Isa::Avx512 => unsafe {
                    blocked_avx2(&p, &tp, x, w, &bl, act, y, nc, buf)
                },
                _ => blocked::<false>(&p, &tp, x, w, &bl, act, y, nc, buf),
            }
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
        if Isa::detect() == Isa::Portable {
            return;
        }
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
                        // SAFETY: AVX2 + FMA checked above.
                        #[cfg(target_arch = "x86_64")]
                        unsafe {
                            plane_avx2(&p, xc, &w[..k * k], 0.0, None, yc, &mut scratch)
                        }
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
                        // SAFETY: AVX2 + FMA checked above.
                        #[cfg(target_arch = "x86_64")]
                        unsafe {
                            blocked_avx2(&p, &tp, xc, wt, &[0.0; LANES], None, yc, nc, &mut buf)
                        }
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
