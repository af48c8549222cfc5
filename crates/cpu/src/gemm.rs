//! The single-precision GEMM interface the kernels use, and its implementation [`Sgemm`] on
//! our packed microkernels ([`crate::sgemm`]).
//!
//! [`Gemm`] has one implementation today. It is the seam the project keeps for another GEMM
//! (a GEMM crate, a vendor library): the convolution, MatMul, FullyConnected and Winograd
//! kernels are written against the trait and its packing types, so a second implementation
//! replaces `Sgemm` without touching them.

use crate::sgemm::{pack_full, pack_lines_into, Isa, Problem, Src, MR, NR};
pub use crate::sgemm::{Packing, PackingFor, Packs};
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::prepacked::{Packed, Prepacks};
use ferrolite_core::scratch::{Scratch, ScratchNeed};
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

/// Which side of a product a [`PackedMatrix`] was packed for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Left operand (`A`, `m x k`): panels of [`MR`] rows.
    A,
    /// Right operand (`B`, `k x n`): panels of [`NR`] columns.
    B,
}

/// A matrix packed once (e.g. constant weights) into the microkernel's panel layout, for
/// repeated products on the side it was packed for.
#[derive(Clone, Debug, PartialEq)]
pub struct PackedMatrix {
    pub rows: usize,
    pub cols: usize,
    pub side: Side,
    data: Packed<f32>,
}

/// Bytes the packed matrices own (see [`ferrolite_core::plan::Kernel::prepacked_bytes`]).
pub(crate) fn packed_bytes(ms: &[PackedMatrix]) -> usize {
    ms.iter().map(PackedMatrix::bytes).sum()
}

impl PackedMatrix {
    /// Bytes of the packed values.
    pub fn bytes(&self) -> usize {
        self.data.bytes()
    }

    /// The packed values (the driver's layout).
    pub(crate) fn data(&self) -> &[f32] {
        &self.data
    }

    /// A `rows x cols` operand for `side` from values already in the panel layout (a
    /// [`prepacked`] buffer of the right length).
    pub(crate) fn from_packed(rows: usize, cols: usize, side: Side, data: Packed<f32>) -> Self {
        debug_assert_eq!(data.len(), Self::packed_len(rows, cols, side));
        PackedMatrix {
            rows,
            cols,
            side,
            data,
        }
    }

    /// Values in the panel layout of a `rows x cols` operand for `side`.
    pub(crate) fn packed_len(rows: usize, cols: usize, side: Side) -> usize {
        match side {
            Side::A => rows.div_ceil(MR) * MR * cols,
            Side::B => cols.div_ceil(NR) * NR * rows,
        }
    }

    /// The packed values, taken out.
    pub(crate) fn into_data(self) -> Vec<f32> {
        self.data.into_vec()
    }

    /// An all-zero `rows x cols` left operand, to be filled block by block with
    /// [`PackedMatrix::pack_rows`] (so the unpacked matrix never has to exist whole).
    pub fn zeros_a(rows: usize, cols: usize) -> PackedMatrix {
        PackedMatrix {
            rows,
            cols,
            side: Side::A,
            data: Packed::zeros(rows.div_ceil(MR) * MR * cols),
        }
    }

    /// Packs rows `r0..r0 + n` of a left operand from `src` (`n x cols`); `r0` must be a
    /// multiple of [`MR`].
    pub fn pack_rows(&mut self, r0: usize, n: usize, src: MatRef) -> OpResult<()> {
        op_ensure!(
            self.side == Side::A && r0.is_multiple_of(MR) && r0 + n <= self.rows,
            "pack_rows: rows {r0}..{} of a {:?} operand of {} rows",
            r0 + n,
            self.side,
            self.rows
        );
        check(n, self.cols, src.data.len(), src.rs, src.cs, "row block")?;
        let (rows, cols) = (self.rows, self.cols);
        pack_lines_into(
            self.data.as_mut_slice(),
            src.data,
            src.rs,
            src.cs,
            r0,
            n,
            rows,
            cols,
            MR,
        );
        Ok(())
    }
}

