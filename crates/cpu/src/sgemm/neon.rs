//! The 6x16 NEON microkernel (aarch64): 24 of the 32 vector registers accumulate, four hold a
//! step of B and two the step of A, whose lanes `fmla` (by element) reads directly, so A
//! needs no broadcast. The packing is the AVX2 kernels' (6-row A panels, 16-column B panels),
//! which fills aarch64's register file as well as it fills AVX2's sixteen.

use super::{activate, store_scalar, TileEpi, MR, NR};
use std::arch::aarch64::*;

/// Vectors of a tile row.
const VR: usize = NR / 4;

/// The tiles of one column of C (`rows` rows in panels of `MR`, `nr` columns), each as
/// [`kernel`]; `a` holds the panels back to back, `e` is the first tile's epilogue.
///
/// # Safety
/// As [`kernel`] for each tile: `a` must hold `rows.div_ceil(MR) * kc * MR` floats and `c` be
/// valid for the whole `rows x nr` block.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn column(
    kc: usize,
    a: *const f32,
    rows: usize,
    b: *const f32,
    bs: usize,
    c: *mut f32,
    rsc: usize,
    nr: usize,
    e: &TileEpi,
) {
    for (ip, i) in (0..rows).step_by(MR).enumerate() {
        let e = e.rows_from(i);
        // SAFETY: tile i of the block the caller vouches for; its panel starts ip panels in.
        unsafe {
            let (ap, ct) = (a.add(ip * kc * MR), c.add(i * rsc));
            kernel(kc, ap, b, bs, ct, rsc, MR.min(rows - i), nr, &e)
        };
    }
}

/// The `panels` full-width tiles of one row of C (`mr` rows), each as [`kernel`] on the same
/// A panel, B panel `jp` from `b + jp * step`; `e` is the first tile's epilogue.
///
/// # Safety
/// As [`kernel`] for each tile: every B panel must hold `kc` rows of `NR` floats, `bs`
/// apart, and `c` be valid for the whole `mr x panels * NR` block.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn row(
    kc: usize,
    a: *const f32,
    b: *const f32,
    bs: usize,
    step: usize,
    panels: usize,
    c: *mut f32,
    rsc: usize,
    mr: usize,
    e: &TileEpi,
) {
    for jp in 0..panels {
        let e = e.cols_from(jp * NR);
        // SAFETY: tile jp of the block the caller vouches for.
        unsafe { kernel(kc, a, b.add(jp * step), bs, c.add(jp * NR), rsc, mr, NR, &e) };
    }
}

/// One tile: `kc` steps over the A panel `a` (`MR` floats a step) and `kc` rows of `NR`
/// floats of `b`, `bs` apart, stored through the epilogue into the `mr x nr` tile at `c`.
///
/// # Safety
/// `a` must hold `kc * MR` floats and `b` `kc` rows of `NR` floats, `bs` apart; `c` must be
/// valid for reads and writes of the `mr x nr` tile with row stride `rsc`, accessed by no one
/// else meanwhile.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) unsafe fn kernel(
    kc: usize,
    a: *const f32,
    b: *const f32,
    bs: usize,
    c: *mut f32,
    rsc: usize,
    mr: usize,
    nr: usize,
    e: &TileEpi,
) {
    // SAFETY: NEON is aarch64's baseline; every read is inside the panels (the caller's
    // contract: step p reads a[p * MR..][..MR] and b[p * bs..][..NR]).
    unsafe {
        let mut acc = [[vdupq_n_f32(0.0); VR]; MR];
        for p in 0..kc {
            let ap = a.add(p * MR);
            let a03 = vld1q_f32(ap);
            let a45 = vld1_f32(ap.add(4));
            let bp = b.add(p * bs);
            let bv: [float32x4_t; VR] = std::array::from_fn(|j| vld1q_f32(bp.add(4 * j)));
            for (j, &bj) in bv.iter().enumerate() {
                acc[0][j] = vfmaq_laneq_f32::<0>(acc[0][j], bj, a03);
                acc[1][j] = vfmaq_laneq_f32::<1>(acc[1][j], bj, a03);
                acc[2][j] = vfmaq_laneq_f32::<2>(acc[2][j], bj, a03);
                acc[3][j] = vfmaq_laneq_f32::<3>(acc[3][j], bj, a03);
                acc[4][j] = vfmaq_lane_f32::<0>(acc[4][j], bj, a45);
                acc[5][j] = vfmaq_lane_f32::<1>(acc[5][j], bj, a45);
            }
        }
        store(&acc, c, rsc, mr, nr, e)
    }
}

