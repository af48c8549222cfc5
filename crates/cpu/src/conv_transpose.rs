//! f32 2-D ConvTranspose as a packed GEMM plus col2im: per (batch, group),
//! `col[Mg * k, H * W] = W_g^T * X_g` (W prepacked when constant), then every column entry
//! is added to the output position it lands on; bias and activation follow in one pass.

use crate::backend::{built, constant, Registry};
use crate::gemm::{packed_bytes, Gemm, MatRef, PackedMatrix, Packing, PackingFor, Packs, Side};
use crate::kernel_io::f32_shape;
use crate::sgemm::{Problem, Src};
use crate::split::{self, Cost};
use crate::Sgemm;
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::conv_transpose::ConvTranspose;
use ferrolite_core::ops::linalg::conv_transpose::ConvTransposeShapes;
use ferrolite_core::plan::Kernel;
use ferrolite_core::prepacked::Prepacks;
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::scratch::{bytes_for, Carve, Scratch, ScratchNeed};
use ferrolite_core::{op_ensure, OpError, OpResult, Tensor};

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
        packs: &Prepacks,
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
                    per.push(gemm.pack(mg * ks, cg, src, Side::A, packs)?);
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

/// A band's column buffer is kept to about this size (L2).
const COL_BYTES: usize = 512 << 10;

/// The output pointer shared by the bands, each writing its own rows.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: the bands write disjoint rows of the output (see `run`).
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

impl ConvTransposeKernel {
    /// What the product making `n_cols` columns of a band packs: W when it is not prepacked,
    /// and the band's input.
    fn packing_for(&self, n_cols: usize) -> PackingFor {
        let s = &self.s;
        let (mg, ks) = (s.out_channels / s.group, s.kernel.iter().product::<usize>());
        PackingFor::new(mg * ks, s.in_channels / s.group, n_cols).a_packed(self.packed.is_some())
    }

    /// Input rows per band: their columns stay in L2.
    fn band_rows(&self) -> usize {
        let s = &self.s;
        let (mg, ks) = (s.out_channels / s.group, s.kernel.iter().product::<usize>());
        let (ih, iw) = (s.input[0], s.input[1]);
        (COL_BYTES / (4 * mg * ks * iw).max(1)).clamp(1, ih.max(1))
    }

    /// `col[Mg * k, n_cols] = W_g^T * X` for the `n_cols` input pixels from `x` (rows `hw`
    /// apart per channel), on this thread.
    #[allow(clippy::too_many_arguments)]
    fn columns(
        &self,
        g: usize,
        cg: usize,
        w: &[f32],
        x: &[f32],
        n_cols: usize,
        hw: usize,
        col: &mut [f32],
        packs: Packs,
    ) -> OpResult<()> {
        let s = &self.s;
        let (mg, ks) = (s.out_channels / s.group, s.kernel.iter().product::<usize>());
        let a = match &self.packed {
            Some(p) => Src::Packed(p[g].data()),
            None => Src::Strided {
                data: &w[g * cg * mg * ks..],
                rs: 1,
                cs: mg * ks,
            },
        };
        let prob = Problem {
            isa: self.gemm.isa,
            m: mg * ks,
            n: n_cols,
            k: cg,
            alpha: 1.0,
            a,
            b: Src::Strided {
                data: x,
                rs: hw,
                cs: 1,
            },
            accumulate: false,
            row_bias: &[],
            col_bias: &[],
            act: None,
        };
        assert!(col.len() >= mg * ks * n_cols && (cg == 0 || x.len() >= (cg - 1) * hw + n_cols));
        // SAFETY: col is a dense (mg * ks) x n_cols buffer owned here (asserted).
        unsafe { prob.run(col.as_mut_ptr(), n_cols, Packing::Serial(packs)) }
    }
}

