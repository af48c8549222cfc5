//! The operator interface: prototypes, shape and dtype inference, reference evaluation.
//!
//! Every canonical op is a struct of typed attributes (with `Default` giving the defaults) that
//! implements [`Op`]. The prototype declares the inputs and outputs; the graph code checks arity
//! and dtypes against it before calling [`Op::infer`], so `infer` sees well-formed inputs.

use crate::{DType, DTypeSet, OpError, OpResult, Tensor};
use std::any::Any;
use std::fmt::Debug;

/// How many tensors an input slot takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arity {
    Required,
    Optional,
    /// Zero or more trailing inputs (only as the last slot). `min` counts how many must be given.
    Variadic {
        min: usize,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct InputSpec {
    pub name: &'static str,
    pub arity: Arity,
    pub dtypes: DTypeSet,
}

#[derive(Clone, Copy, Debug)]
pub struct OutputSpec {
    pub name: &'static str,
    /// Whether the output may be left unconnected (e.g. MaxPool's indices).
    pub optional: bool,
}

/// Declaration of an op's inputs and outputs.
#[derive(Clone, Copy, Debug)]
pub struct Prototype {
    pub inputs: &'static [InputSpec],
    pub outputs: &'static [OutputSpec],
    /// Inputs whose *values* (not only shapes) shape inference needs: Reshape's shape, Slice's
    /// starts, ... At prerun these must be constants (possibly after folding); otherwise the
    /// node's output shapes are only known at run time.
    pub value_inputs: &'static [usize],
}

/// Shorthand constructors for prototype tables.
pub const fn input(name: &'static str, dtypes: DTypeSet) -> InputSpec {
    InputSpec {
        name,
        arity: Arity::Required,
        dtypes,
    }
}

pub const fn optional(name: &'static str, dtypes: DTypeSet) -> InputSpec {
    InputSpec {
        name,
        arity: Arity::Optional,
        dtypes,
    }
}

pub const fn variadic(name: &'static str, dtypes: DTypeSet, min: usize) -> InputSpec {
    InputSpec {
        name,
        arity: Arity::Variadic { min },
        dtypes,
    }
}

pub const fn output(name: &'static str) -> OutputSpec {
    OutputSpec {
        name,
        optional: false,
    }
}

pub const fn optional_output(name: &'static str) -> OutputSpec {
    OutputSpec {
        name,
        optional: true,
    }
}

/// The dtype and concrete shape of a tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct TensorInfo {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl TensorInfo {
    pub fn new(dtype: DType, shape: impl Into<Vec<usize>>) -> Self {
        TensorInfo {
            dtype,
            shape: shape.into(),
        }
    }

    pub fn of(t: &Tensor) -> Self {
        TensorInfo::new(t.dtype(), t.shape())
    }

    /// The number of elements, saturating at `usize::MAX`: an inferred shape can come from
    /// hostile numbers in a file, and its size is only ever compared with limits.
    pub fn numel(&self) -> usize {
        self.shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .unwrap_or(usize::MAX)
    }

    /// The size in bytes, saturating like [`TensorInfo::numel`].
    pub fn byte_size(&self) -> usize {
        self.numel().saturating_mul(self.dtype.size())
    }
}

/// One input as shape inference sees it.
#[derive(Clone, Copy, Debug)]
pub struct InferInput<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    /// The value, when it is known (a constant at prerun; always at run time).
    pub value: Option<&'a Tensor>,
}

/// What [`Op::infer`] reads: the inputs in slot order (`None` for an absent optional input).
pub struct InferCtx<'a> {
    pub inputs: &'a [Option<InferInput<'a>>],
}

impl<'a> InferCtx<'a> {
    pub fn len(&self) -> usize {
        self.inputs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// Whether input `i` is given.
    pub fn has(&self, i: usize) -> bool {
        matches!(self.inputs.get(i), Some(Some(_)))
    }

    /// Input `i`, which must be given (the prototype check guarantees required ones are).
    pub fn input(&self, i: usize) -> OpResult<&InferInput<'a>> {
        self.inputs
            .get(i)
            .and_then(|x| x.as_ref())
            .ok_or_else(|| OpError(format!("input {i} is missing")))
    }

