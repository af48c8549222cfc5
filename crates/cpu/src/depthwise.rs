//! Direct 2-D depthwise convolution (group == C == M): each input plane is copied once into a
//! zero-padded, stride-deinterleaved buffer, so every kernel tap becomes a contiguous
//! multiply-add along the output row (vectorised by the compiler; compiled a second time with
//! AVX2 + FMA enabled and picked at run time). 3x3 kernels sum all nine taps in one pass.

use crate::sgemm::{activate, Isa};
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::ops::nn::activation::Activation;
use ferrolite_core::plan::Kernel;
use ferrolite_core::{op_ensure, OpError, OpResult, Tensor};
use rayon::prelude::*;

/// Geometry of one plane.
#[derive(Clone, Copy, Debug)]
struct Plane {
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    pt: usize,
    pl: usize,
    /// Padded rows and the length of one deinterleaved phase of a padded row.
    hp: usize,
    lp: usize,
}

#[derive(Debug)]
pub struct DepthwiseKernel {
    isa: Isa,
    p: Plane,
    channels: usize,
    batch: usize,
    x_shape: Vec<usize>,
    w_shape: Vec<usize>,
    y_shape: Vec<usize>,
    activation: Option<Activation>,
}

impl DepthwiseKernel {
    /// `None` unless the conv is 2-D depthwise with one output channel per input channel.
    pub fn new(
        isa: Isa,
        s: &ConvShapes,
        activation: Option<Activation>,
        x_shape: &[usize],
        w_shape: &[usize],
    ) -> Option<DepthwiseKernel> {
        let g = &s.geometry;
        if g.input.len() != 2
            || s.group != s.in_channels
            || s.out_channels != s.in_channels
            || s.group < 2
            || w_shape.get(1) != Some(&1)
        {
            return None;
        }
        let (ih, iw, oh, ow) = (g.input[0], g.input[1], g.output[0], g.output[1]);
        let (kh, kw, sh, sw) = (g.kernel[0], g.kernel[1], g.strides[0], g.strides[1]);
        let (dh, dw, pt, pl) = (
            g.dilations[0],
            g.dilations[1],
            g.pad_begin[0],
            g.pad_begin[1],
        );
        if [kh, kw, sh, sw, dh, dw].contains(&0) || oh == 0 || ow == 0 {
            return None;
        }
        let hp = (ih + pt).max((oh - 1) * sh + (kh - 1) * dh + 1);
        let wp = (iw + pl).max((ow - 1) * sw + (kw - 1) * dw + 1);
        let lp = wp.div_ceil(sw);
        // The padded buffer must stay reasonable (hostile pads).
        if hp.checked_mul(lp * sw)? > 1 << 26 {
            return None;
        }
        Some(DepthwiseKernel {
            isa,
            p: Plane {
                ih,
                iw,
                oh,
                ow,
                kh,
                kw,
                sh,
                sw,
                dh,
                dw,
                pt,
                pl,
                hp,
                lp,
            },
            channels: s.in_channels,
            batch: s.batch,
            x_shape: x_shape.to_vec(),
            w_shape: w_shape.to_vec(),
            y_shape: s.output_shape(),
            activation,
        })
    }
}

