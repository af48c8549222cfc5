//! The AVX-512 microkernel: two MR x NR tiles of a column at once, 12 x 16 with one zmm
//! accumulator per row. Per k step one B load feeds twelve FMAs of 16 lanes, twice the
//! AVX2 tile's multiply-adds per step for the same B panel, so the packed layouts (MR = 6,
//! NR = 16) stay as they are. Tiles outside the common case (a partial or odd last panel,
//! an epilogue that scales, accumulates or runs its activation per element) go to the AVX2
//! kernels, which every AVX-512 CPU also runs.

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
    let done = pairs * MR2;
    if done < rows {
        // SAFETY: the remaining rows, their panels starting 2 * pairs panels in.
        unsafe {
            avx2::column(
                kc,
                a.add(done / MR * kc * MR),
                rows - done,
                b,
                bs,
                c.add(done * rsc),
                rsc,
                nr,
                &e.rows_from(done),
            )
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
    let done = full * MR;
    if done < rows {
        let (e, ap) = (e.rows_from(done), a.wrapping_add(full * kc * MR));
        let (left, right) = (e, e.cols_from(NR));
        // SAFETY: the remaining rows of both B panels, as the caller vouches.
        unsafe {
            let c = c.add(done * rsc);
            avx2::column(kc, ap, rows - done, b0, bs, c, rsc, NR, &left);
            avx2::column(kc, ap, rows - done, b1, bs, c.add(NR), rsc, NR, &right);
        }
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
