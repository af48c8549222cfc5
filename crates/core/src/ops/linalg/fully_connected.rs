//! FullyConnected (ferrolite-specific, made by the `fuse-matmul-add` pass): `Y = X · W + bias`
//! over the last axis of X, then an optional epilogue activation.
//!
//! X is `[..., K]`, W a 2-D `[K, N]` (constant in practice, so kernels prepare it once), bias an
//! optional `[N]`; Y is `[..., N]`. A 1-D X gives a 1-D Y, as MatMul does.

use super::tensor_from_sink;
use crate::op::{input, optional, output, required, Prototype};
use crate::ops::elementwise::unary::UnaryKind;
use crate::{op_common, op_ensure, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FullyConnected {
    /// Fused epilogue activation, applied after the bias.
    pub activation: Option<UnaryKind>,
}

/// Rows (`M`: the product of X's leading dims), `K`, `N` and the output shape.
pub fn fc_dims(
    x: &[usize],
    w: &[usize],
    bias: Option<&[usize]>,
) -> OpResult<(usize, usize, usize, Vec<usize>)> {
    op_ensure!(
        !x.is_empty(),
        "input 0 (X) must have rank >= 1, got a scalar"
    );
    op_ensure!(
        w.len() == 2,
        "input 1 (W) must be 2-D [K, N], got shape {w:?}"
    );
    let k = x[x.len() - 1];
    op_ensure!(
        w[0] == k,
        "input 1 (W) of shape {w:?} needs {k} rows to match X's last dim (X is {x:?})"
    );
    let n = w[1];
    if let Some(b) = bias {
        op_ensure!(b == [n], "input 2 (bias) must have shape [{n}], got {b:?}");
    }
    let m: usize = x[..x.len() - 1].iter().product();
    let mut out = x[..x.len() - 1].to_vec();
    out.push(n);
    Ok((m, k, n, out))
}

impl Op for FullyConnected {
    op_common!(
        "FullyConnected",
        Prototype {
            inputs: &[
                input("X", DTypeSet::FLOAT),
                input("W", DTypeSet::FLOAT),
                optional("bias", DTypeSet::FLOAT),
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
                    "input {i} is {}, expected {dt} like X",
                    ctx.dtype(i)?
                );
            }
        }
        let bias = if ctx.has(2) {
            Some(ctx.shape(2)?)
        } else {
            None
        };
        let (_, _, _, out) = fc_dims(ctx.shape(0)?, ctx.shape(1)?, bias)?;
        Ok(vec![TensorInfo::new(dt, out)])
    }

    /// Computed in f64 and rounded once.
    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let w = required(inputs, 1)?;
        let b = inputs.get(2).copied().flatten();
        for (i, t) in [(1, Some(w)), (2, b)] {
            if let Some(t) = t {
                op_ensure!(
                    t.dtype() == x.dtype(),
                    "input {i} is {}, expected {} like X",
                    t.dtype(),
                    x.dtype()
                );
            }
        }
        let (m, k, n, out) = fc_dims(x.shape(), w.shape(), b.map(|b| b.shape()))?;
        let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
        let bv = b.map(|b| b.to_f64_vec());
        let y = tensor_from_sink(x.dtype(), &out, |sink| {
            for i in 0..m {
                for j in 0..n {
                    let mut acc = bv.as_ref().map_or(0.0, |b| b[j]);
                    for p in 0..k {
                        acc += xv[i * k + p] * wv[p * n + j];
                    }
                    sink(UnaryKind::apply_optional(self.activation, acc));
                }
            }
        })?;
        Ok(vec![y])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        super::matmul::matmul_flops(inputs, outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn t(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_slice(shape, v).unwrap()
    }

    #[test]
    fn hand_computed_product_bias_and_activation() {
        // X [2, 1, 3] · W [3, 2] + b [2]
        let x = t(&[2, 1, 3], &[1.0, 2.0, 3.0, -1.0, 0.0, 1.0]);
        let w = t(&[3, 2], &[1.0, 0.5, 0.0, -1.0, 2.0, 1.0]);
        let b = t(&[2], &[0.5, -0.5]);
        let fc = FullyConnected::default();
        let y = fc.eval(&[Some(&x), Some(&w), Some(&b)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[2, 1, 2]);
        // row 0: [1+0+6, 0.5-2+3] + b = [7.5, 1.0]; row 1: [-1+0+2, -0.5+0+1] + b = [1.5, 0.0]
        assert_eq!(y.as_slice::<f32>().unwrap(), &[7.5, 1.0, 1.5, 0.0]);
        let relu = FullyConnected {
            activation: Some(UnaryKind::Clip { min: 0.0, max: 6.0 }),
        };
        let y = relu.eval(&[Some(&x), Some(&w), None]).unwrap().remove(0);
        // Without bias: [7, 1.5, 1, 0.5] clipped to [0, 6].
        assert_eq!(y.as_slice::<f32>().unwrap(), &[6.0, 1.5, 1.0, 0.5]);
    }

    #[test]
    fn one_d_input_f64_and_shape_errors() {
        let x = Tensor::from_slice(&[2], &[1.0f64, -2.0]).unwrap();
        let w = Tensor::from_slice(&[2, 3], &[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let y = FullyConnected::default()
            .eval(&[Some(&x), Some(&w)])
            .unwrap()
            .remove(0);
        assert_eq!(y.shape(), &[3]);
        assert_eq!(y.as_slice::<f64>().unwrap(), &[-7.0, -8.0, -9.0]);
        let info = |s: &[usize]| crate::InferInput {
            dtype: DType::F32,
            shape: s.to_vec().leak(),
            value: None,
        };
        let ok = [Some(info(&[4, 5])), Some(info(&[5, 7])), Some(info(&[7]))];
        let out = FullyConnected::default()
            .infer(&InferCtx { inputs: &ok })
            .unwrap();
        assert_eq!(out[0].shape, vec![4, 7]);
        for bad in [
            [Some(info(&[4, 5])), Some(info(&[6, 7])), None],
            [
                Some(info(&[4, 5])),
                Some(info(&[5, 7])),
                Some(info(&[1, 7])),
            ],
            [Some(info(&[])), Some(info(&[5, 7])), None],
            [Some(info(&[4, 5])), Some(info(&[5, 7, 1])), None],
        ] {
            assert!(FullyConnected::default()
                .infer(&InferCtx { inputs: &bad })
                .is_err());
        }
        assert!(FullyConnected::default()
            .eval(&[Some(&t(&[2, 2], &[0.0; 4])), Some(&t(&[3, 1], &[0.0; 3]))])
            .is_err());
    }
}
