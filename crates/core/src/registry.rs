//! Kernel registries: which kernel runs a node, and why not the others.
//!
//! A backend registers its kernels per op type, each with a name, a priority and explicit
//! constraints: the dtypes it computes, the layout it reads (the name of a layout wrapper, see
//! [`Op::wrapped`], for an op wrapped by a layout pass), and the attribute and shape conditions its builder
//! checks (described in words, for [`Selection`]). [`KernelRegistry::select`] tries the
//! entries of the node's op type from the highest priority down and keeps the first that
//! builds; the others are reported with the reason they were passed over.
//!
//! The registry is generic over the backend's context `C` (the CPU's ISA and GEMM, say) and
//! over what an entry builds `K` (a [`Kernel`] for the CPU, a lowering for the GPU).

use crate::ops::codec::{built, Tagged};
use crate::plan::{Kernel, KernelRequest};
use crate::{DType, Op};
use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::fmt;

/// The layout of the tensors a kernel reads and writes: [`Layout::PLAIN`] for an op as the
/// model states it, or the name of the layout wrapper around it ([`Op::wrapped`]). Layouts are
/// names rather than a closed list, so each device keeps its own (the CPU's blocked and
/// channels-last ones are `crate::ops::layout::{NCHWC, NHWC}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Layout(pub &'static str);

impl Layout {
    /// The op as the model states it.
    pub const PLAIN: Layout = Layout("plain");
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// What an entry requires of the node's dtypes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DTypes {
    /// The builder checks them.
    Any,
    /// Every present input and every output is f32.
    AllF32,
    /// Every output is f32 (integer index inputs, say, are allowed).
    OutputsF32,
}

impl DTypes {
    fn check(self, req: &KernelRequest) -> Result<(), String> {
        let f32_outputs = req.outputs.iter().all(|o| o.dtype == DType::F32);
        let f32_inputs = req.inputs.iter().flatten().all(|i| i.dtype == DType::F32);
        match self {
            DTypes::Any => Ok(()),
            DTypes::AllF32 if f32_inputs && f32_outputs => Ok(()),
            DTypes::OutputsF32 if f32_outputs => Ok(()),
            DTypes::AllF32 => Err("needs f32 inputs and outputs".into()),
            DTypes::OutputsF32 => Err("needs f32 outputs".into()),
        }
    }
}

/// What the builder of an entry sees.
pub struct Request<'r, 'a, C> {
    pub req: &'r KernelRequest<'a>,
    /// The backend's context (its ISA, its GEMM, its limits).
    pub cx: &'r C,
    /// The layout wrapper around the node's op when the entry's layout is not
    /// [`Layout::PLAIN`] ([`Op::wrapped`]); the builder reads its own wrapper's fields from it.
    pub wrapper: Option<&'r dyn Op>,
}

/// Why no kernel takes the node, when its data input (input 0) or an output holds no values.
/// CPU kernels cut their data into rows, planes and chunks, and an empty one has nothing to cut
/// (a chunk size of 0 panics); the reference implementation handles empty tensors, at no cost.
/// Devices that compile whole subgraphs handle them themselves and select as usual.
pub fn empty_data(req: &KernelRequest) -> Option<&'static str> {
    let empty = |shape: &[usize]| shape.contains(&0);
    let input = req.inputs.first().and_then(Option::as_ref);
    (input.is_some_and(|x| empty(x.shape)) || req.outputs.iter().any(|o| empty(&o.shape)))
        .then_some("its data input or an output is empty: the reference implementation runs it")
}

/// A builder: the kernel, or the reason it does not handle this node.
pub type Build<O, C, K> = fn(&O, &Request<C>) -> Result<K, String>;

type ErasedBuild<C, K> = Box<dyn Fn(&dyn Any, &Request<C>) -> Result<K, String> + Send + Sync>;

/// One registered kernel.
pub struct Entry<C, K> {
    pub name: &'static str,
    pub op: &'static str,
    pub priority: i32,
    pub dtypes: DTypes,
    pub layout: Layout,
    build: ErasedBuild<C, K>,
}

/// How an entry fared for one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Picked,
    Rejected(String),
    /// A higher-priority entry was picked first.
    NotTried,
}

/// One line of a selection: an entry and its verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Considered {
    pub kernel: &'static str,
    pub verdict: Verdict,
}

impl fmt::Display for Considered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict {
            Verdict::Picked => write!(f, "{}: picked", self.kernel),
            Verdict::Rejected(why) => write!(f, "{}: {why}", self.kernel),
            Verdict::NotTried => write!(f, "{}: not tried (lower priority)", self.kernel),
        }
    }
}

