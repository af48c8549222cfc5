//! f32 elementwise kernels: broadcasting binary ops (Add, Sub, Mul, Div, Pow, PRelu, two-input
//! Max/Min/Sum/Mean), unary math and activations, and Clip.
//!
//! Binary broadcasting collapses the output into outer rows and one contiguous inner run, in
//! which each operand is either a vector or a scalar; the inner loops are plain slice zips that
//! autovectorise.

use crate::backend::{Built, Registry, Req};
use crate::isa::Isa;
use crate::kernel_io::{f32_shape, in_place_steps, input, output, IN_PLACE_STEP};
use crate::math;
use crate::split;
use ferrolite_core::ops::elementwise::binary::{Binary, BinaryKind};
use ferrolite_core::ops::elementwise::clip::Clip;
use ferrolite_core::ops::elementwise::unary::{Unary, UnaryKind};
use ferrolite_core::ops::elementwise::variadic::{Variadic, VariadicKind};
use ferrolite_core::ops::util::broadcast_shapes;
use ferrolite_core::plan::Kernel;
use ferrolite_core::registry::{needs, DTypes, Layout};
use ferrolite_core::{op_ensure, OpResult, Tensor};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;

/// The element-wise family's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    /// One contiguous row of a binary op.
    pub(crate) binary_row: fn(BinOp, Src, Src, &mut [f32]),
    /// A unary op over a slice (`y[i] = f(x[i])`).
    pub(crate) unary: fn(UnaryKind, &[f32], &mut [f32]),
    /// Clip over a slice.
    pub(crate) clip: fn(f32, f32, &[f32], &mut [f32]),
}

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    binary_row: run_row_impl,
    unary: |kind, x, y| apply_unary_impl(Isa::Portable, kind, x, y),
    clip: clip_impl,
};

pub(crate) fn register(r: &mut Registry) {
    r.add::<Binary>(
        "cpu.binary",
        "Binary",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        binary,
    );
    r.add::<Variadic>(
        "cpu.binary",
        "Variadic",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        variadic,
    );
    r.add::<Unary>(
        "cpu.unary",
        "Unary",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |u, r| {
            let work = unary_work(u.kind)?;
            let shape = f32_shape(r.req, 0)?.to_vec();
            Ok(Box::new(UnaryKernel {
                isa: r.cx.isa,
                kind: u.kind,
                work,
                shape,
            }))
        },
    );
    r.add::<Clip>(
        "cpu.clip",
        "Clip",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |c, r| {
            let shape = f32_shape(r.req, 0)?.to_vec();
            Ok(Box::new(ClipKernel {
                isa: r.cx.isa,
                shape,
                min: c.min,
                max: c.max,
            }))
        },
    );
}

fn binary(b: &Binary, r: &Req) -> Built {
    if b.legacy_axis.is_some() {
        return Err("needs numpy-style broadcasting (not a legacy axis)".into());
    }
    binary_kernel(binary_op(b.kind)?, r)
}

/// The f32 loop of a binary kind, if it has one.
pub(crate) fn binary_op(kind: BinaryKind) -> Result<BinOp, String> {
    use BinaryKind::*;
    Ok(match kind {
        Add => BinOp::Add,
        Sub => BinOp::Sub,
        Mul => BinOp::Mul,
        Div => BinOp::Div,
        Pow => BinOp::Pow,
        PRelu => BinOp::PRelu,
        Mod { .. } | BitShiftLeft | BitShiftRight | BitwiseAnd | BitwiseOr | BitwiseXor => {
            return Err(format!("no f32 loop for {kind:?}"))
        }
    })
}

fn variadic(v: &Variadic, r: &Req) -> Built {
    if r.req.inputs.len() != 2 {
        return Err("needs two inputs".into());
    }
    let op = match v.kind {
        VariadicKind::Max => BinOp::Max,
        VariadicKind::Min => BinOp::Min,
        VariadicKind::Sum => BinOp::Add,
        VariadicKind::Mean => BinOp::Mean,
    };
    binary_kernel(op, r)
}

fn binary_kernel(op: BinOp, r: &Req) -> Built {
    let (a, b) = (f32_shape(r.req, 0)?, f32_shape(r.req, 1)?);
    let k = BinaryKernel::new(r.cx.isa, op, a, b);
    needs(
        k,
        "shapes that broadcast (PRelu: a slope that broadcasts to X)",
    )
    .map(|k| Box::new(k) as Box<dyn Kernel>)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    PRelu,
    Max,
    Min,
    Mean,
}

