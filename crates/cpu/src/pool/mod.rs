//! f32 MaxPool / AveragePool over N x C x H x W and the global pools.
//!
//! Each output row first reduces its window's valid input rows into one row buffer that carries
//! the horizontal padding as the reduction's identity (-inf for max, 0 for a sum), so the
//! horizontal pass reads every tap without bounds tests: tap by tap over contiguous slices for
//! stride 1, output by output otherwise.

use crate::backend::{boxed, Built, Registry, Req};
use crate::isa::Isa;
use crate::kernel_io::{f32_shape, input, output};
use crate::split;
use crate::stride2;
use ferrolite_core::ops::nn::geometry::AxisGeometry;
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};
use ferrolite_core::plan::Kernel;
use ferrolite_core::registry::{needs, DTypes, Layout};
use ferrolite_core::{OpResult, Tensor};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;

/// See [`Kernels::window3x3s2_max`].
pub(crate) type Window3x3s2Fn = fn([&[f32]; 3], usize, &mut [f32]);
/// One block plane of a [`BlockedPoolKernel`]: `[H, W, 8]` into `[OH, OW, 8]`.
pub(crate) type BlockedPlaneFn = fn(&BlockedPoolKernel, &[f32], &mut [f32]);

/// The pooling family's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    /// `out[j]` = the max of `row[j]` over the rows (see `reduce_rows`).
    pub(crate) reduce_rows_max: fn(&mut [f32], &[&[f32]]),
    /// The same, the sum.
    pub(crate) reduce_rows_sum: fn(&mut [f32], &[&[f32]]),
    /// One output row of a 3x3, stride-2 max window over three input rows, `pad` columns of
    /// padding on the left: (rows, pad, out). None where the ISA has no such loop.
    pub(crate) window3x3s2_max: Option<Window3x3s2Fn>,
    /// The same, the sums.
    pub(crate) window3x3s2_sum: Option<Window3x3s2Fn>,
    pub(crate) blocked_plane_max: BlockedPlaneFn,
    pub(crate) blocked_plane_avg: BlockedPlaneFn,
}

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    reduce_rows_max: reduce_rows::<true>,
    reduce_rows_sum: reduce_rows::<false>,
    window3x3s2_max: None,
    window3x3s2_sum: None,
    blocked_plane_max: BlockedPoolKernel::plane_impl::<true>,
    blocked_plane_avg: BlockedPoolKernel::plane_impl::<false>,
};

pub(crate) fn register(r: &mut Registry) {
    r.add::<Pool>("cpu.pool", "Pool", 10, DTypes::AllF32, Layout::PLAIN, pool);
    r.add::<GlobalPool>(
        "cpu.global_pool",
        "GlobalPool",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        global_pool,
    );
    r.add::<Pool>(
        "cpu.nchwc.pool",
        "Pool",
        10,
        DTypes::AllF32,
        ferrolite_core::ops::layout::NCHWC,
        |p, r| {
            crate::nchwc::wrapper(r)?;
            let k = BlockedPoolKernel::new(r.cx.isa, p, f32_shape(r.req, 0)?);
            boxed(k, "2-D max or average pooling without indices")
        },
    );
    r.add::<GlobalPool>(
        "cpu.nchwc.global_pool",
        "GlobalPool",
        10,
        DTypes::AllF32,
        ferrolite_core::ops::layout::NCHWC,
        |p, r| {
            crate::nchwc::wrapper(r)?;
            let k = BlockedGlobalPoolKernel::new(p, f32_shape(r.req, 0)?);
            boxed(k, "max or average pooling")
        },
    );
}

fn pool(p: &Pool, r: &Req) -> Built {
    let x = f32_shape(r.req, 0)?;
    if r.req.outputs.len() != 1 || x.len() != 4 {
        return Err("needs a 2-D pool without indices".into());
    }
    let avg = needs(averages(p), "max or average pooling without indices")?;
    let g = p.geometry(x).map_err(|e| e.to_string())?;
    let [gh, gw] = <[AxisGeometry; 2]>::try_from(g).map_err(|_| "needs a 2-D pool")?;
    // Its padded row holds the whole window: one far wider than the input (a hostile or
    // degenerate kernel_shape) is left to the reference, which visits only the input.
    if [&gh, &gw]
        .iter()
        .any(|g| g.effective_kernel() > 2 * g.input + 64)
    {
        return Err("needs a window at most about twice the input's size".into());
    }
    let isa = r.cx.isa;
    Ok(Box::new(PoolKernel {
        isa,
        x: x.to_vec(),
        h: AxisPlan::new(&gh),
        w: AxisPlan::new(&gw),
        gh,
        gw,
        avg,
        count_include_pad: p.count_include_pad,
        window3x3s2: if [&gh, &gw]
            .iter()
            .all(|g| g.kernel == 3 && g.stride == 2 && g.dilation == 1)
        {
            let t = &isa.table().pool;
            if avg {
                t.window3x3s2_sum
            } else {
                t.window3x3s2_max
            }
        } else {
            None
        },
    }))
}

