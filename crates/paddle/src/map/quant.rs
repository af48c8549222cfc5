//! Mapping functions for Paddle's quantization ops: `quantize_linear` / `dequantize_linear`
//! (the ONNX-like form of `onnx_format=True` programs) and the older `fake_*` ops.
//!
//! Paddle's conventions, from its kernels (`fake_quantize_functor`, `quantize_linear_kernel`):
//!
//! - A scale is the **absolute maximum** of the range, not the step: with
//!   `bin_cnt = 2^(bit_length-1) - 1` (or the `qmax` attribute where a program has it),
//!   `q = round(x * bin_cnt / scale)` and `x = q * scale / bin_cnt`. The core ops take the step,
//!   `scale / bin_cnt`, computed here when the scale is a parameter and by a node otherwise.
//! - `round_type` 0 (the default) rounds halves to even and clips to
//!   `[-bin_cnt - 1, bin_cnt]`; `round_type` 1 first clips `x` to `[-scale, scale]`, then rounds
//!   halves away from zero (`std::round`).
//! - A scale at or below 1e-30 is taken as `scale + 1e-6` when quantizing (Paddle's
//!   `inverse()`); dequantizing uses it as is.
//! - Quantized values are floats holding integers; ZeroPoint inputs are read by no kernel.
//! - `only_observer` makes `quantize_linear` / `dequantize_linear` copy their input.
//! - The range and moving-average forms quantize with their stored `InScale`, as an inference
//!   program (`is_test`) does and as Paddle Inference's and Paddle Lite's quantization passes
//!   read them; the training-time update of the scale from the data is not modelled. The
//!   `abs_max` forms measure the scale from the data, at run time.
//!
//! What they become: a quantize-dequantize pair (`quantize_linear` followed by
//! `dequantize_linear`, `fake_quantize_dequantize_*`) maps onto QuantizeLinear and
//! DequantizeLinear on int8 (int16 past 8 bits) when the rounding and range are QuantizeLinear's
//! (`round_type` 0, 8 or 16 bits); quantized weights (int8 parameters, or float parameters
//! holding integers) feed DequantizeLinear directly. Otherwise, and where Paddle hands the
//! integer-valued floats to float ops (`fake_quantize_*` before a convolution of the legacy
//! form), the same arithmetic runs in float: multiply by `bin_cnt * (1 / scale)`, round, clip.

use super::{invalid, unsupported, Ctx, MapError, MapFn, MapResult};
use ferrolite_core::ops::elementwise::{
    Binary, BinaryKind, Cast, Clip, Compare, CompareKind, Unary, UnaryKind, Variadic, VariadicKind,
    Where,
};
use ferrolite_core::ops::nn::reduce::{Reduce, ReduceKind};
use ferrolite_core::ops::quant::{int_range, DequantizeLinear, QuantizeLinear};
use ferrolite_core::{DType, Tensor, ValueId};

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("quantize_linear", quantize_linear),
    ("dequantize_linear", dequantize_linear),
    ("fake_quantize_abs_max", fake_quantize_abs_max),
    ("fake_quantize_range_abs_max", fake_quantize_with_in_scale),
    (
        "fake_quantize_moving_average_abs_max",
        fake_quantize_with_in_scale,
    ),
    (
        "fake_quantize_dequantize_abs_max",
        fake_quantize_dequantize_abs_max,
    ),
    (
        "fake_quantize_dequantize_moving_average_abs_max",
        fake_quantize_dequantize_moving_average_abs_max,
    ),
    (
        "fake_channel_wise_quantize_abs_max",
        fake_channel_wise_quantize_abs_max,
    ),
    (
        "fake_channel_wise_quantize_dequantize_abs_max",
        fake_channel_wise_quantize_dequantize_abs_max,
    ),
    ("fake_dequantize_max_abs", fake_dequantize_max_abs),
    (
        "fake_channel_wise_dequantize_max_abs",
        fake_channel_wise_dequantize_max_abs,
    ),
];

