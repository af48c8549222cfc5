//! Mapping functions for linear-algebra ops: convolutions, matrix products, Einsum.

use super::{op, MapError, MapFn, MapResult, NodeCtx};
use ferrolite_core::frontend::{group_count, usizes};
use ferrolite_core::ops::linalg::conv::{Conv, ConvInteger};
use ferrolite_core::ops::linalg::conv_geometry::{AutoPad, ConvParams};
use ferrolite_core::ops::linalg::conv_transpose::ConvTranspose;
use ferrolite_core::ops::linalg::einsum::Einsum;
use ferrolite_core::ops::linalg::gemm::Gemm;
use ferrolite_core::ops::linalg::matmul::{MatMul, MatMulInteger};

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("Conv", conv),
    ("ConvInteger", conv_integer),
    ("ConvTranspose", conv_transpose),
    ("MatMul", matmul),
    ("MatMulInteger", matmul_integer),
    ("Gemm", gemm),
    ("Einsum", einsum),
];

/// A list of non-negative ints (sizes, strides, pads).
fn sizes(n: &NodeCtx, name: &str) -> Result<Option<Vec<usize>>, MapError> {
    match n.ints(name)? {
        None => Ok(None),
        Some(v) => usizes(&v, &format!("attribute '{name}'")).map(Some),
    }
}

pub(super) fn conv_params(n: &NodeCtx) -> Result<ConvParams, MapError> {
    let ap = n.string("auto_pad", "NOTSET")?;
    let auto_pad =
        AutoPad::parse(&ap).ok_or_else(|| MapError::Invalid(format!("unknown auto_pad '{ap}'")))?;
    Ok(ConvParams {
        kernel_shape: sizes(n, "kernel_shape")?,
        strides: sizes(n, "strides")?,
        dilations: sizes(n, "dilations")?,
        pads: sizes(n, "pads")?,
        auto_pad,
    })
}

pub(super) fn group(n: &NodeCtx) -> Result<usize, MapError> {
    group_count(n.int("group", 1)?, "group")
}

fn conv(n: &NodeCtx) -> MapResult {
    op(Conv {
        params: conv_params(n)?,
        group: group(n)?,
        activation: None,
    })
}

fn conv_integer(n: &NodeCtx) -> MapResult {
    op(ConvInteger {
        params: conv_params(n)?,
        group: group(n)?,
    })
}

fn conv_transpose(n: &NodeCtx) -> MapResult {
    op(ConvTranspose {
        params: conv_params(n)?,
        group: group(n)?,
        activation: None,
        output_padding: sizes(n, "output_padding")?,
        output_shape: sizes(n, "output_shape")?,
    })
}

fn matmul(_n: &NodeCtx) -> MapResult {
    op(MatMul)
}

fn matmul_integer(_n: &NodeCtx) -> MapResult {
    op(MatMulInteger)
}

fn gemm(n: &NodeCtx) -> MapResult {
    // Opsets before 7 had a `broadcast` attribute; C broadcasts unidirectionally either way.
    op(Gemm {
        alpha: n.float("alpha", 1.0)?,
        beta: n.float("beta", 1.0)?,
        trans_a: n.int("transA", 0)? != 0,
        trans_b: n.int("transB", 0)? != 0,
        activation: None,
    })
}

fn einsum(n: &NodeCtx) -> MapResult {
    let equation = n
        .string_opt("equation")?
        .ok_or_else(|| MapError::Invalid("Einsum needs the 'equation' attribute".into()))?;
    op(Einsum { equation })
}

#[cfg(test)]
mod tests {
    use super::super::{lookup, NodeCtx};
    use crate::proto::{ModelProto, TensorProto};
    use ferrolite_core::Tensor;
    use prost::Message;
    use std::path::Path;

    const NODE_TESTS: &str = "/tmp/onnxwheel/ex/onnx/backend/test/data/node";

    fn load(path: &Path) -> Tensor {
        let bytes = std::fs::read(path).unwrap();
        crate::tensor::decode(&TensorProto::decode(bytes.as_slice()).unwrap(), None).unwrap()
    }

    /// Maps the single node of an ONNX backend test and checks the reference output.
    fn run_node_test(dir: &Path) -> Result<(), String> {
        let model = ModelProto::decode(std::fs::read(dir.join("model.onnx")).unwrap().as_slice())
            .map_err(|e| e.to_string())?;
        let graph = model.graph.as_ref().ok_or("no graph")?;
        let node = &graph.node[0];
        let opset = model
            .opset_import
            .iter()
            .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
            .map_or(1, |o| o.version);
        let map = lookup(&node.op_type).ok_or("not mapped")?;
        let op = map(&NodeCtx { node, opset }).map_err(|e| format!("{e:?}"))?;
        let data = dir.join("test_data_set_0");
        let by_name: Vec<(String, Tensor)> = graph
            .input
            .iter()
            .enumerate()
            .map(|(i, v)| (v.name.clone(), load(&data.join(format!("input_{i}.pb")))))
            .collect();
        let inputs: Vec<Option<&Tensor>> = node
            .input
            .iter()
            .map(|n| by_name.iter().find(|(k, _)| k == n).map(|(_, t)| t))
            .collect();
        let got = op.eval(&inputs).map_err(|e| e.to_string())?.remove(0);
        let want = load(&data.join("output_0.pb"));
        if got.dtype() != want.dtype() || got.shape() != want.shape() {
            return Err(format!("got {got:?}, want {want:?}"));
        }
        for (g, w) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
            if (g - w).abs() > 1e-4 * w.abs().max(1.0) {
                return Err(format!("value {g} vs {w}"));
            }
        }
        Ok(())
    }

    #[test]
    fn onnx_backend_node_tests() {
        let root = Path::new(NODE_TESTS);
        if !root.is_dir() {
            eprintln!("skipping: {NODE_TESTS} not present");
            return;
        }
        let prefixes = [
            "test_conv_",
            "test_basic_conv_",
            "test_convtranspose",
            "test_matmul_",
            "test_gemm_",
            "test_einsum_",
            "test_matmulinteger",
            "test_convinteger",
        ];
        let mut failures = Vec::new();
        let mut ran = 0;
        let mut dirs: Vec<_> = std::fs::read_dir(root).unwrap().flatten().collect();
        dirs.sort_by_key(|d| d.file_name());
        for d in dirs {
            let name = d.file_name().to_string_lossy().into_owned();
            if !prefixes.iter().any(|p| name.starts_with(p)) {
                continue;
            }
            ran += 1;
            if let Err(e) = run_node_test(&d.path()) {
                failures.push(format!("{name}: {e}"));
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {ran} failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
        assert!(ran >= 40, "only {ran} tests found");
    }
}
