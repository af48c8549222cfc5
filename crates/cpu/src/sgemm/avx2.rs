//! The 6x16 AVX2 + FMA microkernel: 12 ymm accumulators, two B loads and one A broadcast per
//! step; the epilogue (alpha, accumulate, bias, activation) is vectorised for full tiles.

use super::{EpilogueAct, TileEpi, MR, NR};
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use std::arch::x86_64::*;

/// Whether the epilogue computes `act` in registers ([`act8`]); the others run per element
/// after the store, with the f32 formula.
fn in_registers(act: UnaryKind) -> bool {
    match EpilogueAct::of(act) {
        EpilogueAct::Relu
        | EpilogueAct::Clip { .. }
        | EpilogueAct::LeakyRelu { .. }
        | EpilogueAct::HardSigmoid { .. }
        | EpilogueAct::HardSwish => true,
        EpilogueAct::Mish | EpilogueAct::PerElement(_) => false,
    }
}

/// Vectorised activation; `None` for those done per element (see [`in_registers`]).
#[inline(always)]
unsafe fn act8(act: EpilogueAct, v: __m256) -> Option<__m256> {
    // SAFETY: only called from the avx2+fma kernel below.
    unsafe {
        let zero = _mm256_setzero_ps();
        Some(match act {
            EpilogueAct::Relu => _mm256_max_ps(v, zero),
            EpilogueAct::Clip { min, max } => {
                _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(min)), _mm256_set1_ps(max))
            }
            EpilogueAct::LeakyRelu { alpha } => {
                let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(v, zero);
                _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(alpha)), neg)
            }
            EpilogueAct::HardSigmoid { alpha, beta } => {
                let t = _mm256_fmadd_ps(v, _mm256_set1_ps(alpha), _mm256_set1_ps(beta));
                _mm256_min_ps(_mm256_max_ps(t, zero), _mm256_set1_ps(1.0))
            }
            EpilogueAct::HardSwish => {
                let t = _mm256_add_ps(_mm256_div_ps(v, _mm256_set1_ps(6.0)), _mm256_set1_ps(0.5));
                let t = _mm256_min_ps(_mm256_max_ps(t, zero), _mm256_set1_ps(1.0));
                _mm256_mul_ps(v, t)
            }
            EpilogueAct::Mish | EpilogueAct::PerElement(_) => return None,
        })
    }
}

/// The tiles of one column of C (`rows` rows in panels of `MR`, `nr` columns), each as
/// [`kernel`]; `a` holds the panels back to back, `e` is the first tile's epilogue.
///
/// # Safety
/// As [`kernel`] for each tile: `a` must hold `rows.div_ceil(MR) * kc * MR` floats and `c` be
/// valid for the whole `rows x nr` block.
#[target_feature(enable = "avx2,fma")]
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
    let fast = nr == NR && simple(e);
    // The tiles of a column share their columns' bias and their activation's form.
    let cb = col_bias(e);
    let act = e.act.map(EpilogueAct::of);
    for (ip, i) in (0..rows).step_by(MR).enumerate() {
        let e = e.rows_from(i);
        if fast && i + MR <= rows {
            // SAFETY: as below, for a full tile.
            unsafe {
                let ap = a.add(ip * kc * MR);
                simple_tile(kc, ap, b, bs, c.add(i * rsc), rsc, &row_bias(&e), cb, act)
            };
            continue;
        }
        // SAFETY: tile i of the block the caller vouches for; its panel starts ip panels in.
        unsafe {
            kernel(
                kc,
                a.add(ip * kc * MR),
                b,
                bs,
                c.add(i * rsc),
                rsc,
                MR.min(rows - i),
                nr,
                &e,
            )
        };
    }
}

/// The `panels` full tiles of one row of C (`mr` rows, `panels * NR` columns), each as
/// [`kernel`] on the same A panel, B panel `jp` from `b + jp * step`; `e` is the first
/// tile's epilogue.
///
/// # Safety
/// As [`kernel`] for each tile: every B panel must hold `kc` rows of `NR` floats, `bs`
/// apart, and `c` be valid for the whole `mr x panels * NR` block.
#[target_feature(enable = "avx2,fma")]
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
    if mr == MR && simple(e) {
        // Short-k tiles spent as long on per-tile setup as on their multiplies: the
        // epilogue is decided once for the row.
        let rb = row_bias(e);
        let act = e.act.map(EpilogueAct::of);
        for jp in 0..panels {
            let cb = col_bias(&e.cols_from(jp * NR));
            // SAFETY: tile jp of the block the caller vouches for: B panel jp holds kc rows
            // of NR floats bs apart, a holds kc * MR floats, C's MR x NR tile is ours.
            unsafe {
                let (bp, ct) = (b.add(jp * step), c.add(jp * NR));
                simple_tile(kc, a, bp, bs, ct, rsc, &rb, cb, act)
            };
        }
        return;
    }
    for jp in 0..panels {
        let e = e.cols_from(jp * NR);
        // SAFETY: tile jp of the block the caller vouches for.
        unsafe { kernel(kc, a, b.add(jp * step), bs, c.add(jp * NR), rsc, mr, NR, &e) };
    }
}

