//! The com.microsoft QLinear element-wise ops, concat and global average pooling on 8-bit
//! tensors.
//!
//! An 8-bit operand has 256 values, so an op whose output element depends on one input
//! element (QLinearSigmoid, QLinearLeakyRelu, each input of QLinearConcat) is a 256-entry
//! table, and one that depends on two (QLinearAdd, QLinearMul) a 65536-entry one. The tables
//! are filled at prerun by the op's own reference implementation over every value, so the
//! kernels are exactly the reference, rounding included, at a table lookup per element.

use crate::backend::{constant, Registry};
use crate::qparams::{qparams, QParams};
use crate::split::{self, Cost};
use crate::Isa;
use ferrolite_core::op::required;
use ferrolite_core::ops::elementwise::binary::BinaryKind;
use ferrolite_core::ops::quant::{
    QLinearAdd, QLinearChannelLookup, QLinearConcat, QLinearGlobalAveragePool, QLinearLeakyRelu,
    QLinearLookup, QLinearMul, QLinearSigmoid, QdqBinary,
};
use ferrolite_core::plan::{Kernel, KernelRequest};
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::{op_ensure, DType, Op, OpError, OpResult, Tensor};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

/// `y[i] = table[x[i]]`.
pub(crate) type LookupFn = fn(&[u8; 256], &[u8], &mut [u8]);
/// QdqBinary's run: see [`qdq_combine_impl`].
pub(crate) type CombineFn =
    fn(BinaryKind, Run<'_>, Dequantized, Run<'_>, Dequantized, Requantized, &mut [u8]);
/// QLinearAdd's chunk: `x`, then `y` with its ratio (or none), into `out`, all of one length.
pub(crate) type AddFn = fn(&AddArgs, &[u8], Option<(&[u8], f32)>, &mut [u8]);
/// QLinearMul's chunk: `(x, zx)`, `(y, zy)` with a `y` value per plane of `plane` elements
/// (element by element with planes of one), into `out` (`x`'s length).
pub(crate) type MulFn = fn(&QMulKernel, (&[u8], i32), (&[u8], i32), usize, &mut [u8]);

/// The QLinear family's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    pub(crate) lookup: LookupFn,
    pub(crate) qdq_combine: CombineFn,
    /// None where the ISA has no QLinearAdd kernel (its 256x256 table runs instead).
    pub(crate) add: Option<AddFn>,
    /// None where the ISA has no QLinearMul kernel.
    pub(crate) mul: Option<MulFn>,
}

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    lookup: |t, x, y| y.iter_mut().zip(x).for_each(|(y, &x)| *y = t[x as usize]),
    qdq_combine: qdq_combine_impl,
    add: None,
    mul: None,
};

/// Every value of an 8-bit type, in byte order.
fn all_values(dtype: DType, repeat: usize) -> Result<Tensor, String> {
    let bytes: Vec<u8> = (0..256 * repeat).map(|i| (i / repeat) as u8).collect();
    Tensor::from_bytes(dtype, &[bytes.len()], &bytes).map_err(|e| e.to_string())
}

fn eight_bit(r: &KernelRequest, i: usize) -> Result<DType, String> {
    match r.inputs.get(i).and_then(|v| v.as_ref()).map(|v| v.dtype) {
        Some(d @ (DType::U8 | DType::I8)) => Ok(d),
        _ => Err(format!("needs an 8-bit input {i}")),
    }
}

/// The constant inputs of `r` other than the data inputs `data`, or why not.
fn constants<'a>(r: &KernelRequest<'a>, data: &[usize]) -> Result<Vec<Option<&'a Tensor>>, String> {
    (0..r.inputs.len())
        .map(|i| match &r.inputs[i] {
            None => Ok(None),
            Some(_) if data.contains(&i) => Ok(None),
            Some(_) => constant(r, i)
                .map(Some)
                .ok_or_else(|| format!("needs a constant input {i}")),
        })
        .collect()
}

