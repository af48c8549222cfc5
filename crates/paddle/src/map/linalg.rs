//! Mapping functions for linear-algebra ops: convolutions and matrix products.

use super::{invalid, nchw, onnx_pads, Ctx, MapError, MapFn, MapResult};
use ferrolite_core::frontend::{group_count, usizes};
use ferrolite_core::ops::elementwise::{Binary, BinaryKind};
use ferrolite_core::ops::linalg::conv::Conv;
use ferrolite_core::ops::linalg::conv_geometry::{AutoPad as ConvAutoPad, ConvParams};
use ferrolite_core::ops::linalg::conv_transpose::ConvTranspose;
use ferrolite_core::ops::linalg::matmul::MatMul;
use ferrolite_core::ops::shape::{
    concat::Concat, flatten::Flatten, reshape::Reshape, shape_of::Shape, transpose::Transpose,
};
use ferrolite_core::{DType, ValueId};

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("conv2d", conv2d),
    ("depthwise_conv2d", conv2d),
    ("conv2d_transpose", conv2d_transpose),
    ("depthwise_conv2d_transpose", conv2d_transpose),
    ("matmul_v2", matmul_v2),
    ("matmul", matmul),
    ("bmm", bmm),
    ("mul", mul),
];

/// Conv geometry from `strides`, `paddings`, `dilations`, `padding_algorithm`.
fn conv_params(c: &Ctx) -> Result<ConvParams, MapError> {
    nchw(c)?;
    let strides = c.ints("strides")?.unwrap_or_else(|| vec![1, 1]);
    let mut dilations = c.ints("dilations")?.unwrap_or_else(|| vec![1, 1]);
    let pads = onnx_pads(&c.ints("paddings")?.unwrap_or_else(|| vec![0, 0]))?;
    let algo = c.string("padding_algorithm", "EXPLICIT")?;
    let auto_pad = match algo.as_str() {
        "EXPLICIT" | "" => ConvAutoPad::NotSet,
        // Paddle's SAME ignores dilation and puts an odd pixel at the end.
        "SAME" => {
            dilations = vec![1; dilations.len()];
            ConvAutoPad::SameUpper
        }
        "VALID" => ConvAutoPad::Valid,
        other => return Err(invalid(format!("unknown padding_algorithm '{other}'"))),
    };
    Ok(ConvParams {
        kernel_shape: None,
        strides: Some(usizes(&strides, "'strides'")?),
        dilations: Some(usizes(&dilations, "'dilations'")?),
        pads: Some(usizes(&pads, "'paddings'")?),
        auto_pad,
    })
}

fn groups(c: &Ctx) -> Result<usize, MapError> {
    group_count(c.int("groups", 1)?, "groups")
}

fn conv2d(c: &mut Ctx) -> MapResult {
    let x = c.input("Input")?;
    let w = c.input("Filter")?;
    let params = conv_params(c)?;
    let group = groups(c)?;
    let mut ins = vec![x, w];
    if let Some(b) = c.input_opt("Bias")? {
        ins.push(b);
    }
    let out = c.add(
        Conv {
            params,
            group,
            activation: None,
        },
        &ins,
    )?;
    c.set("Output", out);
    Ok(())
}

fn conv2d_transpose(c: &mut Ctx) -> MapResult {
    let x = c.input("Input")?;
    let w = c.input("Filter")?;
    let params = conv_params(c)?;
    let group = groups(c)?;
    let output_padding = match c.ints("output_padding")? {
        Some(v) if !v.is_empty() => Some(usizes(&v, "'output_padding'")?),
        _ => None,
    };
    let output_shape = match c.ints("output_size")? {
        Some(v) if !v.is_empty() => Some(usizes(&v, "'output_size'")?),
        _ => None,
    };
    let out = c.add(
        ConvTranspose {
            params,
            group,
            activation: None,
            output_padding,
            output_shape,
        },
        &[x, w],
    )?;
    c.set("Output", out);
    Ok(())
}

/// Swaps the last two axes of a value of rank `rank` (nothing for rank < 2).
fn transpose_last2(c: &mut Ctx, v: ValueId, rank: usize) -> Result<ValueId, MapError> {
    if rank < 2 {
        return Ok(v);
    }
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(rank - 1, rank - 2);
    c.add(Transpose { perm: Some(perm) }, &[v])
}

fn matmul_with(c: &mut Ctx, tx: bool, ty: bool, alpha: f64) -> MapResult {
    let mut x = c.input("X")?;
    let mut y = c.input("Y")?;
    if tx {
        let r = c.in_rank("X")?;
        x = transpose_last2(c, x, r)?;
    }
    if ty {
        let r = c.in_rank("Y")?;
        y = transpose_last2(c, y, r)?;
    }
    let mut out = c.add(MatMul, &[x, y])?;
    if alpha != 1.0 {
        let dt = c.in_dtype("X").unwrap_or(DType::F32);
        let a = c.scalar(dt, alpha)?;
        out = c.add(Binary::new(BinaryKind::Mul), &[out, a])?;
    }
    c.set_out(out)
}

fn matmul_v2(c: &mut Ctx) -> MapResult {
    let tx = c.bool("trans_x", false)?;
    let ty = c.bool("trans_y", false)?;
    matmul_with(c, tx, ty, 1.0)
}

fn matmul(c: &mut Ctx) -> MapResult {
    let tx = c.bool("transpose_X", false)?;
    let ty = c.bool("transpose_Y", false)?;
    let alpha = c.float("alpha", 1.0)?;
    matmul_with(c, tx, ty, alpha)
}

fn bmm(c: &mut Ctx) -> MapResult {
    matmul_with(c, false, false, 1.0)
}

/// `mul`: X flattened to 2-D at `x_num_col_dims`, Y at `y_num_col_dims`, and the product
/// reshaped to `X.dims[..xn] ++ Y.dims[yn..]`.
fn mul(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let y = c.input("Y")?;
    let xn = c.int("x_num_col_dims", 1)?;
    let yn = c.int("y_num_col_dims", 1)?;
    let xr = c.in_rank("X")? as i64;
    let yr = c.in_rank("Y")? as i64;
    if !(1..xr.max(2)).contains(&xn) || !(1..yr.max(2)).contains(&yn) {
        return Err(invalid(format!(
            "num_col_dims ({xn}, {yn}) out of range for ranks ({xr}, {yr})"
        )));
    }
    let x2 = if xr == 2 && xn == 1 {
        x
    } else {
        c.add(Flatten { axis: xn }, &[x])?
    };
    let y2 = if yr == 2 && yn == 1 {
        y
    } else {
        c.add(Flatten { axis: yn }, &[y])?
    };
    let mut out = c.add(MatMul, &[x2, y2])?;
    if !(xr == 2 && xn == 1 && yr == 2 && yn == 1) {
        let parts = [
            c.add(
                Shape {
                    start: 0,
                    end: Some(xn),
                },
                &[x],
            )?,
            c.add(
                Shape {
                    start: yn,
                    end: None,
                },
                &[y],
            )?,
        ];
        let s = c.add(Concat { axis: 0 }, &parts)?;
        out = c.add(Reshape { allowzero: false }, &[out, s])?;
    }
    c.set_out(out)
}