/// NaN-propagating maximum, as the reference's `nan_max`.
#[inline(always)]
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() {
        a
    } else if b.is_nan() || b > a {
        b
    } else {
        a
    }
}

#[inline(always)]
fn nan_min(a: f32, b: f32) -> f32 {
    if a.is_nan() {
        a
    } else if b.is_nan() || b < a {
        b
    } else {
        a
    }
}

#[inline(always)]
fn pow_f32(a: f32, b: f32) -> f32 {
    (a as f64).powf(b as f64) as f32
}

/// One operand of an inner run.
#[derive(Clone, Copy)]
pub(crate) enum Src<'a> {
    V(&'a [f32]),
    S(f32),
    /// A short vector repeated, starting at a phase.
    P(&'a [f32], usize),
}

#[inline(always)]
fn run_with<F: Fn(f32, f32) -> f32>(f: F, a: Src, b: Src, o: &mut [f32]) {
    match (a, b) {
        (Src::V(a), Src::V(b)) => {
            for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                *o = f(x, y);
            }
        }
        (Src::V(a), Src::S(y)) => {
            for (o, &x) in o.iter_mut().zip(a) {
                *o = f(x, y);
            }
        }
        (Src::S(x), Src::V(b)) => {
            for (o, &y) in o.iter_mut().zip(b) {
                *o = f(x, y);
            }
        }
        (Src::S(x), Src::S(y)) => o.fill(f(x, y)),
        (Src::V(a), Src::P(p, phase)) => periodic(&f, a, p, phase, o),
        (Src::P(p, phase), Src::V(b)) => periodic(|y, x| f(x, y), b, p, phase, o),
        // Never built: a periodic operand always pairs with a vector.
        (Src::P(..), _) | (_, Src::P(..)) => unreachable!("periodic operand without a vector"),
    }
}

/// `o[i] = f(v[i], p[(phase + i) % p.len()])`: the period's values lined up with whole runs.
#[inline(always)]
fn periodic<F: Fn(f32, f32) -> f32>(f: F, v: &[f32], p: &[f32], phase: usize, o: &mut [f32]) {
    let n = o.len().min(v.len());
    let head = (p.len() - phase).min(n);
    for ((o, &x), &y) in o[..head].iter_mut().zip(&v[..head]).zip(&p[phase..]) {
        *o = f(x, y);
    }
    if let Ok(p8) = <&[f32; 8]>::try_from(p) {
        // The blocked layout's period: fixed-size runs vectorise to one register.
        let (o, v) = (&mut o[head..n], &v[head..n]);
        let mut oc = o.chunks_exact_mut(8);
        let mut vc = v.chunks_exact(8);
        for (o, v) in (&mut oc).zip(&mut vc) {
            for j in 0..8 {
                o[j] = f(v[j], p8[j]);
            }
        }
        for ((o, &x), &y) in oc.into_remainder().iter_mut().zip(vc.remainder()).zip(p8) {
            *o = f(x, y);
        }
        return;
    }
    for (o, v) in o[head..n]
        .chunks_mut(p.len())
        .zip(v[head..n].chunks(p.len()))
    {
        for ((o, &x), &y) in o.iter_mut().zip(v).zip(p) {
            *o = f(x, y);
        }
    }
}

fn run_row(isa: Isa, op: BinOp, a: Src, b: Src, o: &mut [f32]) {
    (isa.table().elementwise.binary_row)(op, a, b, o)
}

#[inline(always)]
fn run_row_impl(op: BinOp, a: Src, b: Src, o: &mut [f32]) {
    match op {
        BinOp::Add => run_with(|x, y| x + y, a, b, o),
        BinOp::Sub => run_with(|x, y| x - y, a, b, o),
        BinOp::Mul => run_with(|x, y| x * y, a, b, o),
        BinOp::Div => run_with(|x, y| x / y, a, b, o),
        BinOp::Mean => run_with(|x, y| ((x as f64 + y as f64) / 2.0) as f32, a, b, o),
        BinOp::PRelu => run_with(|x, y| if x < 0.0 { x * y } else { x }, a, b, o),
        BinOp::Max => run_with(nan_max, a, b, o),
        BinOp::Min => run_with(nan_min, a, b, o),
        BinOp::Pow => match b {
            // Common constant exponents, exact like the reference (correctly rounded).
            Src::S(2.0) => run_with(|x, _| x * x, a, b, o),
            Src::S(1.0) => run_with(|x, _| x, a, b, o),
            Src::S(3.0) => run_with(
                |x, _| ((x as f64) * (x as f64) * (x as f64)) as f32,
                a,
                b,
                o,
            ),
            Src::S(0.5) => run_with(
                |x, _| {
                    if x == f32::NEG_INFINITY {
                        f32::INFINITY
                    } else {
                        x.sqrt() + 0.0
                    }
                },
                a,
                b,
                o,
            ),
            _ => run_with(pow_f32, a, b, o),
        },
    }
}

