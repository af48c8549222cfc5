//! Error types.
//!
//! Every error names what it is about: the node and op, the tensor, or the file. Operator code
//! returns the light [`OpError`]; the graph-level code wraps it with the node's name and op.

use std::fmt;

/// One node whose op the engine (or a frontend) does not support.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedOp {
    pub node: String,
    pub op: String,
    /// Why, when it is more than "unknown op" (an attribute value, an opset version, ...).
    pub reason: String,
}

impl fmt::Display for UnsupportedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (node '{}')", self.op, self.node)?;
        if !self.reason.is_empty() {
            write!(f, ": {}", self.reason)?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model file is malformed: bad protobuf, inconsistent tensors, a cycle, ...
    #[error("invalid model: {0}")]
    InvalidModel(String),

    /// All the unsupported ops of a model, listed at once.
    #[error("{} unsupported operator(s): {}", .0.len(), list(.0))]
    UnsupportedOps(Vec<UnsupportedOp>),

    /// An error attributed to one node of the graph.
    #[error("node '{node}' ({op}): {message}")]
    Node {
        node: String,
        op: String,
        message: String,
    },

    /// An error about one of the inputs given by the caller.
    #[error("input '{name}': {message}")]
    Input { name: String, message: String },

    /// A tensor operation failed (wrong dtype access, size mismatch, allocation limit).
    #[error("tensor: {0}")]
    Tensor(String),

    /// A plan would need more memory than a session's cap (`SessionOptions::max_memory`) or
    /// the per-tensor limit allows; reported before the memory is allocated.
    #[error("memory limit: {what} needs {needed} bytes, over the limit of {limit} bytes")]
    MemoryLimit {
        /// What needs the memory: a tensor and the node producing it, or the plan's total.
        what: String,
        needed: u64,
        limit: u64,
    },

    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{0}")]
    Other(String),
}

fn list(ops: &[UnsupportedOp]) -> String {
    ops.iter()
        .map(|o| o.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The error an operator's shape inference or implementation returns. The graph code adds the
/// node name and op type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpError(pub String);

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OpError {}

impl From<Error> for OpError {
    fn from(e: Error) -> Self {
        OpError(e.to_string())
    }
}

impl From<String> for OpError {
    fn from(s: String) -> Self {
        OpError(s)
    }
}

impl From<&str> for OpError {
    fn from(s: &str) -> Self {
        OpError(s.to_string())
    }
}

pub type OpResult<T> = std::result::Result<T, OpError>;

/// Returns early with an [`OpError`] built like `format!`.
#[macro_export]
macro_rules! op_bail {
    ($($arg:tt)*) => {
        return Err($crate::OpError(format!($($arg)*)))
    };
}

/// Returns early with an [`OpError`] unless the condition holds.
#[macro_export]
macro_rules! op_ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err($crate::OpError(format!($($arg)*)));
        }
    };
}