/// One output plane. `buf` is scratch.
#[inline(always)]
fn plane(
    p: &Plane,
    x: &[f32],
    w: &[f32],
    bias: f32,
    act: Option<Activation>,
    y: &mut [f32],
    buf: &mut Vec<f32>,
) {
    let (sw, lp) = (p.sw, p.lp);
    // buf[(row * sw + phase) * lp + j] = padded[row][j * sw + phase].
    buf.clear();
    buf.resize(p.hp * sw * lp, 0.0);
    for (r, src) in x.chunks_exact(p.iw).take(p.ih).enumerate() {
        let row = &mut buf[(r + p.pt) * sw * lp..][..sw * lp];
        if sw == 1 {
            row[p.pl..p.pl + p.iw].copy_from_slice(src);
        } else if sw == 2 {
            // Input column i is padded column i + pl: pairs split into the two phases.
            let (ph0, ph1) = row.split_at_mut(lp);
            let (first, second, o0, o1) = if p.pl % 2 == 0 {
                (ph0, ph1, p.pl / 2, p.pl / 2)
            } else {
                (ph1, ph0, p.pl / 2, p.pl / 2 + 1)
            };
            let pairs = src.chunks_exact(2);
            if let [last] = pairs.remainder() {
                first[o0 + src.len() / 2] = *last;
            }
            let n = src.len() / 2;
            for ((a, b), pair) in first[o0..o0 + n]
                .iter_mut()
                .zip(second[o1..o1 + n].iter_mut())
                .zip(pairs)
            {
                *a = pair[0];
                *b = pair[1];
            }
        } else {
            // Phase r holds padded columns r, r + sw, ...; no division per element.
            for (r, dst) in row.chunks_exact_mut(lp).enumerate() {
                let mut c = r;
                for d in dst.iter_mut() {
                    if let Some(&v) = c.checked_sub(p.pl).and_then(|i| src.get(i)) {
                        *d = v;
                    }
                    c += sw;
                }
            }
        }
    }
    let ow = p.ow;
    // Offset of tap column kx inside a padded row (divisions hoisted out of the row loop).
    let col: Vec<usize> = (0..p.kw)
        .map(|kx| {
            let off = kx * p.dw;
            (off % sw) * lp + off / sw
        })
        .collect();
    let row_len = sw * lp;
    let tap = |y0: usize, kx: usize| -> &[f32] { &buf[y0 * row_len + col[kx]..][..ow] };
    for (oy, out) in y.chunks_exact_mut(ow).enumerate().take(p.oh) {
        let ys = oy * p.sh;
        if p.kh == 3 && p.kw == 3 {
            let (r0, r1, r2) = (ys, ys + p.dh, ys + 2 * p.dh);
            let (a0, a1, a2) = (tap(r0, 0), tap(r0, 1), tap(r0, 2));
            let (b0, b1, b2) = (tap(r1, 0), tap(r1, 1), tap(r1, 2));
            let (c0, c1, c2) = (tap(r2, 0), tap(r2, 1), tap(r2, 2));
            let w: &[f32; 9] = w[..9].try_into().expect("9 taps");
            for i in 0..ow {
                let s0 = a0[i] * w[0] + a1[i] * w[1] + a2[i] * w[2];
                let s1 = b0[i] * w[3] + b1[i] * w[4] + b2[i] * w[5];
                let s2 = c0[i] * w[6] + c1[i] * w[7] + c2[i] * w[8];
                out[i] = bias + (s0 + s1 + s2);
            }
        } else {
            out.fill(bias);
            for ky in 0..p.kh {
                for kx in 0..p.kw {
                    let wv = w[ky * p.kw + kx];
                    let src = tap(ys + ky * p.dh, kx);
                    for (o, &s) in out.iter_mut().zip(src) {
                        *o += wv * s;
                    }
                }
            }
        }
        activate(act, out);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn plane_avx2(
    p: &Plane,
    x: &[f32],
    w: &[f32],
    bias: f32,
    act: Option<Activation>,
    y: &mut [f32],
    buf: &mut Vec<f32>,
) {
    plane(p, x, w, bias, act, y, buf)
}

impl Kernel for DepthwiseKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
        let x = ferrolite_core::op::required(inputs, 0)?;
        let w = ferrolite_core::op::required(inputs, 1)?;
        op_ensure!(
            x.shape() == self.x_shape.as_slice() && w.shape() == self.w_shape.as_slice(),
            "inputs have shapes {:?} and {:?}, the kernel was built for {:?} and {:?}",
            x.shape(),
            w.shape(),
            self.x_shape,
            self.w_shape
        );
        let (xv, wv) = (x.as_slice::<f32>()?, w.as_slice::<f32>()?);
        let bias = match inputs.get(2).copied().flatten() {
            Some(b) => {
                op_ensure!(
                    b.numel() == self.channels,
                    "input 2 (B) has {} elements, expected {}",
                    b.numel(),
                    self.channels
                );
                Some(b.as_slice::<f32>()?)
            }
            None => None,
        };
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        op_ensure!(
            y.shape() == self.y_shape.as_slice(),
            "output has shape {:?}, expected {:?}",
            y.shape(),
            self.y_shape
        );
        let yv = y.as_mut_slice::<f32>()?;
        let p = self.p;
        let (in_plane, out_plane, taps) = (p.ih * p.iw, p.oh * p.ow, p.kh * p.kw);
        op_ensure!(
            xv.len() == self.batch * self.channels * in_plane
                && wv.len() == self.channels * taps
                && yv.len() == self.batch * self.channels * out_plane,
            "depthwise conv: buffer sizes differ from the plan"
        );
        if yv.is_empty() {
            return Ok(());
        }
        let isa = self.isa;
        let act = self.activation;
        let one = |buf: &mut Vec<f32>, (i, out): (usize, &mut [f32])| {
            let c = i % self.channels;
            let x = &xv[i * in_plane..(i + 1) * in_plane];
            let w = &wv[c * taps..(c + 1) * taps];
            let b = bias.map_or(0.0, |b| b[c]);
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: Avx2Fma is only chosen when the CPU supports AVX2 and FMA.
                Isa::Avx2Fma => unsafe { plane_avx2(&p, x, w, b, act, out, buf) },
                Isa::Portable => plane(&p, x, w, b, act, out, buf),
            }
        };
        // About 64K multiply-adds per task.
        let min_len = (65536 / (out_plane * taps).max(1)).max(1);
        if rayon::current_num_threads() > 1 && yv.len() * taps >= 1 << 16 {
            yv.par_chunks_mut(out_plane)
                .enumerate()
                .with_min_len(min_len)
                .for_each_init(Vec::new, one);
        } else {
            let mut buf = Vec::new();
            yv.chunks_mut(out_plane)
                .enumerate()
                .for_each(|t| one(&mut buf, t));
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.conv.depthwise"
    }
}

