//! RotaryEmbedding (opset 23): rotates pairs of features of each head by position-dependent
//! angles given as cos/sin caches. Pairs are `(x[i], x[i + half])`, or adjacent elements when
//! `interleaved`; only the first `rotary_embedding_dim` features rotate.

use crate::op::{input, optional, output, required, Prototype};
use crate::ops::nn::tensor_from_f64;
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RotaryEmbedding {
    pub interleaved: bool,
    /// 0 means the whole head.
    pub rotary_embedding_dim: usize,
    /// Required for 3-D input `[B, S, H*D]`.
    pub num_heads: usize,
}

/// (batch, heads, seq, head size, rotary dim).
type Dims = (usize, usize, usize, usize, usize);

impl RotaryEmbedding {
    fn dims(&self, x: &[usize], cos: &[usize], pos: Option<&[usize]>) -> OpResult<Dims> {
        let (b, h, s, d) = match x.len() {
            4 => (x[0], x[1], x[2], x[3]),
            3 => {
                if self.num_heads == 0 || !x[2].is_multiple_of(self.num_heads) {
                    op_bail!(
                        "3-D input {x:?} needs num_heads dividing its hidden size, got {}",
                        self.num_heads
                    );
                }
                (x[0], self.num_heads, x[1], x[2] / self.num_heads)
            }
            _ => op_bail!("input 0 must be 3-D or 4-D, got {x:?}"),
        };
        let rd = if self.rotary_embedding_dim == 0 {
            d
        } else {
            self.rotary_embedding_dim
        };
        if rd > d || rd % 2 != 0 {
            op_bail!("rotary_embedding_dim {rd} must be even and at most the head size {d}");
        }
        match pos {
            Some(p) => {
                if p != [b, s] || cos.len() != 2 || cos[1] != rd / 2 {
                    op_bail!(
                        "with position_ids {p:?} the caches must be [max_pos, {}], got {cos:?}",
                        rd / 2
                    );
                }
            }
            None => {
                if cos != [b, s, rd / 2] {
                    op_bail!(
                        "inputs 1, 2 (caches) must be [{b}, {s}, {}], got {cos:?}",
                        rd / 2
                    );
                }
            }
        }
        Ok((b, h, s, d, rd))
    }
}

impl Op for RotaryEmbedding {
    op_common!(
        "RotaryEmbedding",
        Prototype {
            inputs: &[
                input("input", DTypeSet::FLOAT),
                input("cos_cache", DTypeSet::FLOAT),
                input("sin_cache", DTypeSet::FLOAT),
                optional("position_ids", DTypeSet::I64),
            ],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let pos = if ctx.has(3) {
            Some(ctx.shape(3)?)
        } else {
            None
        };
        self.dims(ctx.shape(0)?, ctx.shape(1)?, pos)?;
        if ctx.shape(1)? != ctx.shape(2)? {
            op_bail!(
                "inputs 1 and 2 (caches) differ in shape: {:?} vs {:?}",
                ctx.shape(1)?,
                ctx.shape(2)?
            );
        }
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (x, cos, sin) = (
            required(inputs, 0)?,
            required(inputs, 1)?,
            required(inputs, 2)?,
        );
        let pos = inputs.get(3).copied().flatten();
        let (b, h, s, d, rd) = self.dims(x.shape(), cos.shape(), pos.map(|p| p.shape()))?;
        if cos.shape() != sin.shape() {
            op_bail!("inputs 1 and 2 (caches) differ in shape");
        }
        let half = rd / 2;
        let (cv, sv) = (cos.to_f64_vec(), sin.to_f64_vec());
        let pv = pos.map(|p| p.to_i64_vec());
        let max_pos = cos.shape()[0];
        let xv = x.to_f64_vec();
        let mut y = xv.clone();
        let four = x.rank() == 4;
        for bi in 0..b {
            for si in 0..s {
                let row = match &pv {
                    Some(p) => {
                        let q = p[bi * s + si];
                        if q < 0 || q as usize >= max_pos {
                            op_bail!("input 3 (position_ids) holds {q}, outside [0, {max_pos})");
                        }
                        q as usize
                    }
                    None => bi * s + si,
                };
                for hi in 0..h {
                    let base = if four {
                        ((bi * h + hi) * s + si) * d
                    } else {
                        ((bi * s + si) * h + hi) * d
                    };
                    for i in 0..half {
                        let (c, sn) = (cv[row * half + i], sv[row * half + i]);
                        let (a, bidx) = if self.interleaved {
                            (2 * i, 2 * i + 1)
                        } else {
                            (i, i + half)
                        };
                        let (x1, x2) = (xv[base + a], xv[base + bidx]);
                        y[base + a] = c * x1 - sn * x2;
                        y[base + bidx] = sn * x1 + c * x2;
                    }
                }
            }
        }
        Ok(vec![tensor_from_f64(x.dtype(), x.shape(), &y)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarter_turn() {
        // One head of size 4, rotate by 90 degrees: (x0, x2) -> (-x2, x0), (x1, x3) -> (-x3, x1).
        let x = Tensor::from_slice(&[1, 1, 1, 4], &[1.0f32, 2., 3., 4.]).unwrap();
        let c = Tensor::from_slice(&[1, 1, 2], &[0.0f32, 0.]).unwrap();
        let s = Tensor::from_slice(&[1, 1, 2], &[1.0f32, 1.]).unwrap();
        let r = RotaryEmbedding::default();
        let y = r.eval(&[Some(&x), Some(&c), Some(&s)]).unwrap()[0].to_f64_vec();
        assert_eq!(y, vec![-3.0, -4.0, 1.0, 2.0]);
        let r = RotaryEmbedding {
            interleaved: true,
            ..Default::default()
        };
        let y = r.eval(&[Some(&x), Some(&c), Some(&s)]).unwrap()[0].to_f64_vec();
        assert_eq!(y, vec![-2.0, 1.0, -4.0, 3.0]);
    }
}
