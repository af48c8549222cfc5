//! Finding a Paddle model's files, reading its program and parameters, and building the
//! [`Graph`]: constants for the parameters, graph inputs from the `feed` ops (ordered by
//! `col`), graph outputs from the `fetch` ops (ordered by `col`), one or more canonical nodes
//! per Paddle op. Unsupported ops are all collected into one [`Error::UnsupportedOps`].

use crate::error::{Error, Result};
use crate::map::{self, Ctx, MapError};
use crate::params::{dtype_of, Reader};
use crate::proto::{var_type, OpDesc, ProgramDesc, VarDesc};
use ferrolite_core::ops::elementwise::Identity;
use ferrolite_core::{DeclaredType, Dim, Graph, Tensor, UnsupportedOp, ValueId};
use prost::Message;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Protobuf messages stop at 2 GiB.
const MAX_PROGRAM_BYTES: u64 = 2 << 30;

/// Where a model's parameters are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamsSource {
    /// One file with every persistable variable, in sorted-name order.
    Combined(PathBuf),
    /// A folder with one file per persistable variable, named like the variable.
    Separate(PathBuf),
}

/// A model's program file and its parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelFiles {
    pub program: PathBuf,
    pub params: ParamsSource,
}

/// A loaded Paddle model.
#[derive(Clone, Debug)]
pub struct PaddleModel {
    pub graph: Graph,
    /// `ProgramDesc.version` (0 when absent).
    pub version: i64,
    pub files: Option<ModelFiles>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::Io {
        path: path.display().to_string(),
        source: e,
    }
}

fn is_pir(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
}

/// Resolves a model path the way Paddle Lite's `--model_dir` / `--model_file --param_file` do:
///
/// - a folder holding `__model__`, `model` or one `*.pdmodel` (the parameters are the sibling
///   `*.pdiparams`, a `params` / `__params__` file, or else one file per variable in the folder);
/// - a program file, with `params` given or found next to it the same way.
pub fn find_model(path: &Path, params: Option<&Path>) -> Result<ModelFiles> {
    let program = if path.is_dir() {
        let mut found = None;
        for name in ["__model__", "model", "inference.pdmodel"] {
            if path.join(name).is_file() {
                found = Some(path.join(name));
                break;
            }
        }
        if found.is_none() {
            let mut pdmodels = Vec::new();
            let mut json = None;
            for e in std::fs::read_dir(path).map_err(io(path))?.flatten() {
                let p = e.path();
                match p.extension().and_then(|e| e.to_str()) {
                    Some("pdmodel") => pdmodels.push(p),
                    Some("json") => json = Some(p),
                    _ => {}
                }
            }
            pdmodels.sort();
            match (pdmodels.len(), json) {
                (1, _) => found = pdmodels.pop(),
                (0, Some(j)) => {
                    return Err(Error::PirProgram {
                        path: j.display().to_string(),
                    })
                }
                (0, None) => {
                    return Err(Error::NotFound(format!(
                        "{} holds no __model__, model or *.pdmodel file",
                        path.display()
                    )))
                }
                (n, _) => {
                    return Err(Error::NotFound(format!(
                        "{} holds {n} *.pdmodel files; name the one to load",
                        path.display()
                    )))
                }
            }
        }
        found.unwrap_or_default()
    } else {
        if is_pir(path) {
            return Err(Error::PirProgram {
                path: path.display().to_string(),
            });
        }
        path.to_path_buf()
    };
    if !program.is_file() {
        return Err(Error::NotFound(format!(
            "{} is not a file",
            program.display()
        )));
    }
    let dir = match program.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let params = match params {
        Some(p) if p.is_dir() => ParamsSource::Separate(p.to_path_buf()),
        Some(p) => ParamsSource::Combined(p.to_path_buf()),
        None => {
            let sibling = program.with_extension("pdiparams");
            if program.extension().is_some_and(|e| e == "pdmodel") && sibling.is_file() {
                ParamsSource::Combined(sibling)
            } else if let Some(p) = ["params", "__params__"]
                .iter()
                .map(|n| dir.join(n))
                .find(|p| p.is_file())
            {
                ParamsSource::Combined(p)
            } else {
                ParamsSource::Separate(dir)
            }
        }
    };
    Ok(ModelFiles { program, params })
}

