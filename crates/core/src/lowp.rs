//! Low-precision element types: float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0), float4
//! (E2M1) and 4-bit integers.
//!
//! Each is stored one byte per element: the bit pattern for the float types, the sign- or
//! zero-extended value for int4/uint4 (packing two per byte happens only in file formats). They
//! are storage and cast types; arithmetic ops do not accept them.
//!
//! Conversions follow the ONNX reference (ml_dtypes): round to nearest, ties to even; with
//! `saturate` out-of-range values and infinities clamp to the largest finite value, without it
//! they become infinity (E5M2) or NaN (the types without infinity). FNUZ types have no negative
//! zero and a single NaN, 0x80.

use crate::Elem;

/// How a minifloat encodes its special values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Special {
    /// IEEE-like: the top exponent holds infinity (mantissa 0) and NaN.
    Ieee,
    /// No infinity; NaN is the all-ones exponent and mantissa (E4M3FN).
    Fn,
    /// No infinity, no negative zero; the one NaN is 0x80.
    Fnuz,
    /// Neither infinity nor NaN (E2M1).
    None,
}

#[derive(Clone, Copy, Debug)]
struct Format {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    special: Special,
}

const E4M3FN: Format = Format {
    exp_bits: 4,
    man_bits: 3,
    bias: 7,
    special: Special::Fn,
};
const E4M3FNUZ: Format = Format {
    exp_bits: 4,
    man_bits: 3,
    bias: 8,
    special: Special::Fnuz,
};
const E5M2: Format = Format {
    exp_bits: 5,
    man_bits: 2,
    bias: 15,
    special: Special::Ieee,
};
const E5M2FNUZ: Format = Format {
    exp_bits: 5,
    man_bits: 2,
    bias: 16,
    special: Special::Fnuz,
};
const E2M1: Format = Format {
    exp_bits: 2,
    man_bits: 1,
    bias: 1,
    special: Special::None,
};

impl Format {
    fn sign_bit(self) -> u8 {
        1 << (self.exp_bits + self.man_bits)
    }

    fn max_exp_field(self) -> u32 {
        (1 << self.exp_bits) - 1
    }

    fn nan(self, negative: bool) -> u8 {
        match self.special {
            Special::Fnuz => 0x80,
            Special::Fn => 0x7F | if negative { 0x80 } else { 0 },
            Special::Ieee => 0x7E | if negative { 0x80 } else { 0 },
            // E2M1 has no NaN; ml_dtypes gives the pattern of -0.
            Special::None => 0x8,
        }
    }

    /// The largest finite value's bit pattern (positive).
    fn max_bits(self) -> u8 {
        let all = ((1u32 << (self.exp_bits + self.man_bits)) - 1) as u8;
        match self.special {
            Special::Ieee => all - (1 << self.man_bits) as u8, // top exponent is inf/NaN
            Special::Fn => all - 1,                            // all ones is NaN
            Special::Fnuz | Special::None => all,
        }
    }

    fn decode(self, bits: u8) -> f64 {
        let sign_bit = self.sign_bit();
        if self.special == Special::Fnuz && bits == 0x80 {
            return f64::NAN;
        }
        let neg = bits & sign_bit != 0;
        let mag = bits & (sign_bit - 1);
        let exp = (mag >> self.man_bits) as u32;
        let man = (mag & ((1 << self.man_bits) - 1)) as u32;
        let v = match self.special {
            Special::Ieee if exp == self.max_exp_field() => {
                if man == 0 {
                    f64::INFINITY
                } else {
                    f64::NAN
                }
            }
            Special::Fn if mag == sign_bit - 1 => f64::NAN,
            _ => {
                if exp == 0 {
                    man as f64 * pow2(1 - self.bias - self.man_bits as i32)
                } else {
                    (1.0 + man as f64 / (1u32 << self.man_bits) as f64)
                        * pow2(exp as i32 - self.bias)
                }
            }
        };
        if neg {
            -v
        } else {
            v
        }
    }