/// An operand of [`Gemm::gemm`].
#[derive(Clone, Copy, Debug)]
pub enum Operand<'a> {
    Mat(MatRef<'a>),
    Packed(&'a PackedMatrix),
}

/// Bias added by the epilogue.
#[derive(Clone, Copy, Debug, Default)]
pub enum Bias<'a> {
    #[default]
    None,
    /// One value per row of C (`m` values), e.g. a conv output channel.
    Row(&'a [f32]),
    /// One value per column of C (`n` values).
    Col(&'a [f32]),
}

/// Applied to each element of C as the product is stored: bias, then activation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Epilogue<'a> {
    pub bias: Bias<'a>,
    pub activation: Option<UnaryKind>,
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
    /// `C = alpha * A * B (+ C when accumulate)`, then the epilogue, with `A: m x k`,
    /// `B: k x n`, `C: m x n`. Without `accumulate` C is overwritten without being read.
    /// `packing` says where it packs blocks of its operands, and whether it may split the
    /// work over the current rayon pool. Errors when a slice is too short for its shape and
    /// strides, C's strides alias elements, or a packed operand does not match.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        m: usize,
        k: usize,
        n: usize,
        alpha: f32,
        a: Operand,
        b: Operand,
        accumulate: bool,
        c: MatMut,
        epilogue: &Epilogue,
        packing: Packing,
    ) -> OpResult<()>;

    /// Packs a `rows x cols` matrix for use as the given side of many products.
    /// An optimized model may hold the packed copy already (`packs`, see
    /// `ferrolite_core::prepacked`).
    fn pack(
        &self,
        rows: usize,
        cols: usize,
        src: MatRef,
        side: Side,
        packs: &Prepacks,
    ) -> OpResult<PackedMatrix>;

    /// `C = alpha * A * B + beta * C` (BLAS convention; with `beta` 0, C is not read).
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
    ) -> OpResult<()> {
        let c = if beta != 0.0 && beta != 1.0 {
            check(m, n, c.data.len(), c.rs, c.cs, "C")?;
            for i in 0..m {
                for j in 0..n {
                    c.data[i * c.rs + j * c.cs] *= beta;
                }
            }
            c
        } else {
            c
        };
        let (a, b) = (Operand::Mat(a), Operand::Mat(b));
        with_own_packing(m, k, n, false, |packing| {
            self.gemm(
                m,
                k,
                n,
                alpha,
                a,
                b,
                beta != 0.0,
                c,
                &Epilogue::default(),
                packing,
            )
        })
    }
}

/// Runs `f` with packing memory of its own for an `m x k` by `k x n` product, split over the
/// current rayon pool when `parallel`: for products outside a plan (tests, tools). Kernels
/// declare theirs ([`PackingFor::bytes`]) and take it from the plan's scratch.
pub fn with_own_packing<R>(
    m: usize,
    k: usize,
    n: usize,
    parallel: bool,
    f: impl FnOnce(Packing) -> OpResult<R>,
) -> OpResult<R> {
    let product = PackingFor::new(m, k, n);
    let bytes = product.bytes();
    if parallel {
        let scratch = Scratch::for_need(ScratchNeed::for_each_thread(bytes));
        f(Packing::Parallel(&scratch))
    } else {
        let scratch = Scratch::new(ScratchNeed::for_run(bytes), 1);
        scratch.with_shared(|carve| f(Packing::Serial(Packs::carve(carve, product)?)))
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

/// The packed GEMM of [`crate::sgemm`] with a chosen microkernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sgemm {
    pub isa: Isa,
}

impl Default for Sgemm {
    fn default() -> Self {
        Sgemm { isa: Isa::detect() }
    }
}

impl Sgemm {
    /// The plain-Rust microkernel (for tests and non-x86 CPUs).
    pub fn portable() -> Self {
        Sgemm { isa: Isa::Portable }
    }

    /// Validates an operand; `rows x cols` as seen by the product.
    fn src<'a>(op: Operand<'a>, rows: usize, cols: usize, side: Side) -> OpResult<Src<'a>> {
        match op {
            Operand::Mat(r) => {
                check(rows, cols, r.data.len(), r.rs, r.cs, "operand")?;
                Ok(Src::Strided {
                    data: r.data,
                    rs: r.rs,
                    cs: r.cs,
                })
            }
            Operand::Packed(p) => {
                op_ensure!(
                    p.rows == rows && p.cols == cols && p.side == side,
                    "gemm: packed {:?} operand is {}x{}, expected {side:?} {rows}x{cols}",
                    p.side,
                    p.rows,
                    p.cols
                );
                Ok(Src::Packed(p.data.as_slice()))
            }
        }
    }
}

