//! Binary arithmetic and bitwise ops with numpy broadcasting: Add, Sub, Mul, Div, Pow, Mod,
//! PRelu, BitwiseAnd/Or/Xor, BitShift.
//!
//! Both inputs share one dtype, except Pow whose exponent may have any numeric dtype (the
//! output has the base's). Floats are computed through f64 and rounded once, which gives the
//! correctly rounded f32 result for + - * /. Integers use exact wrapping arithmetic; integer
//! division and modulo by zero are errors.

use super::{same_dtype, Int};
use crate::dispatch_int;
use crate::op::{input, output, required, Prototype};
use crate::ops::util::{binary_map, broadcast_offsets, broadcast_shapes};
use crate::{
    dispatch_all, dispatch_float, op_bail, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor,
    TensorInfo,
};
use std::cell::Cell;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BinaryKind {
    Add,
    Sub,
    Mul,
    /// Integer division truncates toward zero (C semantics).
    Div,
    Pow,
    /// `fmod`: remainder with the dividend's sign (C fmod); otherwise the divisor's sign.
    Mod {
        fmod: bool,
    },
    /// `X < 0 ? slope * X : X`; the slope broadcasts onto X (output shape = X's shape).
    PRelu,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    BitShiftLeft,
    BitShiftRight,
}

impl BinaryKind {
    /// Every kind at least once, with attribute values that exercise it, for the backends'
    /// tests. The match makes a new variant fail to compile here until it is listed.
    pub fn examples() -> Vec<BinaryKind> {
        use BinaryKind::*;
        let listed = |k: BinaryKind| match k {
            Add
            | Sub
            | Mul
            | Div
            | Pow
            | Mod { .. }
            | PRelu
            | BitwiseAnd
            | BitwiseOr
            | BitwiseXor
            | BitShiftLeft
            | BitShiftRight => k,
        };
        [
            Add,
            Sub,
            Mul,
            Div,
            Pow,
            Mod { fmod: false },
            Mod { fmod: true },
            PRelu,
            BitwiseAnd,
            BitwiseOr,
            BitwiseXor,
            BitShiftLeft,
            BitShiftRight,
        ]
        .into_iter()
        .map(listed)
        .collect()
    }

    /// The ONNX-like canonical name.
    pub fn name(self) -> &'static str {
        match self {
            BinaryKind::Add => "Add",
            BinaryKind::Sub => "Sub",
            BinaryKind::Mul => "Mul",
            BinaryKind::Div => "Div",
            BinaryKind::Pow => "Pow",
            BinaryKind::Mod { .. } => "Mod",
            BinaryKind::PRelu => "PRelu",
            BinaryKind::BitwiseAnd => "BitwiseAnd",
            BinaryKind::BitwiseOr => "BitwiseOr",
            BinaryKind::BitwiseXor => "BitwiseXor",
            BinaryKind::BitShiftLeft | BinaryKind::BitShiftRight => "BitShift",
        }
    }

    /// The float operation, on f64.
    pub fn apply_f64(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryKind::Add => a + b,
            BinaryKind::Sub => a - b,
            BinaryKind::Mul => a * b,
            BinaryKind::Div => a / b,
            BinaryKind::Pow => a.powf(b),
            // Rust's float `%` is C fmod.
            BinaryKind::Mod { fmod: true } => a % b,
            BinaryKind::Mod { fmod: false } => {
                let r = a % b;
                if r != 0.0 && ((r < 0.0) != (b < 0.0)) {
                    r + b
                } else {
                    r
                }
            }
            BinaryKind::PRelu => {
                if a < 0.0 {
                    a * b
                } else {
                    a
                }
            }
            // Bitwise kinds only accept integers (checked by the prototype).
            _ => f64::NAN,
        }
    }

    /// The integer operation; `None` for division or modulo by zero.
    pub fn apply_int<T: Int>(self, a: T, b: T) -> Option<T> {
        Some(match self {
            BinaryKind::Add => a.wadd(b),
            BinaryKind::Sub => a.wsub(b),
            BinaryKind::Mul => a.wmul(b),
            BinaryKind::Div => a.tdiv(b)?,
            BinaryKind::Pow => {
                if b.is_neg() {
                    T::from_f64(a.to_f64().powf(b.to_f64()))
                } else {
                    a.wpow(b.to_f64() as u64)
                }
            }
            BinaryKind::Mod { fmod: true } => a.trem(b)?,
            BinaryKind::Mod { fmod: false } => {
                let r = a.trem(b)?;
                if r != T::zero() && (r.is_neg() != b.is_neg()) {
                    r.wadd(b)
                } else {
                    r
                }
            }
            BinaryKind::PRelu => {
                if a.is_neg() {
                    a.wmul(b)
                } else {
                    a
                }
            }
            BinaryKind::BitwiseAnd => a.band(b),
            BinaryKind::BitwiseOr => a.bor(b),
            BinaryKind::BitwiseXor => a.bxor(b),
            BinaryKind::BitShiftLeft => a.shl_by(b),
            BinaryKind::BitShiftRight => a.shr_by(b),
        })
    }
}

