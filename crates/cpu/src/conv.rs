//! f32 Conv as im2col + GEMM per (batch, group), with a plain GEMM for pointwise convolutions.
//!
//! Spatial ranks 1 to 3 are handled by viewing them as 3-D with leading size-1 dimensions.
//! Output columns are processed in blocks so the im2col buffer stays small.

use crate::gemm::{Gemm, MatMut, MatRef, PackedMatrix};
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::plan::Kernel;
use ferrolite_core::{op_ensure, OpResult, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

/// im2col buffer budget per task, in elements.
const BLOCK_ELEMS: usize = 1 << 16;

/// A convolution geometry padded to three spatial dimensions.
#[derive(Clone, Debug)]
struct Geo3 {
    input: [usize; 3],
    kernel: [usize; 3],
    strides: [usize; 3],
    dilations: [usize; 3],
    pad: [usize; 3],
    output: [usize; 3],
}

impl Geo3 {
    fn new(s: &ConvShapes) -> Option<Geo3> {
        let g = &s.geometry;
        let r = g.input.len();
        if !(1..=3).contains(&r) {
            return None;
        }
        let lift = |v: &[usize], fill: usize| {
            let mut a = [fill; 3];
            a[3 - r..].copy_from_slice(v);
            a
        };
        Some(Geo3 {
            input: lift(&g.input, 1),
            kernel: lift(&g.kernel, 1),
            strides: lift(&g.strides, 1),
            dilations: lift(&g.dilations, 1),
            pad: lift(&g.pad_begin, 0),
            output: lift(&g.output, 1),
        })
    }
}

#[derive(Debug)]
pub struct ConvKernel {
    gemm: Arc<dyn Gemm>,
    s: ConvShapes,
    geo: Geo3,
    x_shape: Vec<usize>,
    w_shape: Vec<usize>,
    y_shape: Vec<usize>,
    /// Per group, its `[M/group, C/group * k]` weight matrix, when W was a constant.
    packed: Option<Vec<PackedMatrix>>,
    /// 1x1 kernel, stride 1, no padding: X itself is the GEMM's right operand.
    pointwise: bool,
}

impl ConvKernel {
    /// `None` when the shapes fall outside what this kernel handles.
    pub fn new(
        gemm: Arc<dyn Gemm>,
        s: ConvShapes,
        x_shape: &[usize],
        w_shape: &[usize],
        w_value: Option<&Tensor>,
    ) -> OpResult<Option<ConvKernel>> {
        let Some(geo) = Geo3::new(&s) else {
            return Ok(None);
        };
        let pointwise = geo.kernel == [1, 1, 1]
            && geo.strides == [1, 1, 1]
            && s.geometry.pad_begin.iter().all(|&p| p == 0)
            && s.geometry.pad_end.iter().all(|&p| p == 0);
        let (mg, kdim) = (
            s.out_channels / s.group,
            w_shape[1..].iter().product::<usize>(),
        );
        let packed = match w_value {
            Some(w) => {
                let wv = w.as_slice::<f32>()?;
                let mut per = Vec::with_capacity(s.group);
                for g in 0..s.group {
                    let src = MatRef {
                        data: wv.get(g * mg * kdim..).unwrap_or(&[]),
                        rs: kdim,
                        cs: 1,
                    };
                    per.push(gemm.pack(mg, kdim, src)?);
                }
                Some(per)
            }
            None => None,
        };
        let y_shape = s.output_shape();
        Ok(Some(ConvKernel {
            gemm,
            geo,
            x_shape: x_shape.to_vec(),
            w_shape: w_shape.to_vec(),
            y_shape,
            packed,
            pointwise,
            s,
        }))
    }

    /// Fills `buf` (`[C/group * k, bp]`) with the input patches of output columns `p0..p0+bp`.
    fn im2col(&self, x: &[f32], p0: usize, bp: usize, buf: &mut [f32]) {
        let g = &self.geo;
        let cg = self.s.in_channels / self.s.group;
        let [i0, i1, i2] = g.input;
        let [_, o1, o2] = g.output;
        let in_plane = i0 * i1 * i2;
        let mut rows = buf.chunks_exact_mut(bp);
        for xc in x.chunks_exact(in_plane).take(cg) {
            for kd in 0..g.kernel[0] {
                for kh in 0..g.kernel[1] {
                    for kw in 0..g.kernel[2] {
                        let Some(dst) = rows.next() else { return };
                        let (mut p, mut j) = (p0, 0);
                        while j < bp {
                            let (od, oh, ow0) = (p / (o1 * o2), (p / o2) % o1, p % o2);
                            let run = (o2 - ow0).min(bp - j);
                            let id =
                                (od * g.strides[0] + kd * g.dilations[0]).wrapping_sub(g.pad[0]);
                            let ih =
                                (oh * g.strides[1] + kh * g.dilations[1]).wrapping_sub(g.pad[1]);
                            let seg = &mut dst[j..j + run];
                            // Wrapped (negative) positions are huge, so one comparison covers both sides.
                            if id >= i0 || ih >= i1 {
                                seg.fill(0.0);
                            } else {
                                let row = &xc[(id * i1 + ih) * i2..][..i2];
                                for (t, v) in seg.iter_mut().enumerate() {
                                    let iw = ((ow0 + t) * g.strides[2] + kw * g.dilations[2])
                                        .wrapping_sub(g.pad[2]);
                                    *v = row.get(iw).copied().unwrap_or(0.0);
                                }
                            }
                            j += run;
                            p += run;
                        }
                    }
                }
            }
        }
    }

    /// Output columns `p0..p0+bp` of one (batch, group): `C[Mg, bp] = W_g * cols`.
    fn block(
        &self,
        w: MatRef,
        x: &[f32],
        p0: usize,
        bp: usize,
        c: MatMut,
        buf: &mut Vec<f32>,
    ) -> OpResult<()> {
        let mg = self.s.out_channels / self.s.group;
        let cg = self.s.in_channels / self.s.group;
        let kdim = cg * self.geo.kernel.iter().product::<usize>();
        let p_total: usize = self.geo.output.iter().product();
        let b = if self.pointwise {
            MatRef {
                data: x.get(p0..).unwrap_or(&[]),
                rs: p_total,
                cs: 1,
            }
        } else {
            buf.resize(kdim * bp, 0.0);
            self.im2col(x, p0, bp, buf);
            MatRef {
                data: buf,
                rs: bp,
                cs: 1,
            }
        };
        self.gemm.sgemm(mg, kdim, bp, 1.0, w, b, 0.0, c)
    }
}

impl Kernel for ConvKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
        let x = ferrolite_core::op::required(inputs, 0)?;
        op_ensure!(
            x.shape() == self.x_shape.as_slice(),
            "input 0 (X) has shape {:?}, the kernel was built for {:?}",
            x.shape(),
            self.x_shape
        );
        let xv = x.as_slice::<f32>()?;
        let w_in = match &self.packed {
            Some(_) => None,
            None => {
                let w = ferrolite_core::op::required(inputs, 1)?;
                op_ensure!(
                    w.shape() == self.w_shape.as_slice(),
                    "input 1 (W) has shape {:?}, the kernel was built for {:?}",
                    w.shape(),
                    self.w_shape
                );
                Some(w.as_slice::<f32>()?)
            }
        };
        let bias = match inputs.get(2).copied().flatten() {
            Some(b) => {
                op_ensure!(
                    b.numel() == self.s.out_channels,
                    "input 2 (B) has {} elements, expected {}",
                    b.numel(),
                    self.s.out_channels
                );
                Some(b.as_slice::<f32>()?)
            }
            None => None,
        };
        let y = outputs
            .first_mut()
            .ok_or_else(|| ferrolite_core::OpError("no output".into()))?;
        op_ensure!(
            y.shape() == self.y_shape.as_slice(),
            "output has shape {:?}, expected {:?}",
            y.shape(),
            self.y_shape
        );
        let yv = y.as_mut_slice::<f32>()?;
        let (group, mg, cg) = (
            self.s.group,
            self.s.out_channels / self.s.group,
            self.s.in_channels / self.s.group,
        );
        let p_total: usize = self.geo.output.iter().product();
        let in_plane: usize = self.geo.input.iter().product();
        let kdim = cg * self.geo.kernel.iter().product::<usize>();
        if yv.is_empty() || p_total == 0 {
            return Ok(());
        }
        let bp = (BLOCK_ELEMS / kdim.max(1))
            .clamp(16, p_total.max(16))
            .min(p_total);
        let weights = |g: usize| -> MatRef {
            match (&self.packed, w_in) {
                (Some(p), _) => p[g].as_ref(),
                (None, Some(w)) => MatRef {
                    data: w.get(g * mg * kdim..).unwrap_or(&[]),
                    rs: kdim,
                    cs: 1,
                },
                (None, None) => MatRef {
                    data: &[],
                    rs: 0,
                    cs: 0,
                },
            }
        };
        let x_of = |i: usize| -> &[f32] {
            // Chunk i is (batch i / group, group i % group); its input channels are contiguous.
            let (n, g) = (i / group, i % group);
            let start = (n * self.s.in_channels + g * cg) * in_plane;
            xv.get(start..start + cg * in_plane).unwrap_or(&[])
        };
        let add_bias = |i: usize, chunk: &mut [f32]| {
            if let Some(b) = bias {
                let g = i % group;
                for (m, row) in chunk.chunks_exact_mut(p_total).enumerate() {
                    let v = b[g * mg + m];
                    row.iter_mut().for_each(|e| *e += v);
                }
            }
        };
        let tasks = self.s.batch * group;
        let chunks = yv.par_chunks_mut(mg * p_total);
        if tasks >= rayon::current_num_threads() || bp == p_total {
            // Enough (batch, group) pairs to go round: each writes its own output block.
            chunks.enumerate().try_for_each(|(i, chunk)| {
                let mut buf = Vec::new();
                let mut p0 = 0;
                while p0 < p_total {
                    let n = bp.min(p_total - p0);
                    let c = MatMut {
                        data: &mut chunk[p0..],
                        rs: p_total,
                        cs: 1,
                    };
                    self.block(weights(i % group), x_of(i), p0, n, c, &mut buf)?;
                    p0 += n;
                }
                add_bias(i, chunk);
                Ok(())
            })
        } else {
            // Few pairs: parallelise over column blocks, each into its own buffer.
            chunks.enumerate().try_for_each(|(i, chunk)| {
                let starts: Vec<usize> = (0..p_total).step_by(bp).collect();
                let parts: Vec<(usize, usize, Vec<f32>)> = starts
                    .into_par_iter()
                    .map(|p0| {
                        let n = bp.min(p_total - p0);
                        let mut out = vec![0.0f32; mg * n];
                        let mut buf = Vec::new();
                        let c = MatMut {
                            data: &mut out,
                            rs: n,
                            cs: 1,
                        };
                        self.block(weights(i % group), x_of(i), p0, n, c, &mut buf)?;
                        Ok((p0, n, out))
                    })
                    .collect::<OpResult<_>>()?;
                for (p0, n, out) in parts {
                    for (dst, src) in chunk.chunks_exact_mut(p_total).zip(out.chunks_exact(n)) {
                        dst[p0..p0 + n].copy_from_slice(src);
                    }
                }
                add_bias(i, chunk);
                Ok(())
            })
        }
    }

    fn name(&self) -> &str {
        if self.pointwise {
            "cpu.conv.pointwise"
        } else {
            "cpu.conv.im2col"
        }
    }
}
