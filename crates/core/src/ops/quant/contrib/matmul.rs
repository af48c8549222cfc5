//! QGemm, DynamicQuantizeMatMul and MatMulIntegerToFloat: integer products of
//! zero-point-centered 8-bit operands, the B operand's scale and zero point per tensor or per
//! column of B.

use super::{check_qparams, requantize, round_plus, same_dtype, what, Q8};
use crate::op::{input, optional, output, required, Prototype};
use crate::ops::linalg::gemm::{gemm_dims, Gemm};
use crate::ops::linalg::matmul::{matmul_flops, matmul_reference, MatMulShapes};
use crate::ops::nn::tensor_from_f64;
use crate::ops::quant::qlinear::{in_dtype, opt, scalar_of};
use crate::ops::quant::DynamicQuantizeLinear;
use crate::ops::util::{broadcast_offsets, broadcast_shapes};
use crate::{
    op_bail, op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

/// Checks a scale or zero point of shape `s` is per tensor (one element) or per column of a
/// product with `n` columns (1-D with `n` elements).
fn check_per_column(s: &[usize], n: usize, what: &str) -> OpResult<()> {
    op_ensure!(
        s.iter().product::<usize>() == 1 || (s.len() == 1 && s[0] == n),
        "{what} must have one element or be 1-D with {n} (one per column of B), got shape {s:?}"
    );
    Ok(())
}

/// The values of a per-tensor or per-column scale or zero point (`[0]` when absent).
fn per_column(t: Option<&Tensor>, n: usize, what: &str) -> OpResult<Vec<f64>> {
    match t {
        None => Ok(vec![0.0]),
        Some(t) => {
            check_per_column(t.shape(), n, what)?;
            Ok(t.to_f64_vec())
        }
    }
}

/// Entry `j` of a per-tensor or per-column list.
fn col(v: &[f64], j: usize) -> f64 {
    if v.len() == 1 {
        v[0]
    } else {
        v[j]
    }
}

/// Checks a bias is 1-D with one value per column.
fn check_bias(s: &[usize], n: usize, what: &str) -> OpResult<()> {
    op_ensure!(
        s == [n],
        "{what} must be 1-D with {n} elements (the columns of B), got shape {s:?}"
    );
    Ok(())
}

/// com.microsoft QGemm: `Y = alpha (A' - a_zp)(B' - b_zp) + C` on integers (A', B' optionally
/// transposed), then scaled by `alpha a_scale b_scale`: requantized with `y_scale` and
/// `y_zero_point` (given together) to their type, or else output as f32.
///
/// `C` is i32, broadcast to `[M, N]`, with the product's scale `alpha a_scale b_scale`.
/// `b_scale` and `b_zero_point` are per tensor or per column of B'.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QGemm {
    pub alpha: f32,
    pub trans_a: bool,
    pub trans_b: bool,
}

impl Default for QGemm {
    fn default() -> Self {
        QGemm {
            alpha: 1.0,
            trans_a: false,
            trans_b: false,
        }
    }
}

impl QGemm {
    /// `(M, K, N)`, checking C broadcasts to `[M, N]`.
    fn dims(
        &self,
        a: &[usize],
        b: &[usize],
        c: Option<&[usize]>,
    ) -> OpResult<(usize, usize, usize)> {
        let g = Gemm {
            trans_a: self.trans_a,
            trans_b: self.trans_b,
            ..Gemm::default()
        };
        let (m, k, n) = gemm_dims(&g, a, b, None)?;
        if let Some(c) = c {
            let ok = c.len() <= 2 && broadcast_shapes(c, &[m, n]).is_ok_and(|s| s == [m, n]);
            op_ensure!(
                ok,
                "input 6 (C) of shape {c:?} does not broadcast to [{m}, {n}]"
            );
        }
        Ok((m, k, n))
    }
}

