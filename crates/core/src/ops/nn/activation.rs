//! Activations a fusion pass folds into the epilogue of Conv, ConvTranspose, Gemm and
//! FullyConnected: the producing op applies it to each output element after the bias, so the
//! activation's tensor is never written.
//!
//! The formulas match the standalone ops (Relu, Clip, LeakyRelu, HardSigmoid, HardSwish,
//! Sigmoid) so a fused graph gives the unfused graph's outputs.

use std::fmt;

/// An element-wise activation applied after a linear op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Relu,
    /// Clip to `[min, max]` (Relu6 is `Clip { min: 0, max: 6 }`).
    Clip {
        min: f32,
        max: f32,
    },
    LeakyRelu {
        alpha: f32,
    },
    /// `clamp(alpha * x + beta, 0, 1)`.
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    /// `x * clamp(x / 6 + 0.5, 0, 1)`.
    HardSwish,
    Sigmoid,
}

impl Activation {
    /// Applies the activation to one f32 value.
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Relu => x.max(0.0),
            Activation::Clip { min, max } => x.max(min).min(max),
            Activation::LeakyRelu { alpha } => {
                if x < 0.0 {
                    alpha * x
                } else {
                    x
                }
            }
            Activation::HardSigmoid { alpha, beta } => (alpha * x + beta).clamp(0.0, 1.0),
            Activation::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        }
    }

    /// Applies the activation in f64 (the reference implementations compute in f64).
    pub fn apply_f64(self, x: f64) -> f64 {
        match self {
            Activation::Relu => x.max(0.0),
            Activation::Clip { min, max } => x.max(min as f64).min(max as f64),
            Activation::LeakyRelu { alpha } => {
                if x < 0.0 {
                    alpha as f64 * x
                } else {
                    x
                }
            }
            Activation::HardSigmoid { alpha, beta } => {
                (alpha as f64 * x + beta as f64).clamp(0.0, 1.0)
            }
            Activation::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
            Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        }
    }

    /// Applies the activation to every element of `xs` in place.
    pub fn apply_slice(self, xs: &mut [f32]) {
        for x in xs {
            *x = self.apply(*x);
        }
    }
}

/// Applies an optional epilogue activation (f64, for references).
pub fn apply_optional_f64(act: Option<Activation>, x: f64) -> f64 {
    match act {
        Some(a) => a.apply_f64(x),
        None => x,
    }
}

impl fmt::Display for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Activation::Relu => write!(f, "Relu"),
            Activation::Clip { min, max } => write!(f, "Clip({min}, {max})"),
            Activation::LeakyRelu { alpha } => write!(f, "LeakyRelu({alpha})"),
            Activation::HardSigmoid { alpha, beta } => write!(f, "HardSigmoid({alpha}, {beta})"),
            Activation::HardSwish => write!(f, "HardSwish"),
            Activation::Sigmoid => write!(f, "Sigmoid"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_values() {
        let xs = [-4.0f32, -1.0, 0.0, 1.0, 4.0, 8.0];
        let map = |a: Activation| xs.map(|x| a.apply(x));
        assert_eq!(map(Activation::Relu), [0.0, 0.0, 0.0, 1.0, 4.0, 8.0]);
        assert_eq!(
            map(Activation::Clip { min: 0.0, max: 6.0 }),
            [0.0, 0.0, 0.0, 1.0, 4.0, 6.0]
        );
        assert_eq!(
            map(Activation::LeakyRelu { alpha: 0.5 }),
            [-2.0, -0.5, 0.0, 1.0, 4.0, 8.0]
        );
        let hs = map(Activation::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        });
        for (got, want) in hs.iter().zip([0.0f32, 0.3, 0.5, 0.7, 1.0, 1.0]) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        let hw = map(Activation::HardSwish);
        for (got, want) in hw
            .iter()
            .zip([0.0f32, -1.0 / 3.0, 0.0, 2.0 / 3.0, 4.0, 8.0])
        {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
        assert!((Activation::Sigmoid.apply(0.0) - 0.5).abs() < 1e-7);
        for a in [
            Activation::Relu,
            Activation::HardSwish,
            Activation::Sigmoid,
            Activation::LeakyRelu { alpha: 0.1 },
        ] {
            for x in xs {
                assert!((a.apply(x) as f64 - a.apply_f64(x as f64)).abs() < 1e-6);
            }
        }
    }
}
