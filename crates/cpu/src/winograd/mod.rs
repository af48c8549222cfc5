//! 3x3 stride-1 convolution by Winograd's minimal filtering, F(2x2, 3x3) or F(4x4, 3x3).
//!
//! Each T x T block of outputs ("tile", T = 2 or 4) is computed from an A x A input patch
//! (A = T + 2) with A^2 multiplies per (input channel, output channel) instead of 9 T^2. Over
//! all tiles that becomes A^2 independent GEMMs, one per position of the transformed patch:
//!
//! ```text
//! U[p] = (G g G^T)[p]   weights, [M x C], transformed and packed once at plan build
//! V[p] = (B^T d B)[p]   inputs,  [C x n] over the n tiles of a block, transformed per run
//! Z[p] = U[p] * V[p]    [M x n]
//! y    = A^T Z A        the T x T outputs of each tile, then bias and activation
//! ```
//!
//! F(2x2, 3x3) (2.25x fewer multiplies) keeps the transforms to additions and halvings, so its
//! results stay within a few ulps of the direct sum. F(4x4, 3x3) (4x fewer; points 0, +-1,
//! +-2) scales values by up to 100 in its transforms and rounds relative to the size of the
//! outputs around (resnet18's logits move by 6e-6 instead of 3e-6); it needs enough tiles to
//! fill its GEMMs, so the conv picks it for larger outputs only.

use crate::gemm::{
    packed_bytes, Epilogue, Gemm, MatMut, MatRef, Operand, PackedMatrix, Packing, PackingFor,
    Packs, Sgemm, Side,
};
use crate::sgemm::MR;
use crate::split::{self, Cost};
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::plan::Kernel;
use ferrolite_core::prepacked::Prepacks;
use ferrolite_core::scratch::{bytes_for, Carve, Scratch, ScratchNeed};
use ferrolite_core::{op_ensure, OpResult, Tensor};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;

/// One block of tile rows of one image, see `WinogradKernel::block`: (kernel, x, ty0, ty1,
/// bias, out, carve, scratch, inner).
pub(crate) type BlockFn = fn(
    &WinogradKernel,
    &[f32],
    usize,
    usize,
    Option<&[f32]>,
    &mut [&mut [f32]],
    &mut Carve,
    &Scratch,
    usize,
) -> OpResult<()>;

/// The Winograd family's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    pub(crate) block: BlockFn,
}

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    block: WinogradKernel::block_impl,
};

/// Scratch budget of one block of tiles (transformed inputs and products), in bytes.
const L2_BYTES: usize = 256 * 1024;

/// Fewest tiles in a block, whatever the budget: every block streams all the transformed
/// weights (36 planes of M x C: 2.3 MB at 128 channels) through its GEMMs, and with 16 tiles
/// the GEMMs were too short to pay for that. 64 made resnet18 1.10x faster at one thread than
/// 16 (the 56x56 and 28x28 convs run in 3 and 1 blocks instead of 7 and 3); 128 was no faster.
const MIN_BLOCK_TILES: usize = 64;

/// The output tile of a Winograd convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WinogradTile {
    /// F(2x2, 3x3): 4x4 input patches, 16 GEMMs, 2.25x fewer multiplies.
    F2,
    /// F(4x4, 3x3): 6x6 input patches, 36 GEMMs, 4x fewer multiplies.
    F4,
}

/// Whether a Winograd kernel can compute this convolution at all: 2-D, 3x3, stride 1,
/// dilation 1, one group, at least 16 output channels and 4x4 outputs (whether it pays is
/// [`tile_for`]'s question).
pub fn shaped(s: &ConvShapes) -> bool {
    let g = &s.geometry;
    g.input.len() == 2
        && g.kernel == [3, 3]
        && g.strides == [1, 1]
        && g.dilations == [1, 1]
        && s.group == 1
        && s.out_channels >= 16
        && g.output.iter().all(|&o| o >= 4)
}

/// The Winograd tile the CPU runs this convolution with, when it is [`shaped`] for it and big
/// enough for Winograd to pay; `None` otherwise. One rule for the kernel choice and the
/// `layout-nchwc` pass (which leaves these convolutions plain).
pub fn tile_for(s: &ConvShapes) -> Option<WinogradTile> {
    // Below 64 input channels its 16 GEMMs of depth C spend more on storing and transforming
    // products than they save in multiplies (squeezenet's 16..48-channel expand convs run
    // faster without).
    const MIN_IN_CHANNELS: usize = 64;
    // From 12x12 outputs 4x4 tiles (1.1-1.3x faster on resnet18's 56x56 to 14x14 convs);
    // below, each GEMM covers too few tiles to fill the microkernel's panels (a 7x7 output
    // has 4 tiles; there F(4x4) is 2x slower).
    const F4_MIN_OUTPUTS: usize = 12 * 12;
    // Multiply-adds (output x input channels x tiles) from which each of its GEMMs pays for
    // the transforms and the transformed weights (2.25-4x the plain ones): in resnet18
    // (256x256 channels on 16 tiles: 1M) it wins by 1.3x; on squeezenet's last 13x13 convs
    // (256x64 on 16 tiles: 262K) the plain GEMM was 1.1-1.3x faster.
    const MIN_GEMM_MACS: usize = 1 << 19;
    let g = &s.geometry;
    if !shaped(s) || s.in_channels < MIN_IN_CHANNELS {
        return None;
    }
    let outputs: usize = g.output.iter().product();
    let tile = if outputs >= F4_MIN_OUTPUTS {
        WinogradTile::F4
    } else {
        WinogradTile::F2
    };
    let t = tile.outputs();
    let tiles: usize = g.output.iter().map(|o| o.div_ceil(t)).product();
    let macs = s
        .out_channels
        .saturating_mul(s.in_channels)
        .saturating_mul(tiles);
    (macs >= MIN_GEMM_MACS).then_some(tile)
}

