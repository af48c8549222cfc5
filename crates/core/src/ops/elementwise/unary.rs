//! Unary math and activation functions: one op, [`Unary`], parametrised by [`UnaryKind`].
//!
//! [`UnaryKind`] is the one definition of every element-wise function: the standalone op, the
//! epilogue a Conv / Gemm / FullyConnected applies after its bias (see
//! [`UnaryKind::fuses_as_epilogue`]), the CPU kernels and the GPU's WGSL all take it, and its
//! formula ([`UnaryKind::apply`]) is written once, generic over f32 and f64. Backends match it
//! exhaustively, so a new kind does not compile until each handles or refuses it by name.
//!
//! The reference computes floats in f64 and rounds once to the element type. The kinds that
//! ONNX also defines on integers (Abs, Neg, Sign, Relu, Shrink) use exact integer arithmetic
//! there.

use super::Int;
use crate::dispatch_int;
use crate::op::{input, output, required, Prototype};
use crate::ops::util::unary_map;
use crate::{dispatch_float, op_bail, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum UnaryKind {
    Abs,
    Neg,
    Exp,
    Log,
    Sqrt,
    Reciprocal,
    Floor,
    Ceil,
    /// Halves round to even.
    Round,
    Sign,
    Erf,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Relu,
    Sigmoid,
    Tanh,
    Softplus,
    Softsign,
    LeakyRelu {
        alpha: f32,
    },
    Elu {
        alpha: f32,
    },
    Selu {
        alpha: f32,
        gamma: f32,
    },
    Celu {
        alpha: f32,
    },
    ThresholdedRelu {
        alpha: f32,
    },
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    HardSwish,
    Mish,
    /// `tanh`: the tanh approximation instead of the exact erf form.
    Gelu {
        tanh: bool,
    },
    Shrink {
        bias: f32,
        lambd: f32,
    },
    /// Clip to `[min, max]` with constant bounds (Relu6 is `Clip { min: 0, max: 6 }`); the
    /// standalone op with bound inputs is [`super::clip::Clip`].
    Clip {
        min: f32,
        max: f32,
    },
}

impl UnaryKind {
    /// ONNX attribute defaults for the parametrised activations.
    pub const LEAKY_RELU: UnaryKind = UnaryKind::LeakyRelu { alpha: 0.01 };
    pub const ELU: UnaryKind = UnaryKind::Elu { alpha: 1.0 };
    pub const SELU_ALPHA: f32 = 1.673_263_2;
    pub const SELU_GAMMA: f32 = 1.050_701;
    pub const SELU: UnaryKind = UnaryKind::Selu {
        alpha: Self::SELU_ALPHA,
        gamma: Self::SELU_GAMMA,
    };
    pub const CELU: UnaryKind = UnaryKind::Celu { alpha: 1.0 };
    pub const THRESHOLDED_RELU: UnaryKind = UnaryKind::ThresholdedRelu { alpha: 1.0 };
    pub const HARD_SIGMOID: UnaryKind = UnaryKind::HardSigmoid {
        alpha: 0.2,
        beta: 0.5,
    };
    pub const SHRINK: UnaryKind = UnaryKind::Shrink {
        bias: 0.0,
        lambd: 0.5,
    };

    pub fn name(self) -> &'static str {
        use UnaryKind::*;
        match self {
            Abs => "Abs",
            Neg => "Neg",
            Exp => "Exp",
            Log => "Log",
            Sqrt => "Sqrt",
            Reciprocal => "Reciprocal",
            Floor => "Floor",
            Ceil => "Ceil",
            Round => "Round",
            Sign => "Sign",
            Erf => "Erf",
            Sin => "Sin",
            Cos => "Cos",
            Tan => "Tan",
            Asin => "Asin",
            Acos => "Acos",
            Atan => "Atan",
            Sinh => "Sinh",
            Cosh => "Cosh",
            Asinh => "Asinh",
            Acosh => "Acosh",
            Atanh => "Atanh",
            Relu => "Relu",
            Sigmoid => "Sigmoid",
            Tanh => "Tanh",
            Softplus => "Softplus",
            Softsign => "Softsign",
            LeakyRelu { .. } => "LeakyRelu",
            Elu { .. } => "Elu",
            Selu { .. } => "Selu",
            Celu { .. } => "Celu",
            ThresholdedRelu { .. } => "ThresholdedRelu",
            HardSigmoid { .. } => "HardSigmoid",
            HardSwish => "HardSwish",
            Mish => "Mish",
            Gelu { .. } => "Gelu",
            Shrink { .. } => "Shrink",
            Clip { .. } => "Clip",
        }
    }

    /// Every kind at least once, with attribute values that exercise it, for the backends'
    /// tests. The match makes a new variant fail to compile here until it is listed.
    pub fn examples() -> Vec<UnaryKind> {
        use UnaryKind::*;
        let listed = |k: UnaryKind| match k {
            Abs
            | Neg
            | Exp
            | Log
            | Sqrt
            | Reciprocal
            | Floor
            | Ceil
            | Round
            | Sign
            | Erf
            | Sin
            | Cos
            | Tan
            | Asin
            | Acos
            | Atan
            | Sinh
            | Cosh
            | Asinh
            | Acosh
            | Atanh
            | Relu
            | Sigmoid
            | Tanh
            | Softplus
            | Softsign
            | LeakyRelu { .. }
            | Elu { .. }
            | Selu { .. }
            | Celu { .. }
            | ThresholdedRelu { .. }
            | HardSigmoid { .. }
            | HardSwish
            | Mish
            | Gelu { .. }
            | Shrink { .. }
            | Clip { .. } => k,
        };
        [
            Abs,
            Neg,
            Exp,
            Log,
            Sqrt,
            Reciprocal,
            Floor,
            Ceil,
            Round,
            Sign,
            Erf,
            Sin,
            Cos,
            Tan,
            Asin,
            Acos,
            Atan,
            Sinh,
            Cosh,
            Asinh,
            Acosh,
            Atanh,
            Relu,
            Sigmoid,
            Tanh,
            Softplus,
            Softsign,
            UnaryKind::LEAKY_RELU,
            LeakyRelu { alpha: 0.3 },
            UnaryKind::ELU,
            UnaryKind::SELU,
            UnaryKind::CELU,
            UnaryKind::THRESHOLDED_RELU,
            UnaryKind::HARD_SIGMOID,
            HardSwish,
            Mish,
            Gelu { tanh: false },
            Gelu { tanh: true },
            UnaryKind::SHRINK,
            Clip { min: 0.0, max: 6.0 },
            Clip {
                min: -0.25,
                max: f32::INFINITY,
            },
            Clip {
                min: f32::NEG_INFINITY,
                max: 0.5,
            },
        ]
        .map(listed)
        .to_vec()
    }

    /// An interval of inputs where the function is defined and finite, for tests that draw
    /// their inputs: the logarithms' and roots' positive values, the inverse functions'
    /// domains; [-8, 8] elsewhere (past every activation's knees).
    pub fn test_domain(self) -> (f32, f32) {
        use UnaryKind::*;
        match self {
            Log | Sqrt => (0.05, 8.0),
            Acosh => (1.0, 8.0),
            Asin | Acos | Atanh => (-0.95, 0.95),
            _ => (-8.0, 8.0),
        }
    }

    /// Whether the fusion passes fold this function into the epilogue of the op producing its
    /// input (Conv, ConvTranspose, Gemm, FullyConnected). Every backend computes any kind
    /// there; these are the ones cheap enough in a tile's epilogue to be worth it.
    pub fn fuses_as_epilogue(self) -> bool {
        use UnaryKind::*;
        match self {
            Relu
            | Clip { .. }
            | LeakyRelu { .. }
            | HardSigmoid { .. }
            | HardSwish
            | Sigmoid
            | Mish => true,
            Abs
            | Neg
            | Exp
            | Log
            | Sqrt
            | Reciprocal
            | Floor
            | Ceil
            | Round
            | Sign
            | Erf
            | Sin
            | Cos
            | Tan
            | Asin
            | Acos
            | Atan
            | Sinh
            | Cosh
            | Asinh
            | Acosh
            | Atanh
            | Tanh
            | Softplus
            | Softsign
            | Elu { .. }
            | Selu { .. }
            | Celu { .. }
            | ThresholdedRelu { .. }
            | Gelu { .. }
            | Shrink { .. } => false,
        }
    }

    /// The dtypes ONNX allows for this kind.
    pub fn dtypes(self) -> DTypeSet {
        match self {
            UnaryKind::Abs | UnaryKind::Sign | UnaryKind::Shrink { .. } => DTypeSet::NUMERIC,
            UnaryKind::Neg | UnaryKind::Relu => DTypeSet::SIGNED,
            _ => DTypeSet::FLOAT,
        }
    }
}

