//! The cheap ops around the integer kernels: QuantizeLinear and DequantizeLinear per tensor
//! (f32 and 8-bit), and MaxPool on 8-bit values (the quantize pass keeps them 8-bit).

use crate::backend::Registry;
use crate::isa::Isa;
use crate::pool::AxisPlan;
use crate::qgemm::requantize;
use crate::qparams::{qparams, signed};
use crate::split::{self, Cost};
use ferrolite_core::op::required;
use ferrolite_core::ops::nn::geometry::AxisGeometry;
use ferrolite_core::ops::nn::pool::{Pool, PoolKind};
use ferrolite_core::ops::quant::{DequantizeLinear, DynamicQuantizeLinear, QuantizeLinear};
use ferrolite_core::plan::{Kernel, KernelRequest};
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::{op_ensure, DType, OpError, OpResult, Tensor};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

/// The one f32 scale and 8-bit zero point at slots 1 and 2 of a tensor of `dtype`.
fn per_tensor(r: &KernelRequest, dtype: DType) -> Result<(f32, i32, bool), String> {
    let q = qparams(r, dtype, 1, 2, 1)?;
    Ok((q.scale[0], q.zero[0], q.signed))
}

#[derive(Debug)]
struct QuantizeKernel {
    scale: f32,
    zero: i32,
    signed: bool,
    isa: Isa,
}

/// The quantize family's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    /// `y = clamp(round_half_even(x / scale) + zero, lo, hi)`: (x, scale, zero, lo, hi,
    /// signed, y).
    pub(crate) quantize: QuantizeFn,
    /// `y = (x - zero) * scale`: (x, scale, zero, signed, y).
    pub(crate) dequantize: fn(&[u8], f32, i32, bool, &mut [f32]),
    /// The smallest and largest of `x` and 0, NaNs skipped (as `f32::min` / `max` do).
    pub(crate) min_max: fn(&[f32]) -> (f32, f32),
    /// `y = saturate(round_half_even(x / scale) + zero)` as u8, DynamicQuantizeLinear's
    /// quantizing pass: (x, scale, zero, y).
    pub(crate) quantize_u8: fn(&[f32], f32, i32, &mut [u8]),
}

/// See [`Kernels::quantize`].
pub(crate) type QuantizeFn = fn(&[f32], f32, i32, i32, i32, bool, &mut [u8]);

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    quantize: quantize_impl,
    dequantize: dequantize_impl,
    min_max: min_max_impl,
    quantize_u8: quantize_u8_impl,
};

#[inline(always)]
fn quantize_impl(x: &[f32], scale: f32, zero: i32, lo: i32, hi: i32, signed: bool, y: &mut [u8]) {
    let mut v = [0f32; 256];
    for (x, y) in x.chunks(256).zip(y.chunks_mut(256)) {
        let v = &mut v[..x.len()];
        // Divided, as the spec (and numpy) computes it.
        v.iter_mut().zip(x).for_each(|(v, &x)| *v = x / scale);
        requantize(v, zero, lo, hi, signed, y);
    }
}

#[inline(always)]
fn dequantize_impl(x: &[u8], scale: f32, zero: i32, signed: bool, y: &mut [f32]) {
    if signed {
        for (y, &b) in y.iter_mut().zip(x) {
            *y = (b as i8 as i32 - zero) as f32 * scale;
        }
    } else {
        for (y, &b) in y.iter_mut().zip(x) {
            *y = (b as i32 - zero) as f32 * scale;
        }
    }
}

impl Kernel for QuantizeKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = required(inputs, 0)?.as_slice::<f32>()?;
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        op_ensure!(y.numel() == x.len(), "output size differs from the input's");
        let (lo, hi) = if self.signed { (-128, 127) } else { (0, 255) };
        let (scale, zero, signed) = (self.scale, self.zero, self.signed);
        let quantize = self.isa.table().quantize.quantize;
        let one = |(x, y): (&[f32], &mut [u8])| quantize(x, scale, zero, lo, hi, signed, y);
        split::for_chunks(y.bytes_mut(), 64, 4, |s, out| {
            one((&x[s..s + out.len()], out))
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.quantize"
    }
}

