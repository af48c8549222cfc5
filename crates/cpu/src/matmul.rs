//! f32 MatMul (batched, broadcast) and Gemm on the packed GEMM: a constant B is prepacked
//! once; Gemm's C (when it is a row or column vector) and activation go into the epilogue.
//! The GEMM splits large products over the threads; many small batches go in parallel.

use crate::backend::{built, constant, shape, Registry};
use crate::gemm::{
    packed_bytes, Bias, Epilogue, Gemm, MatMut, MatRef, Operand, PackedMatrix, Packing, PackingFor,
    Packs, Side,
};
use crate::kernel_io::f32_shape;
use crate::split::{self, Cost};
use crate::Sgemm;
use ferrolite_core::op::required;
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::gemm::Gemm as GemmOp;
use ferrolite_core::ops::linalg::matmul::MatMul;
use ferrolite_core::ops::linalg::matmul::MatMulShapes;
use ferrolite_core::ops::util::broadcast_offsets;
use ferrolite_core::plan::Kernel;
use ferrolite_core::prepacked::Prepacks;
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::scratch::{Scratch, ScratchNeed};
use ferrolite_core::{op_ensure, OpError, OpResult, Tensor};

fn check_shape(t: &Tensor, want: &[usize], what: &str) -> OpResult<()> {
    op_ensure!(
        t.shape() == want,
        "{what} has shape {:?}, the kernel was built for {want:?}",
        t.shape()
    );
    Ok(())
}

#[derive(Debug)]
pub struct MatMulKernel {
    gemm: Sgemm,
    s: MatMulShapes,
    a_shape: Vec<usize>,
    b_shape: Vec<usize>,
    a_index: Vec<usize>,
    b_index: Vec<usize>,
    /// B's matrices, prepacked when B is a constant.
    packed_b: Option<Vec<PackedMatrix>>,
}

impl MatMulKernel {
    pub fn new(
        gemm: Sgemm,
        a: &[usize],
        b: &[usize],
        b_value: Option<&Tensor>,
        packs: &Prepacks,
    ) -> OpResult<MatMulKernel> {
        let s = MatMulShapes::new(a, b)?;
        let (a_index, b_index) = s.batch_indices();
        let packed_b = match b_value {
            Some(t) => {
                let bv = t.as_slice::<f32>()?;
                let (k, n) = (s.k, s.n);
                let count = b_index.iter().max().map_or(0, |&i| i + 1);
                let mut v = Vec::with_capacity(count);
                for i in 0..count {
                    let src = MatRef {
                        data: bv.get(i * k * n..).unwrap_or(&[]),
                        rs: n,
                        cs: 1,
                    };
                    v.push(gemm.pack(k, n, src, Side::B, packs)?);
                }
                Some(v)
            }
            None => None,
        };
        Ok(MatMulKernel {
            gemm,
            s,
            a_shape: a.to_vec(),
            b_shape: b.to_vec(),
            a_index,
            b_index,
            packed_b,
        })
    }
}

impl MatMulKernel {
    /// What each product's packing needs: B comes prepacked when it is a constant.
    fn packing_for(&self) -> PackingFor {
        PackingFor::new(self.s.m, self.s.k, self.s.n).b_packed(self.packed_b.is_some())
    }
}

