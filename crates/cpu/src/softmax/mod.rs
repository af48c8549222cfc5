//! f32 Softmax and LogSoftmax along any axis (rows when the axis is last, columns of the
//! inner block otherwise).

use crate::backend::Registry;
use crate::isa::Isa;
use crate::kernel_io::{f32_shape, input, output};
use crate::math;
use crate::split;
use ferrolite_core::op::normalize_axis;
use ferrolite_core::ops::nn::softmax::{Softmax, SoftmaxKind};
use ferrolite_core::plan::Kernel;
use ferrolite_core::registry::{needs, DTypes, Layout};
use ferrolite_core::{OpResult, Tensor};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;

pub(crate) fn register(r: &mut Registry) {
    r.add::<Softmax>(
        "cpu.softmax",
        "Softmax",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |s, r| {
            let k = softmax(r.cx.isa, s, f32_shape(r.req, 0)?);
            needs(k, "Softmax or LogSoftmax over a valid axis")
        },
    );
}

fn softmax(isa: Isa, s: &Softmax, x: &[usize]) -> Option<Box<dyn Kernel>> {
    let log = match s.kind {
        SoftmaxKind::Softmax => false,
        SoftmaxKind::LogSoftmax => true,
        SoftmaxKind::Hardmax => return None,
    };
    let (len, inner) = if s.legacy_2d {
        let r = x.len() as i64;
        let a = if s.axis < 0 { s.axis + r } else { s.axis };
        if a < 0 || a > r {
            return None;
        }
        (x[a as usize..].iter().product(), 1)
    } else if x.is_empty() {
        (1, 1)
    } else {
        let a = normalize_axis(s.axis, x.len()).ok()?;
        (x[a], x[a + 1..].iter().product())
    };
    Some(Box::new(SoftmaxKernel {
        isa,
        x: x.to_vec(),
        len,
        inner,
        log,
    }))
}

#[derive(Debug)]
struct SoftmaxKernel {
    isa: Isa,
    x: Vec<usize>,
    len: usize,
    inner: usize,
    log: bool,
}

/// Softmax of one contiguous row, through the ISA's table.
fn row(isa: Isa, x: &[f32], y: &mut [f32], log: bool) {
    (isa.table().softmax.row)(x, y, log)
}

/// The softmax family's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    /// Softmax (or, `log`, LogSoftmax) of one contiguous row.
    pub(crate) row: fn(&[f32], &mut [f32], bool),
}

/// Separate multiplies and adds.
pub(crate) const PORTABLE: Kernels = Kernels {
    row: row_impl::<false>,
};

/// `exp(x - max)` (through [`math::map_blocks`]), its sum, then a scale by the sum's
/// reciprocal, or for LogSoftmax `x - max - ln(sum)`.
/// `F`: fused multiply-adds in `exp` (see [`math::exp`]).
#[inline(always)]
fn row_impl<const F: bool>(x: &[f32], y: &mut [f32], log: bool) {
    let m = crate::reduce::max(x);
    math::map_blocks(x, y, |v| math::exp::<F>(v - m));
    let sum = crate::reduce::sum(y);
    if log {
        let l = sum.ln();
        for (o, &v) in y.iter_mut().zip(x) {
            *o = (v - m) - l;
        }
    } else {
        let r = 1.0 / sum;
        for o in y.iter_mut() {
            *o *= r;
        }
    }
}

/// Softmax along the middle axis of a (len x inner) block.
fn block(isa: Isa, x: &[f32], y: &mut [f32], len: usize, inner: usize, log: bool) {
    let mut m = vec![f32::NEG_INFINITY; inner];
    for k in 0..len {
        for (a, &v) in m.iter_mut().zip(&x[k * inner..(k + 1) * inner]) {
            *a = if v > *a { v } else { *a };
        }
    }
    let mut s = vec![0.0f32; inner];
    let mut d = vec![0.0f32; inner];
    for k in 0..len {
        let yr = &mut y[k * inner..(k + 1) * inner];
        for ((o, &v), &mv) in d.iter_mut().zip(&x[k * inner..(k + 1) * inner]).zip(&m) {
            *o = v - mv;
        }
        if log {
            yr.copy_from_slice(&d);
            let mut e = vec![0.0f32; inner];
            math::exp_slice(isa, &d, &mut e);
            for (a, v) in s.iter_mut().zip(&e) {
                *a += v;
            }
        } else {
            math::exp_slice(isa, &d, yr);
            for (a, v) in s.iter_mut().zip(yr.iter()) {
                *a += v;
            }
        }
    }
    if log {
        for a in s.iter_mut() {
            *a = a.ln();
        }
        for k in 0..len {
            for (o, l) in y[k * inner..(k + 1) * inner].iter_mut().zip(&s) {
                *o -= l;
            }
        }
    } else {
        for a in s.iter_mut() {
            *a = 1.0 / *a;
        }
        for k in 0..len {
            for (o, r) in y[k * inner..(k + 1) * inner].iter_mut().zip(&s) {
                *o *= r;
            }
        }
    }
}

impl Kernel for SoftmaxKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let y = output(outputs, 0, x.len())?;
        let blk = self.len * self.inner;
        if blk == 0 {
            return Ok(());
        }
        split::for_chunks(y, blk, 8, |s, c| {
            for (i, yb) in c.chunks_exact_mut(blk).enumerate() {
                let xb = &x[s + i * blk..s + (i + 1) * blk];
                if self.inner == 1 {
                    row(self.isa, xb, yb, self.log);
                } else {
                    block(self.isa, xb, yb, self.len, self.inner, self.log);
                }
            }
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.softmax"
    }
}