/// A broadcasting binary op.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Binary {
    pub kind: BinaryKind,
    /// Pre-opset-7 broadcasting (`broadcast=1` with `axis`): B's dimensions line up with A's
    /// starting at this axis instead of at the end.
    pub legacy_axis: Option<i64>,
}

impl Binary {
    pub fn new(kind: BinaryKind) -> Self {
        Binary {
            kind,
            legacy_axis: None,
        }
    }

    /// B's shape after legacy axis alignment (trailing ones appended).
    fn b_shape(&self, a: &[usize], b: &[usize]) -> OpResult<Vec<usize>> {
        let Some(axis) = self.legacy_axis else {
            return Ok(b.to_vec());
        };
        let rank = a.len() as i64;
        let axis = if axis < 0 { axis + rank } else { axis };
        let trailing = rank - axis - b.len() as i64;
        if axis < 0 || trailing < 0 {
            op_bail!(
                "input 1 of shape {b:?} cannot be broadcast at axis {axis} onto input 0 of shape {a:?}"
            );
        }
        let mut s = b.to_vec();
        s.extend(std::iter::repeat_n(1, trailing as usize));
        Ok(s)
    }

    fn out_shape(&self, a: &[usize], b: &[usize]) -> OpResult<Vec<usize>> {
        let shape = broadcast_shapes(a, &self.b_shape(a, b)?)?;
        if self.kind == BinaryKind::PRelu && shape != a {
            op_bail!(
                "input 1 (slope) of shape {b:?} does not broadcast onto input 0 of shape {a:?}"
            );
        }
        Ok(shape)
    }
}

const NUM2: [crate::op::InputSpec; 2] =
    [input("A", DTypeSet::NUMERIC), input("B", DTypeSet::NUMERIC)];
static P_NUMERIC: Prototype = Prototype {
    inputs: &NUM2,
    outputs: &[output("C")],
    value_inputs: &[],
};
static P_PRELU: Prototype = Prototype {
    inputs: &[
        input("X", DTypeSet::NUMERIC),
        input("slope", DTypeSet::NUMERIC),
    ],
    outputs: &[output("Y")],
    value_inputs: &[],
};
static P_BITWISE: Prototype = Prototype {
    inputs: &[input("A", DTypeSet::INT), input("B", DTypeSet::INT)],
    outputs: &[output("C")],
    value_inputs: &[],
};
static P_SHIFT: Prototype = Prototype {
    inputs: &[
        input("X", DTypeSet::UNSIGNED_INT),
        input("Y", DTypeSet::UNSIGNED_INT),
    ],
    outputs: &[output("Z")],
    value_inputs: &[],
};