/// The op's outputs for inputs where the data slots hold `values` and the rest are `consts`.
fn evaluate(
    op: &dyn Op,
    consts: &[Option<&Tensor>],
    values: &[(usize, &Tensor)],
) -> Result<Vec<u8>, String> {
    let mut args = consts.to_vec();
    for (slot, t) in values {
        args[*slot] = Some(t);
    }
    let out = op.eval(&args).map_err(|e| e.to_string())?;
    Ok(out.first().ok_or("no output")?.bytes().to_vec())
}

/// One-input ops as a 256-entry table.
#[derive(Debug)]
struct UnaryTable {
    table: Vec<u8>,
    /// The ISA's lookup loop.
    lookup: LookupFn,
    name: &'static str,
}

fn unary_table(
    op: &dyn Op,
    r: &KernelRequest,
    isa: Isa,
    name: &'static str,
) -> Result<UnaryTable, String> {
    let d = eight_bit(r, 0)?;
    let consts = constants(r, &[0])?;
    let table = evaluate(op, &consts, &[(0, &all_values(d, 1)?)])?;
    if table.len() != 256 {
        return Err(format!("table of {} entries, not 256", table.len()));
    }
    let lookup = isa.table().qlinear.lookup;
    Ok(UnaryTable {
        table,
        lookup,
        name,
    })
}

impl Kernel for UnaryTable {
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
        op_ensure!(
            y.byte_len() == x.len(),
            "output size differs from the input's"
        );
        let t: &[u8; 256] = self.table[..]
            .try_into()
            .map_err(|_| OpError("lookup table is not 256 entries".into()))?;
        let one = |(x, y): (&[u8], &mut [u8])| (self.lookup)(t, x, y);
        let y = y.bytes_mut();
        split::for_chunks(y, 64, 1, |s, out| one((&x[s..s + out.len()], out)));
        Ok(())
    }

    fn name(&self) -> &str {
        self.name
    }

    fn prepacked_bytes(&self) -> usize {
        self.table.len()
    }
}

/// QLinearChannelLookup: each plane `[n, c]` through channel `c`'s table, with the VBMI
/// lookup where the CPU has it.
#[derive(Debug)]
struct ChannelTables {
    tables: Vec<u8>,
    /// Input shape (the plan's): planes of `inner` values, `channels` a batch item.
    x: Vec<usize>,
    /// The ISA's lookup loop.
    lookup: LookupFn,
}

fn channel_tables(
    op: &QLinearChannelLookup,
    r: &KernelRequest,
    isa: Isa,
) -> Result<ChannelTables, String> {
    eight_bit(r, 0)?;
    let x = r.inputs[0].as_ref().ok_or("needs an input")?;
    if x.shape.len() < 2 || x.shape[1] * 256 != op.tables.len() {
        return Err("needs an input with a channel (axis 1) per table".into());
    }
    let lookup = isa.table().qlinear.lookup;
    Ok(ChannelTables {
        tables: op.tables.clone(),
        x: x.shape.to_vec(),
        lookup,
    })
}

