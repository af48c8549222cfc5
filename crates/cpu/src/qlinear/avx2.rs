//! The QLinear family on AVX2 + FMA: QLinearAdd's loop in intrinsics, QdqBinary's compiled for
//! eight lanes.

use super::{AddArgs, Dequantized, Kernels, Requantized, Run};
use crate::table::compiled_with;
use ferrolite_core::ops::elementwise::binary::BinaryKind;
use std::arch::x86_64::*;

pub(crate) const KERNELS: Kernels = Kernels {
    qdq_combine,
    add: Some(add),
    ..super::PORTABLE
};

compiled_with! {
    #[target_feature(enable = "avx2")]
    fn qdq_combine(
        kind: BinaryKind,
        a: Run<'_>,
        da: Dequantized,
        b: Run<'_>,
        db: Dequantized,
        q: Requantized,
        out: &mut [u8],
    ) {
        super::qdq_combine_impl(kind, a, da, b, db, q, out)
    }
}

fn add(a: &AddArgs, x: &[u8], y: Option<(&[u8], f32)>, out: &mut [u8]) {
    // SAFETY: reached only through the AVX2 and AVX-512 tables, whose CPUs have AVX2 and FMA;
    // `add_avx2` asserts that the slices have one length.
    unsafe { add_avx2(a, x, y, out) }
}

/// # Safety
/// The CPU has AVX2 and FMA; `x`, `y` and `out` have one length.
#[target_feature(enable = "avx2,fma")]
unsafe fn add_avx2(a: &AddArgs, x: &[u8], y: Option<(&[u8], f32)>, out: &mut [u8]) {
    let n = out.len();
    assert!(x.len() == n && y.is_none_or(|(y, _)| y.len() == n));
    let (rx, c) = (_mm256_set1_ps(a.rx), _mm256_set1_ps(a.constant));
    let ry = _mm256_set1_ps(y.map_or(0.0, |(_, r)| r));
    let (lo, hi) = (_mm256_set1_epi32(a.lo), _mm256_set1_epi32(a.hi));
    let (flo, fhi) = (_mm256_set1_ps(-4_000_000.0), _mm256_set1_ps(4_000_000.0));
    let widen = |p: *const u8| {
        let v = _mm_loadl_epi64(p as *const __m128i);
        _mm256_cvtepi32_ps(if a.signed {
            _mm256_cvtepi8_epi32(v)
        } else {
            _mm256_cvtepu8_epi32(v)
        })
    };
    let mut i = 0;
    while i + 8 <= n {
        let xv = widen(x.as_ptr().add(i));
        let inner = match y {
            Some((y, _)) => _mm256_fmadd_ps(widen(y.as_ptr().add(i)), ry, c),
            None => c,
        };
        let v = _mm256_fmadd_ps(xv, rx, inner);
        let v = _mm256_min_ps(_mm256_max_ps(v, flo), fhi);
        let q = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(v), lo), hi);
        let mut lanes = [0i32; 8];
        _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, q);
        for (o, &q) in out[i..i + 8].iter_mut().zip(&lanes) {
            *o = q as u8;
        }
        i += 8;
    }
    // The tail in scalar f32 with the same fused steps.
    let value = |b: u8| if a.signed { b as i8 as f32 } else { b as f32 };
    for j in i..n {
        let inner = match y {
            Some((y, ry)) => value(y[j]).mul_add(ry, a.constant),
            None => a.constant,
        };
        let v = value(x[j])
            .mul_add(a.rx, inner)
            .clamp(-4_000_000.0, 4_000_000.0);
        out[j] = (v.round_ties_even() as i32).clamp(a.lo, a.hi) as u8;
    }
}