fn global_pool(p: &GlobalPool, r: &Req) -> Built {
    let x = f32_shape(r.req, 0)?;
    let avg = match p.kind {
        _ if x.len() < 2 => return Err("needs an input of rank 2 or more".into()),
        PoolKind::Average => true,
        PoolKind::Max => false,
        PoolKind::Lp => return Err("needs max or average pooling".into()),
    };
    Ok(Box::new(GlobalPoolKernel { x: x.to_vec(), avg }))
}

/// Whether a pool the kernels handle (max or average, without indices) averages.
pub(crate) fn averages(p: &Pool) -> Option<bool> {
    match p.kind {
        _ if p.with_indices => None,
        PoolKind::Max => Some(false),
        PoolKind::Average => Some(true),
        PoolKind::Lp => None,
    }
}

/// Per output index along one axis: the valid tap range and the window sizes to divide by.
#[derive(Debug)]
pub(crate) struct AxisPlan {
    /// Taps k in [lo, hi) land inside the input.
    pub(crate) lo: Vec<usize>,
    pub(crate) hi: Vec<usize>,
    /// Taps before the end padding (count_include_pad's count).
    padded: Vec<usize>,
}

impl AxisPlan {
    pub(crate) fn new(g: &AxisGeometry) -> AxisPlan {
        let (mut lo, mut hi, mut padded) = (Vec::new(), Vec::new(), Vec::new());
        for o in 0..g.output {
            let (l, h) = g.valid_taps(o);
            lo.push(l);
            hi.push(h);
            padded.push(g.padded_taps(o));
        }
        AxisPlan { lo, hi, padded }
    }
}

#[derive(Debug)]
struct PoolKernel {
    isa: Isa,
    x: Vec<usize>,
    gh: AxisGeometry,
    gw: AxisGeometry,
    h: AxisPlan,
    w: AxisPlan,
    avg: bool,
    count_include_pad: bool,
    /// 3x3 windows, stride 2, no dilation, where the ISA's table has the loop: rows whose
    /// three input rows all exist go through it (vertical and horizontal in one pass).
    window3x3s2: Option<Window3x3s2Fn>,
}

impl PoolKernel {
    /// Length of the padded row buffer: the input row behind `pad_begin` padding values, and
    /// enough padding after it for the last output's last tap.
    fn padded_row_len(&self) -> usize {
        let g = &self.gw;
        let last_tap = (g.output.max(1) - 1) * g.stride + (g.kernel.max(1) - 1) * g.dilation + 1;
        last_tap.max(g.pad_begin + g.input)
    }

    /// The value padding contributes: nothing to a sum, never a maximum.
    fn identity(&self) -> f32 {
        if self.avg {
            identity::<false>()
        } else {
            identity::<true>()
        }
    }

    /// `out[j]` = max (or sum) over `rows` of `row[j]`, from the identity; see [`reduce_rows`].
    fn reduce(&self, out: &mut [f32], rows: &[&[f32]]) {
        if self.avg {
            (self.isa.table().pool.reduce_rows_sum)(out, rows)
        } else {
            (self.isa.table().pool.reduce_rows_max)(out, rows)
        }
    }

