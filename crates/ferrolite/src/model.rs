//! Model loading across formats.

use ferrolite_core::{Error, Graph, Result};
use std::path::{Path, PathBuf};

/// The file format a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// An ONNX `ModelProto`.
    Onnx,
    /// PaddlePaddle legacy `ProgramDesc` (`.pdmodel` / `__model__`) with its parameters.
    Paddle,
}

impl Format {
    /// Parses a format name: `"onnx"` or `"paddle"`. Known but not yet supported formats
    /// (`"tengine"`) and unknown names are errors.
    ///
    /// ```
    /// use ferrolite::Format;
    /// assert_eq!(Format::from_name("onnx").unwrap(), Format::Onnx);
    /// assert_eq!(Format::from_name("paddle").unwrap(), Format::Paddle);
    /// assert!(Format::from_name("tengine").is_err());
    /// ```
    pub fn from_name(name: &str) -> Result<Format> {
        match name.to_ascii_lowercase().as_str() {
            "onnx" => Ok(Format::Onnx),
            "paddle" | "pdmodel" => Ok(Format::Paddle),
            "tengine" | "tmfile" => Err(Error::Other(format!(
                "model format '{name}' is not supported yet (supported: onnx, paddle)"
            ))),
            _ => Err(Error::Other(format!(
                "unknown model format '{name}' (supported: onnx, paddle)"
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
            Format::Paddle => f.write_str("paddle"),
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
    /// Key-value metadata from the file (ONNX `metadata_props`; empty for Paddle).
    pub metadata: Vec<(String, String)>,
}

impl Model {
    /// The metadata value stored under `key`, if any.
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
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
                metadata: m.metadata,
            })
        }
        Format::Paddle => Err(Error::Other(
            "Paddle models load from files (a model folder, or a program file and its params \
             file), not from one buffer"
                .into(),
        )),
    }
}

/// Whether `path` names a Paddle model: a folder with `__model__`, `model` or a `*.pdmodel`,
/// a `.pdmodel` file, a `__model__` / `model` file, or a Paddle 3 `.json` program (which
/// loading then reports as unsupported).
pub fn is_paddle(path: &Path) -> bool {
    if path.is_dir() {
        if ["__model__", "model"]
            .iter()
            .any(|n| path.join(n).is_file())
        {
            return true;
        }
        return std::fs::read_dir(path).is_ok_and(|d| {
            d.flatten().any(|e| {
                let p = e.path();
                p.extension().is_some_and(|x| x == "pdmodel" || x == "json")
            })
        });
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("pdmodel") | Some("json")
    ) || name == "__model__"
        || (name == "model" && !path.with_file_name("model.onnx").exists())
}

/// Loads a Paddle model: a folder, or a program file with an optional params file (combined
/// file, or a folder of per-variable files).
pub fn load_paddle(model: &Path, params: Option<&Path>) -> Result<Model> {
    paddle_model(ferrolite_paddle::load(model, params)?)
}

/// Loads a Paddle model from memory: a program and its combined parameters (empty when the
/// program has no saved variables).
pub fn load_paddle_bytes(program: &[u8], params: &[u8]) -> Result<Model> {
    use ferrolite_paddle::model::{persistable_vars, read_combined};
    let p = ferrolite_paddle::decode_program(program)?;
    let tensors = read_combined(params, &persistable_vars(&p))?;
    paddle_model(ferrolite_paddle::convert_program(&p, tensors)?)
}

/// Loads a Paddle model from memory with one parameter file per variable: `fetch` returns a
/// variable's file contents by name.
pub fn load_paddle_separate(
    program: &[u8],
    fetch: impl FnMut(&str) -> ferrolite_paddle::Result<Vec<u8>>,
) -> Result<Model> {
    use ferrolite_paddle::model::{persistable_vars, read_separate_with};
    let p = ferrolite_paddle::decode_program(program)?;
    let tensors = read_separate_with(&persistable_vars(&p), fetch)?;
    paddle_model(ferrolite_paddle::convert_program(&p, tensors)?)
}

fn paddle_model(m: ferrolite_paddle::PaddleModel) -> Result<Model> {
    Ok(Model {
        graph: m.graph,
        format: Format::Paddle,
        producer: format!("paddle (program version {})", m.version),
        opsets: Vec::new(),
        metadata: Vec::new(),
    })
}

/// Loads a model file or folder of any supported format, detected from the path.
pub fn load_path(path: &Path) -> Result<Model> {
    if is_paddle(path) {
        return load_paddle(path, None);
    }
    let bytes = std::fs::read(path).map_err(|e| ferrolite_core::Error::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    let dir: Option<PathBuf> = path.parent().map(Path::to_path_buf);
    load_model(&bytes, dir.as_deref())
}
