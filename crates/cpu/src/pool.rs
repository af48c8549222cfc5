//! f32 MaxPool / AveragePool over N x C x H x W and the global pools.
//!
//! Each output row accumulates one (kh, kw) tap at a time over the range of output columns
//! whose tap lies inside the input, so no per-element bounds tests remain in the inner loop.
//! Taps are visited in the reference's order per output (kh, then kw).

use crate::fast::{f32_shape, for_chunks, input, output};
use ferrolite_core::ops::nn::geometry::AxisGeometry;
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};
use ferrolite_core::plan::{Kernel, KernelRequest};
use ferrolite_core::{OpResult, Tensor};
use std::any::Any;

pub(crate) fn pick(op: &dyn Any, req: &KernelRequest) -> Option<Box<dyn Kernel>> {
    if let Some(p) = op.downcast_ref::<Pool>() {
        let x = f32_shape(req, 0)?;
        if p.with_indices || req.outputs.len() != 1 || x.len() != 4 {
            return None;
        }
        let avg = match p.kind {
            PoolKind::Max => false,
            PoolKind::Average => true,
            PoolKind::Lp => return None,
        };
        let g = p.geometry(x).ok()?;
        let [gh, gw] = <[AxisGeometry; 2]>::try_from(g).ok()?;
        return Some(Box::new(PoolKernel {
            x: x.to_vec(),
            h: AxisPlan::new(&gh),
            w: AxisPlan::new(&gw),
            gh,
            gw,
            avg,
            count_include_pad: p.count_include_pad,
        }));
    }
    if let Some(p) = op.downcast_ref::<GlobalPool>() {
        let x = f32_shape(req, 0)?;
        if x.len() < 2 || p.kind == PoolKind::Lp {
            return None;
        }
        return Some(Box::new(GlobalPoolKernel {
            x: x.to_vec(),
            avg: p.kind == PoolKind::Average,
        }));
    }
    None
}

/// Per output index along one axis: the valid tap range and the window sizes to divide by.
#[derive(Debug)]
struct AxisPlan {
    /// Taps k in [lo, hi) land inside the input.
    lo: Vec<usize>,
    hi: Vec<usize>,
    /// Taps before the end padding (count_include_pad's count).
    padded: Vec<usize>,
}

impl AxisPlan {
    fn new(g: &AxisGeometry) -> AxisPlan {
        let (mut lo, mut hi, mut padded) = (Vec::new(), Vec::new(), Vec::new());
        for o in 0..g.output {
            let inside = |k: usize| {
                let p = g.tap(o, k);
                p >= 0 && p < g.input as i64
            };
            let l = (0..g.kernel).find(|&k| inside(k)).unwrap_or(g.kernel);
            let h = (l..g.kernel).find(|&k| !inside(k)).unwrap_or(g.kernel);
            lo.push(l);
            hi.push(h.max(l));
            padded.push(
                (0..g.kernel)
                    .filter(|&k| g.tap(o, k) < (g.input + g.pad_end) as i64)
                    .count(),
            );
        }
        AxisPlan { lo, hi, padded }
    }
}

/// The range of outputs along an axis for which tap `k` is inside the input.
fn out_range(g: &AxisGeometry, k: usize) -> (usize, usize) {
    // o * stride + k * dilation - pad in [0, input).
    let off = (k * g.dilation) as i64 - g.pad_begin as i64;
    let s = g.stride as i64;
    let first = if off >= 0 { 0 } else { (-off + s - 1) / s };
    let end = if (g.input as i64) <= off {
        0
    } else {
        (g.input as i64 - off + s - 1) / s
    };
    let first = (first as usize).min(g.output);
    let end = (end as usize).min(g.output);
    (first, end.max(first))
}

#[derive(Debug)]
struct PoolKernel {
    x: Vec<usize>,
    gh: AxisGeometry,
    gw: AxisGeometry,
    h: AxisPlan,
    w: AxisPlan,
    avg: bool,
    count_include_pad: bool,
}

impl PoolKernel {
    /// One plane: per output row, first reduce the valid input rows of the window into one
    /// row (contiguous, vectorises), then reduce each output's horizontal taps from it.
    fn plane(&self, src: &[f32], dst: &mut [f32], vrow: &mut [f32]) {
        let (gh, gw) = (&self.gh, &self.gw);
        let (iw, ow) = (gw.input, gw.output);
        let init = if self.avg { 0.0 } else { f32::NEG_INFINITY };
        let wr: Vec<(usize, usize)> = (0..gw.kernel).map(|k| out_range(gw, k)).collect();
        for (oh, row) in dst.chunks_exact_mut(ow).enumerate() {
            vrow.fill(init);
            for kh in self.h.lo[oh]..self.h.hi[oh] {
                let ih = gh.tap(oh, kh) as usize;
                let xr = &src[ih * iw..(ih + 1) * iw];
                if self.avg {
                    for (o, &v) in vrow.iter_mut().zip(xr) {
                        *o += v;
                    }
                } else {
                    for (o, &v) in vrow.iter_mut().zip(xr) {
                        *o = if v > *o { v } else { *o };
                    }
                }
            }
            row.fill(init);
            for (kw, &(o0, o1)) in wr.iter().enumerate() {
                if o0 >= o1 {
                    continue;
                }
                let base = o0 * gw.stride + kw * gw.dilation - gw.pad_begin;
                let out = &mut row[o0..o1];
                if gw.stride == 1 {
                    let xs = &vrow[base..base + out.len()];
                    if self.avg {
                        for (o, &v) in out.iter_mut().zip(xs) {
                            *o += v;
                        }
                    } else {
                        for (o, &v) in out.iter_mut().zip(xs) {
                            *o = if v > *o { v } else { *o };
                        }
                    }
                } else {
                    let s = gw.stride;
                    if self.avg {
                        for (j, o) in out.iter_mut().enumerate() {
                            *o += vrow[base + j * s];
                        }
                    } else {
                        for (j, o) in out.iter_mut().enumerate() {
                            let v = vrow[base + j * s];
                            *o = if v > *o { v } else { *o };
                        }
                    }
                }
            }
            if self.avg {
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
    }
}

impl Kernel for PoolKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let planes = self.x[0] * self.x[1];
        let (ip, op) = (
            self.gh.input * self.gw.input,
            self.gh.output * self.gw.output,
        );
        let y = output(outputs, 0, planes * op)?;
        let taps = self.gh.kernel * self.gw.kernel;
        for_chunks(y, op.max(1), taps.max(1), |s, c| {
            let p0 = s / op.max(1);
            let mut vrow = vec![0.0f32; self.gw.input];
            for (i, dst) in c.chunks_exact_mut(op.max(1)).enumerate() {
                let p = p0 + i;
                self.plane(&x[p * ip..(p + 1) * ip], dst, &mut vrow);
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
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
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
        for_chunks(y, 1, plane, |s, c| {
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
