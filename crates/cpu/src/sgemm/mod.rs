//! Packed, cache-blocked single-precision GEMM with a fused epilogue.
//!
//! `C[m, n] (+)= alpha * A[m, k] * B[k, n]`, then (on the last k block) a per-row or
//! per-column bias and an activation, applied while the microkernel's tile is stored.
//! A is packed into panels of [`MR`] rows, B into panels of [`NR`] columns (BLIS layout);
//! constant operands are packed once (`pack_full`) in a layout the driver reads in place.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod gemv;
#[cfg(target_arch = "aarch64")]
mod neon;

use crate::split::{self, Cost};
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::scratch::{bytes_for, Carve, Scratch};
use ferrolite_core::OpResult;

/// Rows of the microkernel tile.
pub const MR: usize = 6;
/// Columns of the microkernel tile.
pub const NR: usize = 16;
/// Depth of a packed block (A panel and B panel share it). Deep enough that most conv and
/// matmul products take one block and store C once: 256 made resnet18 5-10% slower (C
/// written and reread per block); a 1024-deep B panel (64 KB) streams from L2 well enough.
pub const KC: usize = 1024;
/// Rows of A packed at a time (a multiple of MR; about 480 KB of L2 at full depth).
const MC: usize = 120;
/// Columns of B packed at a time (a multiple of NR).
const NC: usize = 512;
/// Depth up to which a row-major B is read in place instead of packed.
const SMALL_K: usize = 64;
/// Rows of C up to which a row-major B is read in place at any depth: each B panel then
/// serves only a few tiles, and packing it would cost about as much as using it.
const FEW_ROWS: usize = 48;

pub use crate::isa::Isa;

/// The tiles of one column of C: (kc, a, rows, b, bs, c, rsc, nr, epilogue); see
/// `avx2::column` for the contract.
pub(crate) type ColumnFn =
    unsafe fn(usize, *const f32, usize, *const f32, usize, *mut f32, usize, usize, &TileEpi);
/// The same over two B panels side by side: (kc, a, rows, b0, b1, bs, c, rsc, epilogue); see
/// `avx512::column2`.
pub(crate) type Column2Fn =
    unsafe fn(usize, *const f32, usize, *const f32, *const f32, usize, *mut f32, usize, &TileEpi);
/// The full tiles of one row of C: (kc, a, b, bs, step, panels, c, rsc, mr, epilogue); see
/// `avx2::row`.
pub(crate) type RowFn =
    unsafe fn(usize, *const f32, *const f32, usize, usize, usize, *mut f32, usize, usize, &TileEpi);
/// The streaming GEMV's strip: (kc, a, lda, m, b, bs, acc); see `avx2::gemv_strip`.
pub(crate) type GemvStripFn =
    unsafe fn(usize, *const f32, usize, usize, *const f32, usize, &mut [[f32; NR]; MR]);

/// The SGEMM family's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    pub(crate) column: ColumnFn,
    pub(crate) row: RowFn,
    /// None where the ISA has no wider tile.
    pub(crate) column2: Option<Column2Fn>,
    pub(crate) gemv_strip: GemvStripFn,
}

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    column: column_portable,
    row: row_portable,
    column2: None,
    gemv_strip: gemv::strip_portable,
};

#[cfg(target_arch = "x86_64")]
pub(crate) const AVX2: Kernels = Kernels {
    column: avx2::column,
    row: avx2::row,
    column2: None,
    gemv_strip: avx2::gemv_strip,
};

#[cfg(target_arch = "x86_64")]
pub(crate) const AVX512: Kernels = Kernels {
    column: avx512::column,
    row: avx512::row,
    column2: Some(avx512::column2),
    gemv_strip: avx2::gemv_strip,
};

#[cfg(target_arch = "aarch64")]
pub(crate) const NEON: Kernels = Kernels {
    column: neon::column,
    row: neon::row,
    column2: None,
    gemv_strip: neon::gemv_strip,
};

