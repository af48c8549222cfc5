//! Attention (opset 23): scaled dot-product attention over 3-D (`[B, S, H*D]`) or 4-D
//! (`[B, H, S, D]`) inputs, with grouped KV heads, masks, causal masking, softcap and a KV cache.

use crate::op::{input, optional, optional_output, output, required, Prototype};
use crate::ops::nn::tensor_from_f64;
use crate::ops::util::{broadcast_offsets, broadcast_shapes};
use crate::{op_bail, op_common, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Attention {
    pub is_causal: bool,
    /// Head counts; required for 3-D inputs.
    pub q_num_heads: Option<usize>,
    pub kv_num_heads: Option<usize>,
    /// Which intermediate the optional 4th output holds: 0 raw `QK^T*scale`, 1 after adding the
    /// mask, 2 after softcap, 3 after softmax.
    pub qk_matmul_output_mode: i64,
    /// Defaults to `1/sqrt(head_size)`.
    pub scale: Option<f64>,
    /// `softcap * tanh(x / softcap)` on the scores when positive.
    pub softcap: f64,
    /// The reference computes in f64 whatever precision is requested.
    pub softmax_precision: Option<i64>,
    pub num_outputs: usize,
}

impl Default for Attention {
    fn default() -> Self {
        Attention {
            is_causal: false,
            q_num_heads: None,
            kv_num_heads: None,
            qk_matmul_output_mode: 0,
            scale: None,
            softcap: 0.0,
            softmax_precision: None,
            num_outputs: 1,
        }
    }
}

/// Sizes of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
struct Dims {
    rank: usize,
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    past: usize,
    d: usize,
    dv: usize,
}

impl Dims {
    fn total(&self) -> usize {
        self.past + self.skv
    }
}

impl Attention {
    fn dims(
        &self,
        q: &[usize],
        k: &[usize],
        v: &[usize],
        past: Option<&[usize]>,
    ) -> OpResult<Dims> {
        if q.len() != k.len() || q.len() != v.len() || !(q.len() == 3 || q.len() == 4) {
            op_bail!("Q, K and V must all be 3-D or all 4-D, got {q:?}, {k:?}, {v:?}");
        }
        let mut dm = if q.len() == 4 {
            Dims {
                rank: 4,
                b: q[0],
                hq: q[1],
                hkv: k[1],
                sq: q[2],
                skv: k[2],
                past: 0,
                d: q[3],
                dv: v[3],
            }
        } else {
            let (Some(hq), Some(hkv)) = (self.q_num_heads, self.kv_num_heads) else {
                op_bail!("3-D inputs need q_num_heads and kv_num_heads");
            };
            if hq == 0
                || hkv == 0
                || !q[2].is_multiple_of(hq)
                || !k[2].is_multiple_of(hkv)
                || !v[2].is_multiple_of(hkv)
            {
                op_bail!(
                    "hidden sizes {}, {}, {} are not divisible by the head counts {hq}, {hkv}",
                    q[2],
                    k[2],
                    v[2]
                );
            }
            Dims {
                rank: 3,
                b: q[0],
                hq,
                hkv,
                sq: q[1],
                skv: k[1],
                past: 0,
                d: q[2] / hq,
                dv: v[2] / hkv,
            }
        };
        let vdims = if dm.rank == 4 {
            (v[0], v[1], v[2])
        } else {
            (v[0], dm.hkv, v[1])
        };
        let kd = if dm.rank == 4 { k[3] } else { k[2] / dm.hkv };
        if k[0] != dm.b || vdims != (dm.b, dm.hkv, dm.skv) || kd != dm.d {
            op_bail!("inputs 1 (K) and 2 (V) have shapes {k:?}, {v:?} that do not match Q {q:?}");
        }
        if dm.hkv == 0 || dm.hq % dm.hkv != 0 {
            op_bail!(
                "q heads {} must be a multiple of kv heads {}",
                dm.hq,
                dm.hkv
            );
        }
        if let Some(p) = past {
            if p.len() != 4 || p[0] != dm.b || p[1] != dm.hkv || p[3] != dm.d {
                op_bail!(
                    "input 4 (past_key) must be [{}, {}, P, {}], got {p:?}",
                    dm.b,
                    dm.hkv,
                    dm.d
                );
            }
            dm.past = p[2];
        }
        Ok(dm)
    }

    fn mask_ok(&self, m: &[usize], dm: &Dims) -> OpResult<Vec<usize>> {
        if m.len() < 2 || m.len() > 4 || m[m.len() - 1] > dm.total() {
            op_bail!(
                "input 3 (attn_mask) has shape {m:?}, expected 2-4 dims ending in <= {}",
                dm.total()
            );
        }
        let mut padded = m.to_vec();
        *padded.last_mut().unwrap_or(&mut 0) = dm.total();
        let out = [dm.b, dm.hq, dm.sq, dm.total()];
        if broadcast_shapes(&padded, &out)? != out {
            op_bail!("input 3 (attn_mask) {m:?} does not broadcast to {out:?}");
        }
        Ok(padded)
    }

    fn outputs(&self, dt: DType, dm: &Dims) -> Vec<TensorInfo> {
        let y = if dm.rank == 4 {
            vec![dm.b, dm.hq, dm.sq, dm.dv]
        } else {
            vec![dm.b, dm.sq, dm.hq * dm.dv]
        };
        let all = [
            TensorInfo::new(dt, y),
            TensorInfo::new(dt, [dm.b, dm.hkv, dm.total(), dm.d]),
            TensorInfo::new(dt, [dm.b, dm.hkv, dm.total(), dm.dv]),
            TensorInfo::new(dt, [dm.b, dm.hq, dm.sq, dm.total()]),
        ];
        all[..self.num_outputs.clamp(1, 4)].to_vec()
    }
}

/// Reads a 3-D or 4-D tensor into `[B, H, S, D]` order.
fn to_bhsd(t: &Tensor, b: usize, h: usize, s: usize, d: usize) -> Vec<f64> {
    let x = t.to_f64_vec();
    if t.rank() == 4 {
        return x;
    }
    let mut out = vec![0.0; x.len()];
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                for di in 0..d {
                    out[((bi * h + hi) * s + si) * d + di] = x[((bi * s + si) * h + hi) * d + di];
                }
            }
        }
    }
    out
}

