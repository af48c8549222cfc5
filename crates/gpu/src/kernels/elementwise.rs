//! Element-wise kernels: unary functions and activations, binary ops with broadcasting, Clip,
//! Swish, and BatchNormalization as a per-channel affine map.

use super::{add, f, lit, numel, strides, u, Lowered, Node, Operand, Reason, Registry, Req, Step};
use ferrolite_core::ops::elementwise::binary::{Binary, BinaryKind};
use ferrolite_core::ops::elementwise::clip::Clip;
use ferrolite_core::ops::elementwise::unary::{Unary, UnaryKind};
use ferrolite_core::ops::extra::swish::Swish;
use ferrolite_core::ops::nn::norm::BatchNorm;
use std::sync::Arc;

/// erf with the Abramowitz-Stegun 7.1.26 polynomial (absolute error below 1.5e-7); WGSL has
/// no erf.
const ERF: &str = "fn erf_(x: f32) -> f32 {
  let t = 1.0 / (1.0 + 0.3275911 * abs(x));
  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-x * x);
  return select(y, -y, x < 0.0);
}
";

/// The WGSL expression of a unary function of `x`, with the helpers it needs: the one
/// definition the standalone op, Clip and the fused epilogues (`activation_fn`) share.
pub(super) fn unary_expr(kind: UnaryKind) -> Result<(String, &'static str), Reason> {
    use UnaryKind::*;
    // tanh and exp of large arguments overflow in some drivers' expansions: the results are
    // saturated well before the clamps.
    let e = match kind {
        Abs => "abs(x)".into(),
        Neg => "-x".into(),
        Exp => "exp(x)".into(),
        Log => "log(x)".into(),
        Sqrt => "sqrt(x)".into(),
        Reciprocal => "1.0 / x".into(),
        Floor => "floor(x)".into(),
        Ceil => "ceil(x)".into(),
        Round => "round(x)".into(),
        Sign => "select(select(x, -1.0, x < 0.0), 1.0, x > 0.0)".into(),
        Erf => return Ok(("erf_(x)".into(), ERF)),
        Sin => "sin(x)".into(),
        Cos => "cos(x)".into(),
        Relu => "max(x, 0.0)".into(),
        Sigmoid => "1.0 / (1.0 + exp(-x))".into(),
        Tanh => "tanh(clamp(x, -20.0, 20.0))".into(),
        Softplus => "select(log(1.0 + exp(x)), x, x > 20.0)".into(),
        Softsign => "x / (1.0 + abs(x))".into(),
        LeakyRelu { alpha } => format!("select(x, {} * x, x < 0.0)", lit(alpha)),
        Elu { alpha } => format!("select(x, {} * (exp(x) - 1.0), x < 0.0)", lit(alpha)),
        Selu { alpha, gamma } => format!(
            "{g} * select({a} * exp(x) - {a}, x, x > 0.0)",
            g = lit(gamma),
            a = lit(alpha)
        ),
        ThresholdedRelu { alpha } => format!("select(0.0, x, x > {})", lit(alpha)),
        HardSigmoid { alpha, beta } => {
            format!("clamp({} * x + {}, 0.0, 1.0)", lit(alpha), lit(beta))
        }
        HardSwish => "x * clamp(x / 6.0 + 0.5, 0.0, 1.0)".into(),
        Mish => "x * tanh(clamp(select(log(1.0 + exp(x)), x, x > 20.0), -20.0, 20.0))".into(),
        Gelu { tanh: false } => return Ok(("0.5 * x * (1.0 + erf_(x * 0.70710678118654752))".into(), ERF)),
        Gelu { tanh: true } => {
            "0.5 * x * (1.0 + tanh(clamp(0.79788456080286536 * (x + 0.044715 * x * x * x), -20.0, 20.0)))".into()
        }
        Clip { min, max } => clip_expr(min, max),
        Tan | Asin | Acos | Atan | Sinh | Cosh | Asinh | Acosh | Atanh | Celu { .. }
        | Shrink { .. } => return Err(format!("op {} has no GPU kernel", kind.name())),
    };
    Ok((e, ""))
}

/// `x` clamped to `[lo, hi]`. min/max with infinities would be fine, but literals cannot
/// spell them, so an unbounded side is left out.
fn clip_expr(lo: f32, hi: f32) -> String {
    match (lo.is_finite(), hi.is_finite()) {
        (true, true) => format!("min(max(x, {}), {})", lit(lo), lit(hi)),
        (true, false) => format!("max(x, {})", lit(lo)),
        (false, true) => format!("min(x, {})", lit(hi)),
        (false, false) => "x".into(),
    }
}

/// `out[i] = expr(in0[i])`.
fn map_step(n: usize, expr: &str, helpers: &str) -> Step {
    let body = format!("{helpers}fn run(i: u32) {{\n  let x = in0[i];\n  out[i] = {expr};\n}}\n");
    Step::threads(n, body, vec![], vec![Operand::Input(0)], Operand::Output(0))
}

