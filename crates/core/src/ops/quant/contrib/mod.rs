//! The quantized ops of onnxruntime's `com.microsoft` domain that its quantizer writes in the
//! QOperator format: 8-bit tensors with a per-tensor (scale, zero point) pair each, results
//! requantized to the output's pair with rounding half to even and saturation to u8 or i8.
//!
//! - [`elementwise`]: QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat;
//! - [`pool`]: QLinearGlobalAveragePool, QLinearAveragePool, QLinearSoftmax;
//! - [`matmul`]: QGemm, DynamicQuantizeMatMul, MatMulIntegerToFloat.
//!
//! The scale arithmetic is f32 and follows onnxruntime's x86 CPU kernels (the order of the
//! operations, QLinearAdd's fused multiply-adds, where the output's zero point enters), so that
//! the reference rounds near-ties to the same quantization step as onnxruntime; checked
//! bit-exact against onnxruntime 1.32 on random single-node cases of every op and dtype, and on
//! the QOperator models of the quantized model zoo.

pub mod elementwise;
pub mod matmul;
pub mod pool;

pub use elementwise::{QLinearAdd, QLinearConcat, QLinearLeakyRelu, QLinearMul, QLinearSigmoid};
pub use matmul::{DynamicQuantizeMatMul, MatMulIntegerToFloat, QGemm};
pub use pool::{QLinearAveragePool, QLinearGlobalAveragePool, QLinearSoftmax};

use super::qlinear::{opt, requantize, scalar_of};
use super::Q8;
use crate::op::{input, optional, required, InputSpec};
use crate::{op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor};

/// `input I (name)` for messages, the name from the op's prototype.
fn what(op: &dyn Op, i: usize) -> String {
    let specs = op.prototype().inputs;
    let name = specs.get(i).or(specs.last()).map_or("?", |s| s.name);
    format!("input {i} ({name})")
}

/// The inputs of the one-operand ops: the data, its (scale, zero point), the output's.
const UNARY_INPUTS: &[InputSpec] = &[
    input("X", Q8),
    input("X_scale", DTypeSet::of(DType::F32)),
    optional("X_zero_point", Q8),
    input("Y_scale", DTypeSet::of(DType::F32)),
    optional("Y_zero_point", Q8),
];

/// Per-tensor quantization parameters: `real = scale * (q - zero)`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(in crate::ops::quant) struct QParams {
    scale: f32,
    zero: i64,
}

impl QParams {
    /// The scale at input `s` and the (optional, else 0) zero point at input `z`.
    fn read(op: &dyn Op, inputs: &[Option<&Tensor>], s: usize, z: usize) -> OpResult<QParams> {
        Self::read_named(inputs, s, z, |i| what(op, i))
    }

    /// [`QParams::read`] with the inputs named by `name` in messages.
    fn read_named(
        inputs: &[Option<&Tensor>],
        s: usize,
        z: usize,
        name: impl Fn(usize) -> String,
    ) -> OpResult<QParams> {
        Ok(QParams {
            scale: scalar_of(Some(required(inputs, s)?), &name(s))? as f32,
            zero: scalar_of(opt(inputs, z), &name(z))? as i64,
        })
    }

    pub(in crate::ops::quant) fn dequantize(self, q: i64) -> f32 {
        self.scale * (q - self.zero) as f32
    }

    /// `round(v / scale) + zero`, for [`requantize`] to saturate.
    pub(in crate::ops::quant) fn quantize(self, v: f32) -> f64 {
        round_plus(v / self.scale, self.zero)
    }
}

/// `round(v) + zero`, rounding half to even: the zero point is added after rounding, as in
/// QuantizeLinear and onnxruntime's requantization of integer results (it matters at ties when
/// the zero point is odd; its QLinearAdd and QLinearMul add it before, see there).
/// [`requantize`] then saturates the (integer) result.
fn round_plus(v: f32, zero: i64) -> f64 {
    v.round_ties_even() as f64 + zero as f64
}

/// Shape inference's checks of a (scale, zero point) pair: both have one element, and the zero
/// point (when given) has the dtype of input `like`.
fn check_qparams(op: &dyn Op, ctx: &InferCtx, s: usize, z: usize, like: usize) -> OpResult<()> {
    for i in [s, z] {
        if ctx.has(i) {
            let shape = ctx.shape(i)?;
            op_ensure!(
                shape.iter().product::<usize>() == 1,
                "{} must have one element (per-tensor quantization), got shape {shape:?}",
                what(op, i)
            );
        }
    }
    if ctx.has(z) {
        same_dtype(op, ctx, z, like)?;
    }
    Ok(())
}

/// Checks input `i` has the dtype of input `like`.
fn same_dtype(op: &dyn Op, ctx: &InferCtx, i: usize, like: usize) -> OpResult<()> {
    let (got, want) = (ctx.dtype(i)?, ctx.dtype(like)?);
    op_ensure!(
        got == want,
        "{} is {got}, expected {want} like {}",
        what(op, i),
        what(op, like)
    );
    Ok(())
}

/// Maps each element of `x` (quantized with `xq`) through `f` on its real value and
/// requantizes the result with `yq` to `to`: onnxruntime's lookup-table ops.
fn requantize_map(
    x: &Tensor,
    xq: QParams,
    yq: QParams,
    to: DType,
    f: impl Fn(f32) -> f32,
) -> OpResult<Tensor> {
    let vals = x.to_i64_vec();
    requantize(
        to,
        x.shape(),
        false,
        vals.iter().map(|&q| yq.quantize(f(xq.dequantize(q)))),
    )
}

#[cfg(test)]
mod testutil {
    use crate::Tensor;

    pub fn u8s(shape: &[usize], v: &[u8]) -> Tensor {
        Tensor::from_slice(shape, v).unwrap()
    }

    pub fn i8s(shape: &[usize], v: &[i8]) -> Tensor {
        Tensor::from_slice(shape, v).unwrap()
    }

    pub fn f(v: f32) -> Tensor {
        Tensor::scalar(v)
    }
}
