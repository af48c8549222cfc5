//! Pooling on AVX2: the row reductions compiled eight wide, the fused 3x3 stride-2 window
//! rows, and blocked (NCHWc) planes with one register per pixel.

use super::{identity, pair, BlockedPoolKernel, Kernels, LANES};
use crate::stride2::avx2::window3_taps;
use crate::table::compiled_with;
use ferrolite_core::ops::nn::geometry::AxisGeometry;
use std::arch::x86_64::*;

pub(crate) const KERNELS: Kernels = Kernels {
    reduce_rows_max,
    reduce_rows_sum,
    window3x3s2_max: Some(window3x3s2::<true>),
    window3x3s2_sum: Some(window3x3s2::<false>),
    blocked_plane_max: blocked_plane::<true>,
    blocked_plane_avg: blocked_plane::<false>,
};

compiled_with! {
    #[target_feature(enable = "avx2")]
    fn reduce_rows_max(out: &mut [f32], rows: &[&[f32]]) {
        super::reduce_rows::<true>(out, rows)
    }
    fn reduce_rows_sum(out: &mut [f32], rows: &[&[f32]]) {
        super::reduce_rows::<false>(out, rows)
    }
}

fn blocked_plane<const MAX: bool>(k: &BlockedPoolKernel, src: &[f32], dst: &mut [f32]) {
    let (ih, iw) = (k.gh.input, k.gw.input);
    assert!(src.len() >= ih * iw * LANES);
    assert!(dst.len() >= k.gh.output * k.gw.output * LANES);
    // SAFETY: the CPU has AVX2 (reached only through the AVX2 tables); the taps' rows and
    // columns lie inside the plane (AxisPlan's ranges) whose size was asserted, and the
    // outputs inside `dst` (asserted).
    unsafe { plane::<MAX>(k, src, dst) }
}

/// One output row of a 3x3, stride-2 window over the input rows `r` (all three inside the
/// image), `pad` columns of padding on the left: the max (`MAX`) or sum of each window, folded
/// in the order of the row-then-column path (rows, then taps; identity for padding columns),
/// so both paths give the same values. Eight outputs at a time where their 17 input columns
/// lie inside the rows, one at a time elsewhere.
fn window3x3s2<const MAX: bool>(r: [&[f32]; 3], pad: usize, out: &mut [f32]) {
    let iw = r[0].len().min(r[1].len()).min(r[2].len());
    // The vector blocks: outputs j0.. whose windows start at column 2 j - pad >= 0.
    let j0 = pad.div_ceil(2).min(out.len());
    let mut j = j0;
    let id = identity::<MAX>();
    while j + 8 <= out.len() && 2 * j + 17 <= iw + pad {
        // SAFETY: the CPU has AVX2 (reached only through the AVX2 tables); columns 2 j - pad up to
        // 2 j - pad + 16 lie inside every row (checked just above), outputs j..j + 8 inside
        // `out`.
        unsafe { window3x3s2_block::<MAX>(r, 2 * j - pad, &mut out[j..j + 8]) };
        j += 8;
    }
    // A last block ending at the row's end, overlapping the one before (same values).
    let n = out.len();
    if j < n && n >= j0 + 8 && 2 * (n - 8) + 17 <= iw + pad {
        // SAFETY: as above, for outputs n - 8..n.
        unsafe { window3x3s2_block::<MAX>(r, 2 * (n - 8) - pad, &mut out[n - 8..]) };
        j = n;
    }
    // The rest: windows over the padding (or past the row's end, ceil mode).
    let pair = pair::<MAX>;
    let column = |c: i64| {
        if c < 0 || c as usize >= iw {
            return id;
        }
        r.iter().fold(id, |a, row| pair(a, row[c as usize]))
    };
    let (head, rest) = out.split_at_mut(j0);
    let tail = &mut rest[j - j0..];
    let edges = head.iter_mut().enumerate();
    let edges = edges.chain(tail.iter_mut().enumerate().map(|(t, o)| (j + t, o)));
    for (jj, o) in edges {
        let c = 2 * jj as i64 - pad as i64;
        *o = (0..3).fold(id, |a, kw| pair(a, column(c + kw)));
    }
}

/// Eight outputs of [`window3x3s2`] from input column `c0`: each row's 17 values from `c0`
/// reduced vertically, then split into even and odd columns by shuffles.
///
/// # Safety
/// The CPU must support AVX2; every row must hold `c0 + 17` values and `out` 8.
#[target_feature(enable = "avx2")]
unsafe fn window3x3s2_block<const MAX: bool>(r: [&[f32]; 3], c0: usize, out: &mut [f32]) {
    debug_assert!(r.iter().all(|row| row.len() >= c0 + 17) && out.len() >= 8);
    // `max_ps(v, acc)` is `v > acc ? v : acc`, the scalar fold's step (NaN never kept).
    let step = |acc: __m256, v: __m256| {
        if MAX {
            _mm256_max_ps(v, acc)
        } else {
            _mm256_add_ps(acc, v)
        }
    };
    let id = _mm256_set1_ps(identity::<MAX>());
    let (mut a, mut b, mut c) = (id, id, id);
    for row in r {
        // SAFETY: 17 values from c0 lie inside the row (the caller's contract).
        unsafe {
            let p = row.as_ptr().add(c0);
            a = step(a, _mm256_loadu_ps(p));
            b = step(b, _mm256_loadu_ps(p.add(8)));
            c = step(c, _mm256_set1_ps(*p.add(16)));
        }
    }
    let [even, odd, next] = window3_taps(a, b, c);
    let v = step(step(step(id, even), odd), next);
    // SAFETY: out holds 8 values (the caller's contract).
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
}

