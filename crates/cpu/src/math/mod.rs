//! Vectorisable f32 approximations of exp, erf, tanh and sigmoid (about 1e-7 relative error
//! for exp, 2e-7 absolute for erf and tanh), written branch-free so the slice loops
//! autovectorise; the slice loops are compiled per ISA (`math/{avx2,avx512,neon}.rs`) and reached
//! through the ISA's table ([`crate::table`]).

// Published coefficients, kept as printed.
#![allow(clippy::excessive_precision)]

/// 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
const MAGIC: f32 = 12_582_912.0;

/// `a * b + c`: one fused instruction in the AVX2 + FMA slice loops (`FMA`), two roundings
/// elsewhere (a software fused multiply-add would cost far more than it saves).
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// e^x (NaN in, NaN out; overflows to inf, underflows through the subnormals to 0).
#[inline(always)]
pub(crate) fn exp<const F: bool>(x: f32) -> f32 {
    let xc = x.clamp(-104.0, 89.0);
    let t = madd::<F>(xc, std::f32::consts::LOG2_E, MAGIC);
    let n = t - MAGIC;
    let r = madd::<F>(n, -0.693_359_4, xc);
    let r = madd::<F>(n, 2.121_944_4e-4, r);
    let mut p = 1.987_569_1e-4f32;
    p = madd::<F>(p, r, 1.398_199_9e-3);
    p = madd::<F>(p, r, 8.333_452e-3);
    p = madd::<F>(p, r, 4.166_579_6e-2);
    p = madd::<F>(p, r, 1.666_666_5e-1);
    p = madd::<F>(p, r, 5.000_000_1e-1);
    let p = madd::<F>(p, r * r, r) + 1.0;
    // 2^n in two factors so that n in [-150, 128] stays within normal exponents.
    let ni = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let h = ni >> 1;
    let s1 = f32::from_bits(((h + 127) as u32) << 23);
    let s2 = f32::from_bits(((ni - h + 127) as u32) << 23);
    p * s1 * s2
}

#[inline(always)]
pub(crate) fn sigmoid<const F: bool>(x: f32) -> f32 {
    1.0 / (1.0 + exp::<F>(-x))
}

#[inline(always)]
pub(crate) fn tanh<const F: bool>(x: f32) -> f32 {
    let a = x.abs();
    // Small |x|: odd polynomial (Cephes tanhf); otherwise 1 - 2 / (e^{2|x|} + 1).
    let z = x * x;
    let mut p = -5.704_988_7e-3f32;
    p = madd::<F>(p, z, 2.063_908_9e-2);
    p = madd::<F>(p, z, -5.373_971_6e-2);
    p = madd::<F>(p, z, 1.333_144_2e-1);
    p = madd::<F>(p, z, -3.333_328_2e-1);
    let small = madd::<F>(p * z, x, x);
    let big = 1.0 - 2.0 / (exp::<F>(2.0 * a) + 1.0);
    let big = if x < 0.0 { -big } else { big };
    if a < 0.625 {
        small
    } else {
        big
    }
}

#[inline(always)]
pub(crate) fn erf<const F: bool>(x: f32) -> f32 {
    let a = x.abs();
    // |x| < 0.8: Maclaurin series to x^17; otherwise Abramowitz & Stegun 7.1.26 (absolute
    // error 1.5e-7, relative 2e-7 there).
    let z = x * x;
    let mut s = 1.0f32 / 685_440.0;
    s = madd::<F>(s, z, -1.0 / 75_600.0);
    s = madd::<F>(s, z, 1.0 / 9360.0);
    s = madd::<F>(s, z, -1.0 / 1320.0);
    s = madd::<F>(s, z, 1.0 / 216.0);
    s = madd::<F>(s, z, -1.0 / 42.0);
    s = madd::<F>(s, z, 1.0 / 10.0);
    s = madd::<F>(s, z, -1.0 / 3.0);
    s = madd::<F>(s, z, 1.0);
    let small = s * x * std::f32::consts::FRAC_2_SQRT_PI;
    let t = 1.0 / madd::<F>(0.327_591_1, a, 1.0);
    let mut p = 1.061_405_4f32;
    p = madd::<F>(p, t, -1.453_152);
    p = madd::<F>(p, t, 1.421_413_7);
    p = madd::<F>(p, t, -0.284_496_72);
    p = madd::<F>(p, t, 0.254_829_6);
    let big = 1.0 - p * t * exp::<F>(-z);
    let big = if x < 0.0 { -big } else { big };
    if a < 0.8 {
        small
    } else if a.is_nan() {
        x
    } else {
        big
    }
}

