//! QLinearAdd, QLinearMul (broadcasting), QLinearSigmoid, QLinearLeakyRelu and QLinearConcat.

use super::{
    check_qparams, requantize, requantize_map, same_dtype, what, QParams, Q8, UNARY_INPUTS,
};
use crate::op::{input, optional, output, required, variadic, InputSpec, Prototype};
use crate::ops::shape::concat::Concat;
use crate::ops::util::{broadcast_offsets, broadcast_shapes};
use crate::{op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// A, its (scale, zero point), B, its pair, the output's pair.
pub(in crate::ops::quant) const BINARY_INPUTS: &[InputSpec] = &[
    input("A", Q8),
    input("A_scale", DTypeSet::of(DType::F32)),
    optional("A_zero_point", Q8),
    input("B", Q8),
    input("B_scale", DTypeSet::of(DType::F32)),
    optional("B_zero_point", Q8),
    input("C_scale", DTypeSet::of(DType::F32)),
    optional("C_zero_point", Q8),
];

pub(in crate::ops::quant) fn binary_infer(
    op: &dyn Op,
    ctx: &InferCtx,
) -> OpResult<Vec<TensorInfo>> {
    same_dtype(op, ctx, 3, 0)?;
    for (s, z) in [(1, 2), (4, 5), (6, 7)] {
        check_qparams(op, ctx, s, z, 0)?;
    }
    let shape = broadcast_shapes(ctx.shape(0)?, ctx.shape(3)?)?;
    Ok(vec![TensorInfo::new(ctx.dtype(0)?, shape)])
}

/// The operand onnxruntime's broadcasting loop hands its kernels as a single value for each
/// run along the output's innermost axis (of more than one element), if any: the one that is
/// broadcast along that axis. Its QLinearAdd rounds differently in that case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(in crate::ops::quant) enum Single {
    Neither,
    A,
    B,
}

fn single_operand(a: &[usize], b: &[usize], out: &[usize]) -> Single {
    let dim = |s: &[usize], k: usize| {
        let pad = out.len() - s.len();
        if k < pad {
            1
        } else {
            s[k - pad]
        }
    };
    match out.iter().rposition(|&d| d > 1) {
        // One element: onnxruntime takes A as the single value.
        None => Single::A,
        Some(k) if dim(a, k) == 1 => Single::A,
        Some(k) if dim(b, k) == 1 => Single::B,
        Some(_) => Single::Neither,
    }
}

/// Broadcasts A and B, computes each output element with `f(a, b, a_q, b_q, c_q, single)` as
/// an f32 that includes C's zero point, rounds it half to even and saturates.
pub(in crate::ops::quant) fn binary_eval(
    op: &dyn Op,
    inputs: &[Option<&Tensor>],
    f: impl Fn(i64, i64, QParams, QParams, QParams, Single) -> f32,
) -> OpResult<Vec<Tensor>> {
    let a = required(inputs, 0)?;
    let b = required(inputs, 3)?;
    op_ensure!(
        a.dtype() == b.dtype(),
        "{} is {}, expected {} like {}",
        what(op, 3),
        b.dtype(),
        a.dtype(),
        what(op, 0)
    );
    let (aq, bq, cq) = (
        QParams::read(op, inputs, 1, 2)?,
        QParams::read(op, inputs, 4, 5)?,
        QParams::read(op, inputs, 6, 7)?,
    );
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let single = single_operand(a.shape(), b.shape(), &shape);
    let (av, bv) = (a.to_i64_vec(), b.to_i64_vec());
    let (ao, bo) = (
        broadcast_offsets(a.shape(), &shape),
        broadcast_offsets(b.shape(), &shape),
    );
    let vals = ao
        .iter()
        .zip(&bo)
        .map(|(&i, &j)| f(av[i], bv[j], aq, bq, cq, single) as f64);
    Ok(vec![requantize(a.dtype(), &shape, false, vals)?])
}

