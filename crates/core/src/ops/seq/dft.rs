//! DFT and STFT: direct (O(n²)) discrete Fourier transforms computed in f64.
//!
//! Signals carry a trailing dimension of 1 (real) or 2 (complex: re, im); outputs are always
//! complex. `onesided` keeps the `n/2 + 1` non-redundant bins of a real signal's transform.

use crate::op::{input, optional, output, required, Prototype};
use crate::ops::util::read_i64s;
use crate::{
    op_bail, op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo,
};
use std::f64::consts::PI;

/// Transforms `len` samples (complex, read through `sample`) into `bins` output bins of an
/// `n`-point transform, zero-padding or truncating the signal to `n`.
fn transform(
    sample: impl Fn(usize) -> (f64, f64),
    len: usize,
    n: usize,
    bins: usize,
    inverse: bool,
    out: &mut [f64],
) {
    let sign = if inverse { 1.0 } else { -1.0 };
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    for k in 0..bins {
        let (mut re, mut im) = (0.0, 0.0);
        for j in 0..len.min(n) {
            let (xr, xi) = sample(j);
            // Reduce j·k mod n first so the angle stays small and exact for large n.
            let ang = sign * 2.0 * PI * ((j * k) % n) as f64 / n as f64;
            let (s, c) = ang.sin_cos();
            re += xr * c - xi * s;
            im += xr * s + xi * c;
        }
        out[2 * k] = re * scale;
        out[2 * k + 1] = im * scale;
    }
}

fn scalar_i64(t: &Tensor, what: &str) -> OpResult<i64> {
    let v = read_i64s(t, what, 1)?;
    match v.first() {
        Some(&x) => Ok(x),
        None => op_bail!("{what} is empty"),
    }
}

/// DFT along one axis of a `[..., 1|2]` signal.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Dft {
    /// The signal axis when the `axis` input (input 2) is absent.
    pub axis: i64,
    pub inverse: bool,
    pub onesided: bool,
}

impl Default for Dft {
    fn default() -> Self {
        Dft {
            axis: 1,
            inverse: false,
            onesided: false,
        }
    }
}

/// Resolved geometry: `(outer, len, inner, channels, n, bins, axis)`.
type DftGeom = (usize, usize, usize, usize, usize, usize, usize);

impl Dft {
    fn geometry(
        &self,
        shape: &[usize],
        dft_length: Option<&Tensor>,
        axis: Option<&Tensor>,
    ) -> OpResult<DftGeom> {
        let r = shape.len();
        op_ensure!(
            r >= 2 && (shape[r - 1] == 1 || shape[r - 1] == 2),
            "input 0 (input): expected a last dimension of 1 or 2, got shape {shape:?}"
        );
        let a = match axis {
            Some(t) => scalar_i64(t, "input 2 (axis)")?,
            None => self.axis,
        };
        let an = if a < 0 { a + r as i64 } else { a };
        op_ensure!(
            an >= 0 && an < r as i64 - 1,
            "axis {a} is out of range for input shape {shape:?}"
        );
        let an = an as usize;
        let len = shape[an];
        let n = match dft_length {
            Some(t) => {
                let n = scalar_i64(t, "input 1 (dft_length)")?;
                op_ensure!(n > 0, "input 1 (dft_length) must be positive, got {n}");
                n as usize
            }
            None => len,
        };
        op_ensure!(n > 0, "the signal along axis {an} is empty");
        let bins = if self.onesided { n / 2 + 1 } else { n };
        let outer = shape[..an].iter().product();
        let inner = shape[an + 1..r - 1].iter().product();
        Ok((outer, len, inner, shape[r - 1], n, bins, an))
    }
}

impl Op for Dft {
    op_common!(
        "DFT",
        Prototype {
            inputs: &[
                input("input", DTypeSet::FLOAT),
                optional("dft_length", DTypeSet::INDEX),
                optional("axis", DTypeSet::I64),
            ],
            outputs: &[output("output")],
            value_inputs: &[1, 2],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let shape = ctx.shape(0)?;
        let dl = if ctx.has(1) {
            Some(ctx.value(1)?)
        } else {
            None
        };
        let ax = if ctx.has(2) {
            Some(ctx.value(2)?)
        } else {
            None
        };
        let (.., bins, axis) = self.geometry(shape, dl, ax)?;
        let mut s = shape.to_vec();
        s[axis] = bins;
        let last = s.len() - 1;
        s[last] = 2;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, s)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let opt = |i: usize| inputs.get(i).copied().flatten();
        let (outer, len, inner, c, n, bins, axis) = self.geometry(x.shape(), opt(1), opt(2))?;
        let mut shape = x.shape().to_vec();
        shape[axis] = bins;
        let last = shape.len() - 1;
        shape[last] = 2;
        let xv = x.to_f64_vec();
        let mut out_t = Tensor::zeros(DType::F64, &shape)?;
        let out = out_t.as_mut_slice::<f64>()?;
        let mut buf = vec![0.0f64; 2 * bins];
        for o in 0..outer {
            for i in 0..inner {
                let at = |j: usize| ((o * len + j) * inner + i) * c;
                let sample = |j: usize| {
                    let p = at(j);
                    (xv[p], if c == 2 { xv[p + 1] } else { 0.0 })
                };
                transform(sample, len, n, bins, self.inverse, &mut buf);
                for k in 0..bins {
                    let p = ((o * bins + k) * inner + i) * 2;
                    out[p] = buf[2 * k];
                    out[p + 1] = buf[2 * k + 1];
                }
            }
        }
        Ok(vec![out_t.cast(x.dtype())?])
    }
}

/// Short-time Fourier transform of `[batch, length, 1|2]` signals.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stft {
    pub onesided: bool,
}

