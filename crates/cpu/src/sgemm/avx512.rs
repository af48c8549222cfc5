//! The AVX-512 microkernels on the AVX2 kernels' packed layouts (MR = 6, NR = 16): two A
//! panels by one B panel (12 x 16, one zmm accumulator per row) or one A panel by two B
//! panels (6 x 32) in the common case, where per k step a B load feeds twelve 16-lane FMAs;
//! every other tile (partial panels, a short k's row of tiles, an epilogue that scales or
//! accumulates) in [`tile`], also on 16 lanes, masked to the tile's columns.

use super::{avx2, EpilogueAct, TileEpi, MR, NR};
use std::arch::x86_64::*;

/// Rows of the double tile.
const MR2: usize = 2 * MR;

/// The tiles of one column of C (`rows` rows in panels of `MR`, `nr` columns), as
/// [`avx2::column`], two panels at a time where it can.
///
/// # Safety
/// As [`avx2::column`]; the CPU must support AVX-512F (and AVX2 and FMA, which every AVX-512
/// CPU has).
#[target_feature(enable = "avx512f,avx2,fma")]
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
    let pairs = if nr == NR && avx2::simple(e) {
        rows / MR2
    } else {
        0
    };
    let cb = match e.col_bias.get(..NR) {
        // SAFETY: 16 floats.
        Some(cb) => unsafe { _mm512_loadu_ps(cb.as_ptr()) },
        None => _mm512_setzero_ps(),
    };
    let act = e.act.map(EpilogueAct::of);
    for p in 0..pairs {
        let i = p * MR2;
        let e = e.rows_from(i);
        let rb: [f32; MR2] = std::array::from_fn(|r| e.row_bias.get(r).copied().unwrap_or(0.0));
        // SAFETY: panels 2p and 2p + 1 of `a` (kc * MR floats each) and the full 12 x 16
        // tile of C at row i, inside what the caller vouches for.
        unsafe {
            let acc = product(kc, a.add(2 * p * kc * MR), b, bs);
            for (r, (&v, &rb)) in acc.iter().zip(&rb).enumerate() {
                let v = _mm512_add_ps(_mm512_add_ps(v, _mm512_set1_ps(rb)), cb);
                // `simple` admits only the activations computed in registers.
                let v = act.and_then(|a| act16(a, v)).unwrap_or(v);
                _mm512_storeu_ps(c.add((i + r) * rsc), v);
            }
        }
    }
    for i in (pairs * MR2..rows).step_by(MR) {
        // SAFETY: the remaining rows' panels (panel i / MR of `a`) and tiles of C.
        unsafe {
            let ap = a.add(i / MR * kc * MR);
            let (mr, e) = (MR.min(rows - i), e.rows_from(i));
            tile(kc, ap, b, b, bs, c.add(i * rsc), rsc, mr, nr, &e)
        }
    }
}

/// The 12 x 16 product of two A panels (`kc * MR` floats each, back to back) and `kc` rows of
/// 16 floats of `b`, `bs` apart.
///
/// # Safety
/// The CPU must support AVX-512F; `a` must hold `2 * kc * MR` floats and `b` the `kc` rows.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
unsafe fn product(kc: usize, a: *const f32, b: *const f32, bs: usize) -> [__m512; MR2] {
    let mut acc = [_mm512_setzero_ps(); MR2];
    let a1 = a.wrapping_add(kc * MR);
    // SAFETY: step p reads MR floats at p * MR of each panel and 16 at p * bs of b.
    unsafe {
        for p in 0..kc {
            let bv = _mm512_loadu_ps(b.add(p * bs));
            let (ap, aq) = (a.add(p * MR), a1.add(p * MR));
            for r in 0..MR {
                acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(*ap.add(r)), bv, acc[r]);
                acc[MR + r] = _mm512_fmadd_ps(_mm512_set1_ps(*aq.add(r)), bv, acc[MR + r]);
            }
        }
    }
    acc
}

/// The activations [`avx2::simple`] lets through, on 16 lanes; `None` for the others.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
fn act16(act: EpilogueAct, v: __m512) -> Option<__m512> {
    let zero = _mm512_setzero_ps();
    Some(match act {
        EpilogueAct::Relu => _mm512_max_ps(v, zero),
        EpilogueAct::Clip { min, max } => {
            _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(min)), _mm512_set1_ps(max))
        }
        EpilogueAct::LeakyRelu { alpha } => {
            let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, zero);
            _mm512_mask_mul_ps(v, neg, v, _mm512_set1_ps(alpha))
        }
        EpilogueAct::HardSigmoid { alpha, beta } => {
            let t = _mm512_fmadd_ps(v, _mm512_set1_ps(alpha), _mm512_set1_ps(beta));
            _mm512_min_ps(_mm512_max_ps(t, zero), _mm512_set1_ps(1.0))
        }
        EpilogueAct::HardSwish => {
            let t = _mm512_add_ps(_mm512_div_ps(v, _mm512_set1_ps(6.0)), _mm512_set1_ps(0.5));
            _mm512_mul_ps(
                v,
                _mm512_min_ps(_mm512_max_ps(t, zero), _mm512_set1_ps(1.0)),
            )
        }
        // Run per element after the store: `column` takes the AVX2 path for them.
        EpilogueAct::Mish | EpilogueAct::PerElement(_) => return None,
    })
}

