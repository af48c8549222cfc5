//! Linear-algebra ops: convolutions, matrix products, Einsum.

pub mod conv;
pub mod conv_geometry;
pub mod conv_transpose;
pub mod einsum;
pub mod fully_connected;
pub mod gemm;
pub mod matmul;

use crate::{DType, OpResult, Tensor};

/// A tensor whose elements, in row-major order, are the values `produce` pushes into its sink
/// (converted from f64). Elements not pushed stay zero.
pub(crate) fn tensor_from_sink(
    dtype: DType,
    shape: &[usize],
    produce: impl FnOnce(&mut dyn FnMut(f64)),
) -> OpResult<Tensor> {
    let mut out = Tensor::zeros(dtype, shape)?;
    crate::dispatch_all!(dtype, T => {
        let mut it = out.as_mut_slice::<T>()?.iter_mut();
        produce(&mut |v| {
            if let Some(o) = it.next() {
                *o = <T as crate::Elem>::from_f64(v);
            }
        });
    });
    Ok(out)
}

/// Like [`tensor_from_sink`] for integer results, which must not pass through f64.
pub(crate) fn tensor_from_sink_i64(
    dtype: DType,
    shape: &[usize],
    produce: impl FnOnce(&mut dyn FnMut(i64)),
) -> OpResult<Tensor> {
    let mut out = Tensor::zeros(dtype, shape)?;
    crate::dispatch_all!(dtype, T => {
        let mut it = out.as_mut_slice::<T>()?.iter_mut();
        produce(&mut |v| {
            if let Some(o) = it.next() {
                *o = <T as crate::Elem>::from_i64(v);
            }
        });
    });
    Ok(out)
}