impl Kernel for ChannelTables {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = crate::kernel_io::input_bytes(inputs, 0, &self.x)?;
        let y = crate::kernel_io::output_bytes(outputs, 0, x.len())?;
        let channels = self.x[1];
        let inner: usize = self.x[2..].iter().product();
        if inner == 0 {
            return Ok(());
        }
        let plane = |(p, (x, y)): (usize, (&[u8], &mut [u8]))| {
            let c = p % channels;
            let t: &[u8; 256] = self.tables[c * 256..(c + 1) * 256]
                .try_into()
                .expect("256 entries a channel (checked at build)");
            (self.lookup)(t, x, y)
        };
        let workers = split::worth(Cost::elementwise(y.len(), 1, 1));
        split::for_rows(y, inner, workers, |p, y| {
            plane((p, (&x[p * inner..][..y.len()], y)))
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qchannel_lookup"
    }

    fn prepacked_bytes(&self) -> usize {
        self.tables.len()
    }
}

/// A two-operand kernel's operands (inputs 0 and 3) and output bytes, the output checked
/// against the plan's `out_len`.
fn binary_operands<'a, 'o>(
    inputs: &[Option<&'a Tensor>],
    outputs: &'o mut [Tensor],
    out_len: usize,
) -> OpResult<(&'a [u8], &'a [u8], &'o mut [u8])> {
    let a = required(inputs, 0)?.bytes();
    let b = required(inputs, 3)?.bytes();
    let y = outputs
        .first_mut()
        .ok_or_else(|| OpError("no output".into()))?;
    op_ensure!(y.byte_len() == out_len, "output size differs from the plan");
    Ok((a, b, y.bytes_mut()))
}

/// How the second operand of a two-input table op lines up with the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pairing {
    /// Same shapes.
    Elementwise,
    /// `[N, C, D...]` with `[N, C, 1...]` (B per plane), or A per plane when `a_per_plane`.
    PerPlane { plane: usize, a_per_plane: bool },
    /// One operand is a single value (a constant scale, say), A's when `a_scalar`.
    Scalar { a_scalar: bool },
}

/// QLinearAdd and QLinearMul on operands of one shape, or with one operand a single value,
/// and QLinearMul with one operand per channel, as a 65536-entry table indexed by `a * 256 +
/// b`.
#[derive(Debug)]
struct BinaryTable {
    table: Vec<u8>,
    pairing: Pairing,
    out_len: usize,
    name: &'static str,
}

/// How the two operands (inputs 0 and 3) of a QLinear binary op line up, and the output's
/// length; one operand per channel only when `per_plane_ok`.
fn pairing(r: &KernelRequest, per_plane_ok: bool) -> Result<(Pairing, usize), String> {
    let shape = |i: usize| r.inputs[i].as_ref().map(|v| v.shape).unwrap_or(&[]);
    let (sa, sb) = (shape(0), shape(3));
    let out_len: usize = r
        .outputs
        .first()
        .ok_or("needs an output")?
        .shape
        .iter()
        .product();
    let per_plane = |full: &[usize], part: &[usize]| {
        full.len() >= 3
            && part.len() == full.len()
            && part[..2] == full[..2]
            && part[2..].iter().all(|&d| d == 1)
    };
    let pairing = if sa == sb {
        Pairing::Elementwise
    } else if per_plane_ok && per_plane(sa, sb) {
        Pairing::PerPlane {
            plane: sa[2..].iter().product(),
            a_per_plane: false,
        }
    } else if per_plane_ok && per_plane(sb, sa) {
        Pairing::PerPlane {
            plane: sb[2..].iter().product(),
            a_per_plane: true,
        }
    } else if sb.iter().product::<usize>() == 1 && sa.iter().product::<usize>() == out_len {
        Pairing::Scalar { a_scalar: false }
    } else if sa.iter().product::<usize>() == 1 && sb.iter().product::<usize>() == out_len {
        Pairing::Scalar { a_scalar: true }
    } else {
        return Err(
            "needs operands of one shape, one a single value, or (for QLinearMul) one per channel"
                .into(),
        );
    };
    Ok((pairing, out_len))
}

fn binary_table(
    op: &dyn Op,
    r: &KernelRequest,
    per_plane_ok: bool,
    name: &'static str,
) -> Result<BinaryTable, String> {
    let (da, db) = (eight_bit(r, 0)?, eight_bit(r, 3)?);
    let (pairing, out_len) = pairing(r, per_plane_ok)?;
    let consts = constants(r, &[0, 3])?;
    // a runs slowly, b fast: element a * 256 + b.
    let a_vals = all_values(da, 256)?;
    let b_bytes: Vec<u8> = (0..65536).map(|i| i as u8).collect();
    let b_vals = Tensor::from_bytes(db, &[65536], &b_bytes).map_err(|e| e.to_string())?;
    let table = evaluate(op, &consts, &[(0, &a_vals), (3, &b_vals)])?;
    Ok(BinaryTable {
        table,
        pairing,
        out_len,
        name,
    })
}

impl Kernel for BinaryTable {
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
        let t = &self.table;
        let at = |x: u8, z: u8| t[(x as usize) << 8 | z as usize];
        match self.pairing {
            Pairing::Elementwise => {
                op_ensure!(
                    a.len() == self.out_len && b.len() == self.out_len,
                    "input sizes differ from the plan"
                );
                let one = |((a, b), y): ((&[u8], &[u8]), &mut [u8])| {
                    for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
                        *y = at(a, b);
                    }
                };
                split::for_chunks(y.bytes_mut(), 64, 2, |s, out| {
                    let r = s..s + out.len();
                    one(((&a[r.clone()], &b[r]), out))
                });
            }
            Pairing::Scalar { a_scalar } => {
                let (full, one) = if a_scalar { (b, a) } else { (a, b) };
                op_ensure!(
                    full.len() == self.out_len && one.len() == 1,
                    "input sizes differ from the plan"
                );
                // The row of the table for the single value: a 256-entry lookup.
                let s = one[0] as usize;
                let row: Vec<u8> = (0..256)
                    .map(|x| {
                        if a_scalar {
                            t[s << 8 | x]
                        } else {
                            t[x << 8 | s]
                        }
                    })
                    .collect();
                let each = |(x, y): (&[u8], &mut [u8])| {
                    y.iter_mut().zip(x).for_each(|(y, &x)| *y = row[x as usize]);
                };
                split::for_chunks(y.bytes_mut(), 64, 1, |s, out| {
                    each((&full[s..s + out.len()], out))
                });
            }
            Pairing::PerPlane { plane, a_per_plane } => {
                let (full, part) = if a_per_plane { (b, a) } else { (a, b) };
                op_ensure!(
                    full.len() == self.out_len && part.len() * plane == self.out_len,
                    "input sizes differ from the plan"
                );
                let one = |((x, &s), y): ((&[u8], &u8), &mut [u8])| {
                    for (y, &x) in y.iter_mut().zip(x) {
                        *y = if a_per_plane { at(s, x) } else { at(x, s) };
                    }
                };
                let plane = plane.max(1);
                let workers = split::worth(Cost::elementwise(full.len(), 1, 1));
                split::for_rows(y.bytes_mut(), plane, workers, |p, out| {
                    one(((&full[p * plane..][..out.len()], &part[p]), out))
                });
            }
        }
        Ok(())
    }

    fn name(&self) -> &str {
        self.name
    }

    fn prepacked_bytes(&self) -> usize {
        self.table.len()
    }
}

