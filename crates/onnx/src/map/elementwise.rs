//! Mapping functions for elementwise ops.

use super::{op, MapError, MapFn, MapResult, NodeCtx};
use crate::proto::{attribute_type, data_type};
use ferrolite_core::lowp::E8M0Round;
use ferrolite_core::ops::elementwise::{
    Binary, BinaryKind, BitwiseNot, Cast, CastLike, Clip, Compare, CompareKind, Dropout, Identity,
    IsInf, IsNaN, Logical, LogicalKind, Not, Unary, UnaryKind, Variadic, VariadicKind, Where,
};

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("Add", add),
    ("Sub", sub),
    ("Mul", mul),
    ("Div", div),
    ("Pow", pow),
    ("Mod", mod_),
    ("PRelu", prelu),
    ("BitwiseAnd", bitwise_and),
    ("BitwiseOr", bitwise_or),
    ("BitwiseXor", bitwise_xor),
    ("BitwiseNot", bitwise_not),
    ("BitShift", bitshift),
    ("Equal", equal),
    ("Less", less),
    ("LessOrEqual", less_or_equal),
    ("Greater", greater),
    ("GreaterOrEqual", greater_or_equal),
    ("And", and),
    ("Or", or),
    ("Xor", xor),
    ("Not", not),
    ("Max", max),
    ("Min", min),
    ("Sum", sum),
    ("Mean", mean),
    ("Abs", abs),
    ("Neg", neg),
    ("Exp", exp),
    ("Log", log),
    ("Sqrt", sqrt),
    ("Reciprocal", reciprocal),
    ("Floor", floor),
    ("Ceil", ceil),
    ("Round", round),
    ("Sign", sign),
    ("Erf", erf),
    ("Sin", sin),
    ("Cos", cos),
    ("Tan", tan),
    ("Asin", asin),
    ("Acos", acos),
    ("Atan", atan),
    ("Sinh", sinh),
    ("Cosh", cosh),
    ("Asinh", asinh),
    ("Acosh", acosh),
    ("Atanh", atanh),
    ("IsNaN", isnan),
    ("IsInf", isinf),
    ("Relu", relu),
    ("Sigmoid", sigmoid),
    ("Tanh", tanh),
    ("Softplus", softplus),
    ("Softsign", softsign),
    ("LeakyRelu", leaky_relu),
    ("Elu", elu),
    ("Selu", selu),
    ("Celu", celu),
    ("ThresholdedRelu", thresholded_relu),
    ("HardSigmoid", hard_sigmoid),
    ("HardSwish", hard_swish),
    ("Mish", mish),
    ("Gelu", gelu),
    ("Shrink", shrink),
    ("Clip", clip),
    ("Where", where_),
    ("Cast", cast),
    ("CastLike", cast_like),
    ("Identity", identity),
    ("Dropout", dropout),
];

/// Pre-opset-7 `broadcast=1` with an explicit `axis`: B lines up with A at that axis.
fn legacy_axis(n: &NodeCtx) -> Result<Option<i64>, MapError> {
    if n.opset < 7 && n.int("broadcast", 0)? != 0 {
        return n.int_opt("axis");
    }
    Ok(None)
}

fn binary(n: &NodeCtx, kind: BinaryKind) -> MapResult {
    op(Binary {
        kind,
        legacy_axis: legacy_axis(n)?,
    })
}

