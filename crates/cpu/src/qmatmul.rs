//! QLinearMatMul and MatMulInteger on the integer GEMM: a constant 2-D B (the weights) flipped
//! to s8 and packed once as column panels with its column sums; A's rows (every batch's, as
//! one tall matrix) packed per run as u8.

use crate::backend::{constant, Registry};
use crate::qconv::{qparams, QParams};
use crate::qgemm::{Axis, Out, Packed, Product, QPath, Side, Source};
use crate::Isa;
use ferrolite_core::op::required;
use ferrolite_core::ops::linalg::matmul::MatMulInteger;
use ferrolite_core::ops::quant::QLinearMatMul;
use ferrolite_core::plan::{Kernel, KernelRequest};
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::{op_ensure, DType, OpError, OpResult, Tensor};

/// What the product's results become.
#[derive(Debug)]
enum Output {
    /// QLinearMatMul: requantized per column.
    Quantized { y: QParams, mult: Vec<f32> },
    /// MatMulInteger: i32.
    I32,
}

#[derive(Debug)]
pub struct QMatMulKernel {
    path: QPath,
    a_shape: Vec<usize>,
    /// A's zero point as the GEMM sees it (u8).
    a_zero: i32,
    a_signed: bool,
    b: Packed,
    /// B's zero point per column as the GEMM sees it (s8).
    b_zero: Vec<i32>,
    output: Output,
    name: &'static str,
}

/// Per-column values from one or `n`.
fn per_column(v: &[i32], n: usize) -> Vec<i32> {
    (0..n)
        .map(|j| v[if v.len() == 1 { 0 } else { j }])
        .collect()
}

impl QMatMulKernel {
    /// `a`, `b`: input slots of A and B; `az`, `bz`: of their zero points; `scales`: the slots
    /// of (a_scale, b_scale, y_scale, y_zero_point) for QLinearMatMul.
    fn new(
        isa: Isa,
        r: &KernelRequest,
        (a, az, b, bz): (usize, usize, usize, usize),
        scales: Option<(usize, usize, usize, usize)>,
        name: &'static str,
    ) -> Result<Self, String> {
        let info = |i: usize| {
            r.inputs
                .get(i)
                .and_then(|v| v.as_ref())
                .ok_or_else(|| format!("needs input {i}"))
        };
        let (ai, bi) = (info(a)?, info(b)?);
        let (a_shape, b_shape) = (ai.shape, bi.shape);
        if b_shape.len() != 2 || a_shape.len() < 2 {
            return Err("needs a 2-D B and an A of rank 2 or more".into());
        }
        let (k, n) = (b_shape[0], b_shape[1]);
        if a_shape[a_shape.len() - 1] != k {
            return Err(format!("needs A's last dimension to be {k}"));
        }
        let b_val = constant(r, b).ok_or("needs a constant B")?;
        // Scales are irrelevant to MatMulInteger: read the zero points with a dummy scale slot.
        let zero_of = |slot: usize, dtype: DType, len: usize| -> Result<QParams, String> {
            let signed = match dtype {
                DType::I8 => true,
                DType::U8 => false,
                d => return Err(format!("needs 8-bit integers, not {d}")),
            };
            let zero = match r.inputs.get(slot).and_then(|v| v.as_ref()) {
                None => vec![0],
                Some(_) => {
                    let t = constant(r, slot).ok_or("needs constant zero points")?;
                    if t.numel() != 1 && t.numel() != len {
                        return Err(format!("needs 1 or {len} zero points"));
                    }
                    t.to_i64_vec().iter().map(|&v| v as i32).collect()
                }
            };
            Ok(QParams {
                signed,
                scale: vec![1.0],
                zero,
            })
        };
        let (aq, bq, output) = match scales {
            Some((sa, sb, sy, zy)) => {
                let aq = qparams(r, ai.dtype, sa, az, 1)?;
                let bq = qparams(r, bi.dtype, sb, bz, n)?;
                let y_dtype = r
                    .inputs
                    .get(zy)
                    .and_then(|v| v.as_ref())
                    .map_or(ai.dtype, |v| v.dtype);
                let y = qparams(r, y_dtype, sy, zy, 1)?;
                let mult = (0..n)
                    .map(|j| {
                        (aq.scale[0] * bq.scale[if bq.scale.len() == 1 { 0 } else { j }])
                            / y.scale[0]
                    })
                    .collect();
                (aq, bq, Output::Quantized { y, mult })
            }
            None => {
                let aq = zero_of(az, ai.dtype, 1)?;
                let bq = zero_of(bz, bi.dtype, n)?;
                (aq, bq, Output::I32)
            }
        };
        if aq.zero.len() != 1 {
            return Err("needs one zero point for A".into());
        }
        let path = QPath::for_isa(isa);
        let packed = Packed::new(
            path,
            Side::Panels,
            k,
            n,
            Source {
                data: b_val.bytes(),
                rs: 1,
                cs: n,
                flip: if bq.signed { 0 } else { 0x80 },
                signed: true,
            },
        )
        .map_err(|e| e.to_string())?;
        let b_zero = per_column(&bq.zero, n)
            .into_iter()
            .map(|z| if bq.signed { z } else { z - 128 })
            .collect();
        let a_zero = if aq.signed {
            aq.zero[0] + 128
        } else {
            aq.zero[0]
        };
        Ok(QMatMulKernel {
            path,
            a_shape: a_shape.to_vec(),
            a_zero,
            a_signed: aq.signed,
            b: packed,
            b_zero,
            output,
            name,
        })
    }