    /// One plane: per output row, first reduce the valid input rows of the window into one
    /// padded row (contiguous, vectorises), then reduce each output's horizontal taps from
    /// it. `vrow` holds [`Self::padded_row_len`] values whose padding is the identity;
    /// `phases` is scratch of `2 * (output width + 1)` values.
    fn plane(&self, src: &[f32], dst: &mut [f32], vrow: &mut [f32], phases: &mut [f32]) {
        let (gh, gw) = (&self.gh, &self.gw);
        let (iw, ow) = (gw.input, gw.output);
        let (k, s, d) = (gw.kernel, gw.stride, gw.dilation);
        // The window's valid input rows.
        let mut rows: Vec<&[f32]> = Vec::with_capacity(gh.kernel.min(gh.input));
        for (oh, row) in dst.chunks_exact_mut(ow).enumerate() {
            rows.clear();
            for kh in self.h.lo[oh]..self.h.hi[oh] {
                let ih = gh.tap(oh, kh) as usize;
                rows.push(&src[ih * iw..(ih + 1) * iw]);
            }
            if let (Some(window3x3s2), &[r0, r1, r2]) = (self.window3x3s2, &rows[..]) {
                window3x3s2([r0, r1, r2], gw.pad_begin, row);
                self.divide(oh, row);
                continue;
            }
            self.reduce(&mut vrow[gw.pad_begin..gw.pad_begin + iw], &rows);
            let vrow: &[f32] = vrow;
            if s == 1 {
                // Tap by tap over contiguous slices: vectorises.
                let tap = |kw: usize| &vrow[kw * d..kw * d + ow];
                match k {
                    1 => self.reduce(row, &[tap(0)]),
                    2 => self.reduce(row, &[tap(0), tap(1)]),
                    3 => self.reduce(row, &[tap(0), tap(1), tap(2)]),
                    _ => self.reduce(row, &(0..k).map(tap).collect::<Vec<_>>()),
                }
            } else if s == 2 && d == 1 && (k == 2 || k == 3) {
                // Even and odd columns apart, every tap is a contiguous slice again: tap 0
                // is even[j], tap 1 odd[j], tap 2 even[j + 1].
                let (even, odd) = phases.split_at_mut(ow + 1);
                stride2::deinterleave(self.isa, &vrow[..2 * ow], &mut even[..ow], &mut odd[..ow]);
                if k == 3 {
                    even[ow] = vrow[2 * ow];
                    self.reduce(row, &[&even[..ow], &odd[..ow], &even[1..=ow]]);
                } else {
                    self.reduce(row, &[&even[..ow], &odd[..ow]]);
                }
            } else {
                // Output by output, the window's taps reduced in registers.
                match (self.avg, k, d) {
                    (false, 3, 1) => strided::<3, true>(vrow, row, s),
                    (false, 2, 1) => strided::<2, true>(vrow, row, s),
                    (true, 3, 1) => strided::<3, false>(vrow, row, s),
                    (true, 2, 1) => strided::<2, false>(vrow, row, s),
                    _ => {
                        let span = (k.max(1) - 1) * d + 1;
                        for (j, o) in row.iter_mut().enumerate() {
                            let mut taps = vrow[j * s..j * s + span].iter().step_by(d);
                            let first = *taps.next().expect("a window has a tap");
                            *o = if self.avg {
                                taps.fold(first, |a, &v| a + v)
                            } else {
                                taps.fold(first, |a, &v| if v > a { v } else { a })
                            };
                        }
                    }
                }
            }
            self.divide(oh, row);
        }
    }

    /// Average pools: output row `oh`'s sums divided by their window sizes.
    fn divide(&self, oh: usize, row: &mut [f32]) {
        if !self.avg {
            return;
        }
        for (ow_i, o) in row.iter_mut().enumerate() {
            let n = if self.count_include_pad {
                self.h.padded[oh] * self.w.padded[ow_i]
            } else {
                (self.h.hi[oh] - self.h.lo[oh]) * (self.w.hi[ow_i] - self.w.lo[ow_i])
            };
            *o = (*o as f64 / n as f64) as f32;
        }
    }
}

impl Kernel for PoolKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let planes = self.x[0] * self.x[1];
        let (ip, op) = (
            self.gh.input * self.gw.input,
            self.gh.output * self.gw.output,
        );
        let y = output(outputs, 0, planes * op)?;
        let taps = self.gh.kernel * self.gw.kernel;
        split::for_chunks(y, op.max(1), taps.max(1), |s, c| {
            let p0 = s / op.max(1);
            let mut vrow = vec![self.identity(); self.padded_row_len()];
            let mut phases = vec![0.0; 2 * (self.gw.output + 1)];
            for (i, dst) in c.chunks_exact_mut(op.max(1)).enumerate() {
                let p = p0 + i;
                self.plane(&x[p * ip..(p + 1) * ip], dst, &mut vrow, &mut phases);
            }
        });
        Ok(())
    }

    fn name(&self) -> &str {
        if self.avg {
            "cpu.avgpool"
        } else {
            "cpu.maxpool"
        }
    }
}

#[derive(Debug)]
struct GlobalPoolKernel {
    x: Vec<usize>,
    avg: bool,
}

