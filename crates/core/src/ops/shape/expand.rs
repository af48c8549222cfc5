//! Expand (broadcast to a shape, bidirectionally) and Tile (repeat along each axis). Both read
//! their target from a value-dependent input.

use super::common::{numel_of, strided_copy};
use crate::op::{input, output, required, Prototype};
use crate::ops::util::{broadcast_shapes, read_i64s, strides, to_dim};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Expand;

fn expand_shape(input: &[usize], shape: &Tensor) -> OpResult<Vec<usize>> {
    let req = read_i64s(shape, "input 1 (shape)", 64)?;
    let req = req
        .iter()
        .map(|&d| to_dim(d, "input 1 (shape) entry"))
        .collect::<OpResult<Vec<_>>>()?;
    let out = broadcast_shapes(input, &req)?;
    numel_of(&out)?;
    Ok(out)
}

/// Copies `x` broadcast to `out` (which `x`'s shape broadcasts onto).
pub fn broadcast_to(x: &Tensor, out: &[usize]) -> OpResult<Tensor> {
    let rank = out.len();
    let pad = rank - x.rank().min(rank);
    let xs = strides(x.shape());
    let st: Vec<i128> = (0..rank)
        .map(|d| {
            if d < pad || x.shape()[d - pad] == 1 {
                0
            } else {
                xs[d - pad] as i128
            }
        })
        .collect();
    strided_copy(x, out, &st, 0)
}

impl Op for Expand {
    op_common!(
        "Expand",
        Prototype {
            inputs: &[input("input", DTypeSet::ANY), input("shape", DTypeSet::I64)],
            outputs: &[output("output")],
            value_inputs: &[1],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = expand_shape(ctx.shape(0)?, ctx.value(1)?)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, s)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let s = expand_shape(x.shape(), required(inputs, 1)?)?;
        Ok(vec![broadcast_to(x, &s)?])
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tile;

/// The repeats and the output shape.
fn tile_repeats(input: &[usize], repeats: &Tensor) -> OpResult<(Vec<usize>, Vec<usize>)> {
    let r = read_i64s(repeats, "input 1 (repeats)", 64)?;
    if r.len() != input.len() {
        op_bail!(
            "input 1 (repeats) has {} entries, expected the input rank {}",
            r.len(),
            input.len()
        );
    }
    let r = r
        .iter()
        .map(|&v| to_dim(v, "input 1 (repeats) entry"))
        .collect::<OpResult<Vec<_>>>()?;
    let mut out = Vec::with_capacity(r.len());
    for (&d, &k) in input.iter().zip(&r) {
        match d.checked_mul(k) {
            Some(v) => out.push(v),
            None => op_bail!("tiling {input:?} by {r:?} is too large"),
        }
    }
    numel_of(&out)?;
    Ok((r, out))
}

impl Op for Tile {
    op_common!(
        "Tile",
        Prototype {
            inputs: &[
                input("input", DTypeSet::ANY),
                input("repeats", DTypeSet::I64)
            ],
            outputs: &[output("output")],
            value_inputs: &[1],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = ctx.shape(0)?;
        let (_, out) = tile_repeats(s, ctx.value(1)?)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, out)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let (r, out_shape) = tile_repeats(x.shape(), required(inputs, 1)?)?;
        // View the output as [r0, d0, r1, d1, ...] where the repeat axes have stride 0.
        let xs = strides(x.shape());
        let mut view = Vec::with_capacity(2 * r.len());
        let mut st = Vec::with_capacity(2 * r.len());
        for d in 0..r.len() {
            view.push(r[d]);
            st.push(0);
            view.push(x.shape()[d]);
            st.push(xs[d] as i128);
        }
        Ok(vec![strided_copy(x, &view, &st, 0)?.reshaped(&out_shape)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand() {
        let x = Tensor::from_vec(&[3, 1], vec![1i32, 2, 3]).unwrap();
        let s = Tensor::from_vec(&[3], vec![2i64, 1, 6]).unwrap();
        let y = Expand.eval(&[Some(&x), Some(&s)]).unwrap();
        assert_eq!(y[0].shape(), &[2, 3, 6]);
        assert_eq!(&y[0].to_i64_vec()[..8], &[1, 1, 1, 1, 1, 1, 2, 2]);
        // The shape may be smaller than the input (bidirectional).
        let s = Tensor::from_vec(&[1], vec![1i64]).unwrap();
        let y = Expand.eval(&[Some(&x), Some(&s)]).unwrap();
        assert_eq!(y[0].shape(), &[3, 1]);
        let bad = Tensor::from_vec(&[2], vec![2i64, 2]).unwrap();
        assert!(Expand.eval(&[Some(&x), Some(&bad)]).is_err());
        let neg = Tensor::from_vec(&[1], vec![-1i64]).unwrap();
        assert!(Expand.eval(&[Some(&x), Some(&neg)]).is_err());
    }

    #[test]
    fn tile() {
        let x = Tensor::from_vec(&[2, 2], vec![0u16, 1, 2, 3]).unwrap();
        let r = Tensor::from_vec(&[2], vec![2i64, 2]).unwrap();
        let y = Tile.eval(&[Some(&x), Some(&r)]).unwrap();
        assert_eq!(y[0].shape(), &[4, 4]);
        assert_eq!(
            y[0].to_i64_vec(),
            vec![0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3]
        );
        let r = Tensor::from_vec(&[2], vec![1i64, 0]).unwrap();
        assert_eq!(
            Tile.eval(&[Some(&x), Some(&r)]).unwrap()[0].shape(),
            &[2, 0]
        );
        let r = Tensor::from_vec(&[1], vec![2i64]).unwrap();
        assert!(Tile.eval(&[Some(&x), Some(&r)]).is_err());
        let r = Tensor::from_vec(&[2], vec![i64::MAX, i64::MAX]).unwrap();
        assert!(Tile.eval(&[Some(&x), Some(&r)]).is_err());
        let e = Tensor::zeros(crate::DType::F32, &[3, 0]).unwrap();
        let r = Tensor::from_vec(&[2], vec![i64::MAX, 1]).unwrap();
        assert!(Tile.eval(&[Some(&e), Some(&r)]).is_err());
    }
}
