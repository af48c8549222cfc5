//! The graph IR: op nodes and value nodes in arenas indexed by ids.
//!
//! Each value is produced by exactly one node (SSA), or is a graph input, or a constant.
//! `nodes` is kept in topological order; passes that rewrite the graph restore it with
//! [`Graph::sort`].

use crate::op::InferInput;
use crate::ops::device::subgraph::Subgraph;
use crate::{DType, Error, Op, Result, Tensor, TensorInfo};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub usize);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// One dimension of a declared (model-level) shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Dim {
    Fixed(usize),
    Symbolic(String),
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Symbolic(s) if s.is_empty() => f.write_str("?"),
            Dim::Symbolic(s) => f.write_str(s),
        }
    }
}

/// A type as a model declares it: dtype and a shape that may have symbolic dims.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeclaredType {
    pub dtype: DType,
    /// `None` when the rank is unknown.
    pub shape: Option<Vec<Dim>>,
}

impl std::fmt::Display for DeclaredType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.dtype)?;
        match &self.shape {
            None => f.write_str("[*]"),
            Some(dims) => {
                let d: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
                write!(f, "[{}]", d.join(","))
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct Value {
    pub name: String,
    pub producer: Option<NodeId>,
    /// Weights and folded constants.
    pub constant: Option<Tensor>,
    /// Concrete dtype and shape, known after shape inference.
    pub info: Option<TensorInfo>,
    /// What the model file declared (graph inputs/outputs, value_info); advisory only.
    pub declared: Option<DeclaredType>,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub op: Arc<dyn Op>,
    /// Input slots in prototype order; `None` for an absent optional input.
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<ValueId>,
}

#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub values: Vec<Value>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.0]
    }

    pub fn value_mut(&mut self, id: ValueId) -> &mut Value {
        &mut self.values[id.0]
    }

    /// Adds a value with no producer yet.
    pub fn add_value(&mut self, name: impl Into<String>) -> ValueId {
        self.values.push(Value {
            name: name.into(),
            producer: None,
            constant: None,
            info: None,
            declared: None,
        });
        ValueId(self.values.len() - 1)
    }

    /// Adds a constant value.
    pub fn add_constant(&mut self, name: impl Into<String>, t: Tensor) -> ValueId {
        let id = self.add_value(name);
        let v = self.value_mut(id);
        v.info = Some(TensorInfo::of(&t));
        v.constant = Some(t);
        id
    }

    /// Adds a node producing `outputs` (which must not have producers yet).
    pub fn add_node(
        &mut self,
        name: impl Into<String>,
        op: Arc<dyn Op>,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<ValueId>,
    ) -> Result<NodeId> {
        let name = name.into();
        let id = NodeId(self.nodes.len());
        for &o in &outputs {
            let v = &mut self.values[o.0];
            if v.producer.is_some() || v.constant.is_some() || self.inputs.contains(&o) {
                return Err(Error::InvalidModel(format!(
                    "value '{}' is produced twice (again by node '{}')",
                    v.name, name
                )));
            }
            v.producer = Some(id);
        }
        self.nodes.push(Node {
            name,
            op,
            inputs,
            outputs,
        });
        Ok(id)
    }

    /// Adds a node with fresh output values named `<node>:<i>`, returning them.
    pub fn add_op(
        &mut self,
        name: impl Into<String>,
        op: Arc<dyn Op>,
        inputs: Vec<Option<ValueId>>,
        n_outputs: usize,
    ) -> Result<Vec<ValueId>> {
        let name = name.into();
        let outs: Vec<ValueId> = (0..n_outputs)
            .map(|i| self.add_value(format!("{name}:{i}")))
            .collect();
        self.add_node(name, op, inputs, outs.clone())?;
        Ok(outs)
    }

    /// What a node's inputs are at prerun: dtype and shape (once inferred) and the value of
    /// constants. An input whose type is not known yet is `None`.
    pub fn infer_inputs(&self, node: &Node) -> Vec<Option<InferInput<'_>>> {
        node.inputs
            .iter()
            .map(|i| {
                i.and_then(|v| {
                    let val = self.value(v);
                    val.info.as_ref().map(|info| InferInput {
                        dtype: info.dtype,
                        shape: &info.shape,
                        value: val.constant.as_ref(),
                    })
                })
            })
            .collect()
    }

    /// The FLOP estimate of one node (0 when its shapes are not known at prerun).
    pub fn node_flops(&self, n: &Node) -> u64 {
        let ins: Vec<Option<TensorInfo>> = n
            .inputs
            .iter()
            .map(|i| i.and_then(|v| self.value(v).info.clone()))
            .collect();
        let outs: Option<Vec<TensorInfo>> = n
            .outputs
            .iter()
            .map(|o| self.value(*o).info.clone())
            .collect();
        outs.map(|o| n.op.flops(&ins, &o)).unwrap_or(0)
    }

    /// Sum of the nodes' FLOP estimates.
    pub fn flops(&self) -> u64 {
        self.nodes.iter().map(|n| self.node_flops(n)).sum()
    }

    /// Map from value to the nodes that read it.
    pub fn consumers(&self) -> HashMap<ValueId, Vec<NodeId>> {
        let mut m: HashMap<ValueId, Vec<NodeId>> = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for v in n.inputs.iter().flatten() {
                m.entry(*v).or_default().push(NodeId(i));
            }
        }
        m
    }

    /// Reorders `nodes` topologically (stable for an already sorted graph), updates producers,
    /// and reports a cycle or a value that nothing produces.
    pub fn sort(&mut self) -> Result<()> {
        let n = self.nodes.len();
        let mut producer: HashMap<ValueId, usize> = HashMap::new();
        for (i, node) in self.nodes.iter().enumerate() {
            for &o in &node.outputs {
                if producer.insert(o, i).is_some() {
                    return Err(Error::InvalidModel(format!(
                        "value '{}' is produced by more than one node",
                        self.value(o).name
                    )));
                }
            }
        }
        let available = |v: ValueId| -> bool {
            let val = &self.values[v.0];
            val.constant.is_some() || self.inputs.contains(&v)
        };
        // Kahn's algorithm over node dependencies, picking the lowest index first so a sorted
        // graph keeps its order.
        let mut deps = vec![0usize; n];
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, node) in self.nodes.iter().enumerate() {
            let mut seen = HashSet::new();
            for &v in node.inputs.iter().flatten() {
                if let Some(&p) = producer.get(&v) {
                    if seen.insert(p) {
                        deps[i] += 1;
                        users[p].push(i);
                    }
                } else if !available(v) {
                    return Err(Error::InvalidModel(format!(
                        "node '{}' reads '{}', which no node produces and is neither a graph input nor a constant",
                        node.name,
                        self.value(v).name
                    )));
                }
            }
        }
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..n)
            .filter(|&i| deps[i] == 0)
            .map(std::cmp::Reverse)
            .collect();
        let mut order = Vec::with_capacity(n);
        while let Some(std::cmp::Reverse(i)) = ready.pop() {
            order.push(i);
            for &u in &users[i] {
                deps[u] -= 1;
                if deps[u] == 0 {
                    ready.push(std::cmp::Reverse(u));
                }
            }
        }
        if order.len() != n {
            let stuck: Vec<&str> = (0..n)
                .filter(|&i| deps[i] > 0)
                .map(|i| self.nodes[i].name.as_str())
                .take(8)
                .collect();
            return Err(Error::InvalidModel(format!(
                "the graph has a cycle through nodes {}",
                stuck.join(", ")
            )));
        }
        let mut old: Vec<Option<Node>> = std::mem::take(&mut self.nodes)
            .into_iter()
            .map(Some)
            .collect();
        self.nodes = order
            .into_iter()
            .map(|i| old[i].take().expect("each index once"))
            .collect();
        for v in &mut self.values {
            v.producer = None;
        }
        for (i, node) in self.nodes.iter().enumerate() {
            for &o in &node.outputs {
                self.values[o.0].producer = Some(NodeId(i));
            }
        }
        for &o in &self.outputs {
            let v = &self.values[o.0];
            if v.producer.is_none() && v.constant.is_none() && !self.inputs.contains(&o) {
                return Err(Error::InvalidModel(format!(
                    "graph output '{}' is not produced by any node",
                    v.name
                )));
            }
        }
        Ok(())
    }

    /// Removes nodes that no graph output depends on.
    pub fn remove_dead_nodes(&mut self) -> usize {
        let mut live: HashSet<ValueId> = self.outputs.iter().copied().collect();
        let mut keep = vec![false; self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate().rev() {
            if node.outputs.iter().any(|o| live.contains(o)) {
                keep[i] = true;
                live.extend(node.inputs.iter().flatten().copied());
            }
        }
        let before = self.nodes.len();
        let mut i = 0;
        self.nodes.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        for v in &mut self.values {
            v.producer = None;
        }
        for (i, node) in self.nodes.iter().enumerate() {
            for &o in &node.outputs {
                self.values[o.0].producer = Some(NodeId(i));
            }
        }
        before - self.nodes.len()
    }

    fn value_label(&self, id: ValueId) -> String {
        let v = self.value(id);
        let ty = match (&v.info, &v.declared) {
            (Some(i), _) => format!("{}[{}]", i.dtype, join(&i.shape)),
            (None, Some(d)) => d.to_string(),
            (None, None) => "?".to_string(),
        };
        format!("{}: {}", v.name, ty)
    }

    /// A readable text listing: inputs, one line per node, outputs.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for &i in &self.inputs {
            let _ = writeln!(s, "input  {}", self.value_label(i));
        }
        for node in &self.nodes {
            let ins: Vec<String> = node
                .inputs
                .iter()
                .map(|i| match i {
                    Some(v) => {
                        let val = self.value(*v);
                        if val.constant.is_some() && val.producer.is_none() {
                            format!("{} (const {})", val.name, shape_of(val))
                        } else {
                            val.name.clone()
                        }
                    }
                    None => "_".to_string(),
                })
                .collect();
            let outs: Vec<String> = node.outputs.iter().map(|o| self.value_label(*o)).collect();
            let _ = writeln!(
                s,
                "node   {} = {}({}) {:?} -> {}",
                node.name,
                node.op.name(),
                ins.join(", "),
                node.op,
                outs.join(", ")
            );
        }
        for &o in &self.outputs {
            let _ = writeln!(s, "output {}", self.value_label(o));
        }
        s
    }

    /// Graphviz DOT: ops as boxes, values as ellipses. Constants are drawn small and grey. A
    /// [`Subgraph`] node is drawn as a cluster labelled with its name and device, holding its
    /// inner graph, whose inputs and outputs are the node's (they correspond by position).
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph ferrolite {\n  rankdir=TB;\n  node [fontsize=10];\n");
        self.write_dot(&mut s, "", &HashSet::new());
        s.push_str("}\n");
        s
    }

    /// Writes the nodes and values with DOT ids prefixed by `prefix`, leaving out the values in
    /// `hidden` and their edges.
    fn write_dot(&self, s: &mut String, prefix: &str, hidden: &HashSet<ValueId>) {
        let mut drawn: HashSet<ValueId> = hidden.clone();
        let mut value_node = |s: &mut String, id: ValueId| {
            if drawn.insert(id) {
                let v = self.value(id);
                let style = if v.constant.is_some() && v.producer.is_none() {
                    ", style=filled, fillcolor=\"#eeeeee\", fontsize=8"
                } else {
                    ""
                };
                let _ = writeln!(
                    s,
                    "  {prefix}v{} [shape=ellipse, label=\"{}\"{}];",
                    id.0,
                    escape(&self.value_label(id)),
                    style
                );
            }
        };
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(sub) = node.op.as_any().downcast_ref::<Subgraph>() {
                let inner = format!("{prefix}s{i}_");
                let _ = writeln!(
                    s,
                    "  subgraph cluster_{inner} {{\n  label=\"{} ({})\"; style=rounded;",
                    escape(&node.name),
                    escape(&sub.device)
                );
                let g = &sub.graph;
                let ends: HashSet<ValueId> = g.inputs.iter().chain(&g.outputs).copied().collect();
                g.write_dot(s, &inner, &ends);
                s.push_str("  }\n");
                let consumers = g.consumers();
                for (v, inner_v) in node.inputs.iter().zip(&g.inputs) {
                    let Some(v) = *v else { continue };
                    value_node(s, v);
                    for c in consumers.get(inner_v).into_iter().flatten() {
                        let _ = writeln!(s, "  {prefix}v{} -> {inner}n{};", v.0, c.0);
                    }
                }
                for (&o, &inner_o) in node.outputs.iter().zip(&g.outputs) {
                    value_node(s, o);
                    if let Some(p) = g.value(inner_o).producer {
                        let _ = writeln!(s, "  {inner}n{} -> {prefix}v{};", p.0, o.0);
                    }
                }
                continue;
            }
            let _ = writeln!(
                s,
                "  {prefix}n{} [shape=box, style=filled, fillcolor=\"#cfe2ff\", label=\"{}\\n{}\"];",
                i,
                escape(node.op.name()),
                escape(&node.name)
            );
            for &v in node.inputs.iter().flatten().filter(|v| !hidden.contains(v)) {
                value_node(s, v);
                let _ = writeln!(s, "  {prefix}v{} -> {prefix}n{};", v.0, i);
            }
            for &o in node.outputs.iter().filter(|o| !hidden.contains(o)) {
                value_node(s, o);
                let _ = writeln!(s, "  {prefix}n{} -> {prefix}v{};", i, o.0);
            }
        }
        for &i in self.inputs.iter().chain(&self.outputs) {
            value_node(s, i);
        }
    }
}

fn shape_of(v: &Value) -> String {
    match &v.info {
        Some(i) => format!("{}[{}]", i.dtype, join(&i.shape)),
        None => "?".into(),
    }
}

fn join(shape: &[usize]) -> String {
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
