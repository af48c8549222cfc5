//! Winograd F(4x4, 3x3) convolution on blocked (NCHWc) tensors, for AVX-512.
//!
//! The plain Winograd kernel (`crate::winograd`) transforms one channel plane at a time in
//! scalar loops and multiplies `M x C` weights by `C x tiles` inputs, packing the inputs for
//! every GEMM; under AVX-512 the blocked direct convolution beat it on every 3x3 conv. Here
//! the blocked layout holds eight channels of a pixel side by side, so both transforms run on
//! whole vectors of channels, and the products are `tiles x C` by `C x M` with the weights
//! packed once:
//!
//! 1. a block of [`BLOCK_TILES`] output tiles (4x4 pixels each) reads its 6x6 input patches
//!    from a zero-padded copy of the input and writes `V[p][tile][C] = (B^T d B)[p]` for the
//!    36 patch positions `p`;
//! 2. 36 GEMMs `Z[p] = V[p] U[p]` (`U[p] = (G g G^T)[p]`, `C x M`, packed at build in
//!    panels of 32 output channels) by this module's own microkernel: eight tiles by 32
//!    channels in sixteen zmm accumulators, `V`'s rows broadcast where they lie. The general
//!    GEMM packed `V` and set up its tiles for every one of the 36 products of a block, which
//!    with the few input channels of squeezenet's expand convs (16 to 64) cost more than
//!    the multiplies (58 GFLOP/s over those products on one Zen 4 core);
//! 3. `A^T Z A` per tile and block of eight output channels gives the 4x4 outputs, plus bias
//!    and activation, stored straight into the blocked output.
//!
//! Four times fewer multiplies than the direct convolution; the transforms and the weights
//! (36 planes instead of 9) are the cost, so [`pays`] keeps it to images with enough tiles.

use super::{SendPtr, B};
use crate::kernel_io::{input, output};
use crate::split::{self, Cost};
use crate::winograd::{transform_filter, WinogradTile};
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::plan::Kernel;
use ferrolite_core::prepacked::{Packed, Prepacks};
use ferrolite_core::scratch::{bytes_for, Carve, Scratch, ScratchNeed};
use ferrolite_core::{op_ensure, OpResult, Tensor};

/// The most output tiles per block: the GEMMs' rows, and what each packed weight plane is
/// reused for before the next block streams it again.
const BLOCK_TILES: usize = 48;

/// Tiles (rows of `V[p]` and `Z[p]`) per microkernel call.
const ROWS: usize = 8;

/// Output channels per panel of `U[p]`: two 16-lane vectors.
const PANEL: usize = 32;

/// Patch positions (6 x 6).
const P: usize = 36;

/// The distance between two positions' planes of `V` (or `Z`) with `len` values each: one
/// cache line more than a multiple of 16, so the 36 planes a tile's transform writes (or
/// reads) do not all fall in the same L1 set (48 tiles of 64 channels are 12 KB apart
/// exactly: the transform ran 4x slower).
fn plane_stride(len: usize) -> usize {
    len.next_multiple_of(16) + 16
}

/// Whether the blocked Winograd kernel computes this convolution, and pays: 3x3, stride 1,
/// dilation 1, one group, whole blocks of channels, at least 16 input channels and an output
/// of at least 12 x 12 (9 tiles). Measured against the direct kernel on one core (AMD EPYC,
/// Zen 4), per conv: squeezenet1_1's expand convs (16 to 64 input channels) 0.51-0.54 ->
/// 0.20-0.26 ms at 55x55 and 27x27, 0.46-0.49 -> 0.25 ms at 13x13; resnet18's 256-channel
/// 14x14 ones 2.17 -> 1.1 ms. Its 512-channel 7x7 ones (4 tiles) ran 2.47 -> 1.6 ms, but
/// their transformed weights (36 planes against the direct kernel's 9) took the session's
/// peak RSS from 196 to 309 MB, so outputs under 12 stay direct.
pub(crate) fn pays(s: &ConvShapes) -> bool {
    let g = &s.geometry;
    g.input.len() == 2
        && g.kernel == [3, 3]
        && g.strides == [1, 1]
        && g.dilations == [1, 1]
        && s.group == 1
        && s.in_channels.is_multiple_of(B)
        && s.out_channels.is_multiple_of(B)
        && s.in_channels >= 16
        && g.output.iter().all(|&o| o >= 12)
}