#[derive(Debug)]
struct DequantizeKernel {
    scale: f32,
    zero: i32,
    signed: bool,
    isa: Isa,
}

impl Kernel for DequantizeKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = required(inputs, 0)?.bytes();
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        let y = y.as_mut_slice::<f32>()?;
        op_ensure!(y.len() == x.len(), "output size differs from the input's");
        let (s, z, signed) = (self.scale, self.zero, self.signed);
        let dequantize = self.isa.table().quantize.dequantize;
        let one = |(x, y): (&[u8], &mut [f32])| dequantize(x, s, z, signed, y);
        split::for_chunks(y, 16, 1, |s, out| one((&x[s..s + out.len()], out)));
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.dequantize"
    }
}

/// 2-D max pooling of 8-bit values (NCHW), compared as unsigned after flipping signed ones.
#[derive(Debug)]
struct QMaxPoolKernel {
    x: Vec<usize>,
    gh: AxisGeometry,
    gw: AxisGeometry,
    h: AxisPlan,
    flip: u8,
}

impl Kernel for QMaxPoolKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = required(inputs, 0)?;
        op_ensure!(
            x.shape() == self.x.as_slice(),
            "input has shape {:?}, the kernel was built for {:?}",
            x.shape(),
            self.x
        );
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        let (ih, iw) = (self.gh.input, self.gw.input);
        let (oh, ow) = (self.gh.output, self.gw.output);
        op_ensure!(
            y.numel() == self.x[0] * self.x[1] * oh * ow,
            "output size differs from the plan"
        );
        let flip = self.flip;
        let gw = &self.gw;
        // Per output row: the column-wise max of its window's input rows (contiguous, so it
        // vectorizes) into a row padded with zeros (the smallest value once flipped) on both
        // sides, then the max along each output's window of that row, with no bounds to check.
        let padded = ((ow - 1) * gw.stride + gw.effective_kernel()).max(gw.pad_begin + iw);
        let plane = |(xp, yp): (&[u8], &mut [u8])| {
            let mut rows = vec![0u8; padded];
            let mut phases = Vec::new();
            for oy in 0..oh {
                let (hl, hh) = (self.h.lo[oy], self.h.hi[oy]);
                let inner = &mut rows[gw.pad_begin..gw.pad_begin + iw];
                inner.fill(0);
                for kh in hl..hh {
                    let iy = self.gh.tap(oy, kh) as usize;
                    let src = &xp[iy * iw..(iy + 1) * iw];
                    for (m, &v) in inner.iter_mut().zip(src) {
                        *m = (*m).max(v ^ flip);
                    }
                }
                let out = &mut yp[oy * ow..(oy + 1) * ow];
                window_max(&rows, gw, &mut phases, out);
                for o in out.iter_mut() {
                    *o ^= flip;
                }
            }
        };
        let (xs, ys) = (x.bytes(), y.bytes_mut());
        let workers = split::worth(Cost::bytes(xs.len() * 2 + ys.len()));
        split::for_rows(ys, oh * ow, workers, |p, out| {
            plane((&xs[p * ih * iw..][..ih * iw], out))
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qmaxpool"
    }
}

