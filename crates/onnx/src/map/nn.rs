//! Mapping functions for the nn family: pooling, normalization, softmax, reductions, top-k,
//! cumulative sums and resizing.

use super::{op, MapError, MapFn, MapResult, NodeCtx};
use ferrolite_core::ops::nn::geometry::AutoPad;
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};
use ferrolite_core::ops::nn::reduce::{ArgReduce, Reduce, ReduceKind};
use ferrolite_core::ops::nn::softmax::{Softmax, SoftmaxKind};

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
];

fn auto_pad(n: &NodeCtx) -> Result<AutoPad, MapError> {
    let s = n.string("auto_pad", "NOTSET")?;
    AutoPad::parse(&s).ok_or_else(|| MapError::Invalid(format!("unknown auto_pad '{s}'")))
}

fn pool(n: &NodeCtx, kind: PoolKind) -> Result<Pool, MapError> {
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
