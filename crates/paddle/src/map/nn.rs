//! Mapping functions for normalization, pooling, interpolation (Resize), softmax, reductions,
//! arg max/min, top-k and cumsum.

use super::{invalid, nchw, onnx_pads, unsupported, Ctx, MapError, MapFn, MapResult};
use ferrolite_core::ops::elementwise::Cast;
use ferrolite_core::ops::nn::cumsum::CumSum;
use ferrolite_core::ops::nn::geometry::AutoPad;
use ferrolite_core::ops::nn::norm::{BatchNorm, GroupNorm, InstanceNorm, LayerNorm};
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};
use ferrolite_core::ops::nn::reduce::{ArgReduce, Reduce, ReduceKind};
use ferrolite_core::ops::nn::resize::{CoordMode, NearestMode, Resize, ResizeMode};
use ferrolite_core::ops::nn::softmax::{Softmax, SoftmaxKind};
use ferrolite_core::ops::nn::topk::TopK;
use ferrolite_core::ops::shape::{concat::Concat, shape_of::Shape};
use ferrolite_core::{DType, Tensor, ValueId};

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("batch_norm", batch_norm),
    ("layer_norm", layer_norm),
    ("instance_norm", instance_norm),
    ("group_norm", group_norm),
    ("pool2d", pool2d),
    ("nearest_interp_v2", nearest_interp_v2),
    ("nearest_interp", nearest_interp_v2),
    ("bilinear_interp_v2", bilinear_interp_v2),
    ("bilinear_interp", bilinear_interp_v2),
    ("softmax", softmax),
    ("log_softmax", log_softmax),
    ("reduce_sum", reduce_sum),
    ("reduce_mean", reduce_mean),
    ("reduce_max", reduce_max),
    ("reduce_min", reduce_min),
    ("reduce_prod", reduce_prod),
    ("mean", mean),
    ("arg_max", arg_max),
    ("arg_min", arg_min),
    ("top_k_v2", top_k_v2),
    ("cumsum", cumsum),
];

fn batch_norm(c: &mut Ctx) -> MapResult {
    let layout = c.string("data_layout", "NCHW")?;
    if !matches!(layout.as_str(), "NCHW" | "AnyLayout") {
        return Err(unsupported(format!(
            "batch_norm with data_layout '{layout}'"
        )));
    }
    let ins = [
        c.input("X")?,
        c.input("Scale")?,
        c.input("Bias")?,
        c.input("Mean")?,
        c.input("Variance")?,
    ];
    let epsilon = c.float("epsilon", 1e-5)?;
    let out = c.add(BatchNorm { epsilon }, &ins)?;
    c.set("Y", out);
    Ok(())
}

/// Paddle normalizes over the axes from `begin_norm_axis` on, with Scale and Bias flattened
/// to one dimension: they are reshaped to the normalized dims.
fn layer_norm(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let xd = c
        .in_dims("X")
        .ok_or_else(|| unsupported("layer_norm with an undeclared rank of X"))?;
    let rank = xd.len() as i64;
    let begin = c.int("begin_norm_axis", 1)?;
    let begin = if begin < 0 { begin + rank } else { begin };
    if !((0..rank).contains(&begin) || (rank == 0 && begin == 0)) {
        return Err(invalid(format!(
            "begin_norm_axis {begin} out of range for rank {rank}"
        )));
    }
    let norm_dims: Vec<i64> = xd[begin as usize..].to_vec();
    let epsilon = c.float("epsilon", 1e-5)?;
    let dt = c.in_dtype("X").unwrap_or(DType::F32);
    let fit = |c: &mut Ctx, v: ValueId| -> Result<ValueId, MapError> {
        if norm_dims.len() == 1 {
            return Ok(v);
        }
        if norm_dims.iter().any(|&d| d < 0) {
            return Err(unsupported(
                "layer_norm over several axes with unknown sizes",
            ));
        }
        c.reshape_to(v, &norm_dims)
    };
    let scale = match c.input_opt("Scale")? {
        Some(s) => fit(c, s)?,
        None => {
            let t = Tensor::full(dt, &[1], 1.0).map_err(|e| invalid(e.to_string()))?;
            c.konst(t)
        }
    };
    let mut ins = vec![Some(x), Some(scale)];
    if let Some(b) = c.input_opt("Bias")? {
        ins.push(Some(fit(c, b)?));
    }
    let out = c.add_n(
        LayerNorm {
            axis: begin,
            epsilon,
            stash_type: 1,
            num_outputs: 1,
        },
        &ins,
        1,
    )?[0];
    c.set("Y", out);
    Ok(())
}

fn instance_norm(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let (Some(s), Some(b)) = (c.input_opt("Scale")?, c.input_opt("Bias")?) else {
        return Err(unsupported("instance_norm without Scale and Bias"));
    };
    let epsilon = c.float("epsilon", 1e-5)?;
    let out = c.add(InstanceNorm { epsilon }, &[x, s, b])?;
    c.set("Y", out);
    Ok(())
}