/// QLinearAdd on x86 with FMA, on operands of one shape or with one a single value: the
/// reference's own f32 arithmetic (onnxruntime's: `x * rx + (y * ry + fixed)` as fused
/// multiply-adds, zero points folded into `fixed`), sixteen or eight lanes at a time, so it
/// rounds every element as the reference does, without the table's cache misses.
#[derive(Debug)]
struct QAddKernel {
    /// The ISA's loop.
    add: AddFn,
    signed: bool,
    /// Scale ratios to the output's, of A and B.
    ratios: (f32, f32),
    /// `C_zero - (rA * A_zero + rB * B_zero)`, as the reference folds it.
    fixed: f32,
    /// Elementwise, or one operand a single value.
    pairing: Pairing,
    out_len: usize,
}

/// The (scale, zero point) of A, B and C of a QLinear binary op whose operands and output
/// share one 8-bit type and whose pairs are per tensor, as the SIMD kernels need.
fn per_tensor_operands(r: &KernelRequest) -> Result<[QParams; 3], String> {
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

fn qadd_kernel(r: &KernelRequest, isa: Isa) -> Result<QAddKernel, String> {
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
    mul: MulFn,
    signed: bool,
    /// A's and B's zero points.
    zero: (i32, i32),
    /// `A_scale * B_scale / C_scale`, as the reference computes it.
    ratio: f32,
    c_zero: f32,
    pairing: Pairing,
    out_len: usize,
}

fn qmul_kernel(r: &KernelRequest, isa: Isa) -> Result<QMulKernel, String> {
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

/// How an 8-bit operand of QdqBinary dequantizes: `((byte ^ flip) - offset) * scale`, where
/// `flip` makes an int8's bits unsigned (0x80) and `offset` is then its zero point plus 128:
/// the same integer `q - zero` as the reference's, so the same f32.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dequantized {
    flip: u8,
    offset: i32,
    scale: f32,
}

impl Dequantized {
    fn new(q: &QParams) -> Dequantized {
        let flip = if q.signed { 0x80 } else { 0 };
        Dequantized {
            flip,
            offset: q.zero[0] + i32::from(flip),
            scale: q.scale[0],
        }
    }

    #[inline(always)]
    fn value(self, byte: u8) -> f32 {
        ((byte ^ self.flip) as i32 - self.offset) as f32 * self.scale
    }
}

/// A run of one QdqBinary operand: a value per element, or one value for the whole run.
#[derive(Clone, Copy)]
pub(crate) enum Run<'a> {
    Each(&'a [u8]),
    One(f32),
}

/// The output's quantization: `clamp(round_half_even(v / scale) + zero, lo, hi)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Requantized {
    scale: f32,
    zero: i32,
    lo: i32,
    hi: i32,
    signed: bool,
}

