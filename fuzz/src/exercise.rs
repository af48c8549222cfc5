//! Drives an untrusted model end to end: load, prerun on its default shapes, and one run on
//! zero inputs when those are small. The fuzz targets and the hostile-input tests
//! (`crates/ferrolite/tests/hostile.rs`, which includes this file) use it: whatever the bytes,
//! every failure must come back as an `Err`, never as a panic, an abort, or an allocation past
//! the session's memory cap. It is written against ferrolite's public API only, and is not part
//! of it.

use ferrolite::core::tensor::checked_numel;
use ferrolite::model::{load_model, load_model_as, Format};
#[cfg(feature = "paddle")]
use ferrolite::model::{load_paddle_bytes, load_paddle_separate};
use ferrolite::{Result, Session, SessionOptions, Tensor};

/// The memory cap of sessions on untrusted models here (weights, arena, prepacked copies,
/// and any one tensor at run time).
pub const MAX_MEMORY: u64 = 64 << 20;

/// Inputs with more elements than this in all are planned but not run.
pub const MAX_RUN_ELEMENTS: usize = 1 << 16;

/// Session options for untrusted models: one thread, no pinning, [`MAX_MEMORY`].
pub fn options() -> SessionOptions {
    SessionOptions::default()
        .with_threads(1)
        .with_thread_pinning(false)
        .with_max_memory(MAX_MEMORY)
}

/// Plans the session for its default input shapes (symbolic dims at 1) and, when the inputs
/// are small, runs it once on zeros.
pub fn exercise(session: &Session) -> Result<()> {
    let shapes = session.default_shapes();
    session.prerun(&shapes)?;
    let mut total = 0usize;
    for s in &shapes {
        total = total.saturating_add(checked_numel(s).unwrap_or(usize::MAX));
    }
    if total > MAX_RUN_ELEMENTS {
        return Ok(());
    }
    let inputs = session
        .inputs()
        .iter()
        .zip(&shapes)
        .map(|(i, s)| Ok((i.name.as_str(), Tensor::zeros(i.dtype, s)?)))
        .collect::<Result<Vec<_>>>()?;
    session.run(&inputs)?;
    Ok(())
}

/// [`exercise`] on ONNX model bytes.
pub fn onnx(bytes: &[u8]) -> Result<()> {
    exercise(&Session::from_model(load_model(bytes, None)?, options())?)
}

/// [`exercise`] on ferrolite's optimized format (`ferrolite opt`, docs/format.md).
pub fn optimized(bytes: &[u8]) -> Result<()> {
    exercise(&Session::from_model(
        load_model_as(Format::Optimized, bytes, None)?,
        options(),
    )?)
}

/// [`exercise`] on a Paddle program with combined parameters.
#[cfg(feature = "paddle")]
pub fn paddle_combined(program: &[u8], params: &[u8]) -> Result<()> {
    exercise(&Session::from_model(
        load_paddle_bytes(program, params)?,
        options(),
    )?)
}

/// [`exercise`] on a Paddle program with one parameter file per variable, `files` by name.
#[cfg(feature = "paddle")]
pub fn paddle_separate(program: &[u8], files: &[(String, Vec<u8>)]) -> Result<()> {
    let model = load_paddle_separate(program, |name| {
        files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.clone())
            .ok_or_else(|| ferrolite::paddle::Error::MissingVariable {
                var: name.to_string(),
                path: name.to_string(),
            })
    })?;
    exercise(&Session::from_model(model, options())?)
}

/// One fuzz input holding a Paddle program and its parameters. The fuzz targets and the
/// regression replay (`tests/hostile.rs`) both read it through here.
///
/// Combined: `[program length: u32 LE][program][params]`. Separate: the same start, then one
/// file per variable, each `[name length: u16 LE][name][length: u32 LE][bytes]`.
pub mod packed_paddle {
    fn u32_at(data: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(
            data.get(at..at.checked_add(4)?)?.try_into().ok()?,
        ))
    }

    /// (program, params); `None` when the program length runs past the data.
    pub fn split_combined(data: &[u8]) -> Option<(&[u8], &[u8])> {
        let n = u32_at(data, 0)? as usize;
        let rest = &data[4..];
        (n <= rest.len()).then(|| rest.split_at(n))
    }

    /// Parameter files by variable name.
    pub type Files = Vec<(String, Vec<u8>)>;

    /// (program, files by name); `None` when a length runs past the data.
    pub fn split_separate(data: &[u8]) -> Option<(&[u8], Files)> {
        let (program, mut rest) = split_combined(data)?;
        let mut files = Vec::new();
        while rest.len() >= 2 {
            let name_len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
            let name = String::from_utf8_lossy(rest.get(2..2 + name_len)?).into_owned();
            let len = u32_at(rest, 2 + name_len)? as usize;
            let start = 6 + name_len;
            files.push((name, rest.get(start..start.checked_add(len)?)?.to_vec()));
            rest = &rest[start + len..];
        }
        Some((program, files))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn packed_inputs_split_back() {
            let mut data = 3u32.to_le_bytes().to_vec();
            data.extend(b"abc");
            data.extend(2u16.to_le_bytes());
            data.extend(b"w0");
            data.extend(2u32.to_le_bytes());
            data.extend(b"xy");
            let (program, files) = split_separate(&data).unwrap();
            assert_eq!(program, b"abc");
            assert_eq!(files, vec![("w0".to_string(), b"xy".to_vec())]);
            assert_eq!(split_combined(&data).unwrap().0, b"abc");
            assert!(split_combined(&[9, 0, 0, 0, 1]).is_none());
            // A file length past the end, and a name cut short.
            let mut short = data.clone();
            short.truncate(data.len() - 1);
            assert!(split_separate(&short).is_none());
            assert!(split_separate(&data[..data.len() - 7]).is_none());
        }
    }
}

/// Decodes input-file bytes as the CLI reads them: `.npy` when they start with its magic,
/// else a serialized ONNX `TensorProto`.
#[cfg(feature = "onnx")]
pub fn tensor_file(bytes: &[u8]) -> Result<Tensor> {
    if bytes.starts_with(b"\x93NUMPY") {
        ferrolite::onnx::npy::read_npy(bytes)
    } else {
        Ok(ferrolite::onnx::decode_tensor_bytes(bytes, None)?.1)
    }
}
