//! GridSample (2-D and volumetric) and AffineGrid, which builds the sampling grids GridSample
//! reads. Grid coordinates are normalized to [-1, 1] and list the innermost axis first (x, y, z).

use crate::op::{input, output, required, Prototype};
use crate::ops::nn::tensor_from_f64;
use crate::ops::util::{read_i64s, strides, to_dim};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GridMode {
    #[default]
    Linear,
    Nearest,
    Cubic,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GridPadding {
    #[default]
    Zeros,
    Border,
    Reflection,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GridSample {
    pub mode: GridMode,
    pub padding_mode: GridPadding,
    pub align_corners: bool,
}

/// Reflects `x` into `[lo, hi]` by bouncing off the borders.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let rng = hi - lo;
    if rng <= 0.0 {
        return lo;
    }
    let (dx, from_lo) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = (dx / rng).floor();
    let r = dx - n * rng;
    if (n as i64 % 2 == 0) == from_lo {
        lo + r
    } else {
        hi - r
    }
}

/// Keys cubic convolution weights (a = -0.75) for taps at -1, 0, 1, 2 from the fraction `t`.
fn cubic_weights(t: f64) -> [f64; 4] {
    let a = -0.75;
    let w_far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    let w_near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    [w_far(t + 1.0), w_near(t), w_near(1.0 - t), w_far(2.0 - t)]
}

impl GridSample {
    fn out_shape(&self, x: &[usize], g: &[usize]) -> OpResult<Vec<usize>> {
        let r = x.len();
        if !(r == 4 || r == 5) || g.len() != r || g[0] != x[0] || g[r - 1] != r - 2 {
            op_bail!(
                "input 1 (grid) {g:?} must be [N, ..., {}] for input 0 {x:?} (rank 4 or 5)",
                r.saturating_sub(2)
            );
        }
        let mut out = vec![x[0], x[1]];
        out.extend_from_slice(&g[1..r - 1]);
        Ok(out)
    }

    fn borders(&self, n: usize) -> (f64, f64) {
        if self.align_corners {
            (0.0, n as f64 - 1.0)
        } else {
            (-0.5, n as f64 - 0.5)
        }
    }

    /// Where an integer tap lands under the padding mode; `None` reads zero.
    fn tap(&self, i: i64, n: usize) -> Option<usize> {
        match self.padding_mode {
            GridPadding::Zeros => (i >= 0 && (i as usize) < n).then_some(i as usize),
            GridPadding::Border => Some(i.clamp(0, n as i64 - 1) as usize),
            GridPadding::Reflection => {
                let (lo, hi) = self.borders(n);
                let r = reflect(i as f64, lo, hi) as i64;
                Some(r.clamp(0, n as i64 - 1) as usize)
            }
        }
    }
}

impl Op for GridSample {
    op_common!(
        "GridSample",
        Prototype {
            inputs: &[input("X", DTypeSet::ALL), input("grid", DTypeSet::FLOAT)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let s = self.out_shape(ctx.shape(0)?, ctx.shape(1)?)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, s)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (x, g) = (required(inputs, 0)?, required(inputs, 1)?);
        let out_shape = self.out_shape(x.shape(), g.shape())?;
        let dims = &x.shape()[2..];
        let k = dims.len();
        if dims.contains(&0) {
            op_bail!("input 0 has an empty spatial dimension: {:?}", x.shape());
        }
        let xs = strides(dims);
        let plane: usize = dims.iter().product();
        let (n, c) = (x.shape()[0], x.shape()[1]);
        let points: usize = out_shape[2..].iter().product();
        let xv = x.to_f64_vec();
        let gv = g.to_f64_vec();
        let mut y = vec![0.0; n * c * points];
        // Per axis: the taps (index into the axis or None) and their weights.
        let mut taps: Vec<Vec<(Option<usize>, f64)>> = vec![Vec::new(); k];
        for ni in 0..n {
            for p in 0..points {
                let coords = &gv[(ni * points + p) * k..][..k];
                for (ax, &dim) in dims.iter().enumerate() {
                    let v = coords[k - 1 - ax];
                    let mut f = if self.align_corners {
                        (v + 1.0) / 2.0 * (dim as f64 - 1.0)
                    } else {
                        ((v + 1.0) * dim as f64 - 1.0) / 2.0
                    };
                    if self.mode == GridMode::Nearest {
                        f = f.round_ties_even();
                    }
                    let (lo, hi) = self.borders(dim);
                    if f < lo || f > hi {
                        match self.padding_mode {
                            GridPadding::Border => f = f.clamp(0.0, dim as f64 - 1.0),
                            GridPadding::Reflection => f = reflect(f, lo, hi),
                            GridPadding::Zeros => {}
                        }
                    }
                    let t = &mut taps[ax];
                    t.clear();
                    if !f.is_finite() {
                        t.push((None, 1.0));
                        continue;
                    }
                    match self.mode {
                        GridMode::Nearest => t.push((self.tap(f as i64, dim), 1.0)),
                        GridMode::Linear => {
                            let f0 = f.floor();
                            let w = f - f0;
                            t.push((self.tap(f0 as i64, dim), 1.0 - w));
                            t.push((self.tap(f0 as i64 + 1, dim), w));
                        }
                        GridMode::Cubic => {
                            let f0 = f.floor();
                            for (j, w) in cubic_weights(f - f0).into_iter().enumerate() {
                                t.push((self.tap(f0 as i64 - 1 + j as i64, dim), w));
                            }
                        }
                    }
                }
                // Sum over the tensor product of the taps of every axis.
                let total: usize = taps.iter().map(|t| t.len()).product();
                for ci in 0..c {
                    let base = (ni * c + ci) * plane;
                    let mut acc = 0.0;
                    for combo in 0..total {
                        let mut rem = combo;
                        let mut off = Some(0usize);
                        let mut w = 1.0;
                        for ax in (0..k).rev() {
                            let (i, wt) = taps[ax][rem % taps[ax].len()];
                            rem /= taps[ax].len();
                            w *= wt;
                            off = off.zip(i).map(|(o, i)| o + i * xs[ax]);
                        }
                        if let Some(o) = off {
                            acc += w * xv[base + o];
                        }
                    }
                    y[(ni * c + ci) * points + p] = acc;
                }
            }
        }
        Ok(vec![tensor_from_f64(x.dtype(), &out_shape, &y)?])
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AffineGrid {
    pub align_corners: bool,
}

impl AffineGrid {
    fn out_shape(&self, theta: &[usize], size: &[i64]) -> OpResult<Vec<usize>> {
        let size: Vec<usize> = size
            .iter()
            .map(|&v| to_dim(v, "size"))
            .collect::<OpResult<_>>()?;
        let k = size.len().saturating_sub(2);
        if !(k == 2 || k == 3) || theta != [size[0], k, k + 1] {
            op_bail!("input 0 (theta) {theta:?} and input 1 (size) {size:?} must be [N, 2, 3] with [N, C, H, W] or [N, 3, 4] with [N, C, D, H, W]");
        }
        let mut out = vec![size[0]];
        out.extend_from_slice(&size[2..]);
        out.push(k);
        Ok(out)
    }
}

impl Op for AffineGrid {
    op_common!(
        "AffineGrid",
        Prototype {
            inputs: &[
                input("theta", DTypeSet::FLOAT),
                input("size", DTypeSet::I64)
            ],
            outputs: &[output("grid")],
            value_inputs: &[1],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let size = read_i64s(ctx.value(1)?, "input 1 (size)", 5)?;
        Ok(vec![TensorInfo::new(
            ctx.dtype(0)?,
            self.out_shape(ctx.shape(0)?, &size)?,
        )])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let theta = required(inputs, 0)?;
        let size = read_i64s(required(inputs, 1)?, "input 1 (size)", 5)?;
        let out = self.out_shape(theta.shape(), &size)?;
        let k = out[out.len() - 1];
        let sp = &out[1..out.len() - 1];
        let points: usize = sp.iter().product();
        let tv = theta.to_f64_vec();
        let base = |i: usize, n: usize| {
            if self.align_corners {
                if n <= 1 {
                    -1.0
                } else {
                    -1.0 + 2.0 * i as f64 / (n as f64 - 1.0)
                }
            } else {
                -1.0 + (2 * i + 1) as f64 / n as f64
            }
        };
        let st = strides(sp);
        let mut g = Vec::with_capacity(out[0] * points * k);
        for ni in 0..out[0] {
            let th = &tv[ni * k * (k + 1)..][..k * (k + 1)];
            for p in 0..points {
                // Homogeneous coordinate (x, y, [z], 1), x along the innermost axis.
                let mut h = vec![1.0; k + 1];
                for ax in 0..k {
                    let idx = (p / st[ax]) % sp[ax];
                    h[k - 1 - ax] = base(idx, sp[ax]);
                }
                for r in 0..k {
                    g.push((0..=k).map(|j| th[r * (k + 1) + j] * h[j]).sum());
                }
            }
        }
        Ok(vec![tensor_from_f64(theta.dtype(), &out, &g)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_grid_samples_back() {
        // The identity affine grid (align_corners=0) samples pixel centers exactly.
        let theta = Tensor::from_slice(&[1, 2, 3], &[1.0f32, 0., 0., 0., 1., 0.]).unwrap();
        let size = Tensor::from_slice(&[4], &[1i64, 1, 2, 2]).unwrap();
        let g = AffineGrid::default()
            .eval(&[Some(&theta), Some(&size)])
            .unwrap();
        assert_eq!(g[0].shape(), &[1, 2, 2, 2]);
        assert_eq!(
            g[0].to_f64_vec(),
            vec![-0.5, -0.5, 0.5, -0.5, -0.5, 0.5, 0.5, 0.5]
        );
        let x = Tensor::from_slice(&[1, 1, 2, 2], &[1.0f32, 2., 3., 4.]).unwrap();
        for mode in [GridMode::Linear, GridMode::Nearest] {
            let gs = GridSample {
                mode,
                ..Default::default()
            };
            let y = gs.eval(&[Some(&x), Some(&g[0])]).unwrap();
            assert_eq!(y[0].to_f64_vec(), vec![1.0, 2.0, 3.0, 4.0]);
        }
    }

    #[test]
    fn linear_midpoint_and_padding() {
        // x = 0 (the middle of a 1x2 row, align_corners=0) averages the two pixels.
        let x = Tensor::from_slice(&[1, 1, 1, 2], &[2.0f32, 4.]).unwrap();
        let g = Tensor::from_slice(&[1, 1, 2, 2], &[0.0f32, 0., 1., 0.]).unwrap();
        let y = GridSample::default().eval(&[Some(&x), Some(&g)]).unwrap();
        // x = 1 lands at 1.5: half of pixel 1 and half of the zero padding.
        assert_eq!(y[0].to_f64_vec(), vec![3.0, 2.0]);
        let b = GridSample {
            padding_mode: GridPadding::Border,
            ..Default::default()
        };
        assert_eq!(
            b.eval(&[Some(&x), Some(&g)]).unwrap()[0].to_f64_vec(),
            vec![3.0, 4.0]
        );
        assert_eq!(reflect(-1.0, 0.0, 3.0), 1.0);
        assert_eq!(reflect(4.0, 0.0, 3.0), 2.0);
    }
}