/// Stores the accumulators through the epilogue: full tiles in vectors (alpha, accumulate,
/// biases; the activation over each stored row), partial ones element by element.
///
/// # Safety
/// As [`kernel`] for `c`.
#[inline]
unsafe fn store(
    acc: &[[float32x4_t; VR]; MR],
    c: *mut f32,
    rsc: usize,
    mr: usize,
    nr: usize,
    e: &TileEpi,
) {
    if mr < MR || nr < NR || (!e.col_bias.is_empty() && e.col_bias.len() < NR) {
        let mut tile = [[0f32; NR]; MR];
        for (t, a) in tile.iter_mut().zip(acc) {
            for (j, &v) in a.iter().enumerate() {
                // SAFETY: t holds NR = 4 VR floats.
                unsafe { vst1q_f32(t.as_mut_ptr().add(4 * j), v) };
            }
        }
        // SAFETY: forwarded from the caller.
        unsafe { store_scalar(&tile, c, rsc, mr, nr, e) };
        return;
    }
    // SAFETY: the full MR x NR tile at c is the caller's; the column bias holds NR values
    // (checked above) when it is not empty.
    unsafe {
        let alpha = vdupq_n_f32(e.alpha);
        for (i, a) in acc.iter().enumerate() {
            let row = c.add(i * rsc);
            let row_bias = e.row_bias.get(i).filter(|_| e.last).copied();
            for (j, &v) in a.iter().enumerate() {
                let p = row.add(4 * j);
                // The order of store_scalar: alpha, C, the row's bias, the column's.
                let mut v = vmulq_f32(v, alpha);
                if e.accumulate {
                    v = vaddq_f32(v, vld1q_f32(p));
                }
                if let Some(b) = row_bias {
                    v = vaddq_f32(v, vdupq_n_f32(b));
                }
                if e.last && !e.col_bias.is_empty() {
                    v = vaddq_f32(v, vld1q_f32(e.col_bias.as_ptr().add(4 * j)));
                }
                vst1q_f32(p, v);
            }
            if e.last && e.act.is_some() {
                activate(e.act, std::slice::from_raw_parts_mut(row, NR));
            }
        }
    }
}

/// `acc[i][..] += sum_p a[i * lda + p] * b[p * bs..][..NR]` for `i < m` (1..=4): the
/// streaming GEMV's strip ([`super::Problem::run_gemv`]).
///
/// # Safety
/// `a` must hold `m` rows of `kc` values with stride `lda`, and `b` `kc` rows of `NR` values
/// with stride `bs`.
pub(super) unsafe fn gemv_strip(
    kc: usize,
    a: *const f32,
    lda: usize,
    m: usize,
    b: *const f32,
    bs: usize,
    acc: &mut [[f32; NR]; MR],
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match m {
            1 => strip::<1, 2>(kc, a, lda, b, bs, acc),
            2 => strip::<2, 2>(kc, a, lda, b, bs, acc),
            3 => strip::<3, 1>(kc, a, lda, b, bs, acc),
            _ => strip::<4, 1>(kc, a, lda, b, bs, acc),
        }
    }
}

/// `M` rows, `U` interleaved accumulator sets (more independent FMA chains for small M).
///
/// # Safety
/// As [`gemv_strip`] with `m = M`.
#[inline]
unsafe fn strip<const M: usize, const U: usize>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    bs: usize,
    acc: &mut [[f32; NR]; MR],
) {
    // SAFETY: loads stay within the kc rows of a and b the caller vouches for; acc rows hold
    // NR floats.
    unsafe {
        let mut v = [[[vdupq_n_f32(0.0); VR]; M]; U];
        let step = |v: &mut [[float32x4_t; VR]; M], p: usize| {
            let bp = b.add(p * bs);
            let bv: [float32x4_t; VR] = std::array::from_fn(|j| vld1q_f32(bp.add(4 * j)));
            for (i, vi) in v.iter_mut().enumerate() {
                let av = vdupq_n_f32(*a.add(i * lda + p));
                for (x, &bj) in vi.iter_mut().zip(&bv) {
                    *x = vfmaq_f32(*x, bj, av);
                }
            }
        };
        let mut p = 0;
        while p + U <= kc {
            for (u, vu) in v.iter_mut().enumerate() {
                step(vu, p + u);
            }
            p += U;
        }
        while p < kc {
            step(&mut v[0], p);
            p += 1;
        }
        for (i, row) in acc.iter_mut().enumerate().take(M) {
            for j in 0..VR {
                let mut s = v[0][i][j];
                for vu in &v[1..] {
                    s = vaddq_f32(s, vu[i][j]);
                }
                let dst = row.as_mut_ptr().add(4 * j);
                vst1q_f32(dst, vaddq_f32(vld1q_f32(dst), s));
            }
        }
    }
}
