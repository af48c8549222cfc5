//! Tensors on the wire: the protocol's datatypes, and tensors from and to raw little-endian
//! bytes (HTTP's binary extension, gRPC's raw contents), JSON arrays and gRPC's typed contents.
//!
//! Every size taken from a request is checked against the data actually sent before anything
//! is allocated for it.

use crate::error::ServeError;
use crate::proto::InferTensorContents;
use ferrolite::{DType, Tensor};
use half::{bf16, f16};
use serde_json::Value;

/// The protocol's datatype name for an element type; `None` for types it has no name for.
pub fn datatype_name(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Bool => "BOOL",
        DType::U8 => "UINT8",
        DType::U16 => "UINT16",
        DType::U32 => "UINT32",
        DType::U64 => "UINT64",
        DType::I8 => "INT8",
        DType::I16 => "INT16",
        DType::I32 => "INT32",
        DType::I64 => "INT64",
        DType::F16 => "FP16",
        DType::F32 => "FP32",
        DType::F64 => "FP64",
        DType::BF16 => "BF16",
        DType::String => "BYTES",
        _ => return None,
    })
}

/// The element type for a protocol datatype name.
pub fn dtype_of(datatype: &str) -> Option<DType> {
    Some(match datatype {
        "BOOL" => DType::Bool,
        "UINT8" => DType::U8,
        "UINT16" => DType::U16,
        "UINT32" => DType::U32,
        "UINT64" => DType::U64,
        "INT8" => DType::I8,
        "INT16" => DType::I16,
        "INT32" => DType::I32,
        "INT64" => DType::I64,
        "FP16" => DType::F16,
        "FP32" => DType::F32,
        "FP64" => DType::F64,
        "BF16" => DType::BF16,
        "BYTES" => DType::String,
        _ => return None,
    })
}

/// A request's input: its name, element type and shape, checked (no negative dims, an element
/// count that fits).
#[derive(Clone, Debug)]
pub struct InputSpec {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub numel: usize,
}

impl InputSpec {
    /// Checks a request's datatype and shape.
    pub fn new(name: &str, datatype: &str, shape: &[i64]) -> Result<InputSpec, ServeError> {
        let dtype = dtype_of(datatype).ok_or_else(|| {
            ServeError::bad_request(format!(
                "input '{name}': unknown datatype '{datatype}' (the protocol's are BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, BF16, BYTES)"
            ))
        })?;
        let mut dims = Vec::with_capacity(shape.len());
        let mut numel: usize = 1;
        for &d in shape {
            let d = usize::try_from(d).map_err(|_| {
                ServeError::bad_request(format!(
                    "input '{name}': shape {shape:?} has a negative dimension"
                ))
            })?;
            numel = numel.checked_mul(d).ok_or_else(|| {
                ServeError::bad_request(format!(
                    "input '{name}': shape {shape:?} has too many elements"
                ))
            })?;
            dims.push(d);
        }
        Ok(InputSpec {
            name: name.to_string(),
            dtype,
            shape: dims,
            numel,
        })
    }

    fn wrong_count(&self, what: &str, got: usize) -> ServeError {
        ServeError::bad_request(format!(
            "input '{}': shape {:?} holds {} elements, the {what} holds {got}",
            self.name, self.shape, self.numel
        ))
    }

    /// The tensor from raw little-endian bytes (BYTES: each element a 4-byte length, then its
    /// bytes).
    pub fn from_raw(&self, bytes: &[u8]) -> Result<Tensor, ServeError> {
        if self.dtype == DType::String {
            let mut strings = Vec::new();
            let mut rest = bytes;
            while !rest.is_empty() {
                if rest.len() < 4 {
                    return Err(ServeError::bad_request(format!(
                        "input '{}': BYTES data ends inside an element's 4-byte length",
                        self.name
                    )));
                }
                let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                rest = &rest[4..];
                if len > rest.len() {
                    return Err(ServeError::bad_request(format!(
                        "input '{}': a BYTES element of {len} bytes, but only {} remain",
                        self.name,
                        rest.len()
                    )));
                }
                strings.push(self.utf8(&rest[..len])?);
                rest = &rest[len..];
                if strings.len() > self.numel {
                    return Err(self.wrong_count("data", strings.len()));
                }
            }
            return self.strings(strings);
        }
        let size = self.dtype.size();
        if bytes.len() != self.numel.saturating_mul(size) {
            return Err(ServeError::bad_request(format!(
                "input '{}': {} {} elements need {} bytes, got {}",
                self.name,
                self.numel,
                datatype_name(self.dtype).unwrap_or("?"),
                self.numel.saturating_mul(size),
                bytes.len()
            )));
        }
        Tensor::from_bytes(self.dtype, &self.shape, bytes).map_err(|e| self.tensor_error(e))
    }