/// # Safety
/// The CPU must support AVX2 and FMA; `a` must hold `kc * MR` floats and `b` `kc` rows of
/// `NR` floats, `bs` apart; `c`
/// must be valid for reads and writes of the `mr x nr` tile with row stride `rsc`, accessed by
/// no one else meanwhile.
#[target_feature(enable = "avx2,fma")]
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
    // SAFETY: the loads stay within the kc steps of each panel; stores within the tile. The
    // prefetches may name addresses past C (wrapping arithmetic, no access): a prefetch never
    // faults and changes no memory.
    unsafe {
        // The driver's next tile to the right (same rows, next NR columns) is stored a
        // panel's worth of calls later: fetch its lines now so that store does not stall.
        prefetch_right(c, rsc, mr);
        // A tile of at most 8 columns (the last panel of N = 49, 196, ...) needs only half
        // the multiplies.
        let acc = if nr <= 8 {
            let half = product_half(kc, a, b, bs);
            std::array::from_fn(|i| [half[i], _mm256_setzero_ps()])
        } else {
            product(kc, a, b, bs)
        };
        let act = e.act.map(EpilogueAct::of);
        // Lanes of each half that belong to the tile (partial tiles load masked and store
        // only their nr columns: never touching C past them).
        let (m0, m1) = (lanes(nr.min(8)), lanes(nr.saturating_sub(8)));
        let alpha = _mm256_set1_ps(e.alpha);
        let scale = e.alpha != 1.0;
        let col_bias = e.last && e.col_bias.len() >= nr;
        let (cb0, cb1) = if col_bias {
            (
                _mm256_maskload_ps(e.col_bias.as_ptr(), m0),
                _mm256_maskload_ps(e.col_bias.as_ptr().add(8), m1),
            )
        } else {
            (_mm256_setzero_ps(), _mm256_setzero_ps())
        };
        // Only the tile's mr rows are stored.
        for (i, acc) in acc.iter().enumerate().take(mr) {
            let p = c.add(i * rsc);
            let (mut v0, mut v1) = (acc[0], acc[1]);
            if scale {
                v0 = _mm256_mul_ps(v0, alpha);
                v1 = _mm256_mul_ps(v1, alpha);
            }
            if e.accumulate {
                v0 = _mm256_add_ps(v0, _mm256_maskload_ps(p, m0));
                v1 = _mm256_add_ps(v1, _mm256_maskload_ps(p.add(8), m1));
            }
            let mut scalar_act = None;
            if e.last {
                if let Some(&rb) = e.row_bias.get(i) {
                    let rb = _mm256_set1_ps(rb);
                    v0 = _mm256_add_ps(v0, rb);
                    v1 = _mm256_add_ps(v1, rb);
                }
                if col_bias {
                    v0 = _mm256_add_ps(v0, cb0);
                    v1 = _mm256_add_ps(v1, cb1);
                }
                if let (Some(act), Some(kind)) = (act, e.act) {
                    match (act8(act, v0), act8(act, v1)) {
                        (Some(a0), Some(a1)) => (v0, v1) = (a0, a1),
                        _ => scalar_act = Some(kind),
                    }
                }
            }
            if nr == NR {
                _mm256_storeu_ps(p, v0);
                _mm256_storeu_ps(p.add(8), v1);
            } else {
                // Through a buffer: masked stores are microcoded (slow) on AMD up to Zen 2.
                let mut t = [0.0f32; NR];
                _mm256_storeu_ps(t.as_mut_ptr(), v0);
                _mm256_storeu_ps(t.as_mut_ptr().add(8), v1);
                std::ptr::copy_nonoverlapping(t.as_ptr(), p, nr);
            }
            if let Some(act) = scalar_act {
                // The row's nr values, stored just above: vectorised where the kind allows.
                super::activate(Some(act), std::slice::from_raw_parts_mut(p, nr));
            }
        }
    }
}

/// A mask of the first `n` (at most 8) lanes.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn lanes(n: usize) -> __m256i {
    const ONES_THEN_ZEROS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];
    let n = n.min(8);
    // SAFETY: reads 8 i32 from index 8 - n <= 8 of a 16-element array.
    unsafe { _mm256_loadu_si256(ONES_THEN_ZEROS.as_ptr().add(8 - n).cast()) }
}

