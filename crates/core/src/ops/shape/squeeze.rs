//! Squeeze and Unsqueeze: remove or insert size-1 axes.
//!
//! The axes are an attribute before ONNX opset 13 and a (value-dependent) input from 13; both
//! are accepted, the input taking precedence.

use crate::op::{input, optional, output, required, Prototype};
use crate::ops::util::read_i64s;
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

fn axes_of(attr: &Option<Vec<i64>>, input: Option<&Tensor>) -> OpResult<Option<Vec<i64>>> {
    match input {
        Some(t) => Ok(Some(read_i64s(t, "input 1 (axes)", 64)?)),
        None => Ok(attr.clone()),
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Squeeze {
    /// Axes to remove; `None` removes every size-1 axis.
    pub axes: Option<Vec<i64>>,
}

impl Squeeze {
    pub fn output_shape(&self, input: &[usize], axes: Option<&[i64]>) -> OpResult<Vec<usize>> {
        match axes {
            None => Ok(input.iter().copied().filter(|&d| d != 1).collect()),
            Some(a) => {
                let ax = crate::op::normalize_axes(a, input.len())?;
                for &k in &ax {
                    if input[k] != 1 {
                        op_bail!("cannot squeeze axis {k} of shape {input:?}: its size is not 1");
                    }
                }
                Ok(input
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !ax.contains(i))
                    .map(|(_, &d)| d)
                    .collect())
            }
        }
    }
}

const SQ_PROTO: Prototype = Prototype {
    inputs: &[
        input("data", DTypeSet::ANY),
        optional("axes", DTypeSet::I64),
    ],
    outputs: &[output("squeezed")],
    value_inputs: &[1],
};

impl Op for Squeeze {
    op_common!("Squeeze", SQ_PROTO);

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let v = if ctx.has(1) {
            Some(ctx.value(1)?)
        } else {
            None
        };
        let axes = axes_of(&self.axes, v)?;
        let shape = self.output_shape(ctx.shape(0)?, axes.as_deref())?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, shape)])
    }

    fn output_aliases_input(&self) -> bool {
        true
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let axes = axes_of(&self.axes, inputs.get(1).copied().flatten())?;
        let shape = self.output_shape(x.shape(), axes.as_deref())?;
        Ok(vec![x.reshaped(&shape)?])
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Unsqueeze {
    /// Axes (of the output) at which size-1 dimensions are inserted. Required unless given as
    /// input 1.
    pub axes: Option<Vec<i64>>,
}

impl Unsqueeze {
    pub fn output_shape(&self, input: &[usize], axes: Option<&[i64]>) -> OpResult<Vec<usize>> {
        let Some(a) = axes else {
            op_bail!("Unsqueeze needs axes (an attribute or input 1)");
        };
        let rank = input.len() + a.len();
        let ax = crate::op::normalize_axes(a, rank)?;
        let mut src = input.iter();
        let mut out = Vec::with_capacity(rank);
        for i in 0..rank {
            if ax.contains(&i) {
                out.push(1);
            } else {
                match src.next() {
                    Some(&d) => out.push(d),
                    None => op_bail!("internal: unsqueeze ran out of input dimensions"),
                }
            }
        }
        Ok(out)
    }
}

const UNSQ_PROTO: Prototype = Prototype {
    inputs: &[
        input("data", DTypeSet::ANY),
        optional("axes", DTypeSet::I64),
    ],
    outputs: &[output("expanded")],
    value_inputs: &[1],
};

impl Op for Unsqueeze {
    op_common!("Unsqueeze", UNSQ_PROTO);

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let v = if ctx.has(1) {
            Some(ctx.value(1)?)
        } else {
            None
        };
        let axes = axes_of(&self.axes, v)?;
        let shape = self.output_shape(ctx.shape(0)?, axes.as_deref())?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, shape)])
    }

    fn output_aliases_input(&self) -> bool {
        true
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let axes = axes_of(&self.axes, inputs.get(1).copied().flatten())?;
        let shape = self.output_shape(x.shape(), axes.as_deref())?;
        Ok(vec![x.reshaped(&shape)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeeze() {
        let s = Squeeze::default();
        assert_eq!(s.output_shape(&[1, 3, 1, 5], None).unwrap(), vec![3, 5]);
        assert_eq!(
            s.output_shape(&[1, 3, 1, 5], Some(&[-2])).unwrap(),
            vec![1, 3, 5]
        );
        assert!(s.output_shape(&[1, 3], Some(&[1])).is_err());
        assert!(s.output_shape(&[1, 3], Some(&[2])).is_err());
        let x = Tensor::zeros(crate::DType::F32, &[1, 3, 1]).unwrap();
        let a = Tensor::from_vec(&[1], vec![0i64]).unwrap();
        let y = s.eval(&[Some(&x), Some(&a)]).unwrap();
        assert_eq!(y[0].shape(), &[3, 1]);
        let attr = Squeeze {
            axes: Some(vec![2]),
        };
        assert_eq!(attr.eval(&[Some(&x)]).unwrap()[0].shape(), &[1, 3]);
    }

    #[test]
    fn unsqueeze() {
        let u = Unsqueeze::default();
        assert_eq!(
            u.output_shape(&[3, 4], Some(&[0, 3])).unwrap(),
            vec![1, 3, 4, 1]
        );
        assert_eq!(
            u.output_shape(&[3, 4, 5], Some(&[5, 4, 2])).unwrap(),
            vec![3, 4, 1, 5, 1, 1]
        );
        assert_eq!(u.output_shape(&[3], Some(&[-1])).unwrap(), vec![3, 1]);
        assert!(u.output_shape(&[3], Some(&[0, 0])).is_err());
        assert!(u.output_shape(&[3], Some(&[3])).is_err());
        assert!(u.output_shape(&[3], None).is_err());
        let x = Tensor::scalar(2.0f32);
        let a = Tensor::from_vec(&[1], vec![0i64]).unwrap();
        let y = u.eval(&[Some(&x), Some(&a)]).unwrap();
        assert_eq!(y[0].shape(), &[1]);
    }
}
