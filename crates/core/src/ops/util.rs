//! Helpers shared by reference implementations: broadcasting, strides, index iteration.

use crate::{op_bail, Elem, OpResult, Tensor};

/// Row-major strides (in elements) of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Numpy-style (multidirectional) broadcast of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> OpResult<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            op_bail!("shapes {a:?} and {b:?} cannot be broadcast together");
        };
    }
    Ok(out)
}

/// Broadcast of any number of shapes.
pub fn broadcast_all<'a>(shapes: impl IntoIterator<Item = &'a [usize]>) -> OpResult<Vec<usize>> {
    let mut out: Vec<usize> = Vec::new();
    for s in shapes {
        out = broadcast_shapes(&out, s)?;
    }
    Ok(out)
}

/// For each element of `out_shape` (row-major), the offset of the element of a tensor of shape
/// `in_shape` that broadcasts onto it.
pub fn broadcast_offsets(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let rank = out_shape.len();
    let pad = rank - in_shape.len();
    let in_strides = strides(in_shape);
    // Stride 0 on broadcast dimensions.
    let eff: Vec<usize> = (0..rank)
        .map(|i| {
            if i < pad || in_shape[i - pad] == 1 {
                0
            } else {
                in_strides[i - pad]
            }
        })
        .collect();
    let n: usize = out_shape.iter().product();
    let mut offsets = Vec::with_capacity(n);
    let mut idx = vec![0usize; rank];
    let mut off = 0usize;
    for _ in 0..n {
        offsets.push(off);
        // Increment the multi-index, adjusting the offset incrementally.
        for d in (0..rank).rev() {
            idx[d] += 1;
            off += eff[d];
            if idx[d] < out_shape[d] {
                break;
            }
            off -= eff[d] * idx[d];
            idx[d] = 0;
        }
    }
    offsets
}

/// Applies `f` elementwise over two broadcast tensors of element type `T`, producing a tensor
/// of element type `O`.
pub fn binary_map<T: Elem, O: Elem>(
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(T, T) -> O,
) -> OpResult<Tensor> {
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let av = a.as_slice::<T>()?;
    let bv = b.as_slice::<T>()?;
    let mut out = Tensor::zeros(O::DTYPE, &shape)?;
    let o = out.as_mut_slice::<O>()?;
    if a.shape() == b.shape() {
        for i in 0..o.len() {
            o[i] = f(av[i], bv[i]);
        }
    } else {
        let ao = broadcast_offsets(a.shape(), &shape);
        let bo = broadcast_offsets(b.shape(), &shape);
        for i in 0..o.len() {
            o[i] = f(av[ao[i]], bv[bo[i]]);
        }
    }
    Ok(out)
}

/// Applies `f` to every element.
pub fn unary_map<T: Elem, O: Elem>(x: &Tensor, f: impl Fn(T) -> O) -> OpResult<Tensor> {
    let xv = x.as_slice::<T>()?;
    let mut out = Tensor::zeros(O::DTYPE, x.shape())?;
    for (o, &v) in out.as_mut_slice::<O>()?.iter_mut().zip(xv) {
        *o = f(v);
    }
    Ok(out)
}

/// Reads a 1-D (or scalar) integer tensor as i64s, checking it has at most `max` elements.
pub fn read_i64s(t: &Tensor, what: &str, max: usize) -> OpResult<Vec<i64>> {
    if t.rank() > 1 {
        op_bail!("{what} must be 1-D, got shape {:?}", t.shape());
    }
    if t.numel() > max {
        op_bail!("{what} has {} elements, at most {max} allowed", t.numel());
    }
    Ok(t.to_i64_vec())
}

/// Converts a dimension given as i64 (from a file or a tensor) to usize, rejecting negatives.
pub fn to_dim(v: i64, what: &str) -> OpResult<usize> {
    if v < 0 {
        op_bail!("{what} must not be negative, got {v}");
    }
    Ok(v as usize)
}

/// Sorts indices stably by `cmp`. Every caller shares this one instance of the sort: a
/// comparator generic over the element type would instantiate it per dtype (about 10 KB of
/// code each, which the light build counts).
pub fn sort_indices_by(
    order: &mut [usize],
    cmp: &mut dyn FnMut(usize, usize) -> std::cmp::Ordering,
) {
    order.sort_by(|&a, &b| cmp(a, b));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        assert_eq!(
            broadcast_shapes(&[2, 1, 3], &[4, 1]).unwrap(),
            vec![2, 4, 3]
        );
        assert_eq!(broadcast_shapes(&[], &[5]).unwrap(), vec![5]);
        assert!(broadcast_shapes(&[2, 3], &[4, 3]).is_err());
        assert_eq!(broadcast_offsets(&[3], &[2, 3]), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(broadcast_offsets(&[2, 1], &[2, 3]), vec![0, 0, 0, 1, 1, 1]);
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
    }

    #[test]
    fn binary_map_broadcasts() {
        let a = Tensor::from_vec(&[2, 1], vec![1.0f32, 2.0]).unwrap();
        let b = Tensor::from_vec(&[3], vec![10.0f32, 20.0, 30.0]).unwrap();
        let c = binary_map::<f32, f32>(&a, &b, |x, y| x + y).unwrap();
        assert_eq!(c.shape(), &[2, 3]);
        assert_eq!(
            c.as_slice::<f32>().unwrap(),
            &[11.0, 21.0, 31.0, 12.0, 22.0, 32.0]
        );
    }
}
