//! ScatterElements and ScatterND: a copy of `data` with elements or slices at positions read
//! from an index tensor replaced by (or reduced with) `updates`. Later updates win on duplicate
//! indices for `Reduction::None`.

use super::common::same_dtype;
use super::gather::{check_elementwise_indices, elementwise_offsets, nd_offsets, nd_plan};
use crate::op::{input, output, required, Prototype};
use crate::{
    op_bail, op_common, DType, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

/// How an update combines with the existing element.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reduction {
    #[default]
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl Reduction {
    pub fn parse(s: &str) -> Option<Reduction> {
        Some(match s {
            "none" => Reduction::None,
            "add" => Reduction::Add,
            "mul" => Reduction::Mul,
            "max" => Reduction::Max,
            "min" => Reduction::Min,
            _ => return None,
        })
    }

    fn apply<T: Elem>(self, float: bool, a: T, b: T) -> T {
        match self {
            Reduction::None => b,
            Reduction::Add if float => T::from_f64(a.to_f64() + b.to_f64()),
            Reduction::Add => T::from_i64(a.to_i64().wrapping_add(b.to_i64())),
            Reduction::Mul if float => T::from_f64(a.to_f64() * b.to_f64()),
            Reduction::Mul => T::from_i64(a.to_i64().wrapping_mul(b.to_i64())),
            Reduction::Max => {
                if b > a {
                    b
                } else {
                    a
                }
            }
            Reduction::Min => {
                if b < a {
                    b
                } else {
                    a
                }
            }
        }
    }
}

/// Applies `updates` (blocks of `block` elements) at element offsets `offs` of a copy of `data`.
fn scatter(
    data: &Tensor,
    updates: &Tensor,
    offs: &[usize],
    block: usize,
    r: Reduction,
) -> OpResult<Tensor> {
    let mut out = data.clone();
    let dt = data.dtype();
    let float = dt.is_float();
    let n = out.numel();
    crate::dispatch_all!(dt, T => {
        let u = updates.as_slice::<T>()?;
        let o = out.as_mut_slice::<T>()?;
        for (k, &off) in offs.iter().enumerate() {
            if off + block > n || (k + 1) * block > u.len() {
                op_bail!("internal: scatter block out of range");
            }
            for j in 0..block {
                let v = r.apply(float, o[off + j], u[k * block + j]);
                // Bool stays 0/1 under add/mul.
                o[off + j] = if dt == DType::Bool { T::from_i64((v != T::zero()) as i64) } else { v };
            }
        }
    });
    Ok(out)
}

const SCATTER_PROTO: Prototype = Prototype {
    inputs: &[
        input("data", DTypeSet::ALL),
        input("indices", DTypeSet::INDEX),
        input("updates", DTypeSet::ALL),
    ],
    outputs: &[output("output")],
    value_inputs: &[],
};

/// ScatterElements (and the deprecated Scatter).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScatterElements {
    pub axis: i64,
    pub reduction: Reduction,
}

impl ScatterElements {
    fn check(&self, data: &[usize], ind: &[usize], upd: &[usize]) -> OpResult<usize> {
        if ind != upd {
            op_bail!("updates have shape {upd:?}, but indices have {ind:?}; they must match");
        }
        check_elementwise_indices(data, ind, self.axis)
    }
}