impl Kernel for GlobalPoolKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let planes = self.x[0] * self.x[1];
        let plane: usize = self.x[2..].iter().product();
        let y = output(outputs, 0, planes)?;
        if plane == 0 {
            y.fill(if self.avg {
                f32::NAN
            } else {
                f32::NEG_INFINITY
            });
            return Ok(());
        }
        split::for_chunks(y, 1, plane, |s, c| {
            for (i, o) in c.iter_mut().enumerate() {
                let v = &x[(s + i) * plane..(s + i + 1) * plane];
                *o = if self.avg {
                    (crate::reduce::sum(v) as f64 / plane as f64) as f32
                } else {
                    crate::reduce::max(v)
                };
            }
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.globalpool"
    }
}

/// `row[j]` = max (or sum) of the `K` consecutive values of `vrow` from `j * s`: the common
/// strided windows with the tap count known at compile time, so the taps stay in registers.
fn strided<const K: usize, const MAX: bool>(vrow: &[f32], row: &mut [f32], s: usize) {
    for (o, w) in row.iter_mut().zip(vrow.windows(K).step_by(s)) {
        let mut a = w[0];
        for &v in &w[1..K] {
            a = if MAX {
                if v > a {
                    v
                } else {
                    a
                }
            } else {
                a + v
            };
        }
        *o = a;
    }
}

/// The identity of a max (`MAX`, -inf) or a sum (0).
#[inline(always)]
fn identity<const MAX: bool>() -> f32 {
    if MAX {
        f32::NEG_INFINITY
    } else {
        0.0
    }
}

/// One step of a max (`MAX`) or sum: `acc` combined with `v` (a NaN never replaces a maximum).
#[inline(always)]
fn pair<const MAX: bool>(acc: f32, v: f32) -> f32 {
    if MAX {
        if v > acc {
            v
        } else {
            acc
        }
    } else {
        acc + v
    }
}

/// `out[j]` = the max (`MAX`) or sum of `row[j]` over `rows`, folded from the identity (-inf
/// or 0; all of it when there are no rows). Rows go three at a time, so `out` is written once
/// per three rows read instead of once per row; the loops compile for AVX2 where the CPU has
/// it. Every row must hold at least `out.len()` values.
#[inline(always)]
fn reduce_rows<const MAX: bool>(out: &mut [f32], rows: &[&[f32]]) {
    let n = out.len();
    let id = identity::<MAX>();
    if rows.is_empty() {
        out.fill(id);
    }
    for (g, group) in rows.chunks(3).enumerate() {
        // The first group folds from the identity, later ones from `out`.
        let start = |o: f32| if g == 0 { id } else { o };
        match *group {
            [a] => {
                for (o, &a) in out.iter_mut().zip(&a[..n]) {
                    *o = pair::<MAX>(start(*o), a);
                }
            }
            [a, b] => {
                for (o, (&a, &b)) in out.iter_mut().zip(a[..n].iter().zip(&b[..n])) {
                    *o = pair::<MAX>(pair::<MAX>(start(*o), a), b);
                }
            }
            [a, b, c, ..] => {
                let abc = a[..n].iter().zip(&b[..n]).zip(&c[..n]);
                for (o, ((&a, &b), &c)) in out.iter_mut().zip(abc) {
                    *o = pair::<MAX>(pair::<MAX>(pair::<MAX>(start(*o), a), b), c);
                }
            }
            [] => {}
        }
    }
}

/// Max or average pooling of blocked (NCHWc) tensors `[N, C/8, H, W, 8]`: every tap is one
/// pixel's eight channels, reduced lane by lane (one register on AVX2).
#[derive(Debug)]
pub(crate) struct BlockedPoolKernel {
    isa: Isa,
    x: Vec<usize>,
    gh: AxisGeometry,
    gw: AxisGeometry,
    h: AxisPlan,
    w: AxisPlan,
    avg: bool,
    count_include_pad: bool,
}

/// Channels per block of the blocked layout.
const LANES: usize = crate::nchwc::B;

impl BlockedPoolKernel {
    /// `x` is the blocked input shape.
    pub(crate) fn new(isa: Isa, p: &Pool, x: &[usize]) -> Option<Self> {
        let plain = ferrolite_core::ops::layout::plain_shape(x).ok()?;
        let avg = averages(p)?;
        let [gh, gw] = <[AxisGeometry; 2]>::try_from(p.geometry(&plain).ok()?).ok()?;
        Some(BlockedPoolKernel {
            isa,
            x: x.to_vec(),
            h: AxisPlan::new(&gh),
            w: AxisPlan::new(&gw),
            gh,
            gw,
            avg,
            count_include_pad: p.count_include_pad,
        })
    }

