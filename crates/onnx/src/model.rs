//! ModelProto → [`Graph`]: decoding, constants, graph inputs/outputs and node mapping.
//!
//! Every problem is reported as an error naming the tensor, value or node it is about; a model
//! from a hostile file can make loading fail but never panic. All the ops the engine cannot map
//! are collected and reported together in one [`Error::UnsupportedOps`].

use crate::map::{self, MapError, NodeCtx};
use crate::proto::{
    attribute_type, tensor_shape_proto::dimension, type_proto, value_kind, AttributeProto,
    GraphProto, ModelProto, NodeProto, OptionalProto, SequenceProto, TensorProto, TypeProto,
    ValueInfoProto,
};
use crate::tensor::{decode, dtype_of, encode};
use ferrolite_core::ops::control::{
    if_op::If, loop_op::Loop, scan::Scan, sequence_map::SequenceMap, Subgraph,
};
use ferrolite_core::{
    DType, DeclaredType, Dim, Error, Graph, Result, Tensor, UnsupportedOp, ValueId,
};
use prost::Message;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// Protobuf cannot encode a message of 2 GiB or more; bigger files are not ONNX models (weights
/// that large live in external data files).
const MAX_MODEL_BYTES: u64 = 2 << 30;

/// A loaded model: the graph of canonical ops and the model's metadata.
#[derive(Debug, Clone)]
pub struct OnnxModel {
    pub graph: Graph,
    pub ir_version: i64,
    /// Opset imports as (domain, version); the default domain is written `""`.
    pub opsets: Vec<(String, i64)>,
    /// `producer_name` and `producer_version`, space-separated.
    pub producer: String,
    /// The model's `metadata_props`, in file order (for example a recognizer's character
    /// dictionary).
    pub metadata: Vec<(String, String)>,
}

/// A model loaded as far as possible, for diagnostics: see [`load_model_partial`].
#[derive(Debug, Clone)]
pub struct PartialModel {
    /// Every constant, graph input and output, and every mapped node. Unsupported nodes are
    /// left out, so the graph is neither sorted nor complete when `unsupported` is not empty.
    pub model: OnnxModel,
    pub unsupported: Vec<UnsupportedOp>,
}

/// Decodes the protobuf of an ONNX model without interpreting it.
pub fn decode_model_proto(bytes: &[u8]) -> Result<ModelProto> {
    if bytes.is_empty() {
        return Err(Error::InvalidModel("the model is empty (0 bytes)".into()));
    }
    // prost checks every length against the remaining input before allocating and stops at a
    // nesting depth of 100, so truncated, random or deeply nested input is an error.
    ModelProto::decode(bytes).map_err(|e| {
        Error::InvalidModel(format!(
            "not a valid ONNX model ({} bytes): protobuf decoding failed: {e}",
            bytes.len()
        ))
    })
}

/// Loads an ONNX model from its bytes. `model_dir` is the folder external tensor data is
/// relative to; without it, a model with external data is an error.
pub fn load_model(bytes: &[u8], model_dir: Option<&Path>) -> Result<OnnxModel> {
    finish(load_model_partial(bytes, model_dir)?)
}

/// Loads an ONNX model file; external data is looked up next to it.
pub fn load_model_file(path: &Path) -> Result<OnnxModel> {
    let bytes = read_file(path)?;
    let proto = decode_model_proto(&bytes)?;
    // The decoded proto holds its own copy of the weights.
    drop(bytes);
    finish(convert_model(proto, Some(model_dir_of(path)))?)
}

fn finish(p: PartialModel) -> Result<OnnxModel> {
    if !p.unsupported.is_empty() {
        return Err(Error::UnsupportedOps(p.unsupported));
    }
    let mut model = p.model;
    model.graph.sort()?;
    Ok(model)
}

/// Like [`load_model`], but unsupported ops are returned with the partial graph instead of
/// failing, so that a tool can report them along with the model's inputs and outputs. Other
/// errors (a malformed model) still fail.
pub fn load_model_partial(bytes: &[u8], model_dir: Option<&Path>) -> Result<PartialModel> {
    let proto = decode_model_proto(bytes)?;
    convert_model(proto, model_dir)
}

