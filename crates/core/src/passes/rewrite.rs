//! Shared machinery of the fusion passes: a pattern matcher proposes a [`Rewrite`] at an anchor
//! node; [`rewrite_all`] applies every non-overlapping proposal of a sweep against the
//! unmodified graph, then sweeps again until nothing matches.
//!
//! The driver re-checks what every rewrite must respect, so matchers stay small: the values of
//! removed nodes are read only inside the match and are not graph outputs, and every node of a
//! match has inferred outputs (dynamic nodes, whose shapes are only known at run time, are left
//! alone).

use crate::ops::elementwise::binary::{Binary, BinaryKind};
use crate::ops::elementwise::unary::{Unary, UnaryKind};
use crate::{Graph, Node, Op, Result, Tensor, TensorInfo, ValueId};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// An input of a rewritten node.
pub enum Arg {
    Value(ValueId),
    Absent,
    /// A new constant, named after the target node with this suffix.
    Const(&'static str, Tensor),
}

/// A proposed rewrite. The target node keeps its output values and gets a new op and inputs
/// (and optionally another name); `remove` are the other nodes of the match. With `rewire`,
/// readers of the first value read the second instead (for rewrites to nothing).
pub struct Rewrite {
    pub target: Option<usize>,
    pub op: Option<Arc<dyn Op>>,
    pub inputs: Vec<Arg>,
    pub name: Option<String>,
    pub remove: Vec<usize>,
    pub rewire: Option<(ValueId, ValueId)>,
}

impl Rewrite {
    /// Replaces node `target` by `op` on `inputs`, removing `remove`.
    pub fn replace(target: usize, op: impl Op, inputs: Vec<Arg>, remove: Vec<usize>) -> Self {
        Rewrite {
            target: Some(target),
            op: Some(Arc::new(op)),
            inputs,
            name: None,
            remove,
            rewire: None,
        }
    }

    fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        self.target
            .iter()
            .copied()
            .chain(self.remove.iter().copied())
    }
}

/// Readers of every value (distinct nodes, in order) and the graph outputs.
pub struct Uses {
    readers: HashMap<ValueId, Vec<usize>>,
    outputs: HashSet<ValueId>,
}

impl Uses {
    pub fn new(g: &Graph) -> Self {
        let mut readers: HashMap<ValueId, Vec<usize>> = HashMap::new();
        for (i, n) in g.nodes.iter().enumerate() {
            for v in n.inputs.iter().flatten() {
                let r = readers.entry(*v).or_default();
                if r.last() != Some(&i) {
                    r.push(i);
                }
            }
        }
        Uses {
            readers,
            outputs: g.outputs.iter().copied().collect(),
        }
    }

    pub fn readers(&self, v: ValueId) -> &[usize] {
        self.readers.get(&v).map_or(&[], |r| r.as_slice())
    }

    /// The only node reading `v`, when there is exactly one and `v` is not a graph output.
    pub fn single(&self, v: ValueId) -> Option<usize> {
        match self.readers(v) {
            [one] if !self.outputs.contains(&v) => Some(*one),
            _ => None,
        }
    }

    pub fn is_output(&self, v: ValueId) -> bool {
        self.outputs.contains(&v)
    }
}

/// Input slot `i` of a node, when connected.
pub fn input(n: &Node, i: usize) -> Option<ValueId> {
    n.inputs.get(i).copied().flatten()
}

/// The first output of a node.
pub fn out(n: &Node) -> Option<ValueId> {
    n.outputs.first().copied()
}

/// The node producing `v`.
pub fn producer(g: &Graph, v: ValueId) -> Option<usize> {
    g.value(v).producer.map(|p| p.0)
}

pub fn info(g: &Graph, v: ValueId) -> Option<&TensorInfo> {
    g.value(v).info.as_ref()
}

pub fn constant(g: &Graph, v: ValueId) -> Option<&Tensor> {
    g.value(v).constant.as_ref()
}

/// The value of a one-element float constant.
pub fn scalar(g: &Graph, v: ValueId) -> Option<f64> {
    let t = constant(g, v)?;
    (t.numel() == 1 && t.dtype().is_float()).then(|| t.to_f64_vec()[0])
}

/// Whether `v` is a one-element float constant close to `want` (relative tolerance 1e-3, which
/// accepts exporters' rounded constants such as 1.4142 for sqrt(2)).
pub fn is_scalar(g: &Graph, v: ValueId, want: f64) -> bool {
    scalar(g, v).is_some_and(|x| (x - want).abs() <= 1e-3 * want.abs().max(1e-6))
}

/// The kind of an element-wise binary node with numpy broadcasting, and its two operands.
pub fn binary(n: &Node) -> Option<(BinaryKind, ValueId, ValueId)> {
    let b = n.op.as_any().downcast_ref::<Binary>()?;
    if b.legacy_axis.is_some() || n.inputs.len() != 2 {
        return None;
    }
    Some((b.kind, input(n, 0)?, input(n, 1)?))
}

