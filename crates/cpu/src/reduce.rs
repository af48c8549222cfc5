//! f32 ReduceSum / ReduceMean / ReduceMax / ReduceMin / ReduceSumSquare / ReduceL2 over one
//! contiguous block of axes (outer x reduced x inner), with eight-lane accumulators.

use crate::backend::Registry;
use crate::kernel_io::{f32_shape, input, output};
use crate::split;
use ferrolite_core::op::normalize_axes;
use ferrolite_core::ops::nn::reduce::{Reduce, ReduceKind};
use ferrolite_core::plan::{Kernel, KernelRequest};
use ferrolite_core::registry::{needs, DTypes, Layout};
use ferrolite_core::{DType, OpResult, Tensor};

/// Sum of a slice: eight f32 partial sums per block of 1024, blocks added in f64.
pub(crate) fn sum(v: &[f32]) -> f32 {
    if v.len() <= 1024 {
        return sum8(v);
    }
    v.chunks(1024).map(|c| sum8(c) as f64).sum::<f64>() as f32
}

fn sum8(v: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut it = v.chunks_exact(8);
    for c in &mut it {
        for (a, x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    let tail: f32 = it.remainder().iter().sum();
    acc.iter().sum::<f32>() + tail
}

/// Sum of squares of `v - m` (blocked like [`sum`]).
pub(crate) fn sum_sq_dev(v: &[f32], m: f32) -> f32 {
    if v.len() <= 1024 {
        return sum_sq_dev8(v, m);
    }
    v.chunks(1024)
        .map(|c| sum_sq_dev8(c, m) as f64)
        .sum::<f64>() as f32
}

fn sum_sq_dev8(v: &[f32], m: f32) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut it = v.chunks_exact(8);
    for c in &mut it {
        for (a, x) in acc.iter_mut().zip(c) {
            let d = x - m;
            *a += d * d;
        }
    }
    let tail: f32 = it.remainder().iter().map(|x| (x - m) * (x - m)).sum();
    acc.iter().sum::<f32>() + tail
}

/// Maximum ignoring NaN (like f64::max); -inf for an empty slice.
pub(crate) fn max(v: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let mut it = v.chunks_exact(8);
    for c in &mut it {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = if x > *a { x } else { *a };
        }
    }
    let m = it
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    acc.iter().fold(m, |m, &x| m.max(x))
}

fn min(v: &[f32]) -> f32 {
    let mut acc = [f32::INFINITY; 8];
    let mut it = v.chunks_exact(8);
    for c in &mut it {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = if x < *a { x } else { *a };
        }
    }
    let m = it.remainder().iter().fold(f32::INFINITY, |m, &x| m.min(x));
    acc.iter().fold(m, |m, &x| m.min(x))
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<Reduce>(
        "cpu.reduce",
        "Reduce",
        10,
        DTypes::OutputsF32,
        Layout::PLAIN,
        |op, r| {
            let fold = Fold::of(op.kind)?;
            let k = reduce(op, fold, r.req, f32_shape(r.req, 0)?);
            needs(k, "constant i64 axes, contiguous after normalisation")
        },
    );
}

/// The reductions with an f32 loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fold {
    Sum,
    Mean,
    Max,
    Min,
    SumSquare,
    L2,
}

impl Fold {
    pub(crate) fn of(kind: ReduceKind) -> Result<Fold, String> {
        use ReduceKind::*;
        Ok(match kind {
            Sum => Fold::Sum,
            Mean => Fold::Mean,
            Max => Fold::Max,
            Min => Fold::Min,
            SumSquare => Fold::SumSquare,
            L2 => Fold::L2,
            L1 | LogSum | LogSumExp | Prod => return Err(format!("no f32 loop for {kind:?}")),
        })
    }
}

