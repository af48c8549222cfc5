//! MatMul (numpy `matmul` semantics) and MatMulInteger.
//!
//! 1-D operands are promoted (`[k]` to `[1, k]` on the left, `[k, 1]` on the right) and the
//! promoted dimension is dropped from the result; leading batch dimensions broadcast.

use super::{tensor_from_sink, tensor_from_sink_i64};
use crate::op::{input, optional, output, required, Prototype};
use crate::ops::util::{broadcast_offsets, broadcast_shapes};
use crate::{op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// Resolved shapes of a (batched, broadcast) matrix product.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MatMulShapes {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// Batch dimensions of A and B (without the matrix dimensions) and their broadcast.
    pub a_batch: Vec<usize>,
    pub b_batch: Vec<usize>,
    pub batch: Vec<usize>,
    pub output: Vec<usize>,
}

impl MatMulShapes {
    pub fn new(a: &[usize], b: &[usize]) -> OpResult<MatMulShapes> {
        op_ensure!(
            !a.is_empty(),
            "input 0 (A) must have rank 1 or more, got a scalar"
        );
        op_ensure!(
            !b.is_empty(),
            "input 1 (B) must have rank 1 or more, got a scalar"
        );
        let (m, ka, a_batch) = if a.len() == 1 {
            (1, a[0], vec![])
        } else {
            (a[a.len() - 2], a[a.len() - 1], a[..a.len() - 2].to_vec())
        };
        let (kb, n, b_batch) = if b.len() == 1 {
            (b[0], 1, vec![])
        } else {
            (b[b.len() - 2], b[b.len() - 1], b[..b.len() - 2].to_vec())
        };
        op_ensure!(
            ka == kb,
            "inner dimensions differ: input 0 (A) {a:?} has {ka} columns, input 1 (B) {b:?} has {kb} rows"
        );
        let batch = broadcast_shapes(&a_batch, &b_batch)?;
        op_ensure!(
            batch
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
                .is_some(),
            "the batch dimensions {batch:?} have too many elements"
        );
        let mut output = batch.clone();
        if a.len() > 1 {
            output.push(m);
        }
        if b.len() > 1 {
            output.push(n);
        }
        Ok(MatMulShapes {
            m,
            k: ka,
            n,
            a_batch,
            b_batch,
            batch,
            output,
        })
    }

    /// For each batch of the output (row-major), the index of the A matrix and the B matrix.
    /// None when the output is empty: a zero-sized matrix makes the batches nothing to compute,
    /// however many there are.
    pub fn batch_indices(&self) -> (Vec<usize>, Vec<usize>) {
        if self.m == 0 || self.n == 0 {
            return (Vec::new(), Vec::new());
        }
        (
            broadcast_offsets(&self.a_batch, &self.batch),
            broadcast_offsets(&self.b_batch, &self.batch),
        )
    }
}

/// Plain matrix product over row-major `a` and `b`; pushes the output elements in order.
pub fn matmul_reference<T: Copy>(
    s: &MatMulShapes,
    a: &[T],
    b: &[T],
    zero: T,
    mul_add: impl Fn(T, T, T) -> T,
    sink: &mut dyn FnMut(T),
) {
    let (ai, bi) = s.batch_indices();
    for (&ia, &ib) in ai.iter().zip(&bi) {
        let a_off = ia * s.m * s.k;
        let b_off = ib * s.k * s.n;
        for i in 0..s.m {
            for j in 0..s.n {
                let mut acc = zero;
                for p in 0..s.k {
                    acc = mul_add(acc, a[a_off + i * s.k + p], b[b_off + p * s.n + j]);
                }
                sink(acc);
            }
        }
    }
}

/// ONNX MatMul.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MatMul;

