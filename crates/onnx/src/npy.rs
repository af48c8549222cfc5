//! NumPy `.npy` files (format versions 1, 2 and 3), little-endian, C order.

use ferrolite_core::{tensor::checked_numel, DType, Error, Result, Tensor};
use std::path::Path;

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// numpy itself refuses headers above 10000 bytes unless told otherwise.
const MAX_HEADER_BYTES: usize = 1 << 16;

fn bad(msg: impl std::fmt::Display) -> Error {
    Error::InvalidModel(format!("npy: {msg}"))
}

/// The dtype of a `descr` string such as `<f4` or `|u1`.
fn dtype_of_descr(descr: &str) -> Result<DType> {
    let (order, code) = descr
        .split_at_checked(1)
        .ok_or_else(|| bad("empty descr"))?;
    let dtype = match code {
        "f4" => DType::F32,
        "f8" => DType::F64,
        "f2" => DType::F16,
        "i1" => DType::I8,
        "u1" => DType::U8,
        "i2" => DType::I16,
        "u2" => DType::U16,
        "i4" => DType::I32,
        "u4" => DType::U32,
        "i8" => DType::I64,
        "u8" => DType::U64,
        "b1" => DType::Bool,
        _ => return Err(bad(format!("dtype '{descr}' is not supported"))),
    };
    let ok = match order {
        "<" => true,
        // Byte order is irrelevant for 1-byte types, which numpy writes with '|'.
        "|" => dtype.size() == 1,
        _ => false,
    };
    if !ok {
        return Err(bad(format!(
            "dtype '{descr}': only little-endian ('<', or '|' for 1-byte types) is supported"
        )));
    }
    Ok(dtype)
}

fn descr_of(d: DType) -> Result<&'static str> {
    Ok(match d {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::I32 => "<i4",
        DType::U32 => "<u4",
        DType::I64 => "<i8",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
        DType::BF16
        | DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1
        | DType::I4
        | DType::U4
        | DType::String
        | DType::Sequence
        | DType::Optional => return Err(bad(format!("{d} has no NumPy dtype"))),
    })
}

/// The value of `'key':` in a header dict, up to the next top-level comma or the closing brace.
fn field<'a>(header: &'a str, key: &str) -> Result<&'a str> {
    let mut found = None;
    for q in ['\'', '"'] {
        let pat = format!("{q}{key}{q}");
        if let Some(p) = header.find(&pat) {
            found = Some(p + pat.len());
            break;
        }
    }
    let start = found.ok_or_else(|| bad(format!("header has no '{key}': {header}")))?;
    let rest = header[start..].trim_start();
    let rest = rest
        .strip_prefix(':')
        .ok_or_else(|| bad(format!("malformed header: {header}")))?
        .trim_start();
    // Tuples contain commas; end after the closing parenthesis.
    let end = if rest.starts_with('(') {
        rest.find(')')
            .map(|i| i + 1)
            .ok_or_else(|| bad(format!("unclosed shape tuple: {header}")))?
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    Ok(rest[..end].trim())
}

fn parse_header(header: &str) -> Result<(DType, bool, Vec<usize>)> {
    let descr = field(header, "descr")?;
    let descr = descr
        .strip_prefix(['\'', '"'])
        .and_then(|s| s.strip_suffix(['\'', '"']))
        .ok_or_else(|| bad(format!("descr {descr} is not a plain dtype string")))?;
    let dtype = dtype_of_descr(descr)?;
    let fortran = match field(header, "fortran_order")? {
        "False" => false,
        "True" => true,
        other => return Err(bad(format!("fortran_order '{other}' is not True/False"))),
    };
    let shape_s = field(header, "shape")?;
    let inner = shape_s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| bad(format!("shape {shape_s} is not a tuple")))?;
    let mut shape = Vec::new();
    for part in inner.split(',') {
        let part = part.trim().trim_end_matches('L');
        if part.is_empty() {
            continue;
        }
        shape.push(
            part.parse::<usize>()
                .map_err(|_| bad(format!("shape {shape_s}: '{part}' is not a dimension")))?,
        );
    }
    Ok((dtype, fortran, shape))
}

/// Decodes the bytes of a `.npy` file.
pub fn read_npy(bytes: &[u8]) -> Result<Tensor> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(bad("not a .npy file (bad magic)"));
    }
    let major = bytes[6];
    let (header_len, header_start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            let b = bytes
                .get(8..12)
                .ok_or_else(|| bad("truncated header length"))?;
            (u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize, 12)
        }
        v => return Err(bad(format!("format version {v} is not supported"))),
    };
    if header_len > MAX_HEADER_BYTES {
        return Err(bad(format!("header of {header_len} bytes is too large")));
    }
    let header_end = header_start + header_len;
    let header = bytes.get(header_start..header_end).ok_or_else(|| {
        bad(format!(
            "header of {header_len} bytes runs past the end of the file"
        ))
    })?;
    // Versions 1 and 2 use latin-1; 3 uses UTF-8. The fields we read are ASCII either way.
    let header = String::from_utf8_lossy(header);
    let (dtype, fortran, shape) = parse_header(&header)?;
    if fortran {
        return Err(bad("fortran_order (column-major) arrays are not supported"));
    }
    let numel = checked_numel(&shape).map_err(bad)?;
    let nbytes = numel
        .checked_mul(dtype.size())
        .ok_or_else(|| bad(format!("shape {shape:?} is too large")))?;
    let data = &bytes[header_end..];
    if data.len() != nbytes {
        return Err(bad(format!(
            "shape {shape:?} of {dtype} needs {nbytes} bytes of data, the file has {}",
            data.len()
        )));
    }
    Tensor::from_bytes(dtype, &shape, data)
}

