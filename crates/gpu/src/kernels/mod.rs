//! Lowering: what each supported node becomes on the GPU, worked out without touching it.
//!
//! [`lower`] turns one node (op, attributes, input and output types, constant inputs) into a
//! [`Lowered`]: an alias (the output is the input's buffer seen with another shape) or a list of
//! [`Step`]s, each one compute dispatch of a WGSL kernel. The device's `supports` calls it and
//! keeps only the verdict, and `compile` calls it again and builds the steps, so a node the
//! device accepts always compiles. An `Err` is the reason the node stays on the CPU.
//!
//! The kernels live in one [`KernelRegistry`] (built once, see [`registry`]): each op family's
//! module registers a builder per op type, which reads the op's attributes and returns the
//! lowering or the reason it passes over the node. [`lower`] checks the types every kernel
//! needs, then asks the registry.
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

use ferrolite_core::ops::codec::Tagged;
use ferrolite_core::ops::elementwise::unary::UnaryKind;
pub(crate) use ferrolite_core::ops::util::strides;
use ferrolite_core::plan::KernelRequest;
use ferrolite_core::registry::{Build, DTypes, KernelRegistry, Layout, Request, Verdict};
use ferrolite_core::{DType, Op, TensorInfo};
use std::sync::{Arc, OnceLock};

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

/// What a builder sees: the node, and the device's limits as the context.
pub(crate) type Req<'r, 'a> = Request<'r, 'a, Limits>;

/// The GPU's kernels by op type.
pub(crate) type Registry = KernelRegistry<Limits, Lowered>;

/// Registers the lowering of op type `O` (`op` names it in listings). Every GPU entry takes any
/// dtypes, as [`lower`] checks them for all kernels alike, and reads the plain layout.
pub(crate) fn add<O: Op + Tagged + 'static>(
    reg: &mut Registry,
    name: &'static str,
    op: &'static str,
    build: Build<O, Limits, Lowered>,
) {
    reg.add::<O>(name, op, 0, DTypes::Any, Layout::PLAIN, build);
}

/// Every GPU kernel, registered once by the family modules.
pub(crate) fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut reg = Registry::default();
        movement::register(&mut reg);
        elementwise::register(&mut reg);
        conv::register(&mut reg);
        matmul::register(&mut reg);
        pool::register(&mut reg);
        normalize::register(&mut reg);
        reduce::register(&mut reg);
        resize::register(&mut reg);
        reg
    })
}

/// The node's inputs and outputs, checked.
pub(crate) struct Node<'a> {
    pub req: &'a KernelRequest<'a>,
}

