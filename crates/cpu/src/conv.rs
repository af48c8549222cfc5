//! f32 Conv: depthwise convolutions run a direct kernel ([`crate::depthwise`]); the rest
//! run im2col + packed GEMM per (batch, group, column block), with the weights prepacked and
//! bias + activation fused into the GEMM's store. Pointwise convolutions (1x1, stride 1, no
//! padding) use X itself as the GEMM's right operand.
//!
//! Spatial ranks 1 to 3 are handled by viewing them as 3-D with leading size-1 dimensions.
//! Output columns are processed in blocks so the im2col buffer stays in cache.

use crate::gemm::{PackedMatrix, Side};
use crate::sgemm::{Problem, SendPtr, Src, KC, MR, NR};
use crate::winograd::{WinogradKernel, WinogradTile};
use crate::Sgemm;
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::ops::nn::activation::Activation;
use ferrolite_core::plan::Kernel;
use ferrolite_core::{op_ensure, OpResult, Tensor};
use rayon::prelude::*;

/// im2col buffer budget per task, in elements (about 512 KB).
const BLOCK_ELEMS: usize = 1 << 17;

/// A convolution geometry padded to three spatial dimensions.
#[derive(Clone, Debug)]
pub(crate) struct Geo3 {
    pub(crate) input: [usize; 3],
    pub(crate) kernel: [usize; 3],
    pub(crate) strides: [usize; 3],
    pub(crate) dilations: [usize; 3],
    pub(crate) pad: [usize; 3],
    pub(crate) output: [usize; 3],
}

impl Geo3 {
    pub(crate) fn new(s: &ConvShapes) -> Option<Geo3> {
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
    gemm: Sgemm,
    s: ConvShapes,
    geo: Geo3,
    x_shape: Vec<usize>,
    w_shape: Vec<usize>,
    y_shape: Vec<usize>,
    /// Per group, its `[M/group, C/group * k]` weight matrix, when W was a constant.
    packed: Option<Vec<PackedMatrix>>,
    /// 1x1 kernel, stride 1, no padding: X itself is the GEMM's right operand.
    pointwise: bool,
    activation: Option<Activation>,
}

/// The data (input 0) and weights (input 1) of a convolution kernel, checked to have the
/// shapes the kernel was built for.
pub(crate) fn data_and_weights<'a>(
    inputs: &[Option<&'a Tensor>],
    x_shape: &[usize],
    w_shape: &[usize],
) -> OpResult<(&'a [f32], &'a [f32])> {
    let x = ferrolite_core::op::required(inputs, 0)?;
    let w = ferrolite_core::op::required(inputs, 1)?;
    op_ensure!(
        x.shape() == x_shape && w.shape() == w_shape,
        "inputs have shapes {:?} and {:?}, the kernel was built for {:?} and {:?}",
        x.shape(),
        w.shape(),
        x_shape,
        w_shape
    );
    Ok((x.as_slice::<f32>()?, w.as_slice::<f32>()?))
}

/// The optional bias (input 2) of a convolution kernel, checked to have `channels` values.
pub(crate) fn bias_input<'a>(
    inputs: &[Option<&'a Tensor>],
    channels: usize,
) -> OpResult<Option<&'a [f32]>> {
    match inputs.get(2).copied().flatten() {
        Some(b) => {
            op_ensure!(
                b.numel() == channels,
                "input 2 (B) has {} elements, expected {channels}",
                b.numel()
            );
            Ok(Some(b.as_slice::<f32>()?))
        }
        None => Ok(None),
    }
}

/// Input channels from which a 3x3 stride-1 conv runs as Winograd rather than im2col. Its 16
/// GEMMs have depth C: shallower ones spend more on storing and transforming products than
/// they save in multiplies (squeezenet's 16..48-channel expand convs run faster as im2col).
const WINOGRAD_MIN_IN_CHANNELS: usize = 64;

/// Output positions (H x W) from which Winograd uses 4x4 output tiles rather than 2x2 (1.3x
/// faster on resnet18's 56x56 and 14x14 convs, 1.2x on squeezenet's 13x13). Below, each of its
/// GEMMs covers too few tiles to fill the microkernel's panels (a 7x7 output has 4 tiles;
/// there F(4x4) is 2x slower).
const WINOGRAD_F4_MIN_OUTPUTS: usize = 12 * 12;

/// The best kernel for a Conv: depthwise direct, or im2col/pointwise GEMM. `None` when the
/// shapes fall outside what these kernels handle.
pub fn build(
    gemm: Sgemm,
    s: ConvShapes,
    activation: Option<Activation>,
    x_shape: &[usize],
    w_shape: &[usize],
    w_value: Option<&Tensor>,
) -> OpResult<Option<Box<dyn Kernel>>> {
    if let Some(k) =
        crate::depthwise::DepthwiseKernel::new(gemm.isa, &s, activation, x_shape, w_shape, w_value)
    {
        return Ok(Some(Box::new(k)));
    }
    if s.in_channels >= WINOGRAD_MIN_IN_CHANNELS {
        let outputs: usize = s.geometry.output.iter().product();
        let tile = if outputs >= WINOGRAD_F4_MIN_OUTPUTS {
            WinogradTile::F4
        } else {
            WinogradTile::F2
        };
        if let Some(k) = WinogradKernel::new(gemm, tile, &s, activation, x_shape, w_value)? {
            return Ok(Some(Box::new(k)));
        }
    }
    Ok(
        ConvKernel::new(gemm, s, activation, x_shape, w_shape, w_value)?
            .map(|k| Box::new(k) as Box<dyn Kernel>),
    )
}