/// For a commutative binary node of `kind` reading `v`, the other operand.
pub fn other_operand(n: &Node, kind: BinaryKind, v: ValueId) -> Option<ValueId> {
    let (k, a, b) = binary(n)?;
    if k != kind {
        return None;
    }
    if a == v {
        Some(b)
    } else if b == v {
        Some(a)
    } else {
        None
    }
}

pub fn unary(n: &Node) -> Option<UnaryKind> {
    Some(n.op.as_any().downcast_ref::<Unary>()?.kind)
}

/// Applies the matcher's rewrites until none matches. Returns whether anything changed.
pub fn rewrite_all(
    g: &mut Graph,
    matcher: impl Fn(&Graph, &Uses, usize) -> Option<Rewrite>,
) -> Result<bool> {
    let mut changed = false;
    loop {
        let uses = Uses::new(g);
        // Nodes of accepted matches, nodes they remove, and producers of the values they read:
        // a later match may neither overlap the first nor remove the last.
        let mut touched: HashSet<usize> = HashSet::new();
        let mut removed: HashSet<usize> = HashSet::new();
        let mut read: HashSet<usize> = HashSet::new();
        let mut rewrites = Vec::new();
        for i in 0..g.nodes.len() {
            if touched.contains(&i) {
                continue;
            }
            let Some(r) = matcher(g, &uses, i) else {
                continue;
            };
            let deps: Vec<usize> = r
                .inputs
                .iter()
                .filter_map(|a| match a {
                    Arg::Value(v) => producer(g, *v),
                    _ => None,
                })
                .chain(r.rewire.and_then(|(_, to)| producer(g, to)))
                .collect();
            let conflict = r.nodes().any(|n| touched.contains(&n))
                || deps.iter().any(|d| removed.contains(d))
                || r.remove.iter().any(|n| read.contains(n));
            if conflict || !sound(g, &uses, &r) {
                continue;
            }
            touched.extend(r.nodes());
            removed.extend(r.remove.iter().copied());
            read.extend(deps);
            rewrites.push(r);
        }
        if rewrites.is_empty() {
            return Ok(changed);
        }
        changed = true;
        let mut rewire = HashMap::new();
        for r in rewrites {
            if let Some((from, to)) = r.rewire {
                rewire.insert(from, to);
            }
            let Some(t) = r.target else { continue };
            let base = r.name.clone().unwrap_or_else(|| g.nodes[t].name.clone());
            let mut inputs = Vec::with_capacity(r.inputs.len());
            for a in r.inputs {
                inputs.push(match a {
                    Arg::Value(v) => Some(v),
                    Arg::Absent => None,
                    Arg::Const(suffix, tensor) => {
                        Some(g.add_constant(format!("{base}.{suffix}"), tensor))
                    }
                });
            }
            let node = &mut g.nodes[t];
            node.inputs = inputs;
            node.name = base;
            if let Some(op) = r.op {
                node.op = op;
            }
        }
        let mut i = 0;
        g.nodes.retain(|_| {
            i += 1;
            !removed.contains(&(i - 1))
        });
        if !rewire.is_empty() {
            for node in &mut g.nodes {
                for v in node.inputs.iter_mut().flatten() {
                    while let Some(&to) = rewire.get(v) {
                        *v = to;
                    }
                }
            }
        }
        g.sort()?;
    }
}

/// Whether a rewrite keeps the graph's meaning at its boundary: every node of the match has
/// inferred outputs, and the outputs of removed nodes are read only inside the match (or are
/// rewired) and are not graph outputs.
fn sound(g: &Graph, uses: &Uses, r: &Rewrite) -> bool {
    let inside: HashSet<usize> = r.nodes().collect();
    if inside.iter().any(|&n| n >= g.nodes.len()) {
        return false;
    }
    let inferred = inside
        .iter()
        .all(|&n| g.nodes[n].outputs.iter().all(|&o| info(g, o).is_some()));
    let contained = r.remove.iter().all(|&n| {
        g.nodes[n].outputs.iter().all(|&o| {
            if r.rewire.is_some_and(|(from, _)| from == o) {
                return !uses.is_output(o);
            }
            !uses.is_output(o) && uses.readers(o).iter().all(|x| inside.contains(x))
        })
    });
    let removed_outputs: HashSet<ValueId> = r
        .remove
        .iter()
        .flat_map(|&n| g.nodes[n].outputs.iter().copied())
        .collect();
    let reads_removed = r
        .inputs
        .iter()
        .any(|a| matches!(a, Arg::Value(v) if removed_outputs.contains(v)))
        || r.rewire
            .is_some_and(|(_, to)| removed_outputs.contains(&to));
    inferred && contained && !reads_removed
}