impl<'a> Node<'a> {
    /// The node a builder is asked about.
    pub(crate) fn of(r: &'a Req) -> Node<'a> {
        Node { req: r.req }
    }

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

/// Lowers one node, or says why the GPU cannot run it.
pub(crate) fn lower(req: &KernelRequest, limits: &Limits) -> Result<Lowered, Reason> {
    check_types(req, limits)?;
    let selection = registry().select(req, limits);
    if let Some(l) = selection.kernel {
        return Ok(l);
    }
    // Entries are tried by priority, so the first refusal is the most specific kernel's.
    let refusal = selection
        .considered
        .into_iter()
        .find_map(|c| match c.verdict {
            Verdict::Rejected(why) => Some(why),
            Verdict::Picked | Verdict::NotTried => None,
        });
    Err(refusal.unwrap_or_else(|| format!("op {} has no GPU kernel", req.node.op.name())))
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

/// `fn act(x: f32) -> f32` for a fused epilogue activation (with the helpers it calls): the
/// WGSL of the standalone op, so each function is written once. An epilogue without WGSL
/// refuses the node with the op's reason.
pub(crate) fn activation_fn(a: Option<UnaryKind>) -> Result<String, Reason> {
    let (body, helpers) = match a {
        None => ("x".to_string(), ""),
        Some(kind) => elementwise::unary_expr(kind)?,
    };
    Ok(format!(
        "{helpers}fn act(x: f32) -> f32 {{ return {body}; }}\n"
    ))
}

pub(crate) fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

#[cfg(test)]
mod tests {
    //! Lowering decides without a GPU, so these run everywhere.

    use super::*;
    use ferrolite_core::ops::elementwise::unary::Unary;
    use ferrolite_core::ops::linalg::conv::Conv;
    use ferrolite_core::ops::nn::norm::InstanceNorm;
    use ferrolite_core::ops::nn::softmax::{Softmax, SoftmaxKind};
    use ferrolite_core::registry::{Considered, Selection};
    use ferrolite_core::{InferInput, Tensor, ValueId};

    const LIMITS: Limits = Limits {
        max_binding_bytes: 1 << 27,
    };

    /// Lowers one node and asks the registry about it; inputs are (dtype, shape, constant).
    fn lower_node(
        op: Arc<dyn Op>,
        inputs: &[(DType, Vec<usize>, Option<Tensor>)],
        out: &[usize],
    ) -> (Result<Lowered, Reason>, Selection<Lowered>) {
        let node = ferrolite_core::Node {
            name: "n".into(),
            op,
            inputs: (0..inputs.len()).map(|i| Some(ValueId(i))).collect(),
            outputs: vec![ValueId(inputs.len())],
        };
        let infer: Vec<Option<InferInput>> = inputs
            .iter()
            .map(|(dtype, shape, value)| {
                Some(InferInput {
                    dtype: *dtype,
                    shape,
                    value: value.as_ref(),
                })
            })
            .collect();
        let outputs = [TensorInfo::new(DType::F32, out.to_vec())];
        let req = KernelRequest {
            node: &node,
            inputs: &infer,
            outputs: &outputs,
            packs: ferrolite_core::prepacked::Prepacks::none(),
        };
        (lower(&req, &LIMITS), registry().select(&req, &LIMITS))
    }

    fn x(shape: &[usize]) -> (DType, Vec<usize>, Option<Tensor>) {
        (DType::F32, shape.to_vec(), None)
    }

    fn rejected(kernel: &'static str, why: &str) -> Vec<Considered> {
        vec![Considered {
            kernel,
            verdict: Verdict::Rejected(why.into()),
        }]
    }

    #[test]
    fn a_refused_node_gets_the_rejecting_entrys_reason() {
        let hardmax = Arc::new(Softmax {
            kind: SoftmaxKind::Hardmax,
            ..Default::default()
        });
        let (lowered, s) = lower_node(hardmax, &[x(&[2, 3])], &[2, 3]);
        assert_eq!(lowered.unwrap_err(), "Hardmax");
        assert_eq!(s.considered, rejected("softmax", "Hardmax"));

        let tan = Arc::new(Unary {
            kind: UnaryKind::Tan,
        });
        let (lowered, s) = lower_node(tan, &[x(&[4])], &[4]);
        assert_eq!(lowered.unwrap_err(), "op Tan has no GPU kernel");
        assert_eq!(s.considered, rejected("unary", "op Tan has no GPU kernel"));
    }

    #[test]
    fn an_epilogue_without_wgsl_refuses_the_conv() {
        let weights = Tensor::from_vec(&[2, 2, 3, 3], vec![0.5f32; 36]).unwrap();
        for (k, w) in [(3, Some(weights)), (1, None)] {
            // 3x3 runs the direct kernel, 1x1 the matmul one.
            let conv = Arc::new(Conv {
                activation: Some(UnaryKind::Tan),
                ..Default::default()
            });
            let w = (DType::F32, vec![2, 2, k, k], w);
            let out = [1, 2, 6 - k, 6 - k];
            let (lowered, s) = lower_node(conv, &[x(&[1, 2, 5, 5]), w], &out);
            assert_eq!(lowered.unwrap_err(), "op Tan has no GPU kernel", "{k}x{k}");
            assert_eq!(s.considered, rejected("conv", "op Tan has no GPU kernel"));
        }
    }

    #[test]
    fn an_op_without_entries_has_no_gpu_kernel_and_types_come_first() {
        let (lowered, s) = lower_node(
            Arc::new(InstanceNorm::default()),
            &[x(&[1, 2, 3]), x(&[2]), x(&[2])],
            &[1, 2, 3],
        );
        assert_eq!(
            lowered.unwrap_err(),
            "op InstanceNormalization has no GPU kernel"
        );
        assert!(s.considered.is_empty());
        // The f32 check runs before any entry is asked.
        let relu = Arc::new(Unary {
            kind: UnaryKind::Relu,
        });
        let (lowered, s) = lower_node(relu, &[(DType::F16, vec![4], None)], &[4]);
        assert_eq!(lowered.unwrap_err(), "input 0 is f16 (the GPU runs f32)");
        assert!(s.kernel.is_some());
    }

    #[test]
    fn epilogues_are_the_standalone_wgsl_and_clip_drops_infinite_bounds() {
        assert_eq!(
            activation_fn(None).unwrap(),
            "fn act(x: f32) -> f32 { return x; }\n"
        );
        assert_eq!(
            activation_fn(Some(UnaryKind::Relu)).unwrap(),
            "fn act(x: f32) -> f32 { return max(x, 0.0); }\n"
        );
        // Gelu calls the erf helper, which comes along.
        let gelu = activation_fn(Some(UnaryKind::Gelu { tanh: false })).unwrap();
        assert!(gelu.starts_with("fn erf_(x: f32)"), "{gelu}");
        let clip = |min, max| activation_fn(Some(UnaryKind::Clip { min, max })).unwrap();
        assert_eq!(
            clip(0.0, 6.0),
            format!(
                "fn act(x: f32) -> f32 {{ return min(max(x, {}), {}); }}\n",
                lit(0.0),
                lit(6.0)
            )
        );
        assert!(!clip(0.0, f32::INFINITY).contains("min("));
        assert!(!clip(f32::NEG_INFINITY, 1.0).contains("max("));
        assert_eq!(
            clip(f32::NEG_INFINITY, f32::INFINITY),
            "fn act(x: f32) -> f32 { return x; }\n"
        );
    }
}