    /// The tensor from a JSON `data` value: a flat or nested array in row-major order.
    pub fn from_json(&self, data: &Value) -> Result<Tensor, ServeError> {
        let mut flat: Vec<&Value> = Vec::new();
        flatten(data, &mut flat, self.numel)
            .map_err(|()| self.wrong_count("data", self.numel.saturating_add(1)))?;
        if flat.len() != self.numel {
            return Err(self.wrong_count("data", flat.len()));
        }
        if self.dtype == DType::String {
            let strings = flat
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(self.bad_element(other)),
                })
                .collect::<Result<Vec<_>, _>>()?;
            return self.strings(strings);
        }
        let mut bytes = Vec::with_capacity(self.numel * self.dtype.size());
        for v in flat {
            self.push_json(v, &mut bytes)?;
        }
        Tensor::from_bytes(self.dtype, &self.shape, &bytes).map_err(|e| self.tensor_error(e))
    }

    /// The tensor from gRPC's typed contents (the field the datatype names).
    pub fn from_contents(&self, c: &InferTensorContents) -> Result<Tensor, ServeError> {
        fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
            v.iter().flat_map(|&x| f(x)).collect()
        }
        let (count, field) = match self.dtype {
            DType::Bool => (c.bool_contents.len(), "bool_contents"),
            DType::I8 | DType::I16 | DType::I32 => (c.int_contents.len(), "int_contents"),
            DType::I64 => (c.int64_contents.len(), "int64_contents"),
            DType::U8 | DType::U16 | DType::U32 => (c.uint_contents.len(), "uint_contents"),
            DType::U64 => (c.uint64_contents.len(), "uint64_contents"),
            DType::F32 => (c.fp32_contents.len(), "fp32_contents"),
            DType::F64 => (c.fp64_contents.len(), "fp64_contents"),
            DType::String => (c.bytes_contents.len(), "bytes_contents"),
            _ => {
                return Err(ServeError::bad_request(format!(
                    "input '{}': {} has no typed contents field; send it in raw_input_contents",
                    self.name,
                    datatype_name(self.dtype).unwrap_or("?")
                )))
            }
        };
        if count != self.numel {
            return Err(self.wrong_count(field, count));
        }
        let narrow = |v: i64| -> Result<Vec<u8>, ServeError> {
            let out_of_range = || {
                ServeError::bad_request(format!(
                    "input '{}': value {v} out of range for {}",
                    self.name,
                    datatype_name(self.dtype).unwrap_or("?")
                ))
            };
            Ok(match self.dtype {
                DType::I8 => i8::try_from(v)
                    .map_err(|_| out_of_range())?
                    .to_le_bytes()
                    .to_vec(),
                DType::I16 => i16::try_from(v)
                    .map_err(|_| out_of_range())?
                    .to_le_bytes()
                    .to_vec(),
                DType::I32 => i32::try_from(v)
                    .map_err(|_| out_of_range())?
                    .to_le_bytes()
                    .to_vec(),
                DType::U8 => u8::try_from(v)
                    .map_err(|_| out_of_range())?
                    .to_le_bytes()
                    .to_vec(),
                DType::U16 => u16::try_from(v)
                    .map_err(|_| out_of_range())?
                    .to_le_bytes()
                    .to_vec(),
                _ => u32::try_from(v)
                    .map_err(|_| out_of_range())?
                    .to_le_bytes()
                    .to_vec(),
            })
        };
        let bytes = match self.dtype {
            DType::Bool => c.bool_contents.iter().map(|&b| b as u8).collect(),
            DType::I8 | DType::I16 | DType::I32 => {
                let mut out = Vec::new();
                for &v in &c.int_contents {
                    out.extend(narrow(v as i64)?);
                }
                out
            }
            DType::U8 | DType::U16 | DType::U32 => {
                let mut out = Vec::new();
                for &v in &c.uint_contents {
                    out.extend(narrow(v as i64)?);
                }
                out
            }
            DType::I64 => le(&c.int64_contents, i64::to_le_bytes),
            DType::U64 => le(&c.uint64_contents, u64::to_le_bytes),
            DType::F32 => le(&c.fp32_contents, f32::to_le_bytes),
            DType::F64 => le(&c.fp64_contents, f64::to_le_bytes),
            _ => {
                let strings = c
                    .bytes_contents
                    .iter()
                    .map(|b| self.utf8(b))
                    .collect::<Result<Vec<_>, _>>()?;
                return self.strings(strings);
            }
        };
        Tensor::from_bytes(self.dtype, &self.shape, &bytes).map_err(|e| self.tensor_error(e))
    }

    fn strings(&self, strings: Vec<String>) -> Result<Tensor, ServeError> {
        if strings.len() != self.numel {
            return Err(self.wrong_count("data", strings.len()));
        }
        Tensor::from_strings(&self.shape, strings).map_err(|e| self.tensor_error(e))
    }

    fn utf8(&self, bytes: &[u8]) -> Result<String, ServeError> {
        String::from_utf8(bytes.to_vec()).map_err(|_| {
            ServeError::bad_request(format!(
                "input '{}': a BYTES element is not UTF-8 (ferrolite's string tensors are text)",
                self.name
            ))
        })
    }

    fn tensor_error(&self, e: ferrolite::Error) -> ServeError {
        ServeError::bad_request(format!("input '{}': {e}", self.name))
    }

    fn bad_element(&self, v: &Value) -> ServeError {
        let mut shown = v.to_string();
        shown.truncate(40);
        ServeError::bad_request(format!(
            "input '{}': {shown} is not a {} value",
            self.name,
            datatype_name(self.dtype).unwrap_or("?")
        ))
    }

    /// Appends one JSON element as little-endian bytes of the input's type.
    fn push_json(&self, v: &Value, out: &mut Vec<u8>) -> Result<(), ServeError> {
        let bad = || self.bad_element(v);
        let int = || -> Result<i128, ServeError> {
            v.as_i64()
                .map(i128::from)
                .or_else(|| v.as_u64().map(i128::from))
                .ok_or_else(bad)
        };
        macro_rules! narrow {
            ($t:ty) => {
                out.extend_from_slice(&<$t>::try_from(int()?).map_err(|_| bad())?.to_le_bytes())
            };
        }
        match self.dtype {
            DType::Bool => out.push(v.as_bool().ok_or_else(bad)? as u8),
            DType::I8 => narrow!(i8),
            DType::I16 => narrow!(i16),
            DType::I32 => narrow!(i32),
            DType::I64 => narrow!(i64),
            DType::U8 => narrow!(u8),
            DType::U16 => narrow!(u16),
            DType::U32 => narrow!(u32),
            DType::U64 => narrow!(u64),
            DType::F32 => {
                out.extend_from_slice(&(v.as_f64().ok_or_else(bad)? as f32).to_le_bytes())
            }
            DType::F64 => out.extend_from_slice(&v.as_f64().ok_or_else(bad)?.to_le_bytes()),
            DType::F16 => {
                out.extend_from_slice(&f16::from_f64(v.as_f64().ok_or_else(bad)?).to_le_bytes())
            }
            DType::BF16 => {
                out.extend_from_slice(&bf16::from_f64(v.as_f64().ok_or_else(bad)?).to_le_bytes())
            }
            _ => return Err(bad()),
        }
        Ok(())
    }
}