impl UnaryKind {
    /// The function, in f32 or f64 (the reference computes in f64 and rounds once).
    #[inline(always)]
    pub fn apply<F: super::real::Real>(self, x: F) -> F {
        use UnaryKind::*;
        let c = F::from_f64;
        let (zero, one) = (c(0.0), c(1.0));
        match self {
            Abs => x.abs(),
            Neg => -x,
            Exp => x.exp(),
            Log => x.ln(),
            Sqrt => x.sqrt(),
            Reciprocal => one / x,
            Floor => x.floor(),
            Ceil => x.ceil(),
            Round => x.round_ties_even(),
            Sign => {
                if x > zero {
                    one
                } else if x < zero {
                    -one
                } else {
                    // 0 stays 0, NaN stays NaN.
                    x
                }
            }
            Erf => c(erf(x.to_f64())),
            Sin => x.sin(),
            Cos => x.cos(),
            Tan => x.tan(),
            Asin => x.asin(),
            Acos => x.acos(),
            Atan => x.atan(),
            Sinh => x.sinh(),
            Cosh => x.cosh(),
            Asinh => x.asinh(),
            Acosh => x.acosh(),
            Atanh => x.atanh(),
            Relu => {
                if x < zero {
                    zero
                } else {
                    x
                }
            }
            Sigmoid => sigmoid(x),
            Tanh => x.tanh(),
            Softplus => softplus(x),
            Softsign => x / (one + x.abs()),
            LeakyRelu { alpha } => {
                if x < zero {
                    F::of(alpha) * x
                } else {
                    x
                }
            }
            Elu { alpha } => {
                if x < zero {
                    F::of(alpha) * x.exp_m1()
                } else {
                    x
                }
            }
            Selu { alpha, gamma } => {
                let (a, g) = (F::of(alpha), F::of(gamma));
                if x > zero {
                    g * x
                } else {
                    g * (a * x.exp() - a)
                }
            }
            Celu { alpha } => {
                let a = F::of(alpha);
                x.max(zero) + (a * (x / a).exp_m1()).min(zero)
            }
            ThresholdedRelu { alpha } => {
                if x > F::of(alpha) {
                    x
                } else {
                    zero
                }
            }
            HardSigmoid { alpha, beta } => clamp(F::of(alpha) * x + F::of(beta), zero, one),
            HardSwish => x * clamp(x / c(6.0) + c(0.5), zero, one),
            Mish => x * softplus(x).tanh(),
            Gelu { tanh: false } => {
                c(0.5) * x * (one + c(erf((x / c(std::f64::consts::SQRT_2)).to_f64())))
            }
            Gelu { tanh: true } => {
                let k = c((2.0 / std::f64::consts::PI).sqrt());
                c(0.5) * x * (one + (k * (x + c(0.044715) * x * x * x)).tanh())
            }
            Shrink { bias, lambd } => {
                let (b, l) = (F::of(bias), F::of(lambd));
                if x < -l {
                    x + b
                } else if x > l {
                    x - b
                } else {
                    zero
                }
            }
            // The comparisons of the Clip op: NaN passes through.
            Clip { min, max } => {
                let (lo, hi) = (F::of(min), F::of(max));
                let v = if x < lo { lo } else { x };
                if v > hi {
                    hi
                } else {
                    v
                }
            }
        }
    }

