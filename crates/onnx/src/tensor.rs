//! TensorProto ↔ [`Tensor`].

use crate::proto::{data_type, tensor_proto, TensorProto};
use ferrolite_core::{tensor::checked_numel, DType, Error, Result, Tensor};
use std::path::Path;

/// The engine dtype of an ONNX data type, or `None` for types the engine does not support.
pub fn dtype_of(t: i32) -> Option<DType> {
    Some(match t {
        data_type::FLOAT => DType::F32,
        data_type::DOUBLE => DType::F64,
        data_type::FLOAT16 => DType::F16,
        data_type::BFLOAT16 => DType::BF16,
        data_type::INT8 => DType::I8,
        data_type::UINT8 => DType::U8,
        data_type::INT16 => DType::I16,
        data_type::UINT16 => DType::U16,
        data_type::INT32 => DType::I32,
        data_type::UINT32 => DType::U32,
        data_type::INT64 => DType::I64,
        data_type::UINT64 => DType::U64,
        data_type::BOOL => DType::Bool,
        data_type::FLOAT8E4M3FN => DType::F8E4M3FN,
        data_type::FLOAT8E4M3FNUZ => DType::F8E4M3FNUZ,
        data_type::FLOAT8E5M2 => DType::F8E5M2,
        data_type::FLOAT8E5M2FNUZ => DType::F8E5M2FNUZ,
        data_type::FLOAT8E8M0 => DType::F8E8M0,
        data_type::FLOAT4E2M1 => DType::F4E2M1,
        data_type::INT4 => DType::I4,
        data_type::UINT4 => DType::U4,
        data_type::STRING => DType::String,
        _ => return None,
    })
}

/// The ONNX data type of an engine dtype.
pub fn onnx_type_of(d: DType) -> i32 {
    match d {
        DType::F32 => data_type::FLOAT,
        DType::F64 => data_type::DOUBLE,
        DType::F16 => data_type::FLOAT16,
        DType::BF16 => data_type::BFLOAT16,
        DType::I8 => data_type::INT8,
        DType::U8 => data_type::UINT8,
        DType::I16 => data_type::INT16,
        DType::U16 => data_type::UINT16,
        DType::I32 => data_type::INT32,
        DType::U32 => data_type::UINT32,
        DType::I64 => data_type::INT64,
        DType::U64 => data_type::UINT64,
        DType::Bool => data_type::BOOL,
        DType::F8E4M3FN => data_type::FLOAT8E4M3FN,
        DType::F8E4M3FNUZ => data_type::FLOAT8E4M3FNUZ,
        DType::F8E5M2 => data_type::FLOAT8E5M2,
        DType::F8E5M2FNUZ => data_type::FLOAT8E5M2FNUZ,
        DType::F8E8M0 => data_type::FLOAT8E8M0,
        DType::F4E2M1 => data_type::FLOAT4E2M1,
        DType::I4 => data_type::INT4,
        DType::U4 => data_type::UINT4,
        DType::String => data_type::STRING,
        // Not tensor element types: a TensorProto cannot hold them.
        DType::Sequence | DType::Optional => data_type::UNDEFINED,
    }
}

/// INT4, UINT4 and FLOAT4E2M1 are packed two per byte in files.
fn is_nibble(d: DType) -> bool {
    matches!(d, DType::I4 | DType::U4 | DType::F4E2M1)
}

/// Bytes `numel` elements of `d` take in a file.
fn stored_len(d: DType, numel: usize) -> Option<usize> {
    if is_nibble(d) {
        Some(numel.div_ceil(2))
    } else {
        numel.checked_mul(d.size())
    }
}

/// Unpacks nibbles (low nibble first) into one byte per element; INT4 is sign-extended.
fn unpack_nibbles(d: DType, packed: &[u8], numel: usize) -> Vec<u8> {
    (0..numel)
        .map(|i| {
            let b = packed.get(i / 2).copied().unwrap_or(0);
            let n = if i % 2 == 0 { b & 0xF } else { b >> 4 };
            if d == DType::I4 {
                (((n << 4) as i8) >> 4) as u8
            } else {
                n
            }
        })
        .collect()
}

/// Packs one byte per element into nibbles, low nibble first; an odd count pads with 0.
fn pack_nibbles(bytes: &[u8]) -> Vec<u8> {
    bytes
        .chunks(2)
        .map(|c| (c[0] & 0xF) | (c.get(1).copied().unwrap_or(0) & 0xF) << 4)
        .collect()
}

