//! The QLinear family on AVX-512: QLinearAdd and QLinearMul sixteen lanes at a time, and, where
//! the CPU has VBMI, the 256-entry lookups 64 bytes at a time (`KERNELS_VBMI`).

use super::{AddArgs, Kernels, QMulKernel};
use std::arch::x86_64::*;

pub(crate) const KERNELS: Kernels = Kernels {
    add: Some(add),
    mul: Some(mul),
    ..super::avx2::KERNELS
};

/// For CPUs that also have AVX-512 VBMI.
pub(crate) const KERNELS_VBMI: Kernels = Kernels { lookup, ..KERNELS };

fn add(a: &AddArgs, x: &[u8], y: Option<(&[u8], f32)>, out: &mut [u8]) {
    // SAFETY: reached only through the AVX-512 tables, whose CPUs have AVX-512 F/BW/VL and
    // FMA; `add_avx512` asserts that the slices have one length.
    unsafe { add_avx512(a, x, y, out) }
}

fn mul(k: &QMulKernel, x: (&[u8], i32), y: (&[u8], i32), plane: usize, out: &mut [u8]) {
    // SAFETY: reached only through the AVX-512 tables, whose CPUs have AVX-512 F/BW/VL;
    // `mul_avx512` asserts the lengths it reads.
    unsafe { mul_avx512(k, x, y, plane, out) }
}

fn lookup(table: &[u8; 256], x: &[u8], y: &mut [u8]) {
    // SAFETY: reached only through the AVX-512 VBMI table (`Isa::table` checks VBMI).
    unsafe { lookup_vbmi(table, x, y) }
}

/// `out[i] = clamp(round((x[i] - zx) * (y - zy) * ratio + c_zero))`, `y` being `y[i]`
/// with planes of one, else the value of element `i`'s plane.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL; `x` and `out` have one length; `y` holds a value per
/// plane of `plane` elements of `x`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn mul_avx512(
    k: &QMulKernel,
    (x, zx): (&[u8], i32),
    (y, zy): (&[u8], i32),
    plane: usize,
    out: &mut [u8],
) {
    let n = out.len();
    assert!(x.len() == n && y.len() * plane >= n);
    let (ratio, c) = (_mm512_set1_ps(k.ratio), _mm512_set1_ps(k.c_zero));
    let (lo, hi) = if k.signed {
        (-128.0, 127.0)
    } else {
        (0.0, 255.0)
    };
    let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
    let (zxv, zyv) = (_mm512_set1_epi32(zx), _mm512_set1_epi32(zy));
    let widen = |p: *const u8, mask: __mmask16| {
        let v = _mm_maskz_loadu_epi8(mask, p as *const i8);
        if k.signed {
            _mm512_cvtepi8_epi32(v)
        } else {
            _mm512_cvtepu8_epi32(v)
        }
    };
    let value = |b: u8| if k.signed { b as i8 as i32 } else { b as i32 };
    // Elements `from..to` against `yv` (a per-plane value), or against `y` itself.
    let run = |from: usize, to: usize, yv: Option<__m512i>, out: *mut u8| {
        let mut i = from;
        while i < to {
            let m: __mmask16 = ((1u32 << (to - i).min(16)) - 1) as u16;
            let a = _mm512_sub_epi32(widen(x.as_ptr().add(i), m), zxv);
            let b = yv.unwrap_or_else(|| _mm512_sub_epi32(widen(y.as_ptr().add(i), m), zyv));
            // Exact: |(x - zx) (y - zy)| <= 255 * 255, which f32 holds.
            let p = _mm512_cvtepi32_ps(_mm512_mullo_epi32(a, b));
            // The reference's two roundings: the product, then the sum (not fused).
            let v = _mm512_add_ps(_mm512_mul_ps(p, ratio), c);
            let v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
            // Rounds half to even (the default rounding mode), as the reference does.
            let q = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v));
            _mm_mask_storeu_epi8(out.add(i) as *mut i8, m, q);
            i += 16;
        }
    };
    let dst = out.as_mut_ptr();
    if plane == 1 {
        run(0, n, None, dst);
    } else {
        for (p, &yb) in y.iter().enumerate().take(n.div_ceil(plane)) {
            let yv = _mm512_set1_epi32(value(yb) - zy);
            run(p * plane, ((p + 1) * plane).min(n), Some(yv), dst);
        }
    }
}

