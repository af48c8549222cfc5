//! The optional ops: Optional (wraps a value, or makes an empty optional), OptionalHasElement
//! and OptionalGetElement. The last two also accept a plain tensor or sequence, which always
//! has its element.

use crate::op::{optional, output, required, Prototype};
use crate::{op_bail, op_common, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// Optional: an optional holding its input, or an empty one without an input.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Optional;

impl Op for Optional {
    op_common!(
        "Optional",
        Prototype {
            inputs: &[optional(
                "input",
                DTypeSet::ALL
                    .union(DTypeSet::STRING)
                    .union(DTypeSet::SEQUENCE)
            )],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(DType::Optional, [])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let value = inputs.first().copied().flatten().cloned();
        Ok(vec![Tensor::from_optional(value)])
    }
}

/// OptionalHasElement: whether an optional holds a value (true for a tensor or sequence; false
/// without an input).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OptionalHasElement;

impl Op for OptionalHasElement {
    op_common!(
        "OptionalHasElement",
        Prototype {
            inputs: &[optional("input", DTypeSet::VALUE)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(DType::Bool, [])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let has = match inputs.first().copied().flatten() {
            None => false,
            Some(t) if t.dtype() == DType::Optional => t.optional()?.is_some(),
            Some(_) => true,
        };
        Ok(vec![Tensor::from_bools(&[], &[has])?])
    }
}

/// OptionalGetElement: the value an optional holds (an error when it is empty); a tensor or
/// sequence is passed through.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OptionalGetElement;

impl Op for OptionalGetElement {
    op_common!(
        "OptionalGetElement",
        Prototype {
            inputs: &[optional("input", DTypeSet::VALUE)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        op_bail!("OptionalGetElement's type is that of the value held, known only by running it")
    }

    fn shapes_known_by_running(&self) -> bool {
        true
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let t = required(inputs, 0)?;
        if t.dtype() != DType::Optional {
            return Ok(vec![t.clone()]);
        }
        match t.optional()? {
            Some(v) => Ok(vec![v.clone()]),
            None => op_bail!("the optional is empty"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_test_and_unwrap() {
        let x = Tensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap();
        let some = &Optional.eval(&[Some(&x)]).unwrap()[0];
        let none = &Optional.eval(&[None]).unwrap()[0];
        let has = |t: Option<&Tensor>| OptionalHasElement.eval(&[t]).unwrap()[0].to_i64_vec();
        assert_eq!(has(Some(some)), [1]);
        assert_eq!(has(Some(none)), [0]);
        assert_eq!(has(Some(&x)), [1]);
        assert_eq!(has(None), [0]);
        let got = &OptionalGetElement.eval(&[Some(some)]).unwrap()[0];
        assert_eq!(got.to_f64_vec(), [1.0, 2.0]);
        assert!(OptionalGetElement.eval(&[Some(none)]).is_err());
        let seq = Tensor::from_sequence(vec![x.clone()]);
        let same = &OptionalGetElement.eval(&[Some(&seq)]).unwrap()[0];
        assert_eq!(same.sequence().unwrap().len(), 1);
    }
}