/// The WGSL function `op(a, b)` of a binary kind.
fn binary_fn(kind: BinaryKind) -> Result<&'static str, Reason> {
    Ok(match kind {
        BinaryKind::Add => "fn op(a: f32, b: f32) -> f32 { return a + b; }\n",
        BinaryKind::Sub => "fn op(a: f32, b: f32) -> f32 { return a - b; }\n",
        BinaryKind::Mul => "fn op(a: f32, b: f32) -> f32 { return a * b; }\n",
        BinaryKind::Div => "fn op(a: f32, b: f32) -> f32 { return a / b; }\n",
        BinaryKind::PRelu => "fn op(a: f32, b: f32) -> f32 { return select(a, a * b, a < 0.0); }\n",
        // WGSL's pow is undefined for a < 0; ONNX gives real results for integral exponents.
        BinaryKind::Pow => {
            "fn op(a: f32, b: f32) -> f32 {
  if (b == 2.0) { return a * a; }
  if (b == 1.0) { return a; }
  if (b == 0.0) { return 1.0; }
  let r = pow(abs(a), b);
  if (a < 0.0) {
    if (floor(b) != b) { return bitcast<f32>(0x7fc00000u); }
    if (floor(b * 0.5) * 2.0 != b) { return -r; }
  }
  return r;
}
"
        }
        BinaryKind::Mod { .. }
        | BinaryKind::BitwiseAnd
        | BinaryKind::BitwiseOr
        | BinaryKind::BitwiseXor
        | BinaryKind::BitShiftLeft
        | BinaryKind::BitShiftRight => return Err(format!("op {} has no GPU kernel", kind.name())),
    })
}

/// Strides of `shape` broadcast to `out` (rank-aligned at the end; 0 where it repeats).
fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let s = strides(shape);
    let lead = out.len() - shape.len();
    (0..out.len())
        .map(|d| {
            if d < lead || shape[d - lead] == 1 {
                0
            } else {
                s[d - lead]
            }
        })
        .collect()
}

/// Merges neighbouring dimensions that every operand walks contiguously, and drops size-1
/// ones, so index arithmetic runs over as few dimensions as possible.
pub(crate) fn collapse(shape: &[usize], operands: &[Vec<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut out_shape: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<usize>> = vec![Vec::new(); operands.len()];
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        let mergeable = !out_shape.is_empty()
            && operands.iter().zip(&out_strides).all(|(s, o)| {
                let last = *o.last().unwrap_or(&0);
                last == s[d] * shape[d]
            });
        if mergeable {
            let n = out_shape.len() - 1;
            out_shape[n] *= shape[d];
            for (o, s) in out_strides.iter_mut().zip(operands) {
                let k = o.len() - 1;
                o[k] = s[d];
            }
        } else {
            out_shape.push(shape[d]);
            for (o, s) in out_strides.iter_mut().zip(operands) {
                o.push(s[d]);
            }
        }
    }
    (out_shape, out_strides)
}

fn binary(node: &Node, kind: BinaryKind) -> Result<Lowered, Reason> {
    let op = binary_fn(kind)?;
    let (a, b, y) = (node.shape(0)?, node.shape(1)?, node.out_shape(0)?);
    let n = numel(y);
    let reads = vec![Operand::Input(0), Operand::Input(1)];
    let simple = |load_a: &str, load_b: &str| {
        let body = format!("{op}fn run(i: u32) {{\n  out[i] = op({load_a}, {load_b});\n}}\n");
        Step::threads(n, body, vec![], reads.clone(), Operand::Output(0))
    };
    let step = if a == y && b == y {
        simple("in0[i]", "in1[i]")
    } else if a == y && numel(b) == 1 {
        simple("in0[i]", "in1[0]")
    } else if b == y && numel(a) == 1 {
        simple("in0[0]", "in1[i]")
    } else {
        let (shape, st) = collapse(y, &[broadcast_strides(a, y), broadcast_strides(b, y)]);
        let rank = shape.len();
        let mut params = vec![u(rank)];
        params.extend(shape.iter().map(|&d| u(d)));
        params.extend(st[0].iter().map(|&d| u(d)));
        params.extend(st[1].iter().map(|&d| u(d)));
        let body = format!(
            "{op}fn run(i: u32) {{
  let rank = p[1];
  var rem = i;
  var ia = 0u;
  var ib = 0u;
  for (var d = rank; d > 0u; d = d - 1u) {{
    let n = p[1u + d];
    let k = rem % n;
    rem = rem / n;
    ia = ia + k * p[1u + rank + d];
    ib = ib + k * p[1u + 2u * rank + d];
  }}
  out[i] = op(in0[ia], in1[ib]);
}}
"
        );
        Step::threads(n, body, params, reads, Operand::Output(0))
    };
    Ok(Lowered::steps(vec![step]))
}