    /// `x` through an optional epilogue.
    #[inline(always)]
    pub fn apply_optional<F: super::real::Real>(act: Option<UnaryKind>, x: F) -> F {
        match act {
            Some(a) => a.apply(x),
            None => x,
        }
    }
}

impl std::fmt::Display for UnaryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use UnaryKind::*;
        let name = self.name();
        match *self {
            LeakyRelu { alpha } | Elu { alpha } | Celu { alpha } | ThresholdedRelu { alpha } => {
                write!(f, "{name}({alpha})")
            }
            Selu { alpha, gamma } => write!(f, "{name}({alpha}, {gamma})"),
            HardSigmoid { alpha, beta } => write!(f, "{name}({alpha}, {beta})"),
            Shrink { bias, lambd } => write!(f, "{name}({bias}, {lambd})"),
            Clip { min, max } => write!(f, "{name}({min}, {max})"),
            Gelu { tanh: true } => write!(f, "{name}(tanh)"),
            Abs
            | Neg
            | Exp
            | Log
            | Sqrt
            | Reciprocal
            | Floor
            | Ceil
            | Round
            | Sign
            | Erf
            | Sin
            | Cos
            | Tan
            | Asin
            | Acos
            | Atan
            | Sinh
            | Cosh
            | Asinh
            | Acosh
            | Atanh
            | Relu
            | Sigmoid
            | Tanh
            | Softplus
            | Softsign
            | HardSwish
            | Mish
            | Gelu { tanh: false } => {
                write!(f, "{name}")
            }
        }
    }
}

