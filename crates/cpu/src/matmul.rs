//! f32 MatMul (batched, broadcast) and Gemm on the [`Gemm`] trait, parallel over batches and
//! row blocks.

use crate::gemm::{Gemm, MatMut, MatRef};
use ferrolite_core::op::required;
use ferrolite_core::ops::linalg::matmul::MatMulShapes;
use ferrolite_core::ops::util::broadcast_offsets;
use ferrolite_core::plan::Kernel;
use ferrolite_core::{op_ensure, OpError, OpResult, Tensor};
use rayon::prelude::*;
use std::sync::Arc;

/// Rows per parallel task: enough tasks for the threads, but not tiny GEMMs.
fn row_block(m: usize, batches: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    if batches >= threads {
        return m.max(1);
    }
    let per = m.div_ceil(threads.div_ceil(batches.max(1)));
    per.max(16).min(m.max(1))
}

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
    gemm: Arc<dyn Gemm>,
    s: MatMulShapes,
    a_shape: Vec<usize>,
    b_shape: Vec<usize>,
    a_index: Vec<usize>,
    b_index: Vec<usize>,
}

impl MatMulKernel {
    pub fn new(gemm: Arc<dyn Gemm>, a: &[usize], b: &[usize]) -> OpResult<MatMulKernel> {
        let s = MatMulShapes::new(a, b)?;
        let (a_index, b_index) = s.batch_indices();
        Ok(MatMulKernel {
            gemm,
            s,
            a_shape: a.to_vec(),
            b_shape: b.to_vec(),
            a_index,
            b_index,
        })
    }
}

impl Kernel for MatMulKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
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
        let rb = row_block(m, self.a_index.len());
        yv.par_chunks_mut(m * n)
            .zip(self.a_index.par_iter().zip(&self.b_index))
            .try_for_each(|(out, (&ia, &ib))| {
                let a_mat = av.get(ia * m * k..).unwrap_or(&[]);
                let b_mat = MatRef {
                    data: bv.get(ib * k * n..).unwrap_or(&[]),
                    rs: n,
                    cs: 1,
                };
                out.par_chunks_mut(rb * n)
                    .enumerate()
                    .try_for_each(|(r, rows)| {
                        let r0 = r * rb;
                        let mr = rows.len() / n;
                        let a_rows = MatRef {
                            data: a_mat.get(r0 * k..).unwrap_or(&[]),
                            rs: k,
                            cs: 1,
                        };
                        let c = MatMut {
                            data: rows,
                            rs: n,
                            cs: 1,
                        };
                        self.gemm.sgemm(mr, k, n, 1.0, a_rows, b_mat, 0.0, c)
                    })
            })
    }

    fn name(&self) -> &str {
        "cpu.matmul"
    }
}

#[derive(Debug)]
pub struct GemmKernel {
    gemm: Arc<dyn Gemm>,
    op: ferrolite_core::ops::linalg::gemm::Gemm,
    m: usize,
    k: usize,
    n: usize,
    a_shape: Vec<usize>,
    b_shape: Vec<usize>,
    /// C's shape and, per output element, the C element broadcast onto it.
    c: Option<(Vec<usize>, Vec<usize>)>,
}

impl GemmKernel {
    pub fn new(
        gemm: Arc<dyn Gemm>,
        op: ferrolite_core::ops::linalg::gemm::Gemm,
        a: &[usize],
        b: &[usize],
        c: Option<&[usize]>,
    ) -> OpResult<GemmKernel> {
        let (m, k, n) = ferrolite_core::ops::linalg::gemm::gemm_dims(&op, a, b, c)?;
        Ok(GemmKernel {
            gemm,
            op,
            m,
            k,
            n,
            a_shape: a.to_vec(),
            b_shape: b.to_vec(),
            c: c.map(|c| (c.to_vec(), broadcast_offsets(c, &[m, n]))),
        })
    }
}

impl Kernel for GemmKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
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
        let use_c = c.is_some() && beta != 0.0;
        if let (true, Some((cv, off))) = (use_c, c) {
            yv.par_iter_mut()
                .zip(off.par_iter())
                .for_each(|(y, &o)| *y = beta * cv[o]);
        }
        // Element (i, p) of op(A): transposed storage swaps the strides.
        let (ars, acs) = if self.op.trans_a { (1, m) } else { (k, 1) };
        let (brs, bcs) = if self.op.trans_b { (1, k) } else { (n, 1) };
        let b_mat = MatRef {
            data: bv,
            rs: brs,
            cs: bcs,
        };
        let rb = row_block(m, 1);
        yv.par_chunks_mut(rb * n)
            .enumerate()
            .try_for_each(|(r, rows)| {
                let r0 = r * rb;
                let mr = rows.len() / n;
                let a_rows = MatRef {
                    data: av.get(r0 * ars..).unwrap_or(&[]),
                    rs: ars,
                    cs: acs,
                };
                let c = MatMut {
                    data: rows,
                    rs: n,
                    cs: 1,
                };
                let beta = if use_c { 1.0 } else { 0.0 };
                self.gemm
                    .sgemm(mr, k, n, self.op.alpha, a_rows, b_mat, beta, c)
            })
    }

    fn name(&self) -> &str {
        "cpu.gemm"
    }
}