impl Gemm for Sgemm {
    fn gemm(
        &self,
        m: usize,
        k: usize,
        n: usize,
        alpha: f32,
        a: Operand,
        b: Operand,
        accumulate: bool,
        c: MatMut,
        epilogue: &Epilogue,
        packing: Packing,
    ) -> OpResult<()> {
        let a = Self::src(a, m, k, Side::A)?;
        let b = Self::src(b, k, n, Side::B)?;
        check(m, n, c.data.len(), c.rs, c.cs, "C")?;
        op_ensure!(
            distinct(m, n, c.rs, c.cs),
            "gemm: C strides ({}, {}) alias elements of a {m}x{n} matrix",
            c.rs,
            c.cs
        );
        let (row_bias, col_bias) = match epilogue.bias {
            Bias::None => (&[][..], &[][..]),
            Bias::Row(b) => {
                op_ensure!(
                    b.len() >= m,
                    "gemm: row bias has {} values for {m} rows",
                    b.len()
                );
                (b, &[][..])
            }
            Bias::Col(b) => {
                op_ensure!(
                    b.len() >= n,
                    "gemm: column bias has {} values for {n} columns",
                    b.len()
                );
                (&[][..], b)
            }
        };
        if m == 0 || n == 0 {
            return Ok(());
        }
        let p = Problem {
            isa: self.isa,
            m,
            n,
            k,
            alpha,
            a,
            b,
            accumulate,
            row_bias,
            col_bias,
            act: epilogue.activation,
        };
        if c.cs == 1 && (m == 1 || c.rs >= n) {
            // SAFETY: C (row stride c.rs, contiguous columns) fits its slice (checked above),
            // rows do not overlap, and it is borrowed mutably, so no one else touches it.
            unsafe { p.run(c.data.as_mut_ptr(), c.rs, packing)? };
        } else {
            // Other layouts: compute into a dense buffer, then scatter.
            let mut t = vec![0.0f32; m * n];
            if accumulate {
                for i in 0..m {
                    for j in 0..n {
                        t[i * n + j] = c.data[i * c.rs + j * c.cs];
                    }
                }
            }
            // SAFETY: t is a dense m x n buffer owned here.
            unsafe { p.run(t.as_mut_ptr(), n, packing)? };
            for i in 0..m {
                for j in 0..n {
                    c.data[i * c.rs + j * c.cs] = t[i * n + j];
                }
            }
        }
        Ok(())
    }