/// `out = Q(DQ(a) kind DQ(b))` for a run of at most 256 elements, in the reference's f32
/// arithmetic: each operand's value, the float op, the division by the output's scale (all
/// vectorised; compiled again per ISA).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn qdq_combine_impl(
    kind: BinaryKind,
    a: Run<'_>,
    da: Dequantized,
    b: Run<'_>,
    db: Dequantized,
    q: Requantized,
    out: &mut [u8],
) {
    let mut buf = [0f32; 256];
    let v = &mut buf[..out.len()];
    let s = q.scale;
    macro_rules! each {
        ($f:expr) => {
            match (a, b) {
                (Run::Each(a), Run::Each(b)) => {
                    for ((v, &a), &b) in v.iter_mut().zip(a).zip(b) {
                        *v = $f(da.value(a), db.value(b)) / s;
                    }
                }
                (Run::Each(a), Run::One(b)) => {
                    for (v, &a) in v.iter_mut().zip(a) {
                        *v = $f(da.value(a), b) / s;
                    }
                }
                (Run::One(a), Run::Each(b)) => {
                    for (v, &b) in v.iter_mut().zip(b) {
                        *v = $f(a, db.value(b)) / s;
                    }
                }
                (Run::One(a), Run::One(b)) => v.fill($f(a, b) / s),
            }
        };
    }
    match kind {
        BinaryKind::Add => each!(|x: f32, y: f32| x + y),
        BinaryKind::Sub => each!(|x: f32, y: f32| x - y),
        _ => each!(|x: f32, y: f32| x * y),
    }
    crate::qgemm::requantize(v, q.zero, q.lo, q.hi, q.signed, out);
}

/// QdqBinary over operands of one shape, one a single value, or one per channel: the
/// reference's own f32 arithmetic, vectorised, so the same bits without a table (whose
/// 64 KiB missed L1 on most lookups: ppocrv4_det_qdq's 23 of them took 11.6 ms, against 4.6 ms
/// for the DequantizeLinear, Add and QuantizeLinear passes they replace).
#[derive(Debug)]
struct QdqBinaryKernel {
    kind: BinaryKind,
    a: Dequantized,
    b: Dequantized,
    y: Requantized,
    pairing: Pairing,
    out_len: usize,
    /// The ISA's loop.
    combine: CombineFn,
}

fn qdq_binary_kernel(
    op: &QdqBinary,
    r: &KernelRequest,
    isa: Isa,
) -> Result<QdqBinaryKernel, String> {
    let [qa, qb, qy] = per_tensor_operands(r)?;
    let (pairing, out_len) = pairing(r, true)?;
    let (lo, hi) = if qy.signed { (-128, 127) } else { (0, 255) };
    Ok(QdqBinaryKernel {
        kind: op.kind,
        a: Dequantized::new(&qa),
        b: Dequantized::new(&qb),
        y: Requantized {
            scale: qy.scale[0],
            zero: qy.zero[0],
            lo,
            hi,
            signed: qy.signed,
        },
        pairing,
        out_len,
        combine: isa.table().qlinear.qdq_combine,
    })
}

