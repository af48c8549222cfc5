//! f32 2-D ConvTranspose as a GEMM and a scatter: per image and group,
//! `cols = W_g^T (M_g*K x C_g) * X_g (C_g x H*W)`, then every column row (one output channel and
//! kernel tap) is added into the output at `i * stride + k * dilation - pad`. Bias first,
//! activation last, like the reference.

use crate::fast::{f32_shape, input, output, PAR_MIN};
use crate::gemm::{Gemm, MatMut, MatRef};
use ferrolite_core::ops::linalg::conv_transpose::{ConvTranspose, ConvTransposeShapes};
use ferrolite_core::ops::nn::activation::Activation;
use ferrolite_core::plan::{Kernel, KernelRequest};
use ferrolite_core::{OpResult, Tensor};
use rayon::prelude::*;
use std::any::Any;
use std::sync::Arc;

pub(crate) fn pick(
    op: &dyn Any,
    req: &KernelRequest,
    gemm: &Arc<dyn Gemm>,
) -> Option<Box<dyn Kernel>> {
    let c = op.downcast_ref::<ConvTranspose>()?;
    let (x, w) = (f32_shape(req, 0)?, f32_shape(req, 1)?);
    let bias = match req.inputs.get(2).and_then(|b| b.as_ref()) {
        Some(_) => Some(f32_shape(req, 2)?.to_vec()),
        None => None,
    };
    let s = c.shapes(x, w).ok()?;
    if s.input.len() != 2 || s.output_shape() != req.outputs.first()?.shape {
        return None;
    }
    if let Some(b) = &bias {
        if b.iter().product::<usize>() != s.out_channels {
            return None;
        }
    }
    // The column buffer (M/group * K x H*W) must stay reasonable; otherwise the reference runs.
    let k: usize = s.kernel.iter().product();
    let cols = (s.out_channels / s.group.max(1))
        .checked_mul(k)?
        .checked_mul(s.input.iter().product())?;
    if cols > 1 << 27 {
        return None;
    }
    Some(Box::new(DeconvKernel {
        gemm: gemm.clone(),
        x: x.to_vec(),
        w: w.to_vec(),
        bias,
        s,
        activation: c.activation,
    }))
}

#[derive(Debug)]
struct DeconvKernel {
    gemm: Arc<dyn Gemm>,
    x: Vec<usize>,
    w: Vec<usize>,
    bias: Option<Vec<usize>>,
    s: ConvTransposeShapes,
    activation: Option<Activation>,
}

impl DeconvKernel {
    /// Adds one column row (input plane of kernel tap `(kh, kw)`) into an output plane.
    fn scatter(&self, col: &[f32], kh: usize, kw: usize, y: &mut [f32]) {
        let s = &self.s;
        let (ih, iw) = (s.input[0], s.input[1]);
        let (oh, ow) = (s.output[0] as i64, s.output[1] as i64);
        let (sh, sw) = (s.strides[0] as i64, s.strides[1] as i64);
        let offh = (kh * s.dilations[0]) as i64 - s.pad_begin[0];
        let offw = (kw * s.dilations[1]) as i64 - s.pad_begin[1];
        // Input columns whose output column lies in [0, ow).
        let first = if offw >= 0 { 0 } else { (-offw + sw - 1) / sw };
        let end = if ow <= offw {
            0
        } else {
            (ow - offw + sw - 1) / sw
        };
        let (first, end) = (first.min(iw as i64) as usize, end.min(iw as i64) as usize);
        if first >= end {
            return;
        }
        for i in 0..ih {
            let o = i as i64 * sh + offh;
            if o < 0 || o >= oh {
                continue;
            }
            let yr = &mut y[o as usize * ow as usize..(o as usize + 1) * ow as usize];
            let cr = &col[i * iw + first..i * iw + end];
            let base = (first as i64 * sw + offw) as usize;
            if sw == 1 {
                for (d, &v) in yr[base..base + cr.len()].iter_mut().zip(cr) {
                    *d += v;
                }
            } else {
                for (j, &v) in cr.iter().enumerate() {
                    yr[base + j * sw as usize] += v;
                }
            }
        }
    }
}

impl Kernel for DeconvKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let w = input(inputs, 1, &self.w)?;
        let b = match &self.bias {
            Some(bs) => Some(input(inputs, 2, bs)?),
            None => None,
        };
        let s = &self.s;
        let (cg, mg) = (s.in_channels / s.group, s.out_channels / s.group);
        let hw = s.input[0] * s.input[1];
        let (kh, kw) = (s.kernel[0], s.kernel[1]);
        let k = kh * kw;
        let op = s.output[0] * s.output[1];
        let y = output(outputs, 0, s.batch * s.out_channels * op)?;
        if y.is_empty() {
            return Ok(());
        }
        let rows = mg * k;
        let mut cols = vec![0.0f32; rows * hw];
        let big = rows * hw * cg >= PAR_MIN * 4 && rayon::current_num_threads() > 1;
        for n in 0..s.batch {
            for g in 0..s.group {
                let xg =
                    &x[(n * s.in_channels + g * cg) * hw..(n * s.in_channels + (g + 1) * cg) * hw];
                let wg = &w[g * cg * rows..(g + 1) * cg * rows];
                // cols (rows x hw) = Wg^T, Wg being cg x rows row-major.
                let task = |r0: usize, c: &mut [f32]| -> OpResult<()> {
                    let m = c.len() / hw.max(1);
                    self.gemm.sgemm(
                        m,
                        cg,
                        hw,
                        1.0,
                        MatRef {
                            data: &wg[r0..],
                            rs: 1,
                            cs: rows,
                        },
                        MatRef {
                            data: xg,
                            rs: hw,
                            cs: 1,
                        },
                        0.0,
                        MatMut {
                            data: c,
                            rs: hw,
                            cs: 1,
                        },
                    )
                };
                if hw == 0 || cg == 0 {
                    cols.fill(0.0);
                } else if big {
                    let per = rows.div_ceil(rayon::current_num_threads() * 2).max(1);
                    cols.par_chunks_mut(per * hw)
                        .enumerate()
                        .try_for_each(|(i, c)| task(i * per, c))?;
                } else {
                    task(0, &mut cols)?;
                }
                let yg = &mut y
                    [(n * s.out_channels + g * mg) * op..(n * s.out_channels + (g + 1) * mg) * op];
                let plane = |mm: usize, yp: &mut [f32]| {
                    yp.fill(b.map_or(0.0, |b| b[g * mg + mm]));
                    for t in 0..k {
                        let r = mm * k + t;
                        self.scatter(&cols[r * hw..(r + 1) * hw], t / kw, t % kw, yp);
                    }
                    if let Some(a) = self.activation {
                        a.apply_slice(yp);
                    }
                };
                if big {
                    yg.par_chunks_mut(op)
                        .enumerate()
                        .for_each(|(mm, yp)| plane(mm, yp));
                } else {
                    for (mm, yp) in yg.chunks_exact_mut(op).enumerate() {
                        plane(mm, yp);
                    }
                }
            }
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.deconv"
    }
}