fn model_dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    let io = |e| Error::Io {
        path: path.display().to_string(),
        source: e,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_MODEL_BYTES {
        return Err(Error::InvalidModel(format!(
            "{}: {len} bytes is more than a protobuf message can hold (2 GiB)",
            path.display()
        )));
    }
    std::fs::read(path).map_err(io)
}

/// Interprets a decoded model (consumed, so that each initializer's bytes are freed once it
/// is decoded).
pub fn convert_model(mut proto: ModelProto, model_dir: Option<&Path>) -> Result<PartialModel> {
    let opsets: Vec<(String, i64)> = proto
        .opset_import
        .iter()
        .map(|o| {
            let d = if o.domain == "ai.onnx" { "" } else { &o.domain };
            (d.to_string(), o.version)
        })
        .collect();
    // Models without opset imports predate IR version 3, where the only opset was 1.
    let opset = opsets
        .iter()
        .find(|(d, _)| d.is_empty())
        .map(|(_, v)| *v)
        .unwrap_or(1);
    let ms_opset = opsets
        .iter()
        .find(|(d, _)| d == map::MS_DOMAIN)
        .map(|(_, v)| *v)
        .unwrap_or(1);
    let producer = format!("{} {}", proto.producer_name, proto.producer_version)
        .trim()
        .to_string();
    let metadata = std::mem::take(&mut proto.metadata_props)
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect();
    let mut g = proto
        .graph
        .take()
        .ok_or_else(|| Error::InvalidModel("the model has no graph".into()))?;
    let initializers = std::mem::take(&mut g.initializer);
    let functions: HashSet<(&str, &str)> = proto
        .functions
        .iter()
        .map(|f| (f.domain.as_str(), f.name.as_str()))
        .collect();
    let mut b = Builder {
        graph: Graph::new(),
        names: HashMap::new(),
        model_dir,
        opset,
        ms_opset,
        functions,
        unsupported: Vec::new(),
        outer_names: HashSet::new(),
        captured: Vec::new(),
    };
    b.build(&g, initializers)?;
    Ok(PartialModel {
        model: OnnxModel {
            graph: b.graph,
            ir_version: proto.ir_version,
            opsets,
            producer,
            metadata,
        },
        unsupported: b.unsupported,
    })
}

struct Builder<'a> {
    graph: Graph,
    /// Named values. Anonymous node outputs (empty names) are not in here.
    names: HashMap<String, ValueId>,
    model_dir: Option<&'a Path>,
    /// The opset versions of the default domain and of `com.microsoft`.
    opset: i64,
    ms_opset: i64,
    functions: HashSet<(&'a str, &'a str)>,
    unsupported: Vec<UnsupportedOp>,
    /// For a subgraph: the names the graphs around it define, which it may read.
    outer_names: HashSet<String>,
    /// For a subgraph: the outer names it reads, in first-read order, with their values here
    /// (they become its trailing inputs).
    captured: Vec<(String, ValueId)>,
}

fn is_default_domain(d: &str) -> bool {
    d.is_empty() || d == "ai.onnx"
}

fn node_name(n: &NodeProto, index: usize) -> String {
    if n.name.is_empty() {
        format!("{}_{index}", n.op_type)
    } else {
        n.name.clone()
    }
}

impl<'a> Builder<'a> {
    /// Registers a new named value, refusing names already in use.
    fn define(&mut self, name: &str, what: &str) -> Result<ValueId> {
        if name.is_empty() {
            return Err(Error::InvalidModel(format!("{what} has an empty name")));
        }
        if self.names.contains_key(name) {
            return Err(Error::InvalidModel(format!(
                "the name '{name}' is used for two values (again by {what})"
            )));
        }
        let id = self.graph.add_value(name);
        self.names.insert(name.to_string(), id);
        Ok(id)
    }

    /// The value a name refers to: this graph's own, or (in a subgraph) an outer graph's,
    /// which is then captured as an input of this one.
    fn resolve(&mut self, name: &str) -> Option<ValueId> {
        if let Some(&id) = self.names.get(name) {
            return Some(id);
        }
        if !self.outer_names.contains(name) {
            return None;
        }
        let id = self.graph.add_value(name);
        self.names.insert(name.to_string(), id);
        self.captured.push((name.to_string(), id));
        Some(id)
    }