impl QdqBinaryKernel {
    /// Output elements `first..first + out.len()`, in runs that do not cross a plane.
    fn run_range(&self, a: &[u8], b: &[u8], first: usize, out: &mut [u8]) {
        let mut i = 0;
        while i < out.len() {
            let g = first + i;
            let n = (out.len() - i).min(256);
            let (n, ra, rb) = match self.pairing {
                Pairing::Elementwise => (n, Run::Each(&a[g..g + n]), Run::Each(&b[g..g + n])),
                Pairing::Scalar { a_scalar: false } => {
                    (n, Run::Each(&a[g..g + n]), Run::One(self.b.value(b[0])))
                }
                Pairing::Scalar { a_scalar: true } => {
                    (n, Run::One(self.a.value(a[0])), Run::Each(&b[g..g + n]))
                }
                Pairing::PerPlane { plane, a_per_plane } => {
                    let (c, n) = (g / plane, n.min(plane - g % plane));
                    if a_per_plane {
                        (n, Run::One(self.a.value(a[c])), Run::Each(&b[g..g + n]))
                    } else {
                        (n, Run::Each(&a[g..g + n]), Run::One(self.b.value(b[c])))
                    }
                }
            };
            let out = &mut out[i..i + n];
            (self.combine)(self.kind, ra, self.a, rb, self.b, self.y, out);
            i += n;
        }
    }
}

impl Kernel for QdqBinaryKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let n = self.out_len;
        let (a, b, y) = binary_operands(inputs, outputs, n)?;
        let sizes_ok = match self.pairing {
            Pairing::Elementwise => a.len() == n && b.len() == n,
            Pairing::Scalar { a_scalar: false } => a.len() == n && b.len() == 1,
            Pairing::Scalar { a_scalar: true } => a.len() == 1 && b.len() == n,
            Pairing::PerPlane { plane, a_per_plane } => {
                let (full, part) = if a_per_plane { (b, a) } else { (a, b) };
                plane > 0 && full.len() == n && part.len() * plane == n
            }
        };
        op_ensure!(sizes_ok, "input sizes differ from the plan");
        split::for_chunks(y, 64, 2, |s, out| self.run_range(a, b, s, out));
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qdq_binary"
    }
}

/// One chunk's constants, for the ISA's [`AddFn`]: `out = clamp(round(x * rx + (y * ry +
/// constant)))`, or `x * rx + constant` without `y`.
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct AddArgs {
    signed: bool,
    rx: f32,
    /// `fixed`, plus `y * ry` when y is a single value.
    constant: f32,
    lo: i32,
    hi: i32,
}

/// QLinearConcat: each input through its own 256-entry table (or copied, when its scale and
/// zero point are the output's), placed along the axis.
#[derive(Debug)]
struct ConcatTables {
    /// Per input: its table, or None to copy.
    tables: Vec<Option<Vec<u8>>>,
    /// Bytes of each input per outer index, and of the output.
    inner: Vec<usize>,
    outer: usize,
}

fn concat_tables(c: &QLinearConcat, r: &KernelRequest) -> Result<ConcatTables, String> {
    let n = r.inputs.len().saturating_sub(2) / 3;
    if n == 0 || r.inputs.len() != 2 + 3 * n {
        return Err("needs (tensor, scale, zero point) triples".into());
    }
    let dtype = eight_bit(r, 1)?;
    let out_shape = &r.outputs.first().ok_or("needs an output")?.shape;
    let rank = out_shape.len() as i64;
    let axis = if c.axis < 0 { c.axis + rank } else { c.axis };
    if !(0..rank).contains(&axis) {
        return Err("needs an axis inside the rank".into());
    }
    let axis = axis as usize;
    let outer: usize = out_shape[..axis].iter().product();
    let y_s = constant(r, 0).ok_or("needs a constant Y_scale")?;
    let y_z = constant(r, 1).ok_or("needs a constant Y_zero_point")?;
    let mut tables = Vec::with_capacity(n);
    let mut inner = Vec::with_capacity(n);
    for k in 0..n {
        let i = 2 + 3 * k;
        let xi = r.inputs[i].as_ref().ok_or("needs every input")?;
        if xi.dtype != dtype {
            return Err("needs inputs of Y_zero_point's type".into());
        }
        inner.push(xi.shape[axis..].iter().product());
        let x_s = constant(r, i + 1).ok_or("needs constant scales")?;
        let x_z = match &r.inputs[i + 2] {
            Some(_) => Some(constant(r, i + 2).ok_or("needs constant zero points")?),
            None => None,
        };
        let same = x_s.bytes() == y_s.bytes() && x_z.map(|t| t.bytes()) == Some(y_z.bytes());
        tables.push(if same {
            None
        } else {
            let all = all_values(dtype, 1)?;
            let args = [Some(y_s), Some(y_z), Some(&all), Some(x_s), x_z];
            // The values as one 1-D input: its table along axis 0.
            let t = QLinearConcat { axis: 0 }
                .eval(&args)
                .map_err(|e| e.to_string())?;
            Some(t.first().ok_or("no output")?.bytes().to_vec())
        });
    }
    Ok(ConcatTables {
        tables,
        inner,
        outer,
    })
}