impl ConvTransposeKernel {
    /// Adds plane `m`'s columns of the band of input `rows` (`col`, as [`Self::columns`]) to
    /// its output plane `out`. With `owned` (the output rows only this band reaches), those
    /// rows start from the bias and are activated after; otherwise the first band fills the
    /// whole plane with the bias and the caller activates it after the last.
    #[allow(clippy::too_many_arguments)]
    fn scatter(
        &self,
        col: &[f32],
        m: usize,
        rows: std::ops::Range<usize>,
        bias: Option<f32>,
        owned: Option<std::ops::Range<usize>>,
        first_band: bool,
        out: &mut [f32],
    ) {
        let s = &self.s;
        let (kh, kw) = (s.kernel[0], s.kernel[1]);
        let (iw, oh, ow) = (s.input[1], s.output[0], s.output[1]);
        let (sh, sw) = (s.strides[0] as i64, s.strides[1] as i64);
        let (dh, dw) = (s.dilations[0] as i64, s.dilations[1] as i64);
        let (ph, pw) = (s.pad_begin[0], s.pad_begin[1]);
        let n_cols = rows.len() * iw;
        let fill = bias.unwrap_or(0.0);
        // The common upsampling (kernel = stride, no pads or dilation, no output padding):
        // each output value comes from exactly one column value, so every output row is its
        // kernel row's columns interleaved, written once.
        let tiles_exactly = s.kernel == s.strides
            && s.dilations.iter().all(|&d| d == 1)
            && s.pad_begin.iter().all(|&p| p == 0)
            && oh == s.input[0] * kh
            && ow == iw * kw;
        if let (true, Some(r)) = (tiles_exactly, &owned) {
            for (i, y) in rows.clone().enumerate() {
                for ky in 0..kh {
                    let dst = &mut out[(y * kh + ky) * ow..][..ow];
                    let src =
                        |kx: usize| &col[(m * kh * kw + ky * kw + kx) * n_cols + i * iw..][..iw];
                    if kw == 2 {
                        let (s0, s1) = (src(0), src(1));
                        for ((d, &a), &b) in dst.chunks_exact_mut(2).zip(s0).zip(s1) {
                            d[0] = a + fill;
                            d[1] = b + fill;
                        }
                    } else {
                        for kx in 0..kw {
                            for (d, &v) in dst[kx..].iter_mut().step_by(kw).zip(src(kx)) {
                                *d = v + fill;
                            }
                        }
                    }
                }
            }
            crate::nchwc::activate_row(
                self.gemm.isa,
                self.activation,
                &mut out[r.start * ow..r.end * ow],
            );
            return;
        }
        match &owned {
            Some(r) => out[r.start * ow..r.end * ow].fill(fill),
            None if first_band => out.fill(fill),
            None => {}
        }
        for ky in 0..kh {
            for kx in 0..kw {
                let src = &col[(m * kh * kw + ky * kw + kx) * n_cols..][..n_cols];
                // Input columns x with 0 <= x * sw + off < ow.
                let off = kx as i64 * dw - pw;
                let x_lo = if off < 0 { (-off + sw - 1) / sw } else { 0 };
                let x_hi = if ow as i64 > off {
                    ((ow as i64 - 1 - off) / sw + 1).min(iw as i64)
                } else {
                    0
                };
                let (x_lo, x_hi) = (x_lo.min(iw as i64) as usize, x_hi.max(0) as usize);
                if x_lo >= x_hi {
                    continue;
                }
                for (r, y) in rows.clone().enumerate() {
                    let o = y as i64 * sh + ky as i64 * dh - ph;
                    if o < 0 || o >= oh as i64 {
                        continue;
                    }
                    let dst = &mut out[o as usize * ow..][..ow];
                    let row = &src[r * iw..][..iw];
                    let first = (x_lo as i64 * sw + off) as usize;
                    let step = sw as usize;
                    for (d, &v) in dst[first..].iter_mut().step_by(step).zip(&row[x_lo..x_hi]) {
                        *d += v;
                    }
                }
            }
        }
        if let Some(r) = owned {
            crate::nchwc::activate_row(
                self.gemm.isa,
                self.activation,
                &mut out[r.start * ow..r.end * ow],
            );
        }
    }
}

