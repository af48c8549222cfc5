//! QLinearAdd and QLinearMul computed per element from per-tensor scales, on the ISA's loops.

use super::*;

/// QLinearAdd on x86 with FMA, on operands of one shape or with one a single value: the
/// reference's own f32 arithmetic (onnxruntime's: `x * rx + (y * ry + fixed)` as fused
/// multiply-adds, zero points folded into `fixed`), sixteen or eight lanes at a time, so it
/// rounds every element as the reference does, without the table's cache misses.
#[derive(Debug)]
pub(super) struct QAddKernel {
    /// The ISA's loop.
    pub(super) add: AddFn,
    pub(super) signed: bool,
    /// Scale ratios to the output's, of A and B.
    pub(super) ratios: (f32, f32),
    /// `C_zero - (rA * A_zero + rB * B_zero)`, as the reference folds it.
    pub(super) fixed: f32,
    /// Elementwise, or one operand a single value.
    pub(super) pairing: Pairing,
    pub(super) out_len: usize,
}

/// The (scale, zero point) of A, B and C of a QLinear binary op whose operands and output
/// share one 8-bit type and whose pairs are per tensor, as the SIMD kernels need.
pub(super) fn per_tensor_operands(r: &KernelRequest) -> Result<[QParams; 3], String> {
    let (da, db) = (eight_bit(r, 0)?, eight_bit(r, 3)?);
    let dc = r.outputs.first().ok_or("needs an output")?.dtype;
    if da != db || dc != da {
        return Err("needs operands and output of one 8-bit type".into());
    }
    let qa = qparams(r, da, 1, 2, 1)?;
    let qb = qparams(r, db, 4, 5, 1)?;
    let qc = qparams(r, dc, 6, 7, 1)?;
    if [&qa, &qb, &qc]
        .iter()
        .any(|q| q.scale.len() != 1 || q.zero.len() != 1)
    {
        return Err("needs per-tensor scales and zero points".into());
    }
    Ok([qa, qb, qc])
}

pub(super) fn qadd_kernel(r: &KernelRequest, isa: Isa) -> Result<QAddKernel, String> {
    let add = isa
        .table()
        .qlinear
        .add
        .ok_or("needs x86 with AVX2 and FMA")?;
    let [qa, qb, qc] = per_tensor_operands(r)?;
    let (pairing, out_len) = pairing(r, false)?;
    let (ra, rb) = (qa.scale[0] / qc.scale[0], qb.scale[0] / qc.scale[0]);
    // The reference folds the zero points of the operand it reads element by element (x)
    // and the other (y) as `zc - (rx * zx + ry * zy)`, the first product fused.
    let ((rx, zx), (ry, zy)) = match pairing {
        Pairing::Scalar { a_scalar: true } => ((rb, qb.zero[0]), (ra, qa.zero[0])),
        _ => ((ra, qa.zero[0]), (rb, qb.zero[0])),
    };
    let fixed = qc.zero[0] as f32 - rx.mul_add(zx as f32, ry * zy as f32);
    Ok(QAddKernel {
        add,
        signed: qa.signed,
        ratios: (ra, rb),
        fixed,
        pairing,
        out_len,
    })
}

impl Kernel for QAddKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let a = required(inputs, 0)?.bytes();
        let b = required(inputs, 3)?.bytes();
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        op_ensure!(
            y.byte_len() == self.out_len,
            "output size differs from the plan"
        );
        let (ra, rb) = self.ratios;
        let (lo, hi) = if self.signed { (-128, 127) } else { (0, 255) };
        // x: read element by element; y: the other operand, or a constant (`y` None).
        let (x, rx, other) = match self.pairing {
            Pairing::Scalar { a_scalar: false } => (a, ra, None),
            Pairing::Scalar { a_scalar: true } => (b, rb, None),
            _ => (a, ra, Some((b, rb))),
        };
        let single = matches!(self.pairing, Pairing::Scalar { .. });
        op_ensure!(
            x.len() == self.out_len
                && other.is_none_or(|(o, _)| o.len() == self.out_len)
                && (!single || a.len().min(b.len()) == 1),
            "input sizes differ from the plan"
        );
        let constant = match self.pairing {
            // As the reference: `fixed + y * ry`, the product rounded first.
            Pairing::Scalar { a_scalar: false } => self.fixed + self.value(b[0]) * rb,
            Pairing::Scalar { a_scalar: true } => self.fixed + self.value(a[0]) * ra,
            _ => self.fixed,
        };
        let args = AddArgs {
            signed: self.signed,
            rx,
            constant,
            lo,
            hi,
        };
        split::for_chunks(y.bytes_mut(), 64, 2, |s, out| {
            let r = s..s + out.len();
            let y = other.map(|(o, ry)| (&o[r.clone()], ry));
            (self.add)(&args, &x[r], y, out);
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qadd.simd"
    }
}

