//! Reshape: the same elements under a new shape.
//!
//! The target shape is a value-dependent input: `0` copies the input dimension at that
//! position (unless `allowzero`), `-1` is inferred from the element count.

use crate::op::{input, output, required, Prototype};
use crate::ops::util::read_i64s;
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reshape {
    /// A `0` in the shape means an empty dimension instead of "copy the input's".
    pub allowzero: bool,
}

impl Reshape {
    /// The output shape for an input shape and the requested shape.
    pub fn output_shape(&self, input: &[usize], requested: &[i64]) -> OpResult<Vec<usize>> {
        let numel: usize = input.iter().product();
        let mut out = Vec::with_capacity(requested.len());
        let mut infer_at = None;
        for (i, &d) in requested.iter().enumerate() {
            match d {
                -1 => {
                    if infer_at.replace(i).is_some() {
                        op_bail!("shape {requested:?} has more than one -1");
                    }
                    out.push(1);
                }
                0 if !self.allowzero => match input.get(i) {
                    Some(&n) => out.push(n),
                    None => op_bail!(
                        "shape {requested:?} copies dimension {i}, but the input {input:?} has rank {}",
                        input.len()
                    ),
                },
                d if d < 0 => op_bail!("shape {requested:?} has the invalid dimension {d}"),
                d => out.push(d as usize),
            }
        }
        let known = out
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| crate::OpError(format!("shape {requested:?} is too large")))?;
        if let Some(i) = infer_at {
            if known == 0 || !numel.is_multiple_of(known) {
                op_bail!("cannot reshape {input:?} ({numel} elements) to {requested:?}");
            }
            out[i] = numel / known;
        } else if known != numel {
            op_bail!("cannot reshape {input:?} ({numel} elements) to {requested:?}");
        }
        Ok(out)
    }
}

impl Op for Reshape {
    op_common!(
        "Reshape",
        Prototype {
            inputs: &[input("data", DTypeSet::ANY), input("shape", DTypeSet::I64)],
            outputs: &[output("reshaped")],
            value_inputs: &[1],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let requested = read_i64s(ctx.value(1)?, "input 1 (shape)", 64)?;
        let shape = self.output_shape(ctx.shape(0)?, &requested)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, shape)])
    }

    fn output_aliases_input(&self) -> bool {
        true
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let data = required(inputs, 0)?;
        let requested = read_i64s(required(inputs, 1)?, "input 1 (shape)", 64)?;
        let shape = self.output_shape(data.shape(), &requested)?;
        Ok(vec![data.reshaped(&shape)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_copies_and_minus_one_infers() {
        let r = Reshape::default();
        assert_eq!(r.output_shape(&[2, 3, 4], &[0, -1]).unwrap(), vec![2, 12]);
        assert_eq!(
            r.output_shape(&[2, 3, 4], &[4, 0, 2]).unwrap(),
            vec![4, 3, 2]
        );
        assert!(r.output_shape(&[2, 3, 4], &[5, -1]).is_err());
        assert!(r.output_shape(&[2, 3], &[-1, -1]).is_err());
        let z = Reshape { allowzero: true };
        assert_eq!(z.output_shape(&[0, 3], &[3, 0]).unwrap(), vec![3, 0]);
    }

    #[test]
    fn eval_shares_data() {
        let x = Tensor::from_vec(&[2, 3], vec![1.0f32, 2., 3., 4., 5., 6.]).unwrap();
        let s = Tensor::from_vec(&[2], vec![3i64, -1]).unwrap();
        let y = Reshape::default().eval(&[Some(&x), Some(&s)]).unwrap();
        assert_eq!(y[0].shape(), &[3, 2]);
        assert!(y[0].shares_data_with(&x));
    }
}