/// The answer of [`KernelRegistry::select`].
pub struct Selection<K> {
    pub kernel: Option<K>,
    /// Every entry registered for the node's op type and layout, in priority order.
    pub considered: Vec<Considered>,
}

/// Kernels by op type and layout, each list in priority order. A B-tree rather than a hash
/// map: registries live in statics, and a hash table's pointer into the middle of its
/// allocation makes leak checkers report the whole registry as possibly lost.
pub struct KernelRegistry<C, K> {
    by_op: BTreeMap<(TypeId, Layout), Vec<Entry<C, K>>>,
}

impl<C, K> Default for KernelRegistry<C, K> {
    fn default() -> Self {
        KernelRegistry {
            by_op: BTreeMap::new(),
        }
    }
}

impl<C: 'static, K: 'static> KernelRegistry<C, K> {
    /// Registers a kernel for op type `O` (`op` names it for listings). Nothing, in a build
    /// tailored to other ops ([`crate::ops::codec::built`]): the kernel's code is left out.
    // Inlined, so that in a tailored build the check below is known at the call site and the
    // build function it would have kept is dropped with it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn add<O: Op + Tagged + 'static>(
        &mut self,
        name: &'static str,
        op: &'static str,
        priority: i32,
        dtypes: DTypes,
        layout: Layout,
        build: Build<O, C, K>,
    ) -> &mut Self {
        if !const { built(O::TAG) } {
            return self;
        }
        let erased: ErasedBuild<C, K> = Box::new(move |op: &dyn Any, r: &Request<C>| {
            // The one typed look-up: entries are filed under `O`'s TypeId, so this holds for
            // every op `select` hands them.
            match op.downcast_ref::<O>() {
                Some(o) => build(o, r),
                None => Err("registered under another op type".into()),
            }
        });
        self.insert(
            TypeId::of::<O>(),
            Entry {
                name,
                op,
                priority,
                dtypes,
                layout,
                build: erased,
            },
        );
        self
    }

    /// Files an entry by priority. Out of [`KernelRegistry::add`], which is instantiated per op
    /// type: one copy of the sort rather than one per op.
    fn insert(&mut self, op: TypeId, entry: Entry<C, K>) {
        let list = self.by_op.entry((op, entry.layout)).or_default();
        list.push(entry);
        // Stable: equal priorities keep their registration order.
        list.sort_by_key(|e| -e.priority);
    }

    /// The kernel for a node: the first entry of its op type and layout, by priority, whose
    /// constraints hold and whose builder accepts the node.
    pub fn select(&self, req: &KernelRequest, cx: &C) -> Selection<K> {
        self.select_unless(req, cx, None)
    }

    /// [`KernelRegistry::select`], but none for a node whose data input or an output is empty
    /// (see [`empty_data`]): the CPU's choice, whose kernels cut their data into chunks.
    pub fn select_nonempty(&self, req: &KernelRequest, cx: &C) -> Selection<K> {
        self.select_unless(req, cx, empty_data(req))
    }

    /// Selects, or lists every entry as rejected for `declined`.
    fn select_unless(&self, req: &KernelRequest, cx: &C, declined: Option<&str>) -> Selection<K> {
        let op = req.node.op.as_ref();
        let (inner, layout, wrapper) = match op.wrapped() {
            Some((layout, inner)) => (inner, layout, Some(op)),
            None => (op, Layout::PLAIN, None),
        };
        let mut selection = Selection {
            kernel: None,
            considered: Vec::new(),
        };
        let Some(entries) = self.by_op.get(&(inner.as_any().type_id(), layout)) else {
            return selection;
        };
        let r = Request { req, cx, wrapper };
        for e in entries {
            let verdict = if let Some(why) = declined {
                Verdict::Rejected(why.into())
            } else if selection.kernel.is_some() {
                Verdict::NotTried
            } else {
                req.packs.set_kernel(e.name);
                match e
                    .dtypes
                    .check(req)
                    .and_then(|()| (e.build)(inner.as_any(), &r))
                {
                    Ok(k) => {
                        selection.kernel = Some(k);
                        Verdict::Picked
                    }
                    Err(why) => Verdict::Rejected(why),
                }
            };
            selection.considered.push(Considered {
                kernel: e.name,
                verdict,
            });
        }
        let picked = selection
            .considered
            .iter()
            .find(|c| matches!(c.verdict, Verdict::Picked))
            .map(|c| c.kernel);
        req.packs.keep_only(&req.node.name, picked);
        selection
    }

    /// Every entry, by op type then priority (for listings and docs).
    pub fn entries(&self) -> Vec<&Entry<C, K>> {
        let mut all: Vec<&Entry<C, K>> = self.by_op.values().flatten().collect();
        all.sort_by(|a, b| (a.op, a.layout, -a.priority).cmp(&(b.op, b.layout, -b.priority)));
        all
    }
}

