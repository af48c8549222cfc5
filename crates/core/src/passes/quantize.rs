//! `quantize`: the quantization information of a QDQ model turned into integer ops.
//!
//! A QDQ model states its integer computation as float ops between DequantizeLinear (DQ) and
//! QuantizeLinear (Q) nodes. This pass rewrites each island `DQ -> op -> Q` into the integer
//! op with the same meaning:
//! - Conv with a DQ'd activation, DQ'd constant weights (per tensor or per output channel)
//!   and a DQ'd i32 (or float constant) bias becomes QLinearConv;
//! - MatMul and Gemm with a DQ'd activation and DQ'd constant 2-D weights (per tensor or per
//!   column) become com.microsoft QGemm;
//! - MaxPool, nearest Resize, Reshape, Flatten, Transpose, Squeeze, Unsqueeze and Concat whose
//!   DQ'd inputs and Q'd output share one scale and zero point run on the 8-bit values
//!   directly (they only move or select values, and a monotone quantization commutes with
//!   max);
//! - a Concat whose DQ'd inputs are quantized otherwise becomes com.microsoft QLinearConcat,
//!   which requantizes each input with the same f32 arithmetic as DQ -> Q (so the same
//!   values), and keeps the joined tensor 8-bit.
//!
//! A dynamically quantized MatMul (onnxruntime's `quantize_dynamic`: MatMulInteger, Cast to
//! float, Mul by the product of the scales, then often Add of a per-column bias) becomes one
//! com.microsoft MatMulIntegerToFloat, so the 32-bit products are scaled (and biased) as they
//! are stored instead of in three more passes over them.
//!
//! Add, Sub and Mul of two per-tensor DQ'd 8-bit operands become [`QdqBinary`]: the island's
//! own f32 arithmetic on the 8-bit values, so the same values without the f32 tensors between
//! (ppocrv4_det's neck held 96 x 160 x 160 maps of them). Not their QLinear forms
//! (com.microsoft), which round on a different path than the float simulation that defines a
//! QDQ model: on deep networks (mobilenet_v2) those one-step differences compound past the
//! tolerance. Sigmoid and GlobalAveragePool between DQ and Q stay float, as onnxruntime leaves
//! them.
//!
//! Afterwards the DequantizeLinear nodes of constants that stay float are folded, once: shape
//! inference leaves DequantizeLinear unfolded so that this pass sees the 8-bit weights.

use super::rewrite::{
    binary, constant, info, input, out, producer, rewrite_all, Arg, Rewrite, Uses,
};
use super::Pass;
use crate::infer::node_error;
use crate::ops::elementwise::binary::BinaryKind;
use crate::ops::elementwise::cast::Cast;
use crate::ops::linalg::conv::Conv;
use crate::ops::linalg::gemm::Gemm;
use crate::ops::linalg::matmul::MatMul;
use crate::ops::linalg::matmul::MatMulInteger;
use crate::ops::nn::pool::{Pool, PoolKind};
use crate::ops::nn::resize::{CoordMode, Resize, ResizeMode};
use crate::ops::quant::{DequantizeLinear, QGemm, QLinearConcat, QLinearConv, QuantizeLinear};
use crate::ops::quant::{MatMulIntegerToFloat, QdqBinary};
use crate::ops::shape::concat::Concat;
use crate::ops::shape::flatten::Flatten;
use crate::ops::shape::reshape::Reshape;
use crate::ops::shape::squeeze::{Squeeze, Unsqueeze};
use crate::ops::shape::transpose::Transpose;
use crate::{DType, Graph, Node, Op, Result, Tensor, ValueId};
use std::sync::Arc;

pub struct Quantize;

impl Pass for Quantize {
    fn name(&self) -> &'static str {
        "quantize"
    }

    fn description(&self) -> &'static str {
        "run DequantizeLinear -> op -> QuantizeLinear islands as integer ops (Conv as QLinearConv, MatMul and Gemm as QGemm), keep 8-bit values through MaxPool, nearest Resize, Reshape, Transpose, Concat, ... where the scales agree (Concat as QLinearConcat where they do not), Add/Sub/Mul of DQ'd operands as QdqBinary (the same f32 arithmetic on 8-bit tensors), then fold the dequantization of constants that stay float; MatMulInteger -> Cast -> Mul (-> Add) as MatMulIntegerToFloat"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        let rewritten = rewrite_all(graph, matcher)?;
        // The weights' DequantizeLinear nodes that the integer ops replaced are dead now;
        // folding them would build float copies of every weight.
        graph.remove_dead_nodes();
        let folded = fold_constant_dequantize(graph)?;
        Ok(rewritten || folded)
    }
}

fn is_q8(d: DType) -> bool {
    matches!(d, DType::U8 | DType::I8)
}

/// A per-tensor 8-bit quantization: the 8-bit value and its scale and zero point inputs.
#[derive(Clone, Copy)]
struct Quantized {
    value: ValueId,
    scale: ValueId,
    zero: Option<ValueId>,
}

impl Quantized {
    /// Whether `other` has the same scale and zero point values.
    fn same_params(&self, g: &Graph, other: &Quantized) -> bool {
        let values = |q: &Quantized| {
            let s = constant(g, q.scale)?.to_f64_vec();
            let z = match q.zero {
                Some(z) => constant(g, z)?.to_f64_vec(),
                None => vec![0.0],
            };
            Some((s, z))
        };
        matches!((values(self), values(other)), (Some(a), Some(b)) if a == b)
    }