#[cfg(test)]
mod bench {
    use super::*;

    /// `cargo test --release -p ferrolite-cpu -- --ignored --nocapture depthwise_speed`
    #[test]
    #[ignore]
    fn depthwise_speed() {
        let cpu = || -> f64 {
            let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
            s.split_whitespace().next().unwrap().parse::<f64>().unwrap() / 1e9
        };
        for &(c, h, s) in &[
            (96usize, 112usize, 2usize),
            (32, 112, 1),
            (192, 28, 1),
            (576, 14, 1),
        ] {
            let o = (h + 2 - 3) / s + 1;
            let p = Plane {
                ih: h,
                iw: h,
                oh: o,
                ow: o,
                kh: 3,
                kw: 3,
                sh: s,
                sw: s,
                dh: 1,
                dw: 1,
                pt: 1,
                pl: 1,
                hp: (h + 1).max((o - 1) * s + 3),
                lp: (h + 1).max((o - 1) * s + 3).div_ceil(s),
            };
            let x = vec![0.5f32; h * h];
            let w = vec![0.1f32; 9];
            let mut y = vec![0.0f32; o * o];
            let mut buf = Vec::new();
            let t = cpu();
            for _ in 0..c * 10 {
                // SAFETY: test machine has AVX2 + FMA (checked).
                #[cfg(target_arch = "x86_64")]
                if is_x86_feature_detected!("fma") {
                    unsafe { plane_avx2(&p, &x, &w, 0.0, None, &mut y, &mut buf) }
                }
            }
            let dt = (cpu() - t) / 10.0;
            println!(
                "{c}x{h}x{h} s{s}: {:.3} ms, {:.1} GFLOP/s",
                dt * 1e3,
                (c * o * o * 18) as f64 / dt / 1e9
            );
        }
    }
}
