//! Mapping functions for this op family.

#[allow(unused_imports)]
use super::{op, MapFn, MapResult, NodeCtx};

pub(super) const ENTRIES: &[(&str, MapFn)] = &[];