    /// Builds a graph attribute as a closed graph: its formal inputs, then the outer values it
    /// reads (the names returned, to be read here as extra inputs of the node).
    fn subgraph(&mut self, g: &GraphProto, what: &str) -> Result<(Graph, usize, Vec<String>)> {
        let mut outer_names = self.outer_names.clone();
        outer_names.extend(self.names.keys().cloned());
        let mut b = Builder {
            graph: Graph::new(),
            names: HashMap::new(),
            model_dir: self.model_dir,
            opset: self.opset,
            ms_opset: self.ms_opset,
            functions: self.functions.clone(),
            unsupported: Vec::new(),
            outer_names,
            captured: Vec::new(),
        };
        b.build(g, g.initializer.clone())
            .map_err(|e| Error::InvalidModel(format!("{what}: {e}")))?;
        self.unsupported.append(&mut b.unsupported);
        let formal = b.graph.inputs.len();
        let mut names = Vec::with_capacity(b.captured.len());
        for (name, id) in b.captured {
            b.graph.inputs.push(id);
            names.push(name);
        }
        Ok((b.graph, formal, names))
    }

    fn build(&mut self, g: &GraphProto, initializers: Vec<TensorProto>) -> Result<()> {
        if let Some(s) = g.sparse_initializer.first() {
            let name = s
                .values
                .as_ref()
                .map(|v| v.name.as_str())
                .filter(|n| !n.is_empty())
                .unwrap_or("<unnamed>");
            return Err(Error::InvalidModel(format!(
                "sparse initializer '{name}' is not supported (the model has {} sparse initializer(s))",
                g.sparse_initializer.len()
            )));
        }

        // Initializers first: a graph input with an initializer of the same name is a constant
        // (IR version < 4 lists every initializer as a graph input too).
        let initializer_names: HashSet<String> =
            initializers.iter().map(|t| t.name.clone()).collect();
        for t in initializers {
            let tensor = decode(&t, self.model_dir)?;
            let id = self.define(&t.name, &format!("initializer '{}'", t.name))?;
            let v = self.graph.value_mut(id);
            v.info = Some(ferrolite_core::TensorInfo::of(&tensor));
            v.constant = Some(tensor);
        }

        let mut seen_inputs = HashSet::new();
        for vi in &g.input {
            if !seen_inputs.insert(vi.name.as_str()) {
                return Err(Error::InvalidModel(format!(
                    "graph input '{}' is listed twice",
                    vi.name
                )));
            }
            if initializer_names.contains(vi.name.as_str()) {
                continue;
            }
            let declared = io_type(vi, "graph input")?;
            let id = self.define(&vi.name, &format!("graph input '{}'", vi.name))?;
            self.graph.value_mut(id).declared = declared;
            self.graph.inputs.push(id);
        }

        // Name every node output before resolving inputs: nodes may be listed out of order.
        let mut node_outputs: Vec<Vec<ValueId>> = Vec::with_capacity(g.node.len());
        for (i, n) in g.node.iter().enumerate() {
            let name = node_name(n, i);
            let mut outs = Vec::with_capacity(n.output.len());
            let listed = trimmed_len(&n.output);
            for (k, o) in n.output[..listed].iter().enumerate() {
                let id = if o.is_empty() {
                    self.graph.add_value(format!("{name}:{k}"))
                } else {
                    self.define(o, &format!("output {k} of node '{name}'"))?
                };
                outs.push(id);
            }
            node_outputs.push(outs);
        }

        for (i, (n, outs)) in g.node.iter().zip(node_outputs).enumerate() {
            self.add_node(n, i, outs)?;
        }

        for vi in &g.output {
            let id = self.resolve(&vi.name).ok_or_else(|| {
                Error::InvalidModel(format!(
                    "graph output '{}' is not a graph input, an initializer, or a node's output",
                    vi.name
                ))
            })?;
            let declared = io_type(vi, "graph output")?;
            let v = self.graph.value_mut(id);
            if declared.is_some() {
                v.declared = declared;
            }
            self.graph.outputs.push(id);
        }

        if g.output.is_empty() {
            return Err(Error::InvalidModel("the graph has no outputs".into()));
        }

        // value_info is advisory: types it cannot express, or names nothing uses, are ignored.
        for vi in &g.value_info {
            if let Some(&id) = self.names.get(&vi.name) {
                if let Ok(Some(d)) = declared_type(vi.r#type.as_ref()) {
                    let v = self.graph.value_mut(id);
                    if v.declared.is_none() {
                        v.declared = Some(d);
                    }
                }
            }
        }
        Ok(())
    }

