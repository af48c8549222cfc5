//! Mapping functions for the nn family: pooling, normalization, softmax, reductions, top-k,
//! cumulative sums and resizing.

use super::{op, MapError, MapFn, MapResult, NodeCtx};
use ferrolite_core::ops::nn::cumsum::CumSum;
use ferrolite_core::ops::nn::geometry::AutoPad;
use ferrolite_core::ops::nn::norm::{
    BatchNorm, BatchNormPerElement, GroupNorm, InstanceNorm, LayerNorm, LpNorm, Lrn,
    MeanVarianceNorm,
};
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};
use ferrolite_core::ops::nn::reduce::{ArgReduce, Reduce, ReduceKind};
use ferrolite_core::ops::nn::resize::{
    CoordMode, KeepAspectRatio, NearestMode, Resize, ResizeMode,
};
use ferrolite_core::ops::nn::softmax::{Softmax, SoftmaxKind};
use ferrolite_core::ops::nn::topk::TopK;

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("MaxPool", max_pool),
    ("AveragePool", average_pool),
    ("LpPool", lp_pool),
    ("GlobalMaxPool", global_max_pool),
    ("GlobalAveragePool", global_average_pool),
    ("GlobalLpPool", global_lp_pool),
    ("Softmax", softmax),
    ("LogSoftmax", log_softmax),
    ("Hardmax", hardmax),
    ("ReduceSum", reduce_sum),
    ("ReduceMean", reduce_mean),
    ("ReduceMax", reduce_max),
    ("ReduceMin", reduce_min),
    ("ReduceProd", reduce_prod),
    ("ReduceL1", reduce_l1),
    ("ReduceL2", reduce_l2),
    ("ReduceLogSum", reduce_log_sum),
    ("ReduceLogSumExp", reduce_log_sum_exp),
    ("ReduceSumSquare", reduce_sum_square),
    ("ArgMax", arg_max),
    ("ArgMin", arg_min),
    ("BatchNormalization", batch_norm),
    ("InstanceNormalization", instance_norm),
    ("LayerNormalization", layer_norm),
    ("GroupNormalization", group_norm),
    ("LpNormalization", lp_norm),
    ("MeanVarianceNormalization", mvn),
    ("LRN", lrn),
    ("TopK", topk),
    ("CumSum", cumsum),
    ("Resize", resize),
    ("Upsample", upsample),
];

fn auto_pad(n: &NodeCtx) -> Result<AutoPad, MapError> {
    let s = n.string("auto_pad", "NOTSET")?;
    AutoPad::parse(&s).ok_or_else(|| MapError::Invalid(format!("unknown auto_pad '{s}'")))
}

pub(super) fn pool(n: &NodeCtx, kind: PoolKind) -> Result<Pool, MapError> {
    let kernel_shape = n
        .ints("kernel_shape")?
        .ok_or_else(|| MapError::Invalid("kernel_shape is required".into()))?;
    Ok(Pool {
        kind,
        kernel_shape,
        strides: n.ints("strides")?.unwrap_or_default(),
        pads: n.ints("pads")?.unwrap_or_default(),
        dilations: n.ints("dilations")?.unwrap_or_default(),
        auto_pad: auto_pad(n)?,
        ceil_mode: n.int("ceil_mode", 0)? != 0,
        count_include_pad: n.int("count_include_pad", 0)? != 0,
        storage_order: n.int("storage_order", 0)?,
        // LpPool's p was a float attribute before opset 11.
        p: match n.int_opt("p") {
            Ok(Some(p)) => p as f64,
            Ok(None) => 2.0,
            Err(_) => n.float("p", 2.0)? as f64,
        },
        with_indices: false,
    })
}

fn max_pool(n: &NodeCtx) -> MapResult {
    let mut p = pool(n, PoolKind::Max)?;
    if !matches!(p.storage_order, 0 | 1) {
        return Err(MapError::Invalid(format!(
            "storage_order must be 0 or 1, got {}",
            p.storage_order
        )));
    }
    p.with_indices = n.n_outputs() > 1;
    op(p)
}

fn average_pool(n: &NodeCtx) -> MapResult {
    op(pool(n, PoolKind::Average)?)
}

fn lp_pool(n: &NodeCtx) -> MapResult {
    op(pool(n, PoolKind::Lp)?)
}

fn global(n: &NodeCtx, kind: PoolKind) -> MapResult {
    let p = match n.int_opt("p") {
        Ok(Some(p)) => p as f64,
        Ok(None) => 2.0,
        Err(_) => n.float("p", 2.0)? as f64,
    };
    op(GlobalPool { kind, p })
}

fn global_max_pool(n: &NodeCtx) -> MapResult {
    global(n, PoolKind::Max)
}

fn global_average_pool(n: &NodeCtx) -> MapResult {
    global(n, PoolKind::Average)
}