    fn zero_arg(&self) -> Arg {
        self.zero.map_or(Arg::Absent, Arg::Value)
    }
}

/// One-element constant scale (f32) and zero point (8-bit or absent).
fn per_tensor(g: &Graph, scale: ValueId, zero: Option<ValueId>) -> bool {
    let s_ok = constant(g, scale).is_some_and(|t| t.numel() == 1 && t.dtype() == DType::F32);
    let z_ok =
        zero.is_none_or(|z| constant(g, z).is_some_and(|t| t.numel() == 1 && is_q8(t.dtype())));
    s_ok && z_ok
}

/// `v` as the output of a per-tensor 8-bit DequantizeLinear.
fn dequantized(g: &Graph, v: ValueId) -> Option<Quantized> {
    let n = &g.nodes[producer(g, v)?];
    let dq = n.op.as_any().downcast_ref::<DequantizeLinear>()?;
    if dq.block_size != 0 || dq.output_dtype.is_some_and(|d| d != DType::F32) {
        return None;
    }
    let q = Quantized {
        value: input(n, 0)?,
        scale: input(n, 1)?,
        zero: input(n, 2),
    };
    let dtype = g.value(q.value).info.as_ref()?.dtype;
    (is_q8(dtype) && per_tensor(g, q.scale, q.zero)).then_some(q)
}

/// `v` as the output of a DequantizeLinear of a constant (weights or bias), with its axis.
fn dequantized_constant(g: &Graph, v: ValueId) -> Option<(&Node, &DequantizeLinear)> {
    let n = &g.nodes[producer(g, v)?];
    let dq = n.op.as_any().downcast_ref::<DequantizeLinear>()?;
    let all_const = n.inputs.iter().flatten().all(|&i| constant(g, i).is_some());
    (dq.block_size == 0 && all_const && dq.output_dtype.is_none()).then_some((n, dq))
}

/// Weights DQ'd per tensor or along `axis` (of a rank-`rank` tensor) with `len` values.
fn weights(g: &Graph, v: ValueId, axis: usize, len: usize) -> Option<Quantized> {
    let (n, dq) = dequantized_constant(g, v)?;
    let w = constant(g, input(n, 0)?)?;
    if !is_q8(w.dtype()) {
        return None;
    }
    let scale = input(n, 1)?;
    let zero = input(n, 2);
    let st = constant(g, scale)?;
    let count_ok = |t: &Tensor| t.numel() == 1 || (t.rank() == 1 && t.numel() == len);
    let rank = w.rank() as i64;
    let axis_ok = st.numel() == 1 || (dq.axis == axis as i64 || dq.axis == axis as i64 - rank);
    let zero_ok =
        zero.is_none_or(|z| constant(g, z).is_some_and(|t| count_ok(t) && t.dtype() == w.dtype()));
    (st.dtype() == DType::F32 && count_ok(st) && axis_ok && zero_ok).then_some(Quantized {
        value: input(n, 0)?,
        scale,
        zero,
    })
}

/// The Q node at `i` as a per-tensor 8-bit quantization of its input.
fn quantize_node(g: &Graph, n: &Node) -> Option<Quantized> {
    let q = n.op.as_any().downcast_ref::<QuantizeLinear>()?;
    let y = out(n)?;
    let zero = input(n, 2)?;
    let ok = q.block_size == 0
        && q.saturate
        && is_q8(g.value(y).info.as_ref()?.dtype)
        && per_tensor(g, input(n, 1)?, Some(zero));
    ok.then_some(Quantized {
        value: y,
        scale: input(n, 1)?,
        zero: Some(zero),
    })
}

/// The i32 bias of QLinearConv for a Conv bias `b`: a DQ'd i32 constant whose scale is
/// `x_scale * w_scale`, taken as it is, or any float constant (a DQ'd one included),
/// quantized to that scale.
fn bias(g: &Graph, b: ValueId, x: &Quantized, w: &Quantized, m: usize) -> Option<Arg> {
    let xs = constant(g, x.scale)?.to_f64_vec()[0] as f32;
    let ws = constant(g, w.scale)?.to_f64_vec();
    let step = |c: usize| xs * ws[if ws.len() == 1 { 0 } else { c }] as f32;
    if let Some((n, _)) = dequantized_constant(g, b) {
        let q = constant(g, input(n, 0)?)?;
        let s = constant(g, input(n, 1)?)?.to_f64_vec();
        let z_zero = input(n, 2).is_none_or(|z| {
            constant(g, z).is_some_and(|t| t.to_f64_vec().iter().all(|&v| v == 0.0))
        });
        if q.dtype() == DType::I32 && q.numel() == m && z_zero && (s.len() == 1 || s.len() == m) {
            let same = (0..m).all(|c| {
                let bs = s[if s.len() == 1 { 0 } else { c }] as f32;
                (bs - step(c)).abs() <= 1e-6 * step(c).abs()
            });
            if same {
                return Some(Arg::Value(input(n, 0)?));
            }
        }
    }
    // A float bias: the DQ'd value, or a plain constant.
    let real: Vec<f64> = match dequantized_constant(g, b) {
        Some((n, _)) => {
            let args: Vec<Option<&Tensor>> = n
                .inputs
                .iter()
                .map(|i| i.and_then(|i| constant(g, i)))
                .collect();
            n.op.eval(&args).ok()?.first()?.to_f64_vec()
        }
        None => constant(g, b)?.to_f64_vec(),
    };
    if real.len() != m {
        return None;
    }
    let q: Vec<i32> = (0..m)
        .map(|c| {
            let v = (real[c] / step(c) as f64).round_ties_even();
            v.clamp(i32::MIN as f64, i32::MAX as f64) as i32
        })
        .collect();
    Some(Arg::Const("bias_q", Tensor::from_vec(&[m], q).ok()?))
}