impl Op for MatMul {
    op_common!(
        "MatMul",
        Prototype {
            inputs: &[input("A", DTypeSet::NUMERIC), input("B", DTypeSet::NUMERIC)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = ctx.dtype(0)?;
        op_ensure!(
            ctx.dtype(1)? == dt,
            "input 1 (B) is {}, expected {dt} like A",
            ctx.dtype(1)?
        );
        let s = MatMulShapes::new(ctx.shape(0)?, ctx.shape(1)?)?;
        Ok(vec![TensorInfo::new(dt, s.output)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 1)?;
        op_ensure!(
            a.dtype() == b.dtype(),
            "input 1 (B) is {}, expected {} like A",
            b.dtype(),
            a.dtype()
        );
        let s = MatMulShapes::new(a.shape(), b.shape())?;
        let y = if a.dtype().is_float() {
            let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
            tensor_from_sink(a.dtype(), &s.output, |sink| {
                matmul_reference(&s, &av, &bv, 0.0, |acc, x, y| acc + x * y, sink)
            })?
        } else {
            let (av, bv) = (a.to_i64_vec(), b.to_i64_vec());
            tensor_from_sink_i64(a.dtype(), &s.output, |sink| {
                matmul_reference(
                    &s,
                    &av,
                    &bv,
                    0i64,
                    |acc, x, y| acc.wrapping_add(x.wrapping_mul(y)),
                    sink,
                )
            })?
        };
        Ok(vec![y])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        matmul_flops(inputs, outputs)
    }
}

pub(crate) fn matmul_flops(inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
    match (inputs.first(), outputs.first()) {
        (Some(Some(a)), Some(y)) => {
            let k = a.shape.last().copied().unwrap_or(1) as u64;
            2 * (y.numel() as u64).saturating_mul(k)
        }
        _ => 0,
    }
}

/// ONNX MatMulInteger: 8-bit matrix product with zero points, accumulating to i32.
///
/// `a_zero_point` is a scalar or per row of A (`[M]`, or `[..., M, 1]`); `b_zero_point` a
/// scalar or per column of B (`[N]`, or `[..., 1, N]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MatMulInteger;

const Q8: DTypeSet = DTypeSet(DType::U8.bit() | DType::I8.bit());

/// The shape a zero point broadcasts from against its operand of shape `of`.
fn zero_point_shape(zp: &[usize], of: &[usize], per_row: bool, what: &str) -> OpResult<Vec<usize>> {
    let numel: usize = zp.iter().product();
    let shape = if numel == 1 {
        vec![]
    } else if zp.len() == 1 && per_row && of.len() >= 2 {
        vec![zp[0], 1]
    } else {
        zp.to_vec()
    };
    let ok = broadcast_shapes(&shape, of).is_ok_and(|s| s == of) && shape.len() <= of.len();
    op_ensure!(
        ok,
        "{what} of shape {zp:?} does not fit its operand of shape {of:?}"
    );
    Ok(shape)
}

/// The operand with its zero point subtracted, as i64.
fn centered(t: &Tensor, zp: Option<&Tensor>, per_row: bool, what: &str) -> OpResult<Vec<i64>> {
    let mut v = t.to_i64_vec();
    if let Some(z) = zp {
        let shape = zero_point_shape(z.shape(), t.shape(), per_row, what)?;
        let zv = z.to_i64_vec();
        for (x, o) in v.iter_mut().zip(broadcast_offsets(&shape, t.shape())) {
            *x -= zv[o];
        }
    }
    Ok(v)
}

impl Op for MatMulInteger {
    op_common!(
        "MatMulInteger",
        Prototype {
            inputs: &[
                input("A", Q8),
                input("B", Q8),
                optional("a_zero_point", Q8),
                optional("b_zero_point", Q8),
            ],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = MatMulShapes::new(ctx.shape(0)?, ctx.shape(1)?)?;
        for (i, of, per_row, what) in [
            (2, 0, true, "input 2 (a_zero_point)"),
            (3, 1, false, "input 3 (b_zero_point)"),
        ] {
            if ctx.has(i) {
                op_ensure!(
                    ctx.dtype(i)? == ctx.dtype(of)?,
                    "{what} is {}, expected {} like input {of}",
                    ctx.dtype(i)?,
                    ctx.dtype(of)?
                );
                zero_point_shape(ctx.shape(i)?, ctx.shape(of)?, per_row, what)?;
            }
        }
        Ok(vec![TensorInfo::new(DType::I32, s.output)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 1)?;
        let s = MatMulShapes::new(a.shape(), b.shape())?;
        let get = |i: usize| inputs.get(i).copied().flatten();
        let av = centered(a, get(2), true, "input 2 (a_zero_point)")?;
        let bv = centered(b, get(3), false, "input 3 (b_zero_point)")?;
        let y = tensor_from_sink_i64(DType::I32, &s.output, |sink| {
            matmul_reference(
                &s,
                &av,
                &bv,
                0i64,
                |acc, x, y| acc.wrapping_add(x * y),
                sink,
            )
        })?;
        Ok(vec![y])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        matmul_flops(inputs, outputs)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn hostile_batch_dims_are_errors_or_nothing_to_compute() {
        // 2^40 batches of 0x3 matrices: an empty output, and no batch list to build.
        let s = MatMulShapes::new(&[1 << 20, 1 << 20, 0, 3], &[3, 4]).unwrap();
        assert_eq!(s.batch_indices(), (vec![], vec![]));
        // Batch dims whose product overflows.
        let e = MatMulShapes::new(&[1 << 40, 1 << 40, 0, 3], &[1, 1 << 40, 3, 4]).unwrap_err();
        assert!(e.0.contains("too many elements"), "{e}");
    }

    use super::*;

    fn mm(a: &Tensor, b: &Tensor) -> OpResult<Tensor> {
        Ok(MatMul.eval(&[Some(a), Some(b)])?.remove(0))
    }

    #[test]
    fn two_d_and_promotion() {
        let a = Tensor::from_vec(&[2, 3], vec![1.0f32, 2., 3., 4., 5., 6.]).unwrap();
        let b = Tensor::from_vec(&[3, 2], vec![7.0f32, 8., 9., 10., 11., 12.]).unwrap();
        let y = mm(&a, &b).unwrap();
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[58., 64., 139., 154.]);
        // [3] x [3, 2] -> [2]; [2, 3] x [3] -> [2]; [3] x [3] -> scalar.
        let v = Tensor::from_vec(&[3], vec![1.0f32, 0., -1.]).unwrap();
        let y = mm(&v, &b).unwrap();
        assert_eq!(
            (y.shape(), y.as_slice::<f32>().unwrap()),
            (&[2][..], &[-4.0f32, -4.][..])
        );
        let y = mm(&a, &v).unwrap();
        assert_eq!(
            (y.shape(), y.as_slice::<f32>().unwrap()),
            (&[2][..], &[-2.0f32, -2.][..])
        );
        let y = mm(&v, &v).unwrap();
        assert_eq!(
            (y.shape(), y.as_slice::<f32>().unwrap()),
            (&[][..], &[2.0f32][..])
        );
        assert!(mm(&a, &a).is_err());
        assert!(mm(&Tensor::scalar(1.0f32), &a).is_err());
    }

    #[test]
    fn batch_broadcast_and_ints() {
        // A [2, 1, 1, 2] x B [3, 2, 1] -> [2, 3, 1, 1].
        let a = Tensor::from_vec(&[2, 1, 1, 2], vec![1i64, 2, 3, 4]).unwrap();
        let b = Tensor::from_vec(&[3, 2, 1], vec![1i64, 1, 10, 0, 0, 100]).unwrap();
        let y = mm(&a, &b).unwrap();
        assert_eq!(y.shape(), &[2, 3, 1, 1]);
        assert_eq!(y.as_slice::<i64>().unwrap(), &[3, 10, 200, 7, 30, 400]);
        // Wrapping like the machine type.
        let a = Tensor::from_vec(&[1, 1], vec![200u8]).unwrap();
        let b = Tensor::from_vec(&[1, 1], vec![2u8]).unwrap();
        assert_eq!(mm(&a, &b).unwrap().as_slice::<u8>().unwrap(), &[144]);
        assert!(mm(
            &Tensor::from_vec(&[2, 2, 2], vec![0.0f32; 8]).unwrap(),
            &Tensor::from_vec(&[3, 2, 2], vec![0.0f32; 12]).unwrap()
        )
        .is_err());
    }

    #[test]
    fn matmul_integer_zero_points() {
        // ONNX test_matmulinteger.
        let a = Tensor::from_vec(&[4, 3], vec![11u8, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0]).unwrap();
        let b = Tensor::from_vec(&[3, 2], vec![1u8, 4, 2, 5, 3, 6]).unwrap();
        let az = Tensor::scalar(12u8);
        let bz = Tensor::scalar(0u8);
        let y = MatMulInteger
            .eval(&[Some(&a), Some(&b), Some(&az), Some(&bz)])
            .unwrap();
        assert_eq!(y[0].dtype(), DType::I32);
        assert_eq!(
            y[0].as_slice::<i32>().unwrap(),
            &[-38, -83, -44, -98, -50, -113, -56, -128]
        );
        // Per-row A and per-column B zero points.
        let a = Tensor::from_vec(&[2, 1], vec![5i8, 5]).unwrap();
        let b = Tensor::from_vec(&[1, 2], vec![3i8, 3]).unwrap();
        let az = Tensor::from_vec(&[2], vec![1i8, 2]).unwrap();
        let bz = Tensor::from_vec(&[2], vec![0i8, 1]).unwrap();
        let y = MatMulInteger
            .eval(&[Some(&a), Some(&b), Some(&az), Some(&bz)])
            .unwrap();
        assert_eq!(y[0].as_slice::<i32>().unwrap(), &[12, 8, 9, 6]);
        let bad = Tensor::from_vec(&[3], vec![0i8; 3]).unwrap();
        assert!(MatMulInteger
            .eval(&[Some(&a), Some(&b), Some(&bad), None])
            .is_err());
    }
}
