//! Split: cut a tensor along one axis into `num_outputs` pieces.
//!
//! The sizes come from the `split` attribute (ONNX < 13), the `split` input (>= 13) or, when
//! neither is given, are equal chunks of `ceil(n / num_outputs)` with the last one smaller.

use super::common::strided_copy;
use crate::op::{input, normalize_axis, optional, output, required, Prototype};
use crate::ops::util::{read_i64s, strides};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Split {
    pub axis: i64,
    /// Piece sizes as an attribute (input 1 takes precedence).
    pub split: Option<Vec<i64>>,
    /// Number of outputs (the node's output count).
    pub num_outputs: usize,
}

impl Default for Split {
    fn default() -> Self {
        Split {
            axis: 0,
            split: None,
            num_outputs: 1,
        }
    }
}

impl Split {
    /// The piece sizes for an input dimension of `n`.
    pub fn sizes(&self, n: usize, given: Option<&[i64]>) -> OpResult<Vec<usize>> {
        let k = self.num_outputs;
        if k == 0 {
            op_bail!("Split needs at least one output");
        }
        let given = given.or(self.split.as_deref());
        match given {
            Some(s) => {
                if s.len() != k {
                    op_bail!(
                        "split {s:?} has {} entries, but the node has {k} outputs",
                        s.len()
                    );
                }
                let mut total: i128 = 0;
                for &v in s {
                    if v < 0 {
                        op_bail!("split {s:?} has a negative size");
                    }
                    total += v as i128;
                }
                if total != n as i128 {
                    op_bail!("split {s:?} sums to {total}, but the dimension is {n}");
                }
                Ok(s.iter().map(|&v| v as usize).collect())
            }
            None => {
                let chunk = n.div_ceil(k);
                let used = chunk * (k - 1);
                if used > n {
                    op_bail!("cannot split a dimension of {n} into {k} chunks of {chunk}");
                }
                let mut v = vec![chunk; k];
                v[k - 1] = n - used;
                Ok(v)
            }
        }
    }

    fn plan(&self, shape: &[usize], given: Option<&[i64]>) -> OpResult<(usize, Vec<usize>)> {
        let axis = normalize_axis(self.axis, shape.len())?;
        Ok((axis, self.sizes(shape[axis], given)?))
    }
}

impl Op for Split {
    op_common!(
        "Split",
        Prototype {
            inputs: &[
                input("input", DTypeSet::ANY),
                optional("split", DTypeSet::I64)
            ],
            outputs: &[output("outputs")],
            value_inputs: &[1],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let given = match ctx.has(1) {
            true => Some(read_i64s(ctx.value(1)?, "input 1 (split)", 1 << 16)?),
            false => None,
        };
        let shape = ctx.shape(0)?;
        let (axis, sizes) = self.plan(shape, given.as_deref())?;
        let dt = ctx.dtype(0)?;
        Ok(sizes
            .iter()
            .map(|&s| {
                let mut o = shape.to_vec();
                o[axis] = s;
                TensorInfo::new(dt, o)
            })
            .collect())
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let given = match inputs.get(1).copied().flatten() {
            Some(t) => Some(read_i64s(t, "input 1 (split)", 1 << 16)?),
            None => None,
        };
        let (axis, sizes) = self.plan(x.shape(), given.as_deref())?;
        let st: Vec<i128> = strides(x.shape()).iter().map(|&s| s as i128).collect();
        let mut start = 0usize;
        let mut outs = Vec::with_capacity(sizes.len());
        for s in sizes {
            let mut shape = x.shape().to_vec();
            shape[axis] = s;
            outs.push(strided_copy(x, &shape, &st, start as i128 * st[axis])?);
            start += s;
        }
        Ok(outs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(t: &[Tensor]) -> Vec<Vec<i64>> {
        t.iter().map(|t| t.to_i64_vec()).collect()
    }

    #[test]
    fn splits() {
        let x = Tensor::from_vec(&[2, 3], vec![1i32, 2, 3, 4, 5, 6]).unwrap();
        let s = Split {
            axis: 1,
            split: None,
            num_outputs: 3,
        };
        assert_eq!(
            vals(&s.eval(&[Some(&x)]).unwrap()),
            vec![vec![1, 4], vec![2, 5], vec![3, 6]]
        );
        let s = Split {
            axis: -1,
            split: Some(vec![1, 2]),
            num_outputs: 2,
        };
        let y = s.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[1].shape(), &[2, 2]);
        assert_eq!(vals(&y), vec![vec![1, 4], vec![2, 3, 5, 6]]);
        // Input overrides; zero-size pieces are fine.
        let sp = Tensor::from_vec(&[2], vec![0i64, 3]).unwrap();
        let y = s.eval(&[Some(&x), Some(&sp)]).unwrap();
        assert_eq!(y[0].shape(), &[2, 0]);
        assert_eq!(vals(&y)[1], vec![1, 2, 3, 4, 5, 6]);
        let bad = Tensor::from_vec(&[2], vec![1i64, 1]).unwrap();
        assert!(s.eval(&[Some(&x), Some(&bad)]).is_err());
    }

    #[test]
    fn uneven() {
        let s = Split {
            num_outputs: 3,
            ..Default::default()
        };
        assert_eq!(s.sizes(7, None).unwrap(), vec![3, 3, 1]);
        assert_eq!(s.sizes(6, None).unwrap(), vec![2, 2, 2]);
        let s4 = Split {
            num_outputs: 4,
            ..Default::default()
        };
        assert_eq!(s4.sizes(6, None).unwrap(), vec![2, 2, 2, 0]);
        assert!(s4.sizes(5, None).is_err());
    }
}
