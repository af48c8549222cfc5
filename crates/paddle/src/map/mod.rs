//! Paddle op → canonical op mapping: one function per Paddle op type, found through one table
//! kept as one slice per op family (`elementwise`, `linalg`, `nn`, `quant`, `shape`), each family's
//! `ENTRIES` next to its mapping functions, as in the ONNX frontend.
//!
//! A Paddle op may become several canonical nodes (e.g. `elementwise_add` with `axis` is an
//! Unsqueeze of Y and an Add; `matmul` with `alpha` is a MatMul and a Mul). The mapping
//! function reads inputs and attributes through [`Ctx`], adds nodes, and binds the op's output
//! variables to the values that hold them.

use crate::attr::AttrValue;
use crate::model::Builder;
use crate::params::dtype_of;
use crate::proto::{OpDesc, VarDesc};
use ferrolite_core::frontend;
use ferrolite_core::ops::elementwise::Cast;
use ferrolite_core::ops::shape::{concat::Concat, reshape::Reshape};
use ferrolite_core::{DType, Node, Op, Tensor, ValueId};
use std::sync::Arc;

pub use ferrolite_core::frontend::MapError;
pub use shape::unsqueeze_positions;

mod elementwise;
mod linalg;
mod nn;
mod quant;
mod shape;

pub type MapResult = Result<(), MapError>;
pub type MapFn = fn(&mut Ctx) -> MapResult;

/// The mapping function of a Paddle op type.
pub fn lookup(op_type: &str) -> Option<MapFn> {
    frontend::lookup(TABLES, op_type)
}

/// Every supported op type (plus `feed` and `fetch`), sorted.
pub fn supported_ops() -> Vec<&'static str> {
    let mut v = frontend::op_types(TABLES);
    v.extend(["feed", "fetch"]);
    v.sort_unstable();
    v
}

/// The one table, kept as one slice per op family so each family's entries sit next to their
/// mapping functions.
const TABLES: &[&[(&str, MapFn)]] = &[
    elementwise::ENTRIES,
    linalg::ENTRIES,
    nn::ENTRIES,
    quant::ENTRIES,
    shape::ENTRIES,
];

/// One Paddle op as its mapping function sees it.
pub struct Ctx<'a, 'p> {
    b: &'a mut Builder<'p>,
    pub op: &'p OpDesc,
    /// Base name of the nodes this op becomes.
    pub node: String,
    /// Index of the first node of this op (later nodes and their values are "fresh").
    first_node: usize,
    count: usize,
}

fn invalid(msg: impl Into<String>) -> MapError {
    MapError::Invalid(msg.into())
}

fn unsupported(msg: impl Into<String>) -> MapError {
    MapError::Unsupported(msg.into())
}

impl<'a, 'p> Ctx<'a, 'p> {
    pub(crate) fn new(
        b: &'a mut Builder<'p>,
        op: &'p OpDesc,
        node: String,
        first_node: usize,
    ) -> Self {
        Ctx {
            b,
            op,
            node,
            first_node,
            count: 0,
        }
    }

    // ---- attributes ----

    pub fn attr(&self, name: &str) -> Result<Option<AttrValue>, MapError> {
        match self.op.attrs.iter().find(|a| a.name == name) {
            None => Ok(None),
            Some(a) => AttrValue::decode(a).map(Some).map_err(invalid),
        }
    }

    fn typed<T>(
        &self,
        name: &str,
        what: &str,
        f: impl FnOnce(&AttrValue) -> Option<T>,
    ) -> Result<Option<T>, MapError> {
        match self.attr(name)? {
            None => Ok(None),
            Some(v) => f(&v).map(Some).ok_or_else(|| {
                invalid(format!(
                    "attribute '{name}' has type {}, expected {what}",
                    v.type_name()
                ))
            }),
        }
    }

