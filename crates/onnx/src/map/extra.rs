//! Mapping functions for the extra family: attention, losses, RMS normalization, rotary
//! embeddings, grid sampling and image/column rearrangements.

use super::{op, MapError, MapFn, MapResult, NodeCtx};
use ferrolite_core::ops::extra::attention::Attention;
use ferrolite_core::ops::extra::center_crop_pad::CenterCropPad;
use ferrolite_core::ops::extra::col2im::Col2Im;
use ferrolite_core::ops::extra::deform_conv::DeformConv;
use ferrolite_core::ops::extra::grid::{AffineGrid, GridMode, GridPadding, GridSample};
use ferrolite_core::ops::extra::loss::{Loss, Reduction};
use ferrolite_core::ops::extra::max_unpool::MaxUnpool;
use ferrolite_core::ops::extra::rms_norm::RmsNorm;
use ferrolite_core::ops::extra::roi_align::RoiAlign;
use ferrolite_core::ops::extra::rotary::RotaryEmbedding;
use ferrolite_core::ops::extra::swish::Swish;
use ferrolite_core::ops::extra::tensor_scatter::TensorScatter;

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("Attention", attention),
    ("NegativeLogLikelihoodLoss", nll_loss),
    ("SoftmaxCrossEntropyLoss", sce_loss),
    ("RMSNormalization", rms_norm),
    ("RotaryEmbedding", rotary_embedding),
    ("Swish", swish),
    ("DeformConv", deform_conv),
    ("Col2Im", col2im),
    ("CenterCropPad", center_crop_pad),
    ("MaxUnpool", max_unpool),
    ("RoiAlign", roi_align),
    ("GridSample", grid_sample),
    ("AffineGrid", affine_grid),
    ("TensorScatter", tensor_scatter),
];

fn heads(n: &NodeCtx, name: &str) -> Result<Option<usize>, MapError> {
    match n.int_opt(name)? {
        None => Ok(None),
        Some(h) if h > 0 => Ok(Some(h as usize)),
        Some(h) => Err(MapError::Invalid(format!(
            "{name} must be positive, got {h}"
        ))),
    }
}

fn attention(n: &NodeCtx) -> MapResult {
    let mode = n.int("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        return Err(MapError::Invalid(format!(
            "qk_matmul_output_mode {mode} is not 0-3"
        )));
    }
    op(Attention {
        is_causal: n.int("is_causal", 0)? != 0,
        q_num_heads: heads(n, "q_num_heads")?,
        kv_num_heads: heads(n, "kv_num_heads")?,
        qk_matmul_output_mode: mode,
        scale: n.float_opt("scale")?.map(f64::from),
        softcap: n.float("softcap", 0.0)? as f64,
        softmax_precision: n.int_opt("softmax_precision")?,
        num_outputs: n.n_outputs().max(1),
    })
}

fn loss(n: &NodeCtx, softmax: bool) -> MapResult {
    let r = n.string("reduction", "mean")?;
    let reduction = Reduction::parse(&r)
        .ok_or_else(|| MapError::Invalid(format!("unknown reduction '{r}'")))?;
    op(Loss {
        softmax,
        reduction,
        ignore_index: n.int_opt("ignore_index")?,
        num_outputs: n.n_outputs().max(1),
    })
}

fn nll_loss(n: &NodeCtx) -> MapResult {
    loss(n, false)
}

fn sce_loss(n: &NodeCtx) -> MapResult {
    loss(n, true)
}

fn rms_norm(n: &NodeCtx) -> MapResult {
    op(RmsNorm {
        axis: n.int("axis", -1)?,
        epsilon: n.float("epsilon", 1e-5)? as f64,
        stash_type: n.int("stash_type", 1)?,
    })
}

fn non_negative(n: &NodeCtx, name: &str) -> Result<usize, MapError> {
    let v = n.int(name, 0)?;
    usize::try_from(v)
        .map_err(|_| MapError::Invalid(format!("{name} must not be negative, got {v}")))
}

fn rotary_embedding(n: &NodeCtx) -> MapResult {
    op(RotaryEmbedding {
        interleaved: n.int("interleaved", 0)? != 0,
        rotary_embedding_dim: non_negative(n, "rotary_embedding_dim")?,
        num_heads: non_negative(n, "num_heads")?,
    })
}

