//! The single-precision GEMM interface the kernels use, and its implementation on the
//! `matrixmultiply` crate. Kernels only see [`Gemm`], so the implementation can change
//! (own microkernels, true prepacking) without touching them.

use ferrolite_core::{op_ensure, OpResult};
use std::fmt::Debug;

/// A read-only strided matrix: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

/// A writable strided matrix.
#[derive(Debug)]
pub struct MatMut<'a> {
    pub data: &'a mut [f32],
    pub rs: usize,
    pub cs: usize,
}

/// A matrix prepared once (e.g. constant weights) for repeated products. Today a contiguous
/// row-major copy; a GEMM with its own packing format can store that here instead.
#[derive(Clone, Debug, PartialEq)]
pub struct PackedMatrix {
    pub rows: usize,
    pub cols: usize,
    data: Vec<f32>,
}

impl PackedMatrix {
    pub fn as_ref(&self) -> MatRef<'_> {
        MatRef {
            data: &self.data,
            rs: self.cols,
            cs: 1,
        }
    }
}

/// Elements spanned by a `rows x cols` matrix with the given strides (0 when empty).
fn extent(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1)
        .checked_mul(rs)?
        .checked_add((cols - 1).checked_mul(cs)?)?
        .checked_add(1)
}

/// Whether distinct `(i, j)` of a `rows x cols` matrix map to distinct elements (for the
/// layouts kernels use: row- or column-major with any leading dimension).
fn distinct(rows: usize, cols: usize, rs: usize, cs: usize) -> bool {
    if rows <= 1 {
        cols <= 1 || cs >= 1
    } else if cols <= 1 {
        rs >= 1
    } else {
        (cs >= 1 && rs >= cols.saturating_mul(cs)) || (rs >= 1 && cs >= rows.saturating_mul(rs))
    }
}

pub trait Gemm: Debug + Send + Sync {
    /// `C = alpha * A * B + beta * C` with `A: m x k`, `B: k x n`, `C: m x n`. When `beta` is 0,
    /// C is overwritten without being read (stale NaNs do not leak). Errors when a slice is too
    /// short for its shape and strides, or C's strides alias elements.
    #[allow(clippy::too_many_arguments)]
    fn sgemm(
        &self,
        m: usize,
        k: usize,
        n: usize,
        alpha: f32,
        a: MatRef,
        b: MatRef,
        beta: f32,
        c: MatMut,
    ) -> OpResult<()>;

    /// Prepares a `rows x cols` matrix for use as an operand of many products.
    fn pack(&self, rows: usize, cols: usize, src: MatRef) -> OpResult<PackedMatrix> {
        check(rows, cols, src.data.len(), src.rs, src.cs, "packed matrix")?;
        let mut data = Vec::with_capacity(rows * cols);
        for i in 0..rows {
            for j in 0..cols {
                data.push(src.data[i * src.rs + j * src.cs]);
            }
        }
        Ok(PackedMatrix { rows, cols, data })
    }
}

fn check(rows: usize, cols: usize, len: usize, rs: usize, cs: usize, what: &str) -> OpResult<()> {
    let need = extent(rows, cols, rs, cs);
    op_ensure!(
        need.is_some_and(|e| e <= len),
        "gemm: {what} of {rows}x{cols} with strides ({rs}, {cs}) does not fit in {len} elements"
    );
    Ok(())
}

/// [`Gemm`] on the `matrixmultiply` crate (single-threaded; kernels parallelise around it).
#[derive(Clone, Copy, Debug, Default)]
pub struct MatrixMultiply;

