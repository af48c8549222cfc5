//! Neural-network ops: pooling, normalization, softmax, reductions, top-k, cumulative sums and
//! resizing. Window and padding arithmetic shared with convolution lives in [`geometry`].

pub mod cumsum;
pub mod geometry;
pub mod norm;
pub mod pool;
pub mod reduce;
pub mod resize;
pub mod softmax;
pub mod topk;

use crate::{dispatch_all, DType, Elem, OpResult, Tensor};

/// A tensor of `dtype` from f64 values (converted with `Elem::from_f64`).
pub(crate) fn tensor_from_f64(dtype: DType, shape: &[usize], vals: &[f64]) -> OpResult<Tensor> {
    let mut out = Tensor::zeros(dtype, shape)?;
    dispatch_all!(dtype, T => {
        for (o, &v) in out.as_mut_slice::<T>()?.iter_mut().zip(vals) {
            *o = T::from_f64(v);
        }
    });
    Ok(out)
}

/// Splits `shape` at `axis` into (product before, size at, product after).
pub(crate) fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let len = shape.get(axis).copied().unwrap_or(1);
    let inner = shape.get(axis + 1..).map_or(1, |s| s.iter().product());
    (outer, len, inner)
}

/// An integer element widened to i128 exactly (u64 included, which `to_i64` would saturate).
pub(crate) fn int_to_i128<T: Elem>(v: T) -> i128 {
    if T::DTYPE == DType::U64 {
        bytemuck::cast::<T, u64>(v) as i128
    } else {
        v.to_i64() as i128
    }
}

/// An i128 narrowed to an integer element, wrapping like two's-complement arithmetic.
pub(crate) fn int_from_i128<T: Elem>(v: i128) -> T {
    if T::DTYPE == DType::U64 {
        bytemuck::cast::<u64, T>(v as u64)
    } else {
        T::from_i64(v as i64)
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use crate::Tensor;

    pub fn f32t(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_slice(shape, v).unwrap()
    }

    pub fn assert_close(t: &Tensor, expected: &[f64], tol: f64) {
        let got = t.to_f64_vec();
        assert_eq!(
            got.len(),
            expected.len(),
            "got {got:?}, expected {expected:?}"
        );
        for (i, (g, e)) in got.iter().zip(expected).enumerate() {
            let ok = g == e || (g - e).abs() <= tol * (1.0 + e.abs()) || (g.is_nan() && e.is_nan());
            assert!(ok, "element {i}: got {g}, expected {e} (all: {got:?})");
        }
    }
}
