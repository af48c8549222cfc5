//! Unary math and activation functions: one op, [`Unary`], parametrised by [`UnaryKind`].
//!
//! Floats are computed in f64 ([`unary_f64`]) and rounded once to the element type. The kinds
//! that ONNX also defines on integers (Abs, Neg, Sign, Relu, Shrink) use exact integer
//! arithmetic there.

use super::Int;
use crate::dispatch_int;
use crate::op::{input, output, required, Prototype};
use crate::ops::util::unary_map;
use crate::{dispatch_float, op_bail, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Copy, Debug, PartialEq)]
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

/// The function on f64.
pub fn unary_f64(kind: UnaryKind, x: f64) -> f64 {
    use UnaryKind::*;
    match kind {
        Abs => x.abs(),
        Neg => -x,
        Exp => x.exp(),
        Log => x.ln(),
        Sqrt => x.sqrt(),
        Reciprocal => 1.0 / x,
        Floor => x.floor(),
        Ceil => x.ceil(),
        Round => x.round_ties_even(),
        Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                // 0 stays 0, NaN stays NaN.
                x
            }
        }
        Erf => erf(x),
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
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        Sigmoid => sigmoid(x),
        Tanh => x.tanh(),
        Softplus => softplus(x),
        Softsign => x / (1.0 + x.abs()),
        LeakyRelu { alpha } => {
            if x < 0.0 {
                alpha as f64 * x
            } else {
                x
            }
        }
        Elu { alpha } => {
            if x < 0.0 {
                alpha as f64 * x.exp_m1()
            } else {
                x
            }
        }
        Selu { alpha, gamma } => {
            let (a, g) = (alpha as f64, gamma as f64);
            if x > 0.0 {
                g * x
            } else {
                g * (a * x.exp() - a)
            }
        }
        Celu { alpha } => {
            let a = alpha as f64;
            x.max(0.0) + (a * (x / a).exp_m1()).min(0.0)
        }
        ThresholdedRelu { alpha } => {
            if x > alpha as f64 {
                x
            } else {
                0.0
            }
        }
        HardSigmoid { alpha, beta } => (alpha as f64 * x + beta as f64).clamp(0.0, 1.0),
        HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
        Mish => x * softplus(x).tanh(),
        Gelu { tanh: false } => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        Gelu { tanh: true } => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        Shrink { bias, lambd } => {
            let (b, l) = (bias as f64, lambd as f64);
            if x < -l {
                x + b
            } else if x > l {
                x - b
            } else {
                0.0
            }
        }
    }
}

/// The function on f32 (computed in f64, rounded once).
pub fn unary_f32(kind: UnaryKind, x: f32) -> f32 {
    unary_f64(kind, x as f64) as f32
}

fn sigmoid(x: f64) -> f64 {
    // Split by sign so exp never overflows into inf/inf.
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// `ln(1 + e^x)` without overflow.
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
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
        _ => T::from_f64(unary_f64(kind, v.to_f64())),
    }
}

/// A unary elementwise op.
#[derive(Clone, Debug, PartialEq)]
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
            unary_map::<T, T>(x, |v| T::from_f64(unary_f64(kind, v.to_f64())))?
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
