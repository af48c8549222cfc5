//! Window functions (Hann, Hamming, Blackman) and the mel filter bank matrix.

use crate::op::{input, output, required, Prototype};
use crate::ops::util::read_i64s;
use crate::TensorInfo;
use crate::{op_bail, op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor};
use std::f64::consts::PI;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WindowKind {
    Hann,
    Hamming,
    Blackman,
}

/// A window of `size` samples (input 0, a scalar).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Window {
    pub kind: WindowKind,
    /// Periodic windows (for spectral analysis) divide by `size`; symmetric ones by `size - 1`.
    pub periodic: bool,
    pub dtype: DType,
}

impl Window {
    pub fn new(kind: WindowKind) -> Self {
        Window {
            kind,
            periodic: true,
            dtype: DType::F32,
        }
    }

    /// Fills `out` with the window of `out.len()` samples.
    pub fn fill(&self, out: &mut [f64]) {
        let size = out.len();
        let denom = if self.periodic {
            size
        } else {
            size.saturating_sub(1)
        } as f64;
        for (n, o) in out.iter_mut().enumerate() {
            let x = 2.0 * PI * n as f64 / denom;
            *o = match self.kind {
                WindowKind::Hann => 0.5 - 0.5 * x.cos(),
                WindowKind::Hamming => {
                    let a = 25.0 / 46.0;
                    a - (1.0 - a) * x.cos()
                }
                WindowKind::Blackman => 0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos(),
            };
        }
    }

    pub fn values(&self, size: usize) -> Vec<f64> {
        let mut v = vec![0.0; size];
        self.fill(&mut v);
        v
    }
}

fn scalar_i64(t: &Tensor, what: &str) -> OpResult<i64> {
    match read_i64s(t, what, 1)?.first() {
        Some(&x) => Ok(x),
        None => op_bail!("{what} is empty"),
    }
}

fn scalar_f64(t: &Tensor, what: &str) -> OpResult<f64> {
    op_ensure!(
        t.numel() == 1,
        "{what}: expected a scalar, got shape {:?}",
        t.shape()
    );
    Ok(t.to_f64_vec()[0])
}

fn window_size(t: &Tensor) -> OpResult<usize> {
    let n = scalar_i64(t, "input 0 (size)")?;
    op_ensure!(n >= 0, "input 0 (size) must not be negative, got {n}");
    Ok(n as usize)
}

impl Op for Window {
    fn name(&self) -> &'static str {
        match self.kind {
            WindowKind::Hann => "HannWindow",
            WindowKind::Hamming => "HammingWindow",
            WindowKind::Blackman => "BlackmanWindow",
        }
    }

    fn prototype(&self) -> &'static Prototype {
        static P: Prototype = Prototype {
            inputs: &[input("size", DTypeSet::INDEX)],
            outputs: &[output("output")],
            value_inputs: &[0],
        };
        &P
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let n = window_size(ctx.value(0)?)?;
        Ok(vec![TensorInfo::new(self.dtype, vec![n])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let n = window_size(required(inputs, 0)?)?;
        let mut t = Tensor::zeros(DType::F64, &[n])?;
        self.fill(t.as_mut_slice::<f64>()?);
        Ok(vec![t.cast(self.dtype)?])
    }
}

/// Triangular mel-scale filters: `[dft_length / 2 + 1, num_mel_bins]`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MelWeightMatrix {
    pub dtype: DType,
}

impl Default for MelWeightMatrix {
    fn default() -> Self {
        MelWeightMatrix { dtype: DType::F32 }
    }
}

/// The sizes `(num_mel_bins, dft_length, sample_rate)`.
fn mel_sizes(bins: &Tensor, dft: &Tensor, rate: &Tensor) -> OpResult<(usize, usize, usize)> {
    let m = scalar_i64(bins, "input 0 (num_mel_bins)")?;
    let d = scalar_i64(dft, "input 1 (dft_length)")?;
    let r = scalar_i64(rate, "input 2 (sample_rate)")?;
    op_ensure!(m > 0, "input 0 (num_mel_bins) must be positive, got {m}");
    op_ensure!(d > 0, "input 1 (dft_length) must be positive, got {d}");
    op_ensure!(r > 0, "input 2 (sample_rate) must be positive, got {r}");
    Ok((m as usize, d as usize, r as usize))
}