/// [`ColumnFn`] in plain Rust: each tile as [`kernel_portable`].
///
/// # Safety
/// As [`ColumnFn`].
#[allow(clippy::too_many_arguments)]
unsafe fn column_portable(
    kc: usize,
    a: *const f32,
    rows: usize,
    b: *const f32,
    bs: usize,
    c: *mut f32,
    rsc: usize,
    nr: usize,
    e: &TileEpi,
) {
    if kc == 0 || rows == 0 {
        return;
    }
    // SAFETY: a holds the row panels and b kc rows of NR values bs apart (the contract).
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(a, rows.div_ceil(MR) * kc * MR),
            std::slice::from_raw_parts(b, (kc - 1) * bs + NR),
        )
    };
    for (ip, i) in (0..rows).step_by(MR).enumerate() {
        let apanel = &a[ip * kc * MR..][..kc * MR];
        // SAFETY: tile i of the column the caller vouches for.
        unsafe {
            let ct = c.add(i * rsc);
            let (mr, e) = (MR.min(rows - i), e.rows_from(i));
            kernel_portable(apanel, b, bs, ct, rsc, mr, nr, &e)
        }
    }
}

/// [`RowFn`] in plain Rust: each tile as [`kernel_portable`].
///
/// # Safety
/// As [`RowFn`].
#[allow(clippy::too_many_arguments)]
unsafe fn row_portable(
    kc: usize,
    a: *const f32,
    b: *const f32,
    bs: usize,
    step: usize,
    panels: usize,
    c: *mut f32,
    rsc: usize,
    mr: usize,
    e: &TileEpi,
) {
    if panels == 0 || kc == 0 {
        return;
    }
    // SAFETY: a holds one panel of kc steps, b the panels (the contract).
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(a, kc * MR),
            std::slice::from_raw_parts(b, (panels - 1) * step + (kc - 1) * bs + NR),
        )
    };
    for jp in 0..panels {
        // SAFETY: tile jp of the row the caller vouches for.
        unsafe {
            let e = e.cols_from(jp * NR);
            let b = &b[jp * step..];
            kernel_portable(a, b, bs, c.add(jp * NR), rsc, mr, NR, &e)
        }
    }
}

/// What the microkernel does when storing a tile.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TileEpi<'a> {
    pub alpha: f32,
    /// Add the tile to C's current contents (later k blocks, or a prefilled C).
    pub accumulate: bool,
    /// The last k block: apply bias and activation.
    pub last: bool,
    /// Bias of the tile's rows (empty when none; else at least `mr` long).
    pub row_bias: &'a [f32],
    /// Bias of the tile's columns (empty when none; else at least `nr` long).
    pub col_bias: &'a [f32],
    pub act: Option<UnaryKind>,
}

impl<'a> TileEpi<'a> {
    /// The same epilogue for the tile `i` rows further down (its row bias moves with it).
    pub fn rows_from(&self, i: usize) -> TileEpi<'a> {
        TileEpi {
            row_bias: self.row_bias.get(i..).unwrap_or(&[]),
            ..*self
        }
    }

    /// The same epilogue for the tile `j` columns further right (its column bias moves).
    pub fn cols_from(&self, j: usize) -> TileEpi<'a> {
        TileEpi {
            col_bias: self.col_bias.get(j..).unwrap_or(&[]),
            ..*self
        }
    }
}

/// Stores an accumulator tile through the epilogue, element by element.
///
/// # Safety
/// `c` must be valid for reads and writes of the `mr x nr` tile with row stride `rsc`, and
/// no other thread may access that tile meanwhile.
pub(crate) unsafe fn store_scalar(
    acc: &[[f32; NR]; MR],
    c: *mut f32,
    rsc: usize,
    mr: usize,
    nr: usize,
    e: &TileEpi,
) {
    for (i, row) in acc.iter().enumerate().take(mr) {
        for (j, &a) in row.iter().enumerate().take(nr) {
            // SAFETY: (i, j) lies in the tile the caller vouches for.
            let p = unsafe { c.add(i * rsc + j) };
            let mut v = a * e.alpha;
            if e.accumulate {
                // SAFETY: as above.
                v += unsafe { *p };
            }
            if e.last {
                if let Some(b) = e.row_bias.get(i) {
                    v += b;
                }
                if let Some(b) = e.col_bias.get(j) {
                    v += b;
                }
                if let Some(act) = e.act {
                    v = act.apply(v);
                }
            }
            // SAFETY: as above.
            unsafe { *p = v };
        }
    }
}

/// The portable microkernel: `kc` steps over a packed panel `a` (`kc * MR`) and `kc` rows
/// of `NR` values of `b`, `bs` apart.
///
/// # Safety
/// As [`store_scalar`] for `c`.
#[allow(clippy::too_many_arguments)]
unsafe fn kernel_portable(
    a: &[f32],
    b: &[f32],
    bs: usize,
    c: *mut f32,
    rsc: usize,
    mr: usize,
    nr: usize,
    e: &TileEpi,
) {
    let mut acc = [[0.0f32; NR]; MR];
    for (p, ap) in a.chunks_exact(MR).enumerate() {
        let bp = &b[p * bs..p * bs + NR];
        for (row, &av) in acc.iter_mut().zip(ap) {
            for (x, &bv) in row.iter_mut().zip(bp) {
                *x += av * bv;
            }
        }
    }
    // SAFETY: forwarded from the caller.
    unsafe { store_scalar(&acc, c, rsc, mr, nr, e) }
}