fn conv_island(g: &Graph, p: &Node, c: &Conv, y: &Quantized) -> Option<(Arc<dyn Op>, Vec<Arg>)> {
    let x = dequantized(g, input(p, 0)?)?;
    let w_v = input(p, 1)?;
    let m = *g.value(w_v).info.as_ref()?.shape.first()?;
    let w = weights(g, w_v, 0, m)?;
    if c.activation.is_some() {
        return None;
    }
    let b = match input(p, 2) {
        Some(b) => bias(g, b, &x, &w, m)?,
        None => Arg::Absent,
    };
    let op = QLinearConv {
        params: c.params.clone(),
        group: c.group,
    };
    let inputs = vec![
        Arg::Value(x.value),
        Arg::Value(x.scale),
        x.zero_arg(),
        Arg::Value(w.value),
        Arg::Value(w.scale),
        w.zero_arg(),
        Arg::Value(y.scale),
        y.zero_arg(),
        b,
    ];
    Some((Arc::new(op), inputs))
}

/// MatMul (`gemm` None) or Gemm with a DQ'd activation A and DQ'd constant 2-D weights B
/// (per tensor or per output column), and for Gemm a bias C: QGemm, which saturates like
/// QuantizeLinear (QLinearMatMul's reference wraps, as ONNX's does).
fn gemm_island(
    g: &Graph,
    p: &Node,
    gemm: Option<&Gemm>,
    y: &Quantized,
) -> Option<(Arc<dyn Op>, Vec<Arg>)> {
    let a = dequantized(g, input(p, 0)?)?;
    let b_v = input(p, 1)?;
    let shape = &g.value(b_v).info.as_ref()?.shape;
    let a_rank = g.value(input(p, 0)?).info.as_ref()?.shape.len();
    let trans_b = gemm.is_some_and(|g| g.trans_b);
    if shape.len() != 2 || a_rank != 2 {
        return None;
    }
    if let Some(gm) = gemm {
        if gm.trans_a || gm.activation.is_some() || gm.alpha != 1.0 || gm.beta != 1.0 {
            return None;
        }
    }
    let (n, axis) = if trans_b {
        (shape[0], 0)
    } else {
        (shape[1], 1)
    };
    let b = weights(g, b_v, axis, n)?;
    let c = match input(p, 2) {
        Some(c) if gemm.is_some() => {
            let cs = &g.value(c).info.as_ref()?.shape;
            if cs.as_slice() != [n] && cs.as_slice() != [1, n] {
                return None;
            }
            bias(g, c, &a, &b, n)?
        }
        Some(_) => return None,
        None => Arg::Absent,
    };
    let op = QGemm {
        alpha: 1.0,
        trans_a: false,
        trans_b,
    };
    let inputs = vec![
        Arg::Value(a.value),
        Arg::Value(a.scale),
        a.zero_arg(),
        Arg::Value(b.value),
        Arg::Value(b.scale),
        b.zero_arg(),
        c,
        Arg::Value(y.scale),
        y.zero_arg(),
    ];
    Some((Arc::new(op), inputs))
}

/// Ops that only move or select values: on 8-bit data when input and output quantizations
/// agree. Their other inputs (shapes, axes) stay as they are.
fn moves_values(op: &dyn Op) -> bool {
    let any = op.as_any();
    if let Some(p) = any.downcast_ref::<Pool>() {
        return p.kind == PoolKind::Max && !p.with_indices;
    }
    if let Some(r) = any.downcast_ref::<Resize>() {
        // Nearest picks input values; interpolation would compute new ones, and a crop
        // writes its (float) extrapolation value.
        return r.mode == ResizeMode::Nearest
            && r.coordinate_transformation_mode != CoordMode::TfCropAndResize;
    }
    any.is::<Reshape>()
        || any.is::<Flatten>()
        || any.is::<Transpose>()
        || any.is::<Squeeze>()
        || any.is::<Unsqueeze>()
        || any.is::<Concat>()
}

fn passthrough(g: &Graph, p: &Node, y: &Quantized) -> Option<(Arc<dyn Op>, Vec<Arg>)> {
    if !moves_values(p.op.as_ref()) || p.outputs.len() != 1 {
        return None;
    }
    let concat = p.op.as_any().is::<Concat>();
    let mut inputs = Vec::with_capacity(p.inputs.len());
    for (slot, v) in p.inputs.iter().enumerate() {
        match v {
            None => inputs.push(Arg::Absent),
            Some(v) if slot == 0 || concat => {
                let x = dequantized(g, *v)?;
                if !x.same_params(g, y)
                    || g.value(x.value).info.as_ref()?.dtype
                        != g.value(y.value).info.as_ref()?.dtype
                {
                    return None;
                }
                inputs.push(Arg::Value(x.value));
            }
            Some(v) => inputs.push(Arg::Value(*v)),
        }
    }
    Some((p.op.clone(), inputs))
}