/// The tiles of two adjacent columns of panels of C (`rows` rows in panels of `MR`, 2 NR
/// columns: B panels `b0` and `b1`, each `kc` rows of NR floats `bs` apart), 6 x 32 at a time
/// with two zmm accumulators per row: per k step two B loads and six broadcasts feed twelve
/// 16-lane FMAs, the AVX2 tile's ratio at twice the width. Tiles it does not take go to
/// [`avx2::column`], one B panel at a time.
///
/// # Safety
/// As [`avx2::column`] for each B panel and the `rows x 2 NR` block at `c`; the CPU must
/// support AVX-512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn column2(
    kc: usize,
    a: *const f32,
    rows: usize,
    b0: *const f32,
    b1: *const f32,
    bs: usize,
    c: *mut f32,
    rsc: usize,
    e: &TileEpi,
) {
    let right = e.cols_from(NR);
    let full = if avx2::simple(e) && avx2::simple(&right) {
        rows / MR
    } else {
        0
    };
    let load = |bias: &[f32]| match bias.get(..NR) {
        // SAFETY: 16 floats.
        Some(cb) => unsafe { _mm512_loadu_ps(cb.as_ptr()) },
        None => _mm512_setzero_ps(),
    };
    let (cb0, cb1) = (load(e.col_bias), load(right.col_bias));
    let act = e.act.map(EpilogueAct::of);
    for ip in 0..full {
        let i = ip * MR;
        let e = e.rows_from(i);
        // SAFETY: panel ip of `a` and the full 6 x 32 tile of C at row i, inside what the
        // caller vouches for.
        unsafe {
            let acc = product2(kc, a.add(ip * kc * MR), b0, b1, bs);
            for (r, [v0, v1]) in acc.into_iter().enumerate() {
                let rb = _mm512_set1_ps(e.row_bias.get(r).copied().unwrap_or(0.0));
                let v0 = _mm512_add_ps(_mm512_add_ps(v0, rb), cb0);
                let v1 = _mm512_add_ps(_mm512_add_ps(v1, rb), cb1);
                // `simple` admits only the activations computed in registers.
                let v0 = act.and_then(|a| act16(a, v0)).unwrap_or(v0);
                let v1 = act.and_then(|a| act16(a, v1)).unwrap_or(v1);
                let p = c.add((i + r) * rsc);
                _mm512_storeu_ps(p, v0);
                _mm512_storeu_ps(p.add(NR), v1);
            }
        }
    }
    for i in (full * MR..rows).step_by(MR) {
        // SAFETY: the remaining rows' panels (panel i / MR of `a`) and tiles of both B
        // panels, as the caller vouches.
        unsafe {
            let ap = a.add(i / MR * kc * MR);
            let (mr, e) = (MR.min(rows - i), e.rows_from(i));
            tile(kc, ap, b0, b1, bs, c.add(i * rsc), rsc, mr, 2 * NR, &e)
        }
    }
}

/// The `panels` full tiles of one row of C (`mr` rows, A panel `a`; B panel `jp` from
/// `b + jp * step`, its `kc` rows `bs` apart), two B panels a tile, as [`avx2::row`].
///
/// # Safety
/// As [`avx2::row`]; the CPU must support AVX-512F, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx2,fma")]
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
    for jp in (0..panels).step_by(2) {
        let nr = NR * (panels - jp).min(2);
        let e = e.cols_from(jp * NR);
        // SAFETY: tiles jp (and jp + 1) of the row the caller vouches for.
        unsafe {
            let (b0, b1) = (b.add(jp * step), b.wrapping_add((jp + 1) * step));
            tile(kc, a, b0, b1, bs, c.add(jp * NR), rsc, mr, nr, &e)
        }
    }
}

/// One tile: `mr <= MR` rows (A panel `a`, `kc * MR` floats) by `nr <= 2 NR` columns (B
/// panel `b0`, and `b1` for the columns past NR; `kc` rows each, `bs` apart), stored through
/// the whole epilogue `e`, masked to the tile.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA; `a` and the B panels in use must hold their
/// `kc` steps; `c` must be valid for reads and writes of the `mr x nr` tile with row stride
/// `rsc`, accessed by no one else meanwhile.
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    kc: usize,
    a: *const f32,
    b0: *const f32,
    b1: *const f32,
    bs: usize,
    c: *mut f32,
    rsc: usize,
    mr: usize,
    nr: usize,
    e: &TileEpi,
) {
    macro_rules! go {
        ($r:literal) => {
            // SAFETY: the caller's contract.
            unsafe {
                if nr > NR {
                    let acc = product_rows::<$r, 2>(kc, a, [b0, b1], bs);
                    store(&acc, c, rsc, nr, e)
                } else {
                    let acc = product_rows::<$r, 1>(kc, a, [b0], bs);
                    store(&acc, c, rsc, nr, e)
                }
            }
        };
    }
    match mr {
        6 => go!(6),
        5 => go!(5),
        4 => go!(4),
        3 => go!(3),
        2 => go!(2),
        1 => go!(1),
        _ => {}
    }
}

