//! 3x3 stride-1 convolution by Winograd's minimal filtering F(2x2, 3x3).
//!
//! Each 2x2 block of outputs ("tile") is computed from a 4x4 input patch with 16 multiplies per
//! (input channel, output channel) instead of 36. Over all tiles that becomes 16 independent
//! GEMMs, one per position of the 4x4 transformed patch:
//!
//! ```text
//! U[p] = (G g G^T)[p]   weights, [M x C], transformed and packed once at plan build
//! V[p] = (B^T d B)[p]   inputs,  [C x T] over the T tiles, transformed per run
//! Z[p] = U[p] * V[p]    [M x T]
//! y    = A^T Z A        the 2x2 outputs of each tile, then bias and activation
//! ```
//!
//! F(2x2, 3x3) keeps the transforms to additions and halvings, so its results stay within a few
//! ulps of the direct sum (larger tiles trade accuracy for speed; we do not use them).

use crate::gemm::{Epilogue, Gemm, MatMut, MatRef, Operand, PackedMatrix, Sgemm, Side};
use ferrolite_core::ops::linalg::conv::ConvShapes;
use ferrolite_core::ops::nn::activation::Activation;
use ferrolite_core::plan::Kernel;
use ferrolite_core::{op_ensure, OpResult, Tensor};
use rayon::prelude::*;

/// Work (multiply-adds of the direct convolution) below which a conv runs on one thread.
const PARALLEL_MACS: usize = 1 << 18;

/// Scratch budget of one block of tiles (transformed inputs and products), in bytes.
const L2_BYTES: usize = 256 * 1024;

/// The kernel for one Conv node.
#[derive(Debug)]
pub struct WinogradKernel {
    gemm: Sgemm,
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
    /// `U[p]` for the 16 patch positions, packed as left operands.
    u: Vec<PackedMatrix>,
    activation: Option<Activation>,
}