/// Concatenates `past` `[B, H, P, D]` and `new` `[B, H, S, D]` along the sequence.
fn concat_seq(
    past: Option<Vec<f64>>,
    new: &[f64],
    b: usize,
    h: usize,
    p: usize,
    s: usize,
    d: usize,
) -> Vec<f64> {
    let Some(past) = past else {
        return new.to_vec();
    };
    let mut out = Vec::with_capacity(b * h * (p + s) * d);
    for bh in 0..b * h {
        out.extend_from_slice(&past[bh * p * d..(bh + 1) * p * d]);
        out.extend_from_slice(&new[bh * s * d..(bh + 1) * s * d]);
    }
    out
}

impl Op for Attention {
    op_common!(
        "Attention",
        Prototype {
            inputs: &[
                input("Q", DTypeSet::FLOAT),
                input("K", DTypeSet::FLOAT),
                input("V", DTypeSet::FLOAT),
                optional("attn_mask", DTypeSet::FLOAT.union(DTypeSet::BOOL)),
                optional("past_key", DTypeSet::FLOAT),
                optional("past_value", DTypeSet::FLOAT),
                optional("nonpad_kv_seqlen", DTypeSet::I64),
            ],
            outputs: &[
                output("Y"),
                optional_output("present_key"),
                optional_output("present_value"),
                optional_output("qk_matmul_output"),
            ],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let past = if ctx.has(4) {
            Some(ctx.shape(4)?)
        } else {
            None
        };
        let dm = self.dims(ctx.shape(0)?, ctx.shape(1)?, ctx.shape(2)?, past)?;
        if ctx.has(3) {
            self.mask_ok(ctx.shape(3)?, &dm)?;
        }
        if ctx.has(5) {
            let pv = ctx.shape(5)?;
            if pv != [dm.b, dm.hkv, dm.past, dm.dv] {
                op_bail!(
                    "input 5 (past_value) must be [{}, {}, {}, {}], got {pv:?}",
                    dm.b,
                    dm.hkv,
                    dm.past,
                    dm.dv
                );
            }
        }
        Ok(self.outputs(ctx.dtype(0)?, &dm))
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (q, k, v) = (
            required(inputs, 0)?,
            required(inputs, 1)?,
            required(inputs, 2)?,
        );
        let get = |i: usize| inputs.get(i).copied().flatten();
        let dm = self.dims(q.shape(), k.shape(), v.shape(), get(4).map(|t| t.shape()))?;
        let Dims {
            b,
            hq,
            hkv,
            sq,
            skv,
            past,
            d,
            dv,
            ..
        } = dm;
        let t = dm.total();
        let pv = get(5);
        let want = [b, hkv, past, dv];
        if pv.map(|p| p.shape()) != get(4).map(|_| &want[..]) {
            op_bail!("input 5 (past_value) must be given with past_key and be [{b}, {hkv}, {past}, {dv}]");
        }
        let qv = to_bhsd(q, b, hq, sq, d);
        let kn = to_bhsd(k, b, hkv, skv, d);
        let vn = to_bhsd(v, b, hkv, skv, dv);
        let kall = concat_seq(get(4).map(|p| p.to_f64_vec()), &kn, b, hkv, past, skv, d);
        let vall = concat_seq(pv.map(|p| p.to_f64_vec()), &vn, b, hkv, past, skv, dv);

        // The additive bias [B, Hq, Sq, T], from the mask, causality and padding lengths.
        let out4 = [b, hq, sq, t];
        let n = b * hq * sq * t;
        let mut bias = vec![0.0f64; n];
        if let Some(m) = get(3) {
            let padded = self.mask_ok(m.shape(), &dm)?;
            let ml = m.shape()[m.rank() - 1];
            let mv = m.to_f64_vec();
            let is_bool = m.dtype() == DType::Bool;
            // From the leading dims, not the data: a mask of width 0 still has rows.
            let outer: usize = m.shape()[..m.rank() - 1].iter().product();
            let mut full = vec![f64::NEG_INFINITY; outer * t];
            for o in 0..outer {
                for j in 0..ml {
                    let x = mv[o * ml + j];
                    full[o * t + j] = if is_bool {
                        if x != 0.0 {
                            0.0
                        } else {
                            f64::NEG_INFINITY
                        }
                    } else {
                        x
                    };
                }
            }
            let offs = broadcast_offsets(&padded, &out4);
            for (bv, &o) in bias.iter_mut().zip(&offs) {
                *bv = full[o];
            }
        }
        if self.is_causal {
            for (idx, bv) in bias.iter_mut().enumerate() {
                let j = idx % t;
                let i = (idx / t) % sq;
                if j > i + past {
                    *bv += f64::NEG_INFINITY;
                }
            }
        }
        if let Some(np) = get(6) {
            let lens = np.to_i64_vec();
            if lens.len() != b {
                op_bail!(
                    "input 6 (nonpad_kv_seqlen) must have {b} elements, got {}",
                    lens.len()
                );
            }
            for (idx, bv) in bias.iter_mut().enumerate() {
                if (idx % t) as i64 >= lens[idx / (hq * sq * t)] {
                    *bv += f64::NEG_INFINITY;
                }
            }
        }

        let scale = self.scale.unwrap_or(1.0 / (d as f64).sqrt());
        let group = hq / hkv;
        let mut y = vec![0.0; b * hq * sq * dv];
        let mut qk_out = vec![0.0; n];
        let mut row = vec![0.0; t];
        for bi in 0..b {
            for h in 0..hq {
                let kh = bi * hkv + h / group;
                for i in 0..sq {
                    let qrow = &qv[((bi * hq + h) * sq + i) * d..][..d];
                    let base = ((bi * hq + h) * sq + i) * t;
                    for (j, r) in row.iter_mut().enumerate() {
                        let krow = &kall[(kh * t + j) * d..][..d];
                        let raw = qrow.iter().zip(krow).map(|(a, c)| a * c).sum::<f64>() * scale;
                        let mut s = raw + bias[base + j];
                        let with_bias = s;
                        if self.softcap > 0.0 {
                            s = self.softcap * (s / self.softcap).tanh();
                        }
                        qk_out[base + j] = match self.qk_matmul_output_mode {
                            1 => with_bias,
                            2 => s,
                            _ => raw,
                        };
                        *r = s;
                    }
                    let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let mut sum = 0.0;
                    for r in row.iter_mut() {
                        *r = (*r - max).exp();
                        sum += *r;
                    }
                    for (j, r) in row.iter_mut().enumerate() {
                        *r /= sum;
                        if self.qk_matmul_output_mode == 3 {
                            qk_out[base + j] = *r;
                        }
                    }
                    // Y is written in [B, H, S, Dv] order and rearranged below for 3-D inputs.
                    let yrow = &mut y[((bi * hq + h) * sq + i) * dv..][..dv];
                    for (j, &p) in row.iter().enumerate() {
                        let vrow = &vall[(kh * t + j) * dv..][..dv];
                        for (yo, &vv) in yrow.iter_mut().zip(vrow) {
                            *yo += p * vv;
                        }
                    }
                }
            }
        }
        let infos = self.outputs(q.dtype(), &dm);
        let y = if dm.rank == 3 {
            let mut o = vec![0.0; y.len()];
            for bi in 0..b {
                for h in 0..hq {
                    for i in 0..sq {
                        for c in 0..dv {
                            o[((bi * sq + i) * hq + h) * dv + c] =
                                y[((bi * hq + h) * sq + i) * dv + c];
                        }
                    }
                }
            }
            o
        } else {
            y
        };
        let vals = [y, kall, vall, qk_out];
        infos
            .iter()
            .zip(vals.iter())
            .map(|(info, v)| tensor_from_f64(info.dtype, &info.shape, v))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_slice(shape, v).unwrap()
    }

    #[test]
    fn single_query_two_keys() {
        // q = [1, 0], keys [1, 0] and [0, 1], scale 1: scores [1, 0] -> p = [e/(e+1), 1/(e+1)].
        let q = t(&[1, 1, 1, 2], &[1., 0.]);
        let k = t(&[1, 1, 2, 2], &[1., 0., 0., 1.]);
        let v = t(&[1, 1, 2, 1], &[10., 20.]);
        let a = Attention {
            scale: Some(1.0),
            num_outputs: 4,
            qk_matmul_output_mode: 3,
            ..Default::default()
        };
        let out = a.eval(&[Some(&q), Some(&k), Some(&v)]).unwrap();
        let e = 1f64.exp();
        let p0 = e / (e + 1.0);
        let y = out[0].to_f64_vec();
        assert!((y[0] - (10.0 * p0 + 20.0 * (1.0 - p0))).abs() < 1e-5);
        let p = out[3].to_f64_vec();
        assert!((p[0] - p0).abs() < 1e-6);
        assert_eq!(out[1].shape(), &[1, 1, 2, 2]);
    }

    #[test]
    fn causal_and_bool_mask() {
        // Two queries, two keys: causal hides key 1 from query 0.
        let q = t(&[1, 1, 2, 1], &[1., 1.]);
        let k = t(&[1, 1, 2, 1], &[0., 0.]);
        let v = t(&[1, 1, 2, 1], &[1., 3.]);
        let a = Attention {
            is_causal: true,
            ..Default::default()
        };
        let y = a.eval(&[Some(&q), Some(&k), Some(&v)]).unwrap()[0].to_f64_vec();
        assert_eq!(y, vec![1.0, 2.0]);
        // A bool mask allowing only key 1.
        let m = Tensor::from_bools(&[2, 2], &[false, true, false, true]).unwrap();
        let a = Attention::default();
        let y = a.eval(&[Some(&q), Some(&k), Some(&v), Some(&m)]).unwrap()[0].to_f64_vec();
        assert_eq!(y, vec![3.0, 3.0]);
    }

    #[test]
    fn three_d_gqa_shapes() {
        let a = Attention {
            q_num_heads: Some(4),
            kv_num_heads: Some(2),
            ..Default::default()
        };
        let q = Tensor::zeros(DType::F32, &[2, 3, 8]).unwrap();
        let k = Tensor::zeros(DType::F32, &[2, 5, 4]).unwrap();
        let v = Tensor::zeros(DType::F32, &[2, 5, 6]).unwrap();
        let out = a.eval(&[Some(&q), Some(&k), Some(&v)]).unwrap();
        assert_eq!(out[0].shape(), &[2, 3, 12]);
        assert!(a.dims(&[2, 3, 7], &[2, 5, 4], &[2, 5, 6], None).is_err());
    }
}
