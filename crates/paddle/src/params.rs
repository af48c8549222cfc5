//! Paddle parameter files: serialized LoDTensors (DenseTensors), one after another.
//!
//! Layout of one tensor (little-endian): `u32` version (0), `u64` LoD level count, per level a
//! `u64` byte size and that many bytes of `u64` offsets, `u32` tensor version (0), `i32` size
//! of the `TensorDesc` protobuf, the protobuf, then the raw data (numel × element size).
//! Every length is checked against the bytes left before anything is read or allocated.

use crate::error::{Error, Result};
use crate::proto::{var_type, TensorDesc};
use ferrolite_core::{tensor::checked_numel, DType, Tensor};
use prost::Message;

/// The engine dtype of a Paddle POD type.
pub fn dtype_of(t: i32) -> Option<DType> {
    Some(match t {
        var_type::BOOL => DType::Bool,
        var_type::INT16 => DType::I16,
        var_type::INT32 => DType::I32,
        var_type::INT64 => DType::I64,
        var_type::FP16 => DType::F16,
        var_type::FP32 => DType::F32,
        var_type::FP64 => DType::F64,
        var_type::UINT8 => DType::U8,
        var_type::INT8 => DType::I8,
        var_type::BF16 => DType::BF16,
        var_type::UINT32 => DType::U32,
        var_type::UINT64 => DType::U64,
        _ => return None,
    })
}