impl Op for Binary {
    fn pointwise(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn prototype(&self) -> &'static Prototype {
        match self.kind {
            BinaryKind::PRelu => &P_PRELU,
            BinaryKind::BitwiseAnd | BinaryKind::BitwiseOr | BinaryKind::BitwiseXor => &P_BITWISE,
            BinaryKind::BitShiftLeft | BinaryKind::BitShiftRight => &P_SHIFT,
            _ => &P_NUMERIC,
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = ctx.dtype(0)?;
        if self.kind != BinaryKind::Pow {
            same_dtype(1, dt, ctx.dtype(1)?)?;
        }
        let shape = self.out_shape(ctx.shape(0)?, ctx.shape(1)?)?;
        Ok(vec![TensorInfo::new(dt, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 1)?;
        let shape = self.out_shape(a.shape(), b.shape())?;
        let b = b.reshaped(&self.b_shape(a.shape(), b.shape())?)?;
        let out = if self.kind == BinaryKind::Pow {
            pow(a, &b, &shape)?
        } else {
            same_dtype(1, a.dtype(), b.dtype())?;
            binary(self.kind, a, &b)?
        };
        Ok(vec![out])
    }

    fn flops(&self, _inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        outputs.first().map_or(0, |o| o.numel() as u64)
    }
}

/// Applies a same-dtype binary kind to two broadcast tensors.
pub fn binary(kind: BinaryKind, a: &Tensor, b: &Tensor) -> OpResult<Tensor> {
    let dt = a.dtype();
    dispatch_float!(dt, T => {
        binary_map::<T, T>(a, b, |x, y| T::from_f64(kind.apply_f64(x.to_f64(), y.to_f64())))
    }, {
        dispatch_int!(dt, T => {
            let div_zero = Cell::new(false);
            let out = binary_map::<T, T>(a, b, |x, y| {
                kind.apply_int(x, y).unwrap_or_else(|| {
                    div_zero.set(true);
                    0
                })
            })?;
            if div_zero.get() {
                op_bail!("integer {} by zero (input 1 holds a zero)", kind.name());
            }
            Ok(out)
        }, op_bail!("{} does not support {dt} inputs", kind.name()))
    })
}

/// Pow with independent base and exponent dtypes.
fn pow(a: &Tensor, b: &Tensor, shape: &[usize]) -> OpResult<Tensor> {
    // Allocate the output first: it checks the size before the offset tables are built.
    let mut out = Tensor::zeros(a.dtype(), shape)?;
    let ao = broadcast_offsets(a.shape(), shape);
    let bo = broadcast_offsets(b.shape(), shape);
    let exp_f = b.to_f64_vec();
    let exp_int = b.dtype().is_int();
    let dt = a.dtype();
    dispatch_all!(dt, T => {
        let av = a.as_slice::<T>()?;
        let o = out.as_mut_slice::<T>()?;
        for i in 0..o.len() {
            let x = av[ao[i]];
            let e = exp_f[bo[i]];
            o[i] = if dt.is_int() && exp_int && e >= 0.0 {
                int_pow(x, e)
            } else {
                T::from_f64(x.to_f64().powf(e))
            };
        }
    });
    Ok(out)
}

/// Exact wrapping integer power for a non-negative integral exponent.
fn int_pow<T: Elem>(x: T, e: f64) -> T {
    let dt = T::DTYPE;
    dispatch_int!(dt, I => {
        let v: I = bytemuck::cast::<T, I>(x);
        let r = v.wpow(e as u64);
        bytemuck::cast::<I, T>(r)
    }, T::from_f64(x.to_f64().powf(e)))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, f32s, run};
    use super::*;
    use crate::DType;

    fn bin(kind: BinaryKind, a: &Tensor, b: &Tensor) -> Tensor {
        run(&Binary::new(kind), &[Some(a), Some(b)]).remove(0)
    }

    #[test]
    fn float_arithmetic_broadcasts() {
        let a = f32s(&[2, 1], &[1.0, 2.0]);
        let b = f32s(&[3], &[10.0, 20.0, 30.0]);
        let c = bin(BinaryKind::Add, &a, &b);
        assert_eq!(c.shape(), &[2, 3]);
        assert_close(&c, &[11., 21., 31., 12., 22., 32.]);
        assert_close(
            &bin(BinaryKind::Sub, &a, &b),
            &[-9., -19., -29., -8., -18., -28.],
        );
        assert_close(
            &bin(
                BinaryKind::Div,
                &f32s(&[2], &[1.0, -3.0]),
                &f32s(&[], &[2.0]),
            ),
            &[0.5, -1.5],
        );
        assert_close(
            &bin(
                BinaryKind::Mul,
                &f32s(&[2], &[1.5, -3.0]),
                &f32s(&[2], &[2.0, 4.0]),
            ),
            &[3.0, -12.0],
        );
    }

    #[test]
    fn integer_division_truncates_and_zero_is_an_error() {
        let a = Tensor::from_vec(&[4], vec![7i32, -7, 7, -7]).unwrap();
        let b = Tensor::from_vec(&[4], vec![2i32, 2, -2, -2]).unwrap();
        assert_eq!(
            bin(BinaryKind::Div, &a, &b).to_i64_vec(),
            vec![3, -3, -3, 3]
        );
        let z = Tensor::from_vec(&[1], vec![0i32]).unwrap();
        assert!(Binary::new(BinaryKind::Div)
            .eval(&[Some(&a), Some(&z)])
            .is_err());
        let u = Tensor::from_vec(&[2], vec![250u8, 3]).unwrap();
        let v = Tensor::from_vec(&[2], vec![10u8, 5]).unwrap();
        assert_eq!(bin(BinaryKind::Add, &u, &v).to_i64_vec(), vec![4, 8]);
        assert_eq!(bin(BinaryKind::Sub, &v, &u).to_i64_vec(), vec![16, 2]);
        let big = Tensor::from_vec(&[1], vec![u64::MAX]).unwrap();
        let two = Tensor::from_vec(&[1], vec![2u64]).unwrap();
        assert_eq!(
            bin(BinaryKind::Div, &big, &two).as_slice::<u64>().unwrap(),
            &[u64::MAX / 2]
        );
    }

    #[test]
    fn mod_signs() {
        let a = Tensor::from_vec(&[4], vec![-4i32, 7, 5, -7]).unwrap();
        let b = Tensor::from_vec(&[4], vec![3i32, -3, 2, -2]).unwrap();
        assert_eq!(
            bin(BinaryKind::Mod { fmod: false }, &a, &b).to_i64_vec(),
            vec![2, -2, 1, -1]
        );
        assert_eq!(
            bin(BinaryKind::Mod { fmod: true }, &a, &b).to_i64_vec(),
            vec![-1, 1, 1, -1]
        );
        let x = f32s(&[3], &[-4.3, 7.2, 5.0]);
        let y = f32s(&[3], &[2.1, -3.4, 3.0]);
        assert_close(
            &bin(BinaryKind::Mod { fmod: true }, &x, &y),
            &[(-4.3f32 % 2.1f32) as f64, (7.2f32 % -3.4f32) as f64, 2.0],
        );
    }

    #[test]
    fn pow_mixed_dtypes() {
        let x = Tensor::from_vec(&[3], vec![1i64, 2, 3]).unwrap();
        let y = f32s(&[3], &[4.0, 5.0, 6.0]);
        let z = bin(BinaryKind::Pow, &x, &y);
        assert_eq!(z.dtype(), DType::I64);
        assert_eq!(z.to_i64_vec(), vec![1, 32, 729]);
        let xf = f32s(&[3], &[1.0, 2.0, 3.0]);
        let yi = Tensor::from_vec(&[1], vec![2u64]).unwrap();
        let zf = bin(BinaryKind::Pow, &xf, &yi);
        assert_eq!(zf.dtype(), DType::F32);
        assert_close(&zf, &[1.0, 4.0, 9.0]);
        let yi32 = Tensor::from_vec(&[3], vec![4i32, 5, 6]).unwrap();
        let xi32 = Tensor::from_vec(&[3], vec![1i32, 2, 3]).unwrap();
        assert_eq!(
            bin(BinaryKind::Pow, &xi32, &yi32).to_i64_vec(),
            vec![1, 32, 729]
        );
    }

    #[test]
    fn prelu_broadcasts_slope_onto_x() {
        let x = f32s(&[2, 2], &[-1.0, 2.0, -3.0, 4.0]);
        let s = f32s(&[2], &[0.1, 0.5]);
        assert_close(&bin(BinaryKind::PRelu, &x, &s), &[-0.1, 2.0, -0.3, 4.0]);
        let big = f32s(&[3, 2, 2], &[0.0; 12]);
        assert!(Binary::new(BinaryKind::PRelu)
            .eval(&[Some(&s), Some(&big)])
            .is_err());
    }

    #[test]
    fn bitwise_and_shifts() {
        let a = Tensor::from_vec(&[3], vec![0b1100u8, 0b1010, 255]).unwrap();
        let b = Tensor::from_vec(&[3], vec![0b1010u8, 0b0110, 1]).unwrap();
        assert_eq!(
            bin(BinaryKind::BitwiseAnd, &a, &b).to_i64_vec(),
            vec![8, 2, 1]
        );
        assert_eq!(
            bin(BinaryKind::BitwiseOr, &a, &b).to_i64_vec(),
            vec![14, 14, 255]
        );
        assert_eq!(
            bin(BinaryKind::BitwiseXor, &a, &b).to_i64_vec(),
            vec![6, 12, 254]
        );
        let x = Tensor::from_vec(&[3], vec![16u32, 4, 1]).unwrap();
        let y = Tensor::from_vec(&[3], vec![1u32, 2, 40]).unwrap();
        assert_eq!(
            bin(BinaryKind::BitShiftRight, &x, &y).to_i64_vec(),
            vec![8, 1, 0]
        );
        assert_eq!(
            bin(BinaryKind::BitShiftLeft, &x, &y).to_i64_vec(),
            vec![32, 16, 0]
        );
    }

    #[test]
    fn legacy_axis_and_dtype_mismatch() {
        let a = f32s(&[2, 3], &[0.0; 6]);
        let b = f32s(&[2], &[1.0, 2.0]);
        let mut op = Binary::new(BinaryKind::Add);
        op.legacy_axis = Some(0);
        let c = run(&op, &[Some(&a), Some(&b)]).remove(0);
        assert_close(&c, &[1., 1., 1., 2., 2., 2.]);
        let i = Tensor::from_vec(&[2], vec![1i32, 2]).unwrap();
        assert!(Binary::new(BinaryKind::Add)
            .eval(&[Some(&b), Some(&i)])
            .is_err());
    }
}
