//! Mapping functions for elementwise ops: binary ops with Paddle's `axis` broadcasting,
//! comparisons and logical ops, activations and other unary ops, and the ops that become a few
//! of them (clip, scale, pow, dropout, cast, assign, where, sum).

use super::{invalid, unsupported, Ctx, MapError, MapFn, MapResult};
use crate::params::dtype_of;
use ferrolite_core::ops::elementwise::{
    Binary, BinaryKind, Cast, Clip, Compare, CompareKind, Identity, Logical, LogicalKind, Not,
    Unary, UnaryKind, Variadic, VariadicKind, Where,
};
use ferrolite_core::ops::shape::squeeze::Unsqueeze;
use ferrolite_core::{DType, ValueId};

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    // elementwise binary (Paddle `axis` broadcasting)
    ("elementwise_add", elementwise_add),
    ("elementwise_sub", elementwise_sub),
    ("elementwise_mul", elementwise_mul),
    ("elementwise_div", elementwise_div),
    ("elementwise_pow", elementwise_pow),
    ("elementwise_max", elementwise_max),
    ("elementwise_min", elementwise_min),
    ("elementwise_mod", elementwise_mod),
    ("equal", equal),
    ("not_equal", not_equal),
    ("less_than", less_than),
    ("less_equal", less_equal),
    ("greater_than", greater_than),
    ("greater_equal", greater_equal),
    ("logical_and", logical_and),
    ("logical_or", logical_or),
    ("logical_xor", logical_xor),
    ("logical_not", logical_not),
    // activations and other unary ops
    ("relu", relu),
    ("relu6", relu6),
    ("sigmoid", sigmoid),
    ("tanh", tanh),
    ("exp", exp),
    ("log", log),
    ("sqrt", sqrt),
    ("rsqrt", rsqrt),
    ("abs", abs),
    ("floor", floor),
    ("ceil", ceil),
    ("round", round),
    ("sign", sign),
    ("erf", erf),
    ("sin", sin),
    ("cos", cos),
    ("reciprocal", reciprocal),
    ("square", square),
    ("softplus", softplus),
    ("softsign", softsign),
    ("mish", mish),
    ("gelu", gelu),
    ("leaky_relu", leaky_relu),
    ("elu", elu),
    ("selu", selu),
    ("hard_sigmoid", hard_sigmoid),
    ("hard_swish", hard_swish),
    ("swish", swish),
    ("silu", silu),
    ("prelu", prelu),
    ("clip", clip),
    ("pow", pow),
    ("scale", scale),
    ("dropout", dropout),
    ("cast", cast),
    ("assign", assign),
    ("where", where_),
    ("sum", sum),
];

/// Lines `small` (of rank `small_rank`) up with a tensor of rank `big_rank` starting at `axis`
/// (Paddle's broadcasting), by appending trailing unit dims.
fn align(
    c: &mut Ctx,
    v: ValueId,
    small_dims: &[i64],
    big_rank: usize,
    axis: i64,
) -> Result<ValueId, MapError> {
    let mut dims = small_dims.to_vec();
    let axis = if axis < 0 {
        axis + big_rank as i64 - dims.len() as i64 + 1
    } else {
        axis
    };
    // Paddle drops trailing unit dims of Y that would run past X.
    while axis + dims.len() as i64 > big_rank as i64 && dims.last() == Some(&1) {
        dims.pop();
    }
    let trailing = big_rank as i64 - axis - dims.len() as i64;
    if axis < 0 || trailing < 0 {
        return Err(invalid(format!(
            "an input of dims {small_dims:?} cannot be broadcast at axis {axis} onto rank {big_rank}"
        )));
    }
    if trailing == 0 && dims.len() == small_dims.len() {
        return Ok(v);
    }
    let mut shape = dims.clone();
    shape.extend(std::iter::repeat_n(1, trailing as usize));
    if c.constant(v).is_some() || dims.len() != small_dims.len() {
        // A reshape with 0 = copy keeps unknown dims.
        let s: Vec<i64> = shape
            .iter()
            .enumerate()
            .map(|(i, &d)| if d < 0 && i < dims.len() { 0 } else { d })
            .collect();
        return c.reshape_to(v, &s);
    }
    let axes: Vec<i64> = (dims.len() as i64..(dims.len() as i64 + trailing)).collect();
    c.add(Unsqueeze { axes: Some(axes) }, &[v])
}

