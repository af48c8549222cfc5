//! Det: determinants of the square matrices in the last two dimensions.

use crate::op::{input, output, required, Prototype};
use crate::{op_common, op_ensure, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Det;

fn check(shape: &[usize]) -> OpResult<usize> {
    let r = shape.len();
    op_ensure!(
        r >= 2 && shape[r - 1] == shape[r - 2],
        "input 0 (X): expected [..., M, M], got shape {shape:?}"
    );
    Ok(shape[r - 1])
}

/// Determinant by Gaussian elimination with partial pivoting (`a` is overwritten).
pub fn determinant(a: &mut [f64], n: usize) -> f64 {
    let mut det = 1.0;
    for c in 0..n {
        let p = (c..n)
            .max_by(|&i, &j| a[i * n + c].abs().total_cmp(&a[j * n + c].abs()))
            .unwrap_or(c);
        if a[p * n + c] == 0.0 {
            return 0.0;
        }
        if p != c {
            for k in 0..n {
                a.swap(p * n + k, c * n + k);
            }
            det = -det;
        }
        let piv = a[c * n + c];
        det *= piv;
        for i in c + 1..n {
            let f = a[i * n + c] / piv;
            for k in c..n {
                a[i * n + k] -= f * a[c * n + k];
            }
        }
    }
    det
}

impl Op for Det {
    op_common!(
        "Det",
        Prototype {
            inputs: &[input("X", DTypeSet::FLOAT)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = ctx.shape(0)?;
        check(s)?;
        Ok(vec![TensorInfo::new(
            ctx.dtype(0)?,
            s[..s.len() - 2].to_vec(),
        )])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let n = check(x.shape())?;
        let v = x.to_f64_vec();
        let out_shape = &x.shape()[..x.rank() - 2];
        let count: usize = out_shape.iter().product();
        let out: Vec<f64> = (0..count)
            .map(|b| determinant(&mut v[b * n * n..(b + 1) * n * n].to_vec(), n))
            .collect();
        Ok(vec![Tensor::from_vec(out_shape, out)?.cast(x.dtype())?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn det() {
        let x = Tensor::from_vec(&[2, 2, 2], vec![1.0f32, 2., 3., 4., 0., 1., 1., 0.]).unwrap();
        let y = Det.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[2]);
        assert_eq!(y[0].to_f64_vec(), vec![-2.0, -1.0]);
        let mut m = vec![2.0, 0., 0., 0., 3., 0., 0., 0., 4.];
        assert_eq!(determinant(&mut m, 3), 24.0);
        assert_eq!(determinant(&mut [], 0), 1.0);
    }
}
