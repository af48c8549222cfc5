//! Cast, CastLike and Identity.
//!
//! Conversions follow [`Tensor::cast`]: float to int truncates toward zero and saturates (NaN
//! becomes 0), anything to bool is `!= 0`, float narrowing rounds to nearest even. To float8,
//! `saturate` (default true) clamps out-of-range values to the largest finite value; without it
//! they become infinity or NaN. `round_mode` applies to E8M0 only.
//!
//! To and from strings ([`cast_strings`]): numbers are written plainly (`314.15926`, the
//! shortest form that reads back to the same value; `INF`, `-INF`, `NaN`), and strings read in
//! plain or scientific form, with `INF`, `+INF`, `-INF` and `NaN` in any case. A string that is
//! no number is an error naming it (the spec leaves it undefined).

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
    if to == DType::String || x.dtype() == DType::String {
        return cast_strings(x, to);
    }
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

/// A cast to or from a string tensor.
pub fn cast_strings(x: &Tensor, to: DType) -> crate::Result<Tensor> {
    let bad = |m: String| crate::Error::Tensor(m);
    if x.dtype() == to {
        return Ok(x.clone());
    }
    if to == DType::String {
        let text: Vec<String> = match x.dtype() {
            DType::F64 => x
                .to_f64_vec()
                .into_iter()
                .map(|v| float_text(v, false))
                .collect(),
            DType::U64 => x.as_slice::<u64>()?.iter().map(u64::to_string).collect(),
            d if d.is_int() || d == DType::Bool => {
                x.to_i64_vec().iter().map(i64::to_string).collect()
            }
            d if d.is_bytes() => x
                .to_f64_vec()
                .into_iter()
                .map(|v| float_text(v, true))
                .collect(),
            d => return Err(bad(format!("cannot cast {d} to strings"))),
        };
        return Tensor::from_strings(x.shape(), text);
    }
    if !to.is_bytes() {
        return Err(bad(format!("cannot cast strings to {to}")));
    }
    let strings = x.strings()?;
    if to.is_int() {
        // Integers read exactly; a decimal ("100.5") truncates toward zero.
        let ints = strings
            .iter()
            .map(|s| {
                let t = s.trim();
                t.parse::<i64>()
                    .ok()
                    .or_else(|| parse_float(t).map(|f| f as i64))
                    .ok_or_else(|| bad(format!("string {s:?} is not a number")))
            })
            .collect::<crate::Result<Vec<i64>>>()?;
        return Tensor::from_vec(x.shape(), ints)?.cast(to);
    }
    let floats = strings
        .iter()
        .map(|s| parse_float(s.trim()).ok_or_else(|| bad(format!("string {s:?} is not a number"))))
        .collect::<crate::Result<Vec<f64>>>()?;
    Tensor::from_vec(x.shape(), floats)?.cast(to)
}

/// A float as plain text (the shortest that reads back to the same f32 when `single`, f64
/// otherwise), with ONNX's literals for the special values.
fn float_text(v: f64, single: bool) -> String {
    match v {
        v if v.is_nan() => "NaN".into(),
        f64::INFINITY => "INF".into(),
        f64::NEG_INFINITY => "-INF".into(),
        v if single => (v as f32).to_string(),
        v => v.to_string(),
    }
}

/// A number in plain or scientific form, or one of ONNX's literals (any case).
fn parse_float(t: &str) -> Option<f64> {
    match t.to_ascii_uppercase().as_str() {
        "INF" | "+INF" => Some(f64::INFINITY),
        "-INF" => Some(f64::NEG_INFINITY),
        "NAN" | "+NAN" | "-NAN" => Some(f64::NAN),
        _ => t.parse::<f64>().ok().filter(|v| v.is_finite()),
    }
}

impl Op for Cast {
    op_common!(
        "Cast",
        Prototype {
            inputs: &[input("input", DTypeSet::ANY.union(DTypeSet::STRING))],
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
                input("input", DTypeSet::ANY.union(DTypeSet::STRING)),
                input("target_type", DTypeSet::ANY.union(DTypeSet::STRING)),
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
    fn casts_to_and_from_strings() {
        let x = Tensor::from_vec(
            &[6],
            vec![0.1f32, -2.5, 1e-7, 3e20, f32::INFINITY, f32::NAN],
        )
        .unwrap();
        let s = Cast::new(DType::String)
            .eval(&[Some(&x)])
            .unwrap()
            .remove(0);
        assert_eq!(
            s.strings().unwrap(),
            [
                "0.1",
                "-2.5",
                "0.0000001",
                "300000000000000000000",
                "INF",
                "NaN"
            ]
        );
        let back = Cast::new(DType::F32).eval(&[Some(&s)]).unwrap().remove(0);
        assert_eq!(
            back.as_slice::<f32>().unwrap()[..5],
            x.as_slice::<f32>().unwrap()[..5]
        );
        assert!(back.as_slice::<f32>().unwrap()[5].is_nan());
        let big = Tensor::from_vec(&[2], vec![i64::MAX, -7]).unwrap();
        let s = Cast::new(DType::String)
            .eval(&[Some(&big)])
            .unwrap()
            .remove(0);
        assert_eq!(s.strings().unwrap(), ["9223372036854775807", "-7"]);
        let text = ["1E8", " -inf", "+Inf", "100.5", "-3"]
            .map(String::from)
            .to_vec();
        let t = Tensor::from_strings(&[5], text).unwrap();
        let f = Cast::new(DType::F64).eval(&[Some(&t)]).unwrap().remove(0);
        assert_eq!(
            f.to_f64_vec(),
            [1e8, f64::NEG_INFINITY, f64::INFINITY, 100.5, -3.0]
        );
        let two = Tensor::from_strings(&[2], vec!["100.5".into(), "-3".into()]).unwrap();
        let i = Cast::new(DType::I32).eval(&[Some(&two)]).unwrap().remove(0);
        assert_eq!(i.to_i64_vec(), [100, -3]);
        let bad = Tensor::from_strings(&[1], vec!["Hello World!".into()]).unwrap();
        let e = Cast::new(DType::F32)
            .eval(&[Some(&bad)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("Hello World!"), "{e}");
    }

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
