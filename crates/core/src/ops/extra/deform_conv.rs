//! DeformConv (2-D): a convolution whose kernel taps are displaced by learned per-position
//! offsets (sampled bilinearly, zero outside the image) and optionally scaled by a mask.

use crate::op::{input, optional, output, required, Prototype};
use crate::ops::nn::tensor_from_f64;
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeformConv {
    /// Ones when empty.
    pub dilations: Vec<i64>,
    pub group: usize,
    /// From the weights when empty.
    pub kernel_shape: Vec<i64>,
    pub offset_group: usize,
    /// Begin pads then end pads; zeros when empty.
    pub pads: Vec<i64>,
    /// Ones when empty.
    pub strides: Vec<i64>,
}

impl Default for DeformConv {
    fn default() -> Self {
        DeformConv {
            dilations: vec![],
            group: 1,
            kernel_shape: vec![],
            offset_group: 1,
            pads: vec![],
            strides: vec![],
        }
    }
}

/// Checked sizes: (n, c, h, w), (oc, kh, kw), (oh, ow), (stride, dilation, begin pad) per axis.
type Geo = ([usize; 4], [usize; 3], [usize; 2], [[usize; 3]; 2]);

impl DeformConv {
    fn geo(&self, x: &[usize], w: &[usize], off: &[usize]) -> OpResult<Geo> {
        if x.len() != 4 || w.len() != 4 || off.len() != 4 {
            op_bail!("only 2-D DeformConv is supported: X {x:?}, W {w:?}, offset {off:?}");
        }
        let (g, og) = (self.group, self.offset_group);
        let (kh, kw) = (w[2], w[3]);
        if !self.kernel_shape.is_empty() && self.kernel_shape != [kh as i64, kw as i64] {
            op_bail!(
                "kernel_shape {:?} does not match the weights {w:?}",
                self.kernel_shape
            );
        }
        if g == 0
            || og == 0
            || x[1] != w[1] * g
            || !w[0].is_multiple_of(g)
            || !x[1].is_multiple_of(og)
        {
            op_bail!("channels of X {x:?} and W {w:?} do not fit group {g} / offset_group {og}");
        }
        let mut geo = [[0usize; 3]; 2];
        let mut outs = [0usize; 2];
        for d in 0..2 {
            let get = |v: &[i64], i: usize, def: i64| -> OpResult<usize> {
                let v = v.get(i).copied().unwrap_or(def);
                if v < 0 {
                    op_bail!("negative stride, dilation or pad {v}");
                }
                Ok(v as usize)
            };
            let (s, dl) = (get(&self.strides, d, 1)?, get(&self.dilations, d, 1)?);
            let (pb, pe) = (get(&self.pads, d, 0)?, get(&self.pads, d + 2, 0)?);
            let span = dl * (w[2 + d].max(1) - 1) + 1;
            let padded = x[2 + d] + pb + pe;
            if s == 0 || dl == 0 || padded < span {
                op_bail!(
                    "the kernel does not fit input {x:?} with these pads, strides and dilations"
                );
            }
            outs[d] = (padded - span) / s + 1;
            geo[d] = [s, dl, pb];
        }
        if off != [x[0], og * 2 * kh * kw, outs[0], outs[1]] {
            op_bail!(
                "input 2 (offset) must be [{}, {}, {}, {}], got {off:?}",
                x[0],
                og * 2 * kh * kw,
                outs[0],
                outs[1]
            );
        }
        Ok(([x[0], x[1], x[2], x[3]], [w[0], kh, kw], outs, geo))
    }
}