/// # Safety
/// The CPU has AVX-512F, BW and VL; `x`, `y` and `out` have one length.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
unsafe fn add_avx512(a: &AddArgs, x: &[u8], y: Option<(&[u8], f32)>, out: &mut [u8]) {
    let n = out.len();
    assert!(x.len() == n && y.is_none_or(|(y, _)| y.len() == n));
    let (rx, c) = (_mm512_set1_ps(a.rx), _mm512_set1_ps(a.constant));
    let ry = _mm512_set1_ps(y.map_or(0.0, |(_, r)| r));
    let (lo, hi) = (_mm512_set1_epi32(a.lo), _mm512_set1_epi32(a.hi));
    let (flo, fhi) = (_mm512_set1_ps(-4_000_000.0), _mm512_set1_ps(4_000_000.0));
    let widen = |p: *const u8, mask: __mmask16| {
        let v = _mm_maskz_loadu_epi8(mask, p as *const i8);
        _mm512_cvtepi32_ps(if a.signed {
            _mm512_cvtepi8_epi32(v)
        } else {
            _mm512_cvtepu8_epi32(v)
        })
    };
    let mut i = 0;
    while i < n {
        let m: __mmask16 = ((1u32 << (n - i).min(16)) - 1) as u16;
        let xv = widen(x.as_ptr().add(i), m);
        let inner = match y {
            Some((y, _)) => _mm512_fmadd_ps(widen(y.as_ptr().add(i), m), ry, c),
            None => c,
        };
        let v = _mm512_fmadd_ps(xv, rx, inner);
        let v = _mm512_min_ps(_mm512_max_ps(v, flo), fhi);
        // Rounds half to even (the default rounding mode), as the reference does.
        let q = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(v), lo), hi);
        _mm_mask_storeu_epi8(
            out.as_mut_ptr().add(i) as *mut i8,
            m,
            _mm512_cvtepi32_epi8(q),
        );
        i += 16;
    }
}

/// `y[i] = table[x[i]]`, 64 bytes at a time: two two-register byte permutes look up the low
/// seven bits in each half of the table, and the top bit picks the half.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VBMI.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn lookup_vbmi(table: &[u8; 256], x: &[u8], y: &mut [u8]) {
    let n = x.len().min(y.len());
    // SAFETY: the four loads read the table's 256 bytes; every load and store below stays
    // inside `x[..n]` and `y[..n]` (the last block through a mask of its `n - i` bytes).
    unsafe {
        let t = table.as_ptr() as *const __m512i;
        let (t0, t1) = (_mm512_loadu_si512(t), _mm512_loadu_si512(t.add(1)));
        let (t2, t3) = (_mm512_loadu_si512(t.add(2)), _mm512_loadu_si512(t.add(3)));
        let look = |v: __m512i| {
            let low = _mm512_permutex2var_epi8(t0, v, t1);
            let high = _mm512_permutex2var_epi8(t2, v, t3);
            _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), low, high)
        };
        let mut i = 0;
        while i + 64 <= n {
            let v = _mm512_loadu_si512(x.as_ptr().add(i) as *const __m512i);
            _mm512_storeu_si512(y.as_mut_ptr().add(i) as *mut __m512i, look(v));
            i += 64;
        }
        if i < n {
            let mask: __mmask64 = (1u64 << (n - i)) - 1;
            let v = _mm512_maskz_loadu_epi8(mask, x.as_ptr().add(i) as *const i8);
            _mm512_mask_storeu_epi8(y.as_mut_ptr().add(i) as *mut i8, mask, look(v));
        }
    }
}