impl Op for QGemm {
    op_common!(
        "QGemm",
        Prototype {
            inputs: &[
                input("A", Q8),
                input("a_scale", DTypeSet::of(DType::F32)),
                optional("a_zero_point", Q8),
                input("B", Q8),
                input("b_scale", DTypeSet::of(DType::F32)),
                optional("b_zero_point", Q8),
                optional("C", DTypeSet::of(DType::I32)),
                optional("y_scale", DTypeSet::of(DType::F32)),
                optional("y_zero_point", Q8),
            ],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let c = if ctx.has(6) {
            Some(ctx.shape(6)?)
        } else {
            None
        };
        let (m, _, n) = self.dims(ctx.shape(0)?, ctx.shape(3)?, c)?;
        check_qparams(self, ctx, 1, 2, 0)?;
        check_per_column(ctx.shape(4)?, n, &what(self, 4))?;
        if ctx.has(5) {
            check_per_column(ctx.shape(5)?, n, &what(self, 5))?;
            same_dtype(self, ctx, 5, 3)?;
        }
        op_ensure!(
            ctx.has(7) == ctx.has(8),
            "input 7 (y_scale) and input 8 (y_zero_point) must be given together (quantized output) or both left out (f32 output)"
        );
        let to = if ctx.has(8) {
            check_qparams(self, ctx, 7, 8, 8)?;
            ctx.dtype(8)?
        } else {
            DType::F32
        };
        Ok(vec![TensorInfo::new(to, [m, n])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 3)?;
        let c = opt(inputs, 6);
        let (m, k, n) = self.dims(a.shape(), b.shape(), c.map(|c| c.shape()))?;
        let sa = scalar_of(Some(required(inputs, 1)?), &what(self, 1))? as f32;
        let za = scalar_of(opt(inputs, 2), &what(self, 2))? as i64;
        let sb = per_column(Some(required(inputs, 4)?), n, &what(self, 4))?;
        let zb = per_column(opt(inputs, 5), n, &what(self, 5))?;
        let y = match (opt(inputs, 7), opt(inputs, 8)) {
            (Some(s), Some(z)) => Some((
                scalar_of(Some(s), &what(self, 7))? as f32,
                scalar_of(Some(z), &what(self, 8))? as i64,
                z.dtype(),
            )),
            (None, None) => None,
            _ => op_bail!(
                "input 7 (y_scale) and input 8 (y_zero_point) must be given together (quantized output) or both left out (f32 output)"
            ),
        };
        // The scale of the integer result per column: (alpha a_scale b_scale) / y_scale in f32.
        let scales: Vec<f32> = (0..n)
            .map(|j| {
                let s = self.alpha * sa * col(&sb, j) as f32;
                y.map_or(s, |(ys, _, _)| s / ys)
            })
            .collect();
        let (av, bv) = (a.to_i64_vec(), b.to_i64_vec());
        let cv = c.map(|c| (c.to_i64_vec(), broadcast_offsets(c.shape(), &[m, n])));
        let mut out = Vec::with_capacity(m * n);
        for i in 0..m {
            for j in 0..n {
                let zbj = col(&zb, j) as i64;
                let mut acc: i64 = cv.as_ref().map_or(0, |(v, o)| v[o[i * n + j]]);
                for p in 0..k {
                    let x = av[if self.trans_a { p * m + i } else { i * k + p }] - za;
                    let w = bv[if self.trans_b { j * k + p } else { p * n + j }] - zbj;
                    acc += x * w;
                }
                out.push(acc as f32 * scales[j]);
            }
        }
        let y = match y {
            Some((_, yz, to)) => {
                requantize(to, &[m, n], false, out.iter().map(|&v| round_plus(v, yz)))?
            }
            None => Tensor::from_vec(&[m, n], out)?,
        };
        Ok(vec![y])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        match (inputs.first(), outputs.first()) {
            (Some(Some(a)), Some(y)) => {
                let k = a
                    .shape
                    .get(usize::from(!self.trans_a))
                    .copied()
                    .unwrap_or(0);
                2 * (y.numel() as u64).saturating_mul(k as u64)
            }
            _ => 0,
        }
    }
}

/// The integer product of the centered A and of B centered on its per-tensor or per-column
/// zero point `zb` (output element `i` is in column `i % n`).
fn centered_matmul(s: &MatMulShapes, a: &[i64], b: &Tensor, zb: &[f64]) -> Vec<i64> {
    let bv: Vec<i64> = b
        .to_i64_vec()
        .iter()
        .enumerate()
        .map(|(i, &v)| v - col(zb, i % s.n) as i64)
        .collect();
    let mut acc = Vec::with_capacity(s.output.iter().product());
    matmul_reference(s, a, &bv, 0i64, |c, x, y| c + x * y, &mut |v| acc.push(v));
    acc
}

/// com.microsoft DynamicQuantizeMatMul: A (f32) quantized to u8 as DynamicQuantizeLinear does,
/// multiplied with the 8-bit B as integers, then scaled to f32 by `a_scale b_scale` and the
/// optional bias added. `b_scale` and `b_zero_point` are per tensor or per column of B.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DynamicQuantizeMatMul;

impl Op for DynamicQuantizeMatMul {
    op_common!(
        "DynamicQuantizeMatMul",
        Prototype {
            inputs: &[
                input("A", DTypeSet::of(DType::F32)),
                input("B", Q8),
                input("b_scale", DTypeSet::of(DType::F32)),
                optional("b_zero_point", Q8),
                optional("bias", DTypeSet::of(DType::F32)),
            ],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = MatMulShapes::new(ctx.shape(0)?, ctx.shape(1)?)?;
        check_per_column(ctx.shape(2)?, s.n, &what(self, 2))?;
        if ctx.has(3) {
            check_per_column(ctx.shape(3)?, s.n, &what(self, 3))?;
            same_dtype(self, ctx, 3, 1)?;
        }
        if ctx.has(4) {
            check_bias(ctx.shape(4)?, s.n, &what(self, 4))?;
        }
        Ok(vec![TensorInfo::new(DType::F32, s.output)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 1)?;
        let s = MatMulShapes::new(a.shape(), b.shape())?;
        let sb = per_column(Some(required(inputs, 2)?), s.n, &what(self, 2))?;
        let zb = per_column(opt(inputs, 3), s.n, &what(self, 3))?;
        let bias = match opt(inputs, 4) {
            Some(t) => {
                check_bias(t.shape(), s.n, &what(self, 4))?;
                Some(t.to_f64_vec())
            }
            None => None,
        };
        let q = DynamicQuantizeLinear.eval(&[Some(a)])?;
        let sa = q[1].as_slice::<f32>()?[0];
        let za = q[2].to_i64_vec()[0];
        let av: Vec<i64> = q[0].to_i64_vec().iter().map(|&v| v - za).collect();
        let acc = centered_matmul(&s, &av, b, &zb);
        let y: Vec<f32> = acc
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let j = i % s.n;
                let r = v as f32 * (sa * col(&sb, j) as f32);
                bias.as_ref().map_or(r, |b| r + b[j] as f32)
            })
            .collect();
        Ok(vec![Tensor::from_vec(&s.output, y)?])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        matmul_flops(inputs, outputs)
    }
}

/// com.microsoft MatMulIntegerToFloat: `(A - a_zp)(B - b_zp)` on integers, scaled by
/// `a_scale b_scale` (in the scales' float type, which is the output's) plus the optional bias.
/// `a_scale` and `a_zero_point` are per tensor; `b_scale` and `b_zero_point` per tensor or per
/// column of B. (The schema also allows an `a_scale` per column of A, which onnxruntime does
/// not implement; it is refused here too.)
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MatMulIntegerToFloat;

const SCALE_TYPES: DTypeSet = DTypeSet(DType::F32.bit() | DType::F16.bit());

impl Op for MatMulIntegerToFloat {
    op_common!(
        "MatMulIntegerToFloat",
        Prototype {
            inputs: &[
                input("A", Q8),
                input("B", Q8),
                input("a_scale", SCALE_TYPES),
                input("b_scale", SCALE_TYPES),
                optional("a_zero_point", Q8),
                optional("b_zero_point", Q8),
                optional("bias", SCALE_TYPES),
            ],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = MatMulShapes::new(ctx.shape(0)?, ctx.shape(1)?)?;
        check_qparams(self, ctx, 2, 4, 0)?;
        same_dtype(self, ctx, 3, 2)?;
        check_per_column(ctx.shape(3)?, s.n, &what(self, 3))?;
        if ctx.has(5) {
            check_per_column(ctx.shape(5)?, s.n, &what(self, 5))?;
            same_dtype(self, ctx, 5, 1)?;
        }
        if ctx.has(6) {
            same_dtype(self, ctx, 6, 2)?;
            check_bias(ctx.shape(6)?, s.n, &what(self, 6))?;
        }
        Ok(vec![TensorInfo::new(ctx.dtype(2)?, s.output)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 1)?;
        let s = MatMulShapes::new(a.shape(), b.shape())?;
        let a_scale = required(inputs, 2)?;
        let to = a_scale.dtype();
        let sa = scalar_of(Some(a_scale), &what(self, 2))?;
        let za = scalar_of(opt(inputs, 4), &what(self, 4))? as i64;
        let sb = per_column(Some(required(inputs, 3)?), s.n, &what(self, 3))?;
        let zb = per_column(opt(inputs, 5), s.n, &what(self, 5))?;
        let bias = match opt(inputs, 6) {
            Some(t) => {
                check_bias(t.shape(), s.n, &what(self, 6))?;
                Some(t.to_f64_vec())
            }
            None => None,
        };
        let av: Vec<i64> = a.to_i64_vec().iter().map(|&v| v - za).collect();
        let acc = centered_matmul(&s, &av, b, &zb);
        let y: Vec<f64> = acc
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let j = i % s.n;
                let r = in_dtype(to, v as f64 * in_dtype(to, sa * col(&sb, j)));
                bias.as_ref().map_or(r, |b| r + b[j])
            })
            .collect();
        Ok(vec![tensor_from_f64(to, &s.output, &y)?])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        matmul_flops(inputs, outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{f, i8s, u8s};
    use super::*;
    use crate::ops::elementwise::testutil::run;

    #[test]
    fn qgemm_quantized_output_per_column() {
        // A (u8, zp 128) 2 x 2, B (i8) 2 x 2 with per-column scale and zero point.
        // A - 128 = [[1, -128], [127, 0]]; B - zb = [[2, 3], [1, 1]] (columns zb = 0, -1).
        let a = u8s(&[2, 2], &[129, 0, 255, 128]);
        let b = i8s(&[2, 2], &[2, 2, 1, 0]);
        let c = Tensor::from_vec(&[2], vec![1i32, -1]).unwrap();
        let inputs = [
            Some(&a),
            Some(&f(0.5)),
            Some(&Tensor::scalar(128u8)),
            Some(&b),
            Some(&Tensor::from_vec(&[2], vec![1.0f32, 0.25]).unwrap()),
            Some(&i8s(&[2], &[0, -1])),
            Some(&c),
            Some(&f(1.0)),
            Some(&Tensor::scalar(100u8)),
        ];
        let y = run(&QGemm::default(), &inputs).remove(0);
        // Integers + C: [[2 - 128 + 1, 3 - 128 - 1], [254 + 1, 381 - 1]] = [[-125, -126], [255, 380]];
        // times 0.5 and 0.125: -62.5 -> -62, -15.75 -> -16, 127.5 -> 128, 47.5 -> 48; + 100.
        assert_eq!(y.as_slice::<u8>().unwrap(), &[38, 84, 228, 148]);
        // Without y_scale / y_zero_point the output is f32.
        let y = run(&QGemm::default(), &inputs[..7]).remove(0);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[-62.5, -15.75, 127.5, 47.5]);
    }

    #[test]
    fn qgemm_i8_transposed_saturates() {
        // A' = A^T of [[127], [-128]] -> [[127, -128]]; B' = B^T of [[1, -1]] -> [[1], [-1]].
        // 127 + 128 = 255, times alpha 2 * 0.5 * 0.5 / 0.5 = 1: saturates at 127; with C = -1000,
        // -745 saturates at -128.
        let op = QGemm {
            alpha: 2.0,
            trans_a: true,
            trans_b: true,
        };
        let a = i8s(&[2, 1], &[127, -128]);
        let b = i8s(&[1, 2], &[1, -1]);
        let y = run(
            &op,
            &[
                Some(&a),
                Some(&f(0.5)),
                None,
                Some(&b),
                Some(&f(0.5)),
                None,
                None,
                Some(&f(0.5)),
                Some(&Tensor::scalar(0i8)),
            ],
        )
        .remove(0);
        assert_eq!(y.shape(), &[1, 1]);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[127]);
        let c = Tensor::from_vec(&[1, 1], vec![-1000i32]).unwrap();
        let y = run(
            &op,
            &[
                Some(&a),
                Some(&f(0.5)),
                None,
                Some(&b),
                Some(&f(0.5)),
                None,
                Some(&c),
                Some(&f(0.5)),
                Some(&Tensor::scalar(0i8)),
            ],
        )
        .remove(0);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[-128]);
        // A tie: 1 * 1 * 0.5 * 0.5 / 0.5 = 0.5 -> 0.
        let one = i8s(&[1, 1], &[1]);
        let y = run(
            &QGemm::default(),
            &[
                Some(&one),
                Some(&f(0.5)),
                None,
                Some(&one),
                Some(&f(0.5)),
                None,
                None,
                Some(&f(0.5)),
                Some(&Tensor::scalar(0i8)),
            ],
        )
        .remove(0);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[0]);
    }

