//! f32 Conv: depthwise convolutions run a direct kernel ([`crate::depthwise`]); the rest
//! run im2col + packed GEMM per (batch, group, column block), with the weights prepacked and
//! bias + activation fused into the GEMM's store. Pointwise convolutions (1x1, stride 1, no
//! padding) use X itself as the GEMM's right operand.
//!
//! Spatial ranks 1 to 3 are handled by viewing them as 3-D with leading size-1 dimensions.
//! Output columns are processed in blocks so the im2col buffer stays in cache.

use crate::backend::{built, constant, shape, Registry, Req};
use crate::gemm::{packed_bytes, PackedMatrix, PackingFor, Packs, Side};
use crate::kernel_io::f32_shape;
use crate::sgemm::{Problem, SendPtr, Src, KC, MR, NR};
use crate::split::{self, Cost};
use crate::stride2;
use crate::winograd::WinogradKernel;
use crate::Sgemm;
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::conv::{Conv, ConvShapes};
use ferrolite_core::plan::Kernel;
use ferrolite_core::prepacked::Prepacks;
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::scratch::{bytes_for, Scratch, ScratchNeed};
use ferrolite_core::{op_ensure, OpResult, Tensor};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;

/// See [`Kernels::phase_pack`].
pub(crate) type PhasePackFn = fn(&PhasePlanes, &[f32], usize, usize, usize, &mut [f32]);

/// The convolution family's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    /// Packs im2col columns from phase planes into the GEMM's B panels: (planes, xp, ow, p0,
    /// np, buf), see `PhasePlanes::pack`.
    pub(crate) phase_pack: PhasePackFn,
}

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    phase_pack: |f, xp, ow, p0, np, buf| f.pack_impl(xp, ow, p0, np, buf),
};

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
    /// 2-D, 1x1 kernel, no padding, a stride above 1 (resnet's downsampling shortcuts): the
    /// strided input pixels gathered into a compact `C x P` matrix, then as `pointwise`.
    subsample: bool,
    /// 2-D: B panels packed from phase planes (see [`PhasePlanes`]) instead of im2col rows.
    phases: Option<PhasePlanes>,
    activation: Option<UnaryKind>,
}

/// A 2-D convolution's input rearranged so that every im2col row is a few contiguous runs:
/// the zero-padded input of each channel split into `sh x sw` phase planes of `hq x wq`
/// (phase `(a, b)` holds the padded rows `a, a + sh, ...` and columns `b, b + sw, ...`).
/// im2col row `(c, ky, kx)` at output `(oy, ox)` is then the planes at a fixed offset plus
/// `oy * wq + ox`, so packing a B panel is one 16-float copy per row (a few where the panel
/// crosses output rows): no per-element bounds, strides or gathers, which the im2col rows
/// spent a quarter of a conv's time on.
#[derive(Debug)]
pub(crate) struct PhasePlanes {
    isa: crate::isa::Isa,
    sh: usize,
    sw: usize,
    hq: usize,
    wq: usize,
    /// Offset of im2col row `(c, ky, kx)` in one group's planes.
    offs: Vec<usize>,
    /// Floats of one group's planes.
    len: usize,
}

/// Largest phase-plane buffer (floats per group) the 2-D path allocates (hostile pads).
const PHASE_MAX_FLOATS: usize = 1 << 26;

impl PhasePlanes {
    /// `None` unless the convolution is 2-D (and its planes fit [`PHASE_MAX_FLOATS`]).
    fn new(isa: crate::isa::Isa, geo: &Geo3, s: &ConvShapes, cg: usize) -> Option<PhasePlanes> {
        if s.geometry.input.len() != 2 {
            return None;
        }
        let ([_, ih, iw], [_, oh, ow]) = (geo.input, geo.output);
        let ([_, kh, kw], [_, sh, sw]) = (geo.kernel, geo.strides);
        let ([_, dh, dw], [_, pt, pl]) = (geo.dilations, geo.pad);
        let hq = (ih + pt).div_ceil(sh).max(oh + (kh - 1) * dh / sh);
        let wq = (iw + pl).div_ceil(sw).max(ow + (kw - 1) * dw / sw);
        let phase = hq.checked_mul(wq)?;
        let per_c = phase.checked_mul(sh)?.checked_mul(sw)?;
        let len = cg.checked_mul(per_c)?;
        if len > PHASE_MAX_FLOATS || oh == 0 || ow == 0 {
            return None;
        }
        let mut offs = Vec::with_capacity(cg * kh * kw);
        for c in 0..cg {
            for ky in 0..kh {
                for kx in 0..kw {
                    let (r, t) = (ky * dh, kx * dw);
                    let which = (r % sh) * sw + t % sw;
                    offs.push(c * per_c + which * phase + r / sh * wq + t / sw);
                }
            }
        }
        Some(PhasePlanes {
            isa,
            sh,
            sw,
            hq,
            wq,
            offs,
            len,
        })
    }