impl Kernel for ConcatTables {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        let row: usize = self.inner.iter().sum();
        op_ensure!(
            y.byte_len() == row * self.outer,
            "output size differs from the plan"
        );
        let ys = y.bytes_mut();
        let mut offset = 0;
        for (k, (table, &inner)) in self.tables.iter().zip(&self.inner).enumerate() {
            let x = required(inputs, 2 + 3 * k)?.bytes();
            op_ensure!(
                x.len() == inner * self.outer,
                "input {k} size differs from the plan"
            );
            for o in 0..self.outer {
                let src = &x[o * inner..(o + 1) * inner];
                let dst = &mut ys[o * row + offset..o * row + offset + inner];
                match table {
                    None => dst.copy_from_slice(src),
                    Some(t) => dst
                        .iter_mut()
                        .zip(src)
                        .for_each(|(d, &s)| *d = t[s as usize]),
                }
            }
            offset += inner;
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qconcat"
    }

    fn prepacked_bytes(&self) -> usize {
        self.tables.iter().flatten().map(Vec::len).sum()
    }
}

/// QLinearGlobalAveragePool: integer sums per channel, then the reference's one f32 scaling
/// of each.
#[derive(Debug)]
struct QGlobalAverage {
    image: usize,
    /// The channel count of a channels-last input (`[N, D1.., C]`, summed a pixel's channel
    /// vector at a time); `None` for channels-first planes.
    channels_last: Option<usize>,
    x_zero: i64,
    y_zero: i32,
    scale: f32,
    signed: bool,
}

/// Pixels summed in i32 before an i64 total: 2^16 values of at most 255 stay far below 2^31.
const I32_SUM_PIXELS: usize = 1 << 16;

impl QGlobalAverage {
    /// The output byte of channel sum `sum`.
    fn requantize(&self, sum: i64) -> u8 {
        let (lo, hi) = if self.signed { (-128, 127) } else { (0, 255) };
        let acc = sum - self.x_zero * self.image.max(1) as i64;
        let v = (acc as f32 * self.scale).round_ties_even() as i32 + self.y_zero;
        let q = v.clamp(lo, hi);
        if self.signed {
            q as i8 as u8
        } else {
            q as u8
        }
    }

    /// One channels-first plane's sum.
    fn plane_sum(&self, x: &[u8]) -> i64 {
        // i32 sums vectorize; i64 ones did not.
        let part = |x: &[u8]| -> i64 {
            let s: i32 = if self.signed {
                x.iter().map(|&b| b as i8 as i32).sum()
            } else {
                x.iter().map(|&b| b as i32).sum()
            };
            s as i64
        };
        x.chunks(I32_SUM_PIXELS).map(part).sum()
    }

    /// One channels-last image's channel sums into `y`, a pixel's channel vector at a time.
    fn image_sums(&self, x: &[u8], c: usize, y: &mut [u8]) {
        let mut total = vec![0i64; c];
        let mut part = vec![0i32; c];
        for block in x.chunks(c * I32_SUM_PIXELS) {
            part.fill(0);
            for px in block.chunks_exact(c) {
                if self.signed {
                    part.iter_mut()
                        .zip(px)
                        .for_each(|(s, &b)| *s += b as i8 as i32);
                } else {
                    part.iter_mut().zip(px).for_each(|(s, &b)| *s += b as i32);
                }
            }
            total
                .iter_mut()
                .zip(&part)
                .for_each(|(t, &s)| *t += s as i64);
        }
        for (y, &t) in y.iter_mut().zip(&total) {
            *y = self.requantize(t);
        }
    }
}

