//! Test helpers shared by the kernel tests: the kernel a provider picks for one op, and the
//! epilogues to cycle through.

use crate::CpuBackend;
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::plan::{Kernel, KernelProvider, KernelRequest, ReferenceKernel};
use ferrolite_core::{InferCtx, InferInput, Node, Op, Tensor, TensorInfo, ValueId};
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
    let offered = provider.kernel(&req).unwrap();
    // No kernel takes an empty data input or output (the registry leaves them to the
    // reference): check that, and answer with the reference as a plan would.
    if ferrolite_core::registry::empty_data(&req).is_some() {
        assert!(offered.is_none(), "a kernel took an empty tensor: {op:?}");
        return (Box::new(ReferenceKernel(op.clone())), outputs);
    }
    let kernel = offered.unwrap_or_else(|| panic!("no kernel for {op:?}"));
    (kernel, outputs)
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