impl ConvKernel {
    /// `None` when the shapes fall outside what this kernel handles.
    pub fn new(
        gemm: Sgemm,
        s: ConvShapes,
        activation: Option<Activation>,
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
                    let src = crate::gemm::MatRef {
                        data: wv.get(g * mg * kdim..).unwrap_or(&[]),
                        rs: kdim,
                        cs: 1,
                    };
                    per.push(crate::gemm::Gemm::pack(&gemm, mg, kdim, src, Side::A)?);
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
            activation,
            s,
        }))
    }

    /// Fills `buf` with the input patches of output columns `p0..p0+bp` as a `[C/group * k,
    /// bp]` matrix already in the GEMM's packed-B layout (per KC block, per panel of NR
    /// columns, `kc * NR` values), so the GEMM reads it without another packing pass.
    fn im2col_packed(&self, x: &[f32], p0: usize, bp: usize, buf: &mut [f32], row: &mut Vec<f32>) {
        let kdim = buf.len() / (bp.div_ceil(NR) * NR).max(1);
        let npan = bp.div_ceil(NR);
        row.resize(npan * NR, 0.0);
        let mut r = 0;
        self.im2col_rows(x, p0, bp, row, |row| {
            let pc = r / KC * KC;
            let kc = KC.min(kdim - pc);
            let base = pc * npan * NR + (r - pc) * NR;
            for (jp, src) in row.chunks_exact(NR).enumerate() {
                let src: &[f32; NR] = src.try_into().expect("NR values");
                buf[base + jp * kc * NR..][..NR].copy_from_slice(src);
            }
            r += 1;
        });
    }

    /// Produces each im2col row (output columns `p0..p0+bp`) in `row`, passing it to `emit`.
    fn im2col_rows(
        &self,
        x: &[f32],
        p0: usize,
        bp: usize,
        row: &mut [f32],
        mut emit: impl FnMut(&[f32]),
    ) {
        let g = &self.geo;
        let cg = self.s.in_channels / self.s.group;
        let [i0, i1, i2] = g.input;
        let [_, o1, o2] = g.output;
        let in_plane = i0 * i1 * i2;
        let (s2, d2, pad2) = (g.strides[2], g.dilations[2], g.pad[2]);
        for xc in x.chunks_exact(in_plane).take(cg) {
            for kd in 0..g.kernel[0] {
                for kh in 0..g.kernel[1] {
                    for kw in 0..g.kernel[2] {
                        let dst = &mut row[..bp];
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
                                let off = kw * d2;
                                if s2 == 1 {
                                    // iw = ow0 + t + off - pad2: copy the in-bounds run.
                                    let lo = pad2.saturating_sub(ow0 + off).min(run);
                                    let start = (ow0 + off + lo).saturating_sub(pad2);
                                    let hi = if lo == run {
                                        run
                                    } else {
                                        lo + i2.saturating_sub(start).min(run - lo)
                                    };
                                    seg[..lo].fill(0.0);
                                    if hi > lo {
                                        seg[lo..hi].copy_from_slice(&row[start..start + hi - lo]);
                                    }
                                    seg[hi..].fill(0.0);
                                } else {
                                    // iw = first + t * s2: gather the in-bounds range [lo, hi).
                                    let first = (ow0 * s2 + off) as isize - pad2 as isize;
                                    let lo = if first >= 0 {
                                        0
                                    } else {
                                        first.unsigned_abs().div_ceil(s2).min(run)
                                    };
                                    let hi = if first >= i2 as isize {
                                        lo
                                    } else {
                                        (i2 as isize - first)
                                            .unsigned_abs()
                                            .div_ceil(s2)
                                            .clamp(lo, run)
                                    };
                                    seg[..lo].fill(0.0);
                                    seg[hi..].fill(0.0);
                                    if hi > lo {
                                        let start = (first + (lo * s2) as isize) as usize;
                                        let taps = &row[start..=start + (hi - lo - 1) * s2];
                                        gather_strided(&mut seg[lo..hi], taps, s2);
                                    }
                                }
                            }
                            j += run;
                            p += run;
                        }
                        emit(row);
                    }
                }
            }
        }
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
        let (group, mg, cg) = (
            self.s.group,
            self.s.out_channels / self.s.group,
            self.s.in_channels / self.s.group,
        );
        let p_total: usize = self.geo.output.iter().product();
        let in_plane: usize = self.geo.input.iter().product();
        let kdim = cg * self.geo.kernel.iter().product::<usize>();
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
                let wv = w.as_slice::<f32>()?;
                op_ensure!(wv.len() >= group * mg * kdim, "input 1 (W) is too short");
                Some(wv)
            }
        };
        let bias = bias_input(inputs, self.s.out_channels)?;
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
        if yv.is_empty() || p_total == 0 {
            return Ok(());
        }
        op_ensure!(
            xv.len() == self.s.batch * self.s.in_channels * in_plane
                && yv.len() == self.s.batch * self.s.out_channels * p_total,
            "conv: buffer sizes differ from the plan"
        );
        // Column blocks: the im2col block fits in cache, and there are enough tasks to go round
        // (a multiple of the thread count, so the threads finish together).
        let threads = rayon::current_num_threads().max(1);
        let budget = if self.pointwise { 1 << 20 } else { BLOCK_ELEMS };
        let mut nblocks = p_total.div_ceil((budget / kdim.max(1)).max(4 * NR));
        let pairs = self.s.batch * group;
        let flops = 2 * mg * kdim * p_total * pairs;
        let par = threads > 1 && flops >= 1 << 19;
        if par && pairs < threads {
            let want = threads.div_ceil(pairs);
            nblocks = nblocks.div_ceil(want) * want;
        }
        let bp = p_total.div_ceil(nblocks).div_ceil(NR) * NR;
        let nblocks = p_total.div_ceil(bp);
        // Few column blocks for many threads (small images, deep layers): split rows too.
        let msplit = if par && pairs * nblocks < threads {
            threads
                .div_ceil(pairs * nblocks)
                .min(mg.div_ceil(MR))
                .max(1)
        } else {
            1
        };
        let mchunk = mg.div_ceil(msplit).div_ceil(MR) * MR;
        let msplit = mg.div_ceil(mchunk.max(1)).max(1);
        let tasks = pairs * nblocks * msplit;
        let yp = SendPtr(yv.as_mut_ptr());
        let task = |bufs: &mut (Vec<f32>, Vec<f32>), t: usize| {
            let (pair, rest) = (t / (nblocks * msplit), t % (nblocks * msplit));
            let (blk, mc) = (rest / msplit, rest % msplit);
            let (n, g) = (pair / group, pair % group);
            let p0 = blk * bp;
            let np = bp.min(p_total - p0);
            let xs = (n * self.s.in_channels + g * cg) * in_plane;
            let x = &xv[xs..xs + cg * in_plane];
            let b = if self.pointwise {
                Src::Strided {
                    data: &x[p0..],
                    rs: p_total,
                    cs: 1,
                }
            } else {
                let (buf, row) = bufs;
                buf.resize(kdim * np.div_ceil(NR) * NR, 0.0);
                self.im2col_packed(x, p0, np, buf, row);
                Src::Packed(buf)
            };
            let a = match (&self.packed, w_in) {
                (Some(p), _) => Src::Packed(p[g].data()),
                (None, Some(w)) => Src::Strided {
                    data: &w[g * mg * kdim..],
                    rs: kdim,
                    cs: 1,
                },
                (None, None) => unreachable!("weights are packed or given"),
            };
            let prob = Problem {
                isa: self.gemm.isa,
                m: mg,
                n: np,
                k: kdim,
                alpha: 1.0,
                a,
                b,
                accumulate: false,
                row_bias: bias.map(|b| &b[g * mg..(g + 1) * mg]).unwrap_or(&[]),
                col_bias: &[],
                act: self.activation,
            };
            let m0 = mc * mchunk;
            let m1 = (m0 + mchunk).min(mg);
            // SAFETY: the output holds batch * M * P elements (checked above); this task's
            // C starts at row (n, g * mg), column p0, with row stride P, and covers rows
            // m0..m1 of the group and its np columns: tasks write disjoint blocks.
            unsafe {
                let c = yp
                    .get()
                    .add((n * self.s.out_channels + g * mg) * p_total + p0);
                prob.run_block(c, p_total, m0, m1, 0, np);
            }
        };
        if par && tasks > 1 {
            (0..tasks)
                .into_par_iter()
                .for_each_init(Default::default, |bufs, t| task(bufs, t));
        } else {
            let mut bufs = Default::default();
            (0..tasks).for_each(|t| task(&mut bufs, t));
        }
        Ok(())
    }

    fn name(&self) -> &str {
        if self.pointwise {
            "cpu.conv.pointwise"
        } else {
            "cpu.conv.im2col"
        }
    }
}

/// `dst[t] = src[t * stride]`, with `src` holding `(dst.len() - 1) * stride + 1` values. Out
/// of line, so the loop gets its own registers; stride 2 (the common case) takes the
/// shuffle-based even split.
#[inline(never)]
fn gather_strided(dst: &mut [f32], src: &[f32], stride: usize) {
    if stride == 2 {
        crate::stride2::evens(src, dst);
    } else {
        for (t, d) in dst.iter_mut().enumerate() {
            *d = src[t * stride];
        }
    }
}