/// A CPU-style registry: entries build kernels.
pub type Kernels<C> = KernelRegistry<C, Box<dyn Kernel>>;

/// Turns a builder's `Option` into a verdict: `None` means the node is outside `conditions`.
pub fn needs<K>(built: Option<K>, conditions: &str) -> Result<K, String> {
    built.ok_or_else(|| format!("needs {conditions}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::unary::{Unary, UnaryKind};
    use crate::ops::shape::transpose::Transpose;
    use crate::plan::ReferenceKernel;
    use crate::{InferInput, Node, TensorInfo, ValueId};
    use std::sync::Arc;

    fn node(op: Arc<dyn Op>) -> Node {
        Node {
            name: "n".into(),
            op,
            inputs: vec![Some(ValueId(0))],
            outputs: vec![ValueId(1)],
        }
    }

    fn pick(r: &Kernels<()>, op: Arc<dyn Op>, dtype: DType) -> Selection<Box<dyn Kernel>> {
        pick_shaped(r, op, dtype, &[4], &[4])
    }

    fn pick_shaped(
        r: &Kernels<()>,
        op: Arc<dyn Op>,
        dtype: DType,
        input: &[usize],
        output: &[usize],
    ) -> Selection<Box<dyn Kernel>> {
        let n = node(op);
        let inputs = [Some(InferInput {
            dtype,
            shape: input,
            value: None,
        })];
        let outputs = [TensorInfo::new(dtype, output.to_vec())];
        let req = KernelRequest {
            node: &n,
            inputs: &inputs,
            outputs: &outputs,
            packs: crate::prepacked::Prepacks::none(),
        };
        r.select_nonempty(&req, &())
    }

    fn reference(u: &Unary, _: &Request<()>) -> Result<Box<dyn Kernel>, String> {
        Ok(Box::new(ReferenceKernel(Arc::new(u.clone()))))
    }

    #[test]
    fn no_kernel_takes_an_empty_data_input_or_output() {
        let mut r = Kernels::<()>::default();
        r.add::<Unary>("any", "Unary", 0, DTypes::Any, Layout::PLAIN, reference);
        let relu: Arc<dyn Op> = Arc::new(Unary {
            kind: UnaryKind::Relu,
        });
        for (input, output) in [(&[2, 0, 3][..], &[2, 0, 3][..]), (&[4], &[0])] {
            let s = pick_shaped(&r, relu.clone(), DType::F32, input, output);
            assert!(s.kernel.is_none(), "{input:?} -> {output:?}");
            assert!(
                matches!(&s.considered[0].verdict, Verdict::Rejected(why) if why.contains("empty"))
            );
        }
        assert!(pick_shaped(&r, relu, DType::F32, &[1, 3], &[1, 3])
            .kernel
            .is_some());
    }

    #[test]
    fn picks_by_priority_and_says_why_not() {
        let mut r = Kernels::<()>::default();
        r.add::<Unary>("low", "Unary", 1, DTypes::AllF32, Layout::PLAIN, reference);
        r.add::<Unary>(
            "relu-only",
            "Unary",
            10,
            DTypes::AllF32,
            Layout::PLAIN,
            |u, r| needs((u.kind == UnaryKind::Relu).then(|| reference(u, r)), "Relu")?,
        );
        r.add::<Unary>("any", "Unary", 0, DTypes::Any, Layout::PLAIN, reference);
        let relu = Arc::new(Unary {
            kind: UnaryKind::Relu,
        });
        let s = pick(&r, relu, DType::F32);
        assert!(s.kernel.is_some());
        let v: Vec<String> = s.considered.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            v,
            [
                "relu-only: picked",
                "low: not tried (lower priority)",
                "any: not tried (lower priority)"
            ]
        );
        let exp = Arc::new(Unary {
            kind: UnaryKind::Exp,
        });
        let s = pick(&r, exp.clone(), DType::F32);
        assert_eq!(
            s.considered[0].verdict,
            Verdict::Rejected("needs Relu".into())
        );
        assert_eq!(s.considered[1].verdict, Verdict::Picked);
        // f64: the f32-only entries say so, the unconstrained one takes it.
        let s = pick(&r, exp, DType::F64);
        assert_eq!(
            s.considered[1].verdict,
            Verdict::Rejected("needs f32 inputs and outputs".into())
        );
        assert_eq!(s.considered[2].verdict, Verdict::Picked);
        // Another op type finds no entry at all.
        let t = Arc::new(Transpose { perm: None });
        let s = pick(&r, t, DType::F32);
        assert!(s.kernel.is_none() && s.considered.is_empty());
    }
}
