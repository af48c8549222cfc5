//! Concat: join tensors of equal rank along one axis.

use super::common::numel_of;
use super::common::same_dtype;
use crate::op::{normalize_axis, output, variadic, Prototype};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpError, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Concat {
    /// Negative counts from the end.
    pub axis: i64,
}

impl Concat {
    /// The output shape and the normalised axis.
    pub fn output_shape(&self, shapes: &[&[usize]]) -> OpResult<(Vec<usize>, usize)> {
        let Some(first) = shapes.first() else {
            op_bail!("Concat needs at least one input");
        };
        let rank = first.len();
        let axis = normalize_axis(self.axis, rank)?;
        let mut out = first.to_vec();
        for (i, s) in shapes.iter().enumerate().skip(1) {
            if s.len() != rank {
                op_bail!(
                    "input {i} has shape {s:?}, rank {} expected (input 0 is {first:?})",
                    rank
                );
            }
            for d in 0..rank {
                if d != axis && s[d] != first[d] {
                    op_bail!("input {i} has shape {s:?}, incompatible with input 0 {first:?} outside axis {axis}");
                }
            }
            out[axis] = out[axis]
                .checked_add(s[axis])
                .ok_or_else(|| OpError("concatenated dimension overflows".into()))?;
        }
        Ok((out, axis))
    }
}

impl Op for Concat {
    op_common!(
        "Concat",
        Prototype {
            inputs: &[variadic("inputs", DTypeSet::ANY, 1)],
            outputs: &[output("concat_result")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let mut shapes = Vec::with_capacity(ctx.len());
        let mut dts = Vec::with_capacity(ctx.len());
        for i in 0..ctx.len() {
            shapes.push(ctx.shape(i)?);
            dts.push((i, ctx.dtype(i)?));
        }
        let dt = same_dtype(&dts)?;
        Ok(vec![TensorInfo::new(dt, self.output_shape(&shapes)?.0)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let xs: Vec<&Tensor> = inputs
            .iter()
            .enumerate()
            .map(|(i, x)| x.ok_or_else(|| OpError(format!("input {i} is missing"))))
            .collect::<OpResult<_>>()?;
        let dts: Vec<_> = xs.iter().enumerate().map(|(i, x)| (i, x.dtype())).collect();
        let dt = same_dtype(&dts)?;
        let shapes: Vec<&[usize]> = xs.iter().map(|x| x.shape()).collect();
        let (shape, axis) = self.output_shape(&shapes)?;
        let mut out = Tensor::zeros(dt, &shape)?;
        if out.numel() == 0 {
            return Ok(vec![out]);
        }
        let es = dt.size();
        let outer: usize = numel_of(&shape[..axis])?;
        let inner: usize = numel_of(&shape[axis + 1..])?;
        // Per outer index, each input contributes one contiguous block.
        let blocks: Vec<usize> = xs.iter().map(|x| x.shape()[axis] * inner * es).collect();
        let ob = out.bytes_mut();
        let mut o = 0;
        for k in 0..outer {
            for (x, &b) in xs.iter().zip(&blocks) {
                ob[o..o + b].copy_from_slice(&x.bytes()[k * b..(k + 1) * b]);
                o += b;
            }
        }
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concat_axes() {
        let a = Tensor::from_vec(&[2, 2], vec![1i64, 2, 3, 4]).unwrap();
        let b = Tensor::from_vec(&[2, 1], vec![5i64, 6]).unwrap();
        let c = Concat { axis: -1 }.eval(&[Some(&a), Some(&b)]).unwrap();
        assert_eq!(c[0].shape(), &[2, 3]);
        assert_eq!(c[0].to_i64_vec(), vec![1, 2, 5, 3, 4, 6]);
        let c = Concat { axis: 0 }.eval(&[Some(&a), Some(&a)]).unwrap();
        assert_eq!(c[0].to_i64_vec(), vec![1, 2, 3, 4, 1, 2, 3, 4]);
        assert!(Concat { axis: 0 }.eval(&[Some(&a), Some(&b)]).is_err());
        let f = Tensor::from_vec(&[2, 1], vec![5.0f32, 6.]).unwrap();
        assert!(Concat { axis: 1 }.eval(&[Some(&a), Some(&f)]).is_err());
        let e = Tensor::zeros(crate::DType::I64, &[2, 0]).unwrap();
        let c = Concat { axis: 1 }.eval(&[Some(&e), Some(&b)]).unwrap();
        assert_eq!(c[0].to_i64_vec(), vec![5, 6]);
    }
}
