use super::{SendPtr, WinogradKernel, B, P, PANEL, ROWS};
use crate::nchwc::clamp_of;
use std::arch::x86_64::*;

/// `Z[p] = V[p] U[p]` for one patch position `p` of a block of `n` tiles: `v` is
/// `V[p]` (`n x C`, row-major), `z` receives `Z[p]` (`n x M`, row-major).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn product(k: &WinogradKernel, u: &[f32], v: &[f32], p: usize, z: &mut [f32]) {
    let (c, m) = (k.s.in_channels, k.s.out_channels);
    let panels = m.div_ceil(PANEL);
    let n = v.len() / c.max(1);
    let up = &u[p * panels * c * PANEL..(p + 1) * panels * c * PANEL];
    assert!(v.len() == n * c && z.len() == n * m);
    for panel in 0..panels {
        let b = up[panel * c * PANEL..].as_ptr();
        // The columns of this panel inside M, as the masks of its two vectors.
        let cols = (m - panel * PANEL).min(PANEL);
        let mask = |lanes: usize| ((1u32 << lanes.min(16)) - 1) as u16;
        let masks = (mask(cols), mask(cols.saturating_sub(16)));
        // The rows in as few calls as ROWS allows, of nearly equal sizes (33 rows as
        // 7 + 7 + 7 + 6 + 6, not 8 + 8 + 8 + 8 + 1, whose last call would load two
        // vectors of U for every two multiply-adds).
        let calls = n.div_ceil(ROWS);
        let mut r0 = 0;
        for call in 0..calls {
            let len = n / calls + usize::from(call < n % calls);
            // SAFETY: rows r0..r0 + len of v (n x c, asserted) and of z (n x m) at this
            // panel's columns, masked to M; the panel holds c rows of PANEL floats (u's
            // layout).
            unsafe {
                let a = v.as_ptr().add(r0 * c);
                let out = z.as_mut_ptr().add(r0 * m + panel * PANEL);
                r0 += len;
                match len {
                    1 => rows::<1>(c, a, b, out, m, masks),
                    2 => rows::<2>(c, a, b, out, m, masks),
                    3 => rows::<3>(c, a, b, out, m, masks),
                    4 => rows::<4>(c, a, b, out, m, masks),
                    5 => rows::<5>(c, a, b, out, m, masks),
                    6 => rows::<6>(c, a, b, out, m, masks),
                    7 => rows::<7>(c, a, b, out, m, masks),
                    _ => rows::<ROWS>(c, a, b, out, m, masks),
                }
            }
        }
    }
}

/// `R` rows of a product: `a` holds `R` rows of `c` values, `b` `c` rows of [`PANEL`]
/// values; the `R x PANEL` result goes to `out`, rows `ldz` apart, its two vectors
/// masked by `masks`.
///
/// # Safety
/// The CPU must support AVX-512F; the pointers must hold what is described.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn rows<const R: usize>(
    c: usize,
    a: *const f32,
    b: *const f32,
    out: *mut f32,
    ldz: usize,
    masks: (u16, u16),
) {
    let mut lo = [_mm512_setzero_ps(); R];
    let mut hi = [_mm512_setzero_ps(); R];
    // SAFETY: the caller's contract.
    unsafe {
        for ci in 0..c {
            let b0 = _mm512_loadu_ps(b.add(ci * PANEL));
            let b1 = _mm512_loadu_ps(b.add(ci * PANEL + 16));
            for r in 0..R {
                let x = _mm512_set1_ps(*a.add(r * c + ci));
                lo[r] = _mm512_fmadd_ps(x, b0, lo[r]);
                hi[r] = _mm512_fmadd_ps(x, b1, hi[r]);
            }
        }
        for r in 0..R {
            let o = out.add(r * ldz);
            _mm512_mask_storeu_ps(o, masks.0, lo[r]);
            _mm512_mask_storeu_ps(o.wrapping_add(16), masks.1, hi[r]);
        }
    }
}

/// `B^T d` for six rows (or columns) of a patch, eight channels a vector (points 0, 1,
/// -1, 2, -2 and infinity, as `crate::winograd`'s scalar `bt4`).
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
#[inline]
fn bt4(d: [__m256; 6]) -> [__m256; 6] {
    let [d0, d1, d2, d3, d4, d5] = d;
    let (c2, c4, c5) = (
        _mm256_set1_ps(2.0),
        _mm256_set1_ps(4.0),
        _mm256_set1_ps(5.0),
    );
    let (t, u) = (_mm256_sub_ps(d1, d3), _mm256_sub_ps(d4, d2));
    [
        _mm256_fmadd_ps(c4, d0, _mm256_fnmadd_ps(c5, d2, d4)),
        _mm256_fnmadd_ps(c4, _mm256_add_ps(d1, d2), _mm256_add_ps(d3, d4)),
        _mm256_fmadd_ps(c4, _mm256_sub_ps(d1, d2), _mm256_sub_ps(d4, d3)),
        _mm256_fnmadd_ps(c2, t, u),
        _mm256_fmadd_ps(c2, t, u),
        _mm256_fmadd_ps(c4, d1, _mm256_fnmadd_ps(c5, d3, d5)),
    ]
}