/// G g G^T for one 3x3 filter `g` (row-major), computed in f64.
fn transform_filter(g: &[f32]) -> [f64; 16] {
    let g = |i: usize, j: usize| g[i * 3 + j] as f64;
    // G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]
    let mut t = [[0f64; 3]; 4];
    #[allow(clippy::needless_range_loop)] // the formulas read best with explicit indices
    for j in 0..3 {
        t[0][j] = g(0, j);
        t[1][j] = 0.5 * (g(0, j) + g(1, j) + g(2, j));
        t[2][j] = 0.5 * (g(0, j) - g(1, j) + g(2, j));
        t[3][j] = g(2, j);
    }
    let mut u = [0f64; 16];
    for i in 0..4 {
        u[i * 4] = t[i][0];
        u[i * 4 + 1] = 0.5 * (t[i][0] + t[i][1] + t[i][2]);
        u[i * 4 + 2] = 0.5 * (t[i][0] - t[i][1] + t[i][2]);
        u[i * 4 + 3] = t[i][2];
    }
    u
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
        s: &ConvShapes,
        activation: Option<Activation>,
        x_shape: &[usize],
        w_value: Option<&Tensor>,
    ) -> OpResult<Option<WinogradKernel>> {
        let g = &s.geometry;
        let fits = g.input.len() == 2
            && g.kernel == [3, 3]
            && g.strides == [1, 1]
            && g.dilations == [1, 1]
            && s.group == 1
            && s.in_channels >= 16
            && s.out_channels >= 16
            && g.output.iter().all(|&o| o >= 4);
        let Some(w) = w_value.filter(|_| fits) else {
            return Ok(None);
        };
        let (c, m) = (s.in_channels, s.out_channels);
        let wv = w.as_slice::<f32>()?;
        op_ensure!(wv.len() == m * c * 9, "input 1 (W) has {} values", wv.len());
        let mut planes = vec![vec![0f32; m * c]; 16];
        for (f, filter) in wv.chunks_exact(9).enumerate() {
            let u = transform_filter(filter);
            for (p, plane) in planes.iter_mut().enumerate() {
                plane[f] = u[p] as f32;
            }
        }
        let u = planes
            .iter()
            .map(|plane| {
                let src = MatRef {
                    data: plane,
                    rs: c,
                    cs: 1,
                };
                gemm.pack(m, c, src, Side::A)
            })
            .collect::<OpResult<Vec<_>>>()?;
        Ok(Some(WinogradKernel {
            gemm,
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
        (self.oh.div_ceil(2), self.ow.div_ceil(2))
    }

    /// Tile rows per block: enough tiles for an efficient GEMM (at least one 16-wide panel),
    /// few enough that a block's transformed inputs and products stay in L2.
    fn rows_per_block(&self) -> usize {
        let (_, tw) = self.tiles();
        let per_tile = 16 * (self.c + self.m) * 4;
        let target = (L2_BYTES / per_tile).max(16);
        target.div_ceil(tw).max(1)
    }

    /// One block of tile rows `[ty0, ty1)` of one image: transforms its input patches into `v`
    /// (`16 x C x n`), multiplies into `z` (`16 x M x n`), and writes the outputs to `out`, one
    /// slice per output channel holding output rows `2 * ty0..` of that channel.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        x: &[f32],
        ty0: usize,
        ty1: usize,
        bias: Option<&[f32]>,
        out: &mut [&mut [f32]],
        v: &mut Vec<f32>,
        z: &mut Vec<f32>,
        inner: bool,
    ) -> OpResult<()> {
        #[cfg(target_arch = "x86_64")]
        if self.gemm.isa == crate::sgemm::Isa::Avx2Fma {
            // SAFETY: the Avx2Fma GEMM is only chosen on CPUs with AVX2 and FMA, the only
            // requirement of the target_feature function, whose body is safe code.
            return unsafe { self.block_avx2(x, ty0, ty1, bias, out, v, z, inner) };
        }
        self.block_impl(x, ty0, ty1, bias, out, v, z, inner)
    }

    /// [`Self::block`] compiled for AVX2, so the transforms' loops use 8-wide vectors.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn block_avx2(
        &self,
        x: &[f32],
        ty0: usize,
        ty1: usize,
        bias: Option<&[f32]>,
        out: &mut [&mut [f32]],
        v: &mut Vec<f32>,
        z: &mut Vec<f32>,
        inner: bool,
    ) -> OpResult<()> {
        self.block_impl(x, ty0, ty1, bias, out, v, z, inner)
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn block_impl(
        &self,
        x: &[f32],
        ty0: usize,
        ty1: usize,
        bias: Option<&[f32]>,
        out: &mut [&mut [f32]],
        v: &mut Vec<f32>,
        z: &mut Vec<f32>,
        inner: bool,
    ) -> OpResult<()> {
        let (_, tw) = self.tiles();
        let (h, w, c, m) = (self.h, self.w, self.c, self.m);
        let n = (ty1 - ty0) * tw;
        v.resize(16 * c * n, 0.0);
        z.resize(16 * m * n, 0.0);
        // Input transform, row-wise and across all tiles of a tile row at once: each
        // padded input row is transformed along its columns (h), then the four rows of a tile
        // row are combined, writing the 16 planes of v contiguously.
        let mut hb = vec![0f32; 16 * tw];
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
                    // Tile tx reads columns 2 * tx - pad_left .. + 4: the interior tiles
                    // [lo, hi) straight from the row, the edge ones through a padded copy.
                    let pl = self.pad_left;
                    let lo = pl.div_ceil(2).min(tw);
                    let hi = if w + pl >= 4 {
                        ((w + pl - 4) / 2 + 1).clamp(lo, tw)
                    } else {
                        lo
                    };
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
        let gemm_plane = |(p, zp): (usize, &mut [f32])| {
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
                false,
            )
        };
        let planes = &mut z[..16 * m * n];
        if inner {
            planes
                .par_chunks_mut(m * n)
                .enumerate()
                .try_for_each(gemm_plane)?;
        } else {
            planes
                .chunks_mut(m * n)
                .enumerate()
                .try_for_each(gemm_plane)?;
        }
        let z: &[f32] = z;
        // Output transform, across the tiles of a tile row in chunks of 8 (vectorisable),
        // then bias and activation on each finished output row.
        let (oh, ow) = (self.oh, self.ow);
        const L: usize = 8;
        let per_channel = |(mi, yc): (usize, &mut &mut [f32])| {
            let bv = bias.map_or(0.0, |b| b[mi]);
            for ty in ty0..ty1 {
                let t0 = (ty - ty0) * tw;
                let rows = (oh - 2 * ty).min(2);
                let out_rows = &mut yc[(2 * (ty - ty0)) * ow..][..rows * ow];
                for x0 in (0..tw).step_by(L) {
                    let l = L.min(tw - x0);
                    let mut zz = [[0f32; L]; 16];
                    for (p, zp) in zz.iter_mut().enumerate() {
                        let src = &z[(p * m + mi) * n + t0 + x0..];
                        if src.len() >= L {
                            // A fixed-size copy: vector moves, not a memmove call. Lanes past
                            // `l` (the next tiles' values) are computed but never stored.
                            *zp = src[..L].try_into().expect("L values");
                        } else {
                            // Element by element: a short memmove call per plane costs more.
                            for (q, d) in zp.iter_mut().enumerate().take(l) {
                                *d = std::hint::black_box(src[q]);
                            }
                        }
                    }
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
                            for (pair, (&e, &o)) in
                                pairs.chunks_exact_mut(2).zip(even.iter().zip(odd))
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
        };
        if inner {
            out.par_iter_mut().enumerate().for_each(per_channel);
        } else {
            out.iter_mut().enumerate().for_each(per_channel);
        }
        Ok(())
    }
}

impl Kernel for WinogradKernel {
    fn run(&self, inputs: &[Option<&Tensor>], outputs: &mut [Tensor]) -> OpResult<()> {
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
        let rows = self.rows_per_block();
        let blocks: Vec<(usize, usize)> = (0..th)
            .step_by(rows)
            .map(|a| (a, (a + rows).min(th)))
            .collect();
        // Blocks run in parallel when there are enough of them to go round; otherwise (small
        // images, e.g. 7x7 with one block) each block spreads its GEMMs and output transform.
        let big = self.m * self.c * oh * ow * 9 >= PARALLEL_MACS;
        let threads = rayon::current_num_threads();
        let parallel = big && blocks.len() >= threads && blocks.len() > 1;
        let inner = big && !parallel && threads > 1;
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
                    let r = (2 * b).min(oh) - 2 * a;
                    let (head, tail) = rest.split_at_mut(r * ow);
                    pieces[k].push(head);
                    rest = tail;
                }
            }
            let work =
                |scratch: &mut (Vec<f32>, Vec<f32>),
                 ((a, b), mut piece): ((usize, usize), Vec<&mut [f32]>)| {
                    self.block(
                        xi,
                        a,
                        b,
                        bias,
                        &mut piece,
                        &mut scratch.0,
                        &mut scratch.1,
                        inner,
                    )
                };
            if parallel {
                blocks
                    .par_iter()
                    .copied()
                    .zip(pieces)
                    .try_for_each_init(|| (Vec::new(), Vec::new()), work)?;
            } else {
                let mut scratch = (Vec::new(), Vec::new());
                for item in blocks.iter().copied().zip(pieces) {
                    work(&mut scratch, item)?;
                }
            }
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.conv.winograd"
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
        let u = transform_filter(&g);
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
    fn matches_the_reference_over_shapes() {
        let acts = [
            None,
            Some(Activation::Relu),
            Some(Activation::Clip { min: 0.0, max: 6.0 }),
        ];
        let mut case = 0;
        // Two workers whatever the machine, so both ways of spreading the work run.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for gemm in [Sgemm::default(), Sgemm::portable()] {
            for &(n, c, m, h, w) in &[
                (1, 16, 16, 4, 4),
                (1, 17, 23, 7, 9),
                (2, 16, 32, 8, 5),
                (1, 32, 16, 13, 12),
                (1, 64, 64, 14, 14),
                // Several blocks of tile rows, the last one partial, on several threads.
                (1, 16, 16, 41, 37),
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
                    let k = WinogradKernel::new(gemm, &s, act, x.shape(), Some(&wt))
                        .unwrap()
                        .expect("winograd applies");
                    let mut out =
                        [Tensor::zeros(ferrolite_core::DType::F32, want.shape()).unwrap()];
                    // Twice: the second run reuses the scratch buffers.
                    for _ in 0..2 {
                        pool.install(|| k.run(&ins, &mut out)).unwrap();
                        let got = out[0].as_slice::<f32>().unwrap();
                        let want = want.as_slice::<f32>().unwrap();
                        for (i, (g, r)) in got.iter().zip(want).enumerate() {
                            assert!(
                                (g - r).abs() <= 1e-4 + 1e-4 * r.abs(),
                                "case {case} ({n},{c},{m},{h},{w}) pads {pads:?} at {i}: {g} vs {r}"
                            );
                        }
                    }
                }
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
            let k = WinogradKernel::new(Sgemm::default(), &s, None, x.shape(), Some(&wt));
            assert!(k.unwrap().is_none());
        }
    }
}