/// Paddle's `inverse()` guard: a scale at or below this is increased by [`SCALE_EPS`].
const TINY_SCALE: f32 = 1e-30;
const SCALE_EPS: f32 = 1e-6;
/// The largest float below 0.5: `floor(|t| + HALF_BELOW)` rounds halves away from zero with no
/// double rounding (Eigen's `round`).
const HALF_BELOW: f32 = f32::from_bits(0x3eff_ffff);

/// A scale operand: the values of a parameter, or a value computed at run time.
#[derive(Clone, Debug)]
enum Scale {
    Const(Vec<f32>),
    Value(ValueId),
}

/// How a scale lines up with the data: one for all, or one per index of `axis` of a tensor of
/// rank `rank`.
#[derive(Clone, Copy, Debug)]
struct Along {
    axis: Option<usize>,
    rank: usize,
}

impl Along {
    /// The shape that broadcasts a scale of `n` entries onto the data.
    fn shape(self, n: usize) -> Vec<i64> {
        match self.axis {
            None => vec![],
            Some(a) => {
                let mut s = vec![n as i64];
                s.extend(std::iter::repeat_n(1, self.rank - a - 1));
                s
            }
        }
    }

    /// The `axis` attribute of QuantizeLinear / DequantizeLinear.
    fn core_axis(self) -> i64 {
        self.axis.map_or(1, |a| a as i64)
    }
}

/// `2^(bits-1) - 1` for a bit length Paddle accepts (2 to 16 here: 1 bit has no positive
/// level).
fn levels(bits: i64, what: &str) -> Result<f64, MapError> {
    if !(2..=16).contains(&bits) {
        return Err(unsupported(format!(
            "{what} {bits}: 2 to 16 bits are supported"
        )));
    }
    Ok(((1i64 << (bits - 1)) - 1) as f64)
}

/// The quantization attributes shared by the ops.
#[derive(Clone, Copy, Debug)]
struct QuantAttrs {
    /// `bin_cnt`: the largest level.
    bin: f64,
    bits: i64,
    round_type: i64,
}

impl QuantAttrs {
    fn read(c: &Ctx) -> Result<QuantAttrs, MapError> {
        let bits = c.int("bit_length", 8)?;
        let mut bin = levels(bits, "bit_length")?;
        // Paddle 3 programs may carry the range itself; the kernels use qmax as bin_cnt.
        if let Some(q) = c.int_opt("qmax")? {
            if q < 1 || q as f64 > bin {
                return Err(unsupported(format!(
                    "qmax {q} with bit_length {bits}: 1 to {bin} is supported"
                )));
            }
            bin = q as f64;
        }
        let round_type = c.int("round_type", 0)?;
        if !matches!(round_type, 0 | 1) {
            return Err(invalid(format!(
                "round_type must be 0 or 1, got {round_type}"
            )));
        }
        Ok(QuantAttrs {
            bin,
            bits,
            round_type,
        })
    }

    /// The integer type that holds the levels.
    fn container(self) -> DType {
        if self.bits <= 8 {
            DType::I8
        } else {
            DType::I16
        }
    }

    /// Whether QuantizeLinear to [`Self::container`] is Paddle's quantization: halves to even,
    /// and a range of exactly `[-bin_cnt - 1, bin_cnt]`.
    fn is_quantize_linear(self) -> bool {
        self.round_type == 0 && int_range(self.container()) == Some((-self.bin - 1.0, self.bin))
    }
}

// ---------------------------------------------------------------------------------------------
// operands

