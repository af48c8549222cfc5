//! Model loading across formats.

use ferrolite_core::{Error, Graph, Result};
use std::path::Path;

/// The file format a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// An ONNX `ModelProto`.
    Onnx,
}

impl Format {
    /// Parses a format name: `"onnx"`. Known but not yet supported formats (`"paddle"`) and
    /// unknown names are errors.
    ///
    /// ```
    /// use ferrolite::Format;
    /// assert_eq!(Format::from_name("onnx").unwrap(), Format::Onnx);
    /// assert!(Format::from_name("paddle").is_err());
    /// ```
    pub fn from_name(name: &str) -> Result<Format> {
        match name.to_ascii_lowercase().as_str() {
            "onnx" => Ok(Format::Onnx),
            "paddle" | "pdmodel" | "tengine" | "tmfile" => Err(Error::Other(format!(
                "model format '{name}' is not supported yet (supported: onnx)"
            ))),
            _ => Err(Error::Other(format!(
                "unknown model format '{name}' (supported: onnx)"
            ))),
        }
    }

    /// Guesses the format of a model from its first bytes. ONNX files are protobuf messages that
    /// start with field 1 (`ir_version`, a varint: byte 0x08) in practice.
    ///
    /// ```
    /// use ferrolite::Format;
    /// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/ppocr_cls/model.onnx");
    /// let bytes = std::fs::read(path).unwrap();
    /// assert_eq!(Format::detect(&bytes).unwrap(), Format::Onnx);
    /// assert!(Format::detect(b"hello").is_err());
    /// ```
    pub fn detect(bytes: &[u8]) -> Result<Format> {
        match bytes.first() {
            // Field 1 varint (ir_version) or, rarely, another ModelProto field first
            // (2 producer_name, 7 graph, 8 opset_import: length-delimited).
            Some(0x08) | Some(0x12) | Some(0x3a) | Some(0x42) => Ok(Format::Onnx),
            _ => Err(Error::InvalidModel(
                "could not detect the model format (supported: onnx)".into(),
            )),
        }
    }
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
    /// The graph of canonical ops, before shape inference and passes.
    pub graph: Graph,
    /// The format it was decoded from.
    pub format: Format,
    /// The producer named in the file.
    pub producer: String,
    /// Opset imports (domain, version).
    pub opsets: Vec<(String, i64)>,
}

/// Decodes a model from bytes. `dir` is the model's folder, for external data.
pub fn load_model(bytes: &[u8], dir: Option<&Path>) -> Result<Model> {
    load_model_as(Format::Onnx, bytes, dir)
}

/// Decodes a model of a given format from bytes.
pub fn load_model_as(format: Format, bytes: &[u8], dir: Option<&Path>) -> Result<Model> {
    match format {
        Format::Onnx => {
            let m = ferrolite_onnx::model::load_model(bytes, dir)?;
            Ok(Model {
                graph: m.graph,
                format: Format::Onnx,
                producer: m.producer,
                opsets: m.opsets,
            })
        }
    }
}
