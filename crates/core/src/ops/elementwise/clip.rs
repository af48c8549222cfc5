//! Clip: limits every element to `[min, max]`.
//!
//! Before opset 11 the bounds are float attributes; from 11 they are optional scalar inputs of
//! the input's dtype. An input bound wins over an attribute. When `min > max` every element
//! becomes `max` (numpy's `minimum(max, maximum(x, min))`); NaN stays NaN.

use super::same_dtype;
use crate::op::{input, optional, output, required, Prototype};
use crate::ops::util::unary_map;
use crate::{
    dispatch_all, op_bail, op_common, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Clip {
    /// Attribute bounds (opset < 11).
    pub min: Option<f32>,
    pub max: Option<f32>,
}

/// Reads an optional bound input: a scalar or one-element tensor of dtype `T`.
fn bound<T: Elem>(inputs: &[Option<&Tensor>], i: usize, attr: Option<f32>) -> OpResult<Option<T>> {
    match inputs.get(i).copied().flatten() {
        Some(t) => {
            if t.numel() != 1 {
                op_bail!("input {i} must be a scalar, got shape {:?}", t.shape());
            }
            Ok(Some(t.as_slice::<T>()?[0]))
        }
        None => Ok(attr.map(|v| T::from_f64(v as f64))),
    }
}

impl Op for Clip {
    fn pointwise(&self) -> bool {
        true
    }

    op_common!(
        "Clip",
        Prototype {
            inputs: &[
                input("input", DTypeSet::NUMERIC),
                optional("min", DTypeSet::NUMERIC),
                optional("max", DTypeSet::NUMERIC),
            ],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = ctx.dtype(0)?;
        for i in 1..3 {
            if ctx.has(i) {
                same_dtype(i, dt, ctx.dtype(i)?)?;
                let s = ctx.shape(i)?;
                if s.iter().product::<usize>() != 1 {
                    op_bail!("input {i} must be a scalar, got shape {s:?}");
                }
            }
        }
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let dt = x.dtype();
        for i in 1..3 {
            if let Some(t) = inputs.get(i).copied().flatten() {
                same_dtype(i, dt, t.dtype())?;
            }
        }
        let out = dispatch_all!(dt, T => {
            let lo = bound::<T>(inputs, 1, self.min)?;
            let hi = bound::<T>(inputs, 2, self.max)?;
            unary_map::<T, T>(x, |v| {
                let mut v = v;
                if let Some(lo) = lo {
                    if v < lo {
                        v = lo;
                    }
                }
                if let Some(hi) = hi {
                    if v > hi {
                        v = hi;
                    }
                }
                v
            })?
        });
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, f32s, run};
    use super::*;

    #[test]
    fn input_bounds() {
        let x = f32s(&[4], &[-2.0, 0.0, 2.0, f32::NAN]);
        let lo = f32s(&[], &[-1.0]);
        let hi = f32s(&[], &[1.0]);
        let c = Clip::default();
        assert_close(
            &run(&c, &[Some(&x), Some(&lo), Some(&hi)])[0],
            &[-1.0, 0.0, 1.0, f64::NAN],
        );
        assert_close(
            &run(&c, &[Some(&x), None, Some(&hi)])[0],
            &[-2.0, 0.0, 1.0, f64::NAN],
        );
        assert_close(
            &run(&c, &[Some(&x), Some(&lo)])[0],
            &[-1.0, 0.0, 2.0, f64::NAN],
        );
        // min > max: everything becomes max.
        assert_close(
            &run(&c, &[Some(&x), Some(&hi), Some(&lo)])[0],
            &[-1.0, -1.0, -1.0, f64::NAN],
        );
    }

    #[test]
    fn attribute_bounds_and_ints() {
        let x = f32s(&[3], &[-2.0, 0.5, 2.0]);
        let c = Clip {
            min: Some(-1.0),
            max: Some(1.0),
        };
        assert_close(&run(&c, &[Some(&x)])[0], &[-1.0, 0.5, 1.0]);
        let xi = Tensor::from_vec(&[3], vec![-100i8, 5, 100]).unwrap();
        let lo = Tensor::scalar(-10i8);
        let y = run(&Clip::default(), &[Some(&xi), Some(&lo)]).remove(0);
        assert_eq!(y.to_i64_vec(), vec![-10, 5, 100]);
        let bad = f32s(&[2], &[0.0, 1.0]);
        assert!(Clip::default().eval(&[Some(&x), Some(&bad)]).is_err());
        let wrong = Tensor::scalar(1i32);
        assert!(Clip::default().eval(&[Some(&x), Some(&wrong)]).is_err());
    }
}
