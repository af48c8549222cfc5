//! The scales and zero points of the integer kernels' operands, read once when a kernel is
//! built (they are constants of the model).

use crate::backend::constant;
use ferrolite_core::plan::KernelRequest;
use ferrolite_core::DType;

/// A quantized operand's parameters as the kernels use them.
#[derive(Clone, Debug)]
pub(crate) struct QParams {
    pub signed: bool,
    pub scale: Vec<f32>,
    pub zero: Vec<i32>,
}

/// Whether an 8-bit type is signed; other types are an error.
pub(crate) fn signed(dtype: DType) -> Result<bool, String> {
    match dtype {
        DType::I8 => Ok(true),
        DType::U8 => Ok(false),
        d => Err(format!("needs 8-bit integers, not {d}")),
    }
}

/// The constant zero points at input `z` (0 when absent), of `dtype`, one or `len` of them.
pub(crate) fn zero_points(
    r: &KernelRequest,
    z: usize,
    dtype: DType,
    len: usize,
) -> Result<Vec<i32>, String> {
    let zero: Vec<i32> = match r.inputs.get(z).and_then(|i| i.as_ref()) {
        None => vec![0],
        Some(_) => {
            let t = constant(r, z).ok_or("needs constant zero points")?;
            if t.dtype() != dtype {
                return Err(format!("needs {dtype} zero points"));
            }
            t.to_i64_vec().iter().map(|&v| v as i32).collect()
        }
    };
    if zero.len() != 1 && zero.len() != len {
        return Err(format!("needs 1 or {len} zero points"));
    }
    Ok(zero)
}

/// The constant f32 scale and the zero point of inputs `s` and `z`, for a tensor of `dtype`,
/// one or `len` of each.
pub(crate) fn qparams(
    r: &KernelRequest,
    dtype: DType,
    s: usize,
    z: usize,
    len: usize,
) -> Result<QParams, String> {
    let signed = signed(dtype)?;
    let scale_t = constant(r, s).ok_or("needs constant scales")?;
    if scale_t.dtype() != DType::F32 {
        return Err("needs f32 scales".into());
    }
    let scale: Vec<f32> = scale_t
        .as_slice::<f32>()
        .map_err(|e| e.to_string())?
        .to_vec();
    if scale.len() != 1 && scale.len() != len {
        return Err(format!("needs 1 or {len} scales"));
    }
    Ok(QParams {
        signed,
        scale,
        zero: zero_points(r, z, dtype, len)?,
    })
}
