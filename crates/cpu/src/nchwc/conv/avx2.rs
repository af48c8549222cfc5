use super::{ConvKernel, SendPtr, Tile, B, TILE};
use std::arch::x86_64::*;

/// [`ConvKernel::rows`]'s tiles, inlined into one AVX2 function.
///
/// # Safety
/// The CPU must support AVX2 and FMA; the call must own the rows (as `rows`).
#[target_feature(enable = "avx2,fma")]
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
        Some((lo, hi)) => _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(lo)), _mm256_set1_ps(hi)),
        None => v,
    }
}
