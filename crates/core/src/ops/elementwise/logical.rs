//! Logical ops on bool (And, Or, Xor with broadcasting; Not), BitwiseNot on integers, and the
//! float classifiers IsNaN and IsInf (bool results).

use super::{same_dtype, Int};
use crate::dispatch_int;
use crate::op::{input, output, required, Prototype};
use crate::ops::util::{binary_map, broadcast_shapes, unary_map};
use crate::{
    dispatch_float, op_bail, op_common, DType, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor,
    TensorInfo,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LogicalKind {
    And,
    Or,
    Xor,
}

impl LogicalKind {
    pub fn name(self) -> &'static str {
        match self {
            LogicalKind::And => "And",
            LogicalKind::Or => "Or",
            LogicalKind::Xor => "Xor",
        }
    }

    pub fn apply(self, a: bool, b: bool) -> bool {
        match self {
            LogicalKind::And => a && b,
            LogicalKind::Or => a || b,
            LogicalKind::Xor => a != b,
        }
    }
}

/// And / Or / Xor on bool tensors with broadcasting.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Logical {
    pub kind: LogicalKind,
}

static P_LOGICAL: Prototype = Prototype {
    inputs: &[input("A", DTypeSet::BOOL), input("B", DTypeSet::BOOL)],
    outputs: &[output("C")],
    value_inputs: &[],
};

/// Relabels a u8 tensor of 0/1 as bool.
fn as_bool(t: Tensor) -> OpResult<Tensor> {
    Ok(Tensor::from_bytes(DType::Bool, t.shape(), t.bytes())?)
}

impl Op for Logical {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn prototype(&self) -> &'static Prototype {
        &P_LOGICAL
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let shape = broadcast_shapes(ctx.shape(0)?, ctx.shape(1)?)?;
        Ok(vec![TensorInfo::new(DType::Bool, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 1)?;
        same_dtype(1, DType::Bool, a.dtype())?;
        same_dtype(1, DType::Bool, b.dtype())?;
        let kind = self.kind;
        let out = binary_map::<u8, u8>(a, b, |x, y| kind.apply(x != 0, y != 0) as u8)?;
        Ok(vec![as_bool(out)?])
    }
}

/// Logical negation of a bool tensor.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Not;

impl Op for Not {
    op_common!(
        "Not",
        Prototype {
            inputs: &[input("X", DTypeSet::BOOL)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        same_dtype(0, DType::Bool, x.dtype())?;
        Ok(vec![as_bool(unary_map::<u8, u8>(x, |v| (v == 0) as u8)?)?])
    }
}

/// Bitwise complement of an integer tensor.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BitwiseNot;

impl Op for BitwiseNot {
    op_common!(
        "BitwiseNot",
        Prototype {
            inputs: &[input("X", DTypeSet::INT)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let dt = x.dtype();
        let out = dispatch_int!(dt, T => { unary_map::<T, T>(x, |v| v.bnot())? },
            op_bail!("BitwiseNot needs an integer input, got {dt}"));
        Ok(vec![out])
    }
}

fn classify(x: &Tensor, f: impl Fn(f64) -> bool) -> OpResult<Tensor> {
    let dt = x.dtype();
    let out = dispatch_float!(dt, T => { unary_map::<T, u8>(x, |v| f(v.to_f64()) as u8)? },
        op_bail!("input 0 must be a float tensor, got {dt}"));
    as_bool(out)
}

/// Whether each element is NaN.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IsNaN;

impl Op for IsNaN {
    op_common!(
        "IsNaN",
        Prototype {
            inputs: &[input("X", DTypeSet::FLOAT)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(DType::Bool, ctx.shape(0)?)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        Ok(vec![classify(required(inputs, 0)?, f64::is_nan)?])
    }
}

/// Whether each element is infinite (of the selected signs).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IsInf {
    pub detect_negative: bool,
    pub detect_positive: bool,
}

impl Default for IsInf {
    fn default() -> Self {
        IsInf {
            detect_negative: true,
            detect_positive: true,
        }
    }
}

impl Op for IsInf {
    op_common!(
        "IsInf",
        Prototype {
            inputs: &[input("X", DTypeSet::FLOAT)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(DType::Bool, ctx.shape(0)?)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (neg, pos) = (self.detect_negative, self.detect_positive);
        let out = classify(required(inputs, 0)?, |v| {
            (pos && v == f64::INFINITY) || (neg && v == f64::NEG_INFINITY)
        })?;
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{f32s, run};
    use super::*;

    #[test]
    fn logical_ops() {
        let a = Tensor::from_bools(&[2, 2], &[true, true, false, false]).unwrap();
        let b = Tensor::from_bools(&[2], &[true, false]).unwrap();
        let r = |k| {
            run(&Logical { kind: k }, &[Some(&a), Some(&b)])
                .remove(0)
                .to_i64_vec()
        };
        assert_eq!(r(LogicalKind::And), vec![1, 0, 0, 0]);
        assert_eq!(r(LogicalKind::Or), vec![1, 1, 1, 0]);
        assert_eq!(r(LogicalKind::Xor), vec![0, 1, 1, 0]);
        let n = run(&Not, &[Some(&b)]).remove(0);
        assert_eq!(n.dtype(), DType::Bool);
        assert_eq!(n.to_i64_vec(), vec![0, 1]);
    }

    #[test]
    fn bitwise_not() {
        let x = Tensor::from_vec(&[3], vec![0i16, 5, -1]).unwrap();
        assert_eq!(
            run(&BitwiseNot, &[Some(&x)]).remove(0).to_i64_vec(),
            vec![-1, -6, 0]
        );
        let u = Tensor::from_vec(&[1], vec![0u8]).unwrap();
        assert_eq!(
            run(&BitwiseNot, &[Some(&u)]).remove(0).to_i64_vec(),
            vec![255]
        );
    }

    #[test]
    fn classifiers() {
        let x = f32s(&[4], &[1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
        assert_eq!(
            run(&IsNaN, &[Some(&x)]).remove(0).to_i64_vec(),
            vec![0, 1, 0, 0]
        );
        assert_eq!(
            run(&IsInf::default(), &[Some(&x)]).remove(0).to_i64_vec(),
            vec![0, 0, 1, 1]
        );
        let neg = IsInf {
            detect_negative: true,
            detect_positive: false,
        };
        assert_eq!(
            run(&neg, &[Some(&x)]).remove(0).to_i64_vec(),
            vec![0, 0, 0, 1]
        );
    }
}
