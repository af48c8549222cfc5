//! Mapping functions for the quantization ops.

use super::linalg::{conv_params, group};
use super::{op, MapError, MapFn, MapResult, NodeCtx};
use ferrolite_core::ops::quant::{
    DequantizeLinear, DynamicQuantizeLinear, QLinearConv, QLinearMatMul, QuantizeLinear,
};
use ferrolite_core::DType;

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("QuantizeLinear", quantize_linear),
    ("DequantizeLinear", dequantize_linear),
    ("DynamicQuantizeLinear", dynamic_quantize_linear),
    ("QLinearMatMul", qlinear_matmul),
    ("QLinearConv", qlinear_conv),
];

/// `output_dtype` (opset 21+); 0 means "not set".
fn output_dtype(n: &NodeCtx) -> Result<Option<DType>, MapError> {
    match n.int("output_dtype", 0)? {
        0 => Ok(None),
        t => crate::tensor::dtype_of(t as i32)
            .map(Some)
            .ok_or_else(|| n.unsupported(format!("output_dtype {t}"))),
    }
}

fn quantize_linear(n: &NodeCtx) -> MapResult {
    if n.int("precision", 0)? != 0 {
        return Err(n.unsupported("QuantizeLinear precision attribute"));
    }
    op(QuantizeLinear {
        axis: n.int("axis", 1)?,
        block_size: n.int("block_size", 0)?,
        output_dtype: output_dtype(n)?,
        saturate: n.int("saturate", 1)? != 0,
    })
}

fn dequantize_linear(n: &NodeCtx) -> MapResult {
    op(DequantizeLinear {
        axis: n.int("axis", 1)?,
        block_size: n.int("block_size", 0)?,
        output_dtype: output_dtype(n)?,
    })
}

fn dynamic_quantize_linear(_: &NodeCtx) -> MapResult {
    op(DynamicQuantizeLinear)
}

fn qlinear_matmul(_: &NodeCtx) -> MapResult {
    op(QLinearMatMul)
}

fn qlinear_conv(n: &NodeCtx) -> MapResult {
    op(QLinearConv {
        params: conv_params(n)?,
        group: group(n)?,
    })
}
