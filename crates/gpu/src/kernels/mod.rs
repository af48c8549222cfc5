//! Lowering: what each supported node becomes on the GPU, worked out without touching it.
//!
//! [`lower`] turns one node (op, attributes, input and output types, constant inputs) into a
//! [`Lowered`]: an alias (the output is the input's buffer seen with another shape) or a list of
//! [`Step`]s, each one compute dispatch of a WGSL kernel. The device's `supports` calls it and
//! keeps only the verdict, and `compile` calls it again and builds the steps, so a node the
//! device accepts always compiles. An `Err` is the reason the node stays on the CPU.
//!
//! Every kernel sees the same bindings (see [`crate::wgsl`]): `p`, the step's parameters as
//! `u32`s (`p[0]` is the thread or workgroup count), then the inputs `in0`, `in1`, ... and the
//! output `out`. One module per op family.

mod conv;
mod elementwise;
mod matmul;
mod movement;
mod normalize;
mod pool;
mod reduce;
mod resize;

use ferrolite_core::ops::nn::activation::Activation;
pub(crate) use ferrolite_core::ops::util::strides;
use ferrolite_core::plan::KernelRequest;
use ferrolite_core::{DType, TensorInfo};
use std::sync::Arc;

/// Why a node cannot run on the GPU.
pub(crate) type Reason = String;

/// A buffer a step reads or writes.
#[derive(Clone, Debug)]
pub(crate) enum Operand {
    /// The node's input with this index (a tensor on the device, or an uploaded constant).
    Input(usize),
    /// The node's output with this index.
    Output(usize),
    /// A temporary buffer of the node (index into [`Lowered::Steps::scratch`]).
    Scratch(usize),
    /// Data the lowering derived from constants (BatchNorm coefficients, resize taps),
    /// uploaded once at compile.
    Data(Arc<Vec<u32>>),
}

/// How a kernel sees a read binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Elem {
    F32,
    U32,
}

/// How many invocations a step runs; workgroups are 64 wide either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grid {
    /// One invocation per item: the body defines `fn run(i: u32)`.
    Threads(u64),
    /// One workgroup per item: the body defines `fn run_group(g: u32, lane: u32)`.
    Groups(u64),
}

impl Grid {
    pub(crate) fn count(self) -> u64 {
        match self {
            Grid::Threads(n) | Grid::Groups(n) => n,
        }
    }
}

/// One compute dispatch.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    /// WGSL after the bindings: helper functions and `run` or `run_group`.
    pub body: String,
    /// `p[1..]`; `p[0]` (the grid's count) is put in front when the step is built.
    pub params: Vec<u32>,
    pub reads: Vec<(Operand, Elem)>,
    pub write: Operand,
    pub grid: Grid,
}

impl Step {
    /// One workgroup per item (for reductions over rows).
    pub(crate) fn groups(
        n: usize,
        body: String,
        params: Vec<u32>,
        reads: Vec<Operand>,
        write: Operand,
    ) -> Step {
        Step {
            grid: Grid::Groups(n as u64),
            ..Step::threads(0, body, params, reads, write)
        }
    }

    pub(crate) fn threads(
        n: usize,
        body: String,
        params: Vec<u32>,
        reads: Vec<Operand>,
        write: Operand,
    ) -> Step {
        Step {
            body,
            params,
            reads: reads.into_iter().map(|r| (r, Elem::F32)).collect(),
            write,
            grid: Grid::Threads(n as u64),
        }
    }
}

/// What one node becomes.
#[derive(Clone, Debug)]
pub(crate) enum Lowered {
    /// Output 0 is input 0's buffer with the output's shape (Reshape, Flatten, Identity, ...).
    Alias,
    Steps {
        /// Element counts (f32) of the node's temporary buffers.
        scratch: Vec<usize>,
        steps: Vec<Step>,
    },
}

impl Lowered {
    pub(crate) fn steps(steps: Vec<Step>) -> Lowered {
        Lowered::Steps {
            scratch: Vec::new(),
            steps,
        }
    }
}

/// What a node's lowering may use.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Largest buffer a kernel may bind, in bytes.
    pub max_binding_bytes: u64,
}

/// The node's inputs and outputs, checked.
pub(crate) struct Node<'a> {
    pub req: &'a KernelRequest<'a>,
}