impl WinogradTile {
    /// The tile to run at `precision`: F(2x2, 3x3) when it must stay accurate.
    pub fn within(self, precision: crate::backend::Precision) -> WinogradTile {
        match precision {
            crate::backend::Precision::Fast => self,
            crate::backend::Precision::Accurate => WinogradTile::F2,
        }
    }

    /// Output tile edge T.
    pub fn outputs(self) -> usize {
        match self {
            WinogradTile::F2 => 2,
            WinogradTile::F4 => 4,
        }
    }

    /// Input patch edge A = T + 2.
    pub fn patch(self) -> usize {
        self.outputs() + 2
    }

    /// G (A x 3), the filter transform.
    fn g(self) -> &'static [[f64; 3]] {
        match self {
            WinogradTile::F2 => &[
                [1.0, 0.0, 0.0],
                [0.5, 0.5, 0.5],
                [0.5, -0.5, 0.5],
                [0.0, 0.0, 1.0],
            ],
            WinogradTile::F4 => &[
                [1.0 / 4.0, 0.0, 0.0],
                [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
                [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
                [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
                [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
                [0.0, 0.0, 1.0],
            ],
        }
    }
}

/// B^T d for one F(4x4) patch row (points 0, 1, -1, 2, -2 and infinity).
#[inline(always)]
fn bt4(d: &[f32]) -> [f32; 6] {
    let (d0, d1, d2, d3, d4, d5) = (d[0], d[1], d[2], d[3], d[4], d[5]);
    [
        4.0 * d0 - 5.0 * d2 + d4,
        -4.0 * (d1 + d2) + d3 + d4,
        4.0 * (d1 - d2) - d3 + d4,
        -2.0 * (d1 - d3) - d2 + d4,
        2.0 * (d1 - d3) - d2 + d4,
        4.0 * d1 - 5.0 * d3 + d5,
    ]
}

/// A^T m for one F(4x4) column of six products.
#[inline(always)]
fn at4(m: [f32; 6]) -> [f32; 4] {
    let (m0, m1, m2, m3, m4, m5) = (m[0], m[1], m[2], m[3], m[4], m[5]);
    let (s12, d12, s34, d34) = (m1 + m2, m1 - m2, m3 + m4, m3 - m4);
    [
        m0 + s12 + s34,
        d12 + 2.0 * d34,
        s12 + 4.0 * s34,
        d12 + 8.0 * d34 + m5,
    ]
}

/// Tiles per chunk of the output transforms.
const CHUNK: usize = 8;

/// The products of [`CHUNK`] consecutive tiles from `start` for output channel `mi`, one row per
/// patch position (`P` of them; Z is `P x M x n`). Lanes past the chunk's tiles hold the next
/// tiles' values (computed on, never stored); lanes past the end of `z` are zero. Fixed-size
/// copies compile to vector moves, not memmove calls.
#[inline(always)]
fn load_chunk<const P: usize>(
    z: &[f32],
    m: usize,
    mi: usize,
    n: usize,
    start: usize,
) -> [[f32; CHUNK]; P] {
    let mut zz = [[0f32; CHUNK]; P];
    for (p, zp) in zz.iter_mut().enumerate() {
        let src = &z[(p * m + mi) * n + start..];
        match src.get(..CHUNK) {
            Some(full) => *zp = full.try_into().expect("CHUNK values"),
            None => zp[..src.len()].copy_from_slice(src),
        }
    }
    zz
}

/// The kernel for one Conv node.
#[derive(Debug)]
pub struct WinogradKernel {
    gemm: Sgemm,
    tile: WinogradTile,
    /// Input channels, output channels.
    c: usize,
    m: usize,
    /// Input spatial size, output spatial size, top/left padding.
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    pad_top: usize,
    pad_left: usize,
    x_shape: Vec<usize>,
    /// `U[p]` for the A^2 patch positions, packed as left operands.
    u: Vec<PackedMatrix>,
    activation: Option<UnaryKind>,
}

/// G g G^T (A x A, row-major, into `u[..A * A]`) for one 3x3 filter `g` (row-major),
/// computed in f64.
pub(crate) fn transform_filter(g: &[f32], tile: WinogradTile, u: &mut [f64; 36]) {
    let gm = tile.g();
    let a = gm.len();
    // t = G g (A x 3), then u = t G^T (A x A).
    let mut t = [[0f64; 3]; 6];
    for (ti, gi) in t.iter_mut().zip(gm) {
        for (j, tij) in ti.iter_mut().enumerate() {
            *tij = gi[0] * g[j] as f64 + gi[1] * g[3 + j] as f64 + gi[2] * g[6 + j] as f64;
        }
    }
    for (i, ti) in t.iter().take(a).enumerate() {
        for (j, gj) in gm.iter().enumerate() {
            u[i * a + j] = ti[0] * gj[0] + ti[1] * gj[1] + ti[2] * gj[2];
        }
    }
}

/// B^T d B for one 4x4 patch `d` (row-major); the kernel computes the same row-wise.
#[cfg(test)]
fn transform_input(d: &[f32; 16]) -> [f32; 16] {
    let mut t = [0f32; 16];
    for j in 0..4 {
        let (d0, d1, d2, d3) = (d[j], d[4 + j], d[8 + j], d[12 + j]);
        t[j] = d0 - d2;
        t[4 + j] = d1 + d2;
        t[8 + j] = d2 - d1;
        t[12 + j] = d1 - d3;
    }
    let mut v = [0f32; 16];
    for i in 0..4 {
        let r = &t[i * 4..i * 4 + 4];
        v[i * 4] = r[0] - r[2];
        v[i * 4 + 1] = r[1] + r[2];
        v[i * 4 + 2] = r[2] - r[1];
        v[i * 4 + 3] = r[1] - r[3];
    }
    v
}

/// A^T z A for one 4x4 block of products: the tile's 2x2 outputs (row-major); the kernel
/// computes the same across tiles.
#[cfg(test)]
fn transform_output(z: &[f32; 16]) -> [f32; 4] {
    let mut t = [0f32; 8];
    for j in 0..4 {
        let (z0, z1, z2, z3) = (z[j], z[4 + j], z[8 + j], z[12 + j]);
        t[j] = z0 + z1 + z2;
        t[4 + j] = z1 - z2 - z3;
    }
    [
        t[0] + t[1] + t[2],
        t[1] - t[2] - t[3],
        t[4] + t[5] + t[6],
        t[5] - t[6] - t[7],
    ]
}

impl WinogradKernel {
    /// `None` unless the conv is 2-D, 3x3, stride 1, dilation 1, one group, with constant
    /// weights and enough channels for the transforms to pay off.
    pub fn new(
        gemm: Sgemm,
        tile: WinogradTile,
        s: &ConvShapes,
        activation: Option<UnaryKind>,
        x_shape: &[usize],
        w_value: Option<&Tensor>,
        packs: &Prepacks,
    ) -> OpResult<Option<WinogradKernel>> {
        let g = &s.geometry;
        let fits = shaped(s) && s.in_channels >= 16;
        let Some(w) = w_value.filter(|_| fits) else {
            return Ok(None);
        };
        let (c, m) = (s.in_channels, s.out_channels);
        let wv = w.as_slice::<f32>()?;
        op_ensure!(wv.len() == m * c * 9, "input 1 (W) has {} values", wv.len());
        // Transformed weights by blocks of output channels, each packed straight into the
        // A^2 operands: the unpacked U (as large as the packed one) never exists whole.
        let a = tile.patch();
        let len = PackedMatrix::packed_len(m, c, Side::A);
        // An optimized model may hold them already (see ferrolite_core::prepacked).
        let u = packs
            .try_take_all(&[a, m, c, MR], &vec![len; a * a], || {
                let mut u: Vec<PackedMatrix> =
                    (0..a * a).map(|_| PackedMatrix::zeros_a(m, c)).collect();
                let block = 8 * MR;
                let mut planes = vec![0f32; a * a * block * c];
                for r0 in (0..m).step_by(block) {
                    let rows = block.min(m - r0);
                    let mut t = [0f64; 36];
                    for (f, filter) in wv[r0 * c * 9..(r0 + rows) * c * 9]
                        .chunks_exact(9)
                        .enumerate()
                    {
                        transform_filter(filter, tile, &mut t);
                        for (p, &v) in t[..a * a].iter().enumerate() {
                            planes[p * block * c + f] = v as f32;
                        }
                    }
                    for (p, up) in u.iter_mut().enumerate() {
                        let src = MatRef {
                            data: &planes[p * block * c..][..rows * c],
                            rs: c,
                            cs: 1,
                        };
                        up.pack_rows(r0, rows, src)?;
                    }
                }
                Ok::<_, ferrolite_core::OpError>(
                    u.into_iter().map(PackedMatrix::into_data).collect(),
                )
            })?
            .into_iter()
            .map(|d| PackedMatrix::from_packed(m, c, Side::A, d))
            .collect();
        Ok(Some(WinogradKernel {
            gemm,
            tile,
            c,
            m,
            h: g.input[0],
            w: g.input[1],
            oh: g.output[0],
            ow: g.output[1],
            pad_top: g.pad_begin[0],
            pad_left: g.pad_begin[1],
            x_shape: x_shape.to_vec(),
            u,
            activation,
        }))
    }

    fn tiles(&self) -> (usize, usize) {
        let t = self.tile.outputs();
        (self.oh.div_ceil(t), self.ow.div_ceil(t))
    }

    /// Tile rows per block: enough tiles for efficient GEMMs ([`MIN_BLOCK_TILES`]), more
    /// while a block's transformed inputs and products stay in L2. With `threads` workers
    /// and at least as many blocks, their number is a multiple of `threads`, so the threads
    /// finish together (resnet18's 56x56 convs made 3 blocks for 2 threads).
    fn rows_per_block(&self, threads: usize) -> usize {
        let (th, tw) = self.tiles();
        let a = self.tile.patch();
        let per_tile = a * a * (self.c + self.m) * 4;
        let target = (L2_BYTES / per_tile).max(MIN_BLOCK_TILES);
        let min_rows = target.div_ceil(tw).max(1);
        let most = (th / min_rows).max(1);
        let blocks = if most >= threads.max(1) {
            most - most % threads.max(1)
        } else {
            most
        };
        th.div_ceil(blocks).max(1)
    }

    /// The tiles `[lo, hi)` of a tile row whose A input columns (from `T * tx - pad_left`) all
    /// lie inside the row, so they read it directly; the others go through a padded copy.
    fn interior_tiles(&self) -> (usize, usize) {
        let (_, tw) = self.tiles();
        let (t, a, pl, w) = (
            self.tile.outputs(),
            self.tile.patch(),
            self.pad_left,
            self.w,
        );
        let lo = pl.div_ceil(t).min(tw);
        let hi = if w + pl >= a {
            ((w + pl - a) / t + 1).clamp(lo, tw)
        } else {
            lo
        };
        (lo, hi)
    }

    /// One block of tile rows `[ty0, ty1)` of one image: transforms its input patches into `v`
    /// (`A^2 x C x n`), multiplies into `z` (`A^2 x M x n`), and writes the outputs to `out`,
    /// one slice per output channel holding output rows `T * ty0..` of that channel.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        x: &[f32],
        ty0: usize,
        ty1: usize,
        bias: Option<&[f32]>,
        out: &mut [&mut [f32]],
        carve: &mut Carve,
        scratch: &Scratch,
        inner: usize,
    ) -> OpResult<()> {
        (self.gemm.isa.table().winograd.block)(self, x, ty0, ty1, bias, out, carve, scratch, inner)
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn block_impl(
        &self,
        x: &[f32],
        ty0: usize,
        ty1: usize,
        bias: Option<&[f32]>,
        out: &mut [&mut [f32]],
        carve: &mut Carve,
        scratch: &Scratch,
        inner: usize,
    ) -> OpResult<()> {
        let (_, tw) = self.tiles();
        let (c, m) = (self.c, self.m);
        let planes = self.tile.patch() * self.tile.patch();
        let n = (ty1 - ty0) * tw;
        // Every value a block reads is written first (input transform, GEMMs).
        let v: &mut [f32] = carve.take(planes * c * n)?;
        let z: &mut [f32] = carve.take(planes * m * n)?;
        match self.tile {
            WinogradTile::F2 => self.input_f2(x, ty0, ty1, v),
            WinogradTile::F4 => self.input_f4(x, ty0, ty1, v),
        }
        let gemm_plane = |(p, zp): (usize, &mut [f32]), packs: Packs| {
            let b = MatRef {
                data: &v[p * c * n..(p + 1) * c * n],
                rs: n,
                cs: 1,
            };
            let zp = MatMut {
                data: zp,
                rs: n,
                cs: 1,
            };
            self.gemm.gemm(
                m,
                c,
                n,
                1.0,
                Operand::Packed(&self.u[p]),
                Operand::Mat(b),
                false,
                zp,
                &Epilogue::default(),
                Packing::Serial(packs),
            )
        };
        let planes = &mut z[..planes * m * n];
        // The transformed weights come packed; the inputs are packed per product.
        let product = PackingFor::new(m, c, n).a_packed(true);
        if inner > 1 {
            // Each task's planes pack in its worker's region.
            let tasks = split::cut(planes.len(), m * n, inner, split::BALANCE);
            split::try_chunks(planes, tasks, |start, mine| {
                scratch.with_thread(|cv| {
                    let mut packs = Packs::carve(cv, product)?;
                    let first = start / (m * n).max(1);
                    let mut each = mine.chunks_mut((m * n).max(1)).enumerate();
                    each.try_for_each(|(i, pz)| gemm_plane((first + i, pz), packs.reborrow()))
                })
            })?;
        } else {
            let mut packs = Packs::carve(carve, product)?;
            planes
                .chunks_mut(m * n)
                .enumerate()
                .try_for_each(|pz| gemm_plane(pz, packs.reborrow()))?;
        }
        let z: &[f32] = z;
        let per_channel = |(mi, yc): (usize, &mut &mut [f32])| match self.tile {
            WinogradTile::F2 => self.output_f2(z, ty0, ty1, bias, mi, yc),
            WinogradTile::F4 => self.output_f4(z, ty0, ty1, bias, mi, yc),
        };
        split::for_rows(out, 1, inner, |mi, yc| per_channel((mi, &mut yc[0])));
        Ok(())
    }

    /// F(2x2) input transform of tile rows `[ty0, ty1)` into `v` (`16 x C x n`).
    fn input_f2(&self, x: &[f32], ty0: usize, ty1: usize, v: &mut [f32]) {
        let (_, tw) = self.tiles();
        let (h, w, c) = (self.h, self.w, self.c);
        let n = (ty1 - ty0) * tw;
        // Input transform, row-wise and across all tiles of a tile row at once: each
        // padded input row is transformed along its columns (h), then the four rows of a tile
        // row are combined, writing the 16 planes of v contiguously.
        let mut hb = vec![0f32; 16 * tw];
        // Tile tx reads columns 2 * tx - pad_left .. + 4.
        let (lo, hi) = self.interior_tiles();
        let pl = self.pad_left;
        for ci in 0..c {
            let xc = &x[ci * h * w..(ci + 1) * h * w];
            for ty in ty0..ty1 {
                for i in 0..4 {
                    let r = (2 * ty + i).wrapping_sub(self.pad_top);
                    let (h0, rest) = hb[i * 4 * tw..(i + 1) * 4 * tw].split_at_mut(tw);
                    let (h1, rest) = rest.split_at_mut(tw);
                    let (h2, h3) = rest.split_at_mut(tw);
                    if r >= h {
                        for hh in [h0, h1, h2, h3] {
                            hh.fill(0.0);
                        }
                        continue;
                    }
                    let src = &xc[r * w..(r + 1) * w];
                    for tx in (0..lo).chain(hi..tw) {
                        let mut e = [0f32; 4];
                        for (q, e) in e.iter_mut().enumerate() {
                            let col = (2 * tx + q).wrapping_sub(pl);
                            if col < w {
                                *e = src[col];
                            }
                        }
                        h0[tx] = e[0] - e[2];
                        h1[tx] = e[1] + e[2];
                        h2[tx] = e[2] - e[1];
                        h3[tx] = e[1] - e[3];
                    }
                    if hi > lo {
                        let inner = src[2 * lo - pl..].windows(4).step_by(2).take(hi - lo);
                        for (tx, e) in (lo..hi).zip(inner) {
                            h0[tx] = e[0] - e[2];
                            h1[tx] = e[1] + e[2];
                            h2[tx] = e[2] - e[1];
                            h3[tx] = e[1] - e[3];
                        }
                    }
                }
                let t0 = (ty - ty0) * tw;
                for b in 0..4 {
                    let hr = |i: usize| &hb[(i * 4 + b) * tw..][..tw];
                    let (r0, r1, r2, r3) = (hr(0), hr(1), hr(2), hr(3));
                    let dst = |a: usize| ((a * 4 + b) * c + ci) * n + t0;
                    for (o, (x0, x2)) in v[dst(0)..][..tw].iter_mut().zip(r0.iter().zip(r2)) {
                        *o = x0 - x2;
                    }
                    for (o, (x1, x2)) in v[dst(1)..][..tw].iter_mut().zip(r1.iter().zip(r2)) {
                        *o = x1 + x2;
                    }
                    for (o, (x1, x2)) in v[dst(2)..][..tw].iter_mut().zip(r1.iter().zip(r2)) {
                        *o = x2 - x1;
                    }
                    for (o, (x1, x3)) in v[dst(3)..][..tw].iter_mut().zip(r1.iter().zip(r3)) {
                        *o = x1 - x3;
                    }
                }
            }
        }
    }

    /// F(4x4) input transform of tile rows `[ty0, ty1)` into `v` (`36 x C x n`): as
    /// [`Self::input_f2`], each input row transformed along its columns for all tiles, then
    /// the six rows of a tile row combined over whole rows of tiles.
    fn input_f4(&self, x: &[f32], ty0: usize, ty1: usize, v: &mut [f32]) {
        let (_, tw) = self.tiles();
        let (h, w, c) = (self.h, self.w, self.c);
        let n = (ty1 - ty0) * tw;
        // Tile tx reads columns 4 * tx - pad_left .. + 6.
        let (lo, hi) = self.interior_tiles();
        let pl = self.pad_left;
        // hb[(i * 6 + q) * tw + tx]: input row i of the tile row, component q, tile tx.
        let mut hb = vec![0f32; 36 * tw];
        for ci in 0..c {
            let xc = &x[ci * h * w..(ci + 1) * h * w];
            for ty in ty0..ty1 {
                for i in 0..6 {
                    let rows = &mut hb[i * 6 * tw..(i + 1) * 6 * tw];
                    let r = (4 * ty + i).wrapping_sub(self.pad_top);
                    if r >= h {
                        rows.fill(0.0);
                        continue;
                    }
                    let src = &xc[r * w..(r + 1) * w];
                    let mut put = |tx: usize, q: [f32; 6]| {
                        for (k, &val) in q.iter().enumerate() {
                            rows[k * tw + tx] = val;
                        }
                    };
                    for tx in (0..lo).chain(hi..tw) {
                        let e: [f32; 6] = std::array::from_fn(|q| {
                            let col = (4 * tx + q).wrapping_sub(pl);
                            if col < w {
                                src[col]
                            } else {
                                0.0
                            }
                        });
                        put(tx, bt4(&e));
                    }
                    if hi > lo {
                        let inner = src[4 * lo - pl..].windows(6).step_by(4);
                        for (tx, e) in (lo..hi).zip(inner) {
                            put(tx, bt4(e));
                        }
                    }
                }
                let t0 = (ty - ty0) * tw;
                for b in 0..6 {
                    let r = |i: usize| &hb[(i * 6 + b) * tw..][..tw];
                    let (r0, r1, r2, r3, r4, r5) = (r(0), r(1), r(2), r(3), r(4), r(5));
                    let dst = |a: usize| ((a * 6 + b) * c + ci) * n + t0;
                    for x in 0..tw {
                        let q = bt4(&[r0[x], r1[x], r2[x], r3[x], r4[x], r5[x]]);
                        for (a, &val) in q.iter().enumerate() {
                            v[dst(a) + x] = val;
                        }
                    }
                }
            }
        }
    }

    /// F(4x4) output transform of output channel `mi` for tile rows `[ty0, ty1)` into `yc`
    /// (that channel's output rows from `4 * ty0`), with bias and activation; tiles in chunks
    /// of 8, lane by lane.
    fn output_f4(
        &self,
        z: &[f32],
        ty0: usize,
        ty1: usize,
        bias: Option<&[f32]>,
        mi: usize,
        yc: &mut [f32],
    ) {
        const L: usize = CHUNK;
        let (_, tw) = self.tiles();
        let (m, oh, ow) = (self.m, self.oh, self.ow);
        let n = (ty1 - ty0) * tw;
        let bv = bias.map_or(0.0, |b| b[mi]);
        for ty in ty0..ty1 {
            let t0 = (ty - ty0) * tw;
            let rows = (oh - 4 * ty).min(4);
            let out_rows = &mut yc[(4 * (ty - ty0)) * ow..][..rows * ow];
            for x0 in (0..tw).step_by(L) {
                let l = L.min(tw - x0);
                let zz: [[f32; L]; 36] = load_chunk(z, m, mi, n, t0 + x0);
                // tmp[ti][b][q]: row ti of A^T Z for column b, lane q.
                let mut tmp = [[[0f32; L]; 6]; 4];
                for b in 0..6 {
                    for q in 0..L {
                        let col = at4(std::array::from_fn(|a| zz[a * 6 + b][q]));
                        for (ti, &val) in col.iter().enumerate() {
                            tmp[ti][b][q] = val;
                        }
                    }
                }
                for (ti, orow) in out_rows.chunks_exact_mut(ow).enumerate() {
                    let mut quads = [[0f32; 4]; L];
                    for (q, quad) in quads.iter_mut().enumerate() {
                        let y = at4(std::array::from_fn(|b| tmp[ti][b][q]));
                        *quad = y.map(|v| v + bv);
                    }
                    let cols = (4 * l).min(ow - 4 * x0);
                    let dst = &mut orow[4 * x0..4 * x0 + cols];
                    for (d, &v) in dst.iter_mut().zip(quads.as_flattened()) {
                        *d = v;
                    }
                }
            }
            crate::sgemm::activate(self.activation, out_rows);
        }
    }

    /// F(2x2) output transform of output channel `mi` for tile rows `[ty0, ty1)` into `yc`
    /// (that channel's output rows from `2 * ty0`), with bias and activation.
    fn output_f2(
        &self,
        z: &[f32],
        ty0: usize,
        ty1: usize,
        bias: Option<&[f32]>,
        mi: usize,
        yc: &mut [f32],
    ) {
        let (_, tw) = self.tiles();
        let m = self.m;
        let n = (ty1 - ty0) * tw;
        // Output transform, across the tiles of a tile row in chunks of 8 (vectorisable),
        // then bias and activation on each finished output row.
        let (oh, ow) = (self.oh, self.ow);
        const L: usize = CHUNK;
        let bv = bias.map_or(0.0, |b| b[mi]);
        for ty in ty0..ty1 {
            let t0 = (ty - ty0) * tw;
            let rows = (oh - 2 * ty).min(2);
            let out_rows = &mut yc[(2 * (ty - ty0)) * ow..][..rows * ow];
            for x0 in (0..tw).step_by(L) {
                let l = L.min(tw - x0);
                let zz: [[f32; L]; 16] = load_chunk(z, m, mi, n, t0 + x0);
                let mut y = [[0f32; L]; 4];
                for q in 0..L {
                    let zq = |a: usize, b: usize| zz[a * 4 + b][q];
                    let mut t = [0f32; 8];
                    for j in 0..4 {
                        t[j] = zq(0, j) + zq(1, j) + zq(2, j);
                        t[4 + j] = zq(1, j) - zq(2, j) - zq(3, j);
                    }
                    y[0][q] = t[0] + t[1] + t[2] + bv;
                    y[1][q] = t[1] - t[2] - t[3] + bv;
                    y[2][q] = t[4] + t[5] + t[6] + bv;
                    y[3][q] = t[5] - t[6] - t[7] + bv;
                }
                for (i, orow) in out_rows.chunks_exact_mut(ow).enumerate() {
                    let (even, odd) = (&y[2 * i], &y[2 * i + 1]);
                    if l == L && 2 * (x0 + L) <= ow {
                        // A whole chunk: interleave in registers, one fixed-size store.
                        let mut pairs = [0f32; 2 * L];
                        for (pair, (&e, &o)) in pairs.chunks_exact_mut(2).zip(even.iter().zip(odd))
                        {
                            pair[0] = e;
                            pair[1] = o;
                        }
                        let dst: &mut [f32; 2 * L] = (&mut orow[2 * x0..2 * (x0 + L)])
                            .try_into()
                            .expect("2L values");
                        *dst = pairs;
                        continue;
                    }
                    for (q, (&e, &o)) in even.iter().zip(odd).take(l).enumerate() {
                        let col = 2 * (x0 + q);
                        orow[col] = e;
                        if col + 1 < ow {
                            orow[col + 1] = o;
                        }
                    }
                }
            }
            crate::sgemm::activate(self.activation, out_rows);
        }
    }
}

impl Kernel for WinogradKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let x = ferrolite_core::op::required(inputs, 0)?;
        op_ensure!(
            x.shape() == self.x_shape.as_slice(),
            "input 0 (X) has shape {:?}, the kernel was built for {:?}",
            x.shape(),
            self.x_shape
        );
        let bias = crate::conv::bias_input(inputs, self.m)?;
        let xv = x.as_slice::<f32>()?;
        let y = outputs
            .first_mut()
            .ok_or_else(|| ferrolite_core::OpError("no output".into()))?
            .as_mut_slice::<f32>()?;
        let (th, _) = self.tiles();
        let (oh, ow) = (self.oh, self.ow);
        // The blocks are cut for the pool's threads (the scratch was declared so); the work
        // decides how many of them it is worth.
        let threads = split::threads();
        let rows = self.rows_per_block(threads);
        let blocks: Vec<(usize, usize)> = (0..th)
            .step_by(rows)
            .map(|a| (a, (a + rows).min(th)))
            .collect();
        // Blocks run in parallel when there are enough of them to go round; otherwise (small
        // images, e.g. 7x7 with one block) each block spreads its GEMMs and output transform.
        let workers = split::worth(Cost::flops(2 * self.m * self.c * oh * ow * 9));
        let parallel = workers > 1 && blocks.len() >= workers;
        let inner = if parallel { 1 } else { workers };
        let in_image = self.c * self.h * self.w;
        let out_image = self.m * oh * ow;
        for (xi, yi) in xv.chunks_exact(in_image).zip(y.chunks_exact_mut(out_image)) {
            // Each block owns output rows [2 * ty0, 2 * ty1) of every channel: split the image
            // into those disjoint pieces so blocks can run on different threads.
            let mut pieces: Vec<Vec<&mut [f32]>> =
                blocks.iter().map(|_| Vec::with_capacity(self.m)).collect();
            for plane in yi.chunks_exact_mut(oh * ow) {
                let mut rest = plane;
                for (k, &(a, b)) in blocks.iter().enumerate() {
                    let t = self.tile.outputs();
                    let r = (t * b).min(oh) - t * a;
                    let (head, tail) = rest.split_at_mut(r * ow);
                    pieces[k].push(head);
                    rest = tail;
                }
            }
            // A block in parallel works in its worker's region, blocks in turn in the shared
            // one (their GEMMs may then spread over the workers' regions).
            let work = |((a, b), mut piece): ((usize, usize), Vec<&mut [f32]>), cv: &mut Carve| {
                self.block(xi, a, b, bias, &mut piece, cv, scratch, inner)
            };
            let items: Vec<_> = blocks.iter().copied().zip(pieces).collect();
            if parallel {
                split::try_for_each_item(items, true, |w| scratch.with_thread(|cv| work(w, cv)))?;
            } else {
                split::try_for_each_item(items, false, |w| scratch.with_shared(|cv| work(w, cv)))?;
            }
        }
        Ok(())
    }

    fn name(&self) -> &str {
        match self.tile {
            WinogradTile::F2 => "cpu.conv.winograd2",
            WinogradTile::F4 => "cpu.conv.winograd4",
        }
    }

    fn prepacked_bytes(&self) -> usize {
        packed_bytes(&self.u)
    }

    fn scratch(&self, threads: usize) -> ScratchNeed {
        // A block's transformed inputs and products and its GEMMs' packing, in the shared
        // region (blocks in turn) or a worker's (blocks in parallel).
        let (_, tw) = self.tiles();
        let n = self.rows_per_block(threads) * tw;
        let planes = self.tile.patch() * self.tile.patch();
        let block = bytes_for::<f32>(planes * self.c * n)
            + bytes_for::<f32>(planes * self.m * n)
            + PackingFor::new(self.m, self.c, n).a_packed(true).bytes();
        ScratchNeed {
            shared: block,
            per_thread: block,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrolite_core::ops::linalg::conv::Conv;
    use ferrolite_core::ops::linalg::conv_geometry::ConvParams;
    use ferrolite_core::Op;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        let mut s = (seed as u32).wrapping_mul(2654435761).wrapping_add(12345);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn transforms_compute_a_3x3_correlation() {
        // One tile, one channel: A^T [(G g G^T) .* (B^T d B)] A is the 2x2 valid correlation.
        let d: Vec<f32> = values(16, 1);
        let g: Vec<f32> = values(9, 2);
        let mut u = [0f64; 36];
        transform_filter(&g, WinogradTile::F2, &mut u);
        let v = transform_input(d.as_slice().try_into().unwrap());
        let mut z = [0f32; 16];
        for p in 0..16 {
            z[p] = u[p] as f32 * v[p];
        }
        let y = transform_output(&z);
        for i in 0..2 {
            for j in 0..2 {
                let mut want = 0.0;
                for a in 0..3 {
                    for b in 0..3 {
                        want += d[(i + a) * 4 + j + b] * g[a * 3 + b];
                    }
                }
                assert!((y[i * 2 + j] - want).abs() < 1e-5, "{i} {j}");
            }
        }
    }

    #[test]
    fn f4_transforms_compute_a_3x3_correlation() {
        // One 6x6 patch, one filter: A^T [(G g G^T) .* (B^T d B)] A is the 4x4 correlation.
        let d: Vec<f32> = values(36, 3);
        let g: Vec<f32> = values(9, 4);
        let mut u = [0f64; 36];
        transform_filter(&g, WinogradTile::F4, &mut u);
        let rows: Vec<[f32; 6]> = (0..6).map(|i| bt4(&d[i * 6..i * 6 + 6])).collect();
        // v[a][b] = (B^T d B)[a][b]: the columns of the row-transformed patch, transformed.
        let cols: Vec<[f32; 6]> = (0..6)
            .map(|b| bt4(&std::array::from_fn::<f32, 6, _>(|i| rows[i][b])))
            .collect();
        let z = |a: usize, b: usize| u[a * 6 + b] as f32 * cols[b][a];
        let tz: Vec<[f32; 4]> = (0..6)
            .map(|b| at4(std::array::from_fn(|a| z(a, b))))
            .collect();
        for i in 0..4 {
            let y = at4(std::array::from_fn(|b| tz[b][i]));
            for (j, &got) in y.iter().enumerate() {
                let mut want = 0.0;
                for p in 0..3 {
                    for q in 0..3 {
                        want += d[(i + p) * 6 + j + q] * g[p * 3 + q];
                    }
                }
                assert!((got - want).abs() < 1e-5, "{i} {j}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn matches_the_reference_over_shapes() {
        let acts = [
            None,
            Some(UnaryKind::Relu),
            Some(UnaryKind::Clip { min: 0.0, max: 6.0 }),
        ];
        let mut case = 0;
        // Two workers whatever the machine, so both ways of spreading the work run.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let variants = crate::tests::tested_isas()
            .into_iter()
            .flat_map(|isa| [WinogradTile::F2, WinogradTile::F4].map(|tile| (Sgemm { isa }, tile)));
        for (gemm, tile) in variants {
            for &(n, c, m, h, w) in &[
                (1, 16, 16, 4, 4),
                (1, 17, 23, 7, 9),
                (2, 16, 32, 8, 5),
                (1, 32, 16, 13, 12),
                (1, 64, 64, 14, 14),
                // Several blocks of tile rows, the last one partial, on several threads
                // (F(2x2) in the first, F(4x4) in the second).
                (1, 16, 16, 41, 37),
                (1, 16, 16, 90, 37),
                // One block of enough work to spread its GEMMs over the threads.
                (1, 128, 64, 7, 7),
            ] {
                for pads in [[0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0], [2, 0, 1, 2]] {
                    case += 1;
                    let act = acts[case % acts.len()];
                    let with_bias = case % 2 == 0;
                    let params = ConvParams {
                        pads: Some(pads.to_vec()),
                        ..Default::default()
                    };
                    let op = Conv {
                        params,
                        group: 1,
                        activation: act,
                    };
                    let x = Tensor::from_vec(&[n, c, h, w], values(n * c * h * w, case)).unwrap();
                    let wt =
                        Tensor::from_vec(&[m, c, 3, 3], values(m * c * 9, case + 100)).unwrap();
                    let b = Tensor::from_vec(&[m], values(m, case + 200)).unwrap();
                    let ins = [Some(&x), Some(&wt), with_bias.then_some(&b)];
                    let want = op.eval(&ins).unwrap().remove(0);
                    let s = op.shapes(x.shape(), wt.shape()).unwrap();
                    if s.geometry.output.iter().any(|&o| o < 4) {
                        continue;
                    }
                    let k = WinogradKernel::new(
                        gemm,
                        tile,
                        &s,
                        act,
                        x.shape(),
                        Some(&wt),
                        Prepacks::none(),
                    )
                    .unwrap()
                    .expect("winograd applies");
                    let mut out =
                        [Tensor::zeros(ferrolite_core::DType::F32, want.shape()).unwrap()];
                    // Twice: the second run reuses the scratch buffers.
                    for _ in 0..2 {
                        pool.install(|| k.run_alone(&ins, &mut out)).unwrap();
                        let got = out[0].as_slice::<f32>().unwrap();
                        let want = want.as_slice::<f32>().unwrap();
                        // F(4x4) rounds relative to the size of the outputs around, not of
                        // each output (its transforms scale values by up to 100 and cancel).
                        let scale = want.iter().fold(0f32, |a, r| a.max(r.abs()));
                        let spread = match tile {
                            WinogradTile::F2 => 0.0,
                            WinogradTile::F4 => 2e-5 * scale,
                        };
                        for (i, (g, r)) in got.iter().zip(want).enumerate() {
                            assert!(
                                (g - r).abs() <= 1e-4 + 1e-4 * r.abs() + spread,
                                "case {case} {tile:?} ({n},{c},{m},{h},{w}) pads {pads:?} at {i}: {g} vs {r}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn accurate_precision_picks_the_2x2_tile() {
        use crate::{CpuBackend, Precision};
        // resnet18's 28x28 convs: F(4x4) at Fast, F(2x2) at Accurate, under every ISA.
        let op: std::sync::Arc<dyn ferrolite_core::Op> = std::sync::Arc::new(Conv {
            params: ConvParams {
                pads: Some(vec![1, 1, 1, 1]),
                ..Default::default()
            },
            group: 1,
            activation: None,
        });
        let x = Tensor::from_vec(&[1, 128, 28, 28], values(128 * 28 * 28, 1)).unwrap();
        let w = Tensor::from_vec(&[128, 128, 3, 3], values(128 * 128 * 9, 2)).unwrap();
        let ins = [Some(x), Some(w)];
        for isa in crate::tests::tested_isas() {
            for (precision, want) in [
                (Precision::Fast, "cpu.conv.winograd4"),
                (Precision::Accurate, "cpu.conv.winograd2"),
            ] {
                let backend = CpuBackend::new(isa).with_precision(precision);
                let (k, _) = crate::tests::kernel_for(&backend, &op, &ins, &[false, true]);
                assert_eq!(k.name(), want, "{isa} {precision}");
            }
        }
    }

    #[test]
    fn declines_other_shapes() {
        let x = Tensor::zeros(ferrolite_core::DType::F32, &[1, 16, 8, 8]).unwrap();
        for (params, group, wshape) in [
            (
                ConvParams {
                    strides: Some(vec![2, 2]),
                    ..Default::default()
                },
                1,
                [16, 16, 3, 3],
            ),
            (ConvParams::default(), 1, [16, 16, 5, 5]),
            (ConvParams::default(), 2, [16, 8, 3, 3]),
            (ConvParams::default(), 1, [8, 16, 3, 3]),
        ] {
            let op = Conv {
                params,
                group,
                activation: None,
            };
            let wt = Tensor::zeros(ferrolite_core::DType::F32, &wshape).unwrap();
            let s = op.shapes(x.shape(), wt.shape()).unwrap();
            let k = WinogradKernel::new(
                Sgemm::default(),
                WinogradTile::F4,
                &s,
                None,
                x.shape(),
                Some(&wt),
                Prepacks::none(),
            );
            assert!(k.unwrap().is_none());
        }
    }
}
