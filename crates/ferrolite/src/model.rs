//! Model loading across formats.

use ferrolite_core::{Graph, Result};
use std::path::Path;

/// The file format a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Onnx,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Format::Onnx => f.write_str("onnx"),
        }
    }
}

/// A decoded model: its graph of canonical ops and where it came from.
#[derive(Clone, Debug)]
pub struct Model {
    pub graph: Graph,
    pub format: Format,
    pub producer: String,
    /// Opset imports (domain, version).
    pub opsets: Vec<(String, i64)>,
}

/// Decodes a model from bytes. `dir` is the model's folder, for external data.
pub fn load_model(bytes: &[u8], dir: Option<&Path>) -> Result<Model> {
    let m = ferrolite_onnx::model::load_model(bytes, dir)?;
    Ok(Model {
        graph: m.graph,
        format: Format::Onnx,
        producer: m.producer,
        opsets: m.opsets,
    })
}
