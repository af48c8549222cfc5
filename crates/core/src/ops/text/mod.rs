//! String ops: StringConcat, StringSplit, StringNormalizer, RegexFullMatch, and the string form
//! of Equal.
//!
//! String tensors hold Rust `String`s (UTF-8) rather than bytes (see [`crate::Tensor`]), so
//! these ops run only as their reference implementations.

pub mod concat;
pub mod normalizer;
pub mod regex_full_match;
pub mod split;

use crate::ops::util::{broadcast_offsets, broadcast_shapes};
use crate::{OpResult, Tensor};

/// `f` over every pair of elements of two string tensors broadcast together, with the output
/// shape.
pub fn broadcast_strings<O>(
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(&str, &str) -> O,
) -> OpResult<(Vec<usize>, Vec<O>)> {
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let (sa, sb) = (a.strings()?, b.strings()?);
    let out = broadcast_offsets(a.shape(), &shape)
        .into_iter()
        .zip(broadcast_offsets(b.shape(), &shape))
        .map(|(i, j)| f(&sa[i], &sb[j]))
        .collect();
    Ok((shape, out))
}