/// One element of QLinearAdd as onnxruntime's x86 kernel computes it, before rounding: `x` is
/// the operand it reads element by element and `y` the other (a single value for the whole
/// run when `y_single`), each as (value, ratio of its scale to the output's, zero point). The
/// zero points are folded into one f32 constant with the output's, and the products are fused
/// multiply-adds.
fn add_value(x: (i64, f32, i64), y: (i64, f32, i64), zc: i64, y_single: bool) -> f32 {
    let ((x, rx, zx), (y, ry, zy)) = (x, y);
    let fixed = zc as f32 - rx.mul_add(zx as f32, ry * zy as f32);
    if y_single {
        (x as f32).mul_add(rx, fixed + y as f32 * ry)
    } else {
        (x as f32).mul_add(rx, (y as f32).mul_add(ry, fixed))
    }
}

/// com.microsoft QLinearAdd: `C = (A_scale (A - A_zp) + B_scale (B - B_zp)) / C_scale + C_zp`,
/// with numpy broadcasting, rounded half to even and saturated.
///
/// The f32 arithmetic is onnxruntime's (see `add_value`), so that the reference rounds the
/// near-ties the same way: the zero points enter before rounding.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QLinearAdd;

impl Op for QLinearAdd {
    fn pointwise(&self) -> bool {
        true
    }