fn global_lp_pool(n: &NodeCtx) -> MapResult {
    global(n, PoolKind::Lp)
}

fn softmax_like(n: &NodeCtx, kind: SoftmaxKind) -> MapResult {
    // Opset 13 changed the semantics from "coerce to 2-D at axis" (default 1) to "along axis"
    // (default -1).
    let legacy_2d = n.opset < 13;
    let axis = n.int("axis", if legacy_2d { 1 } else { -1 })?;
    op(Softmax {
        kind,
        axis,
        legacy_2d,
    })
}

fn softmax(n: &NodeCtx) -> MapResult {
    softmax_like(n, SoftmaxKind::Softmax)
}

fn log_softmax(n: &NodeCtx) -> MapResult {
    softmax_like(n, SoftmaxKind::LogSoftmax)
}

fn hardmax(n: &NodeCtx) -> MapResult {
    softmax_like(n, SoftmaxKind::Hardmax)
}

fn reduce(n: &NodeCtx, kind: ReduceKind) -> MapResult {
    // Axes moved from an attribute to an input at opset 13 for ReduceSum and 18 for the rest.
    let input_from = if kind == ReduceKind::Sum { 13 } else { 18 };
    let axes = if n.opset < input_from {
        n.ints("axes")?
    } else {
        None
    };
    op(Reduce {
        kind,
        axes,
        keepdims: n.int("keepdims", 1)? != 0,
        noop_with_empty_axes: n.int("noop_with_empty_axes", 0)? != 0,
    })
}

fn reduce_sum(n: &NodeCtx) -> MapResult {
    reduce(n, ReduceKind::Sum)
}

fn reduce_mean(n: &NodeCtx) -> MapResult {
    reduce(n, ReduceKind::Mean)
}

fn reduce_max(n: &NodeCtx) -> MapResult {
    reduce(n, ReduceKind::Max)
}

fn reduce_min(n: &NodeCtx) -> MapResult {
    reduce(n, ReduceKind::Min)
}

fn reduce_prod(n: &NodeCtx) -> MapResult {
    reduce(n, ReduceKind::Prod)
}

fn reduce_l1(n: &NodeCtx) -> MapResult {
    reduce(n, ReduceKind::L1)
}

fn reduce_l2(n: &NodeCtx) -> MapResult {
    reduce(n, ReduceKind::L2)
}

fn reduce_log_sum(n: &NodeCtx) -> MapResult {
    reduce(n, ReduceKind::LogSum)
}

fn reduce_log_sum_exp(n: &NodeCtx) -> MapResult {
    reduce(n, ReduceKind::LogSumExp)
}

fn reduce_sum_square(n: &NodeCtx) -> MapResult {
    reduce(n, ReduceKind::SumSquare)
}

fn arg(n: &NodeCtx, max: bool) -> MapResult {
    op(ArgReduce {
        max,
        axis: n.int("axis", 0)?,
        keepdims: n.int("keepdims", 1)? != 0,
        select_last_index: n.int("select_last_index", 0)? != 0,
    })
}

fn arg_max(n: &NodeCtx) -> MapResult {
    arg(n, true)
}

fn arg_min(n: &NodeCtx) -> MapResult {
    arg(n, false)
}

fn batch_norm(n: &NodeCtx) -> MapResult {
    if n.int("training_mode", 0)? != 0 || n.n_outputs() > 1 {
        return Err(n.unsupported("BatchNormalization in training mode (extra outputs)"));
    }
    // Before opset 9, spatial=0 meant per-element statistics.
    if n.opset < 9 && n.int("spatial", 1)? == 0 {
        return op(BatchNormPerElement {
            epsilon: n.float("epsilon", 1e-5)? as f64,
        });
    }
    op(BatchNorm {
        epsilon: n.float("epsilon", 1e-5)? as f64,
    })
}

fn instance_norm(n: &NodeCtx) -> MapResult {
    op(InstanceNorm {
        epsilon: n.float("epsilon", 1e-5)? as f64,
    })
}

fn layer_norm(n: &NodeCtx) -> MapResult {
    op(LayerNorm {
        axis: n.int("axis", -1)?,
        epsilon: n.float("epsilon", 1e-5)? as f64,
        stash_type: n.int("stash_type", 1)?,
        num_outputs: n.n_outputs().max(1),
    })
}

fn group_norm(n: &NodeCtx) -> MapResult {
    let num_groups = n
        .int_opt("num_groups")?
        .ok_or_else(|| MapError::Invalid("num_groups is required".into()))?;
    op(GroupNorm {
        num_groups,
        epsilon: n.float("epsilon", 1e-5)? as f64,
        // Opset 18 scaled per group; 21 per channel.
        per_group_affine: n.opset < 21,
    })
}