/// A GEMM operand: strided (packed on the fly) or prepacked by [`pack_full`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Src<'a> {
    /// Element `(i, j)` at `data[i * rs + j * cs]`.
    Strided {
        data: &'a [f32],
        rs: usize,
        cs: usize,
    },
    Packed(&'a [f32]),
}

/// Packs `wn` (<= `w`) lines of width stride `ws`, depth `k0..k0 + kc` with stride `ks`, into
/// `dst[p * w + t]` (zero for `t >= wn`).
#[allow(clippy::too_many_arguments)]
fn pack_panel(
    data: &[f32],
    ws: usize,
    ks: usize,
    w0: usize,
    wn: usize,
    w: usize,
    k0: usize,
    kc: usize,
    dst: &mut [f32],
) {
    let dst = &mut dst[..kc * w];
    if ws == 1 && wn == NR && w == NR {
        // The common full B panel: fixed-size copies compile to vector moves.
        for (p, d) in dst.chunks_exact_mut(NR).enumerate() {
            let s = (k0 + p) * ks + w0;
            let src: &[f32; NR] = data[s..s + NR].try_into().expect("NR values");
            d.copy_from_slice(src);
        }
    } else if ws == 1 {
        for (p, d) in dst.chunks_exact_mut(w).enumerate() {
            let s = (k0 + p) * ks + w0;
            d[..wn].copy_from_slice(&data[s..s + wn]);
            d[wn..].fill(0.0);
        }
    } else if ks == 1 && wn == MR && w == MR {
        // A full A panel from row-major rows: read the MR rows side by side so the panel is
        // written in order (line by line it was written MR floats apart, 7% of BERT's run).
        let rows: [&[f32]; MR] = std::array::from_fn(|t| &data[(w0 + t) * ws + k0..][..kc]);
        for (p, d) in dst.chunks_exact_mut(MR).enumerate() {
            for (d, r) in d.iter_mut().zip(&rows) {
                *d = r[p];
            }
        }
    } else {
        if wn < w {
            dst.fill(0.0);
        }
        for t in 0..wn {
            let base = (w0 + t) * ws + k0 * ks;
            if ks == 1 {
                for (p, &v) in data[base..base + kc].iter().enumerate() {
                    dst[p * w + t] = v;
                }
            } else {
                for p in 0..kc {
                    dst[p * w + t] = data[base + p * ks];
                }
            }
        }
    }
}

/// Packs a whole `lines x depth` operand (line `t`, depth `p` at `data[t * ws + p * ks]`) in
/// the driver's prepacked layout: per KC block, per panel of `w` lines, `kc * w` values.
pub(crate) fn pack_full(
    data: &[f32],
    ws: usize,
    ks: usize,
    lines: usize,
    depth: usize,
    w: usize,
) -> Vec<f32> {
    let mut out = vec![0.0f32; lines.div_ceil(w) * w * depth];
    pack_lines_into(&mut out, data, ws, ks, 0, lines, lines, depth, w);
    out
}

/// Packs lines `line0..line0 + n` of a `lines x depth` operand into their places in `dst`
/// ([`pack_full`]'s layout); `data` holds just those lines (line `t` of them at
/// `data[t * ws + p * ks]`) and `line0` is a multiple of `w`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pack_lines_into(
    dst: &mut [f32],
    data: &[f32],
    ws: usize,
    ks: usize,
    line0: usize,
    n: usize,
    lines: usize,
    depth: usize,
    w: usize,
) {
    let panels = lines.div_ceil(w);
    for pc in (0..depth).step_by(KC) {
        let kc = KC.min(depth - pc);
        for t in (0..n).step_by(w) {
            let off = pc * panels * w + (line0 + t) / w * kc * w;
            pack_panel(data, ws, ks, t, w.min(n - t), w, pc, kc, &mut dst[off..]);
        }
    }
}

/// The buffers a GEMM packs its operands' blocks into, carved from scratch: at least
/// [`PackingFor::lens`] floats each.
pub struct Packs<'s> {
    pub a: &'s mut [f32],
    pub b: &'s mut [f32],
}