    /// Writes the planes of one group's input `x` (`cg` planes of `ih x iw`) to `xp`, every
    /// value (the buffer is shared with other convolutions).
    fn fill(&self, x: &[f32], [ih, iw]: [usize; 2], [pt, pl]: [usize; 2], xp: &mut [f32]) {
        let (sh, sw, wq) = (self.sh, self.sw, self.wq);
        let phase = self.hq * wq;
        let cg = x.len() / (ih * iw).max(1);
        for (src, planes) in x
            .chunks_exact(ih * iw)
            .zip(xp.chunks_exact_mut(sh * sw * phase))
            .take(cg)
        {
            for a in 0..sh {
                for i in 0..self.hq {
                    let input_row = (i * sh + a).checked_sub(pt).filter(|&r| r < ih);
                    let row = |b: usize| (a * sw + b) * phase + i * wq;
                    let Some(r) = input_row else {
                        for b in 0..sw {
                            planes[row(b)..row(b) + wq].fill(0.0);
                        }
                        continue;
                    };
                    let src = &src[r * iw..(r + 1) * iw];
                    if sw == 1 {
                        let dst = &mut planes[row(0)..row(0) + wq];
                        dst[..pl].fill(0.0);
                        dst[pl..pl + iw].copy_from_slice(src);
                        dst[pl + iw..].fill(0.0);
                    } else if sw == 2 {
                        let (p0, p1) = planes[row(0)..row(1) + wq].split_at_mut(phase);
                        let (d0, d1) = (&mut p0[..wq], &mut p1[..wq]);
                        d0.fill(0.0);
                        d1.fill(0.0);
                        stride2::split_padded_row(self.isa, src, pl, d0, d1);
                    } else {
                        for b in 0..sw {
                            let at = row(b);
                            for (j, d) in planes[at..at + wq].iter_mut().enumerate() {
                                *d = (j * sw + b)
                                    .checked_sub(pl)
                                    .and_then(|t| src.get(t))
                                    .copied()
                                    .unwrap_or(0.0);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Packs output columns `p0..p0 + np` (output `p` is `(p / ow, p % ow)`) of the im2col
    /// matrix from the planes `xp` into `buf` in the GEMM's packed-B layout (per KC block,
    /// per panel of NR columns, `kc` rows of NR values). A panel's columns are one run of
    /// the planes, or a few where it crosses output rows; the last panel's missing columns
    /// are zeros. Compiled per ISA (`conv/avx2.rs`: sixteen values are two moves).
    fn pack(&self, xp: &[f32], ow: usize, p0: usize, np: usize, buf: &mut [f32]) {
        (self.isa.table().conv.phase_pack)(self, xp, ow, p0, np, buf)
    }

    #[inline(always)]
    fn pack_impl(&self, xp: &[f32], ow: usize, p0: usize, np: usize, buf: &mut [f32]) {
        let (kdim, npan) = (self.offs.len(), np.div_ceil(NR));
        // Per panel: (offset in the planes, first lane, lanes) of each run; at most NR.
        let mut all_runs = [(0usize, 0usize, 0usize); NR];
        for jp in 0..npan {
            let (start, end) = (p0 + jp * NR, (p0 + jp * NR + NR).min(p0 + np));
            let (mut p, mut count) = (start, 0);
            while p < end {
                let (oy, ox) = (p / ow, p % ow);
                let len = (ow - ox).min(end - p);
                all_runs[count] = (oy * self.wq + ox, p - start, len);
                count += 1;
                p += len;
            }
            let runs = &all_runs[..count];
            let whole = count == 1 && runs[0].2 == NR;
            // Panels crossing output rows: per run, the offset from which sixteen values
            // put the run's values in its lanes, and the mask of those lanes (a copy of
            // `len` values per run was a memmove call, 6% of a 3x3 conv on 55-wide rows).
            // `blends` is false when a run starts too early in the planes for that, and
            // such panels (and any whose loads would pass the planes' end) go value by value.
            let mut blend = [(0usize, [0u32; NR]); NR];
            let blends = runs.iter().zip(&mut blend).all(|(&(q, lane, len), b)| {
                b.1 = std::array::from_fn(|j| {
                    if (lane..lane + len).contains(&j) {
                        !0
                    } else {
                        0
                    }
                });
                q.checked_sub(lane).map(|at| b.0 = at).is_some()
            });
            let blend = &blend[..count];
            // How far past a row's offset the blend loads read.
            let reach = blend.iter().map(|b| b.0 + NR).max().unwrap_or(0);
            for pc in (0..kdim).step_by(KC) {
                let kc = KC.min(kdim - pc);
                let panel = &mut buf[pc * npan * NR + jp * kc * NR..][..kc * NR];
                for (d, &o) in panel.chunks_exact_mut(NR).zip(&self.offs[pc..pc + kc]) {
                    if whole {
                        let q = o + runs[0].0;
                        let s: &[f32; NR] = xp[q..q + NR].try_into().expect("NR values");
                        let d: &mut [f32; NR] = d.try_into().expect("NR values");
                        *d = *s;
                        continue;
                    }
                    let d: &mut [f32; NR] = d.try_into().expect("NR values");
                    if blends && o + reach <= xp.len() {
                        let mut bits = [0u32; NR];
                        for &(at, mask) in blend {
                            let v: &[f32; NR] = xp[o + at..][..NR].try_into().expect("NR");
                            for ((b, &v), &m) in bits.iter_mut().zip(v).zip(&mask) {
                                *b |= v.to_bits() & m;
                            }
                        }
                        *d = bits.map(f32::from_bits);
                        continue;
                    }
                    d.fill(0.0);
                    for &(q, lane, len) in runs {
                        for (dv, &sv) in d[lane..lane + len].iter_mut().zip(&xp[o + q..]) {
                            *dv = sv;
                        }
                    }
                }
            }
        }
    }
}

/// How a [`ConvKernel`] run splits into tasks: `pairs` (image, group) pairs, each cut into
/// `nblocks` column blocks of `bp` output pixels and `msplit` row chunks of `mchunk` output
/// channels.
struct ConvSplit {
    par: bool,
    /// The threads the run is worth ([`split::workers`]).
    workers: usize,
    nblocks: usize,
    bp: usize,
    msplit: usize,
    mchunk: usize,
    tasks: usize,
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

/// The Conv kernels, best first: depthwise direct, Winograd where it pays
/// ([`crate::winograd::tile_for`]), then im2col / pointwise GEMM.
pub(crate) fn register(r: &mut Registry) {
    r.add::<Conv>(
        "cpu.conv.depthwise",
        "Conv",
        30,
        DTypes::AllF32,
        Layout::PLAIN,
        |c, r| {
            let (x, w, s) = conv_shapes(c, r)?;
            let k = crate::depthwise::DepthwiseKernel::new(
                r.cx.isa,
                &s,
                c.activation,
                x,
                w,
                constant(r.req, 1),
            );
            built(Ok(k), "a depthwise 2-D convolution with constant weights")
        },
    );
    r.add::<Conv>(
        "cpu.conv.winograd",
        "Conv",
        20,
        DTypes::AllF32,
        Layout::PLAIN,
        |c, r| {
            let (x, _, s) = conv_shapes(c, r)?;
            let tile = crate::winograd::tile_for(&s)
                .ok_or("needs a 3x3 stride-1 convolution big enough for Winograd to pay")?
                .within(r.cx.precision);
            let k = WinogradKernel::new(
                r.cx.gemm(),
                tile,
                &s,
                c.activation,
                x,
                constant(r.req, 1),
                r.req.packs,
            );
            built(k, "constant weights")
        },
    );
    r.add::<Conv>(
        "cpu.conv.gemm",
        "Conv",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |c, r| {
            let (x, w, s) = conv_shapes(c, r)?;
            let k = ConvKernel::new(
                r.cx.gemm(),
                s,
                c.activation,
                x,
                w,
                constant(r.req, 1),
                r.req.packs,
            );
            built(k, "a 1-D, 2-D or 3-D convolution")
        },
    );
}

/// The input and weight shapes and the Conv's shapes, with a bias of the right size.
fn conv_shapes<'a>(
    c: &Conv,
    r: &Req<'_, 'a>,
) -> Result<(&'a [usize], &'a [usize], ConvShapes), String> {
    let (x, w) = (f32_shape(r.req, 0)?, f32_shape(r.req, 1)?);
    let s = c.shapes(x, w).map_err(|e| e.to_string())?;
    if let Some(b) = shape(r.req, 2) {
        if b.iter().product::<usize>() != s.out_channels {
            return Err(format!("needs a bias of {} values", s.out_channels));
        }
    }
    Ok((x, w, s))
}

impl ConvKernel {
    /// `None` when the shapes fall outside what this kernel handles.
    pub fn new(
        gemm: Sgemm,
        s: ConvShapes,
        activation: Option<UnaryKind>,
        x_shape: &[usize],
        w_shape: &[usize],
        w_value: Option<&Tensor>,
        packs: &Prepacks,
    ) -> OpResult<Option<ConvKernel>> {
        let Some(geo) = Geo3::new(&s) else {
            return Ok(None);
        };
        let unpadded_1x1 = geo.kernel == [1, 1, 1]
            && s.geometry.pad_begin.iter().all(|&p| p == 0)
            && s.geometry.pad_end.iter().all(|&p| p == 0);
        let pointwise = unpadded_1x1 && geo.strides == [1, 1, 1];
        let subsample = unpadded_1x1 && !pointwise && s.geometry.input.len() == 2;
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
                    per.push(crate::gemm::Gemm::pack(
                        &gemm,
                        mg,
                        kdim,
                        src,
                        Side::A,
                        packs,
                    )?);
                }
                Some(per)
            }
            None => None,
        };
        let y_shape = s.output_shape();
        let phases = match pointwise || subsample {
            true => None,
            false => PhasePlanes::new(gemm.isa, &geo, &s, s.in_channels / s.group),
        };
        Ok(Some(ConvKernel {
            gemm,
            phases,
            geo,
            x_shape: x_shape.to_vec(),
            w_shape: w_shape.to_vec(),
            y_shape,
            packed,
            pointwise,
            subsample,
            activation,
            s,
        }))
    }

    /// Fills `buf` with the input patches of output columns `p0..p0+bp` as a `[C/group * k,
    /// bp]` matrix already in the GEMM's packed-B layout (per KC block, per panel of NR
    /// columns, `kc * NR` values), so the GEMM reads it without another packing pass.
    fn im2col_packed(&self, x: &[f32], p0: usize, bp: usize, buf: &mut [f32], row: &mut [f32]) {
        let kdim = buf.len() / (bp.div_ceil(NR) * NR).max(1);
        let npan = bp.div_ceil(NR);
        let row = &mut row[..npan * NR];
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
                                        gather_strided(self.gemm.isa, &mut seg[lo..hi], taps, s2);
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

impl ConvKernel {
    /// The depth of each product: a group's input channels times the kernel's taps.
    fn kdim(&self) -> usize {
        self.s.in_channels / self.s.group * self.geo.kernel.iter().product::<usize>()
    }

    /// The run's split into tasks on `threads` workers.
    fn split(&self, threads: usize) -> ConvSplit {
        let (group, mg) = (self.s.group, self.s.out_channels / self.s.group);
        let p_total: usize = self.geo.output.iter().product();
        let kdim = self.kdim();
        // Column blocks: the im2col block fits in cache, and there are enough tasks to go round
        // (a multiple of the thread count, so the threads finish together).
        let threads = threads.max(1);
        let direct_b = self.pointwise || self.subsample;
        let budget = if direct_b { 1 << 20 } else { BLOCK_ELEMS };
        let mut nblocks = p_total.div_ceil((budget / kdim.max(1)).max(4 * NR));
        let pairs = self.s.batch * group;
        let flops = 2 * mg * kdim * p_total * pairs;
        // The threads the work is worth; the blocks and row splits below are for them.
        let workers = split::workers(Cost::flops(flops), threads);
        let par = workers > 1;
        let threads = workers;
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
        ConvSplit {
            par,
            workers,
            nblocks,
            bp,
            msplit,
            mchunk,
            tasks,
        }
    }

    /// Floats of the shared scratch: every (image, group) pair's phase planes, or the
    /// compact subsampled input.
    fn shared_floats(&self) -> usize {
        let p_total: usize = self.geo.output.iter().product();
        let images = self.s.batch * self.s.in_channels;
        let phases = self
            .phases
            .as_ref()
            .map_or(0, |f| self.s.batch * self.s.group * f.len);
        let compact = if self.subsample { images * p_total } else { 0 };
        phases.max(compact)
    }

    /// The packing a task's product of `rows` output channels by `bp` pixels needs: B comes
    /// packed in the task's own block unless it is read in place.
    fn packing_for(&self, rows: usize, bp: usize) -> PackingFor {
        let kdim = self.kdim();
        PackingFor::new(rows, kdim, bp)
            .a_packed(self.packed.is_some())
            .b_packed(!(self.pointwise || self.subsample))
    }

    /// Floats of a task's packed B block and im2col row, for blocks of `bp` pixels (none
    /// where B is read in place).
    fn task_buffers(&self, bp: usize) -> (usize, usize) {
        if self.pointwise || self.subsample {
            return (0, 0);
        }
        let kdim = self.kdim();
        let npan = bp.div_ceil(NR);
        (
            kdim * npan * NR,
            if self.phases.is_some() { 0 } else { npan * NR },
        )
    }
}

impl Kernel for ConvKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        scratch: &Scratch,
    ) -> OpResult<()> {
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
        let kdim = self.kdim();
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
        // 2-D convs pack B from phase planes (see PhasePlanes) rather than im2col rows.
        let phases = self.phases.as_ref();
        let [_, _, ow] = self.geo.output;
        let ConvSplit {
            par,
            workers,
            nblocks,
            bp,
            msplit,
            mchunk,
            tasks,
        } = self.split(split::threads());
        let (pairs, direct_b) = (self.s.batch * group, self.pointwise || self.subsample);
        let yp = SendPtr(yv.as_mut_ptr());
        scratch.with_shared(|shared| -> OpResult<()> {
            let planes: &mut [f32] = shared.take(self.shared_floats())?;
            if let Some(f) = phases {
                let planes = &mut planes[..pairs * f.len];
                let [_, ih, iw] = self.geo.input;
                let pad = [self.geo.pad[1], self.geo.pad[2]];
                // Channel by channel: each channel's planes are `len / cg` values.
                let per_c = f.len / cg.max(1);
                let channel = |(x, xp): (&[f32], &mut [f32])| f.fill(x, [ih, iw], pad, xp);
                for (pair, xp) in planes.chunks_exact_mut(f.len).enumerate() {
                    let (n, g) = (pair / group, pair % group);
                    let x = &xv[(n * self.s.in_channels + g * cg) * in_plane..][..cg * in_plane];
                    if par && cg > 1 {
                        split::row_chunks(xp, per_c, workers, |c0, xp| {
                            let x = &x[c0 * in_plane..][..xp.len() / per_c.max(1) * in_plane];
                            let pairs = x.chunks_exact(in_plane).zip(xp.chunks_exact_mut(per_c));
                            pairs.for_each(channel);
                        });
                    } else {
                        f.fill(x, [ih, iw], pad, xp);
                    }
                }
            }
            // The subsampled input, compact: B of a pointwise conv.
            let compact = xv.len() / in_plane.max(1) * p_total;
            if self.subsample {
                let [_, ih, iw] = self.geo.input;
                let [_, sh, sw] = self.geo.strides;
                let [_, oh, _] = self.geo.output;
                let dst = &mut planes[..compact];
                let plane = |(src, dst): (&[f32], &mut [f32])| {
                    for (oy, out) in dst.chunks_exact_mut(ow).enumerate().take(oh) {
                        let row = &src[oy * sh * iw..][..(ow - 1) * sw + 1];
                        gather_strided(self.gemm.isa, out, row, sw);
                    }
                };
                split::row_chunks(dst, p_total, workers, |first, dst| {
                    let src = xv[first * ih * iw..].chunks_exact(ih * iw);
                    src.zip(dst.chunks_exact_mut(p_total)).for_each(plane);
                });
            }
            let planes: &[f32] = planes;
            let (xv, in_plane) = match self.subsample {
                true => (&planes[..compact], p_total),
                false => (xv, in_plane),
            };
            let task = |t: usize| {
                let (pair, rest) = (t / (nblocks * msplit), t % (nblocks * msplit));
                let (blk, mc) = (rest / msplit, rest % msplit);
                let (n, g) = (pair / group, pair % group);
                let p0 = blk * bp;
                let np = bp.min(p_total - p0);
                let xs = (n * self.s.in_channels + g * cg) * in_plane;
                let x = &xv[xs..xs + cg * in_plane];
                let a = match (&self.packed, w_in) {
                    (Some(p), _) => Src::Packed(p[g].data()),
                    (None, Some(w)) => Src::Strided {
                        data: &w[g * mg * kdim..],
                        rs: kdim,
                        cs: 1,
                    },
                    (None, None) => unreachable!("weights are packed or given"),
                };
                let m0 = mc * mchunk;
                let m1 = (m0 + mchunk).min(mg);
                let y0 = (n * self.s.out_channels + g * mg) * p_total;
                scratch.with_thread(|own| {
                    let (buf, row) = self.task_buffers(bp);
                    let buf: &mut [f32] = own.take(buf)?;
                    let row: &mut [f32] = own.take(row)?;
                    let mut packs = Packs::carve(own, self.packing_for(mchunk, bp))?;
                    let b = if direct_b {
                        Src::Strided {
                            data: &x[p0..],
                            rs: p_total,
                            cs: 1,
                        }
                    } else {
                        let buf = &mut buf[..kdim * np.div_ceil(NR) * NR];
                        match phases {
                            Some(f) => f.pack(&planes[pair * f.len..][..f.len], ow, p0, np, buf),
                            None => self.im2col_packed(x, p0, np, buf, row),
                        }
                        Src::Packed(buf)
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
                    // SAFETY: the output holds batch * M * P elements (checked above); this
                    // task's C starts at row (n, g * mg), column p0, with row stride P, and
                    // covers rows m0..m1 of the group and its np columns: tasks write
                    // disjoint blocks.
                    unsafe {
                        let y = yp.get().add(y0 + p0);
                        prob.run_block(y, p_total, m0, m1, 0, np, &mut packs)
                    };
                    Ok(())
                })
            };
            split::try_for_each_task(tasks, par, task)
        })
    }

    fn name(&self) -> &str {
        if self.pointwise {
            "cpu.conv.pointwise"
        } else if self.subsample {
            "cpu.conv.subsample"
        } else if self.phases.is_some() {
            "cpu.conv.phases"
        } else {
            "cpu.conv.im2col"
        }
    }

    fn prepacked_bytes(&self) -> usize {
        self.packed.as_deref().map_or(0, packed_bytes)
    }

    fn scratch(&self, threads: usize) -> ScratchNeed {
        let ConvSplit { bp, mchunk, .. } = self.split(threads);
        let (buf, row) = self.task_buffers(bp);
        ScratchNeed {
            shared: bytes_for::<f32>(self.shared_floats()),
            per_thread: bytes_for::<f32>(buf)
                + bytes_for::<f32>(row)
                + self.packing_for(mchunk, bp).bytes(),
        }
    }
}

/// `dst[t] = src[t * stride]`, with `src` holding `(dst.len() - 1) * stride + 1` values. Out
/// of line, so the loop gets its own registers; stride 2 (the common case) takes the
/// shuffle-based even split.
#[inline(never)]
fn gather_strided(isa: crate::isa::Isa, dst: &mut [f32], src: &[f32], stride: usize) {
    if stride == 2 {
        crate::stride2::evens(isa, src, dst);
    } else {
        for (t, d) in dst.iter_mut().enumerate() {
            *d = src[t * stride];
        }
    }
}