fn add(n: &NodeCtx) -> MapResult {
    binary(n, BinaryKind::Add)
}
fn sub(n: &NodeCtx) -> MapResult {
    binary(n, BinaryKind::Sub)
}
fn mul(n: &NodeCtx) -> MapResult {
    binary(n, BinaryKind::Mul)
}
fn div(n: &NodeCtx) -> MapResult {
    binary(n, BinaryKind::Div)
}
fn pow(n: &NodeCtx) -> MapResult {
    binary(n, BinaryKind::Pow)
}
fn mod_(n: &NodeCtx) -> MapResult {
    let fmod = n.int("fmod", 0)? != 0;
    binary(n, BinaryKind::Mod { fmod })
}
fn prelu(n: &NodeCtx) -> MapResult {
    // Before opset 7 the slope held one value per channel (or one for all): it lines up with
    // the input's axis 1 rather than broadcasting from the last axis.
    if n.opset < 7 {
        return op(Binary {
            kind: BinaryKind::PRelu,
            legacy_axis: Some(1),
        });
    }
    binary(n, BinaryKind::PRelu)
}
fn bitwise_and(n: &NodeCtx) -> MapResult {
    binary(n, BinaryKind::BitwiseAnd)
}
fn bitwise_or(n: &NodeCtx) -> MapResult {
    binary(n, BinaryKind::BitwiseOr)
}
fn bitwise_xor(n: &NodeCtx) -> MapResult {
    binary(n, BinaryKind::BitwiseXor)
}
fn bitwise_not(_: &NodeCtx) -> MapResult {
    op(BitwiseNot)
}
fn bitshift(n: &NodeCtx) -> MapResult {
    let kind = match n.string_opt("direction")?.as_deref() {
        Some("LEFT") => BinaryKind::BitShiftLeft,
        Some("RIGHT") => BinaryKind::BitShiftRight,
        Some(d) => {
            return Err(MapError::Invalid(format!(
                "attribute 'direction' must be LEFT or RIGHT, got '{d}'"
            )))
        }
        None => {
            return Err(MapError::Invalid(
                "attribute 'direction' is required".into(),
            ))
        }
    };
    op(Binary::new(kind))
}

/// Comparisons and logical ops had the legacy broadcast attributes too; only the numpy-like
/// trailing alignment (no `axis`) is supported for them.
fn no_legacy_axis(n: &NodeCtx) -> Result<(), MapError> {
    if legacy_axis(n)?.is_some() {
        return Err(n.unsupported("legacy broadcasting with an explicit 'axis'"));
    }
    Ok(())
}

fn compare(n: &NodeCtx, kind: CompareKind) -> MapResult {
    no_legacy_axis(n)?;
    op(Compare { kind })
}
fn equal(n: &NodeCtx) -> MapResult {
    compare(n, CompareKind::Equal)
}
fn less(n: &NodeCtx) -> MapResult {
    compare(n, CompareKind::Less)
}
fn less_or_equal(n: &NodeCtx) -> MapResult {
    compare(n, CompareKind::LessOrEqual)
}
fn greater(n: &NodeCtx) -> MapResult {
    compare(n, CompareKind::Greater)
}
fn greater_or_equal(n: &NodeCtx) -> MapResult {
    compare(n, CompareKind::GreaterOrEqual)
}

fn logical(n: &NodeCtx, kind: LogicalKind) -> MapResult {
    no_legacy_axis(n)?;
    op(Logical { kind })
}
fn and(n: &NodeCtx) -> MapResult {
    logical(n, LogicalKind::And)
}
fn or(n: &NodeCtx) -> MapResult {
    logical(n, LogicalKind::Or)
}
fn xor(n: &NodeCtx) -> MapResult {
    logical(n, LogicalKind::Xor)
}
fn not(_: &NodeCtx) -> MapResult {
    op(Not)
}

fn max(_: &NodeCtx) -> MapResult {
    op(Variadic {
        kind: VariadicKind::Max,
    })
}
fn min(_: &NodeCtx) -> MapResult {
    op(Variadic {
        kind: VariadicKind::Min,
    })
}
fn sum(_: &NodeCtx) -> MapResult {
    op(Variadic {
        kind: VariadicKind::Sum,
    })
}
fn mean(_: &NodeCtx) -> MapResult {
    op(Variadic {
        kind: VariadicKind::Mean,
    })
}