/// A Concat of per-tensor DQ'd 8-bit inputs (of the output's type) as QLinearConcat: each
/// input is requantized to the output's scale and zero point as DQ -> Q would.
fn concat_island(
    g: &Graph,
    p: &Node,
    c: &Concat,
    y: &Quantized,
) -> Option<(Arc<dyn Op>, Vec<Arg>)> {
    let dtype = |v: ValueId| g.value(v).info.as_ref().map(|i| i.dtype);
    let mut inputs = vec![Arg::Value(y.scale), Arg::Value(y.zero?)];
    for v in &p.inputs {
        let x = dequantized(g, (*v)?)?;
        if dtype(x.value)? != dtype(y.value)? {
            return None;
        }
        inputs.extend([
            Arg::Value(x.value),
            Arg::Value(x.scale),
            Arg::Value(x.zero?),
        ]);
    }
    Some((Arc::new(QLinearConcat { axis: c.axis }), inputs))
}

/// Whether operands of shapes `a` and `b` line up as the 8-bit binary kernels take them: one
/// shape, one a single value, or one a value per channel (`[N, C, 1...]` against `[N, C, ...]`,
/// a squeeze-and-excitation's scaling).
fn binary_shapes_ok(a: &[usize], b: &[usize]) -> bool {
    let per_channel = |full: &[usize], part: &[usize]| {
        full.len() >= 3
            && part.len() == full.len()
            && part[..2] == full[..2]
            && part[2..].iter().all(|&d| d == 1)
    };
    let numel = |s: &[usize]| s.iter().product::<usize>();
    a == b || per_channel(a, b) || per_channel(b, a) || numel(a) == 1 || numel(b) == 1
}

/// Add, Sub or Mul of two per-tensor DQ'd 8-bit operands of the output's type as
/// [`QdqBinary`].
fn binary_island(
    g: &Graph,
    kind: BinaryKind,
    a: ValueId,
    b: ValueId,
    y: &Quantized,
) -> Option<(Arc<dyn Op>, Vec<Arg>)> {
    if !QdqBinary::supports(kind) {
        return None;
    }
    let (xa, xb) = (dequantized(g, a)?, dequantized(g, b)?);
    let (ia, ib, iy) = (info(g, xa.value)?, info(g, xb.value)?, info(g, y.value)?);
    if ia.dtype != iy.dtype || ib.dtype != iy.dtype || !binary_shapes_ok(&ia.shape, &ib.shape) {
        return None;
    }
    let inputs = vec![
        Arg::Value(xa.value),
        Arg::Value(xa.scale),
        xa.zero_arg(),
        Arg::Value(xb.value),
        Arg::Value(xb.scale),
        xb.zero_arg(),
        Arg::Value(y.scale),
        y.zero_arg(),
    ];
    Some((Arc::new(QdqBinary { kind }), inputs))
}

fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    if let Some(r) = integer_to_float(g, uses, i) {
        return Some(r);
    }
    let qn = &g.nodes[i];
    let y = quantize_node(g, qn)?;
    let v = input(qn, 0)?;
    let pi = producer(g, v)?;
    if uses.single(v) != Some(i) {
        return None;
    }
    let p = &g.nodes[pi];
    let any = p.op.as_any();
    let (op, inputs) = if let Some(c) = any.downcast_ref::<Conv>() {
        conv_island(g, p, c, &y)?
    } else if any.is::<MatMul>() {
        gemm_island(g, p, None, &y)?
    } else if let Some(gm) = any.downcast_ref::<Gemm>() {
        gemm_island(g, p, Some(gm), &y)?
    } else if let Some(c) = any.downcast_ref::<Concat>() {
        passthrough(g, p, &y).or_else(|| concat_island(g, p, c, &y))?
    } else if let Some((kind, a, b)) = binary(p) {
        binary_island(g, kind, a, b, &y)?
    } else {
        passthrough(g, p, &y)?
    };
    Some(Rewrite {
        target: Some(i),
        op: Some(op),
        inputs,
        name: Some(p.name.clone()),
        remove: vec![pi],
        rewire: None,
    })
}

