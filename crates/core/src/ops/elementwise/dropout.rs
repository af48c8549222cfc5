//! Dropout in inference form: the output is the input; the optional mask is all true.
//!
//! Training mode (input 2 true with a non-zero ratio) would need random numbers and is
//! refused at evaluation.

use crate::op::{input, optional, optional_output, output, required, Prototype};
use crate::{op_bail, op_common, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Dropout {
    /// Whether the node asks for the mask output.
    pub mask: bool,
    /// Before opset 10 the mask has the input's dtype (ones) instead of bool.
    pub legacy_mask: bool,
}

impl Dropout {
    fn mask_dtype(&self, data: DType) -> DType {
        if self.legacy_mask {
            data
        } else {
            DType::Bool
        }
    }
}

impl Op for Dropout {
    op_common!(
        "Dropout",
        Prototype {
            inputs: &[
                input("data", DTypeSet::ALL),
                optional("ratio", DTypeSet::FLOAT),
                optional("training_mode", DTypeSet::BOOL),
            ],
            outputs: &[output("output"), optional_output("mask")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.like(0)?;
        let mut out = vec![x.clone()];
        if self.mask {
            out.push(TensorInfo::new(self.mask_dtype(x.dtype), x.shape));
        }
        Ok(out)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        if let Some(t) = inputs.get(2).copied().flatten() {
            let training = t.to_i64_vec().first().is_some_and(|&v| v != 0);
            let ratio = match inputs.get(1).copied().flatten() {
                Some(r) => r.to_f64_vec().first().copied().unwrap_or(0.5),
                None => 0.5,
            };
            if training && ratio != 0.0 {
                op_bail!("Dropout in training mode (input 2 is true) is not supported");
            }
        }
        let mut out = vec![x.clone()];
        if self.mask {
            out.push(Tensor::full(self.mask_dtype(x.dtype()), x.shape(), 1.0)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{f32s, run};
    use super::*;

    #[test]
    fn passes_through_with_mask() {
        let x = f32s(&[2], &[1.0, 2.0]);
        let d = Dropout {
            mask: true,
            legacy_mask: false,
        };
        let out = run(&d, &[Some(&x)]);
        assert!(out[0].shares_data_with(&x));
        assert_eq!(out[1].dtype(), DType::Bool);
        assert_eq!(out[1].to_i64_vec(), vec![1, 1]);
        assert_eq!(run(&Dropout::default(), &[Some(&x)]).len(), 1);
        let r = f32s(&[], &[0.5]);
        let t = Tensor::from_bools(&[], &[true]).unwrap();
        assert!(d.eval(&[Some(&x), Some(&r), Some(&t)]).is_err());
        let f = Tensor::from_bools(&[], &[false]).unwrap();
        assert_eq!(d.eval(&[Some(&x), Some(&r), Some(&f)]).unwrap().len(), 2);
    }
}