/// `x * Phi(x)`, Phi the normal CDF: `Phi(x) = erfc(-x / sqrt 2) / 2` from the large-argument
/// branch of [`erf`] alone (Abramowitz & Stegun 7.1.26, absolute error 1.5e-7, so GELU's
/// stays below 1.5e-7 |x|). Half of [`erf`]'s work, and no cancellation for negative x.
#[inline(always)]
pub(crate) fn gelu<const F: bool>(x: f32) -> f32 {
    let z = x * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / madd::<F>(0.327_591_1, z.abs(), 1.0);
    let mut p = 1.061_405_4f32;
    p = madd::<F>(p, t, -1.453_152);
    p = madd::<F>(p, t, 1.421_413_7);
    p = madd::<F>(p, t, -0.284_496_72);
    p = madd::<F>(p, t, 0.254_829_6);
    // erfc(|z|) / 2.
    let q = 0.5 * p * t * exp::<F>(-z * z);
    x * if x < 0.0 { q } else { 1.0 - q }
}

#[inline(always)]
pub(crate) fn gelu_tanh<const F: bool>(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2 / pi)
    0.5 * x * (1.0 + tanh::<F>(C * madd::<F>(0.044715 * x * x, x, x)))
}

/// `y[i] = f(x[i])` over the shorter of the two, in fixed blocks of 32 values, then the rest:
/// fixed-size loops vectorise, and four vectors in flight keep the FMA units busy where one
/// vector's chain of dependent multiply-adds alone would leave them idle.
#[inline(always)]
pub(crate) fn map_blocks(x: &[f32], y: &mut [f32], f: impl Fn(f32) -> f32) {
    const BLOCK: usize = 32;
    let mut xs = x.chunks_exact(BLOCK);
    let mut ys = y.chunks_exact_mut(BLOCK);
    for (yb, xb) in (&mut ys).zip(&mut xs) {
        let xb: &[f32; BLOCK] = xb.try_into().expect("BLOCK values");
        let yb: &mut [f32; BLOCK] = yb.try_into().expect("BLOCK values");
        for (y, &x) in yb.iter_mut().zip(xb) {
            *y = f(x);
        }
    }
    for (y, &x) in ys.into_remainder().iter_mut().zip(xs.remainder()) {
        *y = f(x);
    }
}

use crate::isa::Isa;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;

/// A function that [`Kernels::map`] takes over a slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MathFn {
    Exp,
    Erf,
    Tanh,
    Sigmoid,
    Gelu,
    GeluTanh,
}

/// The math family's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    /// `y[i] = f(x[i])` over the shorter of the two.
    pub(crate) map: fn(MathFn, &[f32], &mut [f32]),
}

/// Separate multiplies and adds, one value at a time.
pub(crate) const PORTABLE: Kernels = Kernels { map: map_plain };

fn map_plain(f: MathFn, x: &[f32], y: &mut [f32]) {
    fn each(x: &[f32], y: &mut [f32], f: impl Fn(f32) -> f32) {
        for (y, &x) in y.iter_mut().zip(x) {
            *y = f(x);
        }
    }
    match f {
        MathFn::Exp => each(x, y, exp::<false>),
        MathFn::Erf => each(x, y, erf::<false>),
        MathFn::Tanh => each(x, y, tanh::<false>),
        MathFn::Sigmoid => each(x, y, sigmoid::<false>),
        MathFn::Gelu => each(x, y, gelu::<false>),
        MathFn::GeluTanh => each(x, y, gelu_tanh::<false>),
    }
}

/// `f` over a slice in [`map_blocks`] with fused multiply-adds: the per-ISA files compile it
/// for their vectors. Each arm names its function, so the loop inlines it.
#[inline(always)]
fn map_fused(f: MathFn, x: &[f32], y: &mut [f32]) {
    match f {
        MathFn::Exp => map_blocks(x, y, exp::<true>),
        MathFn::Erf => map_blocks(x, y, erf::<true>),
        MathFn::Tanh => map_blocks(x, y, tanh::<true>),
        MathFn::Sigmoid => map_blocks(x, y, sigmoid::<true>),
        MathFn::Gelu => map_blocks(x, y, gelu::<true>),
        MathFn::GeluTanh => map_blocks(x, y, gelu_tanh::<true>),
    }
}

macro_rules! slice_fns {
    ($($name:ident => $f:ident),* $(,)?) => {
        $(
            /// The function over a slice (`y[i] = f(x[i])`, equal lengths), through the ISA's
            /// table.
            pub(crate) fn $name(isa: Isa, x: &[f32], y: &mut [f32]) {
                (isa.table().math.map)(MathFn::$f, x, y)
            }
        )*
    };
}