/// X and Y of an elementwise op, Y (or X, when it is the smaller) aligned at `axis`.
fn broadcast_pair(c: &mut Ctx) -> Result<(ValueId, ValueId), MapError> {
    let x = c.input("X")?;
    let y = c.input("Y")?;
    let axis = c.int("axis", -1)?;
    if axis == -1 {
        return Ok((x, y));
    }
    let xd = c
        .in_dims("X")
        .ok_or_else(|| unsupported("elementwise 'axis' with an undeclared rank of X"))?;
    let yd = c
        .in_dims("Y")
        .ok_or_else(|| unsupported("elementwise 'axis' with an undeclared rank of Y"))?;
    if xd.len() >= yd.len() {
        let y = align(c, y, &yd, xd.len(), axis)?;
        Ok((x, y))
    } else {
        let x = align(c, x, &xd, yd.len(), axis)?;
        Ok((x, y))
    }
}

fn binary(c: &mut Ctx, kind: BinaryKind) -> MapResult {
    let (x, y) = broadcast_pair(c)?;
    let out = c.add(Binary::new(kind), &[x, y])?;
    c.set_out(out)
}

fn elementwise_add(c: &mut Ctx) -> MapResult {
    binary(c, BinaryKind::Add)
}
fn elementwise_sub(c: &mut Ctx) -> MapResult {
    binary(c, BinaryKind::Sub)
}
fn elementwise_mul(c: &mut Ctx) -> MapResult {
    binary(c, BinaryKind::Mul)
}
fn elementwise_div(c: &mut Ctx) -> MapResult {
    binary(c, BinaryKind::Div)
}
fn elementwise_pow(c: &mut Ctx) -> MapResult {
    binary(c, BinaryKind::Pow)
}
fn elementwise_mod(c: &mut Ctx) -> MapResult {
    // Paddle's mod takes the divisor's sign (Python semantics): ONNX Mod with fmod=0, which
    // the engine defines for integers.
    binary(c, BinaryKind::Mod { fmod: false })
}
fn variadic2(c: &mut Ctx, kind: VariadicKind) -> MapResult {
    let (x, y) = broadcast_pair(c)?;
    let out = c.add(Variadic { kind }, &[x, y])?;
    c.set_out(out)
}
fn elementwise_max(c: &mut Ctx) -> MapResult {
    variadic2(c, VariadicKind::Max)
}
fn elementwise_min(c: &mut Ctx) -> MapResult {
    variadic2(c, VariadicKind::Min)
}

fn compare(c: &mut Ctx, kind: CompareKind, negate: bool) -> MapResult {
    let (x, y) = broadcast_pair(c)?;
    let mut out = c.add(Compare { kind }, &[x, y])?;
    if negate {
        out = c.add(Not, &[out])?;
    }
    c.set_out(out)
}
fn equal(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::Equal, false)
}
fn not_equal(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::Equal, true)
}
fn less_than(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::Less, false)
}
fn less_equal(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::LessOrEqual, false)
}
fn greater_than(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::Greater, false)
}
fn greater_equal(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::GreaterOrEqual, false)
}
fn logical(c: &mut Ctx, kind: LogicalKind) -> MapResult {
    let (x, y) = broadcast_pair(c)?;
    let out = c.add(Logical { kind }, &[x, y])?;
    c.set_out(out)
}
fn logical_and(c: &mut Ctx) -> MapResult {
    logical(c, LogicalKind::And)
}
fn logical_or(c: &mut Ctx) -> MapResult {
    logical(c, LogicalKind::Or)
}
fn logical_xor(c: &mut Ctx) -> MapResult {
    logical(c, LogicalKind::Xor)
}
fn logical_not(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let out = c.add(Not, &[x])?;
    c.set_out(out)
}

// ---------------------------------------------------------------------------------------------
// unary

fn unary(c: &mut Ctx, kind: UnaryKind) -> MapResult {
    let x = c.input("X")?;
    let out = c.add(Unary { kind }, &[x])?;
    c.set_out(out)
}

ferrolite_core::plain_unary!(
    |c: &mut Ctx, kind| -> MapResult { unary(c, kind) };
    relu => Relu, sigmoid => Sigmoid, tanh => Tanh, exp => Exp, log => Log, sqrt => Sqrt,
    abs => Abs, floor => Floor, ceil => Ceil, round => Round, sign => Sign, erf => Erf,
    sin => Sin, cos => Cos, reciprocal => Reciprocal, softsign => Softsign, mish => Mish,
);

fn rsqrt(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let s = c.add(
        Unary {
            kind: UnaryKind::Sqrt,
        },
        &[x],
    )?;
    let out = c.add(
        Unary {
            kind: UnaryKind::Reciprocal,
        },
        &[s],
    )?;
    c.set_out(out)
}