/// A product's sizes and which operands arrive prepacked: what its packing buffers must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackingFor {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub a_packed: bool,
    pub b_packed: bool,
}

impl PackingFor {
    /// An `m x k` by `k x n` product, neither operand prepacked.
    pub fn new(m: usize, k: usize, n: usize) -> PackingFor {
        PackingFor {
            m,
            k,
            n,
            a_packed: false,
            b_packed: false,
        }
    }

    /// The same with A prepacked (`yes`) or not.
    pub fn a_packed(self, yes: bool) -> PackingFor {
        PackingFor {
            a_packed: yes,
            ..self
        }
    }

    /// The same with B prepacked (`yes`) or not.
    pub fn b_packed(self, yes: bool) -> PackingFor {
        PackingFor {
            b_packed: yes,
            ..self
        }
    }

    /// The floats of A's and B's packing buffers for any block of the product: `MC` rows of
    /// A and `NC` columns of B (whole panels) at the depth of one k block; none for a
    /// prepacked operand.
    pub fn lens(&self) -> (usize, usize) {
        let (m, k, n) = (self.m, self.k, self.n);
        let kc = KC.min(k);
        let a = if self.a_packed {
            0
        } else {
            MC.min(m).div_ceil(MR) * MR * kc
        };
        let b = if self.b_packed {
            0
        } else {
            NC.min(n).div_ceil(NR) * NR * kc
        };
        (a, b)
    }

    /// Scratch bytes of [`PackingFor::lens`]: what each thread running such a product needs.
    pub fn bytes(&self) -> usize {
        let (a, b) = self.lens();
        bytes_for::<f32>(a) + bytes_for::<f32>(b)
    }
}

impl<'s> Packs<'s> {
    /// The same buffers for one more product.
    pub fn reborrow(&mut self) -> Packs<'_> {
        Packs {
            a: &mut *self.a,
            b: &mut *self.b,
        }
    }

    /// The packing buffers of a product, from `carve`.
    pub fn carve(carve: &mut Carve<'s>, product: PackingFor) -> OpResult<Packs<'s>> {
        let (a, b) = product.lens();
        Ok(Packs {
            a: carve.take(a)?,
            b: carve.take(b)?,
        })
    }
}

/// A raw pointer that may cross rayon tasks (each task writes a disjoint part).
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub *mut f32);
impl SendPtr {
    /// The pointer (a method, so closures capture the whole `SendPtr`, which is `Send`).
    pub fn get(self) -> *mut f32 {
        self.0
    }
}

// SAFETY: used only to hand disjoint output regions to parallel tasks.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

/// One GEMM problem: operands, sizes and epilogue. Row `i` of C is `c + i * rsc`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Problem<'a> {
    pub isa: Isa,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: f32,
    pub a: Src<'a>,
    pub b: Src<'a>,
    pub accumulate: bool,
    /// `m` values or empty.
    pub row_bias: &'a [f32],
    /// `n` values or empty.
    pub col_bias: &'a [f32],
    pub act: Option<UnaryKind>,
}