/// Collects the leaves of a nested JSON array; stops (Err) past `limit` leaves, so that a
/// request cannot make the server walk more than its shape says.
fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>, limit: usize) -> Result<(), ()> {
    match v {
        Value::Array(items) => {
            for item in items {
                flatten(item, out, limit)?;
            }
            Ok(())
        }
        leaf => {
            if out.len() == limit {
                return Err(());
            }
            out.push(leaf);
            Ok(())
        }
    }
}

/// A tensor's elements as raw little-endian bytes (BYTES: 4-byte length, then the bytes).
pub fn to_raw(t: &Tensor) -> Vec<u8> {
    match t.strings() {
        Ok(strings) => {
            let mut out = Vec::new();
            for s in strings {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            out
        }
        Err(_) => t.bytes().to_vec(),
    }
}

/// A tensor's elements as a flat JSON array (non-finite floats become null, as JSON has no
/// NaN).
pub fn to_json(t: &Tensor) -> Value {
    let b = t.bytes();
    macro_rules! ints {
        ($t:ty) => {
            b.chunks_exact(std::mem::size_of::<$t>())
                .map(|c| Value::from(<$t>::from_le_bytes(c.try_into().expect("chunk size"))))
                .collect()
        };
    }
    let floats = |v: Vec<f64>| -> Value { v.into_iter().map(Value::from).collect() };
    match t.dtype() {
        DType::String => t
            .strings()
            .map(|s| s.iter().map(|s| Value::from(s.as_str())).collect())
            .unwrap_or(Value::Null),
        DType::Bool => b.iter().map(|&x| Value::from(x != 0)).collect(),
        DType::I8 => ints!(i8),
        DType::I16 => ints!(i16),
        DType::I32 => ints!(i32),
        DType::I64 => ints!(i64),
        DType::U8 => ints!(u8),
        DType::U16 => ints!(u16),
        DType::U32 => ints!(u32),
        DType::U64 => ints!(u64),
        _ => floats(t.to_f64_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_raw_and_contents_agree() {
        let spec = InputSpec::new("x", "FP32", &[2, 2]).unwrap();
        let a = spec.from_json(&json!([[1.0, 2.5], [-3, 4]])).unwrap();
        let raw: Vec<u8> = [1.0f32, 2.5, -3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let b = spec.from_raw(&raw).unwrap();
        let c = spec
            .from_contents(&InferTensorContents {
                fp32_contents: vec![1.0, 2.5, -3.0, 4.0],
                ..Default::default()
            })
            .unwrap();
        assert_eq!(a.as_slice::<f32>().unwrap(), &[1.0, 2.5, -3.0, 4.0]);
        assert_eq!(a.bytes(), b.bytes());
        assert_eq!(a.bytes(), c.bytes());
        assert_eq!(to_raw(&a), raw);
        assert_eq!(to_json(&a), json!([1.0, 2.5, -3.0, 4.0]));
    }

    #[test]
    fn integers_are_range_checked() {
        let spec = InputSpec::new("ids", "UINT8", &[3]).unwrap();
        assert_eq!(
            spec.from_json(&json!([0, 255, 7])).unwrap().bytes(),
            &[0, 255, 7]
        );
        for bad in [
            json!([0, 256, 1]),
            json!([0, -1, 1]),
            json!([0, 1.5, 1]),
            json!([0, "a", 1]),
        ] {
            let e = spec.from_json(&bad).unwrap_err();
            assert!(e.message.contains("'ids'"), "{}", e.message);
        }
        let i64s = InputSpec::new("n", "INT64", &[2]).unwrap();
        let t = i64s.from_json(&json!([i64::MIN, i64::MAX])).unwrap();
        assert_eq!(to_json(&t), json!([i64::MIN, i64::MAX]));
        let i8s = InputSpec::new("q", "INT8", &[2]).unwrap();
        let c = InferTensorContents {
            int_contents: vec![-128, 128],
            ..Default::default()
        };
        assert!(i8s.from_contents(&c).unwrap_err().message.contains("128"));
    }

    #[test]
    fn counts_and_sizes_must_match_the_shape() {
        let spec = InputSpec::new("x", "FP32", &[1, 3]).unwrap();
        assert!(spec.from_json(&json!([1, 2])).is_err());
        assert!(spec.from_json(&json!([1, 2, 3, 4])).is_err());
        assert!(spec.from_raw(&[0u8; 11]).is_err());
        assert!(spec.from_raw(&[0u8; 13]).is_err());
        // A huge declared shape is refused by the data's size, not allocated.
        let huge = InputSpec::new("x", "FP32", &[1 << 40, 1 << 20]).unwrap();
        assert!(huge.from_raw(&[0u8; 16]).is_err());
        assert!(huge.from_json(&json!([1.0])).is_err());
        assert!(InputSpec::new("x", "FP32", &[i64::MAX, i64::MAX]).is_err());
        assert!(InputSpec::new("x", "FP32", &[-1, 3]).is_err());
        assert!(InputSpec::new("x", "FLOAT", &[1]).is_err());
    }

    #[test]
    fn bytes_elements_are_length_prefixed() {
        let spec = InputSpec::new("s", "BYTES", &[2]).unwrap();
        let mut raw = Vec::new();
        for s in ["ab", "héllo"] {
            raw.extend_from_slice(&(s.len() as u32).to_le_bytes());
            raw.extend_from_slice(s.as_bytes());
        }
        let t = spec.from_raw(&raw).unwrap();
        assert_eq!(
            t.strings().unwrap(),
            &["ab".to_string(), "héllo".to_string()]
        );
        assert_eq!(to_raw(&t), raw);
        assert!(spec.from_raw(&raw[..raw.len() - 1]).is_err());
        assert!(spec.from_raw(&raw[..3]).is_err());
        let j = spec.from_json(&json!(["ab", "héllo"])).unwrap();
        assert_eq!(j.strings().unwrap(), t.strings().unwrap());
    }

    #[test]
    fn every_datatype_names_round_trip() {
        for name in [
            "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
            "FP16", "FP32", "FP64", "BF16", "BYTES",
        ] {
            assert_eq!(datatype_name(dtype_of(name).unwrap()), Some(name));
        }
        let spec = InputSpec::new("h", "FP16", &[2]).unwrap();
        let t = spec.from_json(&json!([0.5, -2])).unwrap();
        assert_eq!(to_json(&t), json!([0.5, -2.0]));
        let b = InputSpec::new("b", "BOOL", &[3]).unwrap();
        let t = b.from_json(&json!([true, false, true])).unwrap();
        assert_eq!(to_json(&t), json!([true, false, true]));
    }
}
