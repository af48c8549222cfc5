//! Gather, GatherElements and GatherND: pick elements or slices of `data` at positions read
//! from an index tensor. Negative indices count from the end; every index is bounds-checked.

use super::common::numel_of;
use super::common::resolve_index;
use crate::op::{input, normalize_axis, output, required, Prototype};
use crate::ops::util::strides;
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

const GATHER_PROTO: Prototype = Prototype {
    inputs: &[
        input("data", DTypeSet::ANY),
        input("indices", DTypeSet::INDEX),
    ],
    outputs: &[output("output")],
    value_inputs: &[],
};

/// Gather: slices of `data` along `axis` at the given indices.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Gather {
    pub axis: i64,
}

impl Gather {
    pub fn output_shape(&self, data: &[usize], indices: &[usize]) -> OpResult<(Vec<usize>, usize)> {
        let axis = normalize_axis(self.axis, data.len())?;
        let mut out = data[..axis].to_vec();
        out.extend_from_slice(indices);
        out.extend_from_slice(&data[axis + 1..]);
        Ok((out, axis))
    }
}

impl Op for Gather {
    op_common!("Gather", GATHER_PROTO);

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let (shape, _) = self.output_shape(ctx.shape(0)?, ctx.shape(1)?)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let data = required(inputs, 0)?;
        let ind = required(inputs, 1)?;
        let (shape, axis) = self.output_shape(data.shape(), ind.shape())?;
        let ds = data.shape();
        let outer: usize = numel_of(&ds[..axis])?;
        let n = ds[axis];
        let es = data.dtype().size();
        let block = numel_of(&ds[axis + 1..])? * es;
        let idx = ind
            .to_i64_vec()
            .iter()
            .map(|&i| resolve_index(i, n, "input 1 (indices)"))
            .collect::<OpResult<Vec<usize>>>()?;
        let mut out = Tensor::zeros(data.dtype(), &shape)?;
        if out.numel() == 0 {
            return Ok(vec![out]);
        }
        let ob = out.bytes_mut();
        let sb = data.bytes();
        let mut o = 0;
        for k in 0..outer {
            for &i in &idx {
                let s = (k * n + i) * block;
                ob[o..o + block].copy_from_slice(&sb[s..s + block]);
                o += block;
            }
        }
        Ok(vec![out])
    }
}

/// GatherElements: `out[i] = data[i with axis coordinate replaced by indices[i]]`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GatherElements {
    pub axis: i64,
}

/// Checks an index tensor of the same rank as `data`, not larger outside `axis`.
pub(crate) fn check_elementwise_indices(
    data: &[usize],
    indices: &[usize],
    axis: i64,
) -> OpResult<usize> {
    if data.len() != indices.len() {
        op_bail!(
            "indices have shape {indices:?}, rank {} expected (data is {data:?})",
            data.len()
        );
    }
    let axis = normalize_axis(axis, data.len())?;
    for d in 0..data.len() {
        if d != axis && indices[d] > data[d] {
            op_bail!("indices shape {indices:?} exceeds data shape {data:?} at axis {d}");
        }
    }
    Ok(axis)
}

/// For every element of an index tensor (row-major), the offset into `data` with the axis
/// coordinate replaced by the (resolved) index value.
pub(crate) fn elementwise_offsets(
    data: &[usize],
    ishape: &[usize],
    idx: &[i64],
    axis: usize,
    what: &str,
) -> OpResult<Vec<usize>> {
    let ds = strides(data);
    let rank = ishape.len();
    let mut pos = vec![0usize; rank];
    let mut offs = Vec::with_capacity(idx.len());
    for &v in idx {
        let j = resolve_index(v, data[axis], what)?;
        let mut off = j * ds[axis];
        for d in 0..rank {
            if d != axis {
                off += pos[d] * ds[d];
            }
        }
        offs.push(off);
        for d in (0..rank).rev() {
            pos[d] += 1;
            if pos[d] < ishape[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    Ok(offs)
}

impl Op for GatherElements {
    op_common!("GatherElements", GATHER_PROTO);

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        check_elementwise_indices(ctx.shape(0)?, ctx.shape(1)?, self.axis)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, ctx.shape(1)?)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let data = required(inputs, 0)?;
        let ind = required(inputs, 1)?;
        let axis = check_elementwise_indices(data.shape(), ind.shape(), self.axis)?;
        let offs = elementwise_offsets(
            data.shape(),
            ind.shape(),
            &ind.to_i64_vec(),
            axis,
            "input 1 (indices)",
        )?;
        let es = data.dtype().size();
        let mut out = Tensor::zeros(data.dtype(), ind.shape())?;
        let ob = out.bytes_mut();
        let sb = data.bytes();
        for (k, &s) in offs.iter().enumerate() {
            ob[k * es..(k + 1) * es].copy_from_slice(&sb[s * es..(s + 1) * es]);
        }
        Ok(vec![out])
    }
}

/// GatherND: slices of `data` addressed by index tuples in the last axis of `indices`, the
/// first `batch_dims` axes being shared batch axes.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GatherND {
    pub batch_dims: i64,
}