impl<'a> Node<'a> {
    /// Input `i`'s shape; an absent input is an error.
    pub(crate) fn shape(&self, i: usize) -> Result<&'a [usize], Reason> {
        match self.req.inputs.get(i) {
            Some(Some(x)) => Ok(x.shape),
            _ => Err(format!("input {i} is missing")),
        }
    }

    pub(crate) fn has(&self, i: usize) -> bool {
        matches!(self.req.inputs.get(i), Some(Some(_)))
    }

    pub(crate) fn out_shape(&self, i: usize) -> Result<&'a [usize], Reason> {
        self.req
            .outputs
            .get(i)
            .map(|o| o.shape.as_slice())
            .ok_or_else(|| format!("output {i} is missing"))
    }

    /// The value of constant input `i` (weights, Reshape's shape, Resize's scales).
    pub(crate) fn constant(&self, i: usize) -> Option<&'a ferrolite_core::Tensor> {
        self.req
            .inputs
            .get(i)
            .copied()
            .flatten()
            .and_then(|x| x.value)
    }

    /// Constant input `i` as f32s, or the reason it must be constant.
    pub(crate) fn constant_f32(&self, i: usize, what: &str) -> Result<Vec<f32>, Reason> {
        let t = self
            .constant(i)
            .ok_or_else(|| format!("{what} (input {i}) is not a constant"))?;
        Ok(t.to_f64_vec().into_iter().map(|v| v as f32).collect())
    }
}

/// An op family's lowering: `None` for ops of other families.
type Family = fn(&Node, &dyn std::any::Any) -> Result<Option<Lowered>, Reason>;

/// Lowers one node, or says why the GPU cannot run it.
pub(crate) fn lower(req: &KernelRequest, limits: &Limits) -> Result<Lowered, Reason> {
    check_types(req, limits)?;
    let node = Node { req };
    let op = req.node.op.as_ref();
    let any = op.as_any();
    let name = op.name();
    // Each family lowers the ops it knows and passes on the rest.
    let families: [Family; 8] = [
        movement::lower,
        elementwise::lower,
        conv::lower,
        matmul::lower,
        pool::lower,
        normalize::lower,
        reduce::lower,
        resize::lower,
    ];
    for family in families {
        if let Some(l) = family(&node, any)? {
            return Ok(l);
        }
    }
    Err(format!("op {name} has no GPU kernel"))
}

/// The GPU computes in f32: every tensor input that is not a constant read only at compile
/// time, and every output, must be f32, with static shapes that fit one binding.
fn check_types(req: &KernelRequest, limits: &Limits) -> Result<(), Reason> {
    let value_inputs = req.node.op.prototype().value_inputs;
    for (i, x) in req.inputs.iter().enumerate() {
        let Some(x) = x else { continue };
        if value_inputs.contains(&i) {
            continue;
        }
        if x.dtype != DType::F32 {
            return Err(format!("input {i} is {} (the GPU runs f32)", x.dtype));
        }
        check_size(x.shape, limits, &format!("input {i}"))?;
    }
    for (i, o) in req.outputs.iter().enumerate() {
        let TensorInfo { dtype, shape } = o;
        if *dtype != DType::F32 {
            return Err(format!("output {i} is {dtype} (the GPU runs f32)"));
        }
        check_size(shape, limits, &format!("output {i}"))?;
    }
    Ok(())
}

fn check_size(shape: &[usize], limits: &Limits, what: &str) -> Result<(), Reason> {
    let bytes = shape
        .iter()
        .try_fold(4u64, |a, &d| a.checked_mul(d as u64))
        .unwrap_or(u64::MAX);
    if bytes > limits.max_binding_bytes || bytes > u32::MAX as u64 {
        return Err(format!(
            "{what} of shape {shape:?} is larger than one GPU binding ({} bytes)",
            limits.max_binding_bytes
        ));
    }
    Ok(())
}

/// A u32 parameter from a size; sizes are checked against the binding limit first, so they
/// fit.
pub(crate) fn u(v: usize) -> u32 {
    v as u32
}

/// An f32 parameter (kernels read it with `bitcast<f32>`).
pub(crate) fn f(v: f32) -> u32 {
    v.to_bits()
}

/// An exact WGSL f32 literal.
pub(crate) fn lit(v: f32) -> String {
    format!("bitcast<f32>({}u)", v.to_bits())
}

/// `fn act(x: f32) -> f32` for a fused epilogue activation.
pub(crate) fn activation_fn(a: Option<Activation>) -> String {
    let body = match a {
        None => "x".to_string(),
        Some(Activation::Relu) => "max(x, 0.0)".to_string(),
        Some(Activation::Clip { min, max }) => format!("min(max(x, {}), {})", lit(min), lit(max)),
        Some(Activation::LeakyRelu { alpha }) => format!("select(x, {} * x, x < 0.0)", lit(alpha)),
        Some(Activation::HardSigmoid { alpha, beta }) => {
            format!("clamp({} * x + {}, 0.0, 1.0)", lit(alpha), lit(beta))
        }
        Some(Activation::HardSwish) => "x * clamp(x / 6.0 + 0.5, 0.0, 1.0)".to_string(),
        Some(Activation::Sigmoid) => "1.0 / (1.0 + exp(-x))".to_string(),
    };
    format!("fn act(x: f32) -> f32 {{ return {body}; }}\n")
}

pub(crate) fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}