    fn encode(self, x: f64, saturate: bool) -> u8 {
        if x.is_nan() {
            return self.nan(x.is_sign_negative());
        }
        let neg = x.is_sign_negative();
        let sign = if neg { self.sign_bit() } else { 0 };
        let max_bits = self.max_bits();
        let max = self.decode(max_bits);
        let overflow = || -> u8 {
            if saturate || self.special == Special::None {
                sign | max_bits
            } else {
                match self.special {
                    Special::Ieee => sign | (self.max_exp_field() << self.man_bits) as u8,
                    _ => self.nan(neg),
                }
            }
        };
        let a = x.abs();
        if a.is_infinite() {
            return overflow();
        }
        let emin = 1 - self.bias; // exponent of the smallest normal
        let e = if a < pow2(emin) { emin } else { exponent_of(a) };
        let q = pow2(e - self.man_bits as i32);
        let r = (a / q).round_ties_even() * q;
        if r > max {
            return overflow();
        }
        if r == 0.0 {
            return if self.special == Special::Fnuz {
                0
            } else {
                sign
            };
        }
        let mag = if r < pow2(emin) {
            (r / pow2(emin - self.man_bits as i32)) as u32
        } else {
            let e = exponent_of(r);
            let man = (r / pow2(e - self.man_bits as i32)) as u32 - (1 << self.man_bits);
            (((e + self.bias) as u32) << self.man_bits) | man
        };
        sign | mag as u8
    }
}

fn pow2(e: i32) -> f64 {
    2f64.powi(e)
}

/// floor(log2(a)) of a finite positive f64, exactly.
fn exponent_of(a: f64) -> i32 {
    let bits = a.to_bits();
    let e = ((bits >> 52) & 0x7FF) as i32;
    if e == 0 {
        // f64 subnormal: far below every minifloat's range; any answer that keeps it tiny works.
        -1075
    } else {
        e - 1023
    }
}

/// How E8M0 rounds a value that is not a power of two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum E8M0Round {
    /// Up to the next power of two (the ONNX default).
    #[default]
    Up,
    Down,
    Nearest,
}

/// Converts to E8M0 (an unsigned power of two, 2^(bits-127); 0xFF is NaN). The sign is
/// ignored, as in the ONNX reference, which works on the f32 exponent field.
pub fn f32_to_e8m0(x: f32, saturate: bool, round: E8M0Round) -> u8 {
    let bits = x.to_bits();
    let exp = (bits >> 23) & 0xFF;
    if exp == 0xFF {
        return 0xFF;
    }
    let up = match round {
        E8M0Round::Down => false,
        E8M0Round::Up => bits & 0x7F_FFFF != 0,
        E8M0Round::Nearest => {
            let g = bits & 0x40_0000 != 0;
            let r = bits & 0x20_0000 != 0;
            let s = bits & 0x1F_FFFF != 0;
            // The reference treats a nonzero exponent as an odd last bit.
            g && (r || s || exp > 0)
        }
    };
    let e = exp + up as u32;
    if e >= 0xFF {
        if saturate {
            0xFE
        } else {
            0xFF
        }
    } else {
        e as u8
    }
}

pub fn e8m0_to_f64(bits: u8) -> f64 {
    if bits == 0xFF {
        f64::NAN
    } else {
        pow2(bits as i32 - 127)
    }
}

macro_rules! minifloat {
    ($(#[$doc:meta])* $name:ident, $fmt:expr, $dtype:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
        #[repr(transparent)]
        pub struct $name(pub u8);

        impl $name {
            pub fn from_f64_sat(v: f64, saturate: bool) -> Self {
                $name($fmt.encode(v, saturate))
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.to_f64())
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
                self.to_f64().partial_cmp(&o.to_f64())
            }
        }

        impl Elem for $name {
            const DTYPE: crate::DType = crate::DType::$dtype;
            fn to_f64(self) -> f64 {
                $fmt.decode(self.0)
            }
            /// Saturating, as ONNX's default `saturate=1`.
            fn from_f64(v: f64) -> Self {
                $name($fmt.encode(v, true))
            }
            fn to_i64(self) -> i64 {
                self.to_f64() as i64
            }
            fn from_i64(v: i64) -> Self {
                Self::from_f64(v as f64)
            }
        }
    };
}