impl Kernel for MatMulKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 1)?;
        check_shape(a, &self.a_shape, "input 0 (A)")?;
        check_shape(b, &self.b_shape, "input 1 (B)")?;
        let (av, bv) = (a.as_slice::<f32>()?, b.as_slice::<f32>()?);
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        check_shape(y, &self.s.output, "the output")?;
        let yv = y.as_mut_slice::<f32>()?;
        let MatMulShapes { m, k, n, .. } = self.s;
        if yv.is_empty() {
            return Ok(());
        }
        let batches = self.a_index.len();
        let one = |out: &mut [f32], ia: usize, ib: usize, packing: Packing| {
            let a_mat = MatRef {
                data: av.get(ia * m * k..).unwrap_or(&[]),
                rs: k,
                cs: 1,
            };
            let b_mat = match &self.packed_b {
                Some(p) => Operand::Packed(&p[ib]),
                None => Operand::Mat(MatRef {
                    data: bv.get(ib * k * n..).unwrap_or(&[]),
                    rs: n,
                    cs: 1,
                }),
            };
            let c = MatMut {
                data: out,
                rs: n,
                cs: 1,
            };
            let epi = Epilogue::default();
            let a_mat = Operand::Mat(a_mat);
            self.gemm
                .gemm(m, k, n, 1.0, a_mat, b_mat, false, c, &epi, packing)
        };
        // With a product per worker or more, each worker takes whole products (packing in
        // its own region); otherwise the products take turns, each over all the workers.
        let workers = split::worth(Cost::flops(2 * m * n * k * batches));
        if batches > 1 && workers > 1 && batches >= workers {
            // Whole products per task.
            let tasks = split::cut(yv.len(), m * n, workers, 1);
            split::try_chunks(yv, tasks, |start, outs| {
                let first = start / (m * n).max(1);
                scratch.with_thread(|carve| {
                    let packs = Packs::carve(carve, self.packing_for())?;
                    for (i, out) in outs.chunks_mut((m * n).max(1)).enumerate() {
                        let (ia, ib) = (self.a_index[first + i], self.b_index[first + i]);
                        let (a, b) = (&mut *packs.a, &mut *packs.b);
                        one(out, ia, ib, Packing::Serial(Packs { a, b }))?;
                    }
                    Ok(())
                })
            })
        } else {
            yv.chunks_mut(m * n)
                .zip(self.a_index.iter().zip(&self.b_index))
                .try_for_each(|(out, (&ia, &ib))| one(out, ia, ib, Packing::Parallel(scratch)))
        }
    }

    fn name(&self) -> &str {
        "cpu.matmul"
    }

    fn scratch(&self, _threads: usize) -> ScratchNeed {
        ScratchNeed::for_each_thread(self.packing_for().bytes())
    }

    fn prepacked_bytes(&self) -> usize {
        self.packed_b.as_deref().map_or(0, packed_bytes)
    }
}

/// How Gemm's C enters the product.
#[derive(Debug)]
enum CMode {
    None,
    /// C broadcasts along rows: one value per column (`[n]`, `[1, n]`, scalars).
    Col,
    /// One value per row (`[m, 1]`).
    Row,
    /// A full `[m, n]`: prefill Y with `beta * C` and accumulate.
    Full,
}

#[derive(Debug)]
pub struct GemmKernel {
    gemm: Sgemm,
    op: ferrolite_core::ops::linalg::gemm::Gemm,
    m: usize,
    k: usize,
    n: usize,
    a_shape: Vec<usize>,
    b_shape: Vec<usize>,
    /// C's shape and, per output element, the C element broadcast onto it.
    c: Option<(Vec<usize>, Vec<usize>)>,
    c_mode: CMode,
    packed_b: Option<PackedMatrix>,
}

impl GemmKernel {
    pub fn new(
        gemm: Sgemm,
        op: ferrolite_core::ops::linalg::gemm::Gemm,
        a: &[usize],
        b: &[usize],
        c: Option<&[usize]>,
        b_value: Option<&Tensor>,
        packs: &Prepacks,
    ) -> OpResult<GemmKernel> {
        let (m, k, n) = ferrolite_core::ops::linalg::gemm::gemm_dims(&op, a, b, c)?;
        let c_mode = match c {
            _ if op.beta == 0.0 => CMode::None,
            None => CMode::None,
            Some(s) => {
                let numel: usize = s.iter().product();
                let last = s.last().copied().unwrap_or(1);
                if numel <= 1 || (numel == n && last == n) {
                    CMode::Col
                } else if s.len() == 2 && s[1] == 1 && s[0] == m {
                    CMode::Row
                } else {
                    CMode::Full
                }
            }
        };
        let (brs, bcs) = if op.trans_b { (1, k) } else { (n, 1) };
        let packed_b = match b_value {
            Some(t) => Some(gemm.pack(
                k,
                n,
                MatRef {
                    data: t.as_slice::<f32>()?,
                    rs: brs,
                    cs: bcs,
                },
                Side::B,
                packs,
            )?),
            None => None,
        };
        Ok(GemmKernel {
            gemm,
            op,
            m,
            k,
            n,
            a_shape: a.to_vec(),
            b_shape: b.to_vec(),
            c: c.map(|c| (c.to_vec(), broadcast_offsets(c, &[m, n]))),
            c_mode,
            packed_b,
        })
    }