    fn add_node(&mut self, n: &NodeProto, index: usize, outs: Vec<ValueId>) -> Result<()> {
        let name = node_name(n, index);
        let unsupported = |reason: String| UnsupportedOp {
            node: name.clone(),
            op: if is_default_domain(&n.domain) {
                n.op_type.clone()
            } else {
                format!("{}:{}", n.domain, n.op_type)
            },
            reason,
        };

        let mut inputs = Vec::with_capacity(n.input.len());
        for (k, input) in n.input[..trimmed_len(&n.input)].iter().enumerate() {
            if input.is_empty() {
                inputs.push(None);
                continue;
            }
            let id = self.resolve(input).ok_or_else(|| {
                Error::InvalidModel(format!(
                    "node '{name}' ({}) reads '{input}' as input {k}, but no graph input, initializer or node output has that name",
                    n.op_type
                ))
            })?;
            inputs.push(Some(id));
        }

        let default_domain = is_default_domain(&n.domain);
        if default_domain && n.op_type == "Constant" {
            if outs.len() != 1 || !inputs.is_empty() {
                return Err(Error::InvalidModel(format!(
                    "Constant node '{name}' must have no inputs and one output, has {} and {}",
                    inputs.len(),
                    outs.len()
                )));
            }
            let t = constant_value(n, &name, self.model_dir)?;
            let v = self.graph.value_mut(outs[0]);
            v.info = Some(ferrolite_core::TensorInfo::of(&t));
            v.constant = Some(t);
            return Ok(());
        }

        if default_domain && map::CONTROL_FLOW.contains(&n.op_type.as_str()) {
            let (op, captured) = self.control_flow(n, &name)?;
            match n.op_type.as_str() {
                // M and cond keep their slots when absent.
                "Loop" => inputs.resize(inputs.len().max(2), None),
                // From opset 9 on, Scan has no sequence lengths; the op keeps the slot.
                "Scan" if self.opset >= 9 => inputs.insert(0, None),
                _ => {}
            }
            for c in captured {
                let id = self.resolve(&c).ok_or_else(|| {
                    Error::InvalidModel(format!("node '{name}': '{c}' is not defined"))
                })?;
                inputs.push(Some(id));
            }
            self.graph.add_node(name, op, inputs, outs)?;
            return Ok(());
        }

        let Some(f) = map::lookup_in(&n.domain, &n.op_type) else {
            let reason = if default_domain {
                String::new()
            } else if self
                .functions
                .contains(&(n.domain.as_str(), n.op_type.as_str()))
            {
                format!(
                    "model-local function of domain '{}' (functions are not inlined)",
                    n.domain
                )
            } else if n.domain == map::MS_DOMAIN {
                format!("not among the supported ops of domain '{}'", n.domain)
            } else {
                format!("domain '{}' is not supported", n.domain)
            };
            self.unsupported.push(unsupported(reason));
            return Ok(());
        };
        let ctx = NodeCtx {
            node: n,
            opset: if default_domain {
                self.opset
            } else {
                self.ms_opset
            },
        };
        match f(&ctx) {
            Ok(op) => {
                self.graph.add_node(name, op, inputs, outs)?;
                Ok(())
            }
            Err(MapError::Unsupported(reason)) => {
                self.unsupported.push(unsupported(reason));
                Ok(())
            }
            Err(MapError::Invalid(msg)) => Err(Error::InvalidModel(format!(
                "node '{name}' ({}): {msg}",
                n.op_type
            ))),
        }
    }
}