// Unary ops without attributes (old opsets' `consumed_inputs` is ignored).
ferrolite_core::plain_unary!(
    |_: &NodeCtx, kind| -> MapResult { unary(kind) };
    abs => Abs, neg => Neg, exp => Exp, log => Log, sqrt => Sqrt, reciprocal => Reciprocal,
    floor => Floor, ceil => Ceil, round => Round, sign => Sign, erf => Erf, sin => Sin,
    cos => Cos, tan => Tan, asin => Asin, acos => Acos, atan => Atan, sinh => Sinh,
    cosh => Cosh, asinh => Asinh, acosh => Acosh, atanh => Atanh, relu => Relu,
    sigmoid => Sigmoid, tanh => Tanh, softplus => Softplus, softsign => Softsign,
    hard_swish => HardSwish, mish => Mish,
);

fn unary(kind: UnaryKind) -> MapResult {
    op(Unary { kind })
}

fn isnan(_: &NodeCtx) -> MapResult {
    op(IsNaN)
}
fn isinf(n: &NodeCtx) -> MapResult {
    op(IsInf {
        detect_negative: n.int("detect_negative", 1)? != 0,
        detect_positive: n.int("detect_positive", 1)? != 0,
    })
}
fn leaky_relu(n: &NodeCtx) -> MapResult {
    unary(UnaryKind::LeakyRelu {
        alpha: n.float("alpha", 0.01)?,
    })
}
fn elu(n: &NodeCtx) -> MapResult {
    unary(UnaryKind::Elu {
        alpha: n.float("alpha", 1.0)?,
    })
}
fn selu(n: &NodeCtx) -> MapResult {
    unary(UnaryKind::Selu {
        alpha: n.float("alpha", UnaryKind::SELU_ALPHA)?,
        gamma: n.float("gamma", UnaryKind::SELU_GAMMA)?,
    })
}
fn celu(n: &NodeCtx) -> MapResult {
    unary(UnaryKind::Celu {
        alpha: n.float("alpha", 1.0)?,
    })
}
fn thresholded_relu(n: &NodeCtx) -> MapResult {
    unary(UnaryKind::ThresholdedRelu {
        alpha: n.float("alpha", 1.0)?,
    })
}
fn hard_sigmoid(n: &NodeCtx) -> MapResult {
    unary(UnaryKind::HardSigmoid {
        alpha: n.float("alpha", 0.2)?,
        beta: n.float("beta", 0.5)?,
    })
}
fn gelu(n: &NodeCtx) -> MapResult {
    let tanh = match n.string("approximate", "none")?.as_str() {
        "none" => false,
        "tanh" => true,
        other => return Err(n.unsupported(format!("approximate='{other}'"))),
    };
    unary(UnaryKind::Gelu { tanh })
}
fn shrink(n: &NodeCtx) -> MapResult {
    unary(UnaryKind::Shrink {
        bias: n.float("bias", 0.0)?,
        lambd: n.float("lambd", 0.5)?,
    })
}

fn clip(n: &NodeCtx) -> MapResult {
    if n.opset < 11 {
        op(Clip {
            min: n.float_opt("min")?,
            max: n.float_opt("max")?,
        })
    } else {
        op(Clip::default())
    }
}

fn where_(_: &NodeCtx) -> MapResult {
    op(Where)
}

/// The target of Cast: an ONNX data type number, or (opset 1) its name.
fn cast(n: &NodeCtx) -> MapResult {
    let a = n
        .attr("to")
        .ok_or_else(|| MapError::Invalid("attribute 'to' is required".into()))?;
    let t = if a.r#type == attribute_type::STRING {
        let name = String::from_utf8_lossy(&a.s).to_uppercase();
        (1..=64)
            .find(|&t| data_type::name(t) == name)
            .ok_or_else(|| MapError::Invalid(format!("attribute 'to' names no type: '{name}'")))?
    } else {
        n.int_opt("to")?.unwrap_or_default() as i32
    };
    match crate::tensor::dtype_of(t) {
        Some(to) => {
            let (saturate, round_mode) = cast_options(n)?;
            op(Cast {
                to,
                saturate,
                round_mode,
            })
        }
        None => Err(n.unsupported(format!("cast to {}", data_type::name(t)))),
    }
}

