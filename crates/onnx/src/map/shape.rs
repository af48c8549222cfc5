//! Mapping functions for shape and data-movement ops.

use super::{op, MapFn, MapResult, NodeCtx};
use ferrolite_core::ops::shape::reshape::Reshape;

pub(super) const ENTRIES: &[(&str, MapFn)] = &[("Reshape", reshape)];

fn reshape(n: &NodeCtx) -> MapResult {
    op(Reshape {
        allowzero: n.int("allowzero", 0)? != 0,
    })
}
