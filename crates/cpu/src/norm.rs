//! f32 LayerNormalization (scale and bias over the normalised axes) and BatchNormalization
//! (inference form, folded into a per-channel multiply-add).

use crate::backend::{boxed, Registry};
use crate::kernel_io::{f32_shape, input, output};
use crate::reduce::{sum, sum_sq_dev};
use crate::split;
use ferrolite_core::op::normalize_axis;
use ferrolite_core::ops::layout::plain_shape;
use ferrolite_core::ops::nn::norm::{BatchNorm, LayerNorm};
use ferrolite_core::plan::{Kernel, KernelRequest};
use ferrolite_core::registry::{needs, DTypes, Layout};
use ferrolite_core::{op_ensure, OpResult, Tensor};

/// The shape without leading ones.
fn trim(s: &[usize]) -> &[usize] {
    let k = s.iter().take_while(|&&d| d == 1).count();
    &s[k..]
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<LayerNorm>(
        "cpu.layer_norm",
        "LayerNorm",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |l, r| {
            let k = layer_norm(l, r.req);
            needs(
                k,
                "scale and bias shaped like the normalised axes, 1 to 3 outputs",
            )
        },
    );
    r.add::<BatchNorm>(
        "cpu.batch_norm",
        "BatchNorm",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |b, r| needs(batch_norm(b, r.req), "inference form with [C] statistics"),
    );
    r.add::<BatchNorm>(
        "cpu.nchwc.batch_norm",
        "BatchNorm",
        10,
        DTypes::AllF32,
        ferrolite_core::ops::layout::NCHWC,
        |b, r| {
            let x = f32_shape(r.req, 0)?;
            let c = plain_shape(x).map_err(|e| e.to_string())?[1];
            if (1..5).any(|i| f32_shape(r.req, i).ok() != Some(&[c][..])) {
                return Err(format!("needs [{c}] statistics"));
            }
            boxed(BatchNormKernel::blocked(b, x), "a blocked input")
        },
    );
}

fn layer_norm(l: &LayerNorm, req: &KernelRequest) -> Option<Box<dyn Kernel>> {
    let x = f32_shape(req, 0).ok()?;
    let axis = normalize_axis(l.axis, x.len()).ok()?;
    if !(1..=3).contains(&l.num_outputs) || req.outputs.len() != l.num_outputs {
        return None;
    }
    if req
        .outputs
        .iter()
        .any(|o| o.dtype != ferrolite_core::DType::F32)
    {
        return None;
    }
    let tail = &x[axis..];
    let s = f32_shape(req, 1).ok()?;
    let fits = |t: &[usize]| trim(t) == trim(tail) && t.len() <= x.len();
    if !fits(s) {
        return None;
    }
    let b = match req.inputs.get(2).and_then(|b| b.as_ref()) {
        Some(_) => {
            let b = f32_shape(req, 2).ok()?;
            if !fits(b) {
                return None;
            }
            Some(b.to_vec())
        }
        None => None,
    };
    Some(Box::new(LayerNormKernel {
        x: x.to_vec(),
        s: s.to_vec(),
        b,
        inner: tail.iter().product(),
        eps: l.epsilon as f32,
        outs: l.num_outputs,
    }))
}

fn batch_norm(b: &BatchNorm, req: &KernelRequest) -> Option<Box<dyn Kernel>> {
    let x = f32_shape(req, 0).ok()?;
    if x.len() < 2 || req.outputs.len() != 1 {
        return None;
    }
    for i in 1..5 {
        if f32_shape(req, i).ok()? != [x[1]] {
            return None;
        }
    }
    Some(Box::new(BatchNormKernel {
        x: x.to_vec(),
        eps: b.epsilon,
        lanes: 1,
    }))
}

#[derive(Debug)]
struct LayerNormKernel {
    x: Vec<usize>,
    s: Vec<usize>,
    b: Option<Vec<usize>>,
    inner: usize,
    eps: f32,
    outs: usize,
}

