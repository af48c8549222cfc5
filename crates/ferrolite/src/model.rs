//! Model loading across formats.

use ferrolite_core::format::{self, Optimized, OptimizedModel};
use ferrolite_core::tensor::SharedBytes;
use ferrolite_core::{Error, Graph, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file format a model came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// An ONNX `ModelProto`.
    Onnx,
    /// PaddlePaddle legacy `ProgramDesc` (`.pdmodel` / `__model__`) with its parameters.
    Paddle,
    /// ferrolite's optimized model, written by `ferrolite opt` (docs/format.md).
    Optimized,
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
            "ferrolite" | "flm" | "optimized" => Ok(Format::Optimized),
            "tengine" | "tmfile" => Err(Error::Other(format!(
                "model format '{name}' is not supported yet (supported: onnx, paddle, ferrolite)"
            ))),
            _ => Err(Error::Other(format!(
                "unknown model format '{name}' (supported: onnx, paddle, ferrolite)"
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
        if format::is_optimized_model(bytes) {
            return Ok(Format::Optimized);
        }
        match bytes.first() {
            // Field 1 varint (ir_version) or, rarely, another ModelProto field first
            // (2 producer_name, 7 graph, 8 opset_import: length-delimited).
            Some(0x08) | Some(0x12) | Some(0x3a) | Some(0x42) => Ok(Format::Onnx),
            _ => Err(Error::InvalidModel(
                "could not detect the model format (supported: onnx, ferrolite)".into(),
            )),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Format::Onnx => f.write_str("onnx"),
            Format::Paddle => f.write_str("paddle"),
            Format::Optimized => f.write_str("ferrolite"),
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
    /// For an optimized model (`ferrolite opt`): the input shapes and ISA its graph was
    /// optimized for. `None` for a graph as its frontend built it.
    pub optimized: Option<Optimized>,
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

/// Decodes a model from bytes: ONNX, or ferrolite's optimized format (told by its magic).
/// `dir` is the model's folder, for external data.
pub fn load_model(bytes: &[u8], dir: Option<&Path>) -> Result<Model> {
    if format::is_optimized_model(bytes) {
        return load_model_as(Format::Optimized, bytes, dir);
    }
    load_model_as(Format::Onnx, bytes, dir)
}

/// Decodes a model of a given format from bytes.
pub fn load_model_as(format: Format, bytes: &[u8], dir: Option<&Path>) -> Result<Model> {
    match format {
        #[cfg(not(feature = "onnx"))]
        Format::Onnx => {
            let _ = dir;
            Err(without("ONNX"))
        }
        #[cfg(feature = "onnx")]
        Format::Onnx => {
            let m = ferrolite_onnx::model::load_model(bytes, dir)?;
            Ok(Model {
                graph: m.graph,
                format: Format::Onnx,
                producer: m.producer,
                opsets: m.opsets,
                metadata: m.metadata,
                optimized: None,
            })
        }
        Format::Optimized => optimized_model(Arc::new(bytes.to_vec())),
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
    #[cfg(feature = "paddle")]
    return paddle_model(ferrolite_paddle::load(model, params)?);
    #[cfg(not(feature = "paddle"))]
    {
        let _ = (model, params);
        Err(without("Paddle"))
    }
}

/// The error of a build without a frontend (the light build: optimized models only).
#[allow(dead_code)]
fn without(frontend: &str) -> Error {
    Error::Other(format!(
        "this build of ferrolite has no {frontend} frontend (a light build loads only \
         optimized models: write one with `ferrolite opt`)"
    ))
}

/// Loads a Paddle model from memory: a program and its combined parameters (empty when the
/// program has no saved variables).
#[cfg(feature = "paddle")]
pub fn load_paddle_bytes(program: &[u8], params: &[u8]) -> Result<Model> {
    use ferrolite_paddle::model::{persistable_vars, read_combined};
    let p = ferrolite_paddle::decode_program(program)?;
    let tensors = read_combined(params, &persistable_vars(&p))?;
    paddle_model(ferrolite_paddle::convert_program(&p, tensors)?)
}

/// Loads a Paddle model from memory with one parameter file per variable: `fetch` returns a
/// variable's file contents by name.
#[cfg(feature = "paddle")]
pub fn load_paddle_separate(
    program: &[u8],
    fetch: impl FnMut(&str) -> ferrolite_paddle::Result<Vec<u8>>,
) -> Result<Model> {
    use ferrolite_paddle::model::{persistable_vars, read_separate_with};
    let p = ferrolite_paddle::decode_program(program)?;
    let tensors = read_separate_with(&persistable_vars(&p), fetch)?;
    paddle_model(ferrolite_paddle::convert_program(&p, tensors)?)
}

#[cfg(feature = "paddle")]
fn paddle_model(m: ferrolite_paddle::PaddleModel) -> Result<Model> {
    Ok(Model {
        graph: m.graph,
        format: Format::Paddle,
        producer: format!("paddle (program version {})", m.version),
        opsets: Vec::new(),
        metadata: Vec::new(),
        optimized: None,
    })
}

/// Reads an optimized model from bytes that stay alive as long as its weights: a memory map,
/// or a copy in memory.
pub fn optimized_model(bytes: Arc<dyn SharedBytes>) -> Result<Model> {
    let OptimizedModel {
        graph,
        info,
        optimized,
        engine_version,
    } = format::read(bytes)?;
    let source = Format::from_name(&info.source_format).unwrap_or(Format::Optimized);
    Ok(Model {
        graph,
        format: Format::Optimized,
        producer: format!(
            "ferrolite {engine_version} opt, from {source} ({})",
            info.producer
        ),
        opsets: info.opsets,
        metadata: info.metadata,
        optimized,
    })
}

/// A read-only memory map of a model file, whose pages processes mapping the same file share.
struct MappedFile(memmap2::Mmap);

impl SharedBytes for MappedFile {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Maps an optimized model file and reads it; its weights stay in the map.
pub fn load_optimized(path: &Path) -> Result<Model> {
    let io = |e| Error::Io {
        path: path.display().to_string(),
        source: e,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and private. Like every engine that maps its models
    // (onnxruntime, ncnn, MNN), ferrolite assumes nobody truncates or rewrites the file while
    // it is loaded; were it truncated, reading the lost pages would raise SIGBUS.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    optimized_model(Arc::new(MappedFile(map)))
}

/// Whether the file at `path` starts with the optimized format's magic.
fn is_optimized_file(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|_| format::is_optimized_model(&head))
}

/// Loads a model file or folder of any supported format, detected from the path.
pub fn load_path(path: &Path) -> Result<Model> {
    if is_paddle(path) {
        return load_paddle(path, None);
    }
    if is_optimized_file(path) {
        return load_optimized(path);
    }
    let bytes = std::fs::read(path).map_err(|e| ferrolite_core::Error::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    let dir: Option<PathBuf> = path.parent().map(Path::to_path_buf);
    load_model(&bytes, dir.as_deref())
}
