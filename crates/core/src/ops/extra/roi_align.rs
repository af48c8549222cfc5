//! RoiAlign: average (or max) of bilinear samples on a regular grid inside each bin of each
//! region of interest.

use crate::op::{input, output, required, Prototype};
use crate::ops::nn::tensor_from_f64;
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// The most bilinear samples one RoiAlign may take: about a second of the reference's work.
const MAX_SAMPLES: usize = 1 << 28;

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RoiAlign {
    /// Shift the ROI by half a pixel (`half_pixel`) rather than not (`output_half_pixel`).
    pub half_pixel: bool,
    pub max_mode: bool,
    pub output_height: usize,
    pub output_width: usize,
    /// Samples per bin side; adaptive (`ceil(roi size / output size)`) when 0.
    pub sampling_ratio: usize,
    pub spatial_scale: f64,
}

impl Default for RoiAlign {
    fn default() -> Self {
        RoiAlign {
            half_pixel: true,
            max_mode: false,
            output_height: 1,
            output_width: 1,
            sampling_ratio: 0,
            spatial_scale: 1.0,
        }
    }
}

impl RoiAlign {
    fn out_shape(&self, x: &[usize], rois: &[usize], bi: &[usize]) -> OpResult<Vec<usize>> {
        if x.len() != 4 || rois.len() != 2 || rois[1] != 4 || bi != [rois[0]] {
            op_bail!("expected X [N, C, H, W], rois [R, 4], batch_indices [R]; got {x:?}, {rois:?}, {bi:?}");
        }
        Ok(vec![rois[0], x[1], self.output_height, self.output_width])
    }
}