/// The layout of an ND-indexed access shared by GatherND and ScatterND.
pub(crate) struct NdPlan {
    /// Number of batches (product of the batch dims).
    pub batches: usize,
    /// Index tuples per batch.
    pub tuples: usize,
    /// Tuple length.
    pub m: usize,
    /// Elements per addressed slice.
    pub block: usize,
    /// Elements per batch of data.
    pub slab: usize,
    /// Shape of the gathered result (= ScatterND's updates shape).
    pub out_shape: Vec<usize>,
}

pub(crate) fn nd_plan(data: &[usize], ind: &[usize], batch_dims: i64) -> OpResult<NdPlan> {
    let (r, q) = (data.len(), ind.len());
    if q == 0 || r == 0 {
        op_bail!("data {data:?} and indices {ind:?} must have rank at least 1");
    }
    if batch_dims < 0 || batch_dims as usize >= q.min(r) {
        op_bail!("batch_dims {batch_dims} must be in [0, min(rank of data, rank of indices))");
    }
    let b = batch_dims as usize;
    if data[..b] != ind[..b] {
        op_bail!("batch dimensions of data {data:?} and indices {ind:?} differ");
    }
    let m = ind[q - 1];
    if m < 1 || m > r - b {
        op_bail!(
            "the last dimension of indices {ind:?} must be in [1, {}] for data {data:?}",
            r - b
        );
    }
    let mut out_shape = ind[..q - 1].to_vec();
    out_shape.extend_from_slice(&data[b + m..]);
    Ok(NdPlan {
        batches: numel_of(&data[..b])?,
        tuples: numel_of(&ind[b..q - 1])?,
        m,
        block: numel_of(&data[b + m..])?,
        slab: numel_of(&data[b..])?,
        out_shape,
    })
}

/// For each index tuple (batch-major), the element offset of its slice in `data`.
pub(crate) fn nd_offsets(
    data: &[usize],
    p: &NdPlan,
    b: usize,
    idx: &[i64],
    what: &str,
) -> OpResult<Vec<usize>> {
    let st = strides(&data[b..]);
    let mut offs = Vec::with_capacity(p.batches * p.tuples);
    for bi in 0..p.batches {
        for t in 0..p.tuples {
            let base = (bi * p.tuples + t) * p.m;
            let mut off = bi * p.slab;
            for k in 0..p.m {
                let Some(&v) = idx.get(base + k) else {
                    op_bail!("{what}: index tensor is too short");
                };
                off += resolve_index(v, data[b + k], what)? * st[k];
            }
            offs.push(off);
        }
    }
    Ok(offs)
}

impl Op for GatherND {
    op_common!("GatherND", GATHER_PROTO);

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let p = nd_plan(ctx.shape(0)?, ctx.shape(1)?, self.batch_dims)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, p.out_shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let data = required(inputs, 0)?;
        let ind = required(inputs, 1)?;
        let p = nd_plan(data.shape(), ind.shape(), self.batch_dims)?;
        if numel_of(&p.out_shape)? == 0 {
            return Ok(vec![Tensor::zeros(data.dtype(), &p.out_shape)?]);
        }
        let offs = nd_offsets(
            data.shape(),
            &p,
            self.batch_dims as usize,
            &ind.to_i64_vec(),
            "input 1 (indices)",
        )?;
        let es = data.dtype().size();
        let blk = p.block * es;
        let mut out = Tensor::zeros(data.dtype(), &p.out_shape)?;
        let ob = out.bytes_mut();
        let sb = data.bytes();
        for (k, &s) in offs.iter().enumerate() {
            ob[k * blk..(k + 1) * blk].copy_from_slice(&sb[s * es..s * es + blk]);
        }
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t64(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::from_vec(shape, v.to_vec()).unwrap()
    }