impl Builder<'_> {
    /// If, Loop or Scan with its subgraphs, and the outer names they read.
    fn control_flow(
        &mut self,
        n: &NodeProto,
        name: &str,
    ) -> Result<(Arc<dyn ferrolite_core::Op>, Vec<String>)> {
        let bad =
            |msg: String| Error::InvalidModel(format!("node '{name}' ({}): {msg}", n.op_type));
        let attr = |key: &str| n.attribute.iter().find(|a| a.name == key);
        let graph = |key: &str| {
            attr(key)
                .and_then(|a| a.g.as_deref())
                .ok_or_else(|| bad(format!("needs the graph attribute '{key}'")))
        };
        let ints = |key: &str| attr(key).map(|a| a.ints.clone()).unwrap_or_default();
        match n.op_type.as_str() {
            "If" => {
                let (then_g, then_formal, then_names) =
                    self.subgraph(graph("then_branch")?, &format!("node '{name}' then_branch"))?;
                let (else_g, else_formal, else_names) =
                    self.subgraph(graph("else_branch")?, &format!("node '{name}' else_branch"))?;
                if then_formal + else_formal != 0 {
                    return Err(bad("the branches must take no inputs".into()));
                }
                if then_g.outputs.len() != else_g.outputs.len() {
                    return Err(bad(format!(
                        "the branches give {} and {} outputs",
                        then_g.outputs.len(),
                        else_g.outputs.len()
                    )));
                }
                let mut all = then_names.clone();
                for c in &else_names {
                    if !all.contains(c) {
                        all.push(c.clone());
                    }
                }
                let op = If {
                    then_branch: Subgraph::new(reorder_captured(then_g, 0, &then_names, &all), 0),
                    else_branch: Subgraph::new(reorder_captured(else_g, 0, &else_names, &all), 0),
                };
                Ok((Arc::new(op), all))
            }
            "Loop" => {
                let (body, formal, names) =
                    self.subgraph(graph("body")?, &format!("node '{name}' body"))?;
                if formal < 2 {
                    return Err(bad(format!(
                        "the body must take the iteration number and the condition, takes {formal} inputs"
                    )));
                }
                Ok((Arc::new(Loop::new(Subgraph::new(body, formal))), names))
            }
            "SequenceMap" => {
                let (body, formal, names) =
                    self.subgraph(graph("body")?, &format!("node '{name}' body"))?;
                let given = trimmed_len(&n.input);
                if formal != given || formal == 0 {
                    return Err(bad(format!(
                        "the body takes {formal} inputs, the node gives {given}"
                    )));
                }
                Ok((
                    Arc::new(SequenceMap {
                        body: Subgraph::new(body, formal),
                    }),
                    names,
                ))
            }
            _ => {
                let (body, formal, names) =
                    self.subgraph(graph("body")?, &format!("node '{name}' body"))?;
                let num_scan_inputs = attr("num_scan_inputs")
                    .map(|a| a.i)
                    .filter(|&m| m >= 1 && m as usize <= formal)
                    .ok_or_else(|| {
                        bad(format!(
                            "needs num_scan_inputs between 1 and the body's {formal} inputs"
                        ))
                    })? as usize;
                let batched = self.opset < 9;
                let op = Scan {
                    body: Subgraph::new(body, formal),
                    num_scan_inputs,
                    input_directions: if batched {
                        ints("directions")
                    } else {
                        ints("scan_input_directions")
                    },
                    input_axes: ints("scan_input_axes"),
                    output_directions: ints("scan_output_directions"),
                    output_axes: ints("scan_output_axes"),
                    batched,
                };
                Ok((Arc::new(op), names))
            }
        }
    }
}

/// A subgraph whose trailing inputs (after `formal`) are the values captured under `names`,
/// rewritten to take `all` captured values in that order (the ones it does not read are
/// unused inputs): both branches of an If take the same inputs.
fn reorder_captured(mut g: Graph, formal: usize, names: &[String], all: &[String]) -> Graph {
    let had: HashMap<&str, ValueId> = names
        .iter()
        .map(String::as_str)
        .zip(g.inputs[formal..].iter().copied())
        .collect();
    let mut inputs = g.inputs[..formal].to_vec();
    for name in all {
        let id = match had.get(name.as_str()) {
            Some(&id) => id,
            None => g.add_value(name.clone()),
        };
        inputs.push(id);
    }
    g.inputs = inputs;
    g
}