impl Problem<'_> {
    /// Computes rows `m0..m1`, columns `n0..n1` of C. `m0` must be a multiple of MR and `n0`
    /// of NR (prepacked operands are addressed by panel).
    ///
    /// # Safety
    /// `c` must be valid for reads and writes of the `m x n` matrix with row stride `rsc`
    /// (columns contiguous), and nothing else may access the given block meanwhile. Strided
    /// operands must fit their slices and packed ones hold `pack_full`'s layout for `m x k`
    /// (A) and `k x n` (B); the safe entry points check this.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run_block(
        &self,
        c: *mut f32,
        rsc: usize,
        m0: usize,
        m1: usize,
        n0: usize,
        n1: usize,
        packs: &mut Packs,
    ) {
        if m0 >= m1 || n0 >= n1 {
            return;
        }
        if self.k == 0 {
            let zero = [[0.0f32; NR]; MR];
            for i in (m0..m1).step_by(MR) {
                for j in (n0..n1).step_by(NR) {
                    let (mr, nr) = (MR.min(m1 - i), NR.min(n1 - j));
                    let e = self.epi(i, j, true, true);
                    let e = TileEpi { alpha: 0.0, ..e };
                    // SAFETY: the tile lies in the block the caller vouches for.
                    unsafe { store_scalar(&zero, c.add(i * rsc + j), rsc, mr, nr, &e) };
                }
            }
            return;
        }
        let Packs { a: abuf, b: bbuf } = packs;
        let (mp, np) = (self.m.div_ceil(MR), self.n.div_ceil(NR));
        // The ISA's loop over two B panels side by side, where it has one.
        let column2 = self.isa.table().sgemm.column2;
        // Column blocks bound the B this call packs; a prepacked B needs none, and one
        // block packs A once instead of once per block (fully connected layers).
        let nc_step = match (self.b, self.a) {
            (Src::Packed(_), Src::Strided { .. }) => (n1 - n0).max(1),
            _ => NC,
        };
        for jc in (n0..n1).step_by(nc_step) {
            let nc = nc_step.min(n1 - jc);
            let npan = nc.div_ceil(NR);
            for pc in (0..self.k).step_by(KC) {
                let kc = KC.min(self.k - pc);
                // Row-major B with a short k: the microkernel reads full panels in place
                // (rows rs apart); packing would cost about as much as the product.
                let in_place = match self.b {
                    Src::Strided { data, rs, cs: 1 }
                        if (self.k <= SMALL_K || self.m <= FEW_ROWS) && nc >= NR =>
                    {
                        Some((&data[pc * rs + jc..], rs))
                    }
                    _ => None,
                };
                let bp: &[f32] = match self.b {
                    _ if in_place.is_some() => {
                        // Only the partial last panel is packed.
                        let full = nc / NR;
                        let bbuf = &mut bbuf[..kc * NR];
                        if full * NR < nc {
                            let j = jc + full * NR;
                            if let Src::Strided { data, rs, .. } = self.b {
                                pack_panel(data, 1, rs, j, nc - full * NR, NR, pc, kc, bbuf);
                            }
                        }
                        bbuf
                    }
                    Src::Packed(d) => &d[pc * np * NR + (jc / NR) * kc * NR..][..npan * kc * NR],
                    Src::Strided { data, rs, cs: 1 } if nc >= NR => {
                        // Row-major B: read each row sequentially across all panels.
                        let bbuf = &mut bbuf[..npan * kc * NR];
                        let full = nc / NR;
                        for p in 0..kc {
                            let row = &data[(pc + p) * rs + jc..][..nc];
                            for (jp, src) in row.chunks_exact(NR).enumerate() {
                                let src: &[f32; NR] = src.try_into().expect("NR values");
                                bbuf[jp * kc * NR + p * NR..][..NR].copy_from_slice(src);
                            }
                            if full < npan {
                                let d = &mut bbuf[full * kc * NR + p * NR..][..NR];
                                let rest = &row[full * NR..];
                                d[..rest.len()].copy_from_slice(rest);
                                d[rest.len()..].fill(0.0);
                            }
                        }
                        bbuf
                    }
                    Src::Strided { data, rs, cs } => {
                        let bbuf = &mut bbuf[..npan * kc * NR];
                        for jp in 0..npan {
                            let j = jc + jp * NR;
                            let dst = &mut bbuf[jp * kc * NR..];
                            pack_panel(data, cs, rs, j, NR.min(n1 - j), NR, pc, kc, dst);
                        }
                        bbuf
                    }
                };
                let first = pc == 0;
                let last = pc + kc == self.k;
                for ic in (m0..m1).step_by(MC) {
                    let mc = MC.min(m1 - ic);
                    let mpan = mc.div_ceil(MR);
                    let ap: &[f32] = match self.a {
                        Src::Packed(d) => {
                            &d[pc * mp * MR + (ic / MR) * kc * MR..][..mpan * kc * MR]
                        }
                        Src::Strided { data, rs, cs } => {
                            let abuf = &mut abuf[..mpan * kc * MR];
                            for ip in 0..mpan {
                                let i = ic + ip * MR;
                                let dst = &mut abuf[ip * kc * MR..];
                                pack_panel(data, rs, cs, i, MR.min(m1 - i), MR, pc, kc, dst);
                            }
                            abuf
                        }
                    };
                    if self.k <= SMALL_K {
                        // Short k: tiles row by row. A column of tiles would store into
                        // every row of C at once, more streams than the prefetchers
                        // follow; a row of tiles stores along MR rows.
                        let full = nc / NR;
                        // Full panels: kc rows bs apart, panel after panel step apart;
                        // the partial last panel is packed in both cases, at `partial`.
                        let (b, bs, step, partial) = match in_place {
                            Some((d, rs)) => (&d[..(kc - 1) * rs + full * NR], rs, NR, 0),
                            None => (&bp[..full * kc * NR], NR, kc * NR, full * kc * NR),
                        };
                        for (ip, i) in (ic..ic + mc).step_by(MR).enumerate() {
                            let apanel = &ap[ip * kc * MR..][..kc * MR];
                            let mr = MR.min(ic + mc - i);
                            let e = self.epi(i, jc, first, last);
                            // SAFETY: tiles of rows i..i + mr, columns jc..jc + nc, in the
                            // block the caller vouches for; b holds the full panels.
                            unsafe {
                                let ct = c.add(i * rsc + jc);
                                self.row(apanel, kc, b, bs, step, full, ct, rsc, mr, &e)
                            };
                            if full < npan {
                                let j = jc + full * NR;
                                let e = self.epi(i, j, first, last);
                                // SAFETY: the partial tile of those rows at column j;
                                // bpart holds its packed kc rows.
                                unsafe {
                                    let ct = c.add(i * rsc + j);
                                    let bpart = &bp[partial..][..kc * NR];
                                    self.column(apanel, kc, bpart, NR, ct, rsc, mr, n1 - j, &e)
                                };
                            }
                        }
                        continue;
                    }
                    let mut jp = 0;
                    while jp < npan {
                        let j = jc + jp * NR;
                        let nr = NR.min(n1 - j);
                        if let (Some(column2), true) = (column2, n1 - j >= 2 * NR) {
                            // Two full B panels side by side: one 6 x 32 tile per A panel.
                            let (b0, b1, bs) = match in_place {
                                Some((d, rs)) => (&d[jp * NR..], &d[(jp + 1) * NR..], rs),
                                None => (&bp[jp * kc * NR..], &bp[(jp + 1) * kc * NR..], NR),
                            };
                            debug_assert!(b1.len() >= (kc - 1) * bs + NR);
                            let e = self.epi(ic, j, first, last);
                            // SAFETY: the ISA's loop runs on a CPU with its features; the tiles of rows ic..ic + mc, columns j..j + 2 NR
                            // lie in the block the caller vouches for; ap holds mpan
                            // panels of kc steps, b0 and b1 kc rows each.
                            unsafe {
                                let ct = c.add(ic * rsc + j);
                                let (b0, b1) = (b0.as_ptr(), b1.as_ptr());
                                column2(kc, ap.as_ptr(), mc, b0, b1, bs, ct, rsc, &e)
                            };
                            jp += 2;
                            continue;
                        }
                        let (bpanel, bs) = match in_place {
                            Some((d, rs)) if nr == NR => (&d[jp * NR..][..(kc - 1) * rs + NR], rs),
                            Some(_) => (&bp[..kc * NR], NR),
                            None => (&bp[jp * kc * NR..][..kc * NR], NR),
                        };
                        let e = self.epi(ic, j, first, last);
                        // SAFETY: the tiles of rows ic..ic + mc, columns j..j + nr lie in
                        // the block the caller vouches for; ap holds mpan panels of kc
                        // steps, bpanel kc rows.
                        unsafe {
                            let ct = c.add(ic * rsc + j);
                            self.column(ap, kc, bpanel, bs, ct, rsc, mc, nr, &e)
                        }
                        jp += 1;
                    }
                }
            }
        }
    }

    /// What this product's packing buffers must hold.
    fn packing_for(&self) -> PackingFor {
        PackingFor::new(self.m, self.k, self.n)
            .a_packed(matches!(self.a, Src::Packed(_)))
            .b_packed(matches!(self.b, Src::Packed(_)))
    }

    fn epi(&self, i: usize, j: usize, first: bool, last: bool) -> TileEpi<'_> {
        TileEpi {
            alpha: self.alpha,
            accumulate: self.accumulate || !first,
            last,
            row_bias: self.row_bias.get(i..).unwrap_or(&[]),
            col_bias: self.col_bias.get(j..).unwrap_or(&[]),
            act: self.act,
        }
    }

    /// The tiles of one column of C: `rows` rows from `c` (panels of [`MR`] rows of `a`, `kc`
    /// steps each) by `nr` columns of the B panel `b`, `e` the first tile's epilogue. One
    /// call per column, not per tile: short-k products spend as much on calls as on
    /// multiplies.
    ///
    /// # Safety
    /// As [`store_scalar`] for the `rows x nr` block of `c`; `a` holds `rows.div_ceil(MR)`
    /// panels of `kc * MR` values.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    unsafe fn column(
        &self,
        a: &[f32],
        kc: usize,
        b: &[f32],
        bs: usize,
        c: *mut f32,
        rsc: usize,
        rows: usize,
        nr: usize,
        e: &TileEpi,
    ) {
        debug_assert!(a.len() >= rows.div_ceil(MR) * kc * MR);
        debug_assert!(kc == 0 || b.len() >= (kc - 1) * bs + NR);
        // SAFETY: the ISA's loop runs on a CPU with its features (`Isa::table`); a holds the
        // panels and b kc rows of NR values bs apart; c as the caller vouches.
        unsafe {
            (self.isa.table().sgemm.column)(kc, a.as_ptr(), rows, b.as_ptr(), bs, c, rsc, nr, e)
        }
    }

    /// The `panels` full tiles of one row of C: `mr` rows from `c` (the A panel `a`, `kc`
    /// steps) by panels of [`NR`] columns of `b` (panel `jp` from `b[jp * step]`, its `kc`
    /// rows `bs` apart), `e` the first tile's epilogue.
    ///
    /// # Safety
    /// As [`store_scalar`] for the `mr x panels * NR` block of `c`; `a` holds `kc * MR`
    /// values and `b` the panels.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    unsafe fn row(
        &self,
        a: &[f32],
        kc: usize,
        b: &[f32],
        bs: usize,
        step: usize,
        panels: usize,
        c: *mut f32,
        rsc: usize,
        mr: usize,
        e: &TileEpi,
    ) {
        if panels == 0 || kc == 0 {
            return;
        }
        debug_assert!(a.len() >= kc * MR && b.len() >= (panels - 1) * step + (kc - 1) * bs + NR);
        // SAFETY: the ISA's loop runs on a CPU with its features (`Isa::table`); a and b hold
        // what the caller vouches for.
        unsafe {
            let row = self.isa.table().sgemm.row;
            row(kc, a.as_ptr(), b.as_ptr(), bs, step, panels, c, rsc, mr, e)
        }
    }

    /// Computes all of C: split over rayon tasks, each packing in its worker's region of
    /// `scratch` ([`PackingFor::bytes`] per thread), when the problem is large enough; on the
    /// calling thread in `packs` when given.
    ///
    /// # Safety
    /// As [`Problem::run_block`] for the whole matrix.
    pub unsafe fn run(&self, c: *mut f32, rsc: usize, packing: Packing) -> OpResult<()> {
        let parallel = matches!(packing, Packing::Parallel(_));
        if self.gemv_applies() {
            // SAFETY: forwarded from the caller.
            unsafe { self.run_gemv(c, rsc, parallel) };
            return Ok(());
        }
        let scratch = match packing {
            Packing::Serial(mut packs) => {
                // SAFETY: forwarded from the caller.
                unsafe { self.run_block(c, rsc, 0, self.m, 0, self.n, &mut packs) };
                return Ok(());
            }
            Packing::Parallel(scratch) => scratch,
        };
        let (m, k, n) = (self.m, self.k, self.n);
        let flops = 2 * m * n * k.max(1);
        // One task per worker: each packs its own block of A or B.
        let tasks = split::workers(Cost::flops(flops), split::threads());
        let block = |c: *mut f32, m0: usize, m1: usize, n0: usize, n1: usize| {
            scratch.with_thread(|carve| {
                let mut packs = Packs::carve(carve, self.packing_for())?;
                // SAFETY: tasks compute disjoint row or column ranges of the matrix the
                // caller vouches for.
                unsafe { self.run_block(c, rsc, m0, m1, n0, n1, &mut packs) };
                Ok(())
            })
        };
        if tasks <= 1 {
            return block(c, 0, m, 0, n);
        }
        let cp = SendPtr(c);
        let split_n = n.div_ceil(NR) >= m.div_ceil(MR) || m < 2 * MR;
        let (len, unit) = if split_n { (n, NR) } else { (m, MR) };
        let tasks = split::cut(len, unit, tasks, 1);
        split::try_for_each_task(tasks.count, true, |t| {
            let r = tasks.range(t, len);
            if split_n {
                block(cp.get(), 0, m, r.start, r.end)
            } else {
                block(cp.get(), r.start, r.end, 0, n)
            }
        })
    }
}