fn swish(n: &NodeCtx) -> MapResult {
    op(Swish {
        alpha: n.float("alpha", 1.0)? as f64,
    })
}

fn tensor_scatter(n: &NodeCtx) -> MapResult {
    let circular = match n.string("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        m => return Err(MapError::Invalid(format!("unknown mode '{m}'"))),
    };
    op(TensorScatter {
        axis: n.int("axis", -2)?,
        circular,
    })
}

fn grid_sample(n: &NodeCtx) -> MapResult {
    // Opset 16 named the modes bilinear/bicubic; 20 renamed them linear/cubic.
    let mode = match n
        .string("mode", if n.opset < 20 { "bilinear" } else { "linear" })?
        .as_str()
    {
        "linear" | "bilinear" => GridMode::Linear,
        "nearest" => GridMode::Nearest,
        "cubic" | "bicubic" => GridMode::Cubic,
        m => return Err(MapError::Invalid(format!("unknown mode '{m}'"))),
    };
    let padding_mode = match n.string("padding_mode", "zeros")?.as_str() {
        "zeros" => GridPadding::Zeros,
        "border" => GridPadding::Border,
        "reflection" => GridPadding::Reflection,
        m => return Err(MapError::Invalid(format!("unknown padding_mode '{m}'"))),
    };
    op(GridSample {
        mode,
        padding_mode,
        align_corners: n.int("align_corners", 0)? != 0,
    })
}

fn affine_grid(n: &NodeCtx) -> MapResult {
    op(AffineGrid {
        align_corners: n.int("align_corners", 0)? != 0,
    })
}

fn center_crop_pad(n: &NodeCtx) -> MapResult {
    op(CenterCropPad {
        axes: n.ints("axes")?,
    })
}

fn max_unpool(n: &NodeCtx) -> MapResult {
    let kernel_shape = n
        .ints("kernel_shape")?
        .ok_or_else(|| MapError::Invalid("kernel_shape is required".into()))?;
    op(MaxUnpool {
        kernel_shape,
        pads: n.ints("pads")?.unwrap_or_default(),
        strides: n.ints("strides")?.unwrap_or_default(),
    })
}

fn roi_align(n: &NodeCtx) -> MapResult {
    // Opset 10 had no coordinate_transformation_mode and behaved as output_half_pixel.
    let default_ctm = if n.opset < 16 {
        "output_half_pixel"
    } else {
        "half_pixel"
    };
    let half_pixel = match n
        .string("coordinate_transformation_mode", default_ctm)?
        .as_str()
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        m => {
            return Err(MapError::Invalid(format!(
                "unknown coordinate_transformation_mode '{m}'"
            )))
        }
    };
    let max_mode = match n.string("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        m => return Err(MapError::Invalid(format!("unknown mode '{m}'"))),
    };
    let dim = |name: &str, d: i64| -> Result<usize, MapError> {
        let v = n.int(name, d)?;
        usize::try_from(v)
            .map_err(|_| MapError::Invalid(format!("{name} must not be negative, got {v}")))
    };
    op(RoiAlign {
        half_pixel,
        max_mode,
        output_height: dim("output_height", 1)?,
        output_width: dim("output_width", 1)?,
        sampling_ratio: dim("sampling_ratio", 0)?,
        spatial_scale: n.float("spatial_scale", 1.0)? as f64,
    })
}

fn col2im(n: &NodeCtx) -> MapResult {
    op(Col2Im {
        dilations: n.ints("dilations")?.unwrap_or_default(),
        pads: n.ints("pads")?.unwrap_or_default(),
        strides: n.ints("strides")?.unwrap_or_default(),
    })
}

fn deform_conv(n: &NodeCtx) -> MapResult {
    let count = |name: &str| -> Result<usize, MapError> {
        let v = n.int(name, 1)?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| MapError::Invalid(format!("{name} must be positive, got {v}")))
    };
    op(DeformConv {
        dilations: n.ints("dilations")?.unwrap_or_default(),
        group: count("group")?,
        kernel_shape: n.ints("kernel_shape")?.unwrap_or_default(),
        offset_group: count("offset_group")?,
        pads: n.ints("pads")?.unwrap_or_default(),
        strides: n.ints("strides")?.unwrap_or_default(),
    })
}