/// Length of a name list without its trailing empty names (skipped optional trailing inputs
/// and outputs).
fn trimmed_len(names: &[String]) -> usize {
    names
        .iter()
        .rposition(|s| !s.is_empty())
        .map_or(0, |i| i + 1)
}

/// The value of a Constant node.
fn constant_value(n: &NodeProto, name: &str, model_dir: Option<&Path>) -> Result<Tensor> {
    let bad = |msg: String| Error::InvalidModel(format!("Constant node '{name}': {msg}"));
    let [a]: &[AttributeProto; 1] = n.attribute.as_slice().try_into().map_err(|_| {
        bad(format!(
            "needs exactly one value attribute, has {}",
            n.attribute.len()
        ))
    })?;
    let typed = |ty: i32| a.r#type == ty || a.r#type == attribute_type::UNDEFINED;
    let t = match a.name.as_str() {
        "value" if typed(attribute_type::TENSOR) => {
            let t =
                a.t.as_ref()
                    .ok_or_else(|| bad("attribute 'value' holds no tensor".into()))?;
            decode(t, model_dir).map_err(|e| bad(e.to_string()))?
        }
        "value_float" if typed(attribute_type::FLOAT) => Tensor::scalar(a.f),
        "value_floats" if typed(attribute_type::FLOATS) => {
            Tensor::from_slice(&[a.floats.len()], &a.floats)?
        }
        "value_int" if typed(attribute_type::INT) => Tensor::scalar(a.i),
        "value_ints" if typed(attribute_type::INTS) => {
            Tensor::from_slice(&[a.ints.len()], &a.ints)?
        }
        "value_string" | "value_strings" => {
            return Err(bad(format!(
                "string constants ('{}') are not supported",
                a.name
            )))
        }
        "sparse_value" => return Err(bad("sparse constants are not supported".into())),
        other => {
            return Err(bad(format!(
                "unexpected attribute '{other}' of type {}",
                a.r#type
            )))
        }
    };
    Ok(t)
}

/// The declared type of a graph input or output; types the engine cannot handle are errors.
fn io_type(vi: &ValueInfoProto, what: &str) -> Result<Option<DeclaredType>> {
    declared_type(vi.r#type.as_ref())
        .map_err(|e| Error::InvalidModel(format!("{what} '{}': {e}", vi.name)))
}

/// A TypeProto as a [`DeclaredType`]: `None` when absent, an error message for non-tensor or
/// unsupported element types.
fn declared_type(t: Option<&TypeProto>) -> std::result::Result<Option<DeclaredType>, String> {
    let Some(t) = t else { return Ok(None) };
    let tt = match &t.value {
        None => return Ok(None),
        Some(type_proto::Value::TensorType(tt)) => tt,
        // The element type of a sequence or optional is checked where it is used (the ops
        // that take items out are typed by running them).
        Some(type_proto::Value::SequenceType(_)) => {
            return Ok(Some(DeclaredType {
                dtype: DType::Sequence,
                shape: Some(Vec::new()),
            }))
        }
        Some(type_proto::Value::OptionalType(_)) => {
            return Ok(Some(DeclaredType {
                dtype: DType::Optional,
                shape: Some(Vec::new()),
            }))
        }
        Some(type_proto::Value::MapType(_)) => return Err("map types are not supported".into()),
        Some(type_proto::Value::SparseTensorType(_)) => {
            return Err("sparse tensor types are not supported".into())
        }
    };
    let dtype = dtype_of(tt.elem_type).ok_or_else(|| {
        format!(
            "element type {} ({}) is not supported",
            crate::proto::data_type::name(tt.elem_type),
            tt.elem_type
        )
    })?;
    let shape = tt.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(dimension::Value::DimValue(v)) if *v >= 0 => Dim::Fixed(*v as usize),
                Some(dimension::Value::DimParam(p)) => Dim::Symbolic(p.clone()),
                // Missing, or negative (some exporters write -1 for "unknown").
                _ => Dim::Symbolic(String::new()),
            })
            .collect()
    });
    Ok(Some(DeclaredType { dtype, shape }))
}

