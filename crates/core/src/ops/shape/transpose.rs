//! Transpose: permute the axes; the default permutation reverses them.

use super::common::permute;
use crate::op::{input, output, required, Prototype};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Transpose {
    /// Output axis `i` is input axis `perm[i]`; `None` reverses the axes.
    pub perm: Option<Vec<i64>>,
}

impl Transpose {
    /// The checked permutation for a rank (negative entries count from the end).
    pub fn resolved_perm(&self, rank: usize) -> OpResult<Vec<usize>> {
        match &self.perm {
            None => Ok((0..rank).rev().collect()),
            Some(p) => {
                if p.len() != rank {
                    op_bail!(
                        "perm {p:?} has {} entries for an input of rank {rank}",
                        p.len()
                    );
                }
                crate::op::normalize_axes(p, rank)
            }
        }
    }
}

impl Op for Transpose {
    op_common!(
        "Transpose",
        Prototype {
            inputs: &[input("data", DTypeSet::ANY)],
            outputs: &[output("transposed")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = ctx.shape(0)?;
        let p = self.resolved_perm(s.len())?;
        let shape = p.iter().map(|&i| s[i]).collect::<Vec<_>>();
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let p = self.resolved_perm(x.rank())?;
        Ok(vec![permute(x, x.shape(), &p)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations() {
        let x = Tensor::from_vec(&[2, 3, 1], vec![1.0f32, 2., 3., 4., 5., 6.]).unwrap();
        let y = Transpose::default().eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 3, 2]);
        assert_eq!(y[0].to_f64_vec(), vec![1., 4., 2., 5., 3., 6.]);
        let t = Transpose {
            perm: Some(vec![1, 0, 2]),
        };
        let y = t.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[3, 2, 1]);
        assert_eq!(y[0].to_f64_vec(), vec![1., 4., 2., 5., 3., 6.]);
        let bad = Transpose {
            perm: Some(vec![0, 0, 1]),
        };
        assert!(bad.eval(&[Some(&x)]).is_err());
        let bad = Transpose {
            perm: Some(vec![0, 1]),
        };
        assert!(bad.eval(&[Some(&x)]).is_err());
    }
}