/// `saturate` (opset 19+) and `round_mode` (opset 24+) of Cast and CastLike.
fn cast_options(n: &NodeCtx) -> Result<(bool, E8M0Round), MapError> {
    let saturate = n.int("saturate", 1)? != 0;
    let round_mode = match n.string("round_mode", "up")?.as_str() {
        "up" => E8M0Round::Up,
        "down" => E8M0Round::Down,
        "nearest" => E8M0Round::Nearest,
        m => return Err(MapError::Invalid(format!("round_mode '{m}' is not valid"))),
    };
    Ok((saturate, round_mode))
}

fn cast_like(n: &NodeCtx) -> MapResult {
    let (saturate, round_mode) = cast_options(n)?;
    op(CastLike {
        saturate,
        round_mode,
    })
}

fn identity(_: &NodeCtx) -> MapResult {
    op(Identity)
}

fn dropout(n: &NodeCtx) -> MapResult {
    op(Dropout {
        mask: n.n_outputs() >= 2,
        legacy_mask: n.opset < 10,
    })
}

#[cfg(test)]
mod tests {
    use super::super::lookup;
    use super::*;
    use crate::proto::{AttributeProto, NodeProto};
    use ferrolite_core::{DType, Tensor};

    fn node(op_type: &str, attrs: Vec<AttributeProto>, n_out: usize) -> NodeProto {
        NodeProto {
            op_type: op_type.into(),
            input: vec!["a".into(), "b".into()],
            output: (0..n_out).map(|i| format!("y{i}")).collect(),
            attribute: attrs,
            ..Default::default()
        }
    }