impl Kernel for LayerNormKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let s = input(inputs, 1, &self.s)?;
        let b = match &self.b {
            Some(bs) => Some(input(inputs, 2, bs)?),
            None => None,
        };
        let n = self.inner;
        let rows = x.len().checked_div(n).unwrap_or(0);
        let mut stats = vec![(0.0f32, 0.0f32); rows];
        {
            let y = output(outputs, 0, x.len())?;
            if n == 0 {
                return Ok(());
            }
            let eps = self.eps;
            let stats_ptr = std::sync::Mutex::new(&mut stats);
            split::for_chunks(y, n, 4, |st, c| {
                let r0 = st / n;
                let mut local = Vec::with_capacity(c.len() / n);
                for (i, yr) in c.chunks_exact_mut(n).enumerate() {
                    let xr = &x[(r0 + i) * n..(r0 + i + 1) * n];
                    let mean = sum(xr) / n as f32;
                    let var = sum_sq_dev(xr, mean) / n as f32;
                    let inv = 1.0 / (var + eps).sqrt();
                    match b {
                        Some(b) => {
                            for (((o, &v), &sc), &bb) in yr.iter_mut().zip(xr).zip(s).zip(b) {
                                *o = (v - mean) * inv * sc + bb;
                            }
                        }
                        None => {
                            for ((o, &v), &sc) in yr.iter_mut().zip(xr).zip(s) {
                                *o = (v - mean) * inv * sc;
                            }
                        }
                    }
                    local.push((mean, inv));
                }
                if let Ok(mut g) = stats_ptr.lock() {
                    g[r0..r0 + local.len()].copy_from_slice(&local);
                }
            });
        }
        if self.outs > 1 {
            let m = output(outputs, 1, rows)?;
            for (o, st) in m.iter_mut().zip(&stats) {
                *o = st.0;
            }
        }
        if self.outs > 2 {
            let m = output(outputs, 2, rows)?;
            for (o, st) in m.iter_mut().zip(&stats) {
                *o = st.1;
            }
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.layernorm"
    }
}

#[derive(Debug)]
pub(crate) struct BatchNormKernel {
    x: Vec<usize>,
    eps: f64,
    /// Channels per element of axis 1: 1, or the block of a blocked (NCHWc) input whose last
    /// axis holds that many channels of a pixel.
    lanes: usize,
}

impl BatchNormKernel {
    /// BatchNormalization of a blocked `[N, C/b, H, W, b]` input, for any block `b`.
    pub(crate) fn blocked(b: &BatchNorm, x: &[usize]) -> Option<Self> {
        let lanes = *x.get(4)?;
        (x.len() == 5 && lanes > 0).then(|| BatchNormKernel {
            x: x.to_vec(),
            eps: b.epsilon,
            lanes,
        })
    }
}

impl Kernel for BatchNormKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let (groups, lanes) = (self.x[1], self.lanes);
        let c = groups * lanes;
        let p: Vec<&[f32]> = (1..5)
            .map(|i| input(inputs, i, &[c]))
            .collect::<OpResult<_>>()?;
        let (scale, bias, mean, var) = (p[0], p[1], p[2], p[3]);
        let mut mul = vec![0.0f32; c];
        let mut add = vec![0.0f32; c];
        for ch in 0..c {
            let m = scale[ch] as f64 / (var[ch] as f64 + self.eps).sqrt();
            mul[ch] = m as f32;
            add[ch] = (bias[ch] as f64 - mean[ch] as f64 * m) as f32;
        }
        let inner: usize = self.x[2..].iter().product();
        let y = output(outputs, 0, x.len())?;
        op_ensure!(x.len() == y.len(), "output size mismatch");
        if inner == 0 || c == 0 {
            return Ok(());
        }
        split::for_chunks(y, inner, 1, |s, chunk| {
            for (i, yr) in chunk.chunks_exact_mut(inner).enumerate() {
                let plane = s / inner + i;
                let ch = plane % groups * lanes;
                let xr = &x[plane * inner..(plane + 1) * inner];
                if lanes == 1 {
                    let (m, a) = (mul[ch], add[ch]);
                    for (o, &v) in yr.iter_mut().zip(xr) {
                        *o = v * m + a;
                    }
                    continue;
                }
                // Blocked: each pixel holds the group's channels in order.
                let (m, a) = (&mul[ch..ch + lanes], &add[ch..ch + lanes]);
                for (o, v) in yr.chunks_exact_mut(lanes).zip(xr.chunks_exact(lanes)) {
                    for j in 0..lanes {
                        o[j] = v[j] * m[j] + a[j];
                    }
                }
            }
        });
        Ok(())
    }

    fn name(&self) -> &str {
        if self.lanes == 1 {
            "cpu.batchnorm"
        } else {
            "cpu.nchwc.batchnorm"
        }
    }
}