/// Where a GEMM packs its operands, and so whether it may spread over threads.
pub enum Packing<'s> {
    /// Over the current rayon pool's threads, each task in its worker's region of the
    /// scratch (at least [`PackingFor::bytes`] per thread).
    Parallel(&'s Scratch),
    /// On the calling thread, in buffers its caller carved ([`Packs::carve`]).
    Serial(Packs<'s>),
}

/// Applies an activation to a slice, with the match outside the loop so it vectorises.
#[inline(always)]
pub(crate) fn activate(act: Option<UnaryKind>, xs: &mut [f32]) {
    let Some(a) = act else { return };
    // Each arm names its kind again, so the formula's match folds away and the loop, free of
    // it, vectorises.
    match EpilogueAct::of(a) {
        EpilogueAct::Relu => each(xs, |x| UnaryKind::Relu.apply(x)),
        EpilogueAct::Clip { min, max } => each(xs, |x| UnaryKind::Clip { min, max }.apply(x)),
        EpilogueAct::LeakyRelu { alpha } => each(xs, |x| UnaryKind::LeakyRelu { alpha }.apply(x)),
        EpilogueAct::HardSigmoid { alpha, beta } => {
            each(xs, |x| UnaryKind::HardSigmoid { alpha, beta }.apply(x))
        }
        EpilogueAct::HardSwish => each(xs, |x| UnaryKind::HardSwish.apply(x)),
        EpilogueAct::Mish => each(xs, mish),
        // The polynomial exp vectorises; libm's expf is a call per value.
        EpilogueAct::PerElement(UnaryKind::Sigmoid) => each(xs, crate::math::sigmoid::<false>),
        EpilogueAct::PerElement(UnaryKind::Tanh) => each(xs, crate::math::tanh::<false>),
        EpilogueAct::PerElement(a) => each(xs, |x| a.apply(x)),
    }
}

#[inline(always)]
fn each(xs: &mut [f32], f: impl Fn(f32) -> f32) {
    for x in xs {
        *x = f(*x);
    }
}

/// How the CPU kernels compute an epilogue activation: the piecewise-linear ones in
/// registers (a clamp, a select), every other kind per element with its f32 formula.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum EpilogueAct {
    Relu,
    Clip {
        min: f32,
        max: f32,
    },
    LeakyRelu {
        alpha: f32,
    },
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    HardSwish,
    /// With the vectorisable exp ([`mish`]).
    Mish,
    PerElement(UnaryKind),
}

