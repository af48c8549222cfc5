//! Elementwise ops: arithmetic and bitwise binaries, comparisons, logical ops, variadic
//! reductions across inputs, unary math and activations, Clip, Where, Cast, Identity, Dropout.

pub mod binary;
pub mod cast;
pub mod clip;
pub mod compare;
pub mod dropout;
pub mod logical;
pub mod real;
pub mod unary;
pub mod variadic;
pub mod where_;

pub use binary::{Binary, BinaryKind};
pub use cast::{Cast, CastLike, Identity};
pub use clip::Clip;
pub use compare::{Compare, CompareKind};
pub use dropout::Dropout;
pub use logical::{BitwiseNot, IsInf, IsNaN, Logical, LogicalKind, Not};
pub use real::Real;
pub use unary::{Unary, UnaryKind};
pub use variadic::{Variadic, VariadicKind};
pub use where_::Where;

use crate::{op_bail, DType, Elem, OpResult};

/// Exact integer arithmetic for the eight integer element types (wrapping like C/numpy).
pub trait Int: Elem + Copy + Ord {
    const SIGNED: bool;
    const BITS: u32;
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    /// Division truncating toward zero; `None` for a zero divisor.
    fn tdiv(self, o: Self) -> Option<Self>;
    /// Remainder with the sign of the dividend (C `%`); `None` for a zero divisor.
    fn trem(self, o: Self) -> Option<Self>;
    fn wneg(self) -> Self;
    fn band(self, o: Self) -> Self;
    fn bor(self, o: Self) -> Self;
    fn bxor(self, o: Self) -> Self;
    fn bnot(self) -> Self;
    /// Shifts; a shift amount of at least the bit width gives 0.
    fn shl_by(self, n: Self) -> Self;
    fn shr_by(self, n: Self) -> Self;
    fn is_neg(self) -> bool;
    /// `self` to the power `e` (wrapping); `e` must be non-negative.
    fn wpow(self, e: u64) -> Self;
    /// The shift amount as u32, saturating (negative amounts count as huge).
    fn shift_amount(self) -> u32;
}

macro_rules! impl_int {
    ($($t:ty: $signed:expr),*) => {$(
        impl Int for $t {
            const SIGNED: bool = $signed;
            const BITS: u32 = <$t>::BITS;
            fn wadd(self, o: Self) -> Self { self.wrapping_add(o) }
            fn wsub(self, o: Self) -> Self { self.wrapping_sub(o) }
            fn wmul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn tdiv(self, o: Self) -> Option<Self> {
                if o == 0 { None } else { Some(self.wrapping_div(o)) }
            }
            fn trem(self, o: Self) -> Option<Self> {
                if o == 0 { None } else { Some(self.wrapping_rem(o)) }
            }
            fn wneg(self) -> Self { self.wrapping_neg() }
            fn band(self, o: Self) -> Self { self & o }
            fn bor(self, o: Self) -> Self { self | o }
            fn bxor(self, o: Self) -> Self { self ^ o }
            fn bnot(self) -> Self { !self }
            fn shl_by(self, n: Self) -> Self { self.checked_shl(n.shift_amount()).unwrap_or(0) }
            fn shr_by(self, n: Self) -> Self { self.checked_shr(n.shift_amount()).unwrap_or(0) }
            #[allow(unused_comparisons)]
            fn is_neg(self) -> bool { self < 0 }
            fn wpow(self, e: u64) -> Self {
                let mut acc: $t = 1;
                let mut base = self;
                let mut e = e;
                while e > 0 {
                    if e & 1 == 1 { acc = acc.wrapping_mul(base); }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
            #[allow(unused_comparisons)]
            fn shift_amount(self) -> u32 {
                if self < 0 { u32::MAX } else { u32::try_from(self).unwrap_or(u32::MAX) }
            }
        }
    )*};
}
impl_int!(i8: true, u8: false, i16: true, u16: false, i32: true, u32: false, i64: true, u64: false);

/// Runs `$body` with `$T` bound to the Rust type of an integer dtype; evaluates `$other` for the
/// rest (floats and bool).
#[macro_export]
macro_rules! dispatch_int {
    ($dtype:expr, $T:ident => $body:block, $other:expr) => {
        match $dtype {
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            $crate::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::DType::U16 => {
                type $T = u16;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::U64 => {
                type $T = u64;
                $body
            }
            _ => $other,
        }
    };
}

/// Checks that input `i` has the same dtype as input 0.
pub(crate) fn same_dtype(i: usize, want: DType, got: DType) -> OpResult<()> {
    if want != got {
        op_bail!("input {i} must have the same dtype as input 0 ({want}), got {got}");
    }
    Ok(())
}

/// NaN-aware max/min as numpy's `maximum`/`minimum`: a NaN operand gives NaN.
#[allow(clippy::eq_op)]
pub(crate) fn nan_max<T: Elem>(a: T, b: T) -> T {
    if a != a {
        a
    } else if b != b || b > a {
        b
    } else {
        a
    }
}

#[allow(clippy::eq_op)]
pub(crate) fn nan_min<T: Elem>(a: T, b: T) -> T {
    if a != a {
        a
    } else if b != b || b < a {
        b
    } else {
        a
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use crate::{InferCtx, InferInput, Op, Tensor, TensorInfo};

    /// Runs infer on concrete tensors (all values known) and then eval, checking they agree.
    pub fn run(op: &dyn Op, inputs: &[Option<&Tensor>]) -> Vec<Tensor> {
        let infer_inputs: Vec<Option<InferInput>> = inputs
            .iter()
            .map(|t| {
                t.map(|t| InferInput {
                    dtype: t.dtype(),
                    shape: t.shape(),
                    value: Some(t),
                })
            })
            .collect();
        crate::infer::check_prototype(op, &infer_inputs).expect("prototype check");
        let infos = op
            .infer(&InferCtx {
                inputs: &infer_inputs,
            })
            .expect("infer");
        let out = op.eval(inputs).expect("eval");
        assert_eq!(infos.len(), out.len());
        for (i, o) in infos.iter().zip(&out) {
            assert_eq!(*i, TensorInfo::of(o));
        }
        out
    }

    pub fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_slice(shape, v).unwrap()
    }

    pub fn assert_close(got: &Tensor, want: &[f64]) {
        let g = got.to_f64_vec();
        assert_eq!(g.len(), want.len(), "{got:?} vs {want:?}");
        for (a, b) in g.iter().zip(want) {
            let ok = (a.is_nan() && b.is_nan())
                || a == b
                || (a - b).abs() <= 1e-6 * b.abs().max(1e-30) + 1e-7;
            assert!(ok, "{got:?} vs {want:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_helpers() {
        assert_eq!((-7i32).tdiv(2), Some(-3));
        assert_eq!((-7i32).trem(2), Some(-1));
        assert_eq!(5u8.tdiv(0), None);
        assert_eq!(i8::MIN.tdiv(-1), Some(i8::MIN));
        assert_eq!(1u8.shl_by(8), 0);
        assert_eq!(16u16.shr_by(2), 4);
        assert_eq!(3i64.wpow(4), 81);
        assert!(nan_max(1.0f32, f32::NAN).is_nan());
        assert_eq!(nan_min(1.0f32, 2.0), 1.0);
    }
}
