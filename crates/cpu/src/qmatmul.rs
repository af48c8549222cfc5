//! QLinearMatMul and MatMulInteger on the integer GEMM: a constant 2-D B (the weights) flipped
//! to s8 and packed once as column panels with its column sums; A's rows (every batch's, as
//! one tall matrix) packed per run as u8.

use crate::backend::{constant, Registry};
use crate::qgemm::{Axis, Out, Packed, Product, QPath, Side, Source};
use crate::qparams::{qparams, signed, zero_points, QParams};
use crate::Isa;
use ferrolite_core::op::required;
use ferrolite_core::ops::linalg::matmul::MatMulInteger;
use ferrolite_core::ops::quant::{MatMulIntegerToFloat, QGemm, QLinearMatMul};
use ferrolite_core::plan::{Kernel, KernelRequest};
use ferrolite_core::prepacked::Prepacks;
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::{op_ensure, DType, OpError, OpResult, Tensor};

/// What the product's results become.
/// MatMulIntegerToFloat's input slot of A's scale.
const A_SCALE: usize = 2;

#[derive(Debug)]
enum Output {
    /// QLinearMatMul, QGemm: requantized per column.
    Quantized { y: QParams, mult: Vec<f32> },
    /// MatMulInteger: i32.
    I32,
    /// QGemm without an output quantization: scaled per column to f32.
    F32 { scale: Vec<f32> },
    /// MatMulIntegerToFloat: scaled by A's scale (input [`A_SCALE`], read at run time: a
    /// DynamicQuantizeLinear's) times B's per column, plus the bias.
    ToFloat {
        b_scale: Vec<f32>,
        bias: Option<Vec<f32>>,
    },
}

#[derive(Debug)]
pub struct QMatMulKernel {
    path: QPath,
    a_shape: Vec<usize>,
    /// A's zero point as the GEMM sees it (u8).
    a_zero: i32,
    /// The input slot of A's zero point when it is only known at run time.
    a_zero_input: Option<usize>,
    a_signed: bool,
    b: Packed<'static>,
    /// B's zero point per column as the GEMM sees it (s8).
    b_zero: Vec<i32>,
    output: Output,
    /// QGemm's C, per column.
    bias: Option<Vec<i32>>,
    name: &'static str,
}