/// Reads a serialized TensorProto (an ONNX test-data `.pb` file): its name and value.
pub fn read_tensor_file(path: &Path) -> Result<(String, Tensor)> {
    let bytes = read_file(path)?;
    decode_tensor_bytes(&bytes, Some(model_dir_of(path))).map_err(|e| match e {
        Error::InvalidModel(m) => Error::InvalidModel(format!("{}: {m}", path.display())),
        e => e,
    })
}

/// Decodes a serialized TensorProto: its name and value. `dir` is the folder external data is
/// relative to; without it, external data is an error.
pub fn decode_tensor_bytes(bytes: &[u8], dir: Option<&Path>) -> Result<(String, Tensor)> {
    let t = TensorProto::decode(bytes)
        .map_err(|e| Error::InvalidModel(format!("not a serialized TensorProto: {e}")))?;
    let tensor = decode(&t, dir)?;
    Ok((t.name, tensor))
}

/// Reads an ONNX test-data `.pb` file holding a value of the given kind: a serialized
/// SequenceProto for [`DType::Sequence`], an OptionalProto for [`DType::Optional`], else a
/// TensorProto. Returns its name and value.
pub fn read_value_file(path: &Path, kind: DType) -> Result<(String, Tensor)> {
    let bytes = read_file(path)?;
    let dir = Some(model_dir_of(path));
    let in_file = |e: Error| match e {
        Error::InvalidModel(m) => Error::InvalidModel(format!("{}: {m}", path.display())),
        e => e,
    };
    let not = |what: &str, e: prost::DecodeError| {
        Error::InvalidModel(format!("{}: not a serialized {what}: {e}", path.display()))
    };
    match kind {
        DType::Sequence => {
            let s = SequenceProto::decode(&bytes[..]).map_err(|e| not("SequenceProto", e))?;
            Ok((s.name.clone(), decode_sequence(&s, dir).map_err(in_file)?))
        }
        DType::Optional => {
            let o = OptionalProto::decode(&bytes[..]).map_err(|e| not("OptionalProto", e))?;
            Ok((o.name.clone(), decode_optional(&o, dir).map_err(in_file)?))
        }
        _ => decode_tensor_bytes(&bytes, dir).map_err(in_file),
    }
}

fn decode_sequence(s: &SequenceProto, dir: Option<&Path>) -> Result<Tensor> {
    let items = match s.elem_type {
        value_kind::TENSOR => s
            .tensor_values
            .iter()
            .map(|t| decode(t, dir))
            .collect::<Result<_>>()?,
        value_kind::SEQUENCE => s
            .sequence_values
            .iter()
            .map(|q| decode_sequence(q, dir))
            .collect::<Result<_>>()?,
        value_kind::OPTIONAL => s
            .optional_values
            .iter()
            .map(|o| decode_optional(o, dir))
            .collect::<Result<_>>()?,
        // An empty sequence may leave its kind undefined.
        value_kind::UNDEFINED
            if s.tensor_values.is_empty()
                && s.sequence_values.is_empty()
                && s.optional_values.is_empty() =>
        {
            Vec::new()
        }
        k => {
            return Err(Error::InvalidModel(format!(
                "sequence '{}': element kind {k} is not supported (maps are not)",
                s.name
            )))
        }
    };
    Ok(Tensor::from_sequence(items))
}

fn decode_optional(o: &OptionalProto, dir: Option<&Path>) -> Result<Tensor> {
    let value = match (
        o.elem_type,
        &o.tensor_value,
        &o.sequence_value,
        &o.optional_value,
    ) {
        (value_kind::TENSOR, Some(t), _, _) => Some(decode(t, dir)?),
        (value_kind::SEQUENCE, _, Some(q), _) => Some(decode_sequence(q, dir)?),
        (value_kind::OPTIONAL, _, _, Some(p)) => Some(decode_optional(p, dir)?),
        (
            value_kind::UNDEFINED
            | value_kind::TENSOR
            | value_kind::SEQUENCE
            | value_kind::OPTIONAL,
            ..,
        ) => None,
        (k, ..) => {
            return Err(Error::InvalidModel(format!(
                "optional '{}': element kind {k} is not supported (maps are not)",
                o.name
            )))
        }
    };
    Ok(Tensor::from_optional(value))
}