minifloat!(
    /// float8 E4M3FN: bias 7, no infinity, NaN 0x7F/0xFF, max 448.
    F8E4M3FN,
    E4M3FN,
    F8E4M3FN
);
minifloat!(
    /// float8 E4M3FNUZ: bias 8, no infinity or -0, NaN 0x80, max 240.
    F8E4M3FNUZ,
    E4M3FNUZ,
    F8E4M3FNUZ
);
minifloat!(
    /// float8 E5M2: bias 15, IEEE infinities and NaNs, max 57344.
    F8E5M2,
    E5M2,
    F8E5M2
);
minifloat!(
    /// float8 E5M2FNUZ: bias 16, no infinity or -0, NaN 0x80, max 57344.
    F8E5M2FNUZ,
    E5M2FNUZ,
    F8E5M2FNUZ
);
minifloat!(
    /// float4 E2M1 in the low nibble: bias 1, no infinity or NaN, max 6.
    F4E2M1,
    E2M1,
    F4E2M1
);

/// float8 E8M0: 2^(bits-127), 0xFF is NaN; no sign, no zero.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub struct F8E8M0(pub u8);

impl std::fmt::Debug for F8E8M0 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_f64())
    }
}

impl PartialOrd for F8E8M0 {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        self.to_f64().partial_cmp(&o.to_f64())
    }
}

impl Elem for F8E8M0 {
    const DTYPE: crate::DType = crate::DType::F8E8M0;
    fn to_f64(self) -> f64 {
        e8m0_to_f64(self.0)
    }
    fn from_f64(v: f64) -> Self {
        F8E8M0(f32_to_e8m0(v as f32, true, E8M0Round::Up))
    }
    fn to_i64(self) -> i64 {
        self.to_f64() as i64
    }
    fn from_i64(v: i64) -> Self {
        Self::from_f64(v as f64)
    }
}

/// Signed 4-bit integer, stored sign-extended in a byte (-8..=7).
#[derive(
    Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, bytemuck::Pod, bytemuck::Zeroable,
)]
#[repr(transparent)]
pub struct I4(pub i8);

/// Unsigned 4-bit integer, stored in a byte (0..=15).
#[derive(
    Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, bytemuck::Pod, bytemuck::Zeroable,
)]
#[repr(transparent)]
pub struct U4(pub u8);

impl I4 {
    /// Rounds half to even and clamps to -8..=7 (QuantizeLinear's saturation).
    pub fn saturating(v: f64) -> I4 {
        I4(v.round_ties_even().clamp(-8.0, 7.0) as i8)
    }
}

impl U4 {
    pub fn saturating(v: f64) -> U4 {
        U4(v.round_ties_even().clamp(0.0, 15.0) as u8)
    }
}

impl std::fmt::Debug for I4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::fmt::Debug for U4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Elem for I4 {
    const DTYPE: crate::DType = crate::DType::I4;
    fn to_f64(self) -> f64 {
        self.0 as f64
    }
    /// Truncates toward zero and wraps modulo 16, like numpy's `astype(int4)` that the ONNX
    /// reference Cast uses. NaN and infinities become 0.
    fn from_f64(v: f64) -> Self {
        if !v.is_finite() {
            return I4(0);
        }
        Self::from_i64((v.trunc() % 16.0) as i64)
    }
    fn to_i64(self) -> i64 {
        self.0 as i64
    }
    fn from_i64(v: i64) -> Self {
        // Sign-extend the low nibble.
        I4((((v & 0xF) as i8) << 4) >> 4)
    }
}