impl QAddKernel {
    fn value(&self, b: u8) -> f32 {
        if self.signed {
            b as i8 as f32
        } else {
            b as f32
        }
    }
}

/// QLinearMul on AVX-512 over operands of one shape or one per channel: the reference's own
/// arithmetic (`(a - za) (b - zb)` exact in i32, times the scale ratio, plus C's zero point,
/// rounded half to even) sixteen lanes at a time. The 64 KiB table it replaces missed L1 on
/// most lookups (mobilenet_v3_small_qop's 28 multiplies were a third of its run).
#[derive(Debug)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct QMulKernel {
    /// The ISA's loop.
    pub(super) mul: MulFn,
    pub(super) signed: bool,
    /// A's and B's zero points.
    pub(super) zero: (i32, i32),
    /// `A_scale * B_scale / C_scale`, as the reference computes it.
    pub(super) ratio: f32,
    pub(super) c_zero: f32,
    pub(super) pairing: Pairing,
    pub(super) out_len: usize,
}

pub(super) fn qmul_kernel(r: &KernelRequest, isa: Isa) -> Result<QMulKernel, String> {
    let mul = isa.table().qlinear.mul.ok_or("needs AVX-512")?;
    let [qa, qb, qc] = per_tensor_operands(r)?;
    let (pairing, out_len) = pairing(r, true)?;
    if matches!(pairing, Pairing::Scalar { .. }) {
        return Err("a single-value operand reads one row of the table".into());
    }
    Ok(QMulKernel {
        mul,
        signed: qa.signed,
        zero: (qa.zero[0], qb.zero[0]),
        ratio: qa.scale[0] * qb.scale[0] / qc.scale[0],
        c_zero: qc.zero[0] as f32,
        pairing,
        out_len,
    })
}

impl Kernel for QMulKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let n = self.out_len;
        let (a, b, y) = binary_operands(inputs, outputs, n)?;
        let (za, zb) = self.zero;
        // `full` is read element by element, `part` one value per plane of `plane` elements
        // (or element by element too, with planes of one).
        let (full, zf, part, zp, plane) = match self.pairing {
            Pairing::PerPlane {
                plane,
                a_per_plane: true,
            } => (b, zb, a, za, plane),
            Pairing::PerPlane { plane, .. } => (a, za, b, zb, plane),
            _ => (a, za, b, zb, 1),
        };
        let plane = plane.max(1);
        op_ensure!(
            full.len() == n && part.len() * plane == n,
            "input sizes differ from the plan"
        );
        // Whole planes per task.
        let task = |first: usize, out: &mut [u8]| {
            let x = &full[first..first + out.len()];
            (self.mul)(self, (x, zf), (&part[first / plane..], zp), plane, out)
        };
        split::for_chunks(y, plane, 2, task);
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qmul.simd"
    }
}

/// One chunk's constants, for the ISA's [`AddFn`]: `out = clamp(round(x * rx + (y * ry +
/// constant)))`, or `x * rx + constant` without `y`.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct AddArgs {
    pub(super) signed: bool,
    pub(super) rx: f32,
    /// `fixed`, plus `y * ry` when y is a single value.
    pub(super) constant: f32,
    pub(super) lo: i32,
    pub(super) hi: i32,
}