impl Default for Stft {
    fn default() -> Self {
        Stft { onesided: true }
    }
}

impl Stft {
    /// `(batch, length, channels, step, frame_length, frames, bins)`.
    fn geometry(
        &self,
        shape: &[usize],
        step: &Tensor,
        window: Option<&[usize]>,
        frame_length: Option<&Tensor>,
    ) -> OpResult<[usize; 7]> {
        op_ensure!(
            shape.len() == 3 && (shape[2] == 1 || shape[2] == 2),
            "input 0 (signal): expected shape [batch, length, 1|2], got {shape:?}"
        );
        let step = scalar_i64(step, "input 1 (frame_step)")?;
        op_ensure!(
            step > 0,
            "input 1 (frame_step) must be positive, got {step}"
        );
        let wl = match window {
            Some(w) => {
                op_ensure!(w.len() == 1, "input 2 (window): expected rank 1, got {w:?}");
                Some(w[0])
            }
            None => None,
        };
        let fl = match frame_length {
            Some(t) => {
                let v = scalar_i64(t, "input 3 (frame_length)")?;
                op_ensure!(v > 0, "input 3 (frame_length) must be positive, got {v}");
                Some(v as usize)
            }
            None => None,
        };
        let fl = match (wl, fl) {
            (Some(w), Some(f)) if w != f => {
                op_bail!("input 2 (window) has length {w} but frame_length is {f}")
            }
            (Some(w), _) => w,
            (None, Some(f)) => f,
            (None, None) => op_bail!("STFT needs a window (input 2) or a frame_length (input 3)"),
        };
        op_ensure!(
            fl > 0 && fl <= shape[1],
            "frame length {fl} does not fit the signal length {}",
            shape[1]
        );
        let frames = (shape[1] - fl) / step as usize + 1;
        let bins = if self.onesided { fl / 2 + 1 } else { fl };
        Ok([
            shape[0],
            shape[1],
            shape[2],
            step as usize,
            fl,
            frames,
            bins,
        ])
    }
}

impl Op for Stft {
    op_common!(
        "STFT",
        Prototype {
            inputs: &[
                input("signal", DTypeSet::FLOAT),
                input("frame_step", DTypeSet::INDEX),
                optional("window", DTypeSet::FLOAT),
                optional("frame_length", DTypeSet::INDEX),
            ],
            outputs: &[output("output")],
            value_inputs: &[1, 3],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let w = if ctx.has(2) {
            Some(ctx.shape(2)?)
        } else {
            None
        };
        let fl = if ctx.has(3) {
            Some(ctx.value(3)?)
        } else {
            None
        };
        let [b, .., frames, bins] = self.geometry(ctx.shape(0)?, ctx.value(1)?, w, fl)?;
        Ok(vec![TensorInfo::new(
            ctx.dtype(0)?,
            vec![b, frames, bins, 2],
        )])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let opt = |i: usize| inputs.get(i).copied().flatten();
        let window = opt(2);
        let [b, len, c, step, fl, frames, bins] = self.geometry(
            x.shape(),
            required(inputs, 1)?,
            window.map(|w| w.shape()),
            opt(3),
        )?;
        let xv = x.to_f64_vec();
        let wv = window.map(|w| w.to_f64_vec());
        let mut out_t = Tensor::zeros(DType::F64, &[b, frames, bins, 2])?;
        let out = out_t.as_mut_slice::<f64>()?;
        for bi in 0..b {
            for f in 0..frames {
                let sample = |j: usize| {
                    let p = (bi * len + f * step + j) * c;
                    let w = wv.as_ref().map_or(1.0, |w| w[j]);
                    (xv[p] * w, if c == 2 { xv[p + 1] * w } else { 0.0 })
                };
                let o = (bi * frames + f) * bins * 2;
                transform(sample, fl, fl, bins, false, &mut out[o..o + bins * 2]);
            }
        }
        Ok(vec![out_t.cast(x.dtype())?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn dft_of_four_reals() {
        // x = [1, 2, 3, 4]: X = [10, -2+2i, -2, -2-2i].
        let x = Tensor::from_vec(&[1, 4, 1], vec![1.0f32, 2., 3., 4.]).unwrap();
        let y = Dft::default().eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 4, 2]);
        close(&y[0].to_f64_vec(), &[10., 0., -2., 2., -2., 0., -2., -2.]);
        let one = Dft {
            onesided: true,
            ..Default::default()
        };
        let y1 = one.eval(&[Some(&x)]).unwrap();
        close(&y1[0].to_f64_vec(), &[10., 0., -2., 2., -2., 0.]);
        // The inverse brings the spectrum back; axis given as an input.
        let inv = Dft {
            inverse: true,
            axis: 0,
            ..Default::default()
        };
        let ax = Tensor::scalar(-2i64);
        let back = inv.eval(&[Some(&y[0]), None, Some(&ax)]).unwrap();
        close(&back[0].to_f64_vec(), &[1., 0., 2., 0., 3., 0., 4., 0.]);
    }

    #[test]
    fn stft_frames() {
        // Two frames of length 2, step 2, no window: [1+2, 1-2], [3+4, 3-4].
        let x = Tensor::from_vec(&[1, 4, 1], vec![1.0f32, 2., 3., 4.]).unwrap();
        let step = Tensor::scalar(2i64);
        let fl = Tensor::scalar(2i64);
        let s = Stft { onesided: false };
        let y = s.eval(&[Some(&x), Some(&step), None, Some(&fl)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 2, 2, 2]);
        close(&y[0].to_f64_vec(), &[3., 0., -1., 0., 7., 0., -1., 0.]);
        assert!(s.eval(&[Some(&x), Some(&step)]).is_err());
    }
}