/// `MatMulInteger -> Cast(f32) -> Mul(s)` with `s` one f32 value (constant or computed), and
/// an `Add` of a constant f32 bias of one value per column after it when there is one, at
/// the last of those nodes: MatMulIntegerToFloat with `s` as A's scale, 1 as B's.
fn integer_to_float(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let last = &g.nodes[i];
    let single = |v: ValueId, reader: usize| uses.single(v) == Some(reader);
    let one_f32 = |v: ValueId| {
        info(g, v).is_some_and(|t| t.dtype == DType::F32 && t.shape.iter().product::<usize>() == 1)
    };
    // The Mul, and the Add after it when `last` is that Add.
    let (mul_i, bias) = match binary(last)? {
        (BinaryKind::Add, a, b) => {
            let (scaled, bias) = if producer(g, a).is_some() && constant(g, b).is_some() {
                (a, b)
            } else {
                (b, a)
            };
            let m = producer(g, scaled)?;
            if !single(scaled, i) || binary(&g.nodes[m])?.0 != BinaryKind::Mul {
                return None;
            }
            (m, Some(bias))
        }
        (BinaryKind::Mul, _, _) => {
            // A bias Add after it takes the whole chain, when it can.
            let reader = uses.single(*last.outputs.first()?);
            if reader.is_some_and(|r| {
                matches!(binary(&g.nodes[r]), Some((BinaryKind::Add, ..)))
                    && integer_to_float(g, uses, r).is_some()
            }) {
                return None;
            }
            (i, None)
        }
        _ => return None,
    };
    let (_, x, y) = binary(&g.nodes[mul_i])?;
    let (cast_out, scale) = [(x, y), (y, x)].into_iter().find(|&(c, s)| {
        producer(g, c).is_some_and(|p| g.nodes[p].op.as_any().is::<Cast>()) && one_f32(s)
    })?;
    let cast_i = producer(g, cast_out)?;
    let cast = g.nodes[cast_i].op.as_any().downcast_ref::<Cast>()?;
    let product = input(&g.nodes[cast_i], 0)?;
    let mm_i = producer(g, product)?;
    let mm = &g.nodes[mm_i];
    if cast.to != DType::F32
        || !mm.op.as_any().is::<MatMulInteger>()
        || !single(cast_out, mul_i)
        || !single(product, cast_i)
    {
        return None;
    }
    // B's columns, for the bias's shape.
    let n = *info(g, input(mm, 1)?)?.shape.last()?;
    let bias_arg = match bias {
        Some(b) => {
            let t = constant(g, b)?;
            if t.dtype() != DType::F32 || t.shape() != [n] {
                return None;
            }
            Arg::Value(b)
        }
        None => Arg::Absent,
    };
    let arg = |k: usize| input(mm, k).map_or(Arg::Absent, Arg::Value);
    let inputs = vec![
        arg(0),
        arg(1),
        Arg::Value(scale),
        Arg::Const("b_scale", Tensor::scalar(1.0f32)),
        arg(2),
        arg(3),
        bias_arg,
    ];
    let mut remove = vec![mm_i, cast_i];
    if mul_i != i {
        remove.push(mul_i);
    }
    Some(Rewrite {
        target: Some(i),
        op: Some(Arc::new(MatMulIntegerToFloat)),
        inputs,
        name: Some(mm.name.clone()),
        remove,
        rewire: None,
    })
}