    pub fn shape(&self, i: usize) -> OpResult<&'a [usize]> {
        Ok(self.input(i)?.shape)
    }

    pub fn dtype(&self, i: usize) -> OpResult<DType> {
        Ok(self.input(i)?.dtype)
    }

    /// The value of a value-dependent input.
    pub fn value(&self, i: usize) -> OpResult<&'a Tensor> {
        self.input(i)?.value.ok_or_else(|| {
            OpError(format!(
                "the value of input {i} is needed for shape inference but is not known"
            ))
        })
    }

    /// The value of optional input `i` as i64s, or `None` when the input is absent.
    pub fn opt_i64s(&self, i: usize) -> OpResult<Option<Vec<i64>>> {
        if !self.has(i) {
            return Ok(None);
        }
        Ok(Some(self.value(i)?.to_i64_vec()))
    }

    /// Same dtype and shape as input `i`.
    pub fn like(&self, i: usize) -> OpResult<TensorInfo> {
        let x = self.input(i)?;
        Ok(TensorInfo::new(x.dtype, x.shape))
    }
}

/// A canonical operator.
pub trait Op: Debug + Send + Sync + Any {
    /// The canonical op type, e.g. `"Conv"`.
    fn name(&self) -> &'static str;

    fn prototype(&self) -> &'static Prototype;

    /// Output dtypes and shapes from input dtypes, shapes and (for value-dependent inputs)
    /// values. Errors name the input index and what was expected.
    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>>;

    /// The plain reference implementation: readable, obviously right, used by tests, constant
    /// folding and as the kernel of last resort.
    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>>;

    /// Multiply-add count times two, for reports. Zero for ops that are not arithmetic-heavy.
    fn flops(&self, _inputs: &[Option<TensorInfo>], _outputs: &[TensorInfo]) -> u64 {
        0
    }

    /// For ops whose outputs depend only on input shapes (Shape, Size): the outputs computed from
    /// the types alone, so that inference folds them even when the input's data is unknown.
    fn fold_from_shapes(&self, _ctx: &InferCtx) -> Option<OpResult<Vec<Tensor>>> {
        None
    }

    /// Whether the output types are known only by running the op (If, Loop and Scan: they
    /// depend on the condition, the iteration count and what a subgraph computes). Such nodes
    /// are always dynamic steps, typed by the tensors they produce; [`Op::infer`] is not
    /// called for them.
    fn shapes_known_by_running(&self) -> bool {
        false
    }

    /// Whether the op can be evaluated at prerun when all its inputs are constant. False for
    /// ops whose result must not be frozen into the plan (random generators).
    fn is_foldable(&self) -> bool {
        true
    }

    /// Whether the op is element-wise: each output value is one function, the same at every
    /// position, of the input values at that position (after broadcasting; a normalization's
    /// parameters along the channel axis). Passes that rewrite chains of such ops read this
    /// rather than a list of names: `lookup-int8` tabulates any chain of them over an 8-bit
    /// value.
    fn pointwise(&self) -> bool {
        false
    }

    /// Whether the reference's output 0 shares input 0's data instead of copying it (Reshape
    /// and friends), so the memory planner keeps that buffer alive for both.
    fn output_aliases_input(&self) -> bool {
        false
    }

    /// For a layout wrapper (an op that runs another op on tensors in another layout, as the
    /// CPU's layout passes write them): the layout's name and the wrapped op. Kernel registries
    /// select by both, and a tailored build needs both ops; other ops are not wrappers.
    fn wrapped(&self) -> Option<(crate::registry::Layout, &dyn Op)> {
        None
    }

    fn as_any(&self) -> &dyn Any;
}

/// Implements the boilerplate part of [`Op`] (`name`, `prototype`, `as_any`) inside an
/// `impl Op for X` block.
#[macro_export]
macro_rules! op_common {
    ($name:literal, $proto:expr) => {
        fn name(&self) -> &'static str {
            $name
        }
        fn prototype(&self) -> &'static $crate::Prototype {
            static P: $crate::Prototype = $proto;
            &P
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    };
}

/// Gets input `i` of an eval call, which must be present.
pub fn required<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> OpResult<&'a Tensor> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| OpError(format!("input {i} is missing")))
}

/// Normalises a possibly negative axis against `rank`.
pub fn normalize_axis(axis: i64, rank: usize) -> OpResult<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(OpError(format!(
            "axis {axis} is out of range for rank {rank}"
        )));
    }
    Ok(a as usize)
}

/// Normalises a list of axes, rejecting duplicates.
pub fn normalize_axes(axes: &[i64], rank: usize) -> OpResult<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(a, rank)?;
        if out.contains(&n) {
            return Err(OpError(format!("axis {a} is repeated in {axes:?}")));
        }
        out.push(n);
    }
    Ok(out)
}