/// The left half (8 columns) of [`product`], two k steps at a time into separate
/// accumulators so that twelve FMA chains stay in flight.
///
/// # Safety
/// As [`product`] (only the first 8 floats of each B row are read).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn product_half(kc: usize, a: *const f32, b: *const f32, bs: usize) -> [__m256; MR] {
    let mut even = [_mm256_setzero_ps(); MR];
    let mut odd = [_mm256_setzero_ps(); MR];
    let (mut ap, mut bp) = (a, b);
    // SAFETY: kc steps of MR floats of a and 8 floats of b, within what the caller vouches
    // for.
    unsafe {
        for _ in 0..kc / 2 {
            let (b0, b1) = (_mm256_loadu_ps(bp), _mm256_loadu_ps(bp.add(bs)));
            for (i, (e, o)) in even.iter_mut().zip(&mut odd).enumerate() {
                *e = _mm256_fmadd_ps(_mm256_broadcast_ss(&*ap.add(i)), b0, *e);
                *o = _mm256_fmadd_ps(_mm256_broadcast_ss(&*ap.add(MR + i)), b1, *o);
            }
            ap = ap.add(2 * MR);
            bp = bp.add(2 * bs);
        }
        if kc % 2 == 1 {
            let b0 = _mm256_loadu_ps(bp);
            for (i, e) in even.iter_mut().enumerate() {
                *e = _mm256_fmadd_ps(_mm256_broadcast_ss(&*ap.add(i)), b0, *e);
            }
        }
    }
    std::array::from_fn(|i| _mm256_add_ps(even[i], odd[i]))
}

/// Whether a full tile's epilogue is the common one [`store_simple`] does: a single k block
/// with a bias per row (conv) or per column (fully connected, at least NR of them) and a
/// vectorised activation, nothing to scale or add.
pub(super) fn simple(e: &TileEpi) -> bool {
    e.alpha == 1.0
        && !e.accumulate
        && e.last
        && (e.col_bias.is_empty() || e.col_bias.len() >= NR)
        && e.act.is_none_or(in_registers)
}

/// The bias of a full tile's NR columns, when it has one (see [`simple`]).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn col_bias(e: &TileEpi) -> Option<[__m256; 2]> {
    let cb: &[f32; NR] = e.col_bias.get(..NR)?.try_into().ok()?;
    // SAFETY: cb holds NR = 16 floats.
    Some(unsafe {
        [
            _mm256_loadu_ps(cb.as_ptr()),
            _mm256_loadu_ps(cb.as_ptr().add(8)),
        ]
    })
}

/// Fetches the lines of the tile to the right of `c` (same `rows`, next NR columns): the
/// driver stores it a few calls later, and that store would otherwise stall on the miss.
///
/// # Safety
/// The CPU must support AVX2 (any x86-64 has the prefetch).
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn prefetch_right(c: *mut f32, rsc: usize, rows: usize) {
    for i in 0..rows {
        // A prefetch never faults and changes no memory, so the address may lie past C
        // (wrapping arithmetic, no access).
        _mm_prefetch::<_MM_HINT_T0>(c.wrapping_add(i * rsc + NR) as *const i8);
    }
}

/// The bias of a tile's MR rows, broadcast (zeros when none).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn row_bias(e: &TileEpi) -> [__m256; MR] {
    std::array::from_fn(|i| _mm256_set1_ps(e.row_bias.get(i).copied().unwrap_or(0.0)))
}

/// One full tile through a [`simple`] epilogue: the next tile's lines fetched, the product
/// of the A panel `a` and the B rows `b` (`bs` apart), stored with row bias `rb`, column bias
/// `cb` and the activation.
///
/// # Safety
/// As [`product`] for `a` and `b`, and [`store_simple`] for the MR x NR tile at `c`.
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn simple_tile(
    kc: usize,
    a: *const f32,
    b: *const f32,
    bs: usize,
    c: *mut f32,
    rsc: usize,
    rb: &[__m256; MR],
    cb: Option<[__m256; 2]>,
    act: Option<EpilogueAct>,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        prefetch_right(c, rsc, MR);
        store_simple(&product(kc, a, b, bs), c, rsc, rb, cb, act);
    }
}