/// A broadcasting binary op on f32.
#[derive(Debug)]
pub(crate) struct BinaryKernel {
    isa: Isa,
    op: BinOp,
    a_shape: Vec<usize>,
    b_shape: Vec<usize>,
    numel: usize,
    /// Outer (collapsed) dims and each operand's stride along them (0 when broadcast).
    dims: Vec<usize>,
    sa: Vec<usize>,
    sb: Vec<usize>,
    /// Inner run length and whether each operand is a vector (1), scalar (0) or a short vector
    /// repeated along it (2, see `period`).
    inner: usize,
    ia: usize,
    ib: usize,
    /// Length of the repeated vector: an operand broadcast over a dim followed by a short
    /// full one (a blocked `[1, C/8, 1, 1, 8]` scale on `[1, C/8, H, W, 8]`) runs along the
    /// two as one inner run instead of runs of 8.
    period: usize,
}

/// Trailing dims at most this long merge with a broadcast dim before them (see `period`).
const MAX_PERIOD: usize = 16;

impl BinaryKernel {
    pub(crate) fn new(isa: Isa, op: BinOp, a: &[usize], b: &[usize]) -> Option<BinaryKernel> {
        let out = broadcast_shapes(a, b).ok()?;
        if op == BinOp::PRelu && out != a {
            return None;
        }
        let r = out.len();
        let pad = |s: &[usize]| {
            let mut p = vec![1usize; r - s.len()];
            p.extend_from_slice(s);
            p
        };
        let (pa, pb) = (pad(a), pad(b));
        let strides = |s: &[usize]| {
            let mut st = vec![1usize; r];
            for d in (0..r.saturating_sub(1)).rev() {
                st[d] = st[d + 1] * s[d + 1];
            }
            st
        };
        let (ta, tb) = (strides(&pa), strides(&pb));
        // Groups of consecutive non-unit output dims with the same broadcast pattern.
        let mut groups: Vec<(usize, bool, bool, usize, usize)> = Vec::new();
        for d in 0..r {
            if out[d] == 1 {
                continue;
            }
            let (fa, fb) = (pa[d] == out[d], pb[d] == out[d]);
            match groups.last_mut() {
                Some(g) if g.1 == fa && g.2 == fb => {
                    g.0 *= out[d];
                    g.3 = ta[d];
                    g.4 = tb[d];
                }
                _ => groups.push((out[d], fa, fb, ta[d], tb[d])),
            }
        }
        let (mut inner, mut ia, mut ib) = match groups.pop() {
            Some((n, fa, fb, _, _)) => (n, fa as usize, fb as usize),
            None => (1, 1, 1),
        };
        let mut period = 0;
        if let Some(&(n, fa, fb, _, _)) = groups.last() {
            if ia == 1 && ib == 1 && inner <= MAX_PERIOD && fa != fb {
                groups.pop();
                period = inner;
                inner *= n;
                (ia, ib) = if fa { (1, 2) } else { (2, 1) };
            }
        }
        let dims = groups.iter().map(|g| g.0).collect();
        let sa = groups.iter().map(|g| if g.1 { g.3 } else { 0 }).collect();
        let sb = groups.iter().map(|g| if g.2 { g.4 } else { 0 }).collect();
        Some(BinaryKernel {
            isa,
            op,
            a_shape: a.to_vec(),
            b_shape: b.to_vec(),
            numel: out.iter().product(),
            dims,
            sa,
            sb,
            inner,
            ia,
            ib,
            period,
        })
    }

    /// Offsets of outer row `r` in A and B.
    /// Whether A has the output's shape (so the output can take A's buffer).
    fn a_is_output_shape(&self) -> bool {
        self.a_shape.iter().product::<usize>() == self.numel
    }

    fn row_offsets(&self, mut r: usize) -> (usize, usize) {
        let (mut oa, mut ob) = (0, 0);
        for d in (0..self.dims.len()).rev() {
            let i = r % self.dims[d];
            r /= self.dims[d];
            oa += i * self.sa[d];
            ob += i * self.sb[d];
        }
        (oa, ob)
    }
}

