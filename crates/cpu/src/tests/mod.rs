//! The kernel tests: every optimised kernel against the core reference, over many shapes and
//! under every ISA the machine has. Each family's tests sit in its own file:
//! - [`linalg`]: convolutions, MatMul, Gemm;
//! - [`elementwise`]: element-wise, pooling, softmax, reductions, normalisation, movement,
//!   resize;
//! - [`int8`]: the integer kernels;
//! - [`prepacked`]: the weights kernels prepack.
//!
//! The blocked (NCHWc) kernels' tests are in `nchwc/tests.rs`, the GEMMs' with their code. The
//! helpers here are shared: the kernel a provider picks for one op, the check of a kernel
//! against the reference under each ISA, and the epilogues to cycle through.

mod elementwise;
mod int8;
mod linalg;
mod prepacked;

/// The ISAs the kernel tests run under: every one this CPU has ([`Isa::available`]), or,
/// where `FERROLITE_TEST_ISAS` names some (comma-separated, `Isa::name`s), those of them. Only
/// emulated runs narrow it (`scripts/arm-test`): under qemu the NEON and NEON dot-product tables
/// share every entry but the int8 GEMM's, and the portable code is the Rust that x86 runs.
pub(crate) fn tested_isas() -> Vec<Isa> {
    let all = Isa::available();
    match std::env::var("FERROLITE_TEST_ISAS") {
        Ok(names) if !names.trim().is_empty() => {
            let wanted: Vec<&str> = names.split(',').map(str::trim).collect();
            let isas: Vec<Isa> = all
                .into_iter()
                .filter(|i| wanted.contains(&i.name()))
                .collect();
            assert!(
                !isas.is_empty(),
                "FERROLITE_TEST_ISAS={names} names no ISA this CPU has"
            );
            isas
        }
        _ => all,
    }
}

use crate::{CpuBackend, Isa};
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::plan::{Kernel, KernelProvider, KernelRequest, ReferenceKernel};
use ferrolite_core::registry::Selection;
use ferrolite_core::{DType, InferCtx, InferInput, Node, Op, Tensor, TensorInfo, ValueId};
use std::sync::Arc;

/// The kernel `provider` offers for `op` on `inputs` (passed as constants, like weights, where
/// `constant[i]`), with the op's inferred output types. Panics when none is offered, except
/// where the data input or an output is empty: there the reference, and none may be offered.
pub(crate) fn kernel_for(
    provider: &CpuBackend,
    op: &Arc<dyn Op>,
    inputs: &[Option<Tensor>],
    constant: &[bool],
) -> (Box<dyn Kernel>, Vec<TensorInfo>) {
    let (selection, outputs, declined) = selection_for(provider, op, inputs, constant);
    let offered = selection.kernel;
    // No kernel takes an empty data input or output (the registry leaves them to the
    // reference): check that, and answer with the reference as a plan would.
    if declined {
        assert!(offered.is_none(), "a kernel took an empty tensor: {op:?}");
        return (Box::new(ReferenceKernel(op.clone())), outputs);
    }
    let kernel = offered.unwrap_or_else(|| panic!("no kernel for {op:?}"));
    (kernel, outputs)
}

/// The backend's selection for a one-node graph of `op` on `inputs` (`constant[i]`: input `i`
/// is a constant the builder sees), the node's output types, and whether the registry
/// declines every kernel for an empty tensor.
pub(crate) fn selection_for(
    provider: &CpuBackend,
    op: &Arc<dyn Op>,
    inputs: &[Option<Tensor>],
    constant: &[bool],
) -> (Selection<Box<dyn Kernel>>, Vec<TensorInfo>, bool) {
    let infer_inputs: Vec<Option<InferInput>> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.as_ref().map(|t| InferInput {
                dtype: t.dtype(),
                shape: t.shape(),
                value: constant.get(i).copied().unwrap_or(false).then_some(t),
            })
        })
        .collect();
    let outputs: Vec<TensorInfo> = op
        .infer(&InferCtx {
            inputs: &infer_inputs,
        })
        .unwrap();
    let node = Node {
        name: "n".into(),
        op: op.clone(),
        inputs: (0..inputs.len()).map(|i| Some(ValueId(i))).collect(),
        outputs: (0..outputs.len())
            .map(|i| ValueId(inputs.len() + i))
            .collect(),
    };
    let req = KernelRequest {
        node: &node,
        inputs: &infer_inputs,
        outputs: &outputs,
        packs: ferrolite_core::prepacked::Prepacks::none(),
    };
    let declined = ferrolite_core::registry::empty_data(&req).is_some();
    (provider.select(&req).unwrap(), outputs, declined)
}

/// No epilogue, then every activation the fusion passes fold into one (cycled through by the
/// tests), so a kind that becomes fusable is tested without an edit.
pub(crate) fn acts() -> Vec<Option<UnaryKind>> {
    let fused = UnaryKind::examples()
        .into_iter()
        .filter(|k| k.fuses_as_epilogue())
        .map(Some);
    std::iter::once(None).chain(fused).collect()
}

/// A seeded linear congruential generator: values in [-1, 1).
pub(crate) struct Lcg(pub(crate) u64);

impl Lcg {
    pub(crate) fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub(crate) fn tensor(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_vec(shape, (0..n).map(|_| self.next()).collect()).unwrap()
    }
}

/// Runs `op` through the CPU backend under every ISA this CPU has (constants where
/// `constant[i]`) and the reference; returns the kernel name, which must not depend on the
/// ISA. Panics when no kernel is offered or the results differ.
pub(crate) fn check(op: Arc<dyn Op>, inputs: &[Option<Tensor>], constant: &[bool]) -> String {
    let names: Vec<String> = check_each(op, inputs, constant)
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    assert!(names.iter().all(|n| *n == names[0]), "{names:?}");
    names[0].clone()
}

/// As [`check`], for kernels chosen per ISA: the kernel name under each ISA.
pub(crate) fn check_each(
    op: Arc<dyn Op>,
    inputs: &[Option<Tensor>],
    constant: &[bool],
) -> Vec<(Isa, String)> {
    tested_isas()
        .into_iter()
        .map(|isa| {
            let name = check_with(CpuBackend::new(isa), op.clone(), inputs, constant);
            (isa, name)
        })
        .collect()
}

fn check_with(
    provider: CpuBackend,
    op: Arc<dyn Op>,
    inputs: &[Option<Tensor>],
    constant: &[bool],
) -> String {
    let (kernel, outputs) = kernel_for(&provider, &op, inputs, constant);
    let refs: Vec<Option<&Tensor>> = inputs.iter().map(|t| t.as_ref()).collect();
    let expected = op.eval(&refs).unwrap().remove(0);
    // Stale NaNs in the output buffer must not leak into the result.
    let mut outs = vec![Tensor::full(DType::F32, &outputs[0].shape, f64::NAN).unwrap()];
    kernel.run_alone(&refs, &mut outs).unwrap();
    assert_eq!(outs[0].shape(), expected.shape(), "{op:?}");
    let (got, want) = (
        outs[0].as_slice::<f32>().unwrap(),
        expected.as_slice::<f32>().unwrap(),
    );
    let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * scale,
            "{op:?} {:?}: element {i}: got {g}, want {w}",
            inputs
                .iter()
                .map(|t| t.as_ref().map(|t| t.shape().to_vec()))
                .collect::<Vec<_>>()
        );
    }
    kernel.name().to_string()
}

/// A rayon pool of `threads` workers, for running a kernel at a given thread count.
pub(crate) fn thread_pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}