impl Op for ScatterElements {
    op_common!("ScatterElements", SCATTER_PROTO);

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = same_dtype(&[(0, ctx.dtype(0)?), (2, ctx.dtype(2)?)])?;
        self.check(ctx.shape(0)?, ctx.shape(1)?, ctx.shape(2)?)?;
        Ok(vec![TensorInfo::new(dt, ctx.shape(0)?)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let data = required(inputs, 0)?;
        let ind = required(inputs, 1)?;
        let upd = required(inputs, 2)?;
        same_dtype(&[(0, data.dtype()), (2, upd.dtype())])?;
        let axis = self.check(data.shape(), ind.shape(), upd.shape())?;
        let offs = elementwise_offsets(
            data.shape(),
            ind.shape(),
            &ind.to_i64_vec(),
            axis,
            "input 1 (indices)",
        )?;
        Ok(vec![scatter(data, upd, &offs, 1, self.reduction)?])
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScatterND {
    pub reduction: Reduction,
}

impl Op for ScatterND {
    op_common!("ScatterND", SCATTER_PROTO);

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = same_dtype(&[(0, ctx.dtype(0)?), (2, ctx.dtype(2)?)])?;
        let p = nd_plan(ctx.shape(0)?, ctx.shape(1)?, 0)?;
        if p.out_shape != ctx.shape(2)? {
            op_bail!(
                "updates have shape {:?}, expected {:?}",
                ctx.shape(2)?,
                p.out_shape
            );
        }
        Ok(vec![TensorInfo::new(dt, ctx.shape(0)?)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let data = required(inputs, 0)?;
        let ind = required(inputs, 1)?;
        let upd = required(inputs, 2)?;
        same_dtype(&[(0, data.dtype()), (2, upd.dtype())])?;
        let p = nd_plan(data.shape(), ind.shape(), 0)?;
        if p.out_shape != upd.shape() {
            op_bail!(
                "updates have shape {:?}, expected {:?}",
                upd.shape(),
                p.out_shape
            );
        }
        let offs = nd_offsets(data.shape(), &p, 0, &ind.to_i64_vec(), "input 1 (indices)")?;
        Ok(vec![scatter(data, upd, &offs, p.block, self.reduction)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(shape, v.to_vec()).unwrap()
    }
    fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::from_vec(shape, v.to_vec()).unwrap()
    }

    #[test]
    fn scatter_elements() {
        let d = f32s(&[1, 5], &[1., 2., 3., 4., 5.]);
        let i = i64s(&[1, 2], &[1, -2]);
        let u = f32s(&[1, 2], &[1.1, 2.1]);
        let op = ScatterElements {
            axis: 1,
            reduction: Reduction::None,
        };
        let y = op.eval(&[Some(&d), Some(&i), Some(&u)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[1., 1.1, 3., 2.1, 5.]);
        let i = i64s(&[1, 2], &[1, 1]);
        let add = ScatterElements {
            axis: 1,
            reduction: Reduction::Add,
        };
        let y = add.eval(&[Some(&d), Some(&i), Some(&u)]).unwrap();
        let v = y[0].as_slice::<f32>().unwrap();
        assert!((v[1] - 5.2).abs() < 1e-6);
        let max = ScatterElements {
            axis: 1,
            reduction: Reduction::Max,
        };
        let y = max.eval(&[Some(&d), Some(&i), Some(&u)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[1., 2.1, 3., 4., 5.]);
        let min = ScatterElements {
            axis: 1,
            reduction: Reduction::Min,
        };
        let y = min.eval(&[Some(&d), Some(&i), Some(&u)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[1., 1.1, 3., 4., 5.]);
        let bad = i64s(&[1, 2], &[1, 5]);
        assert!(op.eval(&[Some(&d), Some(&bad), Some(&u)]).is_err());
        // axis 0 on 3x3
        let d = i64s(&[3, 3], &[0; 9]);
        let i = i64s(&[2, 3], &[1, 0, 2, 0, 2, 1]);
        let u = i64s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let y = ScatterElements::default()
            .eval(&[Some(&d), Some(&i), Some(&u)])
            .unwrap();
        assert_eq!(y[0].to_i64_vec(), vec![4, 2, 0, 1, 0, 6, 0, 5, 3]);
    }

    #[test]
    fn scatter_nd() {
        let d = i64s(&[8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        let i = i64s(&[4, 1], &[4, 3, 1, 7]);
        let u = i64s(&[4], &[9, 10, 11, 12]);
        let y = ScatterND::default()
            .eval(&[Some(&d), Some(&i), Some(&u)])
            .unwrap();
        assert_eq!(y[0].to_i64_vec(), vec![1, 11, 3, 10, 9, 6, 7, 12]);
        let mul = ScatterND {
            reduction: Reduction::Mul,
        };
        let i = i64s(&[2, 1], &[0, 0]);
        let u = i64s(&[2], &[3, 5]);
        let y = mul.eval(&[Some(&d), Some(&i), Some(&u)]).unwrap();
        assert_eq!(y[0].to_i64_vec()[0], 15);
        // Slices: data [2,2], indices [1,1] -> updates [1,2]
        let d = f32s(&[2, 2], &[1., 2., 3., 4.]);
        let i = i64s(&[1, 1], &[1]);
        let u = f32s(&[1, 2], &[9., 8.]);
        let y = ScatterND::default()
            .eval(&[Some(&d), Some(&i), Some(&u)])
            .unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[1., 2., 9., 8.]);
        let bad_u = f32s(&[2], &[9., 8.]);
        assert!(ScatterND::default()
            .eval(&[Some(&d), Some(&i), Some(&bad_u)])
            .is_err());
        let bad_i = i64s(&[1, 1], &[-3]);
        assert!(ScatterND::default()
            .eval(&[Some(&d), Some(&bad_i), Some(&u)])
            .is_err());
    }
}