/// The scale of input `slot`: its values when it is a parameter (checked against the data's
/// extent along the axis), the value otherwise.
fn scale_input(
    c: &Ctx,
    slot: &str,
    along: Along,
    x_dims: Option<&[i64]>,
) -> Result<Scale, MapError> {
    let v = c.input(slot)?;
    match c.constant(v) {
        Some(t) => {
            if !t.dtype().is_float() {
                return Err(invalid(format!(
                    "input '{slot}' is {}, expected a float scale",
                    t.dtype()
                )));
            }
            let values: Vec<f32> = t.to_f64_vec().iter().map(|&s| s as f32).collect();
            check_scale_len(values.len(), slot, along, x_dims)?;
            Ok(Scale::Const(values))
        }
        None => Ok(Scale::Value(v)),
    }
}

fn check_scale_len(n: usize, slot: &str, along: Along, x_dims: Option<&[i64]>) -> MapResult {
    match along.axis {
        None if n != 1 => Err(invalid(format!(
            "input '{slot}' has {n} values, expected 1 (quantization per tensor)"
        ))),
        Some(a) => match x_dims.and_then(|d| d.get(a)) {
            Some(&d) if d >= 0 && d as usize != n && n != 1 => Err(invalid(format!(
                "input '{slot}' has {n} values, expected {d} (one per index of axis {a})"
            ))),
            _ => Ok(()),
        },
        None => Ok(()),
    }
}

/// The quantization axis: `quant_axis` (-1: per tensor), checked against the rank of X.
fn quant_along(c: &Ctx, attr: &str, default: i64) -> Result<Along, MapError> {
    match c.int(attr, default)? {
        -1 => per_tensor(),
        axis => along_at(axis, c.in_rank("X")?, attr),
    }
}

fn along_at(axis: i64, rank: usize, attr: &str) -> Result<Along, MapError> {
    let axis = match axis {
        -1 => None,
        a if a >= 0 && (a as usize) < rank => Some(a as usize),
        a => {
            return Err(invalid(format!(
                "{attr} {a} is out of range for an input of rank {rank}"
            )))
        }
    };
    Ok(Along { axis, rank })
}

fn f32_const(c: &mut Ctx, values: Vec<f32>, shape: &[i64]) -> Result<ValueId, MapError> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let t = Tensor::from_vec(&dims, values).map_err(|e| invalid(e.to_string()))?;
    Ok(c.konst(t))
}

fn f32_scalar(c: &mut Ctx, v: f32) -> Result<ValueId, MapError> {
    f32_const(c, vec![v], &[])
}

fn binary(c: &mut Ctx, kind: BinaryKind, a: ValueId, b: ValueId) -> Result<ValueId, MapError> {
    c.add(Binary::new(kind), &[a, b])
}

fn unary(c: &mut Ctx, kind: UnaryKind, x: ValueId) -> Result<ValueId, MapError> {
    c.add(Unary { kind }, &[x])
}

/// A runtime scale reshaped to broadcast onto the data: a scalar, or `[n, 1, ...]`.
fn runtime_broadcast(c: &mut Ctx, s: ValueId, along: Along) -> Result<ValueId, MapError> {
    match along.axis {
        None => c.reshape_to(s, &[]),
        Some(_) => {
            let mut shape = along.shape(0);
            shape[0] = -1;
            c.reshape_to(s, &shape)
        }
    }
}

/// Paddle's quantizing scale: `scale + 1e-6` where `scale <= 1e-30`.
fn guarded(s: f32) -> f32 {
    if s <= TINY_SCALE {
        s + SCALE_EPS
    } else {
        s
    }
}

/// The step of QuantizeLinear (`guard`: Paddle's quantizing scale) or DequantizeLinear,
/// `scale / bin_cnt`, shaped `[n]` per axis and `[1]` per tensor (the core ops' layout).
fn step(c: &mut Ctx, s: &Scale, bin: f64, guard: bool) -> Result<ValueId, MapError> {
    match s {
        Scale::Const(v) => {
            let steps = v
                .iter()
                .map(|&s| (if guard { guarded(s) } else { s }) / bin as f32)
                .collect::<Vec<f32>>();
            let n = steps.len() as i64;
            f32_const(c, steps, &[n])
        }
        Scale::Value(v) => {
            let s = if guard { guard_runtime(c, *v)? } else { *v };
            let b = f32_scalar(c, bin as f32)?;
            binary(c, BinaryKind::Div, s, b)
        }
    }
}

