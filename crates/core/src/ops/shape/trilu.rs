//! Trilu: keep the upper (`j - i >= k`) or lower (`j - i <= k`) triangle of the last two axes,
//! zeroing the rest.

use super::common::scalar_i64;
use crate::op::{input, optional, output, required, Prototype};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Trilu {
    pub upper: bool,
}

impl Default for Trilu {
    fn default() -> Self {
        Trilu { upper: true }
    }
}

impl Op for Trilu {
    op_common!(
        "Trilu",
        Prototype {
            inputs: &[input("input", DTypeSet::ALL), optional("k", DTypeSet::I64)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        if ctx.shape(0)?.len() < 2 {
            op_bail!("input 0 must have rank >= 2, got {:?}", ctx.shape(0)?);
        }
        ctx.like(0).map(|i| vec![i])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let s = x.shape();
        if s.len() < 2 {
            op_bail!("input 0 must have rank >= 2, got {s:?}");
        }
        let k = match inputs.get(1).copied().flatten() {
            Some(t) => scalar_i64(t, "input 1 (k)")? as i128,
            None => 0,
        };
        let (rows, cols) = (s[s.len() - 2], s[s.len() - 1]);
        let es = x.dtype().size();
        let mut out = x.clone();
        let ob = out.bytes_mut();
        for (e, chunk) in ob.chunks_exact_mut(es).enumerate() {
            let j = (e % cols.max(1)) as i128;
            let i = ((e / cols.max(1)) % rows.max(1)) as i128;
            let keep = if self.upper { j - i >= k } else { j - i <= k };
            if !keep {
                // All-zero bytes are zero (or false) in every dtype.
                chunk.fill(0);
            }
        }
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(upper: bool, k: Option<i64>) -> Vec<i64> {
        let x = Tensor::from_vec(&[3, 3], (1..=9).collect::<Vec<i64>>()).unwrap();
        let kt = k.map(Tensor::scalar);
        Trilu { upper }.eval(&[Some(&x), kt.as_ref()]).unwrap()[0].to_i64_vec()
    }

    #[test]
    fn triangles() {
        assert_eq!(run(true, None), vec![1, 2, 3, 0, 5, 6, 0, 0, 9]);
        assert_eq!(run(false, None), vec![1, 0, 0, 4, 5, 0, 7, 8, 9]);
        assert_eq!(run(true, Some(1)), vec![0, 2, 3, 0, 0, 6, 0, 0, 0]);
        assert_eq!(run(false, Some(-1)), vec![0, 0, 0, 4, 0, 0, 7, 8, 0]);
        assert_eq!(run(true, Some(-10)), (1..=9).collect::<Vec<i64>>());
        assert_eq!(run(false, Some(i64::MIN)), vec![0; 9]);
        // Batched, non-square.
        let x = Tensor::from_vec(&[2, 1, 2], vec![1.0f32, 2., 3., 4.]).unwrap();
        let y = Trilu { upper: false }.eval(&[Some(&x), None]).unwrap();
        assert_eq!(y[0].to_f64_vec(), vec![1., 0., 3., 0.]);
    }
}