    #[test]
    fn gather() {
        let d = Tensor::from_vec(&[3, 2], vec![1.0f32, 1.2, 2.3, 3.4, 4.5, 5.7]).unwrap();
        let i = Tensor::from_vec(&[2, 2], vec![0i32, 1, 1, 2]).unwrap();
        let y = Gather { axis: 0 }.eval(&[Some(&d), Some(&i)]).unwrap();
        assert_eq!(y[0].shape(), &[2, 2, 2]);
        assert_eq!(
            y[0].as_slice::<f32>().unwrap(),
            &[1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7]
        );
        let i = t64(&[], &[-1]);
        let y = Gather { axis: 1 }.eval(&[Some(&d), Some(&i)]).unwrap();
        assert_eq!(y[0].shape(), &[3]);
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[1.2, 3.4, 5.7]);
        let bad = t64(&[1], &[3]);
        assert!(Gather { axis: 0 }.eval(&[Some(&d), Some(&bad)]).is_err());
        assert!(Gather { axis: 2 }.eval(&[Some(&d), Some(&i)]).is_err());
    }

    #[test]
    fn gather_elements() {
        let d = t64(&[2, 2], &[1, 2, 3, 4]);
        let i = t64(&[2, 2], &[0, 0, 1, 0]);
        let y = GatherElements { axis: 1 }
            .eval(&[Some(&d), Some(&i)])
            .unwrap();
        assert_eq!(y[0].to_i64_vec(), vec![1, 1, 4, 3]);
        let d = t64(&[3, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let i = t64(&[2, 3], &[1, 2, 0, 2, 0, -3]);
        let y = GatherElements { axis: 0 }
            .eval(&[Some(&d), Some(&i)])
            .unwrap();
        assert_eq!(y[0].to_i64_vec(), vec![4, 8, 3, 7, 2, 3]);
        let bad = t64(&[1, 1], &[3]);
        assert!(GatherElements { axis: 0 }
            .eval(&[Some(&d), Some(&bad)])
            .is_err());
        let big = t64(&[1, 4], &[0, 0, 0, 0]);
        assert!(GatherElements { axis: 0 }
            .eval(&[Some(&d), Some(&big)])
            .is_err());
    }

    #[test]
    fn gather_nd() {
        let d = t64(&[2, 2], &[0, 1, 2, 3]);
        let i = t64(&[2, 2], &[0, 0, 1, 1]);
        let y = GatherND::default().eval(&[Some(&d), Some(&i)]).unwrap();
        assert_eq!(y[0].shape(), &[2]);
        assert_eq!(y[0].to_i64_vec(), vec![0, 3]);
        let i = t64(&[2, 1], &[1, 0]);
        let y = GatherND::default().eval(&[Some(&d), Some(&i)]).unwrap();
        assert_eq!(y[0].shape(), &[2, 2]);
        assert_eq!(y[0].to_i64_vec(), vec![2, 3, 0, 1]);
        // batch_dims = 1: data [2,2,2], indices [2,1]
        let d = t64(&[2, 2, 2], &[0, 1, 2, 3, 4, 5, 6, 7]);
        let i = t64(&[2, 1], &[1, 0]);
        let y = GatherND { batch_dims: 1 }
            .eval(&[Some(&d), Some(&i)])
            .unwrap();
        assert_eq!(y[0].shape(), &[2, 2]);
        assert_eq!(y[0].to_i64_vec(), vec![2, 3, 4, 5]);
        let bad = t64(&[2, 1], &[2, 0]);
        assert!(GatherND { batch_dims: 1 }
            .eval(&[Some(&d), Some(&bad)])
            .is_err());
        let bad = t64(&[1, 4], &[0, 0, 0, 0]);
        assert!(GatherND::default().eval(&[Some(&d), Some(&bad)]).is_err());
    }
}