/// `Where(s <= 1e-30, s + 1e-6, s)`.
fn guard_runtime(c: &mut Ctx, s: ValueId) -> Result<ValueId, MapError> {
    let tiny = f32_scalar(c, TINY_SCALE)?;
    let eps = f32_scalar(c, SCALE_EPS)?;
    let small = c.add(
        Compare {
            kind: CompareKind::LessOrEqual,
        },
        &[s, tiny],
    )?;
    let bumped = binary(c, BinaryKind::Add, s, eps)?;
    c.add(Where, &[small, bumped, s])
}

/// `x` multiplied by a per-tensor or per-axis factor (constant values, or a runtime value of
/// the scale's shape).
fn scale_by(c: &mut Ctx, x: ValueId, factor: &Scale, along: Along) -> Result<ValueId, MapError> {
    let f = match factor {
        Scale::Const(v) => {
            let shape = along.shape(v.len());
            f32_const(c, v.clone(), &shape)?
        }
        Scale::Value(v) => runtime_broadcast(c, *v, along)?,
    };
    binary(c, BinaryKind::Mul, x, f)
}

// ---------------------------------------------------------------------------------------------
// the arithmetic

/// Paddle's fake quantization in float: integer-valued floats in `[-bin_cnt - 1, bin_cnt]`
/// (round_type 0) or `[-bin_cnt, bin_cnt]` (round_type 1), computed as Paddle does:
/// `t = (bin_cnt * (1 / scale)) * x`, then rounding.
fn quantize_float(
    c: &mut Ctx,
    x: ValueId,
    s: &Scale,
    along: Along,
    q: QuantAttrs,
) -> Result<ValueId, MapError> {
    let bin = q.bin as f32;
    // m = bin_cnt * inverse(scale), in f32 like the kernels.
    let m = match s {
        Scale::Const(v) => Scale::Const(v.iter().map(|&s| bin * (1.0 / guarded(s))).collect()),
        Scale::Value(v) => {
            let g = guard_runtime(c, *v)?;
            let one = f32_scalar(c, 1.0)?;
            let inv = binary(c, BinaryKind::Div, one, g)?;
            let b = f32_scalar(c, bin)?;
            Scale::Value(binary(c, BinaryKind::Mul, b, inv)?)
        }
    };
    if q.round_type == 0 {
        let t = scale_by(c, x, &m, along)?;
        let r = unary(c, UnaryKind::Round, t)?;
        return c.add(
            Clip {
                min: Some(-bin - 1.0),
                max: Some(bin),
            },
            &[r],
        );
    }
    // round_type 1: clip to [-scale, scale], then round halves away from zero.
    let clipped = match s {
        Scale::Const(v) if v.len() == 1 => c.add(
            Clip {
                min: Some(-v[0]),
                max: Some(v[0]),
            },
            &[x],
        )?,
        _ => {
            let (hi, lo) = match s {
                Scale::Const(v) => {
                    let shape = along.shape(v.len());
                    let hi = f32_const(c, v.clone(), &shape)?;
                    let lo = f32_const(c, v.iter().map(|&s| -s).collect(), &shape)?;
                    (hi, lo)
                }
                Scale::Value(v) => {
                    let hi = runtime_broadcast(c, *v, along)?;
                    let lo = unary(c, UnaryKind::Neg, hi)?;
                    (hi, lo)
                }
            };
            let below = c.add(
                Variadic {
                    kind: VariadicKind::Min,
                },
                &[x, hi],
            )?;
            c.add(
                Variadic {
                    kind: VariadicKind::Max,
                },
                &[below, lo],
            )?
        }
    };
    let t = scale_by(c, clipped, &m, along)?;
    let a = unary(c, UnaryKind::Abs, t)?;
    let h = f32_scalar(c, HALF_BELOW)?;
    let a = binary(c, BinaryKind::Add, a, h)?;
    let a = unary(c, UnaryKind::Floor, a)?;
    let sign = unary(c, UnaryKind::Sign, t)?;
    binary(c, BinaryKind::Mul, a, sign)
}

