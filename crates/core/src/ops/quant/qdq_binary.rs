//! QdqBinary: a QDQ model's `DequantizeLinear -> Add / Sub / Mul -> QuantizeLinear` island as
//! one op on the 8-bit values (made by the `quantize` pass).
//!
//! The arithmetic is the island's own, in f32 and in its order: each operand dequantized as
//! `(q - zero) * scale`, the float op, then `round_half_even(v / y_scale) + y_zero`, saturated.
//! So the result is the float simulation's bit for bit, unlike com.microsoft QLinearAdd and
//! QLinearMul, which fold the scales and zero points first (onnxruntime's kernels) and round
//! some near-ties the other way; what changes is that no f32 tensor is written between them.

use super::contrib::elementwise::{binary_eval, binary_infer, BINARY_INPUTS};
use crate::op::{output, Prototype};
use crate::ops::elementwise::binary::BinaryKind;
use crate::{op_bail, op_common, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// `Y = Q(DQ(A) kind DQ(B))` with numpy broadcasting; inputs as QLinearAdd's (A, its scale and
/// zero point, B, its pair, Y's pair), all per tensor, the output of A's type.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QdqBinary {
    /// Add, Sub or Mul.
    pub kind: BinaryKind,
}

impl QdqBinary {
    /// Whether the op computes `kind` (the float ops whose result is finite for every pair of
    /// 8-bit values).
    pub fn supports(kind: BinaryKind) -> bool {
        matches!(kind, BinaryKind::Add | BinaryKind::Sub | BinaryKind::Mul)
    }
}

impl Op for QdqBinary {
    fn pointwise(&self) -> bool {
        true
    }

    op_common!(
        "QdqBinary",
        Prototype {
            inputs: BINARY_INPUTS,
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        if !Self::supports(self.kind) {
            op_bail!("computes Add, Sub or Mul, not {}", self.kind.name());
        }
        binary_infer(self, ctx)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let kind = self.kind;
        if !Self::supports(kind) {
            op_bail!("computes Add, Sub or Mul, not {}", kind.name());
        }
        binary_eval(self, inputs, |a, b, aq, bq, yq, _| {
            let (a, b) = (aq.dequantize(a), bq.dequantize(b));
            let v = match kind {
                BinaryKind::Add => a + b,
                BinaryKind::Sub => a - b,
                _ => a * b,
            };
            yq.quantize(v) as f32
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn scalar(v: f32) -> Tensor {
        Tensor::from_vec(&[], vec![v]).unwrap()
    }

    fn i8s(shape: &[usize], v: &[i8]) -> Tensor {
        let bytes: Vec<u8> = v.iter().map(|&x| x as u8).collect();
        Tensor::from_bytes(DType::I8, shape, &bytes).unwrap()
    }

    fn run(kind: BinaryKind, a: &Tensor, b: &Tensor, q: [(f32, i8); 3]) -> Tensor {
        let [(sa, za), (sb, zb), (sy, zy)] = q;
        let (sa, sb, sy) = (scalar(sa), scalar(sb), scalar(sy));
        let (za, zb, zy) = (i8s(&[], &[za]), i8s(&[], &[zb]), i8s(&[], &[zy]));
        let args = [a, &sa, &za, b, &sb, &zb, &sy, &zy].map(Some);
        QdqBinary { kind }.eval(&args).unwrap().remove(0)
    }

    #[test]
    fn add_sub_mul_by_hand() {
        let a = i8s(&[2], &[10, -128]);
        let b = i8s(&[2], &[3, 127]);
        // A = 0.5 (a - 2), B = 0.25 (b + 4), Y step 0.5 with zero point 1.
        let q = [(0.5, 2), (0.25, -4), (0.5, 1)];
        // 4 + 1.75 = 5.75 -> 11.5 -> 12 (half to even) + 1; -65 + 32.75 = -32.25 -> -64.5 -> -64 + 1.
        let y = run(BinaryKind::Add, &a, &b, q);
        assert_eq!(y.to_i64_vec(), vec![13, -63]);
        // 4 - 1.75 = 2.25 -> 4.5 -> 4 + 1; -65 - 32.75 = -97.75 -> -195.5 -> -196, saturated.
        let y = run(BinaryKind::Sub, &a, &b, q);
        assert_eq!(y.to_i64_vec(), vec![5, -128]);
        // 4 * 1.75 = 7 -> 14 + 1; -65 * 32.75 saturates.
        let y = run(BinaryKind::Mul, &a, &b, q);
        assert_eq!(y.to_i64_vec(), vec![15, -128]);
    }

    #[test]
    fn broadcasts_a_value_per_channel() {
        let a = i8s(&[1, 2, 2], &[1, 2, 3, 4]);
        let b = i8s(&[1, 2, 1], &[2, -1]);
        let y = run(BinaryKind::Mul, &a, &b, [(1.0, 0), (1.0, 0), (1.0, 0)]);
        assert_eq!(y.shape(), &[1, 2, 2]);
        assert_eq!(y.to_i64_vec(), vec![2, 4, -3, -4]);
    }

    #[test]
    fn refuses_other_kinds() {
        let a = i8s(&[1], &[1]);
        let s = scalar(1.0);
        let args = [&a, &s, &a, &a, &s, &a, &s, &a].map(Some);
        let op = QdqBinary {
            kind: BinaryKind::Div,
        };
        assert!(op.eval(&args).is_err());
    }
}