    fn activation(&self) -> Option<UnaryKind> {
        self.op.activation
    }
}

impl Kernel for GemmKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let a = required(inputs, 0)?;
        let b = required(inputs, 1)?;
        check_shape(a, &self.a_shape, "input 0 (A)")?;
        check_shape(b, &self.b_shape, "input 1 (B)")?;
        let c = match (&self.c, inputs.get(2).copied().flatten()) {
            (Some((shape, off)), Some(t)) => {
                check_shape(t, shape, "input 2 (C)")?;
                Some((t.as_slice::<f32>()?, off))
            }
            (None, None) => None,
            _ => return Err(OpError("input 2 (C) presence differs from the plan".into())),
        };
        let (av, bv) = (a.as_slice::<f32>()?, b.as_slice::<f32>()?);
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        let (m, k, n) = (self.m, self.k, self.n);
        check_shape(y, &[m, n], "the output")?;
        let yv = y.as_mut_slice::<f32>()?;
        if yv.is_empty() {
            return Ok(());
        }
        let beta = self.op.beta;
        let mut bias_buf = Vec::new();
        let mut accumulate = false;
        let mode = if c.is_some() {
            &self.c_mode
        } else {
            &CMode::None
        };
        let bias = match (mode, c) {
            (CMode::Col, Some((cv, off))) => {
                bias_buf.extend(off[..n].iter().map(|&o| beta * cv[o]));
                Bias::Col(&bias_buf)
            }
            (CMode::Row, Some((cv, off))) => {
                bias_buf.extend((0..m).map(|i| beta * cv[off[i * n]]));
                Bias::Row(&bias_buf)
            }
            (CMode::Full, Some((cv, off))) => {
                yv.iter_mut()
                    .zip(off.iter())
                    .for_each(|(y, &o)| *y = beta * cv[o]);
                accumulate = true;
                Bias::None
            }
            _ => Bias::None,
        };
        // Element (i, p) of op(A): transposed storage swaps the strides.
        let (ars, acs) = if self.op.trans_a { (1, m) } else { (k, 1) };
        let (brs, bcs) = if self.op.trans_b { (1, k) } else { (n, 1) };
        let a_mat = Operand::Mat(MatRef {
            data: av,
            rs: ars,
            cs: acs,
        });
        let b_mat = match &self.packed_b {
            Some(p) => Operand::Packed(p),
            None => Operand::Mat(MatRef {
                data: bv,
                rs: brs,
                cs: bcs,
            }),
        };
        let c = MatMut {
            data: yv,
            rs: n,
            cs: 1,
        };
        let epi = Epilogue {
            bias,
            activation: self.activation(),
        };
        self.gemm.gemm(
            m,
            k,
            n,
            self.op.alpha,
            a_mat,
            b_mat,
            accumulate,
            c,
            &epi,
            Packing::Parallel(scratch),
        )
    }

    fn name(&self) -> &str {
        "cpu.gemm"
    }

    fn scratch(&self, _threads: usize) -> ScratchNeed {
        let product = PackingFor::new(self.m, self.k, self.n).b_packed(self.packed_b.is_some());
        ScratchNeed::for_each_thread(product.bytes())
    }

    fn prepacked_bytes(&self) -> usize {
        self.packed_b.as_ref().map_or(0, PackedMatrix::bytes)
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<MatMul>(
        "cpu.matmul",
        "MatMul",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |_, r| {
            let (a, b) = (f32_shape(r.req, 0)?, f32_shape(r.req, 1)?);
            let k = MatMulKernel::new(r.cx.gemm(), a, b, constant(r.req, 1), r.req.packs);
            built(k.map(Some), "")
        },
    );
    r.add::<GemmOp>(
        "cpu.gemm",
        "Gemm",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |g, r| {
            let (a, b) = (f32_shape(r.req, 0)?, f32_shape(r.req, 1)?);
            let c = shape(r.req, 2);
            let k = GemmKernel::new(
                r.cx.gemm(),
                g.clone(),
                a,
                b,
                c,
                constant(r.req, 1),
                r.req.packs,
            );
            built(k.map(Some), "")
        },
    );
}