fn lp_norm(n: &NodeCtx) -> MapResult {
    let p = n.int("p", 2)?;
    if !matches!(p, 1 | 2) {
        return Err(n.unsupported(format!("LpNormalization with p={p}")));
    }
    op(LpNorm {
        axis: n.int("axis", -1)?,
        p,
    })
}

fn mvn(n: &NodeCtx) -> MapResult {
    op(MeanVarianceNorm {
        axes: n.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]),
    })
}

fn lrn(n: &NodeCtx) -> MapResult {
    let size = n
        .int_opt("size")?
        .ok_or_else(|| MapError::Invalid("size is required".into()))?;
    op(Lrn {
        size,
        alpha: n.float("alpha", 1e-4)? as f64,
        beta: n.float("beta", 0.75)? as f64,
        bias: n.float("bias", 1.0)? as f64,
    })
}

fn topk(n: &NodeCtx) -> MapResult {
    // Opset 1 had k as an attribute; from 10 it is an input.
    let k = if n.opset < 10 {
        Some(
            n.int_opt("k")?
                .ok_or_else(|| MapError::Invalid("k is required".into()))?,
        )
    } else {
        None
    };
    op(TopK {
        axis: n.int("axis", -1)?,
        largest: n.int("largest", 1)? != 0,
        sorted: n.int("sorted", 1)? != 0,
        k,
    })
}

fn cumsum(n: &NodeCtx) -> MapResult {
    op(CumSum {
        exclusive: n.int("exclusive", 0)? != 0,
        reverse: n.int("reverse", 0)? != 0,
    })
}

fn resize_mode(n: &NodeCtx) -> Result<ResizeMode, MapError> {
    match n.string("mode", "nearest")?.as_str() {
        "nearest" => Ok(ResizeMode::Nearest),
        // "bilinear"/"trilinear" are the old Upsample spellings.
        "linear" | "bilinear" | "trilinear" => Ok(ResizeMode::Linear),
        "cubic" => Ok(ResizeMode::Cubic),
        m => Err(n.unsupported(format!("mode '{m}'"))),
    }
}

fn resize(n: &NodeCtx) -> MapResult {
    let mode = resize_mode(n)?;
    if n.opset < 11 {
        // Opset 10: (X, scales), asymmetric coordinates.
        return op(Resize {
            mode,
            coordinate_transformation_mode: CoordMode::Asymmetric,
            nearest_mode: NearestMode::Simple,
            scales_at_input_1: true,
            ..Default::default()
        });
    }
    let ctm = match n
        .string("coordinate_transformation_mode", "half_pixel")?
        .as_str()
    {
        "half_pixel" => CoordMode::HalfPixel,
        "half_pixel_symmetric" => CoordMode::HalfPixelSymmetric,
        "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
        "align_corners" => CoordMode::AlignCorners,
        "asymmetric" => CoordMode::Asymmetric,
        "tf_half_pixel_for_nn" => CoordMode::TfHalfPixelForNn,
        "tf_crop_and_resize" => CoordMode::TfCropAndResize,
        m => return Err(n.unsupported(format!("coordinate_transformation_mode '{m}'"))),
    };
    let nearest_mode = match n.string("nearest_mode", "round_prefer_floor")?.as_str() {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        m => return Err(n.unsupported(format!("nearest_mode '{m}'"))),
    };
    let keep = match n.string("keep_aspect_ratio_policy", "stretch")?.as_str() {
        "stretch" => KeepAspectRatio::Stretch,
        "not_larger" => KeepAspectRatio::NotLarger,
        "not_smaller" => KeepAspectRatio::NotSmaller,
        m => return Err(n.unsupported(format!("keep_aspect_ratio_policy '{m}'"))),
    };
    op(Resize {
        mode,
        coordinate_transformation_mode: ctm,
        nearest_mode,
        cubic_coeff_a: n.float("cubic_coeff_a", -0.75)? as f64,
        exclude_outside: n.int("exclude_outside", 0)? != 0,
        extrapolation_value: n.float("extrapolation_value", 0.0)? as f64,
        antialias: n.int("antialias", 0)? != 0,
        axes: n.ints("axes")?,
        keep_aspect_ratio_policy: keep,
        scales_at_input_1: false,
        scales_attr: None,
    })
}