/// [`BlockedPoolKernel::plane_impl`] with one register per pixel.
///
/// # Safety
/// The CPU must support AVX2; `src` must hold the input plane and `dst` the output plane.
#[target_feature(enable = "avx2")]
unsafe fn plane<const MAX: bool>(k: &BlockedPoolKernel, src: &[f32], dst: &mut [f32]) {
    let (iw, ow) = (k.gw.input, k.gw.output);
    let (x, y) = (src.as_ptr(), dst.as_mut_ptr());
    // Input coordinates of taps, as `AxisGeometry::tap` (inlined here).
    let tap = |g: &AxisGeometry, o: usize, k: usize| o * g.stride + k * g.dilation - g.pad_begin;
    // Pixels whose window lies inside the row go four at a time: four independent
    // chains instead of one waiting on each step.
    let full = |o: usize| k.w.lo[o] == 0 && k.w.hi[o] == k.gw.kernel;
    for oh in 0..k.gh.output {
        let rows = tap(&k.gh, oh, k.h.lo[oh])..tap(&k.gh, oh, k.h.hi[oh]);
        let mut o = 0;
        while o < ow {
            let cols = tap(&k.gw, o, k.w.lo[o])..tap(&k.gw, o, k.w.hi[o]);
            let at = (oh * ow + o) * LANES;
            if o + 4 <= ow && full(o) && full(o + 3) {
                // SAFETY: the windows' taps lie inside the plane (the caller's
                // contract) and pixels o..o + 4 inside the output row.
                let acc = unsafe { pool_pixels::<MAX, 4>(x, iw, &k.gh, &k.gw, rows.clone(), cols) };
                for (p, a) in acc.iter().enumerate() {
                    store::<MAX>(k, *a, y, at + p * LANES, oh, o + p);
                }
                o += 4;
            } else {
                // SAFETY: as above for pixel o.
                let acc = unsafe { pool_pixels::<MAX, 1>(x, iw, &k.gh, &k.gw, rows.clone(), cols) };
                store::<MAX>(k, acc[0], y, at, oh, o);
                o += 1;
            }
        }
    }
}

/// Stores pixel (oh, o)'s max, or its sum divided by the window's count, at `y + at`.
#[target_feature(enable = "avx2")]
#[inline]
fn store<const MAX: bool>(
    k: &BlockedPoolKernel,
    acc: __m256,
    y: *mut f32,
    at: usize,
    oh: usize,
    o: usize,
) {
    let mut v = [0f32; LANES];
    // SAFETY: `v` holds eight values.
    unsafe { _mm256_storeu_ps(v.as_mut_ptr(), acc) };
    if !MAX {
        let cnt = if k.count_include_pad {
            k.h.padded[oh] * k.w.padded[o]
        } else {
            (k.h.hi[oh] - k.h.lo[oh]) * (k.w.hi[o] - k.w.lo[o])
        };
        for v in &mut v {
            *v = (*v as f64 / cnt as f64) as f32;
        }
    }
    // SAFETY: the caller passes an output pixel inside the plane.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), y.add(at), LANES) };
}

/// The max (`MAX`) or sum over input `rows` x `cols` (stepped by the dilations) of `N`
/// neighbouring output pixels, one register each.
///
/// # Safety
/// The CPU must support AVX2; every tap of the `N` windows must lie inside the plane at `x`
/// (row width `iw`, eight values per pixel).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn pool_pixels<const MAX: bool, const N: usize>(
    x: *const f32,
    iw: usize,
    gh: &AxisGeometry,
    gw: &AxisGeometry,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) -> [__m256; N] {
    let mut acc = [_mm256_set1_ps(identity::<MAX>()); N];
    for r in rows.step_by(gh.dilation) {
        for c in cols.clone().step_by(gw.dilation) {
            for (p, a) in acc.iter_mut().enumerate() {
                // SAFETY: the caller's contract.
                let v = unsafe { _mm256_loadu_ps(x.add((r * iw + c + p * gw.stride) * LANES)) };
                // `max_ps(v, acc)` is `v > acc ? v : acc`, the scalar fold's step.
                *a = if MAX {
                    _mm256_max_ps(v, *a)
                } else {
                    _mm256_add_ps(*a, v)
                };
            }
        }
    }
    acc
}