/// Decodes a `ProgramDesc`.
pub fn decode_program(bytes: &[u8]) -> Result<ProgramDesc> {
    if bytes.is_empty() {
        return Err(Error::InvalidProgram(
            "the program is empty (0 bytes)".into(),
        ));
    }
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        return Err(Error::PirProgram {
            path: "the program".into(),
        });
    }
    let p = ProgramDesc::decode(bytes).map_err(|e| {
        Error::InvalidProgram(format!(
            "not a ProgramDesc ({} bytes): protobuf decoding failed: {e}",
            bytes.len()
        ))
    })?;
    if p.blocks.is_empty() {
        return Err(Error::InvalidProgram("the program has no blocks".into()));
    }
    Ok(p)
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    let len = std::fs::metadata(path).map_err(io(path))?.len();
    if len > MAX_PROGRAM_BYTES {
        return Err(Error::InvalidProgram(format!(
            "{}: {len} bytes is more than a protobuf message can hold",
            path.display()
        )));
    }
    std::fs::read(path).map_err(io(path))
}

/// Reads and decodes a program file.
pub fn load_program(path: &Path) -> Result<ProgramDesc> {
    if is_pir(path) {
        return Err(Error::PirProgram {
            path: path.display().to_string(),
        });
    }
    let bytes = read_file(path)?;
    decode_program(&bytes).map_err(|e| match e {
        Error::PirProgram { .. } => Error::PirProgram {
            path: path.display().to_string(),
        },
        Error::InvalidProgram(m) => Error::InvalidProgram(format!("{}: {m}", path.display())),
        e => e,
    })
}

/// Loads a model folder, or a program file with an optional params file (see [`find_model`]).
pub fn load(path: &Path, params: Option<&Path>) -> Result<PaddleModel> {
    let files = find_model(path, params)?;
    let program = load_program(&files.program)?;
    let vars = persistable_vars(&program);
    let tensors = match &files.params {
        ParamsSource::Combined(p) => {
            let bytes = std::fs::read(p).map_err(io(p))?;
            read_combined(&bytes, &vars)?
        }
        ParamsSource::Separate(dir) => read_separate(dir, &vars)?,
    };
    let mut m = convert_program(&program, tensors)?;
    m.files = Some(files);
    Ok(m)
}