fn upsample(n: &NodeCtx) -> MapResult {
    let mode = resize_mode(n)?;
    if mode == ResizeMode::Cubic {
        return Err(n.unsupported("Upsample with mode 'cubic'"));
    }
    // Opset 7 had scales as an attribute; 9 as input 1.
    let scales_attr = if n.opset < 9 {
        Some(
            n.floats("scales")?
                .ok_or_else(|| MapError::Invalid("scales is required".into()))?
                .into_iter()
                .map(|v| v as f64)
                .collect(),
        )
    } else {
        None
    };
    op(Resize {
        mode,
        coordinate_transformation_mode: CoordMode::Asymmetric,
        nearest_mode: NearestMode::Simple,
        scales_at_input_1: scales_attr.is_none(),
        scales_attr,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{attribute_type, AttributeProto, NodeProto};
    use ferrolite_core::Op;

    fn node(op_type: &str, outputs: usize, attrs: Vec<AttributeProto>) -> NodeProto {
        NodeProto {
            op_type: op_type.into(),
            input: vec!["x".into()],
            output: (0..outputs).map(|i| format!("y{i}")).collect(),
            attribute: attrs,
            ..Default::default()
        }
    }

    fn int(name: &str, i: i64) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: attribute_type::INT,
            i,
            ..Default::default()
        }
    }

    fn ints(name: &str, v: &[i64]) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: attribute_type::INTS,
            ints: v.to_vec(),
            ..Default::default()
        }
    }

    fn map(n: &NodeProto, opset: i64) -> std::sync::Arc<dyn Op> {
        let f = super::super::lookup(&n.op_type).unwrap();
        f(&NodeCtx { node: n, opset }).unwrap()
    }

    #[test]
    fn softmax_opset_forms() {
        let n = node("Softmax", 1, vec![]);
        let old = map(&n, 11);
        let s = old.as_any().downcast_ref::<Softmax>().unwrap();
        assert!(s.legacy_2d && s.axis == 1);
        let new = map(&n, 13);
        let s = new.as_any().downcast_ref::<Softmax>().unwrap();
        assert!(!s.legacy_2d && s.axis == -1);
    }

    #[test]
    fn batch_norm_spatial_by_opset() {
        let n = node("BatchNormalization", 1, vec![int("spatial", 0)]);
        assert!(map(&n, 7).as_any().is::<BatchNormPerElement>());
        // From opset 9 the attribute is gone: statistics are per channel.
        assert!(map(&n, 9).as_any().is::<BatchNorm>());
        let plain = node("BatchNormalization", 1, vec![]);
        assert!(map(&plain, 7).as_any().is::<BatchNorm>());
    }

    #[test]
    fn reduce_axes_attribute_by_opset() {
        let n = node(
            "ReduceMean",
            1,
            vec![ints("axes", &[1]), int("keepdims", 0)],
        );
        let r = map(&n, 17);
        let r = r.as_any().downcast_ref::<Reduce>().unwrap();
        assert_eq!(r.axes, Some(vec![1]));
        assert!(!r.keepdims);
        let n = node("ReduceSum", 1, vec![ints("axes", &[1])]);
        let r = map(&n, 13);
        assert_eq!(r.as_any().downcast_ref::<Reduce>().unwrap().axes, None);
    }

    #[test]
    fn maxpool_indices_and_batchnorm_training() {
        let n = node("MaxPool", 2, vec![ints("kernel_shape", &[2, 2])]);
        let p = map(&n, 12);
        assert!(p.as_any().downcast_ref::<Pool>().unwrap().with_indices);
        let missing = node("MaxPool", 1, vec![]);
        assert!(max_pool(&NodeCtx {
            node: &missing,
            opset: 12
        })
        .is_err());
        let bn = node("BatchNormalization", 3, vec![int("training_mode", 1)]);
        assert!(matches!(
            batch_norm(&NodeCtx {
                node: &bn,
                opset: 15
            }),
            Err(MapError::Unsupported(_))
        ));
        let gn = node("GroupNormalization", 1, vec![int("num_groups", 2)]);
        let g = map(&gn, 18);
        assert!(
            g.as_any()
                .downcast_ref::<GroupNorm>()
                .unwrap()
                .per_group_affine
        );
    }

    #[test]
    fn resize_and_upsample_forms() {
        let r10 = map(&node("Resize", 1, vec![]), 10);
        let r = r10.as_any().downcast_ref::<Resize>().unwrap();
        assert!(r.scales_at_input_1);
        assert_eq!(r.coordinate_transformation_mode, CoordMode::Asymmetric);
        let up7 = node(
            "Upsample",
            1,
            vec![AttributeProto {
                name: "scales".into(),
                r#type: attribute_type::FLOATS,
                floats: vec![1., 1., 2., 2.],
                ..Default::default()
            }],
        );
        let u = map(&up7, 7);
        let u = u.as_any().downcast_ref::<Resize>().unwrap();
        assert_eq!(u.scales_attr, Some(vec![1., 1., 2., 2.]));
        assert!(!u.scales_at_input_1);
        let topk1 = node("TopK", 2, vec![int("k", 3)]);
        let t = map(&topk1, 1);
        assert_eq!(t.as_any().downcast_ref::<TopK>().unwrap().k, Some(3));
    }
}
