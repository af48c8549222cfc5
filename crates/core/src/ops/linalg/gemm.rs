//! Gemm: `Y = alpha * A' * B' + beta * C` with `A'`/`B'` optionally transposed and `C`
//! broadcast (unidirectionally) to `[M, N]`.

use super::tensor_from_sink;
use crate::op::{input, optional, output, required, Prototype};
use crate::ops::elementwise::unary::UnaryKind;
use crate::ops::util::{broadcast_offsets, broadcast_shapes};
use crate::{op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Gemm {
    pub alpha: f32,
    pub beta: f32,
    pub trans_a: bool,
    pub trans_b: bool,
    /// Fused epilogue activation, applied after adding C (set by the fusion pass).
    pub activation: Option<UnaryKind>,
}

impl Default for Gemm {
    fn default() -> Self {
        Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: false,
            activation: None,
        }
    }
}

/// `(M, K, N)` of a Gemm, checking C broadcasts to `[M, N]`.
pub fn gemm_dims(
    g: &Gemm,
    a: &[usize],
    b: &[usize],
    c: Option<&[usize]>,
) -> OpResult<(usize, usize, usize)> {
    op_ensure!(a.len() == 2, "input 0 (A) must be 2-D, got shape {a:?}");
    op_ensure!(b.len() == 2, "input 1 (B) must be 2-D, got shape {b:?}");
    let (m, ka) = if g.trans_a {
        (a[1], a[0])
    } else {
        (a[0], a[1])
    };
    let (kb, n) = if g.trans_b {
        (b[1], b[0])
    } else {
        (b[0], b[1])
    };
    op_ensure!(
        ka == kb,
        "inner dimensions differ: A {a:?} (transA={}) and B {b:?} (transB={})",
        g.trans_a,
        g.trans_b
    );
    if let Some(c) = c {
        let ok = c.len() <= 2 && broadcast_shapes(c, &[m, n]).is_ok_and(|s| s == [m, n]);
        op_ensure!(
            ok,
            "input 2 (C) of shape {c:?} does not broadcast to [{m}, {n}]"
        );
    }
    Ok((m, ka, n))
}

const GEMM_TYPES: DTypeSet = DTypeSet(
    DTypeSet::FLOAT.0 | DType::I32.bit() | DType::I64.bit() | DType::U32.bit() | DType::U64.bit(),
);

impl Op for Gemm {
    op_common!(
        "Gemm",
        Prototype {
            inputs: &[
                input("A", GEMM_TYPES),
                input("B", GEMM_TYPES),
                optional("C", GEMM_TYPES),
            ],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = ctx.dtype(0)?;
        for i in [1, 2] {
            if ctx.has(i) {
                op_ensure!(
                    ctx.dtype(i)? == dt,
                    "input {i} is {}, expected {dt} like A",
                    ctx.dtype(i)?
                );
            }
        }
        let c = if ctx.has(2) {
            Some(ctx.shape(2)?)
        } else {
            None
        };
        let (m, _, n) = gemm_dims(self, ctx.shape(0)?, ctx.shape(1)?, c)?;
        Ok(vec![TensorInfo::new(dt, [m, n])])
    }

    /// Computed in f64 (also for the integer types, whose alpha/beta are floats anyway).
    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 1)?;
        let c = inputs.get(2).copied().flatten();
        let (m, k, n) = gemm_dims(self, a.shape(), b.shape(), c.map(|c| c.shape()))?;
        let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
        let cv = c.map(|c| (c.to_f64_vec(), broadcast_offsets(c.shape(), &[m, n])));
        let (alpha, beta) = (self.alpha as f64, self.beta as f64);
        let y = tensor_from_sink(a.dtype(), &[m, n], |sink| {
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0.0;
                    for p in 0..k {
                        let x = if self.trans_a {
                            av[p * m + i]
                        } else {
                            av[i * k + p]
                        };
                        let y = if self.trans_b {
                            bv[j * k + p]
                        } else {
                            bv[p * n + j]
                        };
                        acc += x * y;
                    }
                    let mut v = alpha * acc;
                    if let Some((cv, off)) = &cv {
                        v += beta * cv[off[i * n + j]];
                    }
                    sink(UnaryKind::apply_optional(self.activation, v));
                }
            }
        })?;
        Ok(vec![y])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        match (inputs.first(), outputs.first()) {
            (Some(Some(a)), Some(y)) => {
                let k = if self.trans_a { a.shape[0] } else { a.shape[1] };
                2 * (y.numel() as u64).saturating_mul(k as u64)
            }
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(shape, v).unwrap()
    }

    #[test]
    fn transposes_alpha_beta_and_bias_broadcast() {
        let a = t(&[2, 3], vec![1., 2., 3., 4., 5., 6.]);
        let b = t(&[3, 2], vec![7., 8., 9., 10., 11., 12.]);
        let y = Gemm::default().eval(&[Some(&a), Some(&b), None]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[58., 64., 139., 154.]);
        // Same product from transposed storage, alpha 0.5, beta 2, C a row vector.
        let at = t(&[3, 2], vec![1., 4., 2., 5., 3., 6.]);
        let bt = t(&[2, 3], vec![7., 9., 11., 8., 10., 12.]);
        let c = t(&[2], vec![1., -1.]);
        let g = Gemm {
            alpha: 0.5,
            beta: 2.0,
            trans_a: true,
            trans_b: true,
            activation: None,
        };
        let y = g.eval(&[Some(&at), Some(&bt), Some(&c)]).unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[31., 30., 71.5, 75.]);
        // Column C [2, 1], scalar C.
        let c = t(&[2, 1], vec![10., 20.]);
        let y = Gemm::default()
            .eval(&[Some(&a), Some(&b), Some(&c)])
            .unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[68., 74., 159., 174.]);
        let c = Tensor::scalar(1.0f32);
        let y = Gemm::default()
            .eval(&[Some(&a), Some(&b), Some(&c)])
            .unwrap();
        assert_eq!(y[0].as_slice::<f32>().unwrap(), &[59., 65., 140., 155.]);
        // Bad C and mismatched K.
        let c = t(&[3], vec![0.; 3]);
        assert!(Gemm::default()
            .eval(&[Some(&a), Some(&b), Some(&c)])
            .is_err());
        assert!(Gemm::default().eval(&[Some(&a), Some(&a), None]).is_err());
    }

    #[test]
    fn integer_gemm() {
        let a = Tensor::from_vec(&[1, 2], vec![3i32, 4]).unwrap();
        let b = Tensor::from_vec(&[2, 1], vec![5i32, 6]).unwrap();
        let c = Tensor::from_vec(&[1], vec![-1i32]).unwrap();
        let y = Gemm::default()
            .eval(&[Some(&a), Some(&b), Some(&c)])
            .unwrap();
        assert_eq!(y[0].as_slice::<i32>().unwrap(), &[38]);
    }
}