fn reduce(r: &Reduce, kind: Fold, req: &KernelRequest, x: &[usize]) -> Option<Box<dyn Kernel>> {
    let axes: Vec<i64> = match req.inputs.get(1).and_then(|a| a.as_ref()) {
        Some(a) => {
            let t = a.value?;
            if t.dtype() != DType::I64 {
                return None;
            }
            t.as_slice::<i64>().ok()?.to_vec()
        }
        None => r.axes.clone().unwrap_or_default(),
    };
    let mut axes = if axes.is_empty() {
        if r.noop_with_empty_axes {
            return None;
        }
        (0..x.len()).collect()
    } else {
        normalize_axes(&axes, x.len()).ok()?
    };
    axes.sort_unstable();
    axes.dedup();
    let (first, last) = match (axes.first(), axes.last()) {
        (Some(&f), Some(&l)) => (f, l),
        // A scalar input: reducing nothing.
        _ => (0, 0),
    };
    if !axes.is_empty() && last - first + 1 != axes.len() {
        return None;
    }
    let outer: usize = x[..first.min(x.len())].iter().product();
    let red: usize = if axes.is_empty() {
        1
    } else {
        x[first..=last].iter().product()
    };
    let inner: usize = if axes.is_empty() {
        1
    } else {
        x[last + 1..].iter().product()
    };
    Some(Box::new(ReduceKernel {
        kind,
        x: x.to_vec(),
        outer,
        red,
        inner,
    }))
}

#[derive(Debug)]
struct ReduceKernel {
    kind: Fold,
    x: Vec<usize>,
    outer: usize,
    red: usize,
    inner: usize,
}

impl ReduceKernel {
    fn finish(&self, v: f32) -> f32 {
        match self.kind {
            Fold::Mean => (v as f64 / self.red as f64) as f32,
            Fold::L2 => v.sqrt(),
            Fold::Sum | Fold::Max | Fold::Min | Fold::SumSquare => v,
        }
    }
}

impl Kernel for ReduceKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let (red, inner) = (self.red, self.inner);
        let y = output(outputs, 0, self.outer * inner)?;
        let kind = self.kind;
        split::for_chunks(y, 1, red, |s, c| {
            if inner == 1 {
                for (i, o) in c.iter_mut().enumerate() {
                    let v = &x[(s + i) * red..(s + i + 1) * red];
                    let r = match kind {
                        Fold::Max => max(v),
                        Fold::Min => min(v),
                        Fold::SumSquare | Fold::L2 => sum_sq_dev(v, 0.0),
                        Fold::Sum | Fold::Mean => sum(v),
                    };
                    *o = self.finish(r);
                }
                return;
            }
            // Column reduction: accumulate whole rows of the inner block.
            let mut pos = s;
            let end = s + c.len();
            while pos < end {
                let (o, i0) = (pos / inner, pos % inner);
                let len = (inner - i0).min(end - pos);
                let acc = &mut c[pos - s..pos - s + len];
                acc.fill(match kind {
                    Fold::Max => f32::NEG_INFINITY,
                    Fold::Min => f32::INFINITY,
                    Fold::Sum | Fold::Mean | Fold::SumSquare | Fold::L2 => 0.0,
                });
                for k in 0..red {
                    let base = (o * red + k) * inner + i0;
                    let xs = &x[base..base + len];
                    match kind {
                        Fold::Max => {
                            for (a, &v) in acc.iter_mut().zip(xs) {
                                *a = if v > *a { v } else { *a };
                            }
                        }
                        Fold::Min => {
                            for (a, &v) in acc.iter_mut().zip(xs) {
                                *a = if v < *a { v } else { *a };
                            }
                        }
                        Fold::SumSquare | Fold::L2 => {
                            for (a, &v) in acc.iter_mut().zip(xs) {
                                *a += v * v;
                            }
                        }
                        Fold::Sum | Fold::Mean => {
                            for (a, &v) in acc.iter_mut().zip(xs) {
                                *a += v;
                            }
                        }
                    }
                }
                for a in acc.iter_mut() {
                    *a = self.finish(*a);
                }
                pos += len;
            }
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.reduce"
    }
}