impl Kernel for QGlobalAverage {
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
        let image = self.image.max(1);
        op_ensure!(
            x.len() == y.byte_len() * image,
            "sizes differ from the plan"
        );
        let workers = split::worth(Cost::bytes(x.len()));
        match self.channels_last {
            Some(c) => {
                let c = c.max(1);
                split::for_rows(y.bytes_mut(), c, workers, |i, y| {
                    self.image_sums(&x[i * image * c..][..image * c], c, y)
                })
            }
            None => split::for_rows(y.bytes_mut(), 1, workers, |i, y| {
                y[0] = self.requantize(self.plane_sum(&x[i * image..][..image]))
            }),
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qglobal_average"
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<QLinearLookup>(
        "cpu.qlookup",
        "QLinearLookup",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |o, r| {
            unary_table(o, r.req, r.cx.isa, "cpu.qlookup").map(|k| Box::new(k) as Box<dyn Kernel>)
        },
    );
    r.add::<QLinearChannelLookup>(
        "cpu.qchannel_lookup",
        "QLinearChannelLookup",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |o, r| channel_tables(o, r.req, r.cx.isa).map(|k| Box::new(k) as Box<dyn Kernel>),
    );
    r.add::<QLinearSigmoid>(
        "cpu.qsigmoid",
        "QLinearSigmoid",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |o, r| {
            unary_table(o, r.req, r.cx.isa, "cpu.qsigmoid").map(|k| Box::new(k) as Box<dyn Kernel>)
        },
    );
    r.add::<QLinearLeakyRelu>(
        "cpu.qleaky_relu",
        "QLinearLeakyRelu",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |o, r| {
            unary_table(o, r.req, r.cx.isa, "cpu.qleaky_relu")
                .map(|k| Box::new(k) as Box<dyn Kernel>)
        },
    );
    r.add::<QLinearAdd>(
        "cpu.qadd",
        "QLinearAdd",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |o, r| match qadd_kernel(r.req, r.cx.isa) {
            Ok(k) => Ok(Box::new(k) as Box<dyn Kernel>),
            Err(_) => {
                binary_table(o, r.req, false, "cpu.qadd").map(|k| Box::new(k) as Box<dyn Kernel>)
            }
        },
    );
    r.add::<QLinearMul>(
        "cpu.qmul",
        "QLinearMul",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |o, r| match qmul_kernel(r.req, r.cx.isa) {
            Ok(k) => Ok(Box::new(k) as Box<dyn Kernel>),
            Err(_) => {
                binary_table(o, r.req, true, "cpu.qmul").map(|k| Box::new(k) as Box<dyn Kernel>)
            }
        },
    );
    r.add::<QdqBinary>(
        "cpu.qdq_binary",
        "QdqBinary",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |o, r| qdq_binary_kernel(o, r.req, r.cx.isa).map(|k| Box::new(k) as Box<dyn Kernel>),
    );
    r.add::<QLinearConcat>(
        "cpu.qconcat",
        "QLinearConcat",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |c, r| concat_tables(c, r.req).map(|k| Box::new(k) as Box<dyn Kernel>),
    );
    r.add::<QLinearGlobalAveragePool>(
        "cpu.qglobal_average",
        "QLinearGlobalAveragePool",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |p, r| {
            let d = eight_bit(r.req, 0)?;
            let x = r.req.inputs[0].as_ref().ok_or("needs an input")?;
            if x.shape.len() < 3 {
                return Err("needs an input of rank 3 or more".into());
            }
            let (image, channels_last) = if p.channels_last {
                let c = x.shape[x.shape.len() - 1];
                (x.shape[1..x.shape.len() - 1].iter().product(), Some(c))
            } else {
                (x.shape[2..].iter().product(), None)
            };
            let (xq, yq) = (qparams(r.req, d, 1, 2, 1)?, qparams(r.req, d, 3, 4, 1)?);
            // The reference's f32 order: x_scale / (y_scale * image).
            let scale = xq.scale[0] / (yq.scale[0] * image as f32);
            Ok(Box::new(QGlobalAverage {
                image,
                channels_last,
                x_zero: xq.zero[0] as i64,
                y_zero: yq.zero[0],
                scale,
                signed: d == DType::I8,
            }))
        },
    );
}