fn square(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let out = c.add(Binary::new(BinaryKind::Mul), &[x, x])?;
    c.set_out(out)
}

fn softplus(c: &mut Ctx) -> MapResult {
    let beta = c.float("beta", 1.0)?;
    if beta != 1.0 {
        return Err(unsupported(format!("softplus with beta={beta}")));
    }
    unary(c, UnaryKind::Softplus)
}

fn gelu(c: &mut Ctx) -> MapResult {
    let tanh = c.bool("approximate", false)?;
    unary(c, UnaryKind::Gelu { tanh })
}

fn leaky_relu(c: &mut Ctx) -> MapResult {
    let alpha = c.float("alpha", 0.02)? as f32;
    unary(c, UnaryKind::LeakyRelu { alpha })
}

fn elu(c: &mut Ctx) -> MapResult {
    let alpha = c.float("alpha", 1.0)? as f32;
    unary(c, UnaryKind::Elu { alpha })
}

fn selu(c: &mut Ctx) -> MapResult {
    let alpha = c.float("alpha", UnaryKind::SELU_ALPHA as f64)? as f32;
    let gamma = c.float("scale", UnaryKind::SELU_GAMMA as f64)? as f32;
    unary(c, UnaryKind::Selu { alpha, gamma })
}

fn hard_sigmoid(c: &mut Ctx) -> MapResult {
    let alpha = c.float("slope", 0.2)? as f32;
    let beta = c.float("offset", 0.5)? as f32;
    unary(c, UnaryKind::HardSigmoid { alpha, beta })
}

/// `x * min(max(x + offset, 0), threshold) / scale`; the defaults (6, 6, 3) are ONNX HardSwish.
fn hard_swish(c: &mut Ctx) -> MapResult {
    let threshold = c.float("threshold", 6.0)?;
    let scale = c.float("scale", 6.0)?;
    let offset = c.float("offset", 3.0)?;
    if (threshold, scale, offset) == (6.0, 6.0, 3.0) {
        return unary(c, UnaryKind::HardSwish);
    }
    let x = c.input("X")?;
    let dt = c.in_dtype("X").unwrap_or(DType::F32);
    let o = c.scalar(dt, offset)?;
    let t = c.add(Binary::new(BinaryKind::Add), &[x, o])?;
    let t = c.add(
        Clip {
            min: Some(0.0),
            max: Some(threshold as f32),
        },
        &[t],
    )?;
    let t = c.add(Binary::new(BinaryKind::Mul), &[x, t])?;
    let s = c.scalar(dt, scale)?;
    let out = c.add(Binary::new(BinaryKind::Div), &[t, s])?;
    c.set_out(out)
}

/// `x * sigmoid(beta * x)`.
fn swish_with(c: &mut Ctx, beta: f64) -> MapResult {
    let x = c.input("X")?;
    let mut z = x;
    if beta != 1.0 {
        let dt = c.in_dtype("X").unwrap_or(DType::F32);
        let b = c.scalar(dt, beta)?;
        z = c.add(Binary::new(BinaryKind::Mul), &[x, b])?;
    }
    let s = c.add(
        Unary {
            kind: UnaryKind::Sigmoid,
        },
        &[z],
    )?;
    let out = c.add(Binary::new(BinaryKind::Mul), &[x, s])?;
    c.set_out(out)
}
fn swish(c: &mut Ctx) -> MapResult {
    let beta = c.float("beta", 1.0)?;
    swish_with(c, beta)
}
fn silu(c: &mut Ctx) -> MapResult {
    swish_with(c, 1.0)
}

fn relu6(c: &mut Ctx) -> MapResult {
    let threshold = c.float("threshold", 6.0)? as f32;
    let x = c.input("X")?;
    let out = c.add(
        Clip {
            min: Some(0.0),
            max: Some(threshold),
        },
        &[x],
    )?;
    c.set_out(out)
}

fn clip(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let dt = c.in_dtype("X").unwrap_or(DType::F32);
    let min = match c.input_opt("Min")? {
        Some(v) => v,
        None => {
            let v = c.float("min", f32::MIN as f64)?;
            c.scalar(dt, v)?
        }
    };
    let max = match c.input_opt("Max")? {
        Some(v) => v,
        None => {
            let v = c.float("max", f32::MAX as f64)?;
            c.scalar(dt, v)?
        }
    };
    let min = c.reshape_to(min, &[])?;
    let max = c.reshape_to(max, &[])?;
    let out = c.add(Clip::default(), &[x, min, max])?;
    c.set_out(out)
}