slice_fns! {
    exp_slice => Exp,
    erf_slice => Erf,
    tanh_slice => Tanh,
    sigmoid_slice => Sigmoid,
    gelu_slice => Gelu,
    gelu_tanh_slice => GeluTanh,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f32, b: f64) -> f64 {
        (a as f64 - b).abs() / b.abs().max(1e-30)
    }

    /// Both variants: separate multiplies and adds (portable) and fused (the AVX2 + FMA loops;
    /// `mul_add` is exact everywhere, in software where the CPU lacks it).
    fn check_accuracy<const F: bool>() {
        let mut x = -110.0f32;
        while x < 100.0 {
            let e = (x as f64).exp();
            if e > 1e-37 && e < 3e38 {
                assert!(rel(exp::<F>(x), e) < 3e-7, "exp({x}) fma {F}");
            }
            let s = 1.0 / (1.0 + (-(x as f64)).exp());
            assert!(
                (sigmoid::<F>(x) as f64 - s).abs() < 1e-6 * s.max(1e-30) + 1e-37,
                "sigmoid({x}) fma {F}"
            );
            let t = (x as f64).tanh();
            assert!(
                (tanh::<F>(x) as f64 - t).abs() < 3e-7 * t.abs().max(1e-6),
                "tanh({x}) fma {F}"
            );
            let r = ferrolite_core::ops::elementwise::unary::erf(x as f64);
            assert!(
                (erf::<F>(x) as f64 - r).abs() < 3e-7 * r.abs().max(0.1),
                "erf({x}) fma {F}"
            );
            let g = 0.5
                * x as f64
                * (1.0 + ferrolite_core::ops::elementwise::unary::erf(x as f64 / 2f64.sqrt()));
            assert!(
                // erf's absolute error, scaled by x / 2.
                (gelu::<F>(x) as f64 - g).abs() < 3e-7 * g.abs().max(x.abs() as f64).max(0.1),
                "gelu({x}) fma {F}"
            );
            x += 0.0137;
        }
        assert!(exp::<F>(f32::NAN).is_nan() && erf::<F>(f32::NAN).is_nan());
        assert!(tanh::<F>(f32::NAN).is_nan());
        assert_eq!(exp::<F>(100.0), f32::INFINITY);
        assert_eq!(exp::<F>(-200.0), 0.0);
        assert_eq!(tanh::<F>(50.0), 1.0);
        assert_eq!(erf::<F>(-10.0), -1.0);
    }

    #[test]
    fn accuracy() {
        check_accuracy::<false>();
        check_accuracy::<true>();
        let mut y = vec![0.0; 19];
        let xs: Vec<f32> = (0..19).map(|i| i as f32 * 0.3 - 3.0).collect();
        for isa in crate::tests::tested_isas() {
            exp_slice(isa, &xs, &mut y);
            for (a, b) in y.iter().zip(&xs) {
                assert!(rel(*a, (*b as f64).exp()) < 3e-7, "{isa}");
            }
        }
    }

    /// The vector slice functions (AVX2, AVX-512 and NEON builds of one loop) equal the fused
    /// scalar function on every value, whole blocks and the tail.
    #[test]
    fn simd_slices_equal_the_scalar_function() {
        type Pair = (fn(Isa, &[f32], &mut [f32]), fn(f32) -> f32);
        let fns: [(&str, Pair); 6] = [
            ("exp", (exp_slice, exp::<true>)),
            ("erf", (erf_slice, erf::<true>)),
            ("tanh", (tanh_slice, tanh::<true>)),
            ("sigmoid", (sigmoid_slice, sigmoid::<true>)),
            ("gelu", (gelu_slice, gelu::<true>)),
            ("gelu_tanh", (gelu_tanh_slice, gelu_tanh::<true>)),
        ];
        let xs: Vec<f32> = (0..1001).map(|i| (i as f32 * 0.37).sin() * 9.0).collect();
        let mut y = vec![0.0; xs.len()];
        for isa in crate::tests::tested_isas()
            .into_iter()
            .filter(|&i| i != Isa::Portable)
        {
            for (name, (slice, scalar)) in fns {
                slice(isa, &xs, &mut y);
                for (&x, &got) in xs.iter().zip(&y) {
                    let want = scalar(x);
                    assert!(
                        got.to_bits() == want.to_bits(),
                        "{name}({x}) {isa}: {got} vs {want}"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod bench {
    /// Rough timings: `cargo test --release -p ferrolite-cpu math::bench -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn timings() {
        let x: Vec<f32> = (0..131072)
            .map(|i| (i as f32 * 0.001).sin() * 4.0)
            .collect();
        let mut y = vec![0.0f32; x.len()];
        for (name, f) in [
            (
                "exp",
                super::exp_slice as fn(super::Isa, &[f32], &mut [f32]),
            ),
            ("erf", super::erf_slice),
            ("tanh", super::tanh_slice),
            ("gelu", super::gelu_slice),
        ] {
            for isa in crate::tests::tested_isas() {
                let t = std::time::Instant::now();
                for _ in 0..100 {
                    f(isa, &x, &mut y);
                }
                println!(
                    "{name} ({isa}): {:.3} ns/elt",
                    t.elapsed().as_nanos() as f64 / 100.0 / x.len() as f64
                );
            }
        }
        let t = std::time::Instant::now();
        for _ in 0..100 {
            for (o, v) in y.iter_mut().zip(&x) {
                *o = ferrolite_core::ops::elementwise::unary::erf(*v as f64) as f32;
            }
        }
        println!(
            "ref erf: {:.3} ns/elt",
            t.elapsed().as_nanos() as f64 / 100.0 / x.len() as f64
        );
    }
}
