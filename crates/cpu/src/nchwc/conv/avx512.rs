use super::{clamp_of, hard_of, ConvKernel, Hard, SendPtr, Tile, B, TILE512};
use std::arch::x86_64::*;

/// [`ConvKernel::rows`]'s tiles, inlined into one AVX-512 function.
///
/// # Safety
/// The CPU must support AVX-512F, BW, VL and DQ; the call must own the rows (as `rows`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
pub(crate) unsafe fn rows(
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
                let wv: [__m512; NV] = std::array::from_fn(|v| _mm512_loadu_ps(wc.add(v * wlen)));
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
        Some((lo, hi)) => _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(hi)),
        None => v,
    }
}