/// `out[o] = max over taps t of row[o * stride + t * dilation]` (the row padded so every tap
/// is inside it). Stride 1 reads the row at shifted offsets; stride `s` with dilation 1 splits
/// the row into its `s` phases first, so every tap is again a contiguous slice; both
/// vectorize.
fn window_max(row: &[u8], g: &AxisGeometry, phases: &mut Vec<u8>, out: &mut [u8]) {
    let (s, d, ow) = (g.stride, g.dilation, out.len());
    out.fill(0);
    if s == 1 || d == 1 {
        // Phase p holds row[p], row[p + s], ...; tap t of output o is phase t % s at o + t / s.
        let len = ow + (g.kernel - 1) * d / s;
        // Stride 1 is its own single phase: the row itself.
        if s > 1 {
            phases.clear();
            phases.resize(s * len, 0);
        }
        if s == 2 {
            let (even, odd) = phases.split_at_mut(len);
            // Sixteen pairs at a time on x86 (SSE2: the low and high byte of each 16-bit
            // lane, packed); the compiler kept the pair loop scalar.
            #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
            let mut done = 0;
            #[cfg(target_arch = "x86_64")]
            while done + 16 <= len && 2 * done + 32 <= row.len() {
                use std::arch::x86_64::*;
                // SAFETY: reads 32 bytes at 2 * done of `row` and writes 16 at `done` of
                // `even` and `odd` (the loop's condition; both are `len` long); SSE2 is part
                // of x86-64.
                unsafe {
                    let p = row.as_ptr().add(2 * done) as *const __m128i;
                    let (a, b) = (_mm_loadu_si128(p), _mm_loadu_si128(p.add(1)));
                    let low = _mm_set1_epi16(0xff);
                    let e = _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low));
                    let o = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));
                    _mm_storeu_si128(even.as_mut_ptr().add(done) as *mut __m128i, e);
                    _mm_storeu_si128(odd.as_mut_ptr().add(done) as *mut __m128i, o);
                }
                done += 16;
            }
            let pairs = row[2 * done..].chunks_exact(2);
            let rest = even[done..].iter_mut().zip(odd[done..].iter_mut());
            for ((e, o), pair) in rest.zip(pairs) {
                (*e, *o) = (pair[0], pair[1]);
            }
            if row.len() % 2 == 1 && row.len() / 2 < len {
                even[row.len() / 2] = row[row.len() - 1];
            }
        } else if s > 2 {
            for (p, phase) in phases.chunks_exact_mut(len).enumerate() {
                // `skip`, not `row[p..]`: a stride wider than the row has phases past its end.
                for (dst, &v) in phase.iter_mut().zip(row.iter().skip(p).step_by(s)) {
                    *dst = v;
                }
            }
        }
        let split: &[u8] = if s == 1 { row } else { phases };
        for t in 0..g.kernel {
            let (p, at) = ((t * d) % s, (t * d) / s);
            let src = &split[p * len + at..p * len + at + ow];
            for (o, &v) in out.iter_mut().zip(src) {
                *o = (*o).max(v);
            }
        }
    } else {
        for (o, y) in out.iter_mut().enumerate() {
            for t in 0..g.kernel {
                *y = (*y).max(row[o * s + t * d]);
            }
        }
    }
}