/// A cursor over a params buffer that names the variable being read in its errors.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    fn take(&mut self, n: u64, var: &str, what: &'static str) -> Result<&'a [u8]> {
        let available = self.remaining();
        if n > available as u64 {
            return Err(Error::Truncated {
                var: var.to_string(),
                what,
                offset: self.pos,
                needed: n,
                available,
            });
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn u32(&mut self, var: &str, what: &'static str) -> Result<u32> {
        let b = self.take(4, var, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, var: &str, what: &'static str) -> Result<u64> {
        let b = self.take(8, var, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// Reads one serialized tensor for variable `var`; `expect` is the program's declaration
    /// (dtype and dims) it must agree with, when known.
    pub fn tensor(&mut self, var: &str, expect: Option<(i32, &[i64])>) -> Result<Tensor> {
        let version = self.u32(var, "the LoDTensor version")?;
        if version != 0 {
            return Err(Error::Version {
                var: var.into(),
                what: "LoDTensor",
                found: version,
            });
        }
        let levels = self.u64(var, "the LoD level count")?;
        // Each level takes at least its 8-byte size: bounds the loop by the file.
        if levels > self.remaining() as u64 / 8 {
            return Err(Error::Truncated {
                var: var.into(),
                what: "the LoD levels",
                offset: self.pos,
                needed: levels.saturating_mul(8),
                available: self.remaining(),
            });
        }
        for _ in 0..levels {
            let size = self.u64(var, "a LoD level size")?;
            self.take(size, var, "a LoD level")?;
        }
        let version = self.u32(var, "the tensor version")?;
        if version != 0 {
            return Err(Error::Version {
                var: var.into(),
                what: "tensor",
                found: version,
            });
        }
        let size = self.u32(var, "the TensorDesc size")? as i32;
        if size < 0 {
            return Err(Error::Mismatch {
                var: var.into(),
                message: format!("negative TensorDesc size {size}"),
            });
        }
        let desc_bytes = self.take(size as u64, var, "the TensorDesc")?;
        let desc = TensorDesc::decode(desc_bytes).map_err(|e| Error::Mismatch {
            var: var.into(),
            message: format!("the TensorDesc does not decode: {e}"),
        })?;
        let dtype = dtype_of(desc.data_type).ok_or_else(|| Error::Mismatch {
            var: var.into(),
            message: format!(
                "element type {} is not supported",
                var_type::name(desc.data_type)
            ),
        })?;
        let mut shape = Vec::with_capacity(desc.dims.len().min(16));
        for &d in &desc.dims {
            let d = usize::try_from(d).map_err(|_| Error::Mismatch {
                var: var.into(),
                message: format!("dims {:?} hold a negative size", desc.dims),
            })?;
            shape.push(d);
        }
        if let Some((want_type, want_dims)) = expect {
            // Paddle's quantization passes store quantized weights as int8 (int16 past 8
            // bits) and leave the program declaring the float type they replaced; Paddle's
            // loader keeps the stored type, and so does this one. Other types must agree.
            let quantized_weight = matches!(
                want_type,
                var_type::FP32 | var_type::FP16 | var_type::FP64 | var_type::BF16
            ) && matches!(desc.data_type, var_type::INT8 | var_type::INT16);
            if want_type != desc.data_type && !quantized_weight {
                return Err(Error::Mismatch {
                    var: var.into(),
                    message: format!(
                        "the program declares {}, the parameters hold {}",
                        var_type::name(want_type),
                        var_type::name(desc.data_type)
                    ),
                });
            }
            let agree = want_dims.len() == desc.dims.len()
                && want_dims
                    .iter()
                    .zip(&desc.dims)
                    .all(|(&w, &d)| w < 0 || w == d);
            if !agree {
                // Paddle's quantization passes save scales with other unit dims than the
                // program declares (a 0-d scale where [1] is declared, a [1, C] one where [C]
                // is): the same data, which Paddle's loader reads with the saved dims and its
                // ops by element count. Dims that agree once their 1s are dropped take the
                // program's; any other disagreement is an error.
                let non_unit =
                    |d: &[i64]| d.iter().copied().filter(|&x| x != 1).collect::<Vec<_>>();
                if want_dims.iter().all(|&w| w >= 0) && non_unit(want_dims) == non_unit(&desc.dims)
                {
                    shape = want_dims.iter().map(|&w| w as usize).collect();
                } else {
                    return Err(Error::Mismatch {
                        var: var.into(),
                        message: format!(
                            "the program declares dims {want_dims:?}, the parameters hold {:?}",
                            desc.dims
                        ),
                    });
                }
            }
        }
        let numel = checked_numel(&shape).map_err(|e| Error::Mismatch {
            var: var.into(),
            message: e.to_string(),
        })?;
        let len = (numel as u64).saturating_mul(dtype.size() as u64);
        let data = self.take(len, var, "the tensor data")?;
        Tensor::from_bytes(dtype, &shape, data).map_err(|e| Error::Mismatch {
            var: var.into(),
            message: e.to_string(),
        })
    }
}

/// Serializes a tensor in the same layout (no LoD), for tests and tools.
pub fn write_tensor(t: &Tensor, data_type: i32) -> Vec<u8> {
    let desc = TensorDesc {
        data_type,
        dims: t.shape().iter().map(|&d| d as i64).collect(),
    }
    .encode_to_vec();
    let mut out = Vec::with_capacity(24 + desc.len() + t.byte_len());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(desc.len() as i32).to_le_bytes());
    out.extend_from_slice(&desc);
    out.extend_from_slice(t.bytes());
    out
}

/// The Paddle POD type of an engine dtype.
pub fn paddle_type_of(d: DType) -> Option<i32> {
    Some(match d {
        DType::Bool => var_type::BOOL,
        DType::I16 => var_type::INT16,
        DType::I32 => var_type::INT32,
        DType::I64 => var_type::INT64,
        DType::F16 => var_type::FP16,
        DType::F32 => var_type::FP32,
        DType::F64 => var_type::FP64,
        DType::U8 => var_type::UINT8,
        DType::I8 => var_type::INT8,
        DType::BF16 => var_type::BF16,
        DType::U32 => var_type::UINT32,
        DType::U64 => var_type::UINT64,
        // Paddle has no u16 nor the low-precision storage types.
        _ => return None,
    })
}