/// `v` clamped to `[lo, hi]`; NaN stays NaN.
#[inline(always)]
fn clamp<F: super::real::Real>(v: F, lo: F, hi: F) -> F {
    v.max(lo).min(hi)
}

#[inline(always)]
fn sigmoid<F: super::real::Real>(x: F) -> F {
    let one = F::from_f64(1.0);
    // Split by sign so exp never overflows into inf/inf.
    if x >= F::from_f64(0.0) {
        one / (one + (-x).exp())
    } else {
        let e = x.exp();
        e / (one + e)
    }
}

/// `ln(1 + e^x)` without overflow.
#[inline(always)]
fn softplus<F: super::real::Real>(x: F) -> F {
    x.max(F::from_f64(0.0)) + (-x.abs()).exp().ln_1p()
}

/// The error function, to about 1e-14 relative: the Maclaurin series below 2.5 and the
/// continued fraction of erfc above (Abramowitz & Stegun 7.1.14).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        let x2 = a * a;
        let mut term = a;
        let mut sum = a;
        for n in 1..200 {
            term *= -x2 / n as f64;
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else if a < 6.0 {
        let mut f = a;
        for k in (1..=120).rev() {
            f = a + (k as f64 * 0.5) / f;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * f)
    } else {
        1.0
    };
    r.copysign(x)
}

fn int_unary<T: Int>(kind: UnaryKind, v: T) -> T {
    match kind {
        UnaryKind::Abs => {
            if v.is_neg() {
                v.wneg()
            } else {
                v
            }
        }
        UnaryKind::Neg => v.wneg(),
        UnaryKind::Sign => {
            if v.is_neg() {
                T::from_i64(-1)
            } else if v == T::zero() {
                v
            } else {
                T::one()
            }
        }
        UnaryKind::Relu => {
            if v.is_neg() {
                T::zero()
            } else {
                v
            }
        }
        _ => T::from_f64(kind.apply(v.to_f64())),
    }
}

/// A unary elementwise op.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Unary {
    pub kind: UnaryKind,
}

macro_rules! unary_proto {
    ($name:ident, $set:expr) => {
        static $name: Prototype = Prototype {
            inputs: &[input("X", $set)],
            outputs: &[output("Y")],
            value_inputs: &[],
        };
    };
}
unary_proto!(P_FLOAT, DTypeSet::FLOAT);
unary_proto!(P_SIGNED, DTypeSet::SIGNED);
unary_proto!(P_NUMERIC, DTypeSet::NUMERIC);