/// The levels of `x` as integers of [`QuantAttrs::container`].
fn quantize_int(
    c: &mut Ctx,
    x: ValueId,
    s: &Scale,
    along: Along,
    q: QuantAttrs,
) -> Result<ValueId, MapError> {
    if q.is_quantize_linear() {
        let step = step(c, s, q.bin, true)?;
        // A zero point of zero, as the QDQ form states the 8-bit type.
        let zero = Tensor::zeros(q.container(), &[]).map_err(|e| invalid(e.to_string()))?;
        let zero = c.konst(zero);
        return c.add(
            QuantizeLinear {
                axis: along.core_axis(),
                output_dtype: Some(q.container()),
                ..Default::default()
            },
            &[x, step, zero],
        );
    }
    let f = quantize_float(c, x, s, along, q)?;
    c.add(Cast::new(q.container()), &[f])
}

/// `x` (levels) back to real values, `x * scale / bin_cnt`: DequantizeLinear when the levels
/// are integers (a quantizing op's output, an int8 parameter, a float parameter holding
/// integers), a multiplication by the step otherwise.
fn dequantize(
    c: &mut Ctx,
    x: ValueId,
    s: &Scale,
    along: Along,
    bin: f64,
    container: DType,
) -> Result<ValueId, MapError> {
    if let Some(xi) = integer_levels(c, x, container)? {
        let step = step(c, s, bin, false)?;
        // Output: f32, the step's type.
        return c.add(
            DequantizeLinear {
                axis: along.core_axis(),
                ..Default::default()
            },
            &[xi, step],
        );
    }
    let f = match s {
        Scale::Const(v) => Scale::Const(v.iter().map(|&s| s / bin as f32).collect()),
        Scale::Value(_) => Scale::Value(step(c, s, bin, false)?),
    };
    scale_by(c, x, &f, along)
}

/// `x` as integers, when it holds them: a quantizing op's integers (or those its Cast to float
/// reads), an integer parameter, or a float parameter whose values are all integers of
/// `container`.
fn integer_levels(c: &mut Ctx, x: ValueId, container: DType) -> Result<Option<ValueId>, MapError> {
    if let Some(t) = c.constant(x) {
        let d = t.dtype();
        if matches!(d, DType::I8 | DType::I16 | DType::U8 | DType::I32) {
            return Ok(Some(x));
        }
        if !d.is_float() {
            return Ok(None);
        }
        let (lo, hi) = int_range(container).unwrap_or((0.0, 0.0));
        let v = t.to_f64_vec();
        if !v
            .iter()
            .all(|&a| a.fract() == 0.0 && (lo..=hi).contains(&a))
        {
            return Ok(None);
        }
        let shape = t.shape().to_vec();
        let t = match container {
            DType::I8 => Tensor::from_vec(&shape, v.iter().map(|&a| a as i8).collect()),
            _ => Tensor::from_vec(&shape, v.iter().map(|&a| a as i16).collect()),
        }
        .map_err(|e| invalid(e.to_string()))?;
        return Ok(Some(c.konst(t)));
    }
    if yields_integers(c, x) {
        return Ok(Some(x));
    }
    // The float copy of a quantizing op's integers (quantize_linear's Y): read the integers.
    let src = match c.producer(x) {
        Some(node) => match node.op.as_any().downcast_ref::<Cast>() {
            Some(cast) if cast.to.is_float() => node.inputs.first().copied().flatten(),
            _ => None,
        },
        None => None,
    };
    Ok(src.filter(|&s| yields_integers(c, s)))
}

