//! Byte-level helpers shared by the data-movement ops. Moving data does not depend on the
//! element type, so these work on bytes and the element size.

use crate::ops::util::strides;
use crate::{op_bail, DType, OpError, OpResult, Tensor};

/// Copies a strided view of `src` into a new contiguous tensor of shape `out_shape`.
///
/// Output element at multi-index `i` is the source element at
/// `offset + sum(i[d] * src_strides[d])` (in elements; strides may be negative or zero).
/// Every reachable offset is checked to lie inside `src` before anything is copied.
pub fn strided_copy(
    src: &Tensor,
    out_shape: &[usize],
    src_strides: &[i128],
    offset: i128,
) -> OpResult<Tensor> {
    if src_strides.len() != out_shape.len() {
        op_bail!(
            "internal: {} strides for an output of rank {}",
            src_strides.len(),
            out_shape.len()
        );
    }
    let mut out = Tensor::zeros(src.dtype(), out_shape)?;
    if out.numel() == 0 {
        return Ok(out);
    }
    let rank = out_shape.len();
    // A dimension of size 1 never applies its stride; zeroing it keeps the arithmetic small.
    let st: Vec<i128> = src_strides
        .iter()
        .zip(out_shape)
        .map(|(&s, &n)| if n <= 1 { 0 } else { s })
        .collect();
    let (mut lo, mut hi) = (offset, offset);
    for d in 0..rank {
        let span = (out_shape[d] as i128 - 1) * st[d];
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    if lo < 0 || hi >= src.numel() as i128 {
        op_bail!(
            "internal: strided view reaches elements {lo}..={hi} of a tensor of {}",
            src.numel()
        );
    }
    // Every offset is now within [0, numel), so the isize arithmetic below cannot overflow.
    let st: Vec<isize> = st.iter().map(|&s| s as isize).collect();
    let es = src.dtype().size();
    let sb = src.bytes();
    let ob = out.bytes_mut();
    let inner = out_shape.last().copied().unwrap_or(1);
    let inner_stride = st.last().copied().unwrap_or(0);
    let outer = out_shape[..rank.saturating_sub(1)]
        .iter()
        .product::<usize>();
    let mut idx = vec![0usize; rank.saturating_sub(1)];
    let mut off = offset as isize;
    let mut o = 0usize;
    for _ in 0..outer {
        if inner_stride == 1 {
            let s = off as usize * es;
            ob[o..o + inner * es].copy_from_slice(&sb[s..s + inner * es]);
            o += inner * es;
        } else {
            let mut p = off;
            for _ in 0..inner {
                let s = p as usize * es;
                ob[o..o + es].copy_from_slice(&sb[s..s + es]);
                o += es;
                p += inner_stride;
            }
        }
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            off += st[d];
            if idx[d] < out_shape[d] {
                break;
            }
            off -= st[d] * idx[d] as isize;
            idx[d] = 0;
        }
    }
    Ok(out)
}

/// Permutes the axes of `src` viewed with shape `view` (same element count): output axis `i`
/// is view axis `perm[i]`.
pub fn permute(src: &Tensor, view: &[usize], perm: &[usize]) -> OpResult<Tensor> {
    if view.iter().product::<usize>() != src.numel() || perm.len() != view.len() {
        op_bail!(
            "internal: cannot permute {:?} viewed as {view:?} by {perm:?}",
            src.shape()
        );
    }
    let vs = strides(view);
    let mut shape = Vec::with_capacity(perm.len());
    let mut st = Vec::with_capacity(perm.len());
    for &p in perm {
        match (view.get(p), vs.get(p)) {
            (Some(&n), Some(&s)) => {
                shape.push(n);
                st.push(s as i128);
            }
            _ => op_bail!("internal: permutation {perm:?} out of range"),
        }
    }
    strided_copy(src, &shape, &st, 0)
}

/// Resolves an index read from data against a dimension of size `n`, accepting `-n..n`.
pub fn resolve_index(i: i64, n: usize, what: &str) -> OpResult<usize> {
    let r = if i < 0 {
        i as i128 + n as i128
    } else {
        i as i128
    };
    if r < 0 || r >= n as i128 {
        op_bail!("{what}: index {i} is out of range for a dimension of size {n}");
    }
    Ok(r as usize)
}

/// Checks that all given inputs share one dtype.
pub fn same_dtype(what: &[(usize, DType)]) -> OpResult<DType> {
    let Some(&(i0, d0)) = what.first() else {
        op_bail!("internal: no inputs to compare");
    };
    for &(i, d) in &what[1..] {
        if d != d0 {
            op_bail!("input {i} has dtype {d}, but input {i0} has {d0}; they must match");
        }
    }
    Ok(d0)
}

/// The bytes of one element of `dtype` holding `value` (bool: `value != 0`).
pub fn scalar_bytes(dtype: DType, value: f64) -> OpResult<Vec<u8>> {
    Ok(Tensor::full(dtype, &[], value)?.bytes().to_vec())
}

/// Reads a scalar (or one-element) tensor's single element as i64.
pub fn scalar_i64(t: &Tensor, what: &str) -> OpResult<i64> {
    if t.numel() != 1 {
        op_bail!(
            "{what} must hold exactly one element, got shape {:?}",
            t.shape()
        );
    }
    t.to_i64_vec()
        .first()
        .copied()
        .ok_or_else(|| OpError(format!("{what} is empty")))
}

/// Product of a shape with overflow check.
pub fn numel_of(shape: &[usize]) -> OpResult<usize> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| OpError(format!("shape {shape:?} has too many elements")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_and_permute() {
        let x = Tensor::from_vec(&[2, 3], vec![0i32, 1, 2, 3, 4, 5]).unwrap();
        let t = permute(&x, &[2, 3], &[1, 0]).unwrap();
        assert_eq!(t.shape(), &[3, 2]);
        assert_eq!(t.to_i64_vec(), vec![0, 3, 1, 4, 2, 5]);
        // Reversed rows via a negative stride.
        let r = strided_copy(&x, &[2, 3], &[-3, 1], 3).unwrap();
        assert_eq!(r.to_i64_vec(), vec![3, 4, 5, 0, 1, 2]);
        assert!(strided_copy(&x, &[3, 3], &[3, 1], 0).is_err());
        let s = strided_copy(&x, &[], &[], 4).unwrap();
        assert_eq!(s.to_i64_vec(), vec![4]);
    }

    #[test]
    fn indices() {
        assert_eq!(resolve_index(-1, 3, "x").unwrap(), 2);
        assert!(resolve_index(3, 3, "x").is_err());
        assert!(resolve_index(-4, 3, "x").is_err());
        assert!(resolve_index(i64::MIN, 3, "x").is_err());
    }
}