/// Operand `v` from row offset `row` at column `c` of the inner run, `len` values: a vector,
/// a scalar, or (`kind` 2) the repeated `period` values from phase `c % period`.
fn src_of(
    v: &[f32],
    row: usize,
    c: usize,
    kind: usize,
    len: usize,
    period: usize,
) -> OpResult<Src<'_>> {
    let s = match kind {
        1 => v.get(row + c..row + c + len).map(Src::V),
        0 => v.get(row).map(|&x| Src::S(x)),
        _ => v.get(row..row + period).map(|p| Src::P(p, c % period)),
    };
    s.ok_or_else(|| ferrolite_core::OpError("broadcast offset out of range".into()))
}

impl Kernel for BinaryKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let b = input(inputs, 1, &self.b_shape)?;
        let y = output(outputs, 0, self.numel)?;
        if self.numel == 0 {
            return Ok(());
        }
        if inputs.first().copied().flatten().is_none() && self.a_is_output_shape() {
            // In place over A, which has the output's shape: A's element i is y[i].
            let inner = self.inner;
            let work = if self.op == BinOp::Pow { 8 } else { 1 };
            return split::try_for_chunks(y, IN_PLACE_STEP, work, |start, chunk| {
                let mut result = Ok(());
                in_place_steps(chunk, |off, src, dst| {
                    let (mut pos, end) = (start + off, start + off + dst.len());
                    while pos < end && result.is_ok() {
                        let (r, c) = (pos / inner, pos % inner);
                        let len = (inner - c).min(end - pos);
                        let (_, ob) = self.row_offsets(r);
                        let at = pos - start - off;
                        match src_of(b, ob, c, self.ib, len, self.period) {
                            Ok(sb) => run_row(
                                self.isa,
                                self.op,
                                Src::V(&src[at..at + len]),
                                sb,
                                &mut dst[at..at + len],
                            ),
                            Err(e) => result = Err(e),
                        }
                        pos += len;
                    }
                });
                result
            });
        }
        let a = input(inputs, 0, &self.a_shape)?;
        let inner = self.inner;
        let work = if self.op == BinOp::Pow { 8 } else { 1 };
        split::try_for_chunks(y, 1, work, |start, chunk| {
            let end = start + chunk.len();
            let mut pos = start;
            while pos < end {
                let (r, c) = (pos / inner, pos % inner);
                let len = (inner - c).min(end - pos);
                let (oa, ob) = self.row_offsets(r);
                let sa = src_of(a, oa, c, self.ia, len, self.period)?;
                let sb = src_of(b, ob, c, self.ib, len, self.period)?;
                run_row(
                    self.isa,
                    self.op,
                    sa,
                    sb,
                    &mut chunk[pos - start..pos - start + len],
                );
                pos += len;
            }
            Ok(())
        })
    }

    fn name(&self) -> &str {
        "cpu.binary"
    }

    fn in_place_input(&self) -> Option<usize> {
        self.a_is_output_shape().then_some(0)
    }
}

/// The cost per element of `kind`'s f32 loop (for the threading threshold), or why there is
/// none: those kinds run their reference in f64.
pub(crate) fn unary_work(kind: UnaryKind) -> Result<usize, String> {
    use UnaryKind::*;
    match kind {
        Relu
        | Neg
        | Abs
        | Sqrt
        | Reciprocal
        | Floor
        | Ceil
        | LeakyRelu { .. }
        | HardSigmoid { .. }
        | HardSwish
        | Clip { .. } => Ok(1),
        Exp | Erf | Tanh | Sigmoid | Gelu { .. } => Ok(8),
        Log
        | Round
        | Sign
        | Sin
        | Cos
        | Tan
        | Asin
        | Acos
        | Atan
        | Sinh
        | Cosh
        | Asinh
        | Acosh
        | Atanh
        | Softplus
        | Softsign
        | Elu { .. }
        | Selu { .. }
        | Celu { .. }
        | ThresholdedRelu { .. }
        | Mish
        | Shrink { .. } => Err(format!("no f32 loop for {}", kind.name())),
    }
}

#[inline(always)]
fn map<F: Fn(f32) -> f32>(f: F, x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = f(x);
    }
}

/// Applies `kind` to `x` into `y` (equal lengths).
pub(crate) fn apply_unary(isa: Isa, kind: UnaryKind, x: &[f32], y: &mut [f32]) {
    (isa.table().elementwise.unary)(kind, x, y)
}