impl Kernel for ConvTransposeKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        scratch: &Scratch,
    ) -> OpResult<()> {
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
        // Input rows in bands whose columns stay in L2. When a kernel's rows reach no
        // further than the stride, each output row takes values from one input row only, so
        // bands own disjoint output rows and run in parallel; otherwise the bands run in
        // turn and the output planes in parallel.
        if hw == 0 {
            // No input pixel: the output is the bias, activated.
            for (i, plane) in yv.chunks_mut(out_plane).enumerate() {
                plane.fill(bias.map_or(0.0, |b| b[i % s.out_channels]));
                crate::nchwc::activate_row(self.gemm.isa, self.activation, plane);
            }
            return Ok(());
        }
        let disjoint = (kh - 1) * s.dilations[0] < s.strides[0];
        let band_rows = self.band_rows();
        let bands = ih.div_ceil(band_rows);
        // Per group: the columns' product, then scattering them into the planes.
        let cost = Cost {
            flops: 2 * mg * ks * cg * hw,
            bytes: 2 * mg * out_plane * size_of::<f32>(),
        };
        let workers = split::worth(cost);
        let parallel = workers > 1;
        for n in 0..s.batch {
            for g in 0..s.group {
                let xs = (n * s.in_channels + g * cg) * hw;
                let ys = (n * s.out_channels + g * mg) * out_plane;
                let y_group = SendPtr(yv[ys..ys + mg * out_plane].as_mut_ptr());
                let bias_g = bias.map(|b| &b[g * mg..(g + 1) * mg]);
                // A band in parallel works in its worker's region of scratch, bands in turn
                // in the shared one.
                let band = |b: usize, planes_parallel: bool, own: &mut Carve| -> OpResult<()> {
                    let rows = b * band_rows..((b + 1) * band_rows).min(ih);
                    let n_cols = rows.len() * iw;
                    let col: &mut [f32] = own.take(mg * ks * n_cols)?;
                    let packs = Packs::carve(own, self.packing_for(n_cols))?;
                    let x = &xv[xs + rows.start * iw..xs + cg * hw];
                    self.columns(g, cg, wv, x, n_cols, hw, col, packs)?;
                    let owned = if disjoint {
                        let at = |y: usize| {
                            (y as i64 * s.strides[0] as i64 - s.pad_begin[0]).clamp(0, oh as i64)
                                as usize
                        };
                        let lo = if b == 0 { 0 } else { at(rows.start) };
                        let hi = if b + 1 == bands { oh } else { at(rows.end) };
                        Some(lo..hi)
                    } else {
                        None
                    };
                    let plane = |(m, out): (usize, &mut [f32])| {
                        self.scatter(
                            col,
                            m,
                            rows.clone(),
                            bias_g.map(|b| b[m]),
                            owned.clone(),
                            b == 0,
                            out,
                        )
                    };
                    // SAFETY: with `disjoint`, this band alone writes output rows `owned`
                    // of each plane; otherwise bands run one after another and this call
                    // alone writes the group's planes.
                    let planes =
                        unsafe { std::slice::from_raw_parts_mut(y_group.get(), mg * out_plane) };
                    let on = if planes_parallel { workers } else { 1 };
                    split::for_rows(planes, out_plane, on, |m, out| plane((m, out)));
                    Ok(())
                };
                if disjoint && parallel && bands > 1 {
                    split::try_for_each_task(bands, true, |b| {
                        scratch.with_thread(|own| band(b, false, own))
                    })?;
                } else {
                    (0..bands).try_for_each(|b| {
                        scratch.with_shared(|own| band(b, parallel && !disjoint, own))
                    })?;
                }
                if !disjoint {
                    // The bands added into the planes; the activation follows.
                    let planes = &mut yv[ys..ys + mg * out_plane];
                    split::for_rows(planes, out_plane, workers, |_, p| {
                        crate::nchwc::activate_row(self.gemm.isa, self.activation, p)
                    });
                }
            }
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.conv_transpose"
    }

    fn scratch(&self, _threads: usize) -> ScratchNeed {
        // A band's columns and the packing of the product that makes them.
        let s = &self.s;
        let (mg, ks) = (s.out_channels / s.group, s.kernel.iter().product::<usize>());
        let n_cols = self.band_rows() * s.input[1];
        let band = bytes_for::<f32>(mg * ks * n_cols) + self.packing_for(n_cols).bytes();
        ScratchNeed {
            shared: band,
            per_thread: band,
        }
    }

    fn prepacked_bytes(&self) -> usize {
        self.packed.as_deref().map_or(0, packed_bytes)
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<ConvTranspose>(
        "cpu.conv_transpose",
        "ConvTranspose",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |c, r| {
            let x = f32_shape(r.req, 0)?;
            let w = f32_shape(r.req, 1)?;
            let s = c.shapes(x, w).map_err(|e| e.to_string())?;
            let k = ConvTransposeKernel::new(
                r.cx.gemm(),
                s,
                c.activation,
                x,
                w,
                constant(r.req, 1),
                r.req.packs,
            );
            built(k, "a 2-D transposed convolution")
        },
    );
}