impl Gemm for MatrixMultiply {
    fn sgemm(
        &self,
        m: usize,
        k: usize,
        n: usize,
        alpha: f32,
        a: MatRef,
        b: MatRef,
        beta: f32,
        c: MatMut,
    ) -> OpResult<()> {
        check(m, k, a.data.len(), a.rs, a.cs, "A")?;
        check(k, n, b.data.len(), b.rs, b.cs, "B")?;
        check(m, n, c.data.len(), c.rs, c.cs, "C")?;
        op_ensure!(
            distinct(m, n, c.rs, c.cs),
            "gemm: C strides ({}, {}) alias elements of a {m}x{n} matrix",
            c.rs,
            c.cs
        );
        if m == 0 || n == 0 {
            return Ok(());
        }
        if k == 0 {
            for i in 0..m {
                for j in 0..n {
                    let e = &mut c.data[i * c.rs + j * c.cs];
                    *e = if beta == 0.0 { 0.0 } else { beta * *e };
                }
            }
            return Ok(());
        }
        let big = |v: usize| isize::try_from(v).is_ok();
        op_ensure!(
            [a.rs, a.cs, b.rs, b.cs, c.rs, c.cs].into_iter().all(big),
            "gemm: strides too large"
        );
        // SAFETY: the checks above guarantee every element (i, j) addressed through the given
        // strides lies inside its slice (extent <= len), that C's elements are distinct, and C
        // is borrowed mutably so it aliases neither A nor B. matrixmultiply only reads A and B
        // and writes C within those extents, single-threaded.
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                alpha,
                a.data.as_ptr(),
                a.rs as isize,
                a.cs as isize,
                b.data.as_ptr(),
                b.rs as isize,
                b.cs as isize,
                beta,
                c.data.as_mut_ptr(),
                c.rs as isize,
                c.cs as isize,
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_product_and_checks() {
        let g = MatrixMultiply;
        // A 2x3 row-major, B given transposed (3x2 viewed through strides of a 2x3).
        let a = [1.0f32, 2., 3., 4., 5., 6.];
        let bt = [7.0f32, 9., 11., 8., 10., 12.];
        let mut c = [f32::NAN; 4];
        g.sgemm(
            2,
            3,
            2,
            1.0,
            MatRef {
                data: &a,
                rs: 3,
                cs: 1,
            },
            MatRef {
                data: &bt,
                rs: 1,
                cs: 3,
            },
            0.0,
            MatMut {
                data: &mut c,
                rs: 2,
                cs: 1,
            },
        )
        .unwrap();
        assert_eq!(c, [58., 64., 139., 154.]);
        // Too-short slices and aliasing C are errors, not UB.
        let mut c = [0.0f32; 3];
        assert!(g
            .sgemm(
                2,
                3,
                2,
                1.0,
                MatRef {
                    data: &a,
                    rs: 3,
                    cs: 1
                },
                MatRef {
                    data: &bt,
                    rs: 1,
                    cs: 3
                },
                0.0,
                MatMut {
                    data: &mut c,
                    rs: 2,
                    cs: 1
                },
            )
            .is_err());
        let mut c = [0.0f32; 4];
        assert!(g
            .sgemm(
                2,
                3,
                2,
                1.0,
                MatRef {
                    data: &a,
                    rs: 3,
                    cs: 1
                },
                MatRef {
                    data: &bt,
                    rs: 1,
                    cs: 3
                },
                0.0,
                MatMut {
                    data: &mut c,
                    rs: 0,
                    cs: 1
                },
            )
            .is_err());
        // k = 0 with beta 0 clears C.
        let mut c = [f32::NAN; 4];
        g.sgemm(
            2,
            0,
            2,
            1.0,
            MatRef {
                data: &[],
                rs: 0,
                cs: 1,
            },
            MatRef {
                data: &[],
                rs: 2,
                cs: 1,
            },
            0.0,
            MatMut {
                data: &mut c,
                rs: 2,
                cs: 1,
            },
        )
        .unwrap();
        assert_eq!(c, [0.0; 4]);
        let p = g
            .pack(
                2,
                2,
                MatRef {
                    data: &a,
                    rs: 1,
                    cs: 3,
                },
            )
            .unwrap();
        assert_eq!(p.as_ref().data, &[1., 4., 2., 5.]);
    }
}
