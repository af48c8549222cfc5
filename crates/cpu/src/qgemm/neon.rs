//! The integer GEMM's NEON tiles (aarch64), on the `Quad` layout.
//!
//! NEON multiplies signed bytes by signed bytes (`SDOT`, `SMULL`); the GEMM's operands are one
//! unsigned and one signed. The kernels read the unsigned operand with its top bit flipped,
//! `u ^ 0x80` read as i8 being `u - 128`, so a tile holds `sum (u - 128) s`, and
//! [`super::Product::tile`] adds back `128 * sum s`, the signed operand's sums over `k`.
//!
//! - [`tile_dot`]: `SDOT` by element (FEAT_DotProd), an 8x8 tile: sixteen accumulators, two
//!   registers of row quads whose lanes the instruction picks, two of column quads.
//! - [`tile_neon`]: baseline NEON, a 4x8 tile: `SMULL` of two columns' quads by a row's quad
//!   (duplicated), `SADALP` adding neighbouring products into i32 lanes, one pairwise add per
//!   tile at the end. Products of two i8 fit i16 (at most 128 * 128), so this is exact.

use std::arch::aarch64::*;
use std::arch::asm;

/// The `SDOT` tile: rows per block, columns per panel.
pub const DOT_MR: usize = 8;
pub const DOT_NR: usize = 8;
/// The baseline NEON tile.
pub const NEON_MR: usize = 4;
pub const NEON_NR: usize = 8;

/// The GEMM's table entry on baseline NEON (`SMULL` + `SADALP`).
pub(crate) const NEON: super::Kernels = super::Kernels {
    path: super::QPath::Neon,
};

/// On NEON with the dot product (`SDOT`).
pub(crate) const NEON_DOT: super::Kernels = super::Kernels {
    path: super::QPath::NeonDot,
};

/// The `DOT_MR x DOT_NR` tile of `sum (u - 128) s` over `kq` quads, row stride `DOT_NR`.
///
/// # Panics
/// When `rows`, `panel` or `tile` is shorter than the tile needs.
pub fn tile_dot(rows: &[u8], panel: &[u8], kq: usize, rows_signed: bool, tile: &mut [i32]) {
    assert!(rows.len() >= kq * DOT_MR * 4 && panel.len() >= kq * DOT_NR * 4);
    assert!(tile.len() >= DOT_MR * DOT_NR);
    assert!(
        std::arch::is_aarch64_feature_detected!("dotprod"),
        "the SDOT path runs only where the CPU has it (QPath::for_isa)"
    );
    // SAFETY: the CPU has FEAT_DotProd (asserted); the lengths were checked above.
    unsafe {
        if rows_signed {
            tile_dot_impl::<true>(rows.as_ptr(), panel.as_ptr(), kq, tile.as_mut_ptr())
        } else {
            tile_dot_impl::<false>(rows.as_ptr(), panel.as_ptr(), kq, tile.as_mut_ptr())
        }
    }
}