impl Op for Unary {
    fn pointwise(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn prototype(&self) -> &'static Prototype {
        let set = self.kind.dtypes();
        if set == DTypeSet::NUMERIC {
            &P_NUMERIC
        } else if set == DTypeSet::SIGNED {
            &P_SIGNED
        } else {
            &P_FLOAT
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let kind = self.kind;
        let dt = x.dtype();
        let out = dispatch_float!(dt, T => {
            unary_map::<T, T>(x, |v| T::from_f64(kind.apply(v.to_f64())))?
        }, {
            dispatch_int!(dt, T => { unary_map::<T, T>(x, |v| int_unary(kind, v))? },
                op_bail!("{} does not support {dt} inputs", kind.name()))
        });
        Ok(vec![out])
    }

    fn flops(&self, _inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        outputs.first().map_or(0, |o| o.numel() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, f32s, run};
    use super::*;
    use crate::DType;

    fn un(kind: UnaryKind, x: &[f32]) -> Tensor {
        run(&Unary { kind }, &[Some(&f32s(&[x.len()], x))]).remove(0)
    }

    #[test]
    fn erf_matches_known_values() {
        let cases = [
            (0.0, 0.0),
            (0.1, 0.1124629160182849),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.0, 0.9953222650189527),
            (2.5, 0.999593047982555),
            (3.0, 0.9999779095030014),
            (4.0, 0.9999999845827421),
            (-1.0, -0.8427007929497149),
        ];
        for (x, want) in cases {
            let got = erf(x);
            assert!(
                (got - want).abs() <= 1e-14 * want.abs().max(1e-300),
                "erf({x}) = {got}"
            );
        }
        assert!((erf(1e-5) - 1.1283791670578999e-5).abs() < 1e-19);
    }

    #[test]
    #[allow(clippy::excessive_precision)]
    fn selu_defaults_are_the_onnx_values() {
        assert_eq!(UnaryKind::SELU_ALPHA as f64, 1.67326319217681884765625);
        assert_eq!(UnaryKind::SELU_GAMMA as f64, 1.05070102214813232421875);
    }

    #[test]
    fn math() {
        assert_close(&un(UnaryKind::Abs, &[-1.5, 2.0]), &[1.5, 2.0]);
        assert_close(&un(UnaryKind::Neg, &[-1.5, 2.0]), &[1.5, -2.0]);
        assert_close(&un(UnaryKind::Sqrt, &[4.0, 2.0]), &[2.0, 2f64.sqrt()]);
        assert_close(&un(UnaryKind::Reciprocal, &[4.0, -0.5]), &[0.25, -2.0]);
        assert_close(
            &un(UnaryKind::Round, &[0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6]),
            &[0.0, 2.0, 2.0, -0.0, -2.0, 2.0, -3.0],
        );
        assert_close(&un(UnaryKind::Floor, &[-1.5, 1.5]), &[-2.0, 1.0]);
        assert_close(&un(UnaryKind::Ceil, &[-1.5, 1.5]), &[-1.0, 2.0]);
        assert_close(
            &un(UnaryKind::Sign, &[-3.0, 0.0, 2.0, f32::NAN]),
            &[-1.0, 0.0, 1.0, f64::NAN],
        );
        assert_close(&un(UnaryKind::Exp, &[0.0, 1.0]), &[1.0, 1f32.exp() as f64]);
        assert_close(&un(UnaryKind::Log, &[1.0, 0.0]), &[0.0, f64::NEG_INFINITY]);
        assert_close(&un(UnaryKind::Acosh, &[1.0]), &[0.0]);
        assert_close(&un(UnaryKind::Atanh, &[0.5]), &[0.5f32.atanh() as f64]);
    }

    #[test]
    fn activations() {
        assert_close(&un(UnaryKind::Relu, &[-1.0, 2.0]), &[0.0, 2.0]);
        assert_close(&un(UnaryKind::Sigmoid, &[0.0, -1000.0]), &[0.5, 0.0]);
        assert_close(&un(UnaryKind::Softplus, &[0.0, 100.0]), &[2f64.ln(), 100.0]);
        assert_close(&un(UnaryKind::Softsign, &[1.0, -3.0]), &[0.5, -0.75]);
        assert_close(&un(UnaryKind::LEAKY_RELU, &[-1.0, 1.0]), &[-0.01, 1.0]);
        assert_close(&un(UnaryKind::ELU, &[-1.0, 1.0]), &[(-1f64).exp_m1(), 1.0]);
        let selu = un(UnaryKind::SELU, &[-1.0, 1.0]);
        assert_close(
            &selu,
            &[
                1.0507009873554805 * (1.6732632423543772 * ((-1f64).exp() - 1.0)),
                1.0507009873554805,
            ],
        );
        assert_close(&un(UnaryKind::CELU, &[-1.0, 2.0]), &[(-1f64).exp_m1(), 2.0]);
        assert_close(&un(UnaryKind::THRESHOLDED_RELU, &[1.0, 1.5]), &[0.0, 1.5]);
        assert_close(
            &un(UnaryKind::HARD_SIGMOID, &[-5.0, 0.0, 1.0, 5.0]),
            &[0.0, 0.5, 0.7, 1.0],
        );
        assert_close(
            &un(UnaryKind::HardSwish, &[-4.0, 0.0, 1.0, 4.0]),
            &[0.0, 0.0, 1.0 * (1.0 / 6.0 + 0.5), 4.0],
        );
        let m: f64 = 1f64.exp().ln_1p().tanh();
        assert_close(&un(UnaryKind::Mish, &[1.0]), &[m]);
        assert_close(
            &un(UnaryKind::Gelu { tanh: false }, &[1.0, -1.0]),
            &[0.8413447460685429, -0.15865525393145707],
        );
        assert_close(
            &un(UnaryKind::Gelu { tanh: true }, &[1.0]),
            &[0.8411919906082768],
        );
        assert_close(&un(UnaryKind::SHRINK, &[-1.0, 0.2, 1.0]), &[-1.0, 0.0, 1.0]);
        assert_close(
            &un(
                UnaryKind::Shrink {
                    bias: 1.5,
                    lambd: 1.5,
                },
                &[-2.0, 1.0, 2.0],
            ),
            &[-0.5, 0.0, 0.5],
        );
    }

    #[test]
    fn integers_and_half() {
        let x = Tensor::from_vec(&[4], vec![-3i8, 0, 5, i8::MIN]).unwrap();
        let r = |k| run(&Unary { kind: k }, &[Some(&x)]).remove(0).to_i64_vec();
        assert_eq!(r(UnaryKind::Abs), vec![3, 0, 5, -128]);
        assert_eq!(r(UnaryKind::Neg), vec![3, 0, -5, -128]);
        assert_eq!(r(UnaryKind::Sign), vec![-1, 0, 1, -1]);
        assert_eq!(r(UnaryKind::Relu), vec![0, 0, 5, 0]);
        let h = Tensor::from_vec(
            &[2],
            vec![half::f16::from_f32(1.0), half::f16::from_f32(-2.0)],
        )
        .unwrap();
        let y = run(
            &Unary {
                kind: UnaryKind::Exp,
            },
            &[Some(&h)],
        )
        .remove(0);
        assert_eq!(y.dtype(), DType::F16);
        assert_eq!(
            y.as_slice::<half::f16>().unwrap()[0],
            half::f16::from_f64(1f64.exp())
        );
        let u = Tensor::from_vec(&[1], vec![3u8]).unwrap();
        assert!(crate::infer::check_prototype(
            &Unary {
                kind: UnaryKind::Exp
            },
            &[Some(crate::InferInput {
                dtype: u.dtype(),
                shape: u.shape(),
                value: None
            })]
        )
        .is_err());
    }
}