    op_common!(
        "QLinearAdd",
        Prototype {
            inputs: BINARY_INPUTS,
            outputs: &[output("C")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        binary_infer(self, ctx)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        binary_eval(self, inputs, |a, b, aq, bq, cq, single| {
            let a = (a, aq.scale / cq.scale, aq.zero);
            let b = (b, bq.scale / cq.scale, bq.zero);
            match single {
                Single::A => add_value(b, a, cq.zero, true),
                Single::B => add_value(a, b, cq.zero, true),
                Single::Neither => add_value(a, b, cq.zero, false),
            }
        })
    }
}

/// com.microsoft QLinearMul: `C = (A - A_zp) (B - B_zp) A_scale B_scale / C_scale + C_zp`, with
/// numpy broadcasting, rounded half to even and saturated.
///
/// As in onnxruntime's x86 kernel, the integer product is scaled by
/// `A_scale * B_scale / C_scale` and C's zero point added in f32 before rounding.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QLinearMul;

impl Op for QLinearMul {
    fn pointwise(&self) -> bool {
        true
    }

    op_common!(
        "QLinearMul",
        Prototype {
            inputs: BINARY_INPUTS,
            outputs: &[output("C")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        binary_infer(self, ctx)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        binary_eval(self, inputs, |a, b, aq, bq, cq, _| {
            let ratio = aq.scale * bq.scale / cq.scale;
            ((a - aq.zero) * (b - bq.zero)) as f32 * ratio + cq.zero as f32
        })
    }
}

fn unary_infer(op: &dyn Op, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
    check_qparams(op, ctx, 1, 2, 0)?;
    check_qparams(op, ctx, 3, 4, 0)?;
    Ok(vec![ctx.like(0)?])
}

/// Dequantizes X, applies `f` and requantizes to Y's scale and zero point.
fn unary_eval(
    op: &dyn Op,
    inputs: &[Option<&Tensor>],
    f: impl Fn(f32) -> f32,
) -> OpResult<Vec<Tensor>> {
    let x = required(inputs, 0)?;
    let xq = QParams::read(op, inputs, 1, 2)?;
    let yq = QParams::read(op, inputs, 3, 4)?;
    Ok(vec![requantize_map(x, xq, yq, x.dtype(), f)?])
}

/// com.microsoft QLinearSigmoid: `Y = quantize(1 / (1 + exp(-dequantize(X))))`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QLinearSigmoid;

impl Op for QLinearSigmoid {
    fn pointwise(&self) -> bool {
        true
    }

    op_common!(
        "QLinearSigmoid",
        Prototype {
            inputs: UNARY_INPUTS,
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        unary_infer(self, ctx)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        unary_eval(self, inputs, |v| 1.0 / (1.0 + (-v).exp()))
    }
}

/// com.microsoft QLinearLeakyRelu: `Y = quantize(x >= 0 ? x : alpha x)` of `x = dequantize(X)`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QLinearLeakyRelu {
    pub alpha: f32,
}

impl Default for QLinearLeakyRelu {
    fn default() -> Self {
        QLinearLeakyRelu { alpha: 0.01 }
    }
}

impl Op for QLinearLeakyRelu {
    fn pointwise(&self) -> bool {
        true
    }

    op_common!(
        "QLinearLeakyRelu",
        Prototype {
            inputs: UNARY_INPUTS,
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        unary_infer(self, ctx)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let alpha = self.alpha;
        unary_eval(self, inputs, |v| if v >= 0.0 { v } else { v * alpha })
    }
}

/// com.microsoft QLinearConcat: `Y_scale, Y_zero_point`, then one `(X, X_scale, X_zero_point)`
/// triple per input; each input is requantized to Y's pair, then they are joined along `axis`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QLinearConcat {
    pub axis: i64,
}

impl QLinearConcat {
    /// The number of (tensor, scale, zero point) triples.
    fn triples(n_inputs: usize) -> OpResult<usize> {
        let rest = n_inputs.saturating_sub(2);
        op_ensure!(
            rest >= 3 && rest.is_multiple_of(3),
            "inputs after Y_scale and Y_zero_point must be (tensor, scale, zero point) triples, got {rest} input(s)"
        );
        Ok(rest / 3)
    }
}

fn triple_name(i: usize) -> String {
    let k = (i - 2) / 3;
    let part = ["X", "X_scale", "X_zero_point"][(i - 2) % 3];
    format!("input {i} ({part} of input triple {k})")
}

impl Op for QLinearConcat {
    op_common!(
        "QLinearConcat",
        Prototype {
            inputs: &[
                input("Y_scale", DTypeSet::of(DType::F32)),
                input("Y_zero_point", Q8),
                variadic("inputs", Q8.union(DTypeSet::of(DType::F32)), 3),
            ],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = ctx.dtype(1)?;
        let n = Self::triples(ctx.len())?;
        let mut shapes = Vec::with_capacity(n);
        for i in 0..ctx.len() {
            let want = if i == 0 || (i >= 2 && (i - 2) % 3 == 1) {
                DType::F32
            } else {
                dt
            };
            let name = || {
                if i < 2 {
                    what(self, i)
                } else {
                    triple_name(i)
                }
            };
            op_ensure!(
                ctx.dtype(i)? == want,
                "{} is {}, expected {want}",
                name(),
                ctx.dtype(i)?
            );
            if i < 2 || (i - 2) % 3 != 0 {
                let s = ctx.shape(i)?;
                op_ensure!(
                    s.iter().product::<usize>() == 1,
                    "{} must have one element (per-tensor quantization), got shape {s:?}",
                    name()
                );
            } else {
                shapes.push(ctx.shape(i)?);
            }
        }
        let (shape, _) = Concat { axis: self.axis }.output_shape(&shapes)?;
        Ok(vec![TensorInfo::new(dt, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let n = Self::triples(inputs.len())?;
        let yq = QParams::read(self, inputs, 0, 1)?;
        let to = required(inputs, 1)?.dtype();
        let mut parts = Vec::with_capacity(n);
        for k in 0..n {
            let i = 2 + 3 * k;
            let x = required(inputs, i)?;
            op_ensure!(
                x.dtype() == to,
                "{} is {}, expected {to} like Y_zero_point",
                triple_name(i),
                x.dtype()
            );
            let xq = QParams::read_named(inputs, i + 1, i + 2, triple_name)?;
            parts.push(requantize_map(x, xq, yq, to, |v| v)?);
        }
        let refs: Vec<Option<&Tensor>> = parts.iter().map(Some).collect();
        Concat { axis: self.axis }.eval(&refs)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{f, i8s, u8s};
    use super::*;
    use crate::ops::elementwise::testutil::run;

    #[test]
    fn qlinear_add_u8() {
        // A: scale 0.5, zp 128; B: scale 0.25, zp 0; C: scale 1, zp 10.
        // 0.5 (a - 128) + 0.25 b + 10, B broadcast over rows.
        let a = u8s(&[2, 3], &[128, 131, 255, 0, 129, 127]);
        let b = u8s(&[3], &[2, 6, 255]);
        let y = run(
            &QLinearAdd,
            &[
                Some(&a),
                Some(&f(0.5)),
                Some(&Tensor::scalar(128u8)),
                Some(&b),
                Some(&f(0.25)),
                None,
                Some(&f(1.0)),
                Some(&Tensor::scalar(10u8)),
            ],
        )
        .remove(0);
        // Row 0: 0 + 0.5 + 10 = 10.5 -> 10 (ties to even); 1.5 + 1.5 + 10 = 13;
        //        63.5 + 63.75 + 10 = 137.25 -> 137.
        // Row 1: -64 + 0.5 + 10 = -53.5 -> saturates at 0; 0.5 + 1.5 + 10 = 12;
        //        -0.5 + 63.75 + 10 = 73.25 -> 73.
        assert_eq!(y.as_slice::<u8>().unwrap(), &[10, 13, 137, 0, 12, 73]);
    }

    #[test]
    fn qlinear_add_i8_saturates_and_rounds_to_even() {
        let a = i8s(&[4], &[127, -128, 1, 3]);
        let b = i8s(&[4], &[127, -128, 2, 2]);
        let y = run(
            &QLinearAdd,
            &[
                Some(&a),
                Some(&f(1.0)),
                None,
                Some(&b),
                Some(&f(1.0)),
                None,
                Some(&f(2.0)),
                Some(&Tensor::scalar(-1i8)),
            ],
        )
        .remove(0);
        // 254/2 - 1 = 126; -256/2 - 1 saturates; 3/2 - 1 = 0.5 -> 0; 5/2 - 1 = 1.5 -> 2: the
        // zero point is added before rounding, as onnxruntime does.
        assert_eq!(y.as_slice::<i8>().unwrap(), &[126, -128, 0, 2]);
    }

    #[test]
    fn qlinear_mul_u8_and_i8() {
        // (a - 1) (b - 2) 0.5 * 0.5 / 0.5 + 3.
        let y = run(
            &QLinearMul,
            &[
                Some(&u8s(&[2, 2], &[1, 4, 255, 6])),
                Some(&f(0.5)),
                Some(&Tensor::scalar(1u8)),
                Some(&u8s(&[1], &[5])),
                Some(&f(0.5)),
                Some(&Tensor::scalar(2u8)),
                Some(&f(0.5)),
                Some(&Tensor::scalar(3u8)),
            ],
        )
        .remove(0);
        // 0 + 3; 3 * 3 * 0.5 + 3 = 7.5 -> 8; 254 * 3 * 0.5 + 3 = 384 -> 255;
        // 5 * 3 * 0.5 + 3 = 10.5 -> 10.
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.as_slice::<u8>().unwrap(), &[3, 8, 255, 10]);
        let y = run(
            &QLinearMul,
            &[
                Some(&i8s(&[3], &[-128, 127, -3])),
                Some(&f(1.0)),
                None,
                Some(&i8s(&[3], &[127, 127, 1])),
                Some(&f(1.0)),
                None,
                Some(&f(4.0)),
                None,
            ],
        )
        .remove(0);
        // -16256 / 4 -> -128; 16129 / 4 -> 127; -3 / 4 = -0.75 -> -1.
        assert_eq!(y.as_slice::<i8>().unwrap(), &[-128, 127, -1]);
    }

    #[test]
    fn single_operand_of_a_run() {
        assert_eq!(
            single_operand(&[1, 4, 3, 3], &[1, 4, 1, 1], &[1, 4, 3, 3]),
            Single::B
        );
        assert_eq!(single_operand(&[1], &[2, 3], &[2, 3]), Single::A);
        assert_eq!(single_operand(&[3], &[2, 3], &[2, 3]), Single::Neither);
        assert_eq!(single_operand(&[2, 1], &[2, 3], &[2, 3]), Single::A);
        assert_eq!(
            single_operand(&[2, 3, 1], &[1, 1, 1], &[2, 3, 1]),
            Single::B
        );
        assert_eq!(single_operand(&[1], &[1], &[1]), Single::A);
    }

    #[test]
    fn qlinear_add_broadcast_run() {
        // B is one value per row: onnxruntime adds its (unfused) product to the constant, then
        // fuses A's. Exact here: 0.5 (a - 2) + 0.25 (b - 4) + 1.
        let y = run(
            &QLinearAdd,
            &[
                Some(&u8s(&[2, 2], &[2, 255, 7, 0])),
                Some(&f(0.5)),
                Some(&Tensor::scalar(2u8)),
                Some(&u8s(&[2, 1], &[4, 13])),
                Some(&f(0.25)),
                Some(&Tensor::scalar(4u8)),
                Some(&f(1.0)),
                Some(&Tensor::scalar(1u8)),
            ],
        )
        .remove(0);
        // 1; 126.5 + 1 = 127.5 -> 128; 2.5 + 2.25 + 1 = 5.75 -> 6; -1 + 2.25 + 1 = 2.25 -> 2.
        assert_eq!(y.as_slice::<u8>().unwrap(), &[1, 128, 6, 2]);
    }

    #[test]
    fn qlinear_binary_checks() {
        let a = u8s(&[2], &[1, 2]);
        let e = QLinearAdd
            .eval(&[
                Some(&a),
                Some(&f(1.0)),
                None,
                Some(&i8s(&[2], &[1, 2])),
                Some(&f(1.0)),
                None,
                Some(&f(1.0)),
                None,
            ])
            .unwrap_err();
        assert!(e.0.contains("input 3 (B)"), "{e}");
        let e = QLinearMul
            .eval(&[
                Some(&a),
                Some(&Tensor::from_slice(&[2], &[1.0f32, 2.0]).unwrap()),
                None,
                Some(&a),
                Some(&f(1.0)),
                None,
                Some(&f(1.0)),
                None,
            ])
            .unwrap_err();
        assert!(e.0.contains("input 1 (A_scale)"), "{e}");
        let e = QLinearAdd
            .eval(&[
                Some(&a),
                Some(&f(1.0)),
                None,
                Some(&u8s(&[3], &[1, 2, 3])),
                Some(&f(1.0)),
                None,
                Some(&f(1.0)),
                None,
            ])
            .unwrap_err();
        assert!(e.0.contains("broadcast"), "{e}");
    }

    #[test]
    fn qlinear_sigmoid() {
        // x = 0.25 (q - 128): 0 -> 0.5 / (1/256) = 128; -32 -> ~0 -> 0; 31.75 -> 256 -> 255.
        let x = u8s(&[3], &[128, 0, 255]);
        let y = run(
            &QLinearSigmoid,
            &[
                Some(&x),
                Some(&f(0.25)),
                Some(&Tensor::scalar(128u8)),
                Some(&f(1.0 / 256.0)),
                None,
            ],
        )
        .remove(0);
        assert_eq!(y.as_slice::<u8>().unwrap(), &[128, 0, 255]);
        // i8, output zero point -128: sigmoid(0) * 256 = 128 - 128; sigmoid(1) * 256 = 187.1;
        // sigmoid(-128) = 0 -> -128.
        let x = i8s(&[3], &[0, 1, -128]);
        let y = run(
            &QLinearSigmoid,
            &[
                Some(&x),
                Some(&f(1.0)),
                None,
                Some(&f(1.0 / 256.0)),
                Some(&Tensor::scalar(-128i8)),
            ],
        )
        .remove(0);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[0, 59, -128]);
    }

    #[test]
    fn qlinear_leaky_relu() {
        let op = QLinearLeakyRelu { alpha: 0.25 };
        // x = q - 100: -100 * 0.25 = -25 + 100 = 75; 0 -> 100; 155 -> 255; -2 * 0.25 = -0.5 -> 0.
        let y = run(
            &op,
            &[
                Some(&u8s(&[4], &[0, 100, 255, 98])),
                Some(&f(1.0)),
                Some(&Tensor::scalar(100u8)),
                Some(&f(1.0)),
                Some(&Tensor::scalar(100u8)),
            ],
        )
        .remove(0);
        assert_eq!(y.as_slice::<u8>().unwrap(), &[75, 100, 255, 100]);
        // i8, output scale 0.5: -128 * 0.25 / 0.5 = -64; 127 / 0.5 saturates; -12 -> -6;
        // -3 * 0.25 / 0.5 = -1.5 -> -2 (ties to even).
        let y = run(
            &op,
            &[
                Some(&i8s(&[4], &[-128, 127, -12, -3])),
                Some(&f(1.0)),
                None,
                Some(&f(0.5)),
                None,
            ],
        )
        .remove(0);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[-64, 127, -6, -2]);
    }

    #[test]
    fn qlinear_concat() {
        // Y: scale 0.5, zp 128. Input 0 as is (same pair); input 1 with scale 1, zp 0:
        // q -> 2 q + 128, saturating at 255.
        let op = QLinearConcat { axis: 1 };
        let y = run(
            &op,
            &[
                Some(&f(0.5)),
                Some(&Tensor::scalar(128u8)),
                Some(&u8s(&[2, 1], &[0, 255])),
                Some(&f(0.5)),
                Some(&Tensor::scalar(128u8)),
                Some(&u8s(&[2, 2], &[3, 64, 0, 127])),
                Some(&f(1.0)),
                Some(&Tensor::scalar(0u8)),
            ],
        )
        .remove(0);
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.as_slice::<u8>().unwrap(), &[0, 134, 255, 255, 128, 255]);
        // i8 along axis 0, rounding ties to even: 0.75 (q - 1) / 0.5.
        let y = run(
            &QLinearConcat { axis: 0 },
            &[
                Some(&f(0.5)),
                Some(&Tensor::scalar(0i8)),
                Some(&i8s(&[5], &[2, 3, 4, -128, 127])),
                Some(&f(0.75)),
                Some(&Tensor::scalar(1i8)),
            ],
        )
        .remove(0);
        // 1.5 -> 2; 3; 4.5 -> 4; -193.5 -> -128; 189 -> 127.
        assert_eq!(y.as_slice::<i8>().unwrap(), &[2, 3, 4, -128, 127]);
    }

    #[test]
    fn qlinear_concat_checks() {
        let op = QLinearConcat { axis: 0 };
        let x = u8s(&[1], &[1]);
        let e = op
            .eval(&[
                Some(&f(1.0)),
                Some(&Tensor::scalar(0u8)),
                Some(&x),
                Some(&f(1.0)),
            ])
            .unwrap_err();
        assert!(e.0.contains("triples"), "{e}");
        let e = op
            .eval(&[
                Some(&f(1.0)),
                Some(&Tensor::scalar(0u8)),
                Some(&x),
                Some(&Tensor::from_slice(&[2], &[1.0f32, 2.0]).unwrap()),
                Some(&Tensor::scalar(0u8)),
            ])
            .unwrap_err();
        assert!(e.0.contains("input 3 (X_scale of input triple 0)"), "{e}");
        let e = op
            .eval(&[
                Some(&f(1.0)),
                Some(&Tensor::scalar(0u8)),
                Some(&i8s(&[1], &[1])),
                Some(&f(1.0)),
                Some(&Tensor::scalar(0i8)),
            ])
            .unwrap_err();
        assert!(e.0.contains("input 2 (X of input triple 0)"), "{e}");
    }
}
