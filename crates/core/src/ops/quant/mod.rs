//! Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul and
//! QLinearConv, and onnxruntime's quantized ops of the `com.microsoft` domain ([`contrib`]).

pub mod contrib;
pub mod linear;
pub mod lookup;
pub mod qdq_binary;
pub mod qlinear;

pub use contrib::{
    DynamicQuantizeMatMul, MatMulIntegerToFloat, QGemm, QLinearAdd, QLinearAveragePool,
    QLinearConcat, QLinearGlobalAveragePool, QLinearLeakyRelu, QLinearMul, QLinearSigmoid,
    QLinearSoftmax,
};
pub use linear::{DequantizeLinear, DynamicQuantizeLinear, QuantizeLinear};
pub use lookup::{QLinearChannelLookup, QLinearLookup};
pub use qdq_binary::QdqBinary;
pub use qlinear::{QLinearConv, QLinearMatMul};

use crate::{DType, DTypeSet};

/// What QuantizeLinear produces and DequantizeLinear reads.
pub const QUANTIZED: DTypeSet = DTypeSet(
    DType::U8.bit()
        | DType::I8.bit()
        | DType::U16.bit()
        | DType::I16.bit()
        | DType::I4.bit()
        | DType::U4.bit()
        | DType::F8E4M3FN.bit()
        | DType::F8E4M3FNUZ.bit()
        | DType::F8E5M2.bit()
        | DType::F8E5M2FNUZ.bit()
        | DType::F4E2M1.bit(),
);

/// The 8-bit integer types of QLinearMatMul, QLinearConv and the `com.microsoft` ops.
pub const Q8: DTypeSet = DTypeSet(DType::U8.bit() | DType::I8.bit());

/// Integer range of a quantized integer type.
pub fn int_range(d: DType) -> Option<(f64, f64)> {
    Some(match d {
        DType::U8 => (0.0, 255.0),
        DType::I8 => (-128.0, 127.0),
        DType::U16 => (0.0, 65535.0),
        DType::I16 => (-32768.0, 32767.0),
        DType::U4 => (0.0, 15.0),
        DType::I4 => (-8.0, 7.0),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        _ => return None,
    })
}