/// The scalar value of constant input `i`, if present.
fn scalar_input(node: &Node, i: usize, what: &str) -> Result<Option<f32>, Reason> {
    if !node.has(i) {
        return Ok(None);
    }
    let v = node.constant_f32(i, what)?;
    match v.as_slice() {
        [x] => Ok(Some(*x)),
        _ => Err(format!("{what} (input {i}) is not a scalar")),
    }
}

pub(crate) fn register(reg: &mut Registry) {
    add::<Unary>(reg, "unary", "Unary", unary);
    add::<Binary>(reg, "binary", "Binary", binary_op);
    add::<Clip>(reg, "clip", "Clip", clip);
    add::<Swish>(reg, "swish", "Swish", swish);
    add::<BatchNorm>(reg, "batch_norm", "BatchNormalization", batch_norm);
}

fn unary(un: &Unary, r: &Req) -> Result<Lowered, Reason> {
    let n = numel(Node::of(r).out_shape(0)?);
    let (expr, helpers) = unary_expr(un.kind)?;
    Ok(Lowered::steps(vec![map_step(n, &expr, helpers)]))
}

fn binary_op(b: &Binary, r: &Req) -> Result<Lowered, Reason> {
    if b.legacy_axis.is_some() {
        return Err("broadcasting with a legacy axis".into());
    }
    binary(&Node::of(r), b.kind)
}

/// Clip with its bounds from the inputs (constants) or the attributes: the unary Clip.
fn clip(c: &Clip, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let n = numel(node.out_shape(0)?);
    let min = scalar_input(&node, 1, "min")?
        .or(c.min)
        .unwrap_or(f32::NEG_INFINITY);
    let max = scalar_input(&node, 2, "max")?
        .or(c.max)
        .unwrap_or(f32::INFINITY);
    let (expr, helpers) = unary_expr(UnaryKind::Clip { min, max })?;
    Ok(Lowered::steps(vec![map_step(n, &expr, helpers)]))
}

fn swish(s: &Swish, r: &Req) -> Result<Lowered, Reason> {
    let n = numel(Node::of(r).out_shape(0)?);
    let expr = format!("x / (1.0 + exp(-{} * x))", lit(s.alpha as f32));
    Ok(Lowered::steps(vec![map_step(n, &expr, "")]))
}

/// `y = x * a[c] + b[c]` with `a = scale / sqrt(var + eps)`, `b = B - mean * a` worked out
/// once from the constant statistics.
fn batch_norm(bn: &BatchNorm, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    if node.req.outputs.len() != 1 {
        return Err("BatchNormalization with training outputs".into());
    }
    let x = node.shape(0)?;
    if x.len() < 2 {
        return Err(format!("BatchNormalization of rank {} input", x.len()));
    }
    let c = x[1];
    let inner: usize = x[2..].iter().product();
    let scale = node.constant_f32(1, "scale")?;
    let bias = node.constant_f32(2, "B")?;
    let mean = node.constant_f32(3, "input_mean")?;
    let var = node.constant_f32(4, "input_var")?;
    if [&scale, &bias, &mean, &var].iter().any(|v| v.len() != c) {
        return Err(format!("BatchNormalization statistics are not [{c}]"));
    }
    let mut data = vec![0u32; 2 * c];
    for ch in 0..c {
        let a = scale[ch] as f64 / (var[ch] as f64 + bn.epsilon).sqrt();
        data[ch] = f(a as f32);
        data[c + ch] = f((bias[ch] as f64 - mean[ch] as f64 * a) as f32);
    }
    let body = "fn run(i: u32) {
  let c = (i / p[1]) % p[2];
  out[i] = in0[i] * in1[c] + in1[p[2] + c];
}
"
    .to_string();
    let step = Step::threads(
        numel(x),
        body,
        vec![u(inner.max(1)), u(c)],
        vec![Operand::Input(0), Operand::Data(Arc::new(data))],
        Operand::Output(0),
    );
    Ok(Lowered::steps(vec![step]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapse_merges_contiguous_dims_and_keeps_broadcast_ones() {
        // [2, 3, 4] + [3, 1]: b repeats along the first and last dims, so nothing merges.
        let y = [2, 3, 4];
        let b = broadcast_strides(&[3, 1], &y);
        assert_eq!(b, vec![0, 1, 0]);
        let (shape, st) = collapse(&y, &[strides(&y), b]);
        assert_eq!(shape, vec![2, 3, 4]);
        assert_eq!(st[1], vec![0, 1, 0]);
        // [2, 3, 4] + [1, 3, 4]: the last two dims are contiguous in both.
        let (shape, st) = collapse(&y, &[strides(&y), broadcast_strides(&[1, 3, 4], &y)]);
        assert_eq!(shape, vec![2, 12]);
        assert_eq!(st, vec![vec![12, 1], vec![0, 1]]);
        // Size-1 dims are dropped.
        let (shape, _) = collapse(&[1, 5, 1], &[vec![5, 1, 1]]);
        assert_eq!(shape, vec![5]);
    }
}