/// Stores a full tile through a [`simple`] epilogue: row bias `rb`, column bias `cb`,
/// activation.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `c` must be valid for writes of the MR x NR tile with
/// row stride `rsc`, accessed by no one else meanwhile.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn store_simple(
    acc: &[[__m256; 2]; MR],
    c: *mut f32,
    rsc: usize,
    rb: &[__m256; MR],
    cb: Option<[__m256; 2]>,
    act: Option<EpilogueAct>,
) {
    for (i, (acc, &rb)) in acc.iter().zip(rb).enumerate() {
        let (mut v0, mut v1) = (_mm256_add_ps(acc[0], rb), _mm256_add_ps(acc[1], rb));
        if let Some([c0, c1]) = cb {
            (v0, v1) = (_mm256_add_ps(v0, c0), _mm256_add_ps(v1, c1));
        }
        if let Some(act) = act {
            // SAFETY: this function's features.
            if let (Some(a0), Some(a1)) = unsafe { (act8(act, v0), act8(act, v1)) } {
                (v0, v1) = (a0, a1);
            }
        }
        // SAFETY: row i of the tile the caller vouches for.
        unsafe {
            _mm256_storeu_ps(c.add(i * rsc), v0);
            _mm256_storeu_ps(c.add(i * rsc + 8), v1);
        }
    }
}

/// The MR x NR accumulator tile: `kc` steps over the packed A panel `a` and `kc` rows of
/// `NR` floats of `b`, `bs` apart.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `a` must hold `kc * MR` floats and `b` the `kc` rows.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn product(kc: usize, a: *const f32, b: *const f32, bs: usize) -> [[__m256; 2]; MR] {
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    let (mut ap, mut bp) = (a, b);
    // SAFETY: kc steps of MR floats of a and NR floats of b, within what the caller vouches
    // for.
    unsafe {
        // Four steps per iteration: the loop's own instructions shared by more FMAs.
        for _ in 0..kc / 4 {
            for u in 0..4 {
                step(&mut acc, ap.add(u * MR), bp.add(u * bs));
            }
            ap = ap.add(4 * MR);
            bp = bp.add(4 * bs);
        }
        for _ in 0..kc % 4 {
            step(&mut acc, ap, bp);
            ap = ap.add(MR);
            bp = bp.add(bs);
        }
    }
    acc
}

/// One k step of [`product`]: `acc[i] += a[i] * b[..NR]`.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `a` must hold MR floats and `b` NR.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn step(acc: &mut [[__m256; 2]; MR], a: *const f32, b: *const f32) {
    // SAFETY: the caller's contract.
    unsafe {
        let b0 = _mm256_loadu_ps(b);
        let b1 = _mm256_loadu_ps(b.add(8));
        for (i, row) in acc.iter_mut().enumerate() {
            let av = _mm256_broadcast_ss(&*a.add(i));
            row[0] = _mm256_fmadd_ps(av, b0, row[0]);
            row[1] = _mm256_fmadd_ps(av, b1, row[1]);
        }
    }
}

/// `acc[i][..] += sum_p a[i * lda + p] * b[p * bs..][..NR]` for `i < m` (1..=4).
///
/// # Safety
/// The CPU must support AVX2 and FMA; `a` must hold `m` rows of `kc` values with stride
/// `lda`, and `b` `kc` rows of `NR` values with stride `bs`.
#[target_feature(enable = "avx2,fma")]
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
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn strip<const M: usize, const U: usize>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    bs: usize,
    acc: &mut [[f32; NR]; MR],
) {
    // SAFETY: loads stay within the kc rows of a and b the caller vouches for.
    unsafe {
        let mut v = [[[_mm256_setzero_ps(); 2]; M]; U];
        let mut p = 0;
        while p + U <= kc {
            for (u, vu) in v.iter_mut().enumerate() {
                let bp = b.add((p + u) * bs);
                let b0 = _mm256_loadu_ps(bp);
                let b1 = _mm256_loadu_ps(bp.add(8));
                for (i, vi) in vu.iter_mut().enumerate() {
                    let av = _mm256_broadcast_ss(&*a.add(i * lda + p + u));
                    vi[0] = _mm256_fmadd_ps(av, b0, vi[0]);
                    vi[1] = _mm256_fmadd_ps(av, b1, vi[1]);
                }
            }
            p += U;
        }
        while p < kc {
            let bp = b.add(p * bs);
            let b0 = _mm256_loadu_ps(bp);
            let b1 = _mm256_loadu_ps(bp.add(8));
            for (i, vi) in v[0].iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*a.add(i * lda + p));
                vi[0] = _mm256_fmadd_ps(av, b0, vi[0]);
                vi[1] = _mm256_fmadd_ps(av, b1, vi[1]);
            }
            p += 1;
        }
        for (i, row) in acc.iter_mut().enumerate().take(M) {
            let mut s0 = _mm256_loadu_ps(row.as_ptr());
            let mut s1 = _mm256_loadu_ps(row.as_ptr().add(8));
            for vu in &v {
                s0 = _mm256_add_ps(s0, vu[i][0]);
                s1 = _mm256_add_ps(s1, vu[i][1]);
            }
            _mm256_storeu_ps(row.as_mut_ptr(), s0);
            _mm256_storeu_ps(row.as_mut_ptr().add(8), s1);
        }
    }
}