/// Rows `0..R` of one A panel by `V` B panels of 16 columns.
///
/// # Safety
/// The CPU must support AVX-512F; `a` must hold `kc * MR` floats and each `b[v]` `kc` rows
/// of 16 floats, `bs` apart.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
unsafe fn product_rows<const R: usize, const V: usize>(
    kc: usize,
    a: *const f32,
    b: [*const f32; V],
    bs: usize,
) -> [[__m512; V]; R] {
    let mut acc = [[_mm512_setzero_ps(); V]; R];
    // SAFETY: step p reads R floats at p * MR of the panel and 16 at p * bs of each B panel.
    unsafe {
        for p in 0..kc {
            let bv: [__m512; V] = std::array::from_fn(|v| _mm512_loadu_ps(b[v].add(p * bs)));
            let ap = a.add(p * MR);
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add(r));
                for (x, bv) in row.iter_mut().zip(&bv) {
                    *x = _mm512_fmadd_ps(av, *bv, *x);
                }
            }
        }
    }
    acc
}

/// Stores accumulator rows through the epilogue, each vector masked to the tile's `nr`
/// columns; activations not computed in registers run per element after the store.
///
/// # Safety
/// As [`tile`] for `c`.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
unsafe fn store<const R: usize, const V: usize>(
    acc: &[[__m512; V]; R],
    c: *mut f32,
    rsc: usize,
    nr: usize,
    e: &TileEpi,
) {
    let act = e.act.map(EpilogueAct::of).filter(|_| e.last);
    let mut per_element = false;
    for (r, row) in acc.iter().enumerate() {
        for (v, &x) in row.iter().enumerate() {
            let cols = nr.saturating_sub(v * NR).min(NR);
            if cols == 0 {
                continue;
            }
            let mask = lanes(cols);
            // SAFETY: row r, columns v * NR.. (masked to the tile) of C, and of the column
            // bias where it reaches.
            unsafe {
                let p = c.add(r * rsc + v * NR);
                let mut x = x;
                if e.alpha != 1.0 {
                    x = _mm512_mul_ps(x, _mm512_set1_ps(e.alpha));
                }
                if e.accumulate {
                    x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask, p));
                }
                if e.last {
                    if let Some(&rb) = e.row_bias.get(r) {
                        x = _mm512_add_ps(x, _mm512_set1_ps(rb));
                    }
                    let cb = e.col_bias.len().saturating_sub(v * NR).min(cols);
                    if cb > 0 {
                        let bias = e.col_bias.as_ptr().add(v * NR);
                        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(lanes(cb), bias));
                    }
                    if let Some(a) = act {
                        match act16(a, x) {
                            Some(y) => x = y,
                            None => per_element = true,
                        }
                    }
                }
                _mm512_mask_storeu_ps(p, mask, x);
            }
        }
    }
    if per_element {
        let f = e.act.expect("an activation");
        for r in 0..R {
            for j in 0..nr.min(V * NR) {
                // SAFETY: inside the tile, as above.
                unsafe {
                    let p = c.add(r * rsc + j);
                    *p = f.apply(*p);
                }
            }
        }
    }
}

/// The mask of the first `n` of 16 lanes.
#[inline]
fn lanes(n: usize) -> __mmask16 {
    if n >= 16 {
        0xFFFF
    } else {
        ((1u32 << n) - 1) as __mmask16
    }
}

/// The 6 x 32 product of one A panel (`kc * MR` floats) and `kc` rows of two B panels.
///
/// # Safety
/// The CPU must support AVX-512F; `a` must hold `kc * MR` floats and `b0`, `b1` the `kc`
/// rows of 16 floats, `bs` apart.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
unsafe fn product2(
    kc: usize,
    a: *const f32,
    b0: *const f32,
    b1: *const f32,
    bs: usize,
) -> [[__m512; 2]; MR] {
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    // SAFETY: step p reads MR floats at p * MR of the panel and 16 at p * bs of each B panel.
    unsafe {
        for p in 0..kc {
            let (x0, x1) = (
                _mm512_loadu_ps(b0.add(p * bs)),
                _mm512_loadu_ps(b1.add(p * bs)),
            );
            let ap = a.add(p * MR);
            for (r, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add(r));
                row[0] = _mm512_fmadd_ps(av, x0, row[0]);
                row[1] = _mm512_fmadd_ps(av, x1, row[1]);
            }
        }
    }
    acc
}
