//! External tensor data: `location` / `offset` / `length` relative to the model's folder.

use crate::proto::TensorProto;
use ferrolite_core::{Error, Result};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path};

fn bad(t: &TensorProto, msg: impl std::fmt::Display) -> Error {
    Error::InvalidModel(format!("tensor '{}': external data: {msg}", t.name))
}

/// Reads the `nbytes` bytes of a tensor stored outside the model file.
pub fn read(t: &TensorProto, model_dir: &Path, nbytes: usize) -> Result<Vec<u8>> {
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for kv in &t.external_data {
        match kv.key.as_str() {
            "location" => location = Some(kv.value.as_str()),
            "offset" => {
                offset = kv
                    .value
                    .parse()
                    .map_err(|_| bad(t, format!("offset '{}' is not a number", kv.value)))?
            }
            "length" => {
                length = Some(
                    kv.value
                        .parse::<u64>()
                        .map_err(|_| bad(t, format!("length '{}' is not a number", kv.value)))?,
                )
            }
            _ => {}
        }
    }
    let location = location.ok_or_else(|| bad(t, "no location"))?;
    let rel = Path::new(location);
    // Only plain relative paths that stay inside the model's folder.
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(bad(
            t,
            format!("location '{location}' leaves the model's folder"),
        ));
    }
    let path = model_dir.join(rel);
    // A symbolic link could still point elsewhere: compare canonical paths.
    let canon_dir = model_dir.canonicalize().map_err(|e| Error::Io {
        path: model_dir.display().to_string(),
        source: e,
    })?;
    let canon = path.canonicalize().map_err(|e| Error::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    if !canon.starts_with(&canon_dir) {
        return Err(bad(
            t,
            format!("location '{location}' leaves the model's folder"),
        ));
    }
    if let Some(len) = length {
        if len != nbytes as u64 {
            return Err(bad(
                t,
                format!("length {len} disagrees with the tensor's size of {nbytes} bytes"),
            ));
        }
    }
    let io = |e| Error::Io {
        path: path.display().to_string(),
        source: e,
    };
    let mut f = std::fs::File::open(&canon).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len();
    if offset
        .checked_add(nbytes as u64)
        .is_none_or(|end| end > file_len)
    {
        return Err(bad(
            t,
            format!(
                "{nbytes} bytes at offset {offset} run past the end of '{location}' ({file_len} bytes)"
            ),
        ));
    }
    f.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut buf = vec![0u8; nbytes];
    f.read_exact(&mut buf).map_err(io)?;
    Ok(buf)
}
