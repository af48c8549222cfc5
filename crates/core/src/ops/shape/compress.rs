//! Compress: keep the slices along `axis` (or the elements of the flattened input when there is
//! no axis) whose condition entry is true. The condition is value-dependent.

use super::common::numel_of;
use crate::op::{input, normalize_axis, output, required, Prototype};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Compress {
    pub axis: Option<i64>,
}

impl Compress {
    /// The output shape, the axis length view `(outer, n, inner)` and the selected indices.
    #[allow(clippy::type_complexity)]
    fn plan(
        &self,
        shape: &[usize],
        cond: &Tensor,
    ) -> OpResult<(Vec<usize>, [usize; 3], Vec<usize>)> {
        if cond.rank() != 1 {
            op_bail!("input 1 (condition) must be 1-D, got {:?}", cond.shape());
        }
        let (out_base, view) = match self.axis {
            None => {
                let n: usize = numel_of(shape)?;
                (vec![n], [1, n, 1])
            }
            Some(a) => {
                let a = normalize_axis(a, shape.len())?;
                (
                    shape.to_vec(),
                    [numel_of(&shape[..a])?, shape[a], numel_of(&shape[a + 1..])?],
                )
            }
        };
        let c = cond.to_i64_vec();
        let mut sel = Vec::new();
        for (i, &v) in c.iter().enumerate() {
            if v != 0 {
                if i >= view[1] {
                    op_bail!(
                        "input 1 (condition) selects index {i}, beyond the axis length {}",
                        view[1]
                    );
                }
                sel.push(i);
            }
        }
        let mut out = out_base;
        match self.axis {
            None => out[0] = sel.len(),
            Some(a) => out[normalize_axis(a, shape.len())?] = sel.len(),
        }
        Ok((out, view, sel))
    }
}

impl Op for Compress {
    op_common!(
        "Compress",
        Prototype {
            inputs: &[
                input("input", DTypeSet::ALL),
                input("condition", DTypeSet::BOOL)
            ],
            outputs: &[output("output")],
            value_inputs: &[1],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let (shape, _, _) = self.plan(ctx.shape(0)?, ctx.value(1)?)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let (shape, [outer, n, inner], sel) = self.plan(x.shape(), required(inputs, 1)?)?;
        let mut out = Tensor::zeros(x.dtype(), &shape)?;
        if out.numel() == 0 {
            return Ok(vec![out]);
        }
        let blk = inner * x.dtype().size();
        let sb = x.bytes();
        let ob = out.bytes_mut();
        let mut o = 0;
        for k in 0..outer {
            for &i in &sel {
                let s = (k * n + i) * blk;
                ob[o..o + blk].copy_from_slice(&sb[s..s + blk]);
                o += blk;
            }
        }
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compress() {
        let x = Tensor::from_vec(&[3, 2], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
        let c = Tensor::from_bools(&[3], &[false, true, true]).unwrap();
        let y = Compress { axis: Some(0) }
            .eval(&[Some(&x), Some(&c)])
            .unwrap();
        assert_eq!(y[0].shape(), &[2, 2]);
        assert_eq!(y[0].to_i64_vec(), vec![3, 4, 5, 6]);
        let c2 = Tensor::from_bools(&[2], &[false, true]).unwrap();
        let y = Compress { axis: Some(-1) }
            .eval(&[Some(&x), Some(&c2)])
            .unwrap();
        assert_eq!(y[0].to_i64_vec(), vec![2, 4, 6]);
        let y = Compress { axis: None }.eval(&[Some(&x), Some(&c)]).unwrap();
        assert_eq!(y[0].shape(), &[2]);
        assert_eq!(y[0].to_i64_vec(), vec![2, 3]);
        // A true entry beyond the axis is an error; a shorter condition is fine.
        assert!(Compress { axis: Some(-1) }
            .eval(&[Some(&x), Some(&c)])
            .is_err());
        let short = Tensor::from_bools(&[1], &[true]).unwrap();
        let y = Compress { axis: Some(0) }
            .eval(&[Some(&x), Some(&short)])
            .unwrap();
        assert_eq!(y[0].to_i64_vec(), vec![1, 2]);
    }
}