    /// One block plane `[H, W, 8]` into `dst` `[OH, OW, 8]`.
    #[inline(always)]
    pub(crate) fn plane_impl<const MAX: bool>(&self, src: &[f32], dst: &mut [f32]) {
        let (iw, ow) = (self.gw.input, self.gw.output);
        for (oh, row) in dst.chunks_exact_mut(ow * LANES).enumerate() {
            for (o, out) in row.chunks_exact_mut(LANES).enumerate() {
                let mut acc = [identity::<MAX>(); LANES];
                for kh in self.h.lo[oh]..self.h.hi[oh] {
                    let ih = self.gh.tap(oh, kh) as usize;
                    for kw in self.w.lo[o]..self.w.hi[o] {
                        let iw_ = self.gw.tap(o, kw) as usize;
                        let v = &src[(ih * iw + iw_) * LANES..][..LANES];
                        for (a, &v) in acc.iter_mut().zip(v) {
                            *a = pair::<MAX>(*a, v);
                        }
                    }
                }
                if !MAX {
                    let n = if self.count_include_pad {
                        self.h.padded[oh] * self.w.padded[o]
                    } else {
                        (self.h.hi[oh] - self.h.lo[oh]) * (self.w.hi[o] - self.w.lo[o])
                    };
                    for a in &mut acc {
                        *a = (*a as f64 / n as f64) as f32;
                    }
                }
                out.copy_from_slice(&acc);
            }
        }
    }

    fn plane(&self, src: &[f32], dst: &mut [f32]) {
        let t = &self.isa.table().pool;
        if self.avg {
            (t.blocked_plane_avg)(self, src, dst)
        } else {
            (t.blocked_plane_max)(self, src, dst)
        }
    }
}

impl Kernel for BlockedPoolKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let planes = self.x[0] * self.x[1];
        let ip = self.gh.input * self.gw.input * LANES;
        let op = (self.gh.output * self.gw.output * LANES).max(1);
        let y = output(outputs, 0, planes * op)?;
        let taps = self.gh.kernel * self.gw.kernel;
        split::for_chunks(y, op, taps.max(1), |s, c| {
            for (i, dst) in c.chunks_exact_mut(op).enumerate() {
                let p = s / op + i;
                self.plane(&x[p * ip..(p + 1) * ip], dst);
            }
        });
        Ok(())
    }

    fn name(&self) -> &str {
        if self.avg {
            "cpu.nchwc.avgpool"
        } else {
            "cpu.nchwc.maxpool"
        }
    }
}

/// Global max or average pooling of blocked tensors: `[N, C/8, H, W, 8]` -> `[N, C/8, 1, 1, 8]`.
#[derive(Debug)]
pub(crate) struct BlockedGlobalPoolKernel {
    x: Vec<usize>,
    avg: bool,
}

impl BlockedGlobalPoolKernel {
    pub(crate) fn new(p: &GlobalPool, x: &[usize]) -> Option<Self> {
        ferrolite_core::ops::layout::plain_shape(x).ok()?;
        (p.kind != PoolKind::Lp).then(|| BlockedGlobalPoolKernel {
            x: x.to_vec(),
            avg: p.kind == PoolKind::Average,
        })
    }
}

impl Kernel for BlockedGlobalPoolKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let planes = self.x[0] * self.x[1];
        let hw = self.x[2] * self.x[3];
        let y = output(outputs, 0, planes * LANES)?;
        split::for_chunks(y, LANES, hw.max(1), |s, c| {
            for (i, out) in c.chunks_exact_mut(LANES).enumerate() {
                let p = s / LANES + i;
                let src = &x[p * hw * LANES..(p + 1) * hw * LANES];
                if self.avg {
                    // In f64, as the plain kernel's sums are exact enough for any plane.
                    let mut acc = [0f64; LANES];
                    for px in src.chunks_exact(LANES) {
                        for (a, &v) in acc.iter_mut().zip(px) {
                            *a += v as f64;
                        }
                    }
                    for (o, a) in out.iter_mut().zip(acc) {
                        *o = if hw == 0 {
                            f32::NAN
                        } else {
                            (a / hw as f64) as f32
                        };
                    }
                } else {
                    let mut acc = [f32::NEG_INFINITY; LANES];
                    for px in src.chunks_exact(LANES) {
                        for (a, &v) in acc.iter_mut().zip(px) {
                            *a = pair::<true>(*a, v);
                        }
                    }
                    out.copy_from_slice(&acc);
                }
            }
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.nchwc.globalpool"
    }
}
