//! Mapping functions for linear-algebra ops: convolutions, matrix products, Einsum.

use super::{op, MapError, MapFn, MapResult, NodeCtx};
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
        Some(v) => v
            .iter()
            .map(|&x| {
                usize::try_from(x).map_err(|_| {
                    MapError::Invalid(format!("attribute '{name}' has the negative value {x}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
    }
}

fn conv_params(n: &NodeCtx) -> Result<ConvParams, MapError> {
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

fn group(n: &NodeCtx) -> Result<usize, MapError> {
    let g = n.int("group", 1)?;
    usize::try_from(g)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| MapError::Invalid(format!("group must be at least 1, got {g}")))
}

fn conv(n: &NodeCtx) -> MapResult {
    op(Conv {
        params: conv_params(n)?,
        group: group(n)?,
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
    })
}

fn einsum(n: &NodeCtx) -> MapResult {
    let equation = n
        .string_opt("equation")?
        .ok_or_else(|| MapError::Invalid("Einsum needs the 'equation' attribute".into()))?;
    op(Einsum { equation })
}
