//! Mapping functions for the nn family: pooling, normalization, softmax, reductions, top-k,
//! cumulative sums and resizing.

use super::{op, MapError, MapFn, MapResult, NodeCtx};
use ferrolite_core::ops::nn::geometry::AutoPad;
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("MaxPool", max_pool),
    ("AveragePool", average_pool),
    ("LpPool", lp_pool),
    ("GlobalMaxPool", global_max_pool),
    ("GlobalAveragePool", global_average_pool),
    ("GlobalLpPool", global_lp_pool),
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
