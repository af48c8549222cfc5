//! ONNX op → canonical op mapping: one table per domain (the default domain and
//! `com.microsoft`), one function per ONNX op type.
//!
//! A mapping function reads the node's attributes through [`NodeCtx`] and returns the
//! canonical op. Inputs pass through position by position (an empty input name is an absent
//! optional input); ops whose ONNX forms differ by opset (attribute vs input) are handled by
//! the canonical op accepting both, chosen here from `ctx.opset`.

use crate::proto::{attribute_type, AttributeProto, NodeProto};
use ferrolite_core::frontend;
use ferrolite_core::{Op, Tensor};
use std::sync::Arc;

pub use ferrolite_core::frontend::MapError;

mod containers;
mod contrib;
mod elementwise;
mod extra;
mod linalg;
mod misc;
mod nn;
mod quant;
mod shape;

pub type MapResult = Result<Arc<dyn Op>, MapError>;
pub type MapFn = fn(&NodeCtx) -> MapResult;

/// onnxruntime's contrib op domain.
pub const MS_DOMAIN: &str = "com.microsoft";

/// The ONNX op types the frontend understands, for the default domain (`""` / `ai.onnx`).
pub fn lookup(op_type: &str) -> Option<MapFn> {
    frontend::lookup(TABLES, op_type)
}

/// The mapping of `op_type` in `domain` (`""` or `ai.onnx` for the default domain); `None` for
/// an op type or a domain the frontend does not know.
pub fn lookup_in(domain: &str, op_type: &str) -> Option<MapFn> {
    match domain {
        "" | "ai.onnx" => lookup(op_type),
        MS_DOMAIN => frontend::lookup(MS_TABLES, op_type),
        _ => None,
    }
}

/// Every supported op type, sorted: those of the default domain by name, then those of
/// `com.microsoft` as `com.microsoft:Name` (how unsupported ops of that domain are named).
pub fn supported_ops() -> Vec<String> {
    let mut v: Vec<String> = frontend::op_types(TABLES)
        .into_iter()
        .chain(CONTROL_FLOW.iter().copied())
        .map(String::from)
        .collect();
    v.extend(
        frontend::op_types(MS_TABLES)
            .into_iter()
            .map(|t| format!("{MS_DOMAIN}:{t}")),
    );
    v
}

/// The ops with graph attributes, which the model builder maps itself (their subgraphs are
/// built with the graph around them).
pub const CONTROL_FLOW: &[&str] = &["If", "Loop", "Scan", "SequenceMap"];

/// The one table, kept as one slice per op family so each family's entries sit next to their
/// mapping functions.
const TABLES: &[&[(&str, MapFn)]] = &[
    containers::ENTRIES,
    elementwise::ENTRIES,
    extra::ENTRIES,
    linalg::ENTRIES,
    misc::ENTRIES,
    nn::ENTRIES,
    quant::ENTRIES,
    shape::ENTRIES,
];

/// The `com.microsoft` domain's table.
const MS_TABLES: &[&[(&str, MapFn)]] = &[contrib::ENTRIES];

/// A node as the mapping functions see it.
pub struct NodeCtx<'a> {
    pub node: &'a NodeProto,
    /// The model's opset version for the node's domain.
    pub opset: i64,
}

impl<'a> NodeCtx<'a> {
    pub fn attr(&self, name: &str) -> Option<&'a AttributeProto> {
        self.node.attribute.iter().find(|a| a.name == name)
    }

    fn typed(&self, name: &str, ty: i32) -> Result<Option<&'a AttributeProto>, MapError> {
        match self.attr(name) {
            None => Ok(None),
            // Some writers leave `type` unset; accept those.
            Some(a) if a.r#type == ty || a.r#type == attribute_type::UNDEFINED => Ok(Some(a)),
            Some(a) => Err(MapError::Invalid(format!(
                "attribute '{name}' has type {}, expected {ty}",
                a.r#type
            ))),
        }
    }

    pub fn int_opt(&self, name: &str) -> Result<Option<i64>, MapError> {
        Ok(self.typed(name, attribute_type::INT)?.map(|a| a.i))
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64, MapError> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }

    pub fn float_opt(&self, name: &str) -> Result<Option<f32>, MapError> {
        Ok(self.typed(name, attribute_type::FLOAT)?.map(|a| a.f))
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32, MapError> {
        Ok(self.float_opt(name)?.unwrap_or(default))
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, MapError> {
        Ok(self
            .typed(name, attribute_type::INTS)?
            .map(|a| a.ints.clone()))
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, MapError> {
        Ok(self
            .typed(name, attribute_type::FLOATS)?
            .map(|a| a.floats.clone()))
    }

    pub fn string_opt(&self, name: &str) -> Result<Option<String>, MapError> {
        Ok(self
            .typed(name, attribute_type::STRING)?
            .map(|a| String::from_utf8_lossy(&a.s).into_owned()))
    }

    pub fn string(&self, name: &str, default: &str) -> Result<String, MapError> {
        Ok(self
            .string_opt(name)?
            .unwrap_or_else(|| default.to_string()))
    }

    pub fn strings(&self, name: &str) -> Result<Option<Vec<String>>, MapError> {
        Ok(self.typed(name, attribute_type::STRINGS)?.map(|a| {
            a.strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        }))
    }

    /// A tensor-valued attribute, decoded.
    pub fn tensor(&self, name: &str) -> Result<Option<Tensor>, MapError> {
        match self.typed(name, attribute_type::TENSOR)? {
            None => Ok(None),
            Some(a) => match &a.t {
                None => Err(MapError::Invalid(format!(
                    "attribute '{name}' holds no tensor"
                ))),
                Some(t) => crate::tensor::decode(t, None)
                    .map(Some)
                    .map_err(|e| MapError::Invalid(format!("attribute '{name}': {e}"))),
            },
        }
    }

    /// Number of inputs listed (including empty names for skipped optional inputs).
    pub fn n_inputs(&self) -> usize {
        self.node.input.len()
    }

    /// Whether input `i` is given (listed and not empty).
    pub fn has_input(&self, i: usize) -> bool {
        self.node.input.get(i).is_some_and(|n| !n.is_empty())
    }

    /// Number of outputs listed, trailing empty names dropped.
    pub fn n_outputs(&self) -> usize {
        let mut n = self.node.output.len();
        while n > 0 && self.node.output[n - 1].is_empty() {
            n -= 1;
        }
        n
    }

    /// Shorthand for an unsupported use of this op.
    pub fn unsupported(&self, why: impl Into<String>) -> MapError {
        MapError::Unsupported(why.into())
    }
}

/// Wraps an op value as a mapping result.
pub fn op(o: impl Op) -> MapResult {
    Ok(Arc::new(o))
}