    #[test]
    fn qgemm_checks() {
        let a = u8s(&[1, 2], &[1, 2]);
        let b = u8s(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let one = f(1.0);
        let err = |b_scale: &Tensor, c: Option<&Tensor>, y_scale: Option<&Tensor>| {
            let inputs = [
                Some(&a),
                Some(&one),
                None,
                Some(&b),
                Some(b_scale),
                None,
                c,
                y_scale,
            ];
            QGemm::default().eval(&inputs).unwrap_err().0
        };
        let two = Tensor::from_vec(&[2], vec![1.0f32, 1.0]).unwrap();
        assert!(err(&two, None, None).contains("input 4 (b_scale)"));
        let c = Tensor::from_vec(&[2], vec![1i32, 2]).unwrap();
        assert!(err(&one, Some(&c), None).contains("input 6 (C)"));
        assert!(err(&one, None, Some(&one)).contains("together"));
    }

    #[test]
    fn dynamic_quantize_matmul() {
        // A = [[0, 2, -0.55]] quantizes like DynamicQuantizeLinear: scale 2.55 / 255, zp 55,
        // q = [55, 255, 0] -> centered [0, 200, -55].
        let a = Tensor::from_vec(&[1, 3], vec![0.0f32, 2.0, -0.55]).unwrap();
        // B (u8) 3 x 2, zero points per column [1, 0]: centered [[0, 1], [1, 0], [2, 255]].
        let b = u8s(&[3, 2], &[1, 1, 2, 0, 3, 255]);
        let y = run(
            &DynamicQuantizeMatMul,
            &[
                Some(&a),
                Some(&b),
                Some(&Tensor::from_vec(&[2], vec![1.0f32, 0.5]).unwrap()),
                Some(&u8s(&[2], &[1, 0])),
                Some(&Tensor::from_vec(&[2], vec![10.0f32, -10.0]).unwrap()),
            ],
        )
        .remove(0);
        let sa = (2.0f32 - -0.55f32) / 255.0;
        // Column 0: 200 - 110 = 90; column 1: 0 - 55 * 255 = -14025.
        let want = [90.0 * sa + 10.0, -14025.0 * (sa * 0.5) - 10.0];
        assert_eq!(y.as_slice::<f32>().unwrap(), &want);
    }

    #[test]
    fn matmul_integer_to_float() {
        // i8 A with zp -1, u8 B with scalar zp 128; batched A [2, 1, 2] x B [2, 1].
        let a = i8s(&[2, 1, 2], &[-128, 127, 0, -1]);
        let b = u8s(&[2, 1], &[255, 0]);
        let y = run(
            &MatMulIntegerToFloat,
            &[
                Some(&a),
                Some(&b),
                Some(&f(0.5)),
                Some(&f(0.25)),
                Some(&Tensor::scalar(-1i8)),
                Some(&Tensor::scalar(128u8)),
                Some(&Tensor::from_vec(&[1], vec![1.0f32]).unwrap()),
            ],
        )
        .remove(0);
        assert_eq!(y.shape(), &[2, 1, 1]);
        // (-127 * 127 + 128 * -128) = -32513 * 0.125 + 1; (1 * 127 + 0) * 0.125 + 1.
        assert_eq!(
            y.as_slice::<f32>().unwrap(),
            &[-32513.0 * 0.125 + 1.0, 127.0 * 0.125 + 1.0]
        );
        // f16 scales give an f16 output; a per-column a_scale is refused.
        let h = |v: f32| Tensor::scalar(half::f16::from_f32(v));
        let y = run(
            &MatMulIntegerToFloat,
            &[
                Some(&a),
                Some(&b),
                Some(&h(0.5)),
                Some(&h(0.25)),
                None,
                None,
            ],
        )
        .remove(0);
        assert_eq!(y.dtype(), DType::F16);
        let e = MatMulIntegerToFloat
            .eval(&[
                Some(&a),
                Some(&b),
                Some(&Tensor::from_vec(&[2], vec![1.0f32, 1.0]).unwrap()),
                Some(&f(1.0)),
            ])
            .unwrap_err();
        assert!(e.0.contains("input 2 (a_scale)"), "{e}");
    }
}