impl MelWeightMatrix {
    /// The matrix, row-major `[dft_length / 2 + 1, num_mel_bins]`.
    pub fn matrix(&self, m: usize, dft: usize, rate: usize, lo: f32, hi: f32) -> OpResult<Tensor> {
        let rows = dft / 2 + 1;
        // Mel edges in f32 as the reference computes them, bin positions in f64.
        let mel = |f: f32| 2595.0f32 * (1.0f32 + f / 700.0).log10();
        let (lo_mel, hi_mel) = (mel(lo), mel(hi));
        let step = (hi_mel - lo_mel) / (m + 2) as f32;
        let edges: Vec<i64> = (0..m + 2)
            .map(|i| {
                let mel = i as f64 * step as f64 + lo_mel as f64;
                let hz = 700.0 * (10f64.powf(mel / 2595.0) - 1.0);
                (((dft + 1) as f64 * hz) / rate as f64).floor() as i64
            })
            .collect();
        let mut t = Tensor::zeros(DType::F64, &[rows, m])?;
        let out = t.as_mut_slice::<f64>()?;
        let mut set = |j: i64, i: usize, v: f64| -> OpResult<()> {
            if j < 0 || j as usize >= rows {
                op_bail!("mel bin edge {j} lies outside the {rows} spectrogram bins");
            }
            out[j as usize * m + i] = v;
            Ok(())
        };
        for i in 0..m {
            let (l, c, h) = (edges[i], edges[i + 1], edges[i + 2]);
            if c == l {
                set(c, i, 1.0)?;
            } else {
                for j in l..=c {
                    set(j, i, (j - l) as f64 / (c - l) as f64)?;
                }
            }
            if h > c {
                for j in c..h {
                    set(j, i, (h - j) as f64 / (h - c) as f64)?;
                }
            }
        }
        Ok(t)
    }
}

impl Op for MelWeightMatrix {
    op_common!(
        "MelWeightMatrix",
        Prototype {
            inputs: &[
                input("num_mel_bins", DTypeSet::INDEX),
                input("dft_length", DTypeSet::INDEX),
                input("sample_rate", DTypeSet::INDEX),
                input("lower_edge_hertz", DTypeSet::FLOAT),
                input("upper_edge_hertz", DTypeSet::FLOAT),
            ],
            outputs: &[output("output")],
            value_inputs: &[0, 1, 2],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let (m, d, _) = mel_sizes(ctx.value(0)?, ctx.value(1)?, ctx.value(2)?)?;
        Ok(vec![TensorInfo::new(self.dtype, vec![d / 2 + 1, m])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (m, d, r) = mel_sizes(
            required(inputs, 0)?,
            required(inputs, 1)?,
            required(inputs, 2)?,
        )?;
        let lo = scalar_f64(required(inputs, 3)?, "input 3 (lower_edge_hertz)")? as f32;
        let hi = scalar_f64(required(inputs, 4)?, "input 4 (upper_edge_hertz)")? as f32;
        Ok(vec![self.matrix(m, d, r, lo, hi)?.cast(self.dtype)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows() {
        let close = |a: &[f64], b: &[f64]| {
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() < 1e-9, "{a:?} vs {b:?}");
            }
        };
        let mut w = Window::new(WindowKind::Hann);
        close(&w.values(4), &[0.0, 0.5, 1.0, 0.5]);
        w.periodic = false;
        close(&w.values(3), &[0.0, 1.0, 0.0]);
        let h = Window::new(WindowKind::Hamming);
        close(&h.values(2), &[4.0 / 46.0, 1.0]);
        let b = Window::new(WindowKind::Blackman);
        close(&b.values(2), &[0.0, 0.42 + 0.5 + 0.08]);
        let y = Window::new(WindowKind::Hann)
            .eval(&[Some(&Tensor::scalar(4i64))])
            .unwrap();
        assert_eq!(y[0].dtype(), DType::F32);
        assert_eq!(y[0].shape(), &[4]);
    }

    #[test]
    fn mel_filters_are_triangles() {
        // One filter, 8-point DFT at 8 Hz covering 0..4 Hz: edges floor(9·hz/8) of
        // 0, ~1.2, ~2.6 Hz -> bins 0, 1, 2; a triangle rising at bin 1 and falling at bin 2.
        let t = MelWeightMatrix::default()
            .matrix(1, 8, 8, 0.0, 4.0)
            .unwrap();
        let m = t.to_f64_vec();
        assert_eq!(m.len(), 5);
        assert_eq!(m[0], 0.0);
        assert_eq!(m[1], 1.0);
        assert!(m.iter().all(|v| (0.0..=1.0).contains(v)));
    }
}
