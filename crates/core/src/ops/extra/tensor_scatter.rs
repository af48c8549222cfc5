//! TensorScatter (opset 24): writes `update` into a copy of `past_cache` along `axis`, starting
//! per batch at `write_indices[b]` (wrapping around in circular mode).

use crate::op::{input, normalize_axis, optional, output, required, Prototype};
use crate::{
    dispatch_all, op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TensorScatter {
    pub axis: i64,
    pub circular: bool,
}

impl Default for TensorScatter {
    fn default() -> Self {
        TensorScatter {
            axis: -2,
            circular: false,
        }
    }
}

impl TensorScatter {
    fn check(&self, c: &[usize], u: &[usize]) -> OpResult<usize> {
        let axis = normalize_axis(self.axis, c.len())?;
        if axis == 0 {
            op_bail!("axis must not be the batch axis 0");
        }
        let ok = c.len() == u.len()
            && c.iter()
                .zip(u)
                .enumerate()
                .all(|(i, (a, b))| if i == axis { b <= a } else { a == b });
        if !ok {
            op_bail!(
                "input 1 (update) {u:?} does not fit input 0 (past_cache) {c:?} along axis {axis}"
            );
        }
        Ok(axis)
    }
}

impl Op for TensorScatter {
    op_common!(
        "TensorScatter",
        Prototype {
            inputs: &[
                input("past_cache", DTypeSet::ALL),
                input("update", DTypeSet::ALL),
                optional("write_indices", DTypeSet::I64),
            ],
            outputs: &[output("present_cache")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        self.check(ctx.shape(0)?, ctx.shape(1)?)?;
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (c, u) = (required(inputs, 0)?, required(inputs, 1)?);
        if c.dtype() != u.dtype() {
            op_bail!("inputs 0 and 1 differ in dtype");
        }
        let axis = self.check(c.shape(), u.shape())?;
        let cs = c.shape();
        let batch = cs[0];
        let idx = match inputs.get(2).copied().flatten() {
            Some(w) => w.to_i64_vec(),
            None => vec![0; batch],
        };
        if idx.len() != batch {
            op_bail!(
                "input 2 (write_indices) must have {batch} elements, got {}",
                idx.len()
            );
        }
        let outer: usize = cs[..axis].iter().product();
        let per_batch = outer / batch.max(1);
        let (max_len, len) = (cs[axis], u.shape()[axis]);
        let inner: usize = cs[axis + 1..].iter().product();
        let mut out = c.clone();
        dispatch_all!(c.dtype(), T => {
            let uv = u.as_slice::<T>()?;
            let ov = out.as_mut_slice::<T>()?;
            for o in 0..outer {
                let start = idx[o / per_batch.max(1)];
                for s in 0..len {
                    let mut at = start + s as i64;
                    if self.circular {
                        at = at.rem_euclid(max_len.max(1) as i64);
                    }
                    if at < 0 || at as usize >= max_len {
                        op_bail!("write index {at} is outside the cache length {max_len}");
                    }
                    let dst = (o * max_len + at as usize) * inner;
                    let src = (o * len + s) * inner;
                    ov[dst..dst + inner].copy_from_slice(&uv[src..src + inner]);
                }
            }
        });
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_and_circular() {
        let c = Tensor::from_slice(&[1, 3, 1], &[0.0f32, 0., 0.]).unwrap();
        let u = Tensor::from_slice(&[1, 2, 1], &[1.0f32, 2.]).unwrap();
        let w = Tensor::from_slice(&[1], &[2i64]).unwrap();
        let lin = TensorScatter::default();
        assert!(lin.eval(&[Some(&c), Some(&u), Some(&w)]).is_err());
        let circ = TensorScatter {
            circular: true,
            ..Default::default()
        };
        let y = circ.eval(&[Some(&c), Some(&u), Some(&w)]).unwrap()[0].to_f64_vec();
        assert_eq!(y, vec![2.0, 0.0, 1.0]);
        let y = lin.eval(&[Some(&c), Some(&u)]).unwrap()[0].to_f64_vec();
        assert_eq!(y, vec![1.0, 2.0, 0.0]);
    }
}