fn group_norm(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let (Some(s), Some(b)) = (c.input_opt("Scale")?, c.input_opt("Bias")?) else {
        return Err(unsupported("group_norm without Scale and Bias"));
    };
    nchw(c).or_else(|_| {
        let l = c.string("data_layout", "NCHW")?;
        if l == "NCHW" {
            Ok(())
        } else {
            Err(unsupported(format!("group_norm with data_layout '{l}'")))
        }
    })?;
    let num_groups = c.int("groups", 1)?;
    let epsilon = c.float("epsilon", 1e-5)?;
    let out = c.add(
        GroupNorm {
            num_groups,
            epsilon,
            per_group_affine: false,
        },
        &[x, s, b],
    )?;
    c.set("Y", out);
    Ok(())
}

fn nearest_interp_v2(c: &mut Ctx) -> MapResult {
    interp(c, ResizeMode::Nearest)
}

fn bilinear_interp_v2(c: &mut Ctx) -> MapResult {
    interp(c, ResizeMode::Linear)
}

/// `*_interp(_v2)` as a Resize. Output size, by priority: the `SizeTensor` list, the `OutSize`
/// tensor, the `out_h`/`out_w` attributes, the `scale` attribute.
fn interp(c: &mut Ctx, mode: ResizeMode) -> MapResult {
    nchw(c)?;
    let x = c.input("X")?;
    let align_corners = c.bool("align_corners", false)?;
    // Paddle's align_mode 0 is half-pixel sampling (bilinear only); 1 is asymmetric.
    let half_pixel = mode == ResizeMode::Linear && c.int("align_mode", 1)? == 0;
    let coordinate_transformation_mode = if align_corners {
        CoordMode::AlignCorners
    } else if half_pixel {
        CoordMode::HalfPixel
    } else {
        CoordMode::Asymmetric
    };
    // Paddle's nearest rounds half up with align_corners and truncates otherwise.
    let nearest_mode = if align_corners {
        NearestMode::RoundPreferCeil
    } else {
        NearestMode::Floor
    };
    let resize = Resize {
        mode,
        coordinate_transformation_mode,
        nearest_mode,
        ..Default::default()
    };
    if c.input_opt("Scale")?.is_some() {
        return Err(unsupported("interpolation with a Scale tensor input"));
    }
    let list = c.inputs("SizeTensor")?;
    let hw = if !list.is_empty() {
        Some(c.list_to_i64(&list)?)
    } else if let Some(s) = c.input_opt("OutSize")? {
        Some(c.to_i64(s)?)
    } else {
        let (h, w) = (c.int("out_h", -1)?, c.int("out_w", -1)?);
        if h > 0 && w > 0 {
            Some(c.i64s(&[h, w])?)
        } else {
            None
        }
    };
    let out = match hw {
        Some(hw) => {
            let nc = c.add(
                Shape {
                    start: 0,
                    end: Some(2),
                },
                &[x],
            )?;
            let sizes = c.add(Concat { axis: 0 }, &[nc, hw])?;
            c.add_n(resize, &[Some(x), None, None, Some(sizes)], 1)?[0]
        }
        None => {
            let scale = c.floats("scale")?.unwrap_or_default();
            let (sh, sw) = match scale.as_slice() {
                [s] => (*s, *s),
                [h, w] => (*h, *w),
                _ => return Err(invalid("interpolation needs an output size or a scale")),
            };
            if sh <= 0.0 || sw <= 0.0 {
                return Err(invalid(format!("scale {scale:?} must be positive")));
            }
            let scales = Tensor::from_vec(&[4], vec![1.0f32, 1.0, sh as f32, sw as f32])
                .map_err(|e| invalid(e.to_string()))?;
            let scales = c.konst(scales);
            c.add_n(resize, &[Some(x), None, Some(scales), None], 1)?[0]
        }
    };
    c.set_out(out)
}

fn pool2d(c: &mut Ctx) -> MapResult {
    nchw(c)?;
    let x = c.input("X")?;
    let kind = match c.string("pooling_type", "max")?.as_str() {
        "max" => PoolKind::Max,
        "avg" => PoolKind::Average,
        t => return Err(unsupported(format!("pooling_type '{t}'"))),
    };
    let mut ksize = c
        .ints("ksize")?
        .ok_or_else(|| invalid("attribute 'ksize' is required"))?;
    let mut strides = c.ints("strides")?.unwrap_or_else(|| vec![1, 1]);
    let mut pads = onnx_pads(&c.ints("paddings")?.unwrap_or_else(|| vec![0, 0]))?;
    let global = c.bool("global_pooling", false)?;
    let adaptive = c.bool("adaptive", false)?;
    if global || (adaptive && ksize.iter().all(|&k| k == 1)) {
        let out = c.add(GlobalPool { kind, p: 2.0 }, &[x])?;
        return c.set_out(out);
    }
    if adaptive {
        // Adaptive pooling with output sizes dividing the input is a plain pooling.
        let xd = c.in_dims("X").unwrap_or_default();
        if xd.len() != 4 || xd[2] <= 0 || xd[3] <= 0 {
            return Err(unsupported("adaptive pool2d with unknown input size"));
        }
        let mut k = Vec::new();
        for (i, &o) in ksize.iter().enumerate() {
            let n = xd[2 + i];
            if o <= 0 || n % o != 0 {
                return Err(unsupported(format!(
                    "adaptive pool2d from {n} to {o} (not a divisor)"
                )));
            }
            k.push(n / o);
        }
        strides = k.clone();
        ksize = k;
        pads = vec![0; 4];
    }
    let auto_pad = match c.string("padding_algorithm", "EXPLICIT")?.as_str() {
        "EXPLICIT" | "" => AutoPad::NotSet,
        "SAME" => AutoPad::SameUpper,
        "VALID" => AutoPad::Valid,
        other => return Err(invalid(format!("unknown padding_algorithm '{other}'"))),
    };
    let out = c.add(
        Pool {
            kind,
            kernel_shape: ksize,
            strides,
            pads,
            dilations: Vec::new(),
            auto_pad,
            ceil_mode: c.bool("ceil_mode", false)?,
            count_include_pad: !c.bool("exclusive", true)?,
            storage_order: 0,
            p: 2.0,
            with_indices: false,
        },
        &[x],
    )?;
    c.set_out(out)
}

