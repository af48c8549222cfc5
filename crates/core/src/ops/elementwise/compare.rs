//! Comparisons with numpy broadcasting, producing bool: Equal, Less, LessOrEqual, Greater,
//! GreaterOrEqual. Values compare in their own type (exact for u64/i64); NaN compares false.

use super::same_dtype;
use crate::op::{input, output, required, Prototype};
use crate::ops::util::{binary_map, broadcast_shapes};
use crate::{dispatch_all, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CompareKind {
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

impl CompareKind {
    pub fn name(self) -> &'static str {
        match self {
            CompareKind::Equal => "Equal",
            CompareKind::Less => "Less",
            CompareKind::LessOrEqual => "LessOrEqual",
            CompareKind::Greater => "Greater",
            CompareKind::GreaterOrEqual => "GreaterOrEqual",
        }
    }

    pub fn apply<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CompareKind::Equal => a == b,
            CompareKind::Less => a < b,
            CompareKind::LessOrEqual => a <= b,
            CompareKind::Greater => a > b,
            CompareKind::GreaterOrEqual => a >= b,
        }
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Compare {
    pub kind: CompareKind,
}

static P_EQUAL: Prototype = Prototype {
    inputs: &[
        input("A", DTypeSet::ALL.union(DTypeSet::STRING)),
        input("B", DTypeSet::ALL.union(DTypeSet::STRING)),
    ],
    outputs: &[output("C")],
    value_inputs: &[],
};
static P_ORDER: Prototype = Prototype {
    inputs: &[input("A", DTypeSet::NUMERIC), input("B", DTypeSet::NUMERIC)],
    outputs: &[output("C")],
    value_inputs: &[],
};

impl Op for Compare {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn prototype(&self) -> &'static Prototype {
        match self.kind {
            CompareKind::Equal => &P_EQUAL,
            _ => &P_ORDER,
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        same_dtype(1, ctx.dtype(0)?, ctx.dtype(1)?)?;
        let shape = broadcast_shapes(ctx.shape(0)?, ctx.shape(1)?)?;
        Ok(vec![TensorInfo::new(DType::Bool, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 1)?;
        same_dtype(1, a.dtype(), b.dtype())?;
        if a.dtype() == DType::String {
            let (shape, equal) =
                crate::ops::text::broadcast_strings(a, b, |x, y| u8::from(x == y))?;
            return Ok(vec![Tensor::from_bytes(DType::Bool, &shape, &equal)?]);
        }
        let kind = self.kind;
        let out = dispatch_all!(a.dtype(), T => {
            binary_map::<T, u8>(a, b, |x, y| kind.apply(x, y) as u8)?
        });
        // binary_map produced a u8 tensor; relabel it as bool.
        Ok(vec![Tensor::from_bytes(
            DType::Bool,
            out.shape(),
            out.bytes(),
        )?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{f32s, run};
    use super::*;

    fn cmp(kind: CompareKind, a: &Tensor, b: &Tensor) -> Vec<i64> {
        let out = run(&Compare { kind }, &[Some(a), Some(b)]).remove(0);
        assert_eq!(out.dtype(), DType::Bool);
        out.to_i64_vec()
    }

    #[test]
    fn comparisons_broadcast() {
        let a = f32s(&[2, 2], &[1.0, 2.0, 3.0, f32::NAN]);
        let b = f32s(&[2], &[2.0, 2.0]);
        assert_eq!(cmp(CompareKind::Equal, &a, &b), vec![0, 1, 0, 0]);
        assert_eq!(cmp(CompareKind::Less, &a, &b), vec![1, 0, 0, 0]);
        assert_eq!(cmp(CompareKind::LessOrEqual, &a, &b), vec![1, 1, 0, 0]);
        assert_eq!(cmp(CompareKind::Greater, &a, &b), vec![0, 0, 1, 0]);
        assert_eq!(cmp(CompareKind::GreaterOrEqual, &a, &b), vec![0, 1, 1, 0]);
    }

    #[test]
    fn ints_and_bools() {
        let a = Tensor::from_vec(&[2], vec![u64::MAX, 1]).unwrap();
        let b = Tensor::from_vec(&[2], vec![u64::MAX - 1, 1]).unwrap();
        assert_eq!(cmp(CompareKind::Greater, &a, &b), vec![1, 0]);
        let p = Tensor::from_bools(&[2], &[true, false]).unwrap();
        let q = Tensor::from_bools(&[1], &[true]).unwrap();
        assert_eq!(cmp(CompareKind::Equal, &p, &q), vec![1, 0]);
        assert!(Compare {
            kind: CompareKind::Less
        }
        .eval(&[Some(&a), Some(&p)])
        .is_err());
        let s = Tensor::from_strings(&[3], vec!["a".into(), "b".into(), "é".into()]).unwrap();
        let t = Tensor::from_strings(&[1], vec!["é".into()]).unwrap();
        assert_eq!(cmp(CompareKind::Equal, &s, &t), vec![0, 0, 1]);
    }
}