/// Evaluates the DequantizeLinear nodes whose inputs are all constants.
fn fold_constant_dequantize(g: &mut Graph) -> Result<bool> {
    let mut results: Vec<(usize, Tensor)> = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if !n.op.as_any().is::<DequantizeLinear>() || n.outputs.len() != 1 {
            continue;
        }
        let args: Option<Vec<Option<&Tensor>>> = n
            .inputs
            .iter()
            .map(|v| match v {
                None => Some(None),
                Some(v) => constant(g, *v).map(Some),
            })
            .collect();
        let Some(args) = args else { continue };
        let t = n.op.eval(&args).map_err(|e| node_error(n, e))?.remove(0);
        results.push((i, t));
    }
    if results.is_empty() {
        return Ok(false);
    }
    let mut folded = vec![false; g.nodes.len()];
    for (i, t) in results {
        folded[i] = true;
        let o = g.nodes[i].outputs[0];
        let v = g.value_mut(o);
        v.constant = Some(t);
        v.producer = None;
    }
    let mut i = 0;
    g.nodes.retain(|_| {
        i += 1;
        !folded[i - 1]
    });
    g.sort()?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::testutil::data;
    use crate::passes::{default_pipeline, optimize};
    use crate::plan::Plan;
    use crate::TensorInfo;

    fn q(g: &mut Graph, name: &str, v: ValueId, scale: f32, zero: i8) -> ValueId {
        let s = g.add_constant(format!("{name}.s"), Tensor::scalar(scale));
        let z = g.add_constant(format!("{name}.z"), Tensor::scalar(zero));
        let op = Arc::new(QuantizeLinear::default());
        g.add_op(format!("{name}.q"), op, vec![Some(v), Some(s), Some(z)], 1)
            .unwrap()[0]
    }

    fn dq(
        g: &mut Graph,
        name: &str,
        v: ValueId,
        scale: Tensor,
        zero: Tensor,
        axis: i64,
    ) -> ValueId {
        let s = g.add_constant(format!("{name}.ds"), scale);
        let z = g.add_constant(format!("{name}.dz"), zero);
        let op = Arc::new(DequantizeLinear {
            axis,
            ..Default::default()
        });
        g.add_op(format!("{name}.dq"), op, vec![Some(v), Some(s), Some(z)], 1)
            .unwrap()[0]
    }

    /// x -> Q/DQ -> Conv (per-channel s8 weights, i32 bias) -> Q/DQ -> MaxPool -> Q/DQ ->
    /// Flatten -> Q/DQ -> MatMul (per-column weights) -> Q/DQ.
    fn qdq_graph() -> Graph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let (xs, ys, ms) = (0.02f32, 0.05f32, 0.1f32);
        let xq = q(&mut g, "x", x, xs, 3);
        let xd = dq(&mut g, "x", xq, Tensor::scalar(xs), Tensor::scalar(3i8), 1);
        let w: Vec<i8> = (0..4 * 2 * 9).map(|i| ((i * 37) % 255) as i8).collect();
        let wq = g.add_constant("w", Tensor::from_vec(&[4, 2, 3, 3], w).unwrap());
        let ws = Tensor::from_vec(&[4], vec![0.01f32, 0.02, 0.005, 0.03]).unwrap();
        let wd = dq(
            &mut g,
            "w",
            wq,
            ws.clone(),
            Tensor::from_vec(&[4], vec![0i8; 4]).unwrap(),
            0,
        );
        let bq = g.add_constant(
            "b",
            Tensor::from_vec(&[4], vec![100i32, -200, 3000, 0]).unwrap(),
        );
        let bs: Vec<f32> = ws
            .as_slice::<f32>()
            .unwrap()
            .iter()
            .map(|w| w * xs)
            .collect();
        let bd = dq(
            &mut g,
            "b",
            bq,
            Tensor::from_vec(&[4], bs).unwrap(),
            Tensor::from_vec(&[4], vec![0i32; 4]).unwrap(),
            0,
        );
        let conv = Arc::new(Conv::default());
        let c = g
            .add_op("conv", conv, vec![Some(xd), Some(wd), Some(bd)], 1)
            .unwrap()[0];
        let cq = q(&mut g, "c", c, ys, -10);
        let cd = dq(
            &mut g,
            "c",
            cq,
            Tensor::scalar(ys),
            Tensor::scalar(-10i8),
            1,
        );
        let pool = Pool {
            kind: PoolKind::Max,
            kernel_shape: vec![2, 2],
            strides: vec![2, 2],
            ..Default::default()
        };
        let p = g.add_op("pool", Arc::new(pool), vec![Some(cd)], 1).unwrap()[0];
        let pq = q(&mut g, "p", p, ys, -10);
        let pd = dq(
            &mut g,
            "p",
            pq,
            Tensor::scalar(ys),
            Tensor::scalar(-10i8),
            1,
        );
        let f = g
            .add_op("flat", Arc::new(Flatten { axis: 1 }), vec![Some(pd)], 1)
            .unwrap()[0];
        let fq = q(&mut g, "f", f, ys, -10);
        let fd = dq(
            &mut g,
            "f",
            fq,
            Tensor::scalar(ys),
            Tensor::scalar(-10i8),
            1,
        );
        let mw: Vec<i8> = (0..36 * 5).map(|i| ((i * 53) % 251) as i8).collect();
        let mq = g.add_constant("mw", Tensor::from_vec(&[36, 5], mw).unwrap());
        let mws = Tensor::from_vec(&[5], vec![0.01f32, 0.02, 0.03, 0.01, 0.002]).unwrap();
        let md = dq(
            &mut g,
            "mw",
            mq,
            mws,
            Tensor::from_vec(&[5], vec![0i8; 5]).unwrap(),
            1,
        );
        let mm = g
            .add_op("mm", Arc::new(MatMul), vec![Some(fd), Some(md)], 1)
            .unwrap()[0];
        let yq = q(&mut g, "y", mm, ms, 0);
        let y = dq(&mut g, "y", yq, Tensor::scalar(ms), Tensor::scalar(0i8), 1);
        g.outputs.push(y);
        g
    }

    /// The graph after the default pipeline less `disabled`, and its outputs on `x`.
    fn run_all(g: &Graph, x: &Tensor, disabled: &[String]) -> (Graph, Vec<Tensor>) {
        let mut g = g.clone();
        let dynamic =
            optimize(&mut g, &[TensorInfo::of(x)], &default_pipeline(), disabled).unwrap();
        let ys = Plan::build(&g, &dynamic, None).unwrap().run(&[x]).unwrap();
        (g, ys)
    }

    fn run(g: &Graph, x: &Tensor, disabled: &[String]) -> (Graph, Tensor) {
        let (g, mut ys) = run_all(g, x, disabled);
        (g, ys.remove(0))
    }

    /// The outputs on `x` with every pass disabled (the float simulation), then the graph
    /// after every pass and its outputs.
    fn plain_and_optimized(g: &Graph, x: &Tensor) -> (Vec<Tensor>, Graph, Vec<Tensor>) {
        let all: Vec<String> = default_pipeline()
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        let (_, want) = run_all(g, x, &all);
        let (opt, got) = run_all(g, x, &[]);
        (want, opt, got)
    }

    #[test]
    fn qdq_islands_become_integer_ops_with_the_same_results() {
        let g = qdq_graph();
        let x = data(&[1, 2, 8, 8], 2.0);
        let (want, opt, got) = plain_and_optimized(&g, &x);
        let (want, got) = (&want[0], &got[0]);
        let ops: Vec<&str> = opt.nodes.iter().map(|n| n.op.name()).collect();
        assert_eq!(
            ops,
            [
                "QuantizeLinear",
                "QLinearConv",
                "MaxPool",
                "Flatten",
                "QGemm",
                "DequantizeLinear"
            ],
            "{}",
            opt.to_text()
        );
        // The float simulation and the integer ops agree within one output step (a product
        // that lands on a rounding tie in f32 may round the other way).
        let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
        assert!(
            g.iter().zip(&w).all(|(a, b)| (a - b).abs() <= 0.1 + 1e-6),
            "{g:?} vs {w:?}"
        );
        assert!(
            g.iter().zip(&w).filter(|(a, b)| a != b).count() <= 1,
            "{g:?} vs {w:?}"
        );
        assert!(w.iter().any(|&v| v != 0.0));
    }

    #[test]
    fn islands_with_other_scales_or_float_readers_stay_float() {
        // A Flatten between different scales, and a Conv whose output is also a graph output.
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let xq = q(&mut g, "x", x, 0.1, 0);
        let xd = dq(
            &mut g,
            "x",
            xq,
            Tensor::scalar(0.1f32),
            Tensor::scalar(0i8),
            1,
        );
        let f = g
            .add_op("flat", Arc::new(Flatten { axis: 1 }), vec![Some(xd)], 1)
            .unwrap()[0];
        let fq = q(&mut g, "f", f, 0.2, 0);
        let y = dq(
            &mut g,
            "f",
            fq,
            Tensor::scalar(0.2f32),
            Tensor::scalar(0i8),
            1,
        );
        g.outputs.push(y);
        let x = data(&[1, 2, 3, 3], 2.0);
        let (opt, _) = run(&g, &x, &[]);
        let ops: Vec<&str> = opt.nodes.iter().map(|n| n.op.name()).collect();
        assert!(
            ops.contains(&"Flatten")
                && ops.iter().filter(|o| **o == "DequantizeLinear").count() == 2,
            "{ops:?}"
        );
    }

    /// Two inputs quantized with other scales and zero points than the Concat's output (as
    /// squeezenet1_1's QDQ fire modules): QLinearConcat, with exactly the float simulation's
    /// values, over values spread across both inputs' ranges.
    #[test]
    fn concat_of_other_scales_becomes_qlinear_concat() {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let parts: Vec<ValueId> = [(0.03f32, 5i8), (0.011, -7)]
            .iter()
            .enumerate()
            .map(|(k, &(s, z))| {
                let name = format!("in{k}");
                let xq = q(&mut g, &name, x, s, z);
                dq(&mut g, &name, xq, Tensor::scalar(s), Tensor::scalar(z), 1)
            })
            .collect();
        let cat = Arc::new(Concat { axis: 1 });
        let c = g
            .add_op("cat", cat, parts.into_iter().map(Some).collect(), 1)
            .unwrap()[0];
        let cq = q(&mut g, "cat", c, 0.02, -3);
        let y = dq(
            &mut g,
            "cat",
            cq,
            Tensor::scalar(0.02f32),
            Tensor::scalar(-3i8),
            1,
        );
        g.outputs.push(y);
        let x = data(&[1, 2, 7, 9], 3.0);
        let (want, opt, got) = plain_and_optimized(&g, &x);
        let (want, got) = (&want[0], &got[0]);
        let ops: Vec<&str> = opt.nodes.iter().map(|n| n.op.name()).collect();
        assert!(ops.contains(&"QLinearConcat"), "{}", opt.to_text());
        assert!(!ops.contains(&"Concat"), "{ops:?}");
        let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
        assert_eq!(g, w);
        assert!(w.iter().any(|&v| v > 1.0) && w.iter().any(|&v| v < -1.0));
    }

    /// A residual Add, a squeeze-and-excitation's per-channel Mul and a Sub between DQ and Q
    /// (other scales and zero points on each side), and a nearest Resize between equal ones:
    /// QdqBinary and an 8-bit Resize, with exactly the float simulation's values.
    #[test]
    fn binary_islands_become_qdq_binary_and_nearest_resize_stays_8bit() {
        use crate::ops::elementwise::binary::Binary;
        use crate::ops::nn::resize::{CoordMode, NearestMode, Resize};
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let se = g.add_value("se");
        g.inputs.push(se);
        let quantized = |g: &mut Graph, name: &str, v: ValueId, s: f32, z: i8| {
            let vq = q(g, name, v, s, z);
            dq(g, name, vq, Tensor::scalar(s), Tensor::scalar(z), 1)
        };
        let xd = quantized(&mut g, "x", x, 0.03, 5);
        let sd = quantized(&mut g, "se", se, 0.011, -7);
        let bin = |g: &mut Graph, name: &str, kind, a, b| {
            let op = Arc::new(Binary {
                kind,
                legacy_axis: None,
            });
            g.add_op(name, op, vec![Some(a), Some(b)], 1).unwrap()[0]
        };
        let m = bin(&mut g, "mul", BinaryKind::Mul, xd, sd);
        let md = quantized(&mut g, "m", m, 0.02, -3);
        let a = bin(&mut g, "add", BinaryKind::Add, xd, md);
        let ad = quantized(&mut g, "a", a, 0.04, 2);
        let d = bin(&mut g, "sub", BinaryKind::Sub, ad, xd);
        let dd = quantized(&mut g, "d", d, 0.025, 0);
        let sizes = g.add_constant(
            "sizes",
            Tensor::from_vec(&[4], vec![1i64, 3, 14, 18]).unwrap(),
        );
        let resize = Arc::new(Resize {
            coordinate_transformation_mode: CoordMode::Asymmetric,
            nearest_mode: NearestMode::Floor,
            ..Resize::default()
        });
        let r = g
            .add_op("up", resize, vec![Some(dd), None, None, Some(sizes)], 1)
            .unwrap()[0];
        let rq = q(&mut g, "r", r, 0.025, 0);
        let y = dq(
            &mut g,
            "r",
            rq,
            Tensor::scalar(0.025f32),
            Tensor::scalar(0i8),
            1,
        );
        g.outputs.push(y);
        let xv = data(&[1, 3, 7, 9], 3.0);
        let sv = data(&[1, 3, 1, 1], 2.0);
        let types = [TensorInfo::of(&xv), TensorInfo::of(&sv)];
        let run = |disabled: &[String]| {
            let mut g = g.clone();
            let dynamic = optimize(&mut g, &types, &default_pipeline(), disabled).unwrap();
            let ys = Plan::build(&g, &dynamic, None)
                .unwrap()
                .run(&[&xv, &sv])
                .unwrap();
            (g, ys)
        };
        let all: Vec<String> = default_pipeline()
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        let (_, want) = run(&all);
        let (opt, got) = run(&[]);
        let ops: Vec<&str> = opt.nodes.iter().map(|n| n.op.name()).collect();
        assert_eq!(
            ops.iter().filter(|o| **o == "QdqBinary").count(),
            3,
            "{ops:?}"
        );
        assert!(
            !ops.iter().any(|o| ["Add", "Sub", "Mul"].contains(o)),
            "{ops:?}"
        );
        // The Resize reads the 8-bit Sub and only the graph output is dequantized.
        assert!(ops.contains(&"Resize"), "{ops:?}");
        assert_eq!(
            ops.iter().filter(|o| **o == "DequantizeLinear").count(),
            1,
            "{ops:?}"
        );
        let (g, w) = (got[0].to_f64_vec(), want[0].to_f64_vec());
        assert_eq!(g, w);
        assert!(w.iter().any(|&v| v > 1.0) && w.iter().any(|&v| v < -1.0));
    }

    /// onnxruntime's dynamic quantization of a MatMul: DynamicQuantizeLinear, MatMulInteger,
    /// Cast, Mul by the scales' product, Add of a bias; the same chain without the Add, and
    /// one whose Cast is also read elsewhere (left alone).
    #[test]
    fn dynamic_matmul_chains_become_matmul_integer_to_float() {
        use crate::ops::elementwise::binary::Binary;
        use crate::ops::quant::DynamicQuantizeLinear;
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let d = g
            .add_op("dq", Arc::new(DynamicQuantizeLinear), vec![Some(x)], 3)
            .unwrap();
        let (xq, xs, xz) = (d[0], d[1], d[2]);
        let bin = |kind| {
            Arc::new(Binary {
                kind,
                legacy_axis: None,
            })
        };
        for (t, with_bias) in [(0, true), (1, false), (2, true)] {
            let w: Vec<i8> = (0..6 * 5).map(|i| ((i * 37 + t) % 255) as i8).collect();
            let wq = g.add_constant(format!("w{t}"), Tensor::from_vec(&[6, 5], w).unwrap());
            let wz = g.add_constant(format!("wz{t}"), Tensor::scalar(3i8));
            let ws = g.add_constant(format!("ws{t}"), Tensor::scalar(0.02f32));
            let s = g
                .add_op(
                    format!("s{t}"),
                    bin(BinaryKind::Mul),
                    vec![Some(xs), Some(ws)],
                    1,
                )
                .unwrap()[0];
            let inputs = vec![Some(xq), Some(wq), Some(xz), Some(wz)];
            let mm = g
                .add_op(format!("mm{t}"), Arc::new(MatMulInteger), inputs, 1)
                .unwrap()[0];
            let c = g
                .add_op(
                    format!("c{t}"),
                    Arc::new(Cast::new(DType::F32)),
                    vec![Some(mm)],
                    1,
                )
                .unwrap()[0];
            let mut y = g
                .add_op(
                    format!("m{t}"),
                    bin(BinaryKind::Mul),
                    vec![Some(c), Some(s)],
                    1,
                )
                .unwrap()[0];
            if with_bias {
                let b = g.add_constant(
                    format!("b{t}"),
                    Tensor::from_vec(&[5], vec![0.5f32, -1.0, 0.25, 2.0, 0.0]).unwrap(),
                );
                y = g
                    .add_op(
                        format!("a{t}"),
                        bin(BinaryKind::Add),
                        vec![Some(b), Some(y)],
                        1,
                    )
                    .unwrap()[0];
            }
            g.outputs.push(y);
            if t == 2 {
                // The Cast's value is a graph output too: the chain must stay.
                g.outputs.push(c);
            }
        }
        let x_val = data(&[3, 6], 1.5);
        let (want, opt, got) = plain_and_optimized(&g, &x_val);
        let ops: Vec<&str> = opt.nodes.iter().map(|n| n.op.name()).collect();
        let fused = ops.iter().filter(|o| **o == "MatMulIntegerToFloat").count();
        assert_eq!(fused, 2, "{}", opt.to_text());
        // The first chain's bias Add is inside its MatMulIntegerToFloat; the third's stays.
        let adds = ops.iter().filter(|o| **o == "Add").count();
        assert_eq!(adds, 1, "{}", opt.to_text());
        assert_eq!(
            ops.iter().filter(|o| **o == "MatMulInteger").count(),
            1,
            "{ops:?}"
        );
        for (g, w) in got.iter().zip(&want) {
            let (g, w) = (g.to_f64_vec(), w.to_f64_vec());
            assert!(w.iter().any(|&v| v != 0.0));
            for (a, b) in g.iter().zip(&w) {
                assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{g:?} vs {w:?}");
            }
        }
    }
}