/// A blocked Winograd F(4x4, 3x3) convolution (see the module's comment).
#[derive(Debug)]
pub(crate) struct WinogradKernel {
    x: Vec<usize>,
    s: ConvShapes,
    /// `U[p]`, `C x M`, as `[P][M / PANEL][C][PANEL]` (the last panel zero-filled past `M`).
    u: Packed<f32>,
    bias: Vec<f32>,
    act: Option<UnaryKind>,
}

impl WinogradKernel {
    /// `None` unless [`pays`] and the weights are `M x C x 3 x 3`.
    pub(crate) fn new(
        s: ConvShapes,
        act: Option<UnaryKind>,
        x: &[usize],
        w: &[f32],
        bias: Option<&[f32]>,
        packs: &Prepacks,
    ) -> OpResult<Option<Self>> {
        let (c, m) = (s.in_channels, s.out_channels);
        if !pays(&s) || w.len() != m * c * 9 {
            return Ok(None);
        }
        // U[p][panel][ci][column] from each filter's transform; from an optimized model when
        // it holds them (ferrolite_core::prepacked).
        let panels = m.div_ceil(PANEL);
        let len = P * panels * c * PANEL;
        let u = packs.take(&[P, c, m, PANEL], len, || {
            let mut u = vec![0f32; len];
            let mut t = [0f64; 36];
            for (f, filter) in w.chunks_exact(9).enumerate() {
                let (mi, ci) = (f / c, f % c);
                transform_filter(filter, WinogradTile::F4, &mut t);
                let (panel, col) = (mi / PANEL, mi % PANEL);
                for (p, &v) in t.iter().enumerate() {
                    u[((p * panels + panel) * c + ci) * PANEL + col] = v as f32;
                }
            }
            u
        });
        op_ensure!(
            u.len() == len,
            "packed Winograd weights hold {} values",
            u.len()
        );
        Ok(Some(WinogradKernel {
            x: x.to_vec(),
            bias: bias.map_or_else(|| vec![0.0; m], |b| b.to_vec()),
            s,
            u,
            act,
        }))
    }

    /// Tile rows and columns.
    fn tiles(&self) -> (usize, usize) {
        let o = &self.s.geometry.output;
        (o[0].div_ceil(4), o[1].div_ceil(4))
    }

    /// The padded input's height and width: every tile's 6 x 6 patch lies inside.
    fn padded(&self) -> (usize, usize) {
        let (th, tw) = self.tiles();
        (4 * th + 2, 4 * tw + 2)
    }

    /// Copies one image (blocked, `C/8` planes) into `dst` at the convolution's top and left
    /// padding, zeros around it up to the padded size.
    fn pad(&self, src: &[f32], dst: &mut [f32]) {
        let g = &self.s.geometry;
        let (ph, pw) = self.padded();
        let (ih, iw) = (g.input[0], g.input[1]);
        let (pt, pl) = (g.pad_begin[0], g.pad_begin[1]);
        // A 3x3 stride-1 output has ih + pt + pb - 2 rows, so the 4 th + 2 padded rows hold
        // the top padding and the whole image (and likewise across): `pad_plane` zeroes the
        // rest.
        for (s, d) in src
            .chunks_exact(ih * iw * B)
            .zip(dst.chunks_exact_mut(ph * pw * B))
        {
            super::pad_plane(s, d, [ih, iw], [pt, pl], pw, B);
        }
    }

    /// Tiles per block and blocks per image on `threads` workers: as many blocks as fit
    /// BLOCK_TILES, rounded up to a multiple of the threads so they finish together
    /// (resnet18's 196 tiles made 5 blocks for 2 threads).
    fn blocks(&self, threads: usize) -> (usize, usize) {
        let (th, tw) = self.tiles();
        let tiles = th * tw;
        let wanted = tiles.div_ceil(BLOCK_TILES).next_multiple_of(threads.max(1));
        let per_block = tiles.div_ceil(wanted.max(1));
        (per_block, tiles.div_ceil(per_block.max(1)))
    }