    fn run_on(&self, a: &Tensor, y: &mut Tensor) -> OpResult<()> {
        op_ensure!(
            a.shape() == self.a_shape.as_slice(),
            "input A has shape {:?}, the kernel was built for {:?}",
            a.shape(),
            self.a_shape
        );
        let (k, n) = (self.b.k(), self.b.len());
        let m = a.numel() / k.max(1);
        op_ensure!(
            y.numel() == m * n,
            "output has {} values, expected {}",
            y.numel(),
            m * n
        );
        let rows = Packed::new(
            self.path,
            Side::Rows,
            k,
            m,
            Source {
                data: a.bytes(),
                rs: k,
                cs: 1,
                flip: if self.a_signed { 0x80 } else { 0 },
                signed: false,
            },
        )?;
        let product = Product {
            rows: &rows,
            panels: &self.b,
            rows_zero: Axis::All(self.a_zero),
            panels_zero: Axis::Cols(&self.b_zero),
            bias: None,
            ldc: n,
        };
        match &self.output {
            Output::I32 => product.run(&mut Out::I32(y.as_mut_slice::<i32>()?), true),
            Output::Quantized { y: yq, mult } => {
                let (lo, hi) = if yq.signed { (-128, 127) } else { (0, 255) };
                product.run(
                    &mut Out::Quantized {
                        data: y.bytes_mut(),
                        signed: yq.signed,
                        scale: Axis::Cols(mult),
                        zero_point: yq.zero[0],
                        lo,
                        hi,
                    },
                    true,
                )
            }
        }
    }
}

impl Kernel for QMatMulKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
        let a = required(inputs, 0)?;
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        self.run_on(a, y)
    }

    fn name(&self) -> &str {
        self.name
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<QLinearMatMul>(
        "cpu.qmatmul",
        "QLinearMatMul",
        10,
        DTypes::Any,
        Layout::Plain,
        |_, r| {
            QMatMulKernel::new(
                r.cx.isa,
                r.req,
                (0, 2, 3, 5),
                Some((1, 4, 6, 7)),
                "cpu.qmatmul",
            )
            .map(|k| Box::new(k) as Box<dyn Kernel>)
        },
    );
    r.add::<MatMulInteger>(
        "cpu.matmul_integer",
        "MatMulInteger",
        10,
        DTypes::Any,
        Layout::Plain,
        |_, r| {
            QMatMulKernel::new(r.cx.isa, r.req, (0, 2, 1, 3), None, "cpu.matmul_integer")
                .map(|k| Box::new(k) as Box<dyn Kernel>)
        },
    );
}