/// Whether `v` is the integer output of QuantizeLinear or of a Cast to an integer type.
fn yields_integers(c: &Ctx, v: ValueId) -> bool {
    let Some(node) = c.producer(v) else {
        return false;
    };
    let op = node.op.as_any();
    if let Some(q) = op.downcast_ref::<QuantizeLinear>() {
        q.output_dtype.is_some_and(|d| d.is_int())
    } else if let Some(k) = op.downcast_ref::<Cast>() {
        k.to.is_int()
    } else {
        false
    }
}

/// A quantize-dequantize pair: QuantizeLinear and DequantizeLinear where they are Paddle's
/// arithmetic, the float form otherwise.
fn quantize_dequantize(
    c: &mut Ctx,
    x: ValueId,
    s: &Scale,
    along: Along,
    q: QuantAttrs,
) -> Result<ValueId, MapError> {
    let levels = if q.is_quantize_linear() {
        quantize_int(c, x, s, along, q)?
    } else {
        quantize_float(c, x, s, along, q)?
    };
    dequantize(c, levels, s, along, q.bin, q.container())
}

/// max |x| over everything (per tensor, shape [1]) or over all axes but the quantization axis
/// (shape [n]): the scale of the abs_max forms.
fn abs_max(c: &mut Ctx, x: ValueId, along: Along) -> Result<ValueId, MapError> {
    let a = unary(c, UnaryKind::Abs, x)?;
    let axes = along
        .axis
        .map(|ax| (0..along.rank as i64).filter(|&i| i != ax as i64).collect());
    let m = c.add(
        Reduce {
            kind: ReduceKind::Max,
            axes,
            keepdims: false,
            noop_with_empty_axes: false,
        },
        &[a],
    )?;
    match along.axis {
        None => c.reshape_to(m, &[1]),
        Some(_) => Ok(m),
    }
}

// ---------------------------------------------------------------------------------------------
// quantize_linear / dequantize_linear

fn only_observer(c: &mut Ctx, in_slot: &str, out_slot: &str) -> Result<bool, MapError> {
    if !c.bool("only_observer", false)? {
        return Ok(false);
    }
    let x = c.input(in_slot)?;
    c.set(out_slot, x);
    Ok(true)
}

/// `Y` = the levels of X as floats (Paddle's `Y` is float). A following `dequantize_linear`
/// reads the integers under the Cast, so the pair is QuantizeLinear -> DequantizeLinear.
fn quantize_linear(c: &mut Ctx) -> MapResult {
    if only_observer(c, "X", "Y")? {
        return Ok(());
    }
    let q = QuantAttrs::read(c)?;
    let along = quant_along(c, "quant_axis", 0)?;
    let dims = c.in_dims("X");
    let s = scale_input(c, "Scale", along, dims.as_deref())?;
    let x = c.input("X")?;
    let levels = quantize_int(c, x, &s, along, q)?;
    let y = c.add(Cast::new(DType::F32), &[levels])?;
    c.set("Y", y);
    Ok(())
}