/// Encodes a tensor as a `.npy` file (format version 1, or 2 for very long headers).
pub fn write_npy(t: &Tensor) -> Result<Vec<u8>> {
    let descr = descr_of(t.dtype())?;
    let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad with spaces so that the data starts on a multiple of 64 bytes; end with '\n'.
    let v1 = header.len() + 11 <= u16::MAX as usize;
    let prefix = if v1 { 10 } else { 12 };
    let total = (prefix + header.len() + 1).div_ceil(64) * 64;
    header.extend(std::iter::repeat_n(' ', total - prefix - header.len() - 1));
    header.push('\n');
    let mut out = Vec::with_capacity(total + t.byte_len());
    out.extend_from_slice(MAGIC);
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(t.bytes());
    Ok(out)
}

/// Reads a `.npy` file.
pub fn read_npy_file(path: &Path) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| Error::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    read_npy(&bytes).map_err(|e| Error::InvalidModel(format!("{}: {e}", path.display())))
}

/// Writes a `.npy` file.
pub fn write_npy_file(path: &Path, t: &Tensor) -> Result<()> {
    std::fs::write(path, write_npy(t)?).map_err(|e| Error::Io {
        path: path.display().to_string(),
        source: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(version: u8, header: &str, data: &[u8]) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&[version, 0]);
        if version == 1 {
            v.extend_from_slice(&(header.len() as u16).to_le_bytes());
        } else {
            v.extend_from_slice(&(header.len() as u32).to_le_bytes());
        }
        v.extend_from_slice(header.as_bytes());
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn roundtrip_every_dtype() {
        let ts = [
            Tensor::from_slice(&[2, 3], &[1.5f32, -2.0, 3.0, 4.0, 5.0, 6.0]).unwrap(),
            Tensor::from_slice(&[2], &[1.25f64, -7.0]).unwrap(),
            Tensor::from_slice(&[2], &[half::f16::from_f32(0.5), half::f16::from_f32(-3.0)])
                .unwrap(),
            Tensor::from_slice(&[3], &[-1i8, 0, 127]).unwrap(),
            Tensor::from_slice(&[1, 1], &[200u8]).unwrap(),
            Tensor::from_slice(&[2], &[-300i16, 300]).unwrap(),
            Tensor::from_slice(&[2], &[60000u16, 1]).unwrap(),
            Tensor::from_slice(&[2], &[-5i32, 5]).unwrap(),
            Tensor::from_slice(&[2], &[u32::MAX, 0]).unwrap(),
            Tensor::from_slice(&[2, 1, 1], &[i64::MIN, i64::MAX]).unwrap(),
            Tensor::from_slice(&[1], &[u64::MAX]).unwrap(),
            Tensor::from_bools(&[3], &[true, false, true]).unwrap(),
            Tensor::scalar(3.0f32),
            Tensor::zeros(DType::F32, &[0, 4]).unwrap(),
        ];
        for t in ts {
            let bytes = write_npy(&t).unwrap();
            // Data aligned to 64 bytes, header ends with a newline.
            let hl = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
            assert_eq!((10 + hl) % 64, 0);
            assert_eq!(bytes[10 + hl - 1], b'\n');
            let back = read_npy(&bytes).unwrap();
            assert_eq!(back.dtype(), t.dtype());
            assert_eq!(back.shape(), t.shape());
            assert_eq!(back.bytes(), t.bytes());
        }
    }

    #[test]
    fn reads_versions_2_and_3_and_numpy_headers() {
        let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        for v in [1, 2, 3] {
            let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }          \n";
            let t = read_npy(&npy(v, h, &data)).unwrap();
            assert_eq!(t.shape(), &[2]);
            assert_eq!(t.as_slice::<f32>().unwrap(), &[1.0, 2.0]);
        }
        // Key order and quoting may differ; scalars have an empty tuple.
        let h = "{\"shape\": (), \"fortran_order\": False, \"descr\": \"<f4\"}\n";
        let t = read_npy(&npy(1, h, &data[..4])).unwrap();
        assert_eq!(t.shape(), &[] as &[usize]);
        let h = "{'descr': '|b1', 'fortran_order': False, 'shape': (1, 2), }\n";
        let t = read_npy(&npy(1, h, &[0, 7])).unwrap();
        assert_eq!(t.as_slice::<u8>().unwrap(), &[0, 1]);
    }

    #[test]
    fn rejects_bad_files() {
        let data = [0u8; 8];
        let cases = [
            "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }\n",
            "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n",
            "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }\n",
            "{'descr': '|f4', 'fortran_order': False, 'shape': (2,), }\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }\n",
            "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }\n",
            "{'descr': '<f4', 'shape': (2,), }\n",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, }\n",
            "garbage",
        ];
        for h in cases {
            let e = read_npy(&npy(1, h, &data)).unwrap_err();
            assert!(e.to_string().contains("npy"), "{h}: {e}");
        }
        assert!(read_npy(b"").is_err());
        assert!(read_npy(b"\x93NUMPY\x01").is_err());
        assert!(read_npy(b"PK\x03\x04nonsense").is_err());
        // Header length past the end, and huge header lengths.
        let mut v = npy(1, "{}", &[]);
        v[8] = 0xff;
        assert!(read_npy(&v).is_err());
        let mut v = npy(2, "{}", &[]);
        v[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(read_npy(&v).is_err());
        assert!(read_npy(&npy(4, "{}", &[])).is_err());
        // Every truncation of a valid file fails cleanly.
        let good = write_npy(&Tensor::from_slice(&[3], &[1i32, 2, 3]).unwrap()).unwrap();
        for n in 0..good.len() {
            assert!(read_npy(&good[..n]).is_err());
        }
        assert!(write_npy(&Tensor::zeros(DType::BF16, &[1]).unwrap()).is_err());
    }
}