/// PReLU; `mode` all / channel / element decides how Alpha lines up with X.
fn prelu(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let alpha = c.input("Alpha")?;
    let mode = c.string("mode", "all")?;
    if c.string("data_format", "NCHW")? != "NCHW" {
        return Err(unsupported("prelu with data_format other than NCHW"));
    }
    let rank = c.in_rank("X")?;
    let alpha = match mode.as_str() {
        "all" => c.reshape_to(alpha, &[1])?,
        "channel" => {
            let mut s = vec![-1];
            s.extend(std::iter::repeat_n(1, rank.saturating_sub(2)));
            c.reshape_to(alpha, &s)?
        }
        "element" => {
            let xd = c.in_dims("X").unwrap_or_default();
            let s: Vec<i64> = xd
                .iter()
                .skip(1)
                .map(|&d| if d < 0 { 0 } else { d })
                .collect();
            c.reshape_to(alpha, &s)?
        }
        m => return Err(unsupported(format!("prelu mode '{m}'"))),
    };
    let out = c.add(Binary::new(BinaryKind::PRelu), &[x, alpha])?;
    c.set_out(out)
}

fn pow(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let e = match c.input_opt("FactorTensor")? {
        Some(v) => v,
        None => {
            let f = c.float("factor", 1.0)?;
            let dt = c.in_dtype("X").unwrap_or(DType::F32);
            c.scalar(dt, f)?
        }
    };
    let out = c.add(Binary::new(BinaryKind::Pow), &[x, e])?;
    c.set_out(out)
}

/// `scale * x + bias`, or `scale * (x + bias)` when `bias_after_scale` is false.
fn scale(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let dt = c.in_dtype("X").unwrap_or(DType::F32);
    let s = c.float("scale", 1.0)?;
    let bias = c.float("bias", 0.0)?;
    let after = c.bool("bias_after_scale", true)?;
    let scale_v = match c.input_opt("ScaleTensor")? {
        Some(v) => Some(v),
        None if s != 1.0 => Some(c.scalar(dt, s)?),
        None => None,
    };
    let mut v = x;
    if !after && bias != 0.0 {
        let b = c.scalar(dt, bias)?;
        v = c.add(Binary::new(BinaryKind::Add), &[v, b])?;
    }
    if let Some(sv) = scale_v {
        v = c.add(Binary::new(BinaryKind::Mul), &[v, sv])?;
    }
    if after && bias != 0.0 {
        let b = c.scalar(dt, bias)?;
        v = c.add(Binary::new(BinaryKind::Add), &[v, b])?;
    }
    if v == x {
        v = c.add(Identity, &[x])?;
    }
    c.set_out(v)
}

/// Inference dropout: identity (`upscale_in_train`) or `x * (1 - p)` (`downgrade_in_infer`).
fn dropout(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let p = c.float("dropout_prob", 0.5)?;
    let imp = c.string("dropout_implementation", "downgrade_in_infer")?;
    let out = match imp.as_str() {
        "upscale_in_train" => c.add(Identity, &[x])?,
        "downgrade_in_infer" => {
            let dt = c.in_dtype("X").unwrap_or(DType::F32);
            let k = c.scalar(dt, 1.0 - p)?;
            c.add(Binary::new(BinaryKind::Mul), &[x, k])?
        }
        other => return Err(invalid(format!("unknown dropout_implementation '{other}'"))),
    };
    c.set_out(out)
}

fn cast(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let t = c.int("out_dtype", -1)?;
    let to = dtype_of(t as i32).ok_or_else(|| {
        unsupported(format!(
            "cast to {}",
            crate::proto::var_type::name(t as i32)
        ))
    })?;
    let out = c.add(Cast::new(to), &[x])?;
    c.set_out(out)
}

fn assign(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let out = c.add(Identity, &[x])?;
    c.set_out(out)
}

fn where_(c: &mut Ctx) -> MapResult {
    let cond = c.input("Condition")?;
    let x = c.input("X")?;
    let y = c.input("Y")?;
    let out = c.add(Where, &[cond, x, y])?;
    c.set_out(out)
}

fn sum(c: &mut Ctx) -> MapResult {
    let xs = c.inputs("X")?;
    if xs.is_empty() {
        return Err(invalid("sum needs at least one input"));
    }
    let out = c.add(
        Variadic {
            kind: VariadicKind::Sum,
        },
        &xs,
    )?;
    c.set_out(out)
}