fn dequantize_linear(c: &mut Ctx) -> MapResult {
    if only_observer(c, "X", "Y")? {
        return Ok(());
    }
    let q = QuantAttrs::read(c)?;
    let along = quant_along(c, "quant_axis", 0)?;
    let dims = c.in_dims("X");
    let s = scale_input(c, "Scale", along, dims.as_deref())?;
    let x = c.input("X")?;
    let y = dequantize(c, x, &s, along, q.bin, q.container())?;
    c.set("Y", y);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// the fake_* ops

fn per_tensor() -> Result<Along, MapError> {
    Ok(Along {
        axis: None,
        rank: 0,
    })
}

/// `fake_quantize_abs_max`: the scale is max |X|, measured at run time.
fn fake_quantize_abs_max(c: &mut Ctx) -> MapResult {
    let q = QuantAttrs::read(c)?;
    let along = per_tensor()?;
    let x = c.input("X")?;
    let s = abs_max(c, x, along)?;
    let out = quantize_float(c, x, &Scale::Value(s), along, q)?;
    c.set("OutScale", s);
    c.set_out(out)
}

/// `fake_quantize_range_abs_max`, `fake_quantize_moving_average_abs_max`: quantized with the
/// stored `InScale`.
fn fake_quantize_with_in_scale(c: &mut Ctx) -> MapResult {
    let q = QuantAttrs::read(c)?;
    let along = per_tensor()?;
    let s = scale_input(c, "InScale", along, None)?;
    let x = c.input("X")?;
    let out = quantize_float(c, x, &s, along, q)?;
    let in_scale = c.input("InScale")?;
    c.set("OutScale", in_scale);
    c.set_out(out)
}

fn fake_quantize_dequantize_abs_max(c: &mut Ctx) -> MapResult {
    let q = QuantAttrs::read(c)?;
    let along = per_tensor()?;
    let x = c.input("X")?;
    let s = abs_max(c, x, along)?;
    let out = quantize_dequantize(c, x, &Scale::Value(s), along, q)?;
    c.set("OutScale", s);
    c.set_out(out)
}

fn fake_quantize_dequantize_moving_average_abs_max(c: &mut Ctx) -> MapResult {
    let q = QuantAttrs::read(c)?;
    let along = per_tensor()?;
    let s = scale_input(c, "InScale", along, None)?;
    let x = c.input("X")?;
    let out = quantize_dequantize(c, x, &s, along, q)?;
    let in_scale = c.input("InScale")?;
    c.set("OutScale", in_scale);
    c.set_out(out)
}

/// The per-channel quantization axis of the channel-wise ops: 0 or 1.
fn channel_along(c: &Ctx) -> Result<Along, MapError> {
    let along = quant_along(c, "quant_axis", 0)?;
    match along.axis {
        Some(0 | 1) => Ok(along),
        _ => Err(invalid(format!(
            "quant_axis must be 0 or 1, got {}",
            c.int("quant_axis", 0)?
        ))),
    }
}

/// `fake_channel_wise_quantize_abs_max`: one scale per index of `quant_axis`, max |X| over the
/// rest. An inference program (`is_test`) quantizes with the stored OutScale, when it is a
/// parameter.
fn fake_channel_wise_quantize_abs_max(c: &mut Ctx) -> MapResult {
    let q = QuantAttrs::read(c)?;
    let along = channel_along(c)?;
    let x = c.input("X")?;
    let stored = match c.output_names("OutScale").first() {
        Some(name) if c.bool("is_test", false)? => {
            c.value_of(name).ok().filter(|&v| c.constant(v).is_some())
        }
        _ => None,
    };
    let (s, scale) = match stored {
        Some(v) => {
            let t = c.constant(v).map(|t| t.to_f64_vec()).unwrap_or_default();
            let dims = c.in_dims("X");
            check_scale_len(t.len(), "OutScale", along, dims.as_deref())?;
            (v, Scale::Const(t.iter().map(|&s| s as f32).collect()))
        }
        None => {
            let v = abs_max(c, x, along)?;
            (v, Scale::Value(v))
        }
    };
    let out = quantize_float(c, x, &scale, along, q)?;
    c.set("OutScale", s);
    c.set_out(out)
}

fn fake_channel_wise_quantize_dequantize_abs_max(c: &mut Ctx) -> MapResult {
    let q = QuantAttrs::read(c)?;
    let along = channel_along(c)?;
    let x = c.input("X")?;
    let s = abs_max(c, x, along)?;
    let out = quantize_dequantize(c, x, &Scale::Value(s), along, q)?;
    c.set("OutScale", s);
    c.set_out(out)
}

/// `fake_dequantize_max_abs`: `X * Scale / max_range`.
fn fake_dequantize_max_abs(c: &mut Ctx) -> MapResult {
    let max_range = c
        .float_opt("max_range")?
        .ok_or_else(|| invalid("attribute 'max_range' is required"))?;
    if !(max_range.is_finite() && max_range > 0.0) {
        return Err(invalid(format!(
            "max_range must be positive, got {max_range}"
        )));
    }
    let along = per_tensor()?;
    let s = scale_input(c, "Scale", along, None)?;
    let x = c.input("X")?;
    let container = if max_range <= 127.0 {
        DType::I8
    } else {
        DType::I16
    };
    let out = dequantize(c, x, &s, along, max_range, container)?;
    c.set_out(out)
}

/// `fake_channel_wise_dequantize_max_abs`. One scale tensor: per index of `quant_axis` (the
/// weights), `X * Scales[0][c] / (2^(bits0-1)-1)`. Two: a quantized op's output,
/// `X * Scales[0][c] * Scales[1] / ((2^(bits0-1)-1) * (2^(bits1-1)-1))`, with `c` along
/// `x_num_col_dims`.
fn fake_channel_wise_dequantize_max_abs(c: &mut Ctx) -> MapResult {
    let scales = c.inputs("Scales")?;
    let bits = c.ints("quant_bits")?.unwrap_or_else(|| vec![8]);
    if scales.is_empty() || scales.len() > 2 {
        return Err(invalid(format!(
            "'Scales' holds {} tensors, expected 1 or 2",
            scales.len()
        )));
    }
    if bits.len() < scales.len() {
        return Err(invalid(format!(
            "'quant_bits' has {} entries for {} scale tensors",
            bits.len(),
            scales.len()
        )));
    }
    let rank = c.in_rank("X")?;
    let dims = c.in_dims("X");
    let x = c.input("X")?;
    if scales.len() == 1 {
        let along = along_at(c.int("quant_axis", 0)?, rank, "quant_axis")?;
        if along.axis.is_none() {
            return Err(invalid("quant_axis must be 0 or 1, got -1"));
        }
        let bin = levels(bits[0], "quant_bits")?;
        let s = scale_input(c, "Scales", along, dims.as_deref())?;
        let container = if bits[0] <= 8 { DType::I8 } else { DType::I16 };
        let out = dequantize(c, x, &s, along, bin, container)?;
        return c.set_out(out);
    }
    let along = along_at(c.int("x_num_col_dims", 1)?, rank, "x_num_col_dims")?;
    if along.axis.is_none() {
        return Err(invalid("x_num_col_dims must be at least 0, got -1"));
    }
    let max_range = levels(bits[0], "quant_bits")? * levels(bits[1], "quant_bits")?;
    let (s0, s1) = (scales[0], scales[1]);
    let factor = match (c.constant(s0), c.constant(s1)) {
        (Some(a), Some(b)) => {
            let b = b.to_f64_vec();
            if b.len() != 1 {
                return Err(invalid(format!(
                    "the second scale tensor has {} values, expected 1",
                    b.len()
                )));
            }
            let a = a.to_f64_vec();
            check_scale_len(a.len(), "Scales", along, dims.as_deref())?;
            // One multiplier per channel, s0 * s1 / max_range rounded once.
            Scale::Const(
                a.iter()
                    .map(|&a| (a as f32 as f64 * (b[0] as f32 as f64) / max_range) as f32)
                    .collect(),
            )
        }
        _ => {
            let p = binary(c, BinaryKind::Mul, s0, s1)?;
            let m = f32_scalar(c, max_range as f32)?;
            Scale::Value(binary(c, BinaryKind::Div, p, m)?)
        }
    };
    let out = scale_by(c, x, &factor, along)?;
    c.set_out(out)
}
