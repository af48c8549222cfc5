//! Sequences and optionals: values that hold tensors rather than elements.
//!
//! A sequence ([`crate::DType::Sequence`]) is an ordered list of tensors; an optional
//! ([`crate::DType::Optional`]) holds one tensor or sequence, or nothing. Both are graph values
//! of shape `[]`. The graph does not track the type of what they hold, so the ops that take a
//! tensor out of one (SequenceAt, ConcatFromSequence, OptionalGetElement) are typed by running
//! them ([`crate::Op::shapes_known_by_running`]).

pub mod concat_from_sequence;
pub mod optional;
pub mod sequence;
pub mod split_to_sequence;

use crate::{OpResult, Tensor};

/// A position input (a scalar i32/i64) resolved against a sequence of `len` items; negative
/// positions count from the end. `inclusive_end` allows `len` itself (an insertion at the end).
fn position(t: &Tensor, len: usize, inclusive_end: bool) -> OpResult<usize> {
    crate::op_ensure!(
        t.numel() == 1,
        "the position must be a scalar, has shape {:?}",
        t.shape()
    );
    let p = t.to_i64_vec()[0];
    let n = len as i64;
    let max = if inclusive_end { n } else { n - 1 };
    crate::op_ensure!(
        (-n..=max).contains(&p),
        "position {p} is outside [{}, {max}] for a sequence of {len} tensors",
        -n
    );
    Ok(if p < 0 { (p + n) as usize } else { p as usize })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_from_either_end() {
        let p = |v: i64, incl| position(&Tensor::scalar(v), 3, incl);
        assert_eq!(p(0, false).unwrap(), 0);
        assert_eq!(p(-1, false).unwrap(), 2);
        assert_eq!(p(-3, false).unwrap(), 0);
        assert!(p(3, false).is_err());
        assert_eq!(p(3, true).unwrap(), 3);
        assert!(p(-4, true).is_err());
        assert!(position(&Tensor::scalar(0i64), 0, false).is_err());
        assert_eq!(position(&Tensor::scalar(0i32), 0, true).unwrap(), 0);
    }
}