fn softmax_kind(c: &mut Ctx, kind: SoftmaxKind) -> MapResult {
    let x = c.input("X")?;
    let axis = c.int("axis", -1)?;
    let out = c.add(
        Softmax {
            kind,
            axis,
            legacy_2d: false,
        },
        &[x],
    )?;
    c.set_out(out)
}
fn softmax(c: &mut Ctx) -> MapResult {
    softmax_kind(c, SoftmaxKind::Softmax)
}
fn log_softmax(c: &mut Ctx) -> MapResult {
    softmax_kind(c, SoftmaxKind::LogSoftmax)
}

fn reduce(c: &mut Ctx, kind: ReduceKind) -> MapResult {
    let x = c.input("X")?;
    let all = c.bool("reduce_all", false)?;
    let dims = c.ints("dim")?.unwrap_or_default();
    let axes = if all || dims.is_empty() {
        None
    } else {
        Some(dims)
    };
    let out = c.add(
        Reduce {
            kind,
            axes,
            keepdims: c.bool("keep_dim", false)?,
            noop_with_empty_axes: false,
        },
        &[x],
    )?;
    c.set_out(out)
}
fn reduce_sum(c: &mut Ctx) -> MapResult {
    reduce(c, ReduceKind::Sum)
}
fn reduce_mean(c: &mut Ctx) -> MapResult {
    reduce(c, ReduceKind::Mean)
}
fn reduce_max(c: &mut Ctx) -> MapResult {
    reduce(c, ReduceKind::Max)
}
fn reduce_min(c: &mut Ctx) -> MapResult {
    reduce(c, ReduceKind::Min)
}
fn reduce_prod(c: &mut Ctx) -> MapResult {
    reduce(c, ReduceKind::Prod)
}
fn mean(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let out = c.add(
        Reduce {
            kind: ReduceKind::Mean,
            axes: None,
            keepdims: false,
            noop_with_empty_axes: false,
        },
        &[x],
    )?;
    c.set_out(out)
}

fn arg(c: &mut Ctx, max: bool) -> MapResult {
    let mut x = c.input("X")?;
    let mut axis = c.int("axis", -1)?;
    if c.bool("flatten", false)? {
        x = c.reshape_to(x, &[-1])?;
        axis = 0;
    }
    let mut out = c.add(
        ArgReduce {
            max,
            axis,
            keepdims: c.bool("keepdims", false)?,
            select_last_index: false,
        },
        &[x],
    )?;
    let dt = c.int("dtype", crate::proto::var_type::INT64 as i64)?;
    if dt as i32 == crate::proto::var_type::INT32 {
        out = c.add(Cast::new(DType::I32), &[out])?;
    }
    c.set_out(out)
}
fn arg_max(c: &mut Ctx) -> MapResult {
    arg(c, true)
}
fn arg_min(c: &mut Ctx) -> MapResult {
    arg(c, false)
}

fn top_k_v2(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let k = match c.input_opt("K")? {
        Some(k) => {
            let k = c.to_i64(k)?;
            c.reshape_to(k, &[1])?
        }
        None => {
            let k = c.int("k", 1)?;
            c.i64s(&[k])?
        }
    };
    let outs = c.add_n(
        TopK {
            axis: c.int("axis", -1)?,
            largest: c.bool("largest", true)?,
            sorted: c.bool("sorted", true)?,
            k: None,
        },
        &[Some(x), Some(k)],
        2,
    )?;
    c.set("Out", outs[0]);
    c.set("Indices", outs[1]);
    Ok(())
}

fn cumsum(c: &mut Ctx) -> MapResult {
    let mut x = c.input("X")?;
    let mut axis = c.int("axis", -1)?;
    if c.bool("flatten", false)? {
        x = c.reshape_to(x, &[-1])?;
        axis = 0;
    }
    let a = c.konst(Tensor::scalar(axis));
    let out = c.add(
        CumSum {
            exclusive: c.bool("exclusive", false)?,
            reverse: c.bool("reverse", false)?,
        },
        &[x, a],
    )?;
    c.set_out(out)
}