impl Op for RoiAlign {
    op_common!(
        "RoiAlign",
        Prototype {
            inputs: &[
                input("X", DTypeSet::FLOAT),
                input("rois", DTypeSet::FLOAT),
                input("batch_indices", DTypeSet::I64),
            ],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = self.out_shape(ctx.shape(0)?, ctx.shape(1)?, ctx.shape(2)?)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, s)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (x, rois, bidx) = (
            required(inputs, 0)?,
            required(inputs, 1)?,
            required(inputs, 2)?,
        );
        let os = self.out_shape(x.shape(), rois.shape(), bidx.shape())?;
        let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
        let (ph, pw) = (self.output_height, self.output_width);
        if h == 0 || w == 0 {
            op_bail!("input 0 has an empty feature map: {:?}", x.shape());
        }
        let xv = x.to_f64_vec();
        let rv = rois.to_f64_vec();
        let bv = bidx.to_i64_vec();
        let mut y = vec![0.0; os.iter().product()];
        let off = if self.half_pixel { 0.5 } else { 0.0 };
        for r in 0..os[0] {
            let b = bv[r];
            if b < 0 || b as usize >= n {
                op_bail!("input 2 (batch_indices) holds {b}, outside [0, {n})");
            }
            let roi = &rv[r * 4..r * 4 + 4];
            let (x0, y0) = (
                roi[0] * self.spatial_scale - off,
                roi[1] * self.spatial_scale - off,
            );
            let (x1, y1) = (
                roi[2] * self.spatial_scale - off,
                roi[3] * self.spatial_scale - off,
            );
            let (mut rw, mut rh) = (x1 - x0, y1 - y0);
            if !self.half_pixel {
                rw = rw.max(1.0);
                rh = rh.max(1.0);
            }
            let (bh, bw) = (rh / ph as f64, rw / pw as f64);
            let grid = |size: f64, out: usize| {
                if self.sampling_ratio > 0 {
                    self.sampling_ratio
                } else {
                    (size / out as f64).ceil().max(0.0) as usize
                }
            };
            let (gh, gw) = (grid(rh, ph), grid(rw, pw));
            // Each output element averages gh x gw samples: a huge sampling_ratio, or a huge
            // ROI in adaptive mode, would spin for hours. Refuse past a budget of samples.
            let samples = [gh, gw, ph, pw, c, os[0]]
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .filter(|&n| n <= MAX_SAMPLES);
            if samples.is_none() {
                op_bail!(
                    "ROI {r} needs a {gh}x{gw} sampling grid per bin (sampling_ratio {}): \
                     over {MAX_SAMPLES} samples in all",
                    self.sampling_ratio
                );
            }
            let count = (gh * gw).max(1) as f64;
            // The four weighted taps of one sample point; none outside the feature map.
            let taps = |yy: f64, xx: f64| -> Option<[(usize, f64); 4]> {
                if yy < -1.0 || yy > h as f64 || xx < -1.0 || xx > w as f64 {
                    return None;
                }
                let (mut yy, mut xx) = (yy.max(0.0), xx.max(0.0));
                let (mut yl, mut xl) = (yy as usize, xx as usize);
                let yh = if yl + 1 >= h {
                    yl = h - 1;
                    yy = yl as f64;
                    yl
                } else {
                    yl + 1
                };
                let xh = if xl + 1 >= w {
                    xl = w - 1;
                    xx = xl as f64;
                    xl
                } else {
                    xl + 1
                };
                let (ly, lx) = (yy - yl as f64, xx - xl as f64);
                let (hy, hx) = (1.0 - ly, 1.0 - lx);
                Some([
                    (yl * w + xl, hy * hx),
                    (yl * w + xh, hy * lx),
                    (yh * w + xl, ly * hx),
                    (yh * w + xh, ly * lx),
                ])
            };
            for ci in 0..c {
                let plane = &xv[(b as usize * c + ci) * h * w..][..h * w];
                for py in 0..ph {
                    for px in 0..pw {
                        let mut acc: Option<f64> = None;
                        let mut sum = 0.0;
                        for iy in 0..gh {
                            let yy = y0 + py as f64 * bh + (iy as f64 + 0.5) * bh / gh as f64;
                            for ix in 0..gw {
                                let xx = x0 + px as f64 * bw + (ix as f64 + 0.5) * bw / gw as f64;
                                let t = taps(yy, xx);
                                if self.max_mode {
                                    // Matches the reference: the max of the weighted taps.
                                    let v = t.map_or(0.0, |t| {
                                        t.iter()
                                            .map(|&(i, wt)| wt * plane[i])
                                            .fold(f64::NEG_INFINITY, f64::max)
                                    });
                                    acc = Some(acc.map_or(v, |a| a.max(v)));
                                } else if let Some(t) = t {
                                    sum += t.iter().map(|&(i, wt)| wt * plane[i]).sum::<f64>();
                                }
                            }
                        }
                        y[((r * c + ci) * ph + py) * pw + px] = if self.max_mode {
                            acc.unwrap_or(0.0)
                        } else {
                            sum / count
                        };
                    }
                }
            }
        }
        Ok(vec![tensor_from_f64(x.dtype(), &os, &y)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_map_averages_to_constant() {
        let x = Tensor::from_slice(&[1, 1, 2, 2], &[1.0f32, 2., 3., 4.]).unwrap();
        let rois = Tensor::from_slice(&[1, 4], &[0.0f32, 0., 1., 1.]).unwrap();
        let b = Tensor::from_slice(&[1], &[0i64]).unwrap();
        // output_half_pixel, one bin, one sample at (0.5, 0.5): the mean of the four pixels.
        let r = RoiAlign {
            half_pixel: false,
            sampling_ratio: 1,
            ..Default::default()
        };
        let y = r.eval(&[Some(&x), Some(&rois), Some(&b)]).unwrap();
        assert_eq!(y[0].to_f64_vec(), vec![2.5]);
        let bad = Tensor::from_slice(&[1], &[1i64]).unwrap();
        assert!(r.eval(&[Some(&x), Some(&rois), Some(&bad)]).is_err());
    }

    #[test]
    fn huge_sampling_grids_are_refused() {
        let x = Tensor::from_slice(&[1, 1, 2, 2], &[1.0f32, 2., 3., 4.]).unwrap();
        let b = Tensor::from_slice(&[1], &[0i64]).unwrap();
        let rois = Tensor::from_slice(&[1, 4], &[0.0f32, 0., 1., 1.]).unwrap();
        let r = RoiAlign {
            sampling_ratio: usize::MAX,
            ..Default::default()
        };
        let err = r.eval(&[Some(&x), Some(&rois), Some(&b)]).unwrap_err();
        assert!(err.to_string().contains("sampling grid"), "{err}");
        // Adaptive sampling over a ROI of 1e30 pixels.
        let rois = Tensor::from_slice(&[1, 4], &[0.0f32, 0., 1e30, 1e30]).unwrap();
        let adaptive = RoiAlign::default();
        assert!(adaptive.eval(&[Some(&x), Some(&rois), Some(&b)]).is_err());
    }
}