/// `A^T m` for six products, eight channels a vector (as the scalar `at4`).
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
#[inline]
fn at4(m: [__m256; 6]) -> [__m256; 4] {
    let [m0, m1, m2, m3, m4, m5] = m;
    let (s12, d12) = (_mm256_add_ps(m1, m2), _mm256_sub_ps(m1, m2));
    let (s34, d34) = (_mm256_add_ps(m3, m4), _mm256_sub_ps(m3, m4));
    [
        _mm256_add_ps(_mm256_add_ps(m0, s12), s34),
        _mm256_fmadd_ps(_mm256_set1_ps(2.0), d34, d12),
        _mm256_fmadd_ps(_mm256_set1_ps(4.0), s34, s12),
        _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0), d34, d12), m5),
    ]
}

/// The input transform of tiles `[t0, t1)`: `v[(p * n + t - t0) * C + ci]` for every
/// patch position `p` and channel `ci`, from the padded input `x`.
///
/// # Safety
/// The CPU must support AVX-512F and VL.
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
pub(super) unsafe fn input(k: &WinogradKernel, x: &[f32], t0: usize, t1: usize, v: &mut [f32]) {
    let c = k.s.in_channels;
    let (_, tw) = k.tiles();
    let (ph, pw) = k.padded();
    let n = t1 - t0;
    let vs = super::plane_stride(n * c);
    let plane = ph * pw * B;
    assert!(x.len() >= c / B * plane && v.len() >= P * vs);
    assert!(t1 <= k.tiles().0 * tw);
    // Tile by tile, its channel blocks in turn: each plane of V is written in order.
    for t in t0..t1 {
        for cb in 0..c / B {
            let (ty, tx) = (t / tw, t % tw);
            // SAFETY: the patch's rows 4 ty .. + 6 and columns 4 tx .. + 6 lie inside the
            // padded plane cb (4 th + 2 by 4 tw + 2, asserted x holds them); v holds P
            // rows of n tiles of c channels (asserted).
            unsafe {
                let base = x.as_ptr().add(cb * plane + (4 * ty * pw + 4 * tx) * B);
                // Rows first: h[i][q] = (row i of d) B, component q.
                let mut h = [[_mm256_setzero_ps(); 6]; 6];
                for (i, hi) in h.iter_mut().enumerate() {
                    let r = base.add(i * pw * B);
                    *hi = bt4(std::array::from_fn(|q| _mm256_loadu_ps(r.add(q * B))));
                }
                let dst = v.as_mut_ptr().add((t - t0) * c + cb * B);
                // Column q of the row-major 6 x 6 array h.
                #[allow(clippy::needless_range_loop)]
                for q in 0..6 {
                    let col = bt4(std::array::from_fn(|i| h[i][q]));
                    for (a, val) in col.into_iter().enumerate() {
                        _mm256_storeu_ps(dst.add((a * 6 + q) * vs), val);
                    }
                }
            }
        }
    }
}

/// The output transform of tiles `[t0, t1)` for output block `ob` (eight channels): the
/// 4x4 pixels of each tile inside the output, with bias and activation, into `y` (this
/// image's blocked output).
///
/// # Safety
/// The CPU must support AVX-512F and VL; no one else may write these tiles' pixels of
/// block `ob` meanwhile.
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
pub(super) unsafe fn output(
    k: &WinogradKernel,
    z: &[f32],
    t0: usize,
    t1: usize,
    ob: usize,
    y: SendPtr,
) {
    let m = k.s.out_channels;
    let (oh, ow) = (k.s.geometry.output[0], k.s.geometry.output[1]);
    let (_, tw) = k.tiles();
    let n = t1 - t0;
    let zs = super::plane_stride(n * m);
    assert!(z.len() >= P * zs && (ob + 1) * B <= m && k.bias.len() >= m);
    let clamp = clamp_of(k.act);
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let (lo, hi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
    // SAFETY: the bias holds m values (asserted).
    let bias = unsafe { _mm256_loadu_ps(k.bias.as_ptr().add(ob * B)) };
    let per_element = k.act.is_some() && clamp.is_none();
    let plane = oh * ow * B;
    for t in t0..t1 {
        let (ty, tx) = (t / tw, t % tw);
        let rows = (oh - 4 * ty).min(4);
        let cols = (ow - 4 * tx).min(4);
        // SAFETY: Z's rows of this tile (asserted size); the output pixels stored are
        // inside the image (rows, cols clipped) and block ob's plane, which the caller
        // lets this call write.
        unsafe {
            let src = z.as_ptr().add((t - t0) * m + ob * B);
            // Columns first: tmp[r][b] = (A^T Z)[r] for column b.
            let mut tmp = [[_mm256_setzero_ps(); 6]; 4];
            // Column b of Z's 6 x 6 positions into column b of tmp.
            #[allow(clippy::needless_range_loop)]
            for b in 0..6 {
                let col = at4(std::array::from_fn(|a| {
                    _mm256_loadu_ps(src.add((a * 6 + b) * zs))
                }));
                for (r, val) in col.into_iter().enumerate() {
                    tmp[r][b] = val;
                }
            }
            for (r, row) in tmp.iter().enumerate().take(rows) {
                let out = at4(*row);
                let dst = y.0.add(ob * plane + ((4 * ty + r) * ow + 4 * tx) * B);
                for (j, val) in out.into_iter().enumerate().take(cols) {
                    let val = _mm256_add_ps(val, bias);
                    let val = _mm256_min_ps(_mm256_max_ps(val, lo), hi);
                    _mm256_storeu_ps(dst.add(j * B), val);
                }
                if per_element {
                    let row = std::slice::from_raw_parts_mut(dst, cols * B);
                    crate::sgemm::activate(k.act, row);
                }
            }
        }
    }
}