#[inline(always)]
fn apply_unary_impl(isa: Isa, kind: UnaryKind, x: &[f32], y: &mut [f32]) {
    use UnaryKind::*;
    match kind {
        Relu => map(|v| if v < 0.0 { 0.0 } else { v }, x, y),
        Neg => map(|v| -v, x, y),
        Abs => map(f32::abs, x, y),
        Sqrt => map(f32::sqrt, x, y),
        Reciprocal => map(|v| 1.0 / v, x, y),
        Floor => map(f32::floor, x, y),
        Ceil => map(f32::ceil, x, y),
        // f32 products round like the reference's f64 ones (one rounding of an exact value).
        LeakyRelu { alpha: a } => map(|v| if v < 0.0 { a * v } else { v }, x, y),
        HardSigmoid { alpha: a, beta: b } => map(|v| (a * v + b).clamp(0.0, 1.0), x, y),
        HardSwish => map(|v| v * (v * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0), x, y),
        Clip { min, max } => clip_impl(min, max, x, y),
        Exp => math::exp_slice(isa, x, y),
        Erf => math::erf_slice(isa, x, y),
        Tanh => math::tanh_slice(isa, x, y),
        Sigmoid => math::sigmoid_slice(isa, x, y),
        Gelu { tanh: false } => math::gelu_slice(isa, x, y),
        Gelu { tanh: true } => math::gelu_tanh_slice(isa, x, y),
        // No kernel is built for these (`unary_work`); the f32 formula keeps this total.
        Log
        | Round
        | Sign
        | Sin
        | Cos
        | Tan
        | Asin
        | Acos
        | Atan
        | Sinh
        | Cosh
        | Asinh
        | Acosh
        | Atanh
        | Softplus
        | Softsign
        | Elu { .. }
        | Selu { .. }
        | Celu { .. }
        | ThresholdedRelu { .. }
        | Mish
        | Shrink { .. } => map(|v| kind.apply(v), x, y),
    }
}

#[derive(Debug)]
struct UnaryKernel {
    isa: Isa,
    kind: UnaryKind,
    work: usize,
    shape: Vec<usize>,
}

impl Kernel for UnaryKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let (isa, kind) = (self.isa, self.kind);
        if inputs.first().copied().flatten().is_none() {
            // In place: the output holds the input.
            let y = output(outputs, 0, self.shape.iter().product())?;
            split::for_chunks(y, IN_PLACE_STEP, self.work, |_, c| {
                in_place_steps(c, |_, src, dst| apply_unary(isa, kind, src, dst))
            });
            return Ok(());
        }
        let x = input(inputs, 0, &self.shape)?;
        let y = output(outputs, 0, x.len())?;
        split::for_chunks(y, 1, self.work, |s, c| {
            apply_unary(isa, kind, &x[s..s + c.len()], c)
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.unary"
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}

/// Same comparisons as the reference: NaN passes through.
#[inline(always)]
fn clip_impl(lo: f32, hi: f32, x: &[f32], y: &mut [f32]) {
    map(
        |v| {
            let v = if v < lo { lo } else { v };
            if v > hi {
                hi
            } else {
                v
            }
        },
        x,
        y,
    )
}

fn clip(isa: Isa, lo: f32, hi: f32, x: &[f32], y: &mut [f32]) {
    (isa.table().elementwise.clip)(lo, hi, x, y)
}

#[derive(Debug)]
struct ClipKernel {
    isa: Isa,
    shape: Vec<usize>,
    min: Option<f32>,
    max: Option<f32>,
}

fn bound(inputs: &[Option<&Tensor>], i: usize, attr: Option<f32>) -> OpResult<Option<f32>> {
    match inputs.get(i).copied().flatten() {
        Some(t) => {
            let v = t.as_slice::<f32>()?;
            op_ensure!(
                v.len() == 1,
                "input {i} must be a scalar, got shape {:?}",
                t.shape()
            );
            Ok(Some(v[0]))
        }
        None => Ok(attr),
    }
}

impl Kernel for ClipKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let lo = bound(inputs, 1, self.min)?.unwrap_or(f32::NEG_INFINITY);
        let hi = bound(inputs, 2, self.max)?.unwrap_or(f32::INFINITY);
        if inputs.first().copied().flatten().is_none() {
            // In place: the output holds the input.
            let y = output(outputs, 0, self.shape.iter().product())?;
            split::for_chunks(y, IN_PLACE_STEP, 1, |_, c| {
                in_place_steps(c, |_, src, dst| clip(self.isa, lo, hi, src, dst))
            });
            return Ok(());
        }
        let x = input(inputs, 0, &self.shape)?;
        let y = output(outputs, 0, x.len())?;
        split::for_chunks(y, 1, 1, |s, c| {
            clip(self.isa, lo, hi, &x[s..s + c.len()], c)
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.clip"
    }

    fn in_place_input(&self) -> Option<usize> {
        Some(0)
    }
}