/// Writes a tensor as a serialized TensorProto (raw_data).
pub fn write_tensor_file(path: &Path, name: &str, t: &Tensor) -> Result<()> {
    std::fs::write(path, encode(name, t).encode_to_vec()).map_err(|e| Error::Io {
        path: path.display().to_string(),
        source: e,
    })
}

/// The op types of a model's nodes in file order, without mapping them (for reports).
pub fn op_types(bytes: &[u8]) -> Result<Vec<String>> {
    Ok(decode_model_proto(bytes)?
        .graph
        .map(|g| g.node.iter().map(|n| n.op_type.clone()).collect())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{data_type, tensor_shape_proto::Dimension, TensorShapeProto};

    #[test]
    fn trimmed_len_drops_trailing_empty_names() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(trimmed_len(&v(&[])), 0);
        assert_eq!(trimmed_len(&v(&["", ""])), 0);
        assert_eq!(trimmed_len(&v(&["a", "", "b", "", ""])), 3);
        assert_eq!(trimmed_len(&v(&["", "b"])), 2);
    }

    #[test]
    fn node_names() {
        let mut n = NodeProto {
            op_type: "Relu".into(),
            ..Default::default()
        };
        assert_eq!(node_name(&n, 4), "Relu_4");
        n.name = "relu1".into();
        assert_eq!(node_name(&n, 4), "relu1");
    }

    fn tensor_type(elem_type: i32, dims: Option<Vec<Option<dimension::Value>>>) -> TypeProto {
        TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type,
                shape: dims.map(|d| TensorShapeProto {
                    dim: d
                        .into_iter()
                        .map(|value| Dimension {
                            denotation: String::new(),
                            value,
                        })
                        .collect(),
                }),
            })),
        }
    }

    #[test]
    fn declared_types() {
        assert_eq!(declared_type(None), Ok(None));
        let t = tensor_type(
            data_type::INT64,
            Some(vec![
                Some(dimension::Value::DimParam("batch".into())),
                Some(dimension::Value::DimValue(7)),
                None,
                Some(dimension::Value::DimValue(-1)),
            ]),
        );
        assert_eq!(
            declared_type(Some(&t)),
            Ok(Some(DeclaredType {
                dtype: ferrolite_core::DType::I64,
                shape: Some(vec![
                    Dim::Symbolic("batch".into()),
                    Dim::Fixed(7),
                    Dim::Symbolic(String::new()),
                    Dim::Symbolic(String::new()),
                ]),
            }))
        );
        // No shape: unknown rank. Rank 0: a scalar.
        let t = tensor_type(data_type::FLOAT, None);
        assert_eq!(declared_type(Some(&t)).unwrap().unwrap().shape, None);
        let t = tensor_type(data_type::FLOAT, Some(vec![]));
        assert_eq!(
            declared_type(Some(&t)).unwrap().unwrap().shape,
            Some(vec![])
        );
        let t = tensor_type(data_type::STRING, None);
        assert_eq!(
            declared_type(Some(&t)).unwrap().unwrap().dtype,
            ferrolite_core::DType::String
        );
        let t = tensor_type(data_type::UNDEFINED, None);
        assert!(declared_type(Some(&t)).unwrap_err().contains("UNDEFINED"));
        let seq = TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::SequenceType(Box::new(
                type_proto::Sequence {
                    elem_type: Some(Box::new(tensor_type(data_type::FLOAT, None))),
                },
            ))),
        };
        assert_eq!(
            declared_type(Some(&seq)),
            Ok(Some(DeclaredType {
                dtype: ferrolite_core::DType::Sequence,
                shape: Some(vec![]),
            }))
        );
        let map = TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::MapType(Box::new(type_proto::Map {
                key_type: data_type::INT64,
                value_type: None,
            }))),
        };
        assert!(declared_type(Some(&map)).unwrap_err().contains("map"));
    }

    #[test]
    fn constant_without_value_is_an_error() {
        let n = NodeProto {
            op_type: "Constant".into(),
            attribute: vec![AttributeProto {
                name: "value_float".into(),
                r#type: attribute_type::INT,
                ..Default::default()
            }],
            ..Default::default()
        };
        let e = constant_value(&n, "c0", None).unwrap_err().to_string();
        assert!(e.contains("'c0'") && e.contains("value_float"), "{e}");
    }
}
