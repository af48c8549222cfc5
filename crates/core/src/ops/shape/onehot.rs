//! OneHot: a new axis of size `depth` holding `values[1]` at each index and `values[0]`
//! elsewhere. Negative indices count from `depth`; indices out of range give an all-off row.

use super::common::{numel_of, scalar_i64};
use crate::op::{input, output, required, Prototype};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OneHot {
    /// Where the new axis goes, in `[-rank-1, rank]`.
    pub axis: i64,
}

impl Default for OneHot {
    fn default() -> Self {
        OneHot { axis: -1 }
    }
}

impl OneHot {
    fn plan(&self, ind: &[usize], depth: &Tensor) -> OpResult<(Vec<usize>, usize, usize)> {
        let d = if depth.dtype().is_float() {
            let v = depth.to_f64_vec();
            if v.len() != 1 {
                op_bail!("input 1 (depth) must be a scalar, got {:?}", depth.shape());
            }
            v[0] as i64
        } else {
            scalar_i64(depth, "input 1 (depth)")?
        };
        if d < 1 {
            op_bail!("input 1 (depth) must be positive, got {d}");
        }
        let r = ind.len() as i64;
        let a = if self.axis < 0 {
            self.axis + r + 1
        } else {
            self.axis
        };
        if a < 0 || a > r {
            op_bail!("axis {} is out of range for indices of rank {r}", self.axis);
        }
        let a = a as usize;
        let mut out = ind[..a].to_vec();
        out.push(d as usize);
        out.extend_from_slice(&ind[a..]);
        numel_of(&out)?;
        Ok((out, a, d as usize))
    }
}

impl Op for OneHot {
    op_common!(
        "OneHot",
        Prototype {
            inputs: &[
                input("indices", DTypeSet::NUMERIC),
                input("depth", DTypeSet::NUMERIC),
                input("values", DTypeSet::ALL),
            ],
            outputs: &[output("output")],
            value_inputs: &[1],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let (shape, _, _) = self.plan(ctx.shape(0)?, ctx.value(1)?)?;
        if numel_of(ctx.shape(2)?)? != 2 {
            op_bail!(
                "input 2 (values) must hold 2 elements, got {:?}",
                ctx.shape(2)?
            );
        }
        Ok(vec![TensorInfo::new(ctx.dtype(2)?, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let ind = required(inputs, 0)?;
        let values = required(inputs, 2)?;
        let (shape, axis, depth) = self.plan(ind.shape(), required(inputs, 1)?)?;
        if values.numel() != 2 {
            op_bail!(
                "input 2 (values) must hold 2 elements, got {:?}",
                values.shape()
            );
        }
        let es = values.dtype().size();
        let (off, on) = values.bytes().split_at(es);
        let mut out = Tensor::zeros(values.dtype(), &shape)?;
        let ob = out.bytes_mut();
        for c in ob.chunks_exact_mut(es) {
            c.copy_from_slice(off);
        }
        let inner: usize = numel_of(&ind.shape()[axis..])?;
        // Floats are truncated toward zero, as a cast to int would.
        for (p, &v) in ind.to_i64_vec().iter().enumerate() {
            let v = if v < 0 {
                v as i128 + depth as i128
            } else {
                v as i128
            };
            if v < 0 || v >= depth as i128 {
                continue;
            }
            let (o, i) = (p / inner, p % inner);
            let e = (o * depth + v as usize) * inner + i;
            ob[e * es..(e + 1) * es].copy_from_slice(on);
        }
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onehot() {
        let ind = Tensor::from_vec(&[3], vec![0i64, -1, 5]).unwrap();
        let depth = Tensor::scalar(3.0f32);
        let vals = Tensor::from_vec(&[2], vec![1i32, 9]).unwrap();
        let y = OneHot::default()
            .eval(&[Some(&ind), Some(&depth), Some(&vals)])
            .unwrap();
        assert_eq!(y[0].shape(), &[3, 3]);
        assert_eq!(y[0].to_i64_vec(), vec![9, 1, 1, 1, 1, 9, 1, 1, 1]);
        let y = OneHot { axis: 0 }
            .eval(&[Some(&ind), Some(&depth), Some(&vals)])
            .unwrap();
        assert_eq!(y[0].to_i64_vec(), vec![9, 1, 1, 1, 1, 1, 1, 9, 1]);
        // axis in the middle: indices [2,1] -> [2,3,1] with axis 1 (= -2)
        let ind = Tensor::from_vec(&[2, 1], vec![1.0f32, 2.0]).unwrap();
        let y = OneHot { axis: -2 }
            .eval(&[Some(&ind), Some(&depth), Some(&vals)])
            .unwrap();
        assert_eq!(y[0].shape(), &[2, 3, 1]);
        assert_eq!(y[0].to_i64_vec(), vec![1, 9, 1, 1, 1, 9]);
        assert!(OneHot { axis: 3 }
            .eval(&[Some(&ind), Some(&depth), Some(&vals)])
            .is_err());
        let zero = Tensor::scalar(0i64);
        assert!(OneHot::default()
            .eval(&[Some(&ind), Some(&zero), Some(&vals)])
            .is_err());
    }
}