/// The program's saved variables: persistable dense tensors of block 0 other than feed/fetch,
/// sorted by name (the order of a combined params file).
pub fn persistable_vars(p: &ProgramDesc) -> Vec<&VarDesc> {
    let mut v: Vec<&VarDesc> = p
        .blocks
        .first()
        .map(|b| {
            b.vars
                .iter()
                .filter(|v| {
                    v.persistable
                        && v.name != "feed"
                        && v.name != "fetch"
                        && v.r#type
                            .as_ref()
                            .is_some_and(|t| t.r#type == var_type::LOD_TENSOR)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v.dedup_by(|a, b| a.name == b.name);
    v
}

/// Declared element type and dims of a dense-tensor variable.
fn tensor_desc(v: &VarDesc) -> Option<(i32, &[i64])> {
    let t = v.r#type.as_ref()?.lod_tensor.as_ref()?.tensor.as_ref()?;
    Some((t.data_type, &t.dims))
}

/// Reads a combined params file: every variable of `vars`, in order, and nothing more.
pub fn read_combined(bytes: &[u8], vars: &[&VarDesc]) -> Result<HashMap<String, Tensor>> {
    let mut r = Reader::new(bytes);
    let mut out = HashMap::with_capacity(vars.len());
    for v in vars {
        let t = r.tensor(&v.name, tensor_desc(v))?;
        out.insert(v.name.clone(), t);
    }
    if r.remaining() > 0 {
        return Err(Error::TrailingData {
            last: vars.last().map(|v| v.name.clone()).unwrap_or_default(),
            extra: r.remaining(),
        });
    }
    Ok(out)
}

/// Reads one file per variable from `dir`; each must hold exactly one tensor. A variable's
/// name is its file's name: names that are not plain file names, and files that resolve
/// (through a symbolic link) to outside `dir`, are refused.
pub fn read_separate(dir: &Path, vars: &[&VarDesc]) -> Result<HashMap<String, Tensor>> {
    let canon_dir = dir.canonicalize().map_err(io(dir))?;
    read_separate_with(vars, |name| {
        let path = dir.join(name);
        if !path.is_file() {
            return Err(Error::MissingVariable {
                var: name.to_string(),
                path: path.display().to_string(),
            });
        }
        let canon = path.canonicalize().map_err(io(&path))?;
        if !canon.starts_with(&canon_dir) {
            return Err(Error::Mismatch {
                var: name.to_string(),
                message: format!(
                    "the parameter file {} resolves to {}, outside the model's folder",
                    path.display(),
                    canon.display()
                ),
            });
        }
        std::fs::read(&canon).map_err(io(&path))
    })
}

/// [`read_separate`] over any source of per-variable bytes: `fetch` returns a variable's
/// file contents by name (names that could leave a folder are refused before it is asked).
pub fn read_separate_with(
    vars: &[&VarDesc],
    mut fetch: impl FnMut(&str) -> Result<Vec<u8>>,
) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::with_capacity(vars.len());
    for v in vars {
        // A variable name is a file name here: refuse anything that could leave the folder.
        if v.name.is_empty()
            || v.name.contains(['/', '\\', '\0'])
            || v.name == ".."
            || v.name == "."
        {
            return Err(Error::Mismatch {
                var: v.name.clone(),
                message: "the name cannot be a parameter file name".into(),
            });
        }
        let bytes = fetch(&v.name)?;
        let mut r = Reader::new(&bytes);
        let t = r.tensor(&v.name, tensor_desc(v))?;
        if r.remaining() > 0 {
            return Err(Error::TrailingData {
                last: v.name.clone(),
                extra: r.remaining(),
            });
        }
        out.insert(v.name.clone(), t);
    }
    Ok(out)
}

/// The declared type of a dense-tensor variable; `-1` dims become anonymous symbolic dims.
pub fn declared_type(v: &VarDesc) -> Result<DeclaredType> {
    let (t, dims) = tensor_desc(v).ok_or_else(|| {
        Error::InvalidProgram(format!("variable '{}' is not a dense tensor", v.name))
    })?;
    let dtype = dtype_of(t).ok_or_else(|| {
        Error::InvalidProgram(format!(
            "variable '{}' has the unsupported element type {}",
            v.name,
            var_type::name(t)
        ))
    })?;
    Ok(DeclaredType {
        dtype,
        shape: Some(
            dims.iter()
                .map(|&d| {
                    if d >= 0 {
                        Dim::Fixed(d as usize)
                    } else {
                        Dim::Symbolic(String::new())
                    }
                })
                .collect(),
        ),
    })
}

/// Graph under construction, shared with the mapping functions.
pub(crate) struct Builder<'p> {
    pub graph: Graph,
    /// Current value of each Paddle variable (rebound when an op writes a variable again).
    pub names: HashMap<String, ValueId>,
    /// Value names in use, so that renamed outputs stay unique.
    pub used: HashSet<String>,
    pub vars: HashMap<&'p str, &'p VarDesc>,
    pub unsupported: Vec<UnsupportedOp>,
}

impl<'p> Builder<'p> {
    /// Binds variable `var` to `v`. A value made by the current op (`fresh`) takes the
    /// variable's name when it is free.
    pub fn bind(&mut self, var: &str, v: ValueId, fresh: bool) {
        if fresh && !self.used.contains(var) {
            self.graph.value_mut(v).name = var.to_string();
            self.used.insert(var.to_string());
        }
        self.names.insert(var.to_string(), v);
    }

    pub fn fresh_value(&mut self, name: String) -> ValueId {
        self.used.insert(name.clone());
        self.graph.add_value(name)
    }
}

fn col(op: &OpDesc) -> Result<i64> {
    let a = op.attrs.iter().find(|a| a.name == "col").ok_or_else(|| {
        Error::InvalidProgram(format!("a {} op has no 'col' attribute", op.r#type))
    })?;
    crate::attr::AttrValue::decode(a)
        .ok()
        .and_then(|v| v.as_i64())
        .ok_or_else(|| Error::InvalidProgram(format!("{} op: 'col' is not an integer", op.r#type)))
}

fn slot<'o>(vars: &'o [crate::proto::OpVar], name: &str) -> Option<&'o str> {
    vars.iter()
        .find(|v| v.parameter == name)
        .and_then(|v| v.arguments.first())
        .map(|s| s.as_str())
}

/// Builds the graph of a decoded program with its parameters (by variable name).
pub fn convert_program(
    program: &ProgramDesc,
    mut params: HashMap<String, Tensor>,
) -> Result<PaddleModel> {
    let block = program
        .blocks
        .first()
        .ok_or_else(|| Error::InvalidProgram("the program has no blocks".into()))?;
    let mut b = Builder {
        graph: Graph::new(),
        names: HashMap::new(),
        used: HashSet::new(),
        vars: block.vars.iter().map(|v| (v.name.as_str(), v)).collect(),
        unsupported: Vec::new(),
    };
    for v in persistable_vars(program) {
        let t = params
            .remove(&v.name)
            .ok_or_else(|| Error::MissingVariable {
                var: v.name.clone(),
                path: "(not in the parameters given)".into(),
            })?;
        let id = b.graph.add_constant(v.name.clone(), t);
        b.used.insert(v.name.clone());
        b.names.insert(v.name.clone(), id);
    }

    let mut feeds: Vec<(i64, ValueId)> = Vec::new();
    let mut fetches: Vec<(i64, String)> = Vec::new();
    for (index, op) in block.ops.iter().enumerate() {
        match op.r#type.as_str() {
            "feed" => {
                let var = slot(&op.outputs, "Out").ok_or_else(|| {
                    Error::InvalidProgram(format!("feed op {index} has no output"))
                })?;
                let desc = b.vars.get(var).ok_or_else(|| {
                    Error::InvalidProgram(format!("feed target '{var}' is not declared"))
                })?;
                let declared = declared_type(desc)?;
                if b.used.contains(var) {
                    return Err(Error::InvalidProgram(format!("'{var}' is fed twice")));
                }
                let id = b.fresh_value(var.to_string());
                b.graph.value_mut(id).declared = Some(declared);
                b.names.insert(var.to_string(), id);
                feeds.push((col(op)?, id));
            }
            "fetch" => {
                let var = slot(&op.inputs, "X").ok_or_else(|| {
                    Error::InvalidProgram(format!("fetch op {index} has no input"))
                })?;
                fetches.push((col(op)?, var.to_string()));
            }
            t => {
                let node = format!("{t}_{index}");
                let first_node = b.graph.nodes.len();
                let result = match map::lookup(t) {
                    None => Err(MapError::Unsupported(String::new())),
                    Some(f) => {
                        let mut ctx = Ctx::new(&mut b, op, node.clone(), first_node);
                        f(&mut ctx)
                    }
                };
                match result {
                    Ok(()) => {}
                    Err(MapError::Unsupported(reason)) => {
                        b.unsupported.push(UnsupportedOp {
                            node: node.clone(),
                            op: t.to_string(),
                            reason,
                        });
                        // Placeholders keep later ops mappable, so every unsupported op is
                        // reported at once.
                        for o in &op.outputs {
                            for a in &o.arguments {
                                let id = b.graph.add_value(format!("{node}:{a}"));
                                b.names.insert(a.clone(), id);
                            }
                        }
                    }
                    Err(MapError::Invalid(msg)) => {
                        return Err(Error::InvalidProgram(format!("op '{node}' ({t}): {msg}")))
                    }
                }
            }
        }
    }
    if !b.unsupported.is_empty() {
        return Err(Error::UnsupportedOps(b.unsupported));
    }
    if fetches.is_empty() {
        return Err(Error::InvalidProgram("the program has no fetch ops".into()));
    }
    feeds.sort_by_key(|f| f.0);
    fetches.sort_by_key(|f| f.0);
    b.graph.inputs = feeds.into_iter().map(|f| f.1).collect();
    for (_, var) in fetches {
        let mut id = *b.names.get(&var).ok_or_else(|| {
            Error::InvalidProgram(format!("fetch target '{var}' is never written"))
        })?;
        // Outputs carry the fetched variable's name, even when an op passed a value through.
        if b.graph.value(id).name != var || b.graph.inputs.contains(&id) {
            let name = if b.used.contains(&var) {
                format!("{var}.fetch")
            } else {
                var.clone()
            };
            let out = b.fresh_value(name);
            b.graph.add_node(
                format!("fetch_{var}"),
                Arc::new(Identity),
                vec![Some(id)],
                vec![out],
            )?;
            id = out;
        }
        if let Some(desc) = b.vars.get(var.as_str()) {
            b.graph.value_mut(id).declared = declared_type(desc).ok();
        }
        b.graph.outputs.push(id);
    }
    b.graph.sort()?;
    Ok(PaddleModel {
        graph: b.graph,
        version: program.version.as_ref().map_or(0, |v| v.version),
        files: None,
    })
}