impl Op for DeformConv {
    op_common!(
        "DeformConv",
        Prototype {
            inputs: &[
                input("X", DTypeSet::FLOAT),
                input("W", DTypeSet::FLOAT),
                input("offset", DTypeSet::FLOAT),
                optional("B", DTypeSet::FLOAT),
                optional("mask", DTypeSet::FLOAT),
            ],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let (x, k, o, _) = self.geo(ctx.shape(0)?, ctx.shape(1)?, ctx.shape(2)?)?;
        if ctx.has(3) && ctx.shape(3)? != [k[0]] {
            op_bail!("input 3 (B) must be [{}], got {:?}", k[0], ctx.shape(3)?);
        }
        if ctx.has(4) && ctx.shape(4)? != [x[0], self.offset_group * k[1] * k[2], o[0], o[1]] {
            op_bail!("input 4 (mask) has the wrong shape {:?}", ctx.shape(4)?);
        }
        Ok(vec![TensorInfo::new(
            ctx.dtype(0)?,
            [x[0], k[0], o[0], o[1]],
        )])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (x, wt, off) = (
            required(inputs, 0)?,
            required(inputs, 1)?,
            required(inputs, 2)?,
        );
        let ([n, c, h, w], [oc, kh, kw], [oh, ow], [[sh, dh, ph], [sw, dw, pw]]) =
            self.geo(x.shape(), wt.shape(), off.shape())?;
        let get = |i: usize| inputs.get(i).copied().flatten();
        let kk = kh * kw;
        let og = self.offset_group;
        let bias = get(3).map(|b| b.to_f64_vec());
        let mask = get(4).map(|m| m.to_f64_vec());
        if bias.as_ref().is_some_and(|b| b.len() != oc)
            || mask
                .as_ref()
                .is_some_and(|m| m.len() != n * og * kk * oh * ow)
        {
            op_bail!("input 3 (B) or 4 (mask) has the wrong size");
        }
        let (xv, wv, ov) = (x.to_f64_vec(), wt.to_f64_vec(), off.to_f64_vec());
        let cpg = c / self.group;
        let ocpg = oc / self.group;
        let cpog = c / og;
        let mut y = vec![0.0; n * oc * oh * ow];
        // Bilinear sample with zero outside the image.
        let sample = |plane: &[f64], py: f64, px: f64| -> f64 {
            let (y0, x0) = (py.floor(), px.floor());
            let (ly, lx) = (py - y0, px - x0);
            let mut acc = 0.0;
            for (dy, wy) in [(0i64, 1.0 - ly), (1, ly)] {
                for (dx, wx) in [(0i64, 1.0 - lx), (1, lx)] {
                    let (yy, xx) = (y0 as i64 + dy, x0 as i64 + dx);
                    if yy >= 0 && (yy as usize) < h && xx >= 0 && (xx as usize) < w {
                        acc += wy * wx * plane[yy as usize * w + xx as usize];
                    }
                }
            }
            acc
        };
        for ni in 0..n {
            for ci in 0..c {
                let g = ci / cpg;
                let ogi = ci / cpog;
                let plane = &xv[(ni * c + ci) * h * w..][..h * w];
                for oy in 0..oh {
                    for ox in 0..ow {
                        for i in 0..kh {
                            for j in 0..kw {
                                let k = i * kw + j;
                                let at = |ch: usize| ((ni * og * 2 * kk + ch) * oh + oy) * ow + ox;
                                let dyo = ov[at(ogi * 2 * kk + 2 * k)];
                                let dxo = ov[at(ogi * 2 * kk + 2 * k + 1)];
                                let py = (oy * sh + i * dh) as f64 - ph as f64 + dyo;
                                let px = (ox * sw + j * dw) as f64 - pw as f64 + dxo;
                                let mut v = sample(plane, py, px);
                                if let Some(m) = &mask {
                                    v *= m[((ni * og + ogi) * kk + k) * oh * ow + oy * ow + ox];
                                }
                                if v == 0.0 {
                                    continue;
                                }
                                for o in g * ocpg..(g + 1) * ocpg {
                                    let wgt = wv[((o * cpg + ci % cpg) * kh + i) * kw + j];
                                    y[((ni * oc + o) * oh + oy) * ow + ox] += wgt * v;
                                }
                            }
                        }
                    }
                }
            }
            if let Some(b) = &bias {
                for (o, &bv) in b.iter().enumerate() {
                    for v in &mut y[(ni * oc + o) * oh * ow..][..oh * ow] {
                        *v += bv;
                    }
                }
            }
        }
        Ok(vec![tensor_from_f64(x.dtype(), &[n, oc, oh, ow], &y)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_shift_the_sample() {
        // 1x1 kernel of weight 2 over a 1x2 image; an x offset of 0.5 samples between pixels.
        let x = Tensor::from_slice(&[1, 1, 1, 2], &[4.0f32, 8.]).unwrap();
        let wt = Tensor::from_slice(&[1, 1, 1, 1], &[2.0f32]).unwrap();
        let off = Tensor::from_slice(&[1, 2, 1, 2], &[0.0f32, 0., 0.5, 0.5]).unwrap();
        let b = Tensor::from_slice(&[1], &[1.0f32]).unwrap();
        let y = DeformConv::default()
            .eval(&[Some(&x), Some(&wt), Some(&off), Some(&b)])
            .unwrap();
        // Position 0 samples 6, position 1 samples half of 8 and half of the zero outside.
        assert_eq!(y[0].to_f64_vec(), vec![13.0, 9.0]);
    }
}