    fn int_attr(name: &str, v: i64) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: attribute_type::INT,
            i: v,
            ..Default::default()
        }
    }

    fn str_attr(name: &str, v: &str) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: attribute_type::STRING,
            s: v.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    fn float_attr(name: &str, v: f32) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: attribute_type::FLOAT,
            f: v,
            ..Default::default()
        }
    }

    fn map(n: &NodeProto, opset: i64) -> MapResult {
        let f = lookup(&n.op_type).expect("op is in the table");
        f(&NodeCtx { node: n, opset })
    }

    #[test]
    fn every_entry_maps_with_defaults() {
        for (name, f) in ENTRIES {
            let attrs = match *name {
                "BitShift" => vec![str_attr("direction", "LEFT")],
                "Cast" => vec![int_attr("to", data_type::FLOAT as i64)],
                _ => vec![],
            };
            let n = node(name, attrs, 1);
            let o = f(&NodeCtx {
                node: &n,
                opset: 17,
            })
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(o.name(), *name);
        }
    }

    #[test]
    fn attributes() {
        let n = node("Mod", vec![int_attr("fmod", 1)], 1);
        let o = map(&n, 13).unwrap();
        let b = o.as_any().downcast_ref::<Binary>().unwrap();
        assert_eq!(b.kind, BinaryKind::Mod { fmod: true });

        let n = node("Gelu", vec![str_attr("approximate", "tanh")], 1);
        let o = map(&n, 20).unwrap();
        assert_eq!(
            o.as_any().downcast_ref::<Unary>().unwrap().kind,
            UnaryKind::Gelu { tanh: true }
        );
        let n = node("Gelu", vec![str_attr("approximate", "erf")], 1);
        assert!(matches!(map(&n, 20), Err(MapError::Unsupported(_))));

        let n = node("LeakyRelu", vec![float_attr("alpha", 0.1)], 1);
        let o = map(&n, 16).unwrap();
        assert_eq!(
            o.as_any().downcast_ref::<Unary>().unwrap().kind,
            UnaryKind::LeakyRelu { alpha: 0.1 }
        );

        let n = node("BitShift", vec![str_attr("direction", "UP")], 1);
        assert!(matches!(map(&n, 11), Err(MapError::Invalid(_))));

        let n = node("IsInf", vec![int_attr("detect_positive", 0)], 1);
        let o = map(&n, 20).unwrap();
        let i = o.as_any().downcast_ref::<IsInf>().unwrap();
        assert!(i.detect_negative && !i.detect_positive);
    }

    #[test]
    fn clip_by_opset() {
        let n = node("Clip", vec![float_attr("min", -1.0)], 1);
        let o = map(&n, 6).unwrap();
        let c = o.as_any().downcast_ref::<Clip>().unwrap();
        assert_eq!((c.min, c.max), (Some(-1.0), None));
        let o = map(&n, 13).unwrap();
        assert_eq!(o.as_any().downcast_ref::<Clip>().unwrap(), &Clip::default());
    }

    #[test]
    fn cast_targets() {
        let n = node("Cast", vec![int_attr("to", data_type::BFLOAT16 as i64)], 1);
        let o = map(&n, 19).unwrap();
        assert_eq!(o.as_any().downcast_ref::<Cast>().unwrap().to, DType::BF16);
        let n = node("Cast", vec![str_attr("to", "INT32")], 1);
        let o = map(&n, 1).unwrap();
        assert_eq!(o.as_any().downcast_ref::<Cast>().unwrap().to, DType::I32);
        let n = node(
            "Cast",
            vec![
                int_attr("to", data_type::FLOAT8E4M3FN as i64),
                int_attr("saturate", 0),
            ],
            1,
        );
        let o = map(&n, 21).unwrap();
        let c = o.as_any().downcast_ref::<Cast>().unwrap();
        assert_eq!((c.to, c.saturate), (DType::F8E4M3FN, false));
        let n = node("Cast", vec![int_attr("to", data_type::STRING as i64)], 1);
        let o = map(&n, 21).unwrap();
        assert_eq!(o.as_any().downcast_ref::<Cast>().unwrap().to, DType::String);
        let n = node("Cast", vec![int_attr("to", data_type::COMPLEX64 as i64)], 1);
        assert!(matches!(map(&n, 21), Err(MapError::Unsupported(_))));
        let n = node("Cast", vec![], 1);
        assert!(map(&n, 13).is_err());
    }

    #[test]
    fn legacy_broadcast_and_dropout() {
        let n = node(
            "Add",
            vec![int_attr("broadcast", 1), int_attr("axis", 0)],
            1,
        );
        let o = map(&n, 6).unwrap();
        let b = o.as_any().downcast_ref::<Binary>().unwrap();
        assert_eq!(b.legacy_axis, Some(0));
        let x = Tensor::from_vec(&[2, 2], vec![0.0f32; 4]).unwrap();
        let y = Tensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap();
        let out = o.eval(&[Some(&x), Some(&y)]).unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![1.0, 1.0, 2.0, 2.0]);
        let o = map(&n, 7).unwrap();
        assert_eq!(
            o.as_any().downcast_ref::<Binary>().unwrap().legacy_axis,
            None
        );
        let eq = node(
            "Equal",
            vec![int_attr("broadcast", 1), int_attr("axis", 0)],
            1,
        );
        assert!(matches!(map(&eq, 1), Err(MapError::Unsupported(_))));

        let d = node("Dropout", vec![], 2);
        let o = map(&d, 7).unwrap();
        assert_eq!(
            o.as_any().downcast_ref::<Dropout>().unwrap(),
            &Dropout {
                mask: true,
                legacy_mask: true
            }
        );
        let o = map(&node("Dropout", vec![], 1), 13).unwrap();
        assert_eq!(
            o.as_any().downcast_ref::<Dropout>().unwrap(),
            &Dropout::default()
        );
    }
}
