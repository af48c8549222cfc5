//! The sequence ops that build, read and edit a sequence: SequenceEmpty, SequenceConstruct,
//! SequenceInsert, SequenceAt, SequenceErase and SequenceLength.

use super::position;
use crate::op::{input, optional, output, required, variadic, Prototype};
use crate::{
    op_bail, op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

/// The tensors a sequence may hold: any element type, strings included.
const ITEM: DTypeSet = DTypeSet::ALL.union(DTypeSet::STRING);
/// Position inputs.
const POSITION: DTypeSet = DTypeSet::INDEX;

fn a_sequence() -> OpResult<Vec<TensorInfo>> {
    Ok(vec![TensorInfo::new(DType::Sequence, [])])
}

/// Every item of a sequence has one element type.
fn check_item_type(items: &[Tensor], t: &Tensor) -> OpResult<()> {
    if let Some(first) = items.first() {
        op_ensure!(
            first.dtype() == t.dtype(),
            "the sequence holds {} tensors, got a {} tensor",
            first.dtype(),
            t.dtype()
        );
    }
    Ok(())
}

/// SequenceEmpty: a sequence of no tensors (of element type `dtype`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SequenceEmpty {
    pub dtype: DType,
}

impl Op for SequenceEmpty {
    op_common!(
        "SequenceEmpty",
        Prototype {
            inputs: &[],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        a_sequence()
    }

    fn eval(&self, _inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        Ok(vec![Tensor::from_sequence(Vec::new())])
    }
}

/// SequenceConstruct: a sequence of its inputs, in order.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SequenceConstruct;

impl Op for SequenceConstruct {
    op_common!(
        "SequenceConstruct",
        Prototype {
            inputs: &[variadic("inputs", ITEM, 1)],
            outputs: &[output("output_sequence")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let first = ctx.dtype(0)?;
        for i in 1..ctx.len() {
            op_ensure!(
                ctx.dtype(i)? == first,
                "input {i} is {}, input 0 is {first}: a sequence holds one element type",
                ctx.dtype(i)?
            );
        }
        a_sequence()
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let mut items: Vec<Tensor> = Vec::with_capacity(inputs.len());
        for i in 0..inputs.len() {
            let t = required(inputs, i)?;
            check_item_type(&items, t)?;
            items.push(t.clone());
        }
        Ok(vec![Tensor::from_sequence(items)])
    }
}

/// SequenceInsert: the sequence with a tensor inserted at `position` (at the end without one).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SequenceInsert;

impl Op for SequenceInsert {
    op_common!(
        "SequenceInsert",
        Prototype {
            inputs: &[
                input("input_sequence", DTypeSet::SEQUENCE),
                input("tensor", ITEM),
                optional("position", POSITION)
            ],
            outputs: &[output("output_sequence")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        a_sequence()
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let mut items = required(inputs, 0)?.sequence()?.to_vec();
        let t = required(inputs, 1)?;
        check_item_type(&items, t)?;
        let at = match inputs.get(2).copied().flatten() {
            Some(p) => position(p, items.len(), true)?,
            None => items.len(),
        };
        items.insert(at, t.clone());
        Ok(vec![Tensor::from_sequence(items)])
    }
}

/// SequenceAt: the tensor at `position`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SequenceAt;

impl Op for SequenceAt {
    op_common!(
        "SequenceAt",
        Prototype {
            inputs: &[
                input("input_sequence", DTypeSet::SEQUENCE),
                input("position", POSITION)
            ],
            outputs: &[output("tensor")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        op_bail!("SequenceAt's type is that of the tensor it takes out, known only by running it")
    }

    fn shapes_known_by_running(&self) -> bool {
        true
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let items = required(inputs, 0)?.sequence()?;
        let at = position(required(inputs, 1)?, items.len(), false)?;
        Ok(vec![items[at].clone()])
    }
}

/// SequenceErase: the sequence without the tensor at `position` (the last one without one).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SequenceErase;

impl Op for SequenceErase {
    op_common!(
        "SequenceErase",
        Prototype {
            inputs: &[
                input("input_sequence", DTypeSet::SEQUENCE),
                optional("position", POSITION)
            ],
            outputs: &[output("output_sequence")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        a_sequence()
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let mut items = required(inputs, 0)?.sequence()?.to_vec();
        op_ensure!(!items.is_empty(), "cannot erase from an empty sequence");
        let at = match inputs.get(1).copied().flatten() {
            Some(p) => position(p, items.len(), false)?,
            None => items.len() - 1,
        };
        items.remove(at);
        Ok(vec![Tensor::from_sequence(items)])
    }
}

/// SequenceLength: the number of tensors, as an i64 scalar.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SequenceLength;

impl Op for SequenceLength {
    op_common!(
        "SequenceLength",
        Prototype {
            inputs: &[input("input_sequence", DTypeSet::SEQUENCE)],
            outputs: &[output("length")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(DType::I64, [])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let n = required(inputs, 0)?.sequence()?.len();
        Ok(vec![Tensor::scalar(n as i64)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: &[f32]) -> Tensor {
        Tensor::from_vec(&[v.len()], v.to_vec()).unwrap()
    }

    fn firsts(seq: &Tensor) -> Vec<f64> {
        seq.sequence()
            .unwrap()
            .iter()
            .map(|t| t.to_f64_vec()[0])
            .collect()
    }

    #[test]
    fn build_insert_read_erase_and_count() {
        let (a, b, c) = (f(&[1.0]), f(&[2.0, 2.5]), f(&[3.0]));
        let seq = &SequenceConstruct.eval(&[Some(&a), Some(&b)]).unwrap()[0];
        assert_eq!(firsts(seq), [1.0, 2.0]);
        let p = |v: i64| Tensor::scalar(v);
        let front = &SequenceInsert
            .eval(&[Some(seq), Some(&c), Some(&p(0))])
            .unwrap()[0];
        assert_eq!(firsts(front), [3.0, 1.0, 2.0]);
        let back = &SequenceInsert.eval(&[Some(seq), Some(&c), None]).unwrap()[0];
        assert_eq!(firsts(back), [1.0, 2.0, 3.0]);
        let mid = &SequenceInsert
            .eval(&[Some(seq), Some(&c), Some(&p(-1))])
            .unwrap()[0];
        assert_eq!(firsts(mid), [1.0, 3.0, 2.0]);
        let at = &SequenceAt.eval(&[Some(back), Some(&p(-2))]).unwrap()[0];
        assert_eq!(at.to_f64_vec(), [2.0, 2.5]);
        assert!(SequenceAt.eval(&[Some(back), Some(&p(3))]).is_err());
        let erased = &SequenceErase.eval(&[Some(back), Some(&p(0))]).unwrap()[0];
        assert_eq!(firsts(erased), [2.0, 3.0]);
        let last = &SequenceErase.eval(&[Some(back), None]).unwrap()[0];
        assert_eq!(firsts(last), [1.0, 2.0]);
        let len = &SequenceLength.eval(&[Some(back)]).unwrap()[0];
        assert_eq!(len.to_i64_vec(), [3]);
        let empty = &SequenceEmpty { dtype: DType::F32 }.eval(&[]).unwrap()[0];
        assert_eq!(
            SequenceLength.eval(&[Some(empty)]).unwrap()[0].to_i64_vec(),
            [0]
        );
        assert!(SequenceErase.eval(&[Some(empty), None]).is_err());
        // One element type per sequence; a tensor is not a sequence.
        let i = Tensor::scalar(1i64);
        assert!(SequenceInsert.eval(&[Some(seq), Some(&i), None]).is_err());
        assert!(SequenceConstruct.eval(&[Some(&a), Some(&i)]).is_err());
        assert!(SequenceLength.eval(&[Some(&a)]).is_err());
    }
}
