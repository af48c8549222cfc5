//! The com.microsoft QLinear element-wise ops, concat and global average pooling on 8-bit
//! tensors.
//!
//! An 8-bit operand has 256 values, so an op whose output element depends on one input
//! element (QLinearSigmoid, QLinearLeakyRelu, each input of QLinearConcat) is a 256-entry
//! table, and one that depends on two (QLinearAdd, QLinearMul) a 65536-entry one. The tables
//! are filled at prerun by the op's own reference implementation over every value, so the
//! kernels are exactly the reference, rounding included, at a table lookup per element.
//!
//! One file per kind of kernel: [`lookup`] (256-entry tables), [`binary_table`] (65536-entry
//! ones), [`add_mul`] (QLinearAdd and QLinearMul computed from per-tensor scales),
//! [`qdq_binary`], [`concat`] and [`global_pool`]; the ISA loops they call are the table's
//! ([`Kernels`], `avx2.rs`, `avx512.rs`). This module holds what they share and the
//! registration. (The ops themselves are core's `ops::quant`.)

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

mod add_mul;
mod binary_table;
mod concat;
mod global_pool;
mod lookup;
mod qdq_binary;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

use add_mul::*;
use binary_table::*;
use concat::*;
use global_pool::*;
use lookup::*;
use qdq_binary::*;

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
