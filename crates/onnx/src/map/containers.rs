//! Mapping functions for the sequence and optional ops (SequenceMap, which has a body graph,
//! is built with the control-flow ops in `model.rs`).

use super::{op, MapError, MapFn, MapResult, NodeCtx};
use ferrolite_core::ops::containers::{
    concat_from_sequence::ConcatFromSequence,
    optional::{Optional, OptionalGetElement, OptionalHasElement},
    sequence::{
        SequenceAt, SequenceConstruct, SequenceEmpty, SequenceErase, SequenceInsert, SequenceLength,
    },
    split_to_sequence::SplitToSequence,
};
use ferrolite_core::DType;

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("SequenceEmpty", sequence_empty),
    ("SequenceConstruct", |_| op(SequenceConstruct)),
    ("SequenceInsert", |_| op(SequenceInsert)),
    ("SequenceAt", |_| op(SequenceAt)),
    ("SequenceErase", |_| op(SequenceErase)),
    ("SequenceLength", |_| op(SequenceLength)),
    ("SplitToSequence", split_to_sequence),
    ("ConcatFromSequence", concat_from_sequence),
    ("Optional", |_| op(Optional)),
    ("OptionalHasElement", |_| op(OptionalHasElement)),
    ("OptionalGetElement", |_| op(OptionalGetElement)),
];

fn sequence_empty(n: &NodeCtx) -> MapResult {
    let dtype = match n.int_opt("dtype")? {
        None => DType::F32,
        Some(t) => i32::try_from(t)
            .ok()
            .and_then(crate::tensor::dtype_of)
            .ok_or_else(|| {
                MapError::Invalid(format!("dtype {t} is not a supported element type"))
            })?,
    };
    op(SequenceEmpty { dtype })
}

fn split_to_sequence(n: &NodeCtx) -> MapResult {
    op(SplitToSequence {
        axis: n.int("axis", 0)?,
        keepdims: n.int("keepdims", 1)? != 0,
    })
}

fn concat_from_sequence(n: &NodeCtx) -> MapResult {
    let axis = n
        .int_opt("axis")?
        .ok_or_else(|| MapError::Invalid("attribute 'axis' is required".into()))?;
    op(ConcatFromSequence {
        axis,
        new_axis: n.int("new_axis", 0)? != 0,
    })
}
