//! Drives an untrusted model end to end: load, prerun on its default shapes, and one run on
//! zero inputs when those are small. The fuzz targets (`fuzz/`) and the hostile-input tests
//! use it: whatever the bytes, every failure must come back as an `Err`, never as a panic, an
//! abort, or an allocation past the session's memory cap.

use crate::model::{load_model, load_paddle_bytes, load_paddle_separate};
use crate::{Result, Session, SessionOptions, Tensor};
use ferrolite_core::tensor::checked_numel;

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

/// [`exercise`] on a Paddle program with combined parameters.
pub fn paddle_combined(program: &[u8], params: &[u8]) -> Result<()> {
    exercise(&Session::from_model(
        load_paddle_bytes(program, params)?,
        options(),
    )?)
}

/// [`exercise`] on a Paddle program with one parameter file per variable, `files` by name.
pub fn paddle_separate(program: &[u8], files: &[(String, Vec<u8>)]) -> Result<()> {
    let model = load_paddle_separate(program, |name| {
        files
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.clone())
            .ok_or_else(|| ferrolite_paddle::Error::MissingVariable {
                var: name.to_string(),
                path: name.to_string(),
            })
    })?;
    exercise(&Session::from_model(model, options())?)
}

/// Decodes input-file bytes as the CLI reads them: `.npy` when they start with its magic,
/// else a serialized ONNX `TensorProto`.
pub fn tensor_file(bytes: &[u8]) -> Result<Tensor> {
    if bytes.starts_with(b"\x93NUMPY") {
        ferrolite_onnx::npy::read_npy(bytes)
    } else {
        Ok(ferrolite_onnx::decode_tensor_bytes(bytes, None)?.1)
    }
}