/// The smallest and largest of `x` and 0, NaNs skipped (as `f32::min` / `max` do).
fn min_max_impl(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((0f32, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// DynamicQuantizeLinear: the range pass and the quantizing pass vectorized, with the
/// reference's f32 arithmetic (so the same scale, zero point and values).
#[derive(Debug)]
struct DynamicQuantizeKernel {
    isa: Isa,
}

#[inline(always)]
fn quantize_u8_impl(x: &[f32], scale: f32, zero: i32, y: &mut [u8]) {
    let mut v = [0f32; 256];
    for (x, y) in x.chunks(256).zip(y.chunks_mut(256)) {
        let v = &mut v[..x.len()];
        // A division, as the reference's (a product with the reciprocal rounds differently).
        v.iter_mut().zip(x).for_each(|(v, &x)| *v = x / scale);
        requantize(v, zero, 0, 255, false, y);
    }
}

impl Kernel for DynamicQuantizeKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = required(inputs, 0)?.as_slice::<f32>()?;
        op_ensure!(
            outputs.len() == 3,
            "DynamicQuantizeLinear has three outputs"
        );
        let (lo, hi) = split::map_reduce(
            x.len(),
            size_of::<f32>(),
            (0.0, 0.0),
            |r| (self.isa.table().quantize.min_max)(&x[r]),
            |a, b| (a.0.min(b.0), a.1.max(b.1)),
        );
        let range = if hi == lo { 1.0 } else { hi - lo };
        let scale = range / 255.0;
        let zero = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
        let (y, rest) = outputs.split_at_mut(1);
        let y = &mut y[0];
        op_ensure!(y.numel() == x.len(), "output size differs from the input's");
        let quantize_u8 = self.isa.table().quantize.quantize_u8;
        let one = |(x, y): (&[f32], &mut [u8])| quantize_u8(x, scale, zero as i32, y);
        split::for_chunks(y.bytes_mut(), 64, 4, |s, out| {
            one((&x[s..s + out.len()], out))
        });
        rest[0].as_mut_slice::<f32>()?[0] = scale;
        rest[1].bytes_mut()[0] = zero as u8;
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.dynamic_quantize"
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<DynamicQuantizeLinear>(
        "cpu.dynamic_quantize",
        "DynamicQuantizeLinear",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |_, r| {
            let x = r
                .req
                .inputs
                .first()
                .and_then(|i| i.as_ref())
                .ok_or("needs an input")?;
            if x.dtype != DType::F32 || r.req.outputs.len() != 3 {
                return Err("needs f32 input".into());
            }
            Ok(Box::new(DynamicQuantizeKernel { isa: r.cx.isa }))
        },
    );
    r.add::<QuantizeLinear>(
        "cpu.quantize",
        "QuantizeLinear",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |q, r| {
            let x = r
                .req
                .inputs
                .first()
                .and_then(|i| i.as_ref())
                .ok_or("needs an input")?;
            let out = r.req.outputs.first().ok_or("needs an output")?;
            if x.dtype != DType::F32
                || signed(out.dtype).is_err()
                || q.block_size != 0
                || !q.saturate
            {
                return Err("needs f32 to 8-bit, per tensor, saturating".into());
            }
            let (scale, zero, signed) = per_tensor(r.req, out.dtype)?;
            if !(scale.is_finite() && scale > 0.0) {
                return Err("needs a positive scale".into());
            }
            Ok(Box::new(QuantizeKernel {
                scale,
                zero,
                signed,
                isa: r.cx.isa,
            }))
        },
    );
    r.add::<DequantizeLinear>(
        "cpu.dequantize",
        "DequantizeLinear",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |d, r| {
            let x = r
                .req
                .inputs
                .first()
                .and_then(|i| i.as_ref())
                .ok_or("needs an input")?;
            let signed = signed(x.dtype)?;
            let out = r.req.outputs.first().ok_or("needs an output")?;
            if out.dtype != DType::F32 || d.block_size != 0 {
                return Err("needs an f32 output, per tensor".into());
            }
            let (scale, zero, _) = per_tensor(r.req, x.dtype)?;
            Ok(Box::new(DequantizeKernel {
                scale,
                zero,
                signed,
                isa: r.cx.isa,
            }))
        },
    );
    r.add::<Pool>(
        "cpu.qmaxpool",
        "Pool",
        5,
        DTypes::Any,
        Layout::PLAIN,
        |p, r| {
            let x = r
                .req
                .inputs
                .first()
                .and_then(|i| i.as_ref())
                .ok_or("needs an input")?;
            let signed = signed(x.dtype)?;
            if p.kind != PoolKind::Max
                || p.with_indices
                || x.shape.len() != 4
                || r.req.outputs.len() != 1
            {
                return Err("needs a 2-D max pool without indices".into());
            }
            let g = p.geometry(x.shape).map_err(|e| e.to_string())?;
            let [gh, gw] = <[AxisGeometry; 2]>::try_from(g).map_err(|_| "needs a 2-D pool")?;
            // Planes are cut into chunks of their sizes; an empty one has nothing to cut.
            if gh.input * gw.input == 0 || gh.output * gw.output == 0 {
                return Err("needs non-empty input and output planes".into());
            }
            Ok(Box::new(QMaxPoolKernel {
                x: x.shape.to_vec(),
                h: AxisPlan::new(&gh),
                gh,
                gw,
                flip: if signed { 0x80 } else { 0 },
            }))
        },
    );
}