    pub fn int_opt(&self, name: &str) -> Result<Option<i64>, MapError> {
        self.typed(name, "an integer", AttrValue::as_i64)
    }
    pub fn int(&self, name: &str, default: i64) -> Result<i64, MapError> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }
    pub fn float_opt(&self, name: &str) -> Result<Option<f64>, MapError> {
        self.typed(name, "a number", AttrValue::as_f64)
    }
    pub fn float(&self, name: &str, default: f64) -> Result<f64, MapError> {
        Ok(self.float_opt(name)?.unwrap_or(default))
    }
    pub fn bool(&self, name: &str, default: bool) -> Result<bool, MapError> {
        Ok(self
            .typed(name, "a boolean", AttrValue::as_bool)?
            .unwrap_or(default))
    }
    pub fn string(&self, name: &str, default: &str) -> Result<String, MapError> {
        Ok(self
            .typed(name, "a string", |v| v.as_str().map(str::to_string))?
            .unwrap_or_else(|| default.to_string()))
    }
    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, MapError> {
        self.typed(name, "a list of integers", AttrValue::as_i64s)
    }
    pub fn floats(&self, name: &str) -> Result<Option<Vec<f64>>, MapError> {
        self.typed(name, "a list of numbers", AttrValue::as_f64s)
    }

    // ---- inputs and outputs ----

    fn args(list: &'p [crate::proto::OpVar], slot: &str) -> &'p [String] {
        list.iter()
            .find(|v| v.parameter == slot)
            .map_or(&[][..], |v| v.arguments.as_slice())
    }

    pub fn input_names(&self, slot: &str) -> &'p [String] {
        Self::args(&self.op.inputs, slot)
    }

    pub fn output_names(&self, slot: &str) -> &'p [String] {
        Self::args(&self.op.outputs, slot)
    }

    fn value_of(&self, var: &str) -> Result<ValueId, MapError> {
        self.b.names.get(var).copied().ok_or_else(|| {
            invalid(format!(
                "reads '{var}', which no feed, parameter or earlier op defines"
            ))
        })
    }

    /// All the values of an input slot (empty when absent).
    pub fn inputs(&self, slot: &str) -> Result<Vec<ValueId>, MapError> {
        self.input_names(slot)
            .iter()
            .map(|n| self.value_of(n))
            .collect()
    }

    pub fn input_opt(&self, slot: &str) -> Result<Option<ValueId>, MapError> {
        match self.input_names(slot).first() {
            None => Ok(None),
            Some(n) => self.value_of(n).map(Some),
        }
    }

    pub fn input(&self, slot: &str) -> Result<ValueId, MapError> {
        self.input_opt(slot)?
            .ok_or_else(|| invalid(format!("input '{slot}' is required")))
    }

    fn var(&self, name: &str) -> Option<&'p VarDesc> {
        self.b.vars.get(name).copied()
    }

    fn desc_of(&self, var: Option<&String>) -> Option<(DType, Vec<i64>)> {
        let v = self.var(var?)?;
        let t = v.r#type.as_ref()?.lod_tensor.as_ref()?.tensor.as_ref()?;
        Some((dtype_of(t.data_type)?, t.dims.clone()))
    }

    /// Declared dims of the first variable of an input slot (`-1` unknown). A parameter's
    /// actual shape is used when it is a constant.
    pub fn in_dims(&self, slot: &str) -> Option<Vec<i64>> {
        if let Ok(Some(v)) = self.input_opt(slot) {
            if let Some(t) = self.constant(v) {
                return Some(t.shape().iter().map(|&d| d as i64).collect());
            }
        }
        self.desc_of(self.input_names(slot).first()).map(|d| d.1)
    }

    pub fn in_rank(&self, slot: &str) -> Result<usize, MapError> {
        self.in_dims(slot)
            .map(|d| d.len())
            .ok_or_else(|| unsupported(format!("the rank of input '{slot}' is not declared")))
    }

    pub fn in_dtype(&self, slot: &str) -> Option<DType> {
        if let Ok(Some(v)) = self.input_opt(slot) {
            if let Some(t) = self.constant(v) {
                return Some(t.dtype());
            }
        }
        self.desc_of(self.input_names(slot).first()).map(|d| d.0)
    }

    pub fn out_desc(&self, slot: &str) -> Option<(DType, Vec<i64>)> {
        self.desc_of(self.output_names(slot).first())
    }

    pub fn constant(&self, v: ValueId) -> Option<&Tensor> {
        self.b.graph.value(v).constant.as_ref()
    }

    /// The node that computes `v` (none for inputs and constants).
    pub fn producer(&self, v: ValueId) -> Option<&Node> {
        let p = self.b.graph.value(v).producer?;
        self.b.graph.nodes.get(p.0)
    }

    // ---- building ----

    fn next_name(&mut self) -> String {
        let n = if self.count == 0 {
            self.node.clone()
        } else {
            format!("{}/{}", self.node, self.count)
        };
        self.count += 1;
        n
    }

    /// Adds a node with `n` outputs.
    pub fn add_n(
        &mut self,
        op: impl Op,
        inputs: &[Option<ValueId>],
        n: usize,
    ) -> Result<Vec<ValueId>, MapError> {
        let name = self.next_name();
        let outs: Vec<ValueId> = (0..n)
            .map(|i| self.b.fresh_value(format!("{name}:{i}")))
            .collect();
        self.b
            .graph
            .add_node(name, Arc::new(op), inputs.to_vec(), outs.clone())
            .map_err(|e| invalid(e.to_string()))?;
        Ok(outs)
    }

    /// Adds a node with one output.
    pub fn add(&mut self, op: impl Op, inputs: &[ValueId]) -> Result<ValueId, MapError> {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|&v| Some(v)).collect();
        Ok(self.add_n(op, &ins, 1)?[0])
    }

    pub fn konst(&mut self, t: Tensor) -> ValueId {
        let name = format!("{}/const{}", self.node, self.count);
        self.count += 1;
        self.b.used.insert(name.clone());
        self.b.graph.add_constant(name, t)
    }

    pub fn i64s(&mut self, v: &[i64]) -> Result<ValueId, MapError> {
        let t = Tensor::from_slice(&[v.len()], v).map_err(|e| invalid(e.to_string()))?;
        Ok(self.konst(t))
    }

    /// A scalar constant of `dtype`.
    pub fn scalar(&mut self, dtype: DType, v: f64) -> Result<ValueId, MapError> {
        let t = Tensor::full(dtype, &[], v).map_err(|e| invalid(e.to_string()))?;
        Ok(self.konst(t))
    }

    fn is_fresh(&self, v: ValueId) -> bool {
        self.b
            .graph
            .value(v)
            .producer
            .is_some_and(|p| p.0 >= self.first_node)
    }

    /// Binds output `k` of a slot to a value (absent slots are ignored: optional outputs).
    pub fn set_nth(&mut self, slot: &str, k: usize, v: ValueId) {
        if let Some(var) = self.output_names(slot).get(k) {
            let fresh = self.is_fresh(v);
            self.b.bind(var, v, fresh);
        }
    }

    pub fn set(&mut self, slot: &str, v: ValueId) {
        self.set_nth(slot, 0, v)
    }

    pub fn set_out(&mut self, v: ValueId) -> MapResult {
        self.set("Out", v);
        Ok(())
    }

    /// Reshapes `v` (a constant when it is one) to `shape`.
    pub fn reshape_to(&mut self, v: ValueId, shape: &[i64]) -> Result<ValueId, MapError> {
        if let Some(t) = self.constant(v) {
            if shape.iter().all(|&d| d >= 0) {
                let s: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
                let t = t.reshaped(&s).map_err(|e| invalid(e.to_string()))?;
                return Ok(self.konst(t));
            }
        }
        let s = self.i64s(shape)?;
        self.add(Reshape { allowzero: false }, &[v, s])
    }

    /// `v` as an i64 tensor (shape inputs may be int32 in Paddle).
    pub fn to_i64(&mut self, v: ValueId) -> Result<ValueId, MapError> {
        if let Some(t) = self.constant(v) {
            if t.dtype() == DType::I64 {
                return Ok(v);
            }
        }
        self.add(Cast::new(DType::I64), &[v])
    }

    /// A 1-D i64 tensor from a list slot of 1-element tensors (`ShapeTensor`-style inputs).
    pub fn list_to_i64(&mut self, vs: &[ValueId]) -> Result<ValueId, MapError> {
        let mut parts = Vec::with_capacity(vs.len());
        for &v in vs {
            let c = self.to_i64(v)?;
            parts.push(self.reshape_to(c, &[1])?);
        }
        if parts.len() == 1 {
            return Ok(parts[0]);
        }
        self.add(Concat { axis: 0 }, &parts)
    }
}

// ---------------------------------------------------------------------------------------------
// helpers of several families

/// Paddle paddings `[h, w]` or `[top, bottom, left, right]` as ONNX `[begin..., end...]`.
fn onnx_pads(p: &[i64]) -> Result<Vec<i64>, MapError> {
    match p.len() {
        2 => Ok(vec![p[0], p[1], p[0], p[1]]),
        4 => Ok(vec![p[0], p[2], p[1], p[3]]),
        n => Err(invalid(format!(
            "'paddings' must have 2 or 4 entries, got {n}"
        ))),
    }
}

fn nchw(c: &Ctx) -> MapResult {
    let f = c.string("data_format", "NCHW")?;
    if !matches!(f.as_str(), "NCHW" | "AnyLayout") {
        return Err(unsupported(format!("data_format '{f}'")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The lookup takes the first family that lists an op type, so one listed twice would
    /// hide a mapping.
    #[test]
    fn every_op_type_is_listed_once() {
        let ops = super::supported_ops();
        let mut unique = ops.clone();
        unique.dedup();
        assert_eq!(ops, unique);
        for name in ops.iter().filter(|n| !matches!(**n, "feed" | "fetch")) {
            assert!(super::lookup(name).is_some(), "{name}");
        }
    }
}