/// Mish, `x tanh(ln(1 + e^x))`, as `x n / (n + 2)` with `n = e^x (e^x + 2)`: one exp, which
/// vectorises. From x = 20 on it is x to f32 precision, so e^x is taken at most there.
#[inline(always)]
pub(crate) fn mish(x: f32) -> f32 {
    let e = crate::math::exp::<false>(x.min(20.0));
    let n = e * (e + 2.0);
    x * n / (n + 2.0)
}

impl EpilogueAct {
    pub(crate) fn of(act: UnaryKind) -> EpilogueAct {
        use UnaryKind::*;
        match act {
            Relu => EpilogueAct::Relu,
            Clip { min, max } => EpilogueAct::Clip { min, max },
            LeakyRelu { alpha } => EpilogueAct::LeakyRelu { alpha },
            HardSigmoid { alpha, beta } => EpilogueAct::HardSigmoid { alpha, beta },
            HardSwish => EpilogueAct::HardSwish,
            Mish => EpilogueAct::Mish,
            Sigmoid
            | Abs
            | Neg
            | Exp
            | Log
            | Sqrt
            | Reciprocal
            | Floor
            | Ceil
            | Round
            | Sign
            | Erf
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
            | Tanh
            | Softplus
            | Softsign
            | Elu { .. }
            | Selu { .. }
            | Celu { .. }
            | ThresholdedRelu { .. }
            | Gelu { .. }
            | Shrink { .. } => EpilogueAct::PerElement(act),
        }
    }
}

#[cfg(test)]
mod epilogue_tests {
    use super::*;

    #[test]
    fn mish_matches_the_formula_everywhere() {
        let mut x = -120.0f32;
        while x < 120.0 {
            let want = UnaryKind::Mish.apply(x as f64);
            let got = mish(x) as f64;
            assert!(
                (got - want).abs() <= 2e-6 * want.abs().max(1e-3),
                "mish({x}) = {got}, want {want}"
            );
            x += 0.0137;
        }
        assert!(mish(f32::NAN).is_nan());
        assert_eq!(mish(f32::INFINITY), f32::INFINITY);
        let mut row: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 9.0).collect();
        let want: Vec<f32> = row.iter().map(|&v| mish(v)).collect();
        activate(Some(UnaryKind::Mish), &mut row);
        assert_eq!(row, want);
    }
}