/// `acc[j] += sum_t b[4 j + t] * a[4 L + t]` (signed bytes): `SDOT` by element. Written as
/// assembly because Rust's dot-product intrinsics are not stable yet.
///
/// # Safety
/// The CPU must have FEAT_DotProd.
#[target_feature(enable = "dotprod")]
#[inline]
unsafe fn sdot_lane<const L: i32>(acc: int32x4_t, b: int8x16_t, a: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: a register-only instruction the CPU has (the caller's contract).
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {b:v}.16b, {a:v}.4b[{l}]",
            acc = inout(vreg) acc,
            b = in(vreg) b,
            a = in(vreg) a,
            l = const L,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// Sixteen bytes at `p`, the unsigned operand's with their top bit flipped.
///
/// # Safety
/// `p` must be valid for reads of 16 bytes.
#[inline(always)]
unsafe fn load_s8(p: *const u8, flip: bool) -> int8x16_t {
    // SAFETY: the caller's contract.
    unsafe {
        let v = vld1q_u8(p);
        if flip {
            vreinterpretq_s8_u8(veorq_u8(v, vdupq_n_u8(0x80)))
        } else {
            vreinterpretq_s8_u8(v)
        }
    }
}

/// # Safety
/// The CPU must have FEAT_DotProd; `rows` must hold `kq * 32` bytes, `panel` `kq * 32` and
/// `tile` 64 values.
#[target_feature(enable = "dotprod")]
unsafe fn tile_dot_impl<const ROWS_SIGNED: bool>(
    rows: *const u8,
    panel: *const u8,
    kq: usize,
    tile: *mut i32,
) {
    // SAFETY: every read is inside the kq quads of both operands, every write inside the
    // tile (the caller's contract).
    unsafe {
        let mut acc = [[vdupq_n_s32(0); 2]; DOT_MR];
        for q in 0..kq {
            let (rp, pp) = (rows.add(q * DOT_MR * 4), panel.add(q * DOT_NR * 4));
            // Rows 0-3 and 4-7, a quad of k each; columns 0-3 and 4-7 likewise.
            let a0 = load_s8(rp, !ROWS_SIGNED);
            let a1 = load_s8(rp.add(16), !ROWS_SIGNED);
            let b = [load_s8(pp, ROWS_SIGNED), load_s8(pp.add(16), ROWS_SIGNED)];
            for (h, &b) in b.iter().enumerate() {
                acc[0][h] = sdot_lane::<0>(acc[0][h], b, a0);
                acc[1][h] = sdot_lane::<1>(acc[1][h], b, a0);
                acc[2][h] = sdot_lane::<2>(acc[2][h], b, a0);
                acc[3][h] = sdot_lane::<3>(acc[3][h], b, a0);
                acc[4][h] = sdot_lane::<0>(acc[4][h], b, a1);
                acc[5][h] = sdot_lane::<1>(acc[5][h], b, a1);
                acc[6][h] = sdot_lane::<2>(acc[6][h], b, a1);
                acc[7][h] = sdot_lane::<3>(acc[7][h], b, a1);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            vst1q_s32(tile.add(i * DOT_NR), a[0]);
            vst1q_s32(tile.add(i * DOT_NR + 4), a[1]);
        }
    }
}

/// The `NEON_MR x NEON_NR` tile of `sum (u - 128) s` over `kq` quads, row stride `NEON_NR`.
///
/// # Panics
/// When `rows`, `panel` or `tile` is shorter than the tile needs.
pub fn tile_neon(rows: &[u8], panel: &[u8], kq: usize, rows_signed: bool, tile: &mut [i32]) {
    assert!(rows.len() >= kq * NEON_MR * 4 && panel.len() >= kq * NEON_NR * 4);
    assert!(tile.len() >= NEON_MR * NEON_NR);
    // SAFETY: NEON is aarch64's baseline; the lengths were checked above.
    unsafe {
        if rows_signed {
            tile_neon_impl::<true>(rows.as_ptr(), panel.as_ptr(), kq, tile.as_mut_ptr())
        } else {
            tile_neon_impl::<false>(rows.as_ptr(), panel.as_ptr(), kq, tile.as_mut_ptr())
        }
    }
}

/// # Safety
/// `rows` must hold `kq * 16` bytes, `panel` `kq * 32` and `tile` 32 values.
unsafe fn tile_neon_impl<const ROWS_SIGNED: bool>(
    rows: *const u8,
    panel: *const u8,
    kq: usize,
    tile: *mut i32,
) {
    // SAFETY: every read is inside the kq quads of both operands, every write inside the
    // tile (the caller's contract).
    unsafe {
        // acc[i][c]: row i against columns 2c and 2c + 1, as [k0 + k1, k2 + k3] of each.
        let mut acc = [[vdupq_n_s32(0); 4]; NEON_MR];
        for q in 0..kq {
            let (rp, pp) = (rows.add(q * NEON_MR * 4), panel.add(q * NEON_NR * 4));
            let a = load_s8(rp, !ROWS_SIGNED);
            let lo = load_s8(pp, ROWS_SIGNED);
            let hi = load_s8(pp.add(16), ROWS_SIGNED);
            let b = [
                vget_low_s8(lo),
                vget_high_s8(lo),
                vget_low_s8(hi),
                vget_high_s8(hi),
            ];
            let a32 = vreinterpretq_s32_s8(a);
            let rows_dup = [
                vreinterpret_s8_s32(vdup_laneq_s32::<0>(a32)),
                vreinterpret_s8_s32(vdup_laneq_s32::<1>(a32)),
                vreinterpret_s8_s32(vdup_laneq_s32::<2>(a32)),
                vreinterpret_s8_s32(vdup_laneq_s32::<3>(a32)),
            ];
            for (acc, &r) in acc.iter_mut().zip(&rows_dup) {
                for (a, &b) in acc.iter_mut().zip(&b) {
                    *a = vpadalq_s16(*a, vmull_s8(b, r));
                }
            }
        }
        for (i, a) in acc.iter().enumerate() {
            vst1q_s32(tile.add(i * NEON_NR), vpaddq_s32(a[0], a[1]));
            vst1q_s32(tile.add(i * NEON_NR + 4), vpaddq_s32(a[2], a[3]));
        }
    }
}
