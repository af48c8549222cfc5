//! ferrolite core: tensors, the graph IR, operator prototypes with shape/dtype inference and
//! reference implementations, whole-graph inference and execution plans.
//!
//! Nothing here knows a file format or a device: frontends build a [`Graph`] of canonical ops
//! ([`ops`]); devices supply kernels through [`plan::KernelProvider`].

pub mod device;
pub mod dtype;
pub mod error;
pub mod format;
pub mod frontend;
pub mod graph;
pub mod infer;
pub mod lowp;
pub mod op;
pub mod ops;
pub mod passes;
pub mod plan;
pub mod prepacked;
pub mod registry;
pub mod scratch;
pub mod tensor;

pub use dtype::{DType, DTypeSet, Elem};
pub use error::{Error, OpError, OpResult, Result, UnsupportedOp};
pub use graph::{DeclaredType, Dim, Graph, Node, NodeId, Value, ValueId};
pub use op::{InferCtx, InferInput, Op, Prototype, TensorInfo};
pub use tensor::{Storage, Tensor};

/// Re-exported so the dispatch macros work in other crates.
pub use half;