/// A tensor from its stored bytes (packed for the 4-bit types).
fn from_stored(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Tensor> {
    if is_nibble(dtype) {
        let numel = checked_numel(shape)?;
        Tensor::from_bytes(dtype, shape, &unpack_nibbles(dtype, bytes, numel))
    } else {
        Tensor::from_bytes(dtype, shape, bytes)
    }
}

fn bad(t: &TensorProto, msg: impl std::fmt::Display) -> Error {
    let name = if t.name.is_empty() {
        "<unnamed>"
    } else {
        &t.name
    };
    Error::InvalidModel(format!("tensor '{name}': {msg}"))
}

/// Decodes a TensorProto. `base_dir` is the model's folder, needed for external data; without
/// it, external data is an error.
pub fn decode(t: &TensorProto, base_dir: Option<&Path>) -> Result<Tensor> {
    let dtype = dtype_of(t.data_type).ok_or_else(|| {
        bad(
            t,
            format!(
                "data type {} is not supported",
                data_type::name(t.data_type)
            ),
        )
    })?;
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        if d < 0 {
            return Err(bad(t, format!("negative dimension {d}")));
        }
        shape.push(d as usize);
    }
    let numel = checked_numel(&shape).map_err(|e| bad(t, e))?;
    if dtype == DType::String {
        if t.string_data.len() != numel {
            return Err(bad(
                t,
                format!(
                    "shape {shape:?} holds {numel} strings, the data has {}",
                    t.string_data.len()
                ),
            ));
        }
        let strings = t
            .string_data
            .iter()
            .map(|b| String::from_utf8(b.clone()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| bad(t, "a string is not UTF-8"))?;
        return Tensor::from_strings(&shape, strings).map_err(|e| bad(t, e));
    }
    let nbytes = stored_len(dtype, numel).ok_or_else(|| bad(t, "too large"))?;

    if t.data_location == tensor_proto::DATA_LOCATION_EXTERNAL {
        let dir = base_dir.ok_or_else(|| bad(t, "external data needs the model's folder"))?;
        let bytes = crate::external::read(t, dir, nbytes)?;
        return from_stored(dtype, &shape, &bytes).map_err(|e| bad(t, e));
    }
    if !t.raw_data.is_empty() || numel == 0 {
        if t.raw_data.len() != nbytes {
            return Err(bad(
                t,
                format!(
                    "shape {shape:?} of {dtype} needs {nbytes} bytes of raw_data, found {}",
                    t.raw_data.len()
                ),
            ));
        }
        return from_stored(dtype, &shape, &t.raw_data).map_err(|e| bad(t, e));
    }
    // Typed fields. Their element counts come from the file, so compare before converting.
    let check = |n: usize| -> Result<()> {
        if n != numel {
            Err(bad(
                t,
                format!("shape {shape:?} holds {numel} elements, the data has {n}"),
            ))
        } else {
            Ok(())
        }
    };
    let r = match dtype {
        DType::F32 => {
            check(t.float_data.len())?;
            Tensor::from_slice(&shape, &t.float_data)
        }
        DType::F64 => {
            check(t.double_data.len())?;
            Tensor::from_slice(&shape, &t.double_data)
        }
        DType::I64 => {
            check(t.int64_data.len())?;
            Tensor::from_slice(&shape, &t.int64_data)
        }
        DType::U64 | DType::U32 => {
            check(t.uint64_data.len())?;
            let v = Tensor::from_slice(&shape, &t.uint64_data)?;
            v.cast(dtype)
        }
        DType::F16 | DType::BF16 => {
            // Stored as the raw 16-bit patterns in int32_data.
            check(t.int32_data.len())?;
            let bits: Vec<u8> = t
                .int32_data
                .iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect();
            Tensor::from_bytes(dtype, &shape, &bits)
        }
        DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F8E8M0 => {
            // One bit pattern per int32.
            check(t.int32_data.len())?;
            let bits: Vec<u8> = t.int32_data.iter().map(|&v| v as u8).collect();
            Tensor::from_bytes(dtype, &shape, &bits)
        }
        DType::I4 | DType::U4 | DType::F4E2M1 => {
            // One packed byte (two elements) per int32.
            let n = t.int32_data.len();
            if n != numel.div_ceil(2) {
                return Err(bad(
                    t,
                    format!("shape {shape:?} of {dtype} needs {nbytes} packed values, found {n}"),
                ));
            }
            let packed: Vec<u8> = t.int32_data.iter().map(|&v| v as u8).collect();
            from_stored(dtype, &shape, &packed)
        }
        DType::I32 | DType::I16 | DType::I8 | DType::U16 | DType::U8 | DType::Bool => {
            check(t.int32_data.len())?;
            let v = Tensor::from_slice(&shape, &t.int32_data)?;
            v.cast(dtype)
        }
        DType::String | DType::Sequence | DType::Optional => {
            return Err(bad(t, format!("a TensorProto cannot hold a {dtype}")))
        }
    };
    r.map_err(|e| bad(t, e))
}

/// Encodes a tensor as a TensorProto with raw_data (strings in string_data).
pub fn encode(name: &str, t: &Tensor) -> TensorProto {
    if let Ok(strings) = t.strings() {
        return TensorProto {
            name: name.to_string(),
            dims: t.shape().iter().map(|&d| d as i64).collect(),
            data_type: data_type::STRING,
            string_data: strings.iter().map(|s| s.as_bytes().to_vec()).collect(),
            ..Default::default()
        };
    }
    TensorProto {
        name: name.to_string(),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: onnx_type_of(t.dtype()),
        raw_data: if is_nibble(t.dtype()) {
            pack_nibbles(t.bytes())
        } else {
            t.bytes().to_vec()
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proto(data_type: i32, dims: &[i64]) -> TensorProto {
        TensorProto {
            name: "t".into(),
            data_type,
            dims: dims.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn typed_fields() {
        let mut p = proto(data_type::FLOAT16, &[2]);
        p.int32_data = vec![0x3c00, 0xc000]; // 1.0, -2.0
        let t = decode(&p, None).unwrap();
        assert_eq!(t.dtype(), DType::F16);
        assert_eq!(t.to_f64_vec(), [1.0, -2.0]);

        let mut p = proto(data_type::BOOL, &[3]);
        p.int32_data = vec![1, 0, 1];
        assert_eq!(
            decode(&p, None).unwrap().as_slice::<u8>().unwrap(),
            &[1, 0, 1]
        );

        let mut p = proto(data_type::UINT32, &[2]);
        p.uint64_data = vec![7, u32::MAX as u64];
        assert_eq!(
            decode(&p, None).unwrap().as_slice::<u32>().unwrap(),
            &[7, u32::MAX]
        );

        let mut p = proto(data_type::INT8, &[2]);
        p.int32_data = vec![-3, 100];
        assert_eq!(
            decode(&p, None).unwrap().as_slice::<i8>().unwrap(),
            &[-3, 100]
        );

        let mut p = proto(data_type::DOUBLE, &[]);
        p.double_data = vec![2.5];
        let t = decode(&p, None).unwrap();
        assert_eq!(t.shape(), &[] as &[usize]);
        assert_eq!(t.as_slice::<f64>().unwrap(), &[2.5]);
    }

    #[test]
    fn empty_tensor_and_roundtrip() {
        let t = decode(&proto(data_type::FLOAT, &[0, 3]), None).unwrap();
        assert_eq!(t.shape(), &[0, 3]);
        let x = Tensor::from_slice(&[2, 2], &[1i16, -2, 3, -4]).unwrap();
        let back = decode(&encode("x", &x), None).unwrap();
        assert_eq!(back.shape(), x.shape());
        assert_eq!(back.as_slice::<i16>().unwrap(), &[1, -2, 3, -4]);
    }

    #[test]
    fn low_precision() {
        // Five INT4 values packed low nibble first, the last byte padded.
        let mut p = proto(data_type::INT4, &[5]);
        p.raw_data = vec![0x8F, 0x17, 0x03];
        let t = decode(&p, None).unwrap();
        assert_eq!(t.dtype(), DType::I4);
        assert_eq!(t.to_i64_vec(), [-1, -8, 7, 1, 3]);
        assert_eq!(encode("x", &t).raw_data, [0x8F, 0x17, 0x03]);
        let mut p = proto(data_type::UINT4, &[3]);
        p.int32_data = vec![0x8F, 0x0A];
        assert_eq!(decode(&p, None).unwrap().to_i64_vec(), [15, 8, 10]);
        let mut p = proto(data_type::FLOAT4E2M1, &[2]);
        p.raw_data = vec![0xF1];
        assert_eq!(decode(&p, None).unwrap().to_f64_vec(), [0.5, -6.0]);
        p.raw_data = vec![0xF1, 0];
        assert!(decode(&p, None).is_err());
        let mut p = proto(data_type::FLOAT8E4M3FN, &[2]);
        p.int32_data = vec![0x38, 0xFE];
        assert_eq!(decode(&p, None).unwrap().to_f64_vec(), [1.0, -448.0]);
        let mut p = proto(data_type::FLOAT8E5M2, &[1]);
        p.raw_data = vec![0x7C];
        let t = decode(&p, None).unwrap();
        assert_eq!(t.to_f64_vec(), [f64::INFINITY]);
        assert_eq!(encode("x", &t).raw_data, [0x7C]);
    }

    #[test]
    fn inconsistent_tensors() {
        let mut p = proto(data_type::FLOAT, &[0]);
        p.raw_data = vec![0; 4];
        assert!(decode(&p, None).is_err());
        let mut p = proto(data_type::INT64, &[3]);
        p.int64_data = vec![1, 2];
        assert!(decode(&p, None).unwrap_err().to_string().contains("'t'"));
        let mut p = proto(data_type::FLOAT, &[1]);
        p.data_location = tensor_proto::DATA_LOCATION_EXTERNAL;
        assert!(decode(&p, None).is_err());
        assert!(decode(&proto(data_type::COMPLEX64, &[1]), None).is_err());
        assert!(decode(&proto(data_type::FLOAT, &[-1]), None).is_err());
        assert!(decode(&proto(data_type::FLOAT, &[1 << 62, 4]), None).is_err());
    }
}