    fn pack(
        &self,
        rows: usize,
        cols: usize,
        src: MatRef,
        side: Side,
        packs: &Prepacks,
    ) -> OpResult<PackedMatrix> {
        check(rows, cols, src.data.len(), src.rs, src.cs, "packed matrix")?;
        // A stored copy from an optimized model when there is one (the layout depends only on
        // the side, the shape and the panel widths).
        let len = PackedMatrix::packed_len(rows, cols, side);
        let desc = [side as usize, rows, cols, MR, NR];
        let data = packs.take(&desc, len, || match side {
            // Lines are rows of A (stride rs), depth along columns.
            Side::A => pack_full(src.data, src.rs, src.cs, rows, cols, MR),
            // Lines are columns of B, depth along rows.
            Side::B => pack_full(src.data, src.cs, src.rs, cols, rows, NR),
        });
        Ok(PackedMatrix {
            rows,
            cols,
            side,
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sgemm::KC;

    #[test]
    fn packing_by_row_blocks_equals_packing_whole() {
        for (rows, cols, block) in [
            (13, 7, 6),
            (48, KC + 44, 12),
            (50, 2 * KC + 1, 24),
            (5, 3, 6),
        ] {
            let a: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.5 - 3.0).collect();
            let whole = Sgemm::default()
                .pack(
                    rows,
                    cols,
                    MatRef {
                        data: &a,
                        rs: cols,
                        cs: 1,
                    },
                    Side::A,
                    Prepacks::none(),
                )
                .unwrap();
            let mut blocks = PackedMatrix::zeros_a(rows, cols);
            for r0 in (0..rows).step_by(block) {
                let n = block.min(rows - r0);
                let src = MatRef {
                    data: &a[r0 * cols..(r0 + n) * cols],
                    rs: cols,
                    cs: 1,
                };
                blocks.pack_rows(r0, n, src).unwrap();
            }
            assert_eq!(blocks, whole, "{rows}x{cols} by {block}");
        }
        // Misaligned or out-of-range blocks are refused.
        let mut p = PackedMatrix::zeros_a(12, 4);
        let src = MatRef {
            data: &[0.0; 24],
            rs: 4,
            cs: 1,
        };
        assert!(p.pack_rows(3, 6, src).is_err());
        assert!(p.pack_rows(12, 6, src).is_err());
    }

    #[test]
    fn strided_product_and_checks() {
        for g in crate::tests::tested_isas()
            .into_iter()
            .map(|isa| Sgemm { isa })
        {
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
        }
    }

    fn naive(m: usize, k: usize, n: usize, a: MatRef, b: MatRef) -> Vec<f32> {
        let mut c = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    c[i * n + j] +=
                        a.data[i * a.rs + p * a.cs] as f64 * b.data[p * b.rs + j * b.cs] as f64;
                }
            }
        }
        c.into_iter().map(|v| v as f32).collect()
    }

    /// Blocked sizes (k > KC, m > MC, n > NC), tails, transposed operands, packed operands,
    /// epilogues, both microkernels, serial and parallel.
    #[test]
    fn packed_gemm_matches_naive() {
        let mut seed = 1u64;
        let mut rnd = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let sizes = [
            (1, 1, 1),
            (5, 3, 17),
            (6, 16, 16),
            (7, KC + 44, 33),
            (13, 1, 2100),
            (130, KC + 1, 40),
            (2, 2 * KC + 88, 5),
            (250, 70, 90),
            // Pairs of full B panels past the short-k depth (AVX-512's 6 x 32 tiles), with
            // odd rows and a partial last panel.
            (37, 65, 70),
            (6, 200, 64),
            // The tiny-M streaming path: m = 1..4 (and 5..7 just above it), odd n and k,
            // k across KC blocks, n with partial strips.
            (1, 576, 1024),
            (1, 1024, 1000),
            (1, 3, 15),
            (2, 7, 33),
            (2, KC + 1, 16),
            (3, KC + 44, 17),
            (4, 2 * KC + 1, 50),
            (4, 1, 1),
            (5, 9, 31),
            (6, 33, 47),
            (7, 17, 3),
        ];
        for g in crate::tests::tested_isas()
            .into_iter()
            .map(|isa| Sgemm { isa })
        {
            for &(m, k, n) in &sizes {
                let av: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
                let bv: Vec<f32> = (0..k * n).map(|_| rnd()).collect();
                let rb: Vec<f32> = (0..m).map(|_| rnd()).collect();
                let cb: Vec<f32> = (0..n).map(|_| rnd()).collect();
                for (ta, tb) in [(false, false), (true, true)] {
                    let a = if ta {
                        MatRef {
                            data: &av,
                            rs: 1,
                            cs: m,
                        }
                    } else {
                        MatRef {
                            data: &av,
                            rs: k,
                            cs: 1,
                        }
                    };
                    let b = if tb {
                        MatRef {
                            data: &bv,
                            rs: 1,
                            cs: k,
                        }
                    } else {
                        MatRef {
                            data: &bv,
                            rs: n,
                            cs: 1,
                        }
                    };
                    let want = naive(m, k, n, a, b);
                    let pa = g.pack(m, k, a, Side::A, Prepacks::none()).unwrap();
                    let pb = g.pack(k, n, b, Side::B, Prepacks::none()).unwrap();
                    let acts = [
                        None,
                        Some(UnaryKind::Relu),
                        Some(UnaryKind::Clip {
                            min: -0.5,
                            max: 0.5,
                        }),
                        Some(UnaryKind::LeakyRelu { alpha: 0.1 }),
                        Some(UnaryKind::HardSigmoid {
                            alpha: 0.2,
                            beta: 0.5,
                        }),
                        Some(UnaryKind::HardSwish),
                        Some(UnaryKind::Sigmoid),
                        None,
                        Some(UnaryKind::Relu),
                    ];
                    for (t, act) in acts.into_iter().enumerate() {
                        let bias = match t % 3 {
                            0 => Bias::None,
                            1 => Bias::Row(&rb),
                            _ => Bias::Col(&cb),
                        };
                        let (oa, ob) = match t % 4 {
                            0 => (Operand::Mat(a), Operand::Mat(b)),
                            1 => (Operand::Packed(&pa), Operand::Mat(b)),
                            2 => (Operand::Mat(a), Operand::Packed(&pb)),
                            _ => (Operand::Packed(&pa), Operand::Packed(&pb)),
                        };
                        let alpha = if t == 2 { 0.5 } else { 1.0 };
                        let init: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
                        // Column bias: scaled (t = 2), the plain fast epilogue (5), added to
                        // C (8).
                        let accumulate = (t % 2 == 1 && t != 5) || t == 8;
                        let mut c = init.clone();
                        let epi = Epilogue {
                            bias,
                            activation: act,
                        };
                        pool.install(|| {
                            with_own_packing(m, k, n, t % 2 == 0, |packing| {
                                g.gemm(
                                    m,
                                    k,
                                    n,
                                    alpha,
                                    oa,
                                    ob,
                                    accumulate,
                                    MatMut {
                                        data: &mut c,
                                        rs: n,
                                        cs: 1,
                                    },
                                    &epi,
                                    packing,
                                )
                            })
                        })
                        .unwrap();
                        for i in 0..m {
                            for j in 0..n {
                                let mut v = alpha * want[i * n + j];
                                if accumulate {
                                    v += init[i * n + j];
                                }
                                match bias {
                                    Bias::Row(r) => v += r[i],
                                    Bias::Col(cb) => v += cb[j],
                                    Bias::None => {}
                                }
                                if let Some(a) = act {
                                    v = a.apply(v);
                                }
                                let got = c[i * n + j];
                                assert!(
                                    (got - v).abs() <= 1e-4 * (1.0 + k as f32).sqrt(),
                                    "{g:?} {m}x{k}x{n} t={t} ({i},{j}): {got} vs {v}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod bench {
    use super::*;

    /// `cargo test --release -p ferrolite-cpu -- --ignored --nocapture gemm_speed`
    #[test]
    #[ignore]
    fn gemm_speed() {
        for &(m, k, n) in &[
            (1usize, 576usize, 1024usize),
            (1, 1024, 1000),
            (1, 1280, 1000),
            (16, 64, 3025),
            (64, 16, 3025),
            (64, 576, 3136),
            (66, 576, 2048),
            (64, 576, 512),
            (120, 576, 512),
            (64, 256, 512),
            (512, 512, 512),
            (256, 2304, 196),
            (512, 4608, 49),
        ] {
            let a = vec![0.5f32; m * k];
            let b = vec![0.25f32; k * n];
            let mut c = vec![0.0f32; m * n];
            let g = Sgemm::default();
            let pa = g
                .pack(
                    m,
                    k,
                    MatRef {
                        data: &a,
                        rs: k,
                        cs: 1,
                    },
                    Side::A,
                    Prepacks::none(),
                )
                .unwrap();
            let pb = (m <= 4).then(|| {
                g.pack(
                    k,
                    n,
                    MatRef {
                        data: &b,
                        rs: n,
                        cs: 1,
                    },
                    Side::B,
                    Prepacks::none(),
                )
                .unwrap()
            });
            // Wall clock over enough repetitions (the thread CPU clock ticks too coarsely).
            let reps = (2e8 / (2 * m * k * n) as f64).clamp(20.0, 20000.0) as usize;
            let t = std::time::Instant::now();
            for _ in 0..reps {
                let c = MatMut {
                    data: &mut c,
                    rs: n,
                    cs: 1,
                };
                let bm = MatRef {
                    data: &b,
                    rs: n,
                    cs: 1,
                };
                // Tiny m: the classifier-head case (activations times packed weights).
                let (oa, ob) = match &pb {
                    Some(pb) => (
                        Operand::Mat(MatRef {
                            data: &a,
                            rs: k,
                            cs: 1,
                        }),
                        Operand::Packed(pb),
                    ),
                    None => (Operand::Packed(&pa), Operand::Mat(bm)),
                };
                with_own_packing(m, k, n, false, |packing| {
                    g.gemm(
                        m,
                        k,
                        n,
                        1.0,
                        oa,
                        ob,
                        false,
                        c,
                        &Epilogue::default(),
                        packing,
                    )
                })
                .unwrap();
            }
            let s = t.elapsed().as_secs_f64() / reps as f64;
            println!(
                "{m}x{k}x{n}: {:.1} GFLOP/s",
                2.0 * (m * k * n) as f64 / s / 1e9
            );
        }
    }
}
