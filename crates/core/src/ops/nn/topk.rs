//! TopK: the k largest (or smallest) elements along an axis, with their indices.
//!
//! `k` is an attribute in opset 1 and a value-dependent input from opset 10; [`TopK`] takes
//! either. Equal values keep the lower index first.

use super::split_at_axis;
use crate::op::{input, normalize_axis, optional, output, required, Prototype};
use crate::ops::util::read_i64s;
use crate::{
    dispatch_all, op_bail, op_common, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo,
};
use std::cmp::Ordering;

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TopK {
    pub axis: i64,
    pub largest: bool,
    /// Unsorted output is allowed to be in any order; this implementation always sorts.
    pub sorted: bool,
    /// The opset-1 attribute; the `K` input, when given, takes precedence.
    pub k: Option<i64>,
}

impl Default for TopK {
    fn default() -> Self {
        TopK {
            axis: -1,
            largest: true,
            sorted: true,
            k: None,
        }
    }
}

impl TopK {
    fn resolve(&self, x: &[usize], k_input: Option<&Tensor>) -> OpResult<(usize, usize)> {
        let k = match k_input {
            Some(t) => {
                let v = read_i64s(t, "input 1 (K)", 1)?;
                match v.first() {
                    Some(&k) => k,
                    None => op_bail!("input 1 (K) is empty"),
                }
            }
            None => match self.k {
                Some(k) => k,
                None => op_bail!("K is neither an input nor an attribute"),
            },
        };
        if x.is_empty() {
            op_bail!("input 0 must have rank >= 1");
        }
        let axis = normalize_axis(self.axis, x.len())?;
        if k < 0 || k as usize > x[axis] {
            op_bail!(
                "K = {k} is out of range for axis {axis} of size {}",
                x[axis]
            );
        }
        Ok((axis, k as usize))
    }
}

impl Op for TopK {
    op_common!(
        "TopK",
        Prototype {
            inputs: &[input("X", DTypeSet::NUMERIC), optional("K", DTypeSet::I64)],
            outputs: &[output("Values"), output("Indices")],
            value_inputs: &[1],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.shape(0)?;
        let kt = if ctx.has(1) {
            Some(ctx.value(1)?)
        } else {
            None
        };
        let (axis, k) = self.resolve(x, kt)?;
        let mut s = x.to_vec();
        s[axis] = k;
        Ok(vec![
            TensorInfo::new(ctx.dtype(0)?, s.clone()),
            TensorInfo::new(DType::I64, s),
        ])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let (axis, k) = self.resolve(x.shape(), inputs.get(1).copied().flatten())?;
        let mut shape = x.shape().to_vec();
        shape[axis] = k;
        let (outer, len, inner) = split_at_axis(x.shape(), axis);
        let mut values = Tensor::zeros(x.dtype(), &shape)?;
        let mut indices = vec![0i64; values.numel()];
        if values.numel() == 0 {
            // Nothing to pick; the loops below would still walk the (possibly huge) outer
            // dims of an empty input.
            return Ok(vec![values, Tensor::from_vec(&shape, indices)?]);
        }
        dispatch_all!(x.dtype(), T => {
            let xs = x.as_slice::<T>()?;
            let vs = values.as_mut_slice::<T>()?;
            let mut order: Vec<usize> = Vec::with_capacity(len);
            for o in 0..outer {
                for i in 0..inner {
                    let at = |j: usize| o * len * inner + j * inner + i;
                    order.clear();
                    order.extend(0..len);
                    // Stable sort: equal values keep ascending indices.
                    crate::ops::util::sort_indices_by(&mut order, &mut |a, b| {
                        let c = xs[at(a)].partial_cmp(&xs[at(b)]).unwrap_or(Ordering::Equal);
                        if self.largest { c.reverse() } else { c }
                    });
                    for (j, &src) in order.iter().take(k).enumerate() {
                        let dst = o * k * inner + j * inner + i;
                        vs[dst] = xs[at(src)];
                        indices[dst] = src as i64;
                    }
                }
            }
        });
        Ok(vec![values, Tensor::from_vec(&shape, indices)?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, f32t};
    use super::*;

    #[test]
    fn largest_smallest_ties() {
        let x = f32t(&[2, 4], &[1., 3., 3., 2., 4., 0., 4., -1.]);
        let k = Tensor::from_vec(&[1], vec![2i64]).unwrap();
        let y = TopK::default().eval(&[Some(&x), Some(&k)]).unwrap();
        assert_eq!(y[0].shape(), &[2, 2]);
        assert_close(&y[0], &[3., 3., 4., 4.], 0.0);
        assert_eq!(y[1].to_i64_vec(), vec![1, 2, 0, 2]);
        let s = TopK {
            largest: false,
            axis: 1,
            ..Default::default()
        };
        let y = s.eval(&[Some(&x), Some(&k)]).unwrap();
        assert_close(&y[0], &[1., 2., -1., 0.], 0.0);
        assert_eq!(y[1].to_i64_vec(), vec![0, 3, 3, 1]);
        let a0 = TopK {
            axis: 0,
            k: Some(1),
            ..Default::default()
        };
        let y = a0.eval(&[Some(&x), None]).unwrap();
        assert_eq!(y[1].to_i64_vec(), vec![1, 0, 1, 0]);
        let big = Tensor::from_vec(&[1], vec![5i64]).unwrap();
        assert!(TopK::default().eval(&[Some(&x), Some(&big)]).is_err());
    }

    #[test]
    fn integers() {
        let x = Tensor::from_vec(&[3], vec![u64::MAX, 1, u64::MAX - 1]).unwrap();
        let y = TopK {
            k: Some(2),
            ..Default::default()
        }
        .eval(&[Some(&x), None])
        .unwrap();
        assert_eq!(y[0].as_slice::<u64>().unwrap(), &[u64::MAX, u64::MAX - 1]);
        assert_eq!(y[1].to_i64_vec(), vec![0, 2]);
    }
}
