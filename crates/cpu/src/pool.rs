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

pub(crate) fn register(r: &mut Registry) {
    r.add::<Pool>("cpu.pool", "Pool", 10, DTypes::AllF32, Layout::Plain, pool);
    r.add::<GlobalPool>(
        "cpu.global_pool",
        "GlobalPool",
        10,
        DTypes::AllF32,
        Layout::Plain,
        global_pool,
    );
    r.add::<Pool>(
        "cpu.nchwc.pool",
        "Pool",
        10,
        DTypes::AllF32,
        Layout::Nchwc,
        |p, r| {
            let k = BlockedPoolKernel::new(r.cx.isa, p, f32_shape(r.req, 0)?);
            boxed(k, "2-D max or average pooling without indices")
        },
    );
    r.add::<GlobalPool>(
        "cpu.nchwc.global_pool",
        "GlobalPool",
        10,
        DTypes::AllF32,
        Layout::Nchwc,
        |p, r| {
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
        fused3x3s2: isa != Isa::Portable
            && [&gh, &gw]
                .iter()
                .all(|g| g.kernel == 3 && g.stride == 2 && g.dilation == 1),
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
    /// 3x3 windows, stride 2, no dilation, on a CPU with AVX2: rows whose three input rows
    /// all exist go through `window3x3s2` (vertical and horizontal in one pass).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fused3x3s2: bool,
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
            reduce_rows::<false>(self.isa, out, rows)
        } else {
            reduce_rows::<true>(self.isa, out, rows)
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
            #[cfg(target_arch = "x86_64")]
            if let (true, &[r0, r1, r2]) = (self.fused3x3s2, &rows[..]) {
                if self.avg {
                    window3x3s2::<false>([r0, r1, r2], gw.pad_begin, row);
                } else {
                    window3x3s2::<true>([r0, r1, r2], gw.pad_begin, row);
                }
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
fn reduce_rows<const MAX: bool>(isa: Isa, out: &mut [f32], rows: &[&[f32]]) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: the CPU has AVX2 (an Isa other than Portable exists only then), the only requirement of the
        // target_feature function, whose body is safe code.
        unsafe { reduce_rows_avx2::<MAX>(out, rows) };
        return;
    }
    reduce_rows_impl::<MAX>(out, rows)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn reduce_rows_avx2<const MAX: bool>(out: &mut [f32], rows: &[&[f32]]) {
    reduce_rows_impl::<MAX>(out, rows)
}

#[inline(always)]
fn reduce_rows_impl<const MAX: bool>(out: &mut [f32], rows: &[&[f32]]) {
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

/// One output row of a 3x3, stride-2 window over the input rows `r` (all three inside the
/// image), `pad` columns of padding on the left: the max (`MAX`) or sum of each window, folded
/// in the order of the row-then-column path (rows, then taps; identity for padding columns),
/// so both paths give the same values. Eight outputs at a time where their 17 input columns
/// lie inside the rows, one at a time elsewhere.
#[cfg(target_arch = "x86_64")]
fn window3x3s2<const MAX: bool>(r: [&[f32]; 3], pad: usize, out: &mut [f32]) {
    let iw = r[0].len().min(r[1].len()).min(r[2].len());
    // The vector blocks: outputs j0.. whose windows start at column 2 j - pad >= 0.
    let j0 = pad.div_ceil(2).min(out.len());
    let mut j = j0;
    let id = identity::<MAX>();
    while j + 8 <= out.len() && 2 * j + 17 <= iw + pad {
        // SAFETY: the CPU has AVX2 (fused3x3s2 is only set then); columns 2 j - pad up to
        // 2 j - pad + 16 lie inside every row (checked just above), outputs j..j + 8 inside
        // `out`.
        unsafe { window3x3s2_block::<MAX>(r, 2 * j - pad, &mut out[j..j + 8]) };
        j += 8;
    }
    // A last block ending at the row's end, overlapping the one before (same values).
    let n = out.len();
    if j < n && n >= j0 + 8 && 2 * (n - 8) + 17 <= iw + pad {
        // SAFETY: as above, for outputs n - 8..n.
        unsafe { window3x3s2_block::<MAX>(r, 2 * (n - 8) - pad, &mut out[n - 8..]) };
        j = n;
    }
    // The rest: windows over the padding (or past the row's end, ceil mode).
    let pair = pair::<MAX>;
    let column = |c: i64| {
        if c < 0 || c as usize >= iw {
            return id;
        }
        r.iter().fold(id, |a, row| pair(a, row[c as usize]))
    };
    let (head, rest) = out.split_at_mut(j0);
    let tail = &mut rest[j - j0..];
    let edges = head.iter_mut().enumerate();
    let edges = edges.chain(tail.iter_mut().enumerate().map(|(t, o)| (j + t, o)));
    for (jj, o) in edges {
        let c = 2 * jj as i64 - pad as i64;
        *o = (0..3).fold(id, |a, kw| pair(a, column(c + kw)));
    }
}

/// Eight outputs of [`window3x3s2`] from input column `c0`: each row's 17 values from `c0`
/// reduced vertically, then split into even and odd columns by shuffles.
///
/// # Safety
/// The CPU must support AVX2; every row must hold `c0 + 17` values and `out` 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn window3x3s2_block<const MAX: bool>(r: [&[f32]; 3], c0: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    debug_assert!(r.iter().all(|row| row.len() >= c0 + 17) && out.len() >= 8);
    // `max_ps(v, acc)` is `v > acc ? v : acc`, the scalar fold's step (NaN never kept).
    let step = |acc: __m256, v: __m256| {
        if MAX {
            _mm256_max_ps(v, acc)
        } else {
            _mm256_add_ps(acc, v)
        }
    };
    let id = _mm256_set1_ps(identity::<MAX>());
    let (mut a, mut b, mut c) = (id, id, id);
    for row in r {
        // SAFETY: 17 values from c0 lie inside the row (the caller's contract).
        unsafe {
            let p = row.as_ptr().add(c0);
            a = step(a, _mm256_loadu_ps(p));
            b = step(b, _mm256_loadu_ps(p.add(8)));
            c = step(c, _mm256_set1_ps(*p.add(16)));
        }
    }
    let [even, odd, next] = crate::stride2::avx2::window3_taps(a, b, c);
    let v = step(step(step(id, even), odd), next);
    // SAFETY: out holds 8 values (the caller's contract).
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
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
const LANES: usize = ferrolite_core::ops::layout::BLOCK;

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
    fn plane_impl<const MAX: bool>(&self, src: &[f32], dst: &mut [f32]) {
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
        #[cfg(target_arch = "x86_64")]
        if self.isa.has_avx2() {
            let (ih, iw) = (self.gh.input, self.gw.input);
            assert!(src.len() >= ih * iw * LANES);
            assert!(dst.len() >= self.gh.output * self.gw.output * LANES);
            // SAFETY: the CPU has AVX2 (the Isa says so); the taps' rows and columns lie
            // inside the plane (AxisPlan's ranges) whose size was asserted, and the outputs
            // inside `dst` (asserted).
            unsafe {
                if self.avg {
                    self.plane_avx2::<false>(src, dst)
                } else {
                    self.plane_avx2::<true>(src, dst)
                }
            };
            return;
        }
        if self.avg {
            self.plane_impl::<false>(src, dst)
        } else {
            self.plane_impl::<true>(src, dst)
        }
    }

    /// [`Self::plane_impl`] with one register per pixel.
    ///
    /// # Safety
    /// The CPU must support AVX2; `src` must hold the input plane and `dst` the output plane.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn plane_avx2<const MAX: bool>(&self, src: &[f32], dst: &mut [f32]) {
        let (iw, ow) = (self.gw.input, self.gw.output);
        let (x, y) = (src.as_ptr(), dst.as_mut_ptr());
        // Input coordinates of taps, as `AxisGeometry::tap` (inlined here).
        let tap =
            |g: &AxisGeometry, o: usize, k: usize| o * g.stride + k * g.dilation - g.pad_begin;
        // Pixels whose window lies inside the row go four at a time: four independent
        // chains instead of one waiting on each step.
        let full = |o: usize| self.w.lo[o] == 0 && self.w.hi[o] == self.gw.kernel;
        for oh in 0..self.gh.output {
            let rows = tap(&self.gh, oh, self.h.lo[oh])..tap(&self.gh, oh, self.h.hi[oh]);
            let mut o = 0;
            while o < ow {
                let cols = tap(&self.gw, o, self.w.lo[o])..tap(&self.gw, o, self.w.hi[o]);
                let at = (oh * ow + o) * LANES;
                if o + 4 <= ow && full(o) && full(o + 3) {
                    // SAFETY: the windows' taps lie inside the plane (the caller's
                    // contract) and pixels o..o + 4 inside the output row.
                    let acc = unsafe {
                        pool_pixels::<MAX, 4>(x, iw, &self.gh, &self.gw, rows.clone(), cols)
                    };
                    for (p, a) in acc.iter().enumerate() {
                        self.store_avx2::<MAX>(*a, y, at + p * LANES, oh, o + p);
                    }
                    o += 4;
                } else {
                    // SAFETY: as above for pixel o.
                    let acc = unsafe {
                        pool_pixels::<MAX, 1>(x, iw, &self.gh, &self.gw, rows.clone(), cols)
                    };
                    self.store_avx2::<MAX>(acc[0], y, at, oh, o);
                    o += 1;
                }
            }
        }
    }

    /// Stores pixel (oh, o)'s max, or its sum divided by the window's count, at `y + at`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    fn store_avx2<const MAX: bool>(
        &self,
        acc: std::arch::x86_64::__m256,
        y: *mut f32,
        at: usize,
        oh: usize,
        o: usize,
    ) {
        use std::arch::x86_64::*;
        let mut v = [0f32; LANES];
        // SAFETY: `v` holds eight values.
        unsafe { _mm256_storeu_ps(v.as_mut_ptr(), acc) };
        if !MAX {
            let cnt = if self.count_include_pad {
                self.h.padded[oh] * self.w.padded[o]
            } else {
                (self.h.hi[oh] - self.h.lo[oh]) * (self.w.hi[o] - self.w.lo[o])
            };
            for v in &mut v {
                *v = (*v as f64 / cnt as f64) as f32;
            }
        }
        // SAFETY: the caller passes an output pixel inside the plane.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), y.add(at), LANES) };
    }
}

/// The max (`MAX`) or sum over input `rows` x `cols` (stepped by the dilations) of `N`
/// neighbouring output pixels, one register each.
///
/// # Safety
/// The CPU must support AVX2; every tap of the `N` windows must lie inside the plane at `x`
/// (row width `iw`, eight values per pixel).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn pool_pixels<const MAX: bool, const N: usize>(
    x: *const f32,
    iw: usize,
    gh: &AxisGeometry,
    gw: &AxisGeometry,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) -> [std::arch::x86_64::__m256; N] {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_set1_ps(identity::<MAX>()); N];
    for r in rows.step_by(gh.dilation) {
        for c in cols.clone().step_by(gw.dilation) {
            for (p, a) in acc.iter_mut().enumerate() {
                // SAFETY: the caller's contract.
                let v = unsafe { _mm256_loadu_ps(x.add((r * iw + c + p * gw.stride) * LANES)) };
                // `max_ps(v, acc)` is `v > acc ? v : acc`, the scalar fold's step.
                *a = if MAX {
                    _mm256_max_ps(v, *a)
                } else {
                    _mm256_add_ps(*a, v)
                };
            }
        }
    }
    acc
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
