//! Range: `start, start + delta, ...` up to (excluding) `limit`; the length is
//! `max(ceil((limit - start) / delta), 0)`. The three scalar inputs are value-dependent.

use super::common::same_dtype;
use crate::op::{input, output, required, Prototype};
use crate::{
    op_bail, op_common, DType, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Range;

fn scalar_f64(t: &Tensor, what: &str) -> OpResult<f64> {
    if t.numel() != 1 {
        op_bail!("{what} must be a scalar, got shape {:?}", t.shape());
    }
    Ok(t.to_f64_vec()[0])
}

fn scalar_i128(t: &Tensor, what: &str) -> OpResult<i128> {
    if t.numel() != 1 {
        op_bail!("{what} must be a scalar, got shape {:?}", t.shape());
    }
    Ok(t.to_i64_vec()[0] as i128)
}

/// The element count for the three inputs.
fn length(start: &Tensor, limit: &Tensor, delta: &Tensor) -> OpResult<usize> {
    if start.dtype().is_float() {
        let (s, l, d) = (
            scalar_f64(start, "input 0 (start)")?,
            scalar_f64(limit, "input 1 (limit)")?,
            scalar_f64(delta, "input 2 (delta)")?,
        );
        if d == 0.0 || !d.is_finite() || !s.is_finite() || !l.is_finite() {
            op_bail!(
                "Range needs finite start/limit and a finite non-zero delta, got {s}, {l}, {d}"
            );
        }
        let n = ((l - s) / d).ceil().max(0.0);
        if n > (1u64 << 40) as f64 {
            op_bail!("Range would produce {n} elements");
        }
        Ok(n as usize)
    } else {
        let (s, l, d) = (
            scalar_i128(start, "input 0 (start)")?,
            scalar_i128(limit, "input 1 (limit)")?,
            scalar_i128(delta, "input 2 (delta)")?,
        );
        if d == 0 {
            op_bail!("input 2 (delta) must not be 0");
        }
        let diff = l - s;
        // Ceiling division for either sign of delta.
        let n = if (diff > 0) == (d > 0) && diff != 0 {
            (diff.abs() + d.abs() - 1) / d.abs()
        } else {
            0
        };
        if n > 1 << 40 {
            op_bail!("Range would produce {n} elements");
        }
        Ok(n as usize)
    }
}

fn fill<T: Elem>(out: &mut Tensor, start: &Tensor, delta: &Tensor, float: bool) -> OpResult<()> {
    let o = out.as_mut_slice::<T>()?;
    if float {
        let (s, d) = (start.to_f64_vec()[0], delta.to_f64_vec()[0]);
        for (i, v) in o.iter_mut().enumerate() {
            *v = T::from_f64(s + i as f64 * d);
        }
    } else {
        let (s, d) = (start.to_i64_vec()[0] as i128, delta.to_i64_vec()[0] as i128);
        for (i, v) in o.iter_mut().enumerate() {
            *v = T::from_i64((s + i as i128 * d) as i64);
        }
    }
    Ok(())
}

impl Op for Range {
    op_common!(
        "Range",
        Prototype {
            inputs: &[
                input("start", DTypeSet::NUMERIC),
                input("limit", DTypeSet::NUMERIC),
                input("delta", DTypeSet::NUMERIC),
            ],
            outputs: &[output("output")],
            value_inputs: &[0, 1, 2],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = same_dtype(&[(0, ctx.dtype(0)?), (1, ctx.dtype(1)?), (2, ctx.dtype(2)?)])?;
        let n = length(ctx.value(0)?, ctx.value(1)?, ctx.value(2)?)?;
        Ok(vec![TensorInfo::new(dt, vec![n])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (s, l, d) = (
            required(inputs, 0)?,
            required(inputs, 1)?,
            required(inputs, 2)?,
        );
        let dt = same_dtype(&[(0, s.dtype()), (1, l.dtype()), (2, d.dtype())])?;
        let n = length(s, l, d)?;
        let mut out = Tensor::zeros(dt, &[n])?;
        if dt == DType::Bool {
            op_bail!("Range does not accept bool");
        }
        crate::dispatch_all!(dt, T => { fill::<T>(&mut out, s, d, dt.is_float())?; });
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: Elem>(s: T, l: T, d: T) -> OpResult<Tensor> {
        let (s, l, d) = (Tensor::scalar(s), Tensor::scalar(l), Tensor::scalar(d));
        Range
            .eval(&[Some(&s), Some(&l), Some(&d)])
            .map(|mut v| v.remove(0))
    }

    #[test]
    fn ranges() {
        assert_eq!(run(10i32, 6, -3).unwrap().to_i64_vec(), vec![10, 7]);
        assert_eq!(run(1i64, 5, 2).unwrap().to_i64_vec(), vec![1, 3]);
        assert_eq!(run(1i64, 6, 2).unwrap().to_i64_vec(), vec![1, 3, 5]);
        assert_eq!(run(5i64, 1, 2).unwrap().shape(), &[0]);
        let f = run(1.0f32, 5.0, 2.0).unwrap();
        assert_eq!(f.as_slice::<f32>().unwrap(), &[1.0, 3.0]);
        let f = run(3.0f64, 9.0, 3.0).unwrap();
        assert_eq!(f.as_slice::<f64>().unwrap(), &[3.0, 6.0]);
        let f = run(0.0f32, 1.0, 0.3).unwrap();
        assert_eq!(f.shape(), &[4]);
        assert!(run(1i64, 5, 0).is_err());
        assert!(run(0.0f32, 1.0, 0.0).is_err());
        assert!(run(0i64, i64::MAX, 1).is_err());
        let s = Tensor::scalar(0i32);
        let l = Tensor::scalar(3i64);
        assert!(Range.eval(&[Some(&s), Some(&l), Some(&s)]).is_err());
    }
}
