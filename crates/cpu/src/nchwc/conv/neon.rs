use super::{ConvKernel, SendPtr, Tile, B, TILE};
use std::arch::aarch64::*;

/// Vectors of a block.
const VB: usize = B / 4;

/// [`ConvKernel::rows`]'s tiles.
///
/// # Safety
/// The call must own the rows (as `rows`).
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