    /// One block of tiles `[t0, t1)` of one image: transforms, GEMMs, output.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        x: &[f32],
        t0: usize,
        t1: usize,
        own: &mut Carve,
        y: SendPtr,
        inner: bool,
    ) -> OpResult<()> {
        let (c, m) = (self.s.in_channels, self.s.out_channels);
        let n = t1 - t0;
        let (vs, zs) = (plane_stride(n * c), plane_stride(n * m));
        let v: &mut [f32] = own.take(P * vs)?;
        let z: &mut [f32] = own.take(P * zs)?;
        // SAFETY: the CPU has AVX-512F and VL (the kernel is built for Avx512 only); the
        // transforms check the sizes they rely on.
        unsafe { avx512::input(self, x, t0, t1, v) };
        let (v, u): (&[f32], &[f32]) = (v, &self.u);
        let gemm_plane = |(p, zp): (usize, &mut [f32])| {
            // SAFETY: as above; the products check the sizes they rely on.
            unsafe { avx512::product(self, u, &v[p * vs..p * vs + n * c], p, zp) }
        };
        split::for_rows(z, zs, if inner { split::threads() } else { 1 }, |p, zp| {
            gemm_plane((p, &mut zp[..n * m]))
        });
        let z: &[f32] = z;
        let blocks = m / B;
        let out = |ob: usize| {
            // SAFETY: as above; this call writes output block ob of tiles t0..t1 only.
            unsafe { avx512::output(self, z, t0, t1, ob, y) }
        };
        split::for_each_task(blocks, inner, out);
        Ok(())
    }
}

impl Kernel for WinogradKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let s = &self.s;
        let g = &s.geometry;
        let (c, m) = (s.in_channels, s.out_channels);
        let (oh, ow) = (g.output[0], g.output[1]);
        let y = output(outputs, 0, s.batch * m * oh * ow)?;
        let in_item = c * g.input[0] * g.input[1];
        op_ensure!(x.len() == s.batch * in_item, "input has {} values", x.len());
        let (th, tw) = self.tiles();
        let tiles = th * tw;
        let (ph, pw) = self.padded();
        // The blocks are cut for the pool's threads (the scratch was declared so); the work
        // decides how many of them it is worth.
        let (per_block, blocks) = self.blocks(split::threads());
        let workers = split::worth(Cost::flops(2 * m * c * oh * ow * 9));
        // Blocks in parallel when there are enough of them; otherwise each block spreads its
        // GEMMs and output transform over the threads.
        let parallel = workers > 1 && blocks >= workers;
        let inner = workers > 1 && !parallel;
        for (xi, yi) in x.chunks_exact(in_item).zip(y.chunks_exact_mut(m * oh * ow)) {
            let yp = SendPtr(yi.as_mut_ptr());
            // The padded image in the shared region; a block's transformed inputs and
            // products after it (blocks in turn) or in its worker's region (in parallel).
            scratch.with_shared(|shared| {
                let xp: &mut [f32] = shared.take(c * ph * pw)?;
                self.pad(xi, xp);
                let xp: &[f32] = xp;
                let work = |b: usize, own: &mut Carve| {
                    let (t0, t1) = (b * per_block, ((b + 1) * per_block).min(tiles));
                    self.block(xp, t0, t1, own, yp, inner)
                };
                if parallel {
                    split::try_for_each_task(blocks, true, |b| {
                        scratch.with_thread(|own| work(b, own))
                    })
                } else {
                    let mut region = shared.take_region(shared.remaining())?;
                    (0..blocks).try_for_each(|b| work(b, &mut region.carve()))
                }
            })?;
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.nchwc.winograd4"
    }

    fn scratch(&self, threads: usize) -> ScratchNeed {
        let (c, m) = (self.s.in_channels, self.s.out_channels);
        let (ph, pw) = self.padded();
        let (n, _) = self.blocks(threads);
        let block =
            bytes_for::<f32>(P * plane_stride(n * c)) + bytes_for::<f32>(P * plane_stride(n * m));
        ScratchNeed {
            shared: bytes_for::<f32>(c * ph * pw) + block,
            per_thread: block,
        }
    }

    fn prepacked_bytes(&self) -> usize {
        size_of_val(&*self.u) + size_of_val(self.bias.as_slice())
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512;