impl Elem for U4 {
    const DTYPE: crate::DType = crate::DType::U4;
    fn to_f64(self) -> f64 {
        self.0 as f64
    }
    /// Truncates and wraps modulo 16 (see [`I4::from_f64`]).
    fn from_f64(v: f64) -> Self {
        if !v.is_finite() {
            return U4(0);
        }
        Self::from_i64((v.trunc() % 16.0) as i64)
    }
    fn to_i64(self) -> i64 {
        self.0 as i64
    }
    fn from_i64(v: i64) -> Self {
        U4((v & 0xF) as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e4m3fn(x: f64, sat: bool) -> u8 {
        F8E4M3FN::from_f64_sat(x, sat).0
    }

    #[test]
    fn e4m3fn_values() {
        assert_eq!(F8E4M3FN(0x7E).to_f64(), 448.0); // max finite
        assert!(F8E4M3FN(0x7F).to_f64().is_nan());
        assert!(F8E4M3FN(0xFF).to_f64().is_nan());
        assert_eq!(F8E4M3FN(0x01).to_f64(), 2f64.powi(-9)); // smallest subnormal
        assert_eq!(F8E4M3FN(0x08).to_f64(), 2f64.powi(-6)); // smallest normal
        assert_eq!(F8E4M3FN(0x38).to_f64(), 1.0);
        assert_eq!(F8E4M3FN(0xB8).to_f64(), -1.0);
        assert_eq!(e4m3fn(1.0, true), 0x38);
        assert_eq!(e4m3fn(-0.0, true), 0x80);
        // 464 is halfway between 448 (mantissa 110) and 480: ties to even, down.
        assert_eq!(e4m3fn(464.0, false), 0x7E);
        assert_eq!(e4m3fn(465.0, false), 0x7F);
        assert_eq!(e4m3fn(465.0, true), 0x7E);
        assert_eq!(e4m3fn(1e6, true), 0x7E);
        assert_eq!(e4m3fn(-1e6, true), 0xFE);
        assert_eq!(e4m3fn(f64::INFINITY, true), 0x7E);
        assert_eq!(e4m3fn(f64::NEG_INFINITY, true), 0xFE);
        assert_eq!(e4m3fn(f64::INFINITY, false), 0x7F);
        assert_eq!(e4m3fn(f64::NAN, true), 0x7F);
        // Subnormals: 2^-10 is halfway between 0 and 2^-9, ties to even 0; 3*2^-10 to 2*2^-9.
        assert_eq!(e4m3fn(2f64.powi(-10), true), 0x00);
        assert_eq!(e4m3fn(3.0 * 2f64.powi(-10), true), 0x02);
        assert_eq!(e4m3fn(2f64.powi(-9), true), 0x01);
        assert_eq!(e4m3fn(1e-7, true), 0);
        assert_eq!(e4m3fn(-1e-7, true), 0x80);
        // 1.0625 is halfway between 1 and 1.125 -> 1; 1.1875 between 1.125 and 1.25 -> 1.25.
        assert_eq!(e4m3fn(1.0625, true), 0x38);
        assert_eq!(e4m3fn(1.1875, true), 0x3A);
        assert_eq!(e4m3fn(0.47892547, true), 0x2F); // 0.46875
    }

    #[test]
    fn fnuz_values() {
        let f = |x: f64, s: bool| F8E4M3FNUZ::from_f64_sat(x, s).0;
        assert_eq!(F8E4M3FNUZ(0x7F).to_f64(), 240.0);
        assert!(F8E4M3FNUZ(0x80).to_f64().is_nan());
        assert_eq!(F8E4M3FNUZ(0xFF).to_f64(), -240.0);
        assert_eq!(F8E4M3FNUZ(0x01).to_f64(), 2f64.powi(-10));
        assert_eq!(f(-0.0, true), 0);
        assert_eq!(f(-1e-9, true), 0);
        assert_eq!(f(241.0, false), 0x7F);
        // 248: tie between 240 (odd mantissa 111) and 256 -> rounds up, overflows.
        assert_eq!(f(248.0, false), 0x80);
        assert_eq!(f(248.0, true), 0x7F);
        assert_eq!(f(f64::NEG_INFINITY, false), 0x80);
        assert_eq!(f(f64::NEG_INFINITY, true), 0xFF);
        assert_eq!(f(f64::NAN, true), 0x80);
        let g = |x: f64, s: bool| F8E5M2FNUZ::from_f64_sat(x, s).0;
        assert_eq!(F8E5M2FNUZ(0x7F).to_f64(), 57344.0);
        assert_eq!(F8E5M2FNUZ(0x01).to_f64(), 2f64.powi(-17));
        assert_eq!(g(61440.0, false), 0x80);
        assert_eq!(g(61439.0, false), 0x7F);
        assert_eq!(g(1e6, true), 0x7F);
    }

    #[test]
    fn e5m2_values() {
        let f = |x: f64, s: bool| F8E5M2::from_f64_sat(x, s).0;
        assert_eq!(F8E5M2(0x7B).to_f64(), 57344.0);
        assert_eq!(F8E5M2(0x7C).to_f64(), f64::INFINITY);
        assert_eq!(F8E5M2(0xFC).to_f64(), f64::NEG_INFINITY);
        assert!(F8E5M2(0x7D).to_f64().is_nan());
        assert_eq!(F8E5M2(0x01).to_f64(), 2f64.powi(-16));
        assert_eq!(f(61439.0, false), 0x7B);
        assert_eq!(f(61440.0, false), 0x7C); // tie to even overflows to inf
        assert_eq!(f(f64::INFINITY, false), 0x7C);
        assert_eq!(f(f64::INFINITY, true), 0x7B);
        assert_eq!(f(-1e6, true), 0xFB);
        assert_eq!(f(f64::NAN, false), 0x7E);
        assert_eq!(f(0.8191, true), 0x3B); // 0.875
    }

    #[test]
    fn e2m1_values() {
        let f = |x: f64| F4E2M1::from_f64(x).0;
        let all: Vec<f64> = (0..16).map(|b| F4E2M1(b).to_f64()).collect();
        assert_eq!(
            all,
            [
                0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0,
                -6.0
            ]
        );
        assert_eq!(f(0.25), 0); // tie to even
        assert_eq!(f(0.26), 1);
        assert_eq!(f(1.25), 2);
        assert_eq!(f(1.75), 4);
        assert_eq!(f(5.0), 6);
        assert_eq!(f(7.0), 7);
        assert_eq!(f(1e6), 7);
        assert_eq!(f(f64::NEG_INFINITY), 15);
        assert_eq!(f(-3.5), 14);
        assert_eq!(f(f64::NAN), 8);
    }

    #[test]
    fn e8m0_values() {
        assert_eq!(e8m0_to_f64(127), 1.0);
        assert_eq!(e8m0_to_f64(0), 2f64.powi(-127));
        assert!(e8m0_to_f64(255).is_nan());
        let up = |x: f32| f32_to_e8m0(x, true, E8M0Round::Up);
        assert_eq!(up(1.0), 127);
        assert_eq!(up(1.1), 128);
        assert_eq!(up(0.124), 124);
        assert_eq!(up(0.0), 0);
        assert_eq!(up(-4.0), 129);
        assert_eq!(up(f32::NAN), 255);
        assert_eq!(up(f32::MAX), 254); // saturates
        assert_eq!(f32_to_e8m0(f32::MAX, false, E8M0Round::Up), 255);
        assert_eq!(f32_to_e8m0(1.9, true, E8M0Round::Down), 127);
        assert_eq!(f32_to_e8m0(1.4, true, E8M0Round::Nearest), 127);
        assert_eq!(f32_to_e8m0(1.6, true, E8M0Round::Nearest), 128);
    }

    #[test]
    fn int4_values() {
        assert_eq!(I4::from_f64(-9.0), I4(7));
        assert_eq!(I4::from_f64(8.0), I4(-8));
        assert_eq!(I4::from_f64(-7.5), I4(-7));
        assert_eq!(I4::from_f64(f64::NAN), I4(0));
        assert_eq!(U4::from_f64(-1.0), U4(15));
        assert_eq!(U4::from_f64(16.0), U4(0));
        assert_eq!(I4::saturating(100.0), I4(7));
        assert_eq!(I4::saturating(-2.5), I4(-2));
        assert_eq!(U4::saturating(-3.0), U4(0));
        assert_eq!(U4::saturating(14.5), U4(14));
    }
}
