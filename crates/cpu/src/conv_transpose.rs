//! f32 2-D ConvTranspose as a packed GEMM plus col2im: per (batch, group),
//! `col[Mg * k, H * W] = W_g^T * X_g` (W prepacked when constant), then every column entry
//! is added to the output position it lands on; bias and activation follow in one pass.

use crate::backend::{built, constant, Registry};
use crate::fast::f32_shape;
use crate::gemm::{Gemm, MatRef, PackedMatrix, Side};
use crate::sgemm::{activate, Problem, Src};
use crate::Sgemm;
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::conv_transpose::ConvTranspose;
use ferrolite_core::ops::linalg::conv_transpose::ConvTransposeShapes;
use ferrolite_core::plan::Kernel;
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::{op_ensure, OpError, OpResult, Tensor};
use rayon::prelude::*;

#[derive(Debug)]
pub struct ConvTransposeKernel {
    gemm: Sgemm,
    s: ConvTransposeShapes,
    x_shape: Vec<usize>,
    w_shape: Vec<usize>,
    y_shape: Vec<usize>,
    /// Per group, `W_g^T` (`[Mg * k, Cg]`) packed as the left operand.
    packed: Option<Vec<PackedMatrix>>,
    activation: Option<UnaryKind>,
}

impl ConvTransposeKernel {
    /// `None` unless 2-D with a sane column buffer.
    pub fn new(
        gemm: Sgemm,
        s: ConvTransposeShapes,
        activation: Option<UnaryKind>,
        x_shape: &[usize],
        w_shape: &[usize],
        w_value: Option<&Tensor>,
    ) -> OpResult<Option<ConvTransposeKernel>> {
        if s.input.len() != 2 || s.strides.contains(&0) || s.group == 0 {
            return Ok(None);
        }
        let (cg, mg) = (s.in_channels / s.group, s.out_channels / s.group);
        let ks: usize = s.kernel.iter().product();
        let hw: usize = s.input.iter().product();
        if mg
            .checked_mul(ks)
            .and_then(|v| v.checked_mul(hw))
            .is_none_or(|v| v > 1 << 27)
        {
            return Ok(None);
        }
        let packed = match w_value {
            Some(w) => {
                let wv = w.as_slice::<f32>()?;
                let mut per = Vec::with_capacity(s.group);
                for g in 0..s.group {
                    // Element (i, c) of W_g^T is W[(g * Cg + c) * Mg * k + i].
                    let src = MatRef {
                        data: wv.get(g * cg * mg * ks..).unwrap_or(&[]),
                        rs: 1,
                        cs: mg * ks,
                    };
                    per.push(gemm.pack(mg * ks, cg, src, Side::A)?);
                }
                Some(per)
            }
            None => None,
        };
        Ok(Some(ConvTransposeKernel {
            gemm,
            y_shape: s.output_shape(),
            s,
            x_shape: x_shape.to_vec(),
            w_shape: w_shape.to_vec(),
            packed,
            activation,
        }))
    }
}

impl Kernel for ConvTransposeKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
        let (xv, wv) = crate::conv::data_and_weights(inputs, &self.x_shape, &self.w_shape)?;
        let s = &self.s;
        let bias = crate::conv::bias_input(inputs, s.out_channels)?;
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
        let (cg, mg) = (s.in_channels / s.group, s.out_channels / s.group);
        let (kh, kw) = (s.kernel[0], s.kernel[1]);
        let ks = kh * kw;
        let (ih, iw) = (s.input[0], s.input[1]);
        let (oh, ow) = (s.output[0], s.output[1]);
        let (hw, out_plane) = (ih * iw, oh * ow);
        op_ensure!(
            xv.len() == s.batch * s.in_channels * hw
                && wv.len() == s.in_channels * mg * ks
                && yv.len() == s.batch * s.out_channels * out_plane,
            "conv transpose: buffer sizes differ from the plan"
        );
        if yv.is_empty() {
            return Ok(());
        }
        let mut col = vec![0.0f32; mg * ks * hw];
        for n in 0..s.batch {
            for g in 0..s.group {
                let xs = (n * s.in_channels + g * cg) * hw;
                let a = match &self.packed {
                    Some(p) => Src::Packed(p[g].data()),
                    None => Src::Strided {
                        data: &wv[g * cg * mg * ks..],
                        rs: 1,
                        cs: mg * ks,
                    },
                };
                let prob = Problem {
                    isa: self.gemm.isa,
                    m: mg * ks,
                    n: hw,
                    k: cg,
                    alpha: 1.0,
                    a,
                    b: Src::Strided {
                        data: &xv[xs..xs + cg * hw],
                        rs: hw,
                        cs: 1,
                    },
                    accumulate: false,
                    row_bias: &[],
                    col_bias: &[],
                    act: None,
                };
                // SAFETY: col is a dense (mg * ks) x hw buffer owned here.
                unsafe { prob.run(col.as_mut_ptr(), hw, true) };
                let ys = (n * s.out_channels + g * mg) * out_plane;
                let col = &col;
                let planes = yv[ys..ys + mg * out_plane].par_chunks_mut(out_plane);
                planes.enumerate().for_each(|(m, out)| {
                    out.fill(bias.map_or(0.0, |b| b[g * mg + m]));
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let src = &col[(m * ks + ky * kw + kx) * hw..][..hw];
                            let offy = (ky * s.dilations[0]) as i64 - s.pad_begin[0];
                            let offx = (kx * s.dilations[1]) as i64 - s.pad_begin[1];
                            for (y, row) in src.chunks_exact(iw).enumerate() {
                                let o = y as i64 * s.strides[0] as i64 + offy;
                                if o < 0 || o >= oh as i64 {
                                    continue;
                                }
                                let dst = &mut out[o as usize * ow..][..ow];
                                let sw = s.strides[1] as i64;
                                for (x, &v) in row.iter().enumerate() {
                                    let ox = x as i64 * sw + offx;
                                    if ox >= 0 && ox < ow as i64 {
                                        dst[ox as usize] += v;
                                    }
                                }
                            }
                        }
                    }
                    activate(self.activation, out);
                });
            }
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.conv_transpose"
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<ConvTranspose>(
        "cpu.conv_transpose",
        "ConvTranspose",
        10,
        DTypes::AllF32,
        Layout::Plain,
        |c, r| {
            let x = f32_shape(r.req, 0)?;
            let w = f32_shape(r.req, 1)?;
            let s = c.shapes(x, w).map_err(|e| e.to_string())?;
            let k =
                ConvTransposeKernel::new(r.cx.gemm(), s, c.activation, x, w, constant(r.req, 1));
            built(k, "a 2-D transposed convolution")
        },
    );
}
