//! Cast, CastLike and Identity.
//!
//! Conversions follow [`Tensor::cast`]: float to int truncates toward zero and saturates (NaN
//! becomes 0), anything to bool is `!= 0`, float narrowing rounds to nearest even. To float8,
//! `saturate` (default true) clamps out-of-range values to the largest finite value; without it
//! they become infinity or NaN. `round_mode` applies to E8M0 only.

use crate::lowp::{self, E8M0Round};
use crate::op::{input, output, required, Prototype};
use crate::{op_common, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// Converts to the dtype `to`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Cast {
    pub to: DType,
    pub saturate: bool,
    pub round_mode: E8M0Round,
}

impl Cast {
    pub fn new(to: DType) -> Cast {
        Cast {
            to,
            saturate: true,
            round_mode: E8M0Round::Up,
        }
    }
}

/// [`Tensor::cast`] with ONNX's `saturate` and `round_mode` for the float8 targets.
pub fn cast_with(
    x: &Tensor,
    to: DType,
    saturate: bool,
    round_mode: E8M0Round,
) -> crate::Result<Tensor> {
    let default_e8m0 = saturate && round_mode == E8M0Round::Up;
    let special = match to {
        DType::F8E8M0 => !default_e8m0,
        DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ => !saturate,
        _ => false,
    };
    if !special || x.dtype() == to {
        return x.cast(to);
    }
    let vals = x.to_f64_vec();
    let bytes: Vec<u8> = vals
        .iter()
        .map(|&v| match to {
            DType::F8E8M0 => lowp::f32_to_e8m0(v as f32, saturate, round_mode),
            DType::F8E4M3FN => lowp::F8E4M3FN::from_f64_sat(v, saturate).0,
            DType::F8E4M3FNUZ => lowp::F8E4M3FNUZ::from_f64_sat(v, saturate).0,
            DType::F8E5M2 => lowp::F8E5M2::from_f64_sat(v, saturate).0,
            _ => lowp::F8E5M2FNUZ::from_f64_sat(v, saturate).0,
        })
        .collect();
    Tensor::from_bytes(to, x.shape(), &bytes)
}

impl Op for Cast {
    op_common!(
        "Cast",
        Prototype {
            inputs: &[input("input", DTypeSet::ANY)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(self.to, ctx.shape(0)?)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        Ok(vec![cast_with(x, self.to, self.saturate, self.round_mode)?])
    }
}

/// Converts input 0 to the dtype of input 1 (whose values are not read).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CastLike {
    pub saturate: bool,
    pub round_mode: E8M0Round,
}

impl Default for CastLike {
    fn default() -> Self {
        CastLike {
            saturate: true,
            round_mode: E8M0Round::Up,
        }
    }
}

impl Op for CastLike {
    op_common!(
        "CastLike",
        Prototype {
            inputs: &[
                input("input", DTypeSet::ANY),
                input("target_type", DTypeSet::ANY),
            ],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(ctx.dtype(1)?, ctx.shape(0)?)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let to = required(inputs, 1)?.dtype();
        let x = required(inputs, 0)?;
        Ok(vec![cast_with(x, to, self.saturate, self.round_mode)?])
    }
}

/// The input, unchanged (the data is shared, not copied).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Identity;

impl Op for Identity {
    op_common!(
        "Identity",
        Prototype {
            inputs: &[input("input", DTypeSet::VALUE)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![ctx.like(0)?])
    }

    fn output_aliases_input(&self) -> bool {
        true
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        Ok(vec![required(inputs, 0)?.clone()])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{f32s, run};
    use super::*;

    #[test]
    fn casts() {
        let x = f32s(&[4], &[-1.7, 0.0, 2.9, 300.0]);
        let y = run(&Cast::new(DType::I32), &[Some(&x)]).remove(0);
        assert_eq!(y.dtype(), DType::I32);
        assert_eq!(y.to_i64_vec(), vec![-1, 0, 2, 300]);
        let b = run(&Cast::new(DType::Bool), &[Some(&x)]).remove(0);
        assert_eq!(b.to_i64_vec(), vec![1, 0, 1, 1]);
        let h = run(&Cast::new(DType::BF16), &[Some(&x)]).remove(0);
        assert_eq!(h.dtype(), DType::BF16);
        assert_eq!(h.to_f64_vec()[3], 300.0);
        let like = Tensor::from_vec(&[1], vec![0u8]).unwrap();
        let z = run(&CastLike::default(), &[Some(&x), Some(&like)]).remove(0);
        assert_eq!(z.dtype(), DType::U8);
        assert_eq!(z.to_i64_vec(), vec![0, 0, 2, 255]);
    }

    #[test]
    fn low_precision_casts() {
        let x = f32s(&[5], &[1.0, 465.0, f32::INFINITY, -1e-9, f32::NAN]);
        let sat = run(&Cast::new(DType::F8E4M3FN), &[Some(&x)]).remove(0);
        assert_eq!(sat.bytes(), &[0x38, 0x7E, 0x7E, 0x80, 0x7F]);
        let nosat = Cast {
            saturate: false,
            ..Cast::new(DType::F8E4M3FN)
        };
        let y = run(&nosat, &[Some(&x)]).remove(0);
        assert_eq!(y.bytes(), &[0x38, 0x7F, 0x7F, 0x80, 0x7F]);
        let back = run(&Cast::new(DType::F32), &[Some(&sat)]).remove(0);
        assert_eq!(back.to_f64_vec()[..4], [1.0, 448.0, 448.0, -0.0]);
        let i = f32s(&[3], &[-9.0, 8.0, 3.0]);
        let q = run(&Cast::new(DType::I4), &[Some(&i)]).remove(0);
        assert_eq!(q.to_i64_vec(), [7, -8, 3]);
        let w = run(&Cast::new(DType::I8), &[Some(&q)]).remove(0);
        assert_eq!(w.as_slice::<i8>().unwrap(), &[7, -8, 3]);
        let e = f32s(&[3], &[1.1, 0.0, 8.0]);
        let m = run(&Cast::new(DType::F8E8M0), &[Some(&e)]).remove(0);
        assert_eq!(m.bytes(), &[128, 0, 130]);
        let down = Cast {
            round_mode: E8M0Round::Down,
            ..Cast::new(DType::F8E8M0)
        };
        assert_eq!(run(&down, &[Some(&e)]).remove(0).bytes(), &[127, 0, 130]);
    }

    #[test]
    fn identity_shares() {
        let x = f32s(&[2], &[1.0, 2.0]);
        let y = run(&Identity, &[Some(&x)]).remove(0);
        assert!(y.shares_data_with(&x));
    }
}