/// The constant B (`[k, n]`, or `[n, k]` when `transposed`) flipped to s8 and packed as
/// column panels, with its per-column zero points as the GEMM sees them.
fn pack_weights(
    path: QPath,
    b: &Tensor,
    (k, n): (usize, usize),
    transposed: bool,
    bq: &QParams,
    packs: &Prepacks,
) -> Result<(Packed<'static>, Vec<i32>), String> {
    let (rs, cs) = if transposed { (k, 1) } else { (1, n) };
    let source = Source {
        data: b.bytes(),
        rs,
        cs,
        flip: if bq.signed { 0 } else { 0x80 },
        signed: true,
    };
    let packed =
        Packed::new_weights(path, Side::Panels, k, n, source, packs).map_err(|e| e.to_string())?;
    let zero = per_column(&bq.zero, n)
        .into_iter()
        .map(|z| if bq.signed { z } else { z - 128 })
        .collect();
    Ok((packed, zero))
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
        // Scales are irrelevant to MatMulInteger: its operands' zero points only.
        let zero_of = |slot: usize, dtype: DType, len: usize| -> Result<QParams, String> {
            let runtime = r.inputs.get(slot).and_then(|v| v.as_ref()).is_some()
                && constant(r, slot).is_none();
            let zero = if slot == az && runtime {
                // A's zero point read at run time (DynamicQuantizeLinear's).
                vec![0]
            } else {
                zero_points(r, slot, dtype, len)?
            };
            Ok(QParams {
                signed: signed(dtype)?,
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
        let (packed, b_zero) = pack_weights(path, b_val, (k, n), false, &bq, r.packs)?;
        let a_zero = if aq.signed {
            aq.zero[0] + 128
        } else {
            aq.zero[0]
        };
        let runtime_zero =
            r.inputs.get(az).and_then(|v| v.as_ref()).is_some() && constant(r, az).is_none();
        Ok(QMatMulKernel {
            path,
            a_shape: a_shape.to_vec(),
            a_zero,
            a_zero_input: (scales.is_none() && runtime_zero).then_some(az),
            a_signed: aq.signed,
            b: packed,
            b_zero,
            output,
            bias: None,
            name,
        })
    }

    /// com.microsoft QGemm: A not transposed, B (constant) either way, C per column.
    fn qgemm(isa: Isa, g: &QGemm, r: &KernelRequest) -> Result<Self, String> {
        if g.trans_a {
            return Err("needs A not transposed".into());
        }
        let info = |i: usize| r.inputs.get(i).and_then(|v| v.as_ref());
        let (ai, bi) = (info(0).ok_or("needs A")?, info(3).ok_or("needs B")?);
        if ai.shape.len() != 2 || bi.shape.len() != 2 {
            return Err("needs 2-D A and B".into());
        }
        let (k, n) = if g.trans_b {
            (bi.shape[1], bi.shape[0])
        } else {
            (bi.shape[0], bi.shape[1])
        };
        if ai.shape[1] != k {
            return Err(format!("needs A with {k} columns"));
        }
        let aq = qparams(r, ai.dtype, 1, 2, 1)?;
        let bq = qparams(r, bi.dtype, 4, 5, n)?;
        let b_val = constant(r, 3).ok_or("needs a constant B")?;
        let col = |v: &[f32], j: usize| v[if v.len() == 1 { 0 } else { j }];
        // (alpha a_scale b_scale) / y_scale per column, in the reference's f32 order.
        let product_scale: Vec<f32> = (0..n)
            .map(|j| g.alpha * aq.scale[0] * col(&bq.scale, j))
            .collect();
        let output = match info(7) {
            Some(_) => {
                let y = qparams(r, info(8).ok_or("needs y_zero_point")?.dtype, 7, 8, 1)?;
                let mult = product_scale.iter().map(|s| s / y.scale[0]).collect();
                Output::Quantized { y, mult }
            }
            None => Output::F32 {
                scale: product_scale,
            },
        };
        let bias = match info(6) {
            None => None,
            Some(ci) => {
                let c = constant(r, 6).ok_or("needs a constant C")?;
                let per_column = ci.shape == [n] || ci.shape == [1, n];
                if !per_column || c.dtype() != DType::I32 {
                    return Err(format!("needs an i32 C of [{n}] or [1, {n}]"));
                }
                Some(c.as_slice::<i32>().map_err(|e| e.to_string())?.to_vec())
            }
        };
        let path = QPath::for_isa(isa);
        let (packed, b_zero) = pack_weights(path, b_val, (k, n), g.trans_b, &bq, r.packs)?;
        Ok(QMatMulKernel {
            path,
            a_shape: ai.shape.to_vec(),
            a_zero: if aq.signed {
                aq.zero[0] + 128
            } else {
                aq.zero[0]
            },
            a_zero_input: None,
            a_signed: aq.signed,
            b: packed,
            b_zero,
            output,
            bias,
            name: "cpu.qgemm",
        })
    }

    /// com.microsoft MatMulIntegerToFloat with f32 scales: A's scale one value (known at run
    /// time or not), B's constant per tensor or per column, the bias constant per column.
    fn to_float(isa: Isa, r: &KernelRequest) -> Result<Self, String> {
        let mut k = QMatMulKernel::new(isa, r, (0, 4, 1, 5), None, "cpu.matmul_integer_to_float")?;
        let n = k.b.len();
        let f32_input = |slot: usize| {
            r.inputs
                .get(slot)
                .and_then(|v| v.as_ref())
                .filter(|v| v.dtype == DType::F32)
        };
        let a_scale = f32_input(A_SCALE).ok_or("needs an f32 a_scale")?;
        if a_scale.shape.iter().product::<usize>() != 1 {
            return Err("needs one a_scale value".into());
        }
        f32_input(3).ok_or("needs an f32 b_scale")?;
        let b_scale = constant(r, 3)
            .and_then(|t| t.as_slice::<f32>().ok())
            .filter(|v| v.len() == 1 || v.len() == n)
            .ok_or("needs a constant b_scale of one value or one per column")?;
        let bias = match r.inputs.get(6).and_then(|v| v.as_ref()) {
            None => None,
            Some(_) => Some(
                constant(r, 6)
                    .and_then(|t| t.as_slice::<f32>().ok())
                    .filter(|v| v.len() == n)
                    .ok_or("needs a constant f32 bias of one value per column")?
                    .to_vec(),
            ),
        };
        k.output = Output::ToFloat {
            b_scale: (0..n)
                .map(|j| b_scale[if b_scale.len() == 1 { 0 } else { j }])
                .collect(),
            bias,
        };
        Ok(k)
    }

    fn run_on(&self, a: &Tensor, a_zero: i32, a_scale: f32, y: &mut Tensor) -> OpResult<()> {
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
            rows_zero: Axis::All(a_zero),
            panels_zero: Axis::Cols(&self.b_zero),
            bias: self.bias.as_deref().map(Axis::Cols),
            ldc: n,
        };
        match &self.output {
            Output::I32 => product.run(&mut Out::I32(y.as_mut_slice::<i32>()?), true),
            Output::F32 { scale } => product.run(
                &mut Out::F32 {
                    data: y.as_mut_slice::<f32>()?,
                    scale: Axis::Cols(scale),
                    bias: None,
                },
                true,
            ),
            Output::ToFloat { b_scale, bias, .. } => {
                // The reference's order: the scales' product rounded to f32 first.
                let scale: Vec<f32> = b_scale.iter().map(|s| a_scale * s).collect();
                product.run(
                    &mut Out::F32 {
                        data: y.as_mut_slice::<f32>()?,
                        scale: Axis::Cols(&scale),
                        bias: bias.as_deref().map(Axis::Cols),
                    },
                    true,
                )
            }
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
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let a = required(inputs, 0)?;
        let a_zero = match self.a_zero_input {
            None => self.a_zero,
            Some(slot) => {
                let z = required(inputs, slot)?;
                op_ensure!(z.numel() == 1, "A's zero point must have one element");
                let v = z.to_i64_vec()[0] as i32;
                if self.a_signed {
                    v + 128
                } else {
                    v
                }
            }
        };
        let a_scale = match &self.output {
            Output::ToFloat { .. } => {
                let t = required(inputs, A_SCALE)?;
                op_ensure!(t.numel() == 1, "a_scale must have one element");
                t.as_slice::<f32>()?[0]
            }
            _ => 1.0,
        };
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        self.run_on(a, a_zero, a_scale, y)
    }

    fn name(&self) -> &str {
        self.name
    }

    fn prepacked_bytes(&self) -> usize {
        let output = match &self.output {
            Output::Quantized { mult, .. } => size_of_val(mult.as_slice()),
            Output::I32 => 0,
            Output::F32 { scale } => size_of_val(scale.as_slice()),
            Output::ToFloat { b_scale, bias } => {
                size_of_val(b_scale.as_slice()) + bias.as_deref().map_or(0, size_of_val)
            }
        };
        self.b.bytes()
            + size_of_val(self.b_zero.as_slice())
            + output
            + self.bias.as_deref().map_or(0, size_of_val)
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<QGemm>(
        "cpu.qgemm",
        "QGemm",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |g, r| QMatMulKernel::qgemm(r.cx.isa, g, r.req).map(|k| Box::new(k) as Box<dyn Kernel>),
    );
    r.add::<QLinearMatMul>(
        "cpu.qmatmul",
        "QLinearMatMul",
        10,
        DTypes::Any,
        Layout::PLAIN,
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
    r.add::<MatMulIntegerToFloat>(
        "cpu.matmul_integer_to_float",
        "MatMulIntegerToFloat",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |_, r| QMatMulKernel::to_float(r.cx.isa, r.req).map(|k| Box::new(k) as Box<dyn Kernel>),
    );
    r.add::<MatMulInteger>(
        "cpu.matmul_integer",
        "MatMulInteger",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |_, r| {
            QMatMulKernel::new(r.cx.isa, r.req, (0, 2, 1, 3), None, "cpu.matmul_integer")
                .map(|k| Box::new(k) as Box<dyn Kernel>)
        },
    );
}
