//! The integer GEMM of the int8 kernels: `C[m, n] = sum_k R[m, k] * P[k, n]` over 8-bit
//! operands accumulated in i32, zero points corrected afterwards, then requantized (or written
//! as i32 or f32) in the epilogue.
//!
//! One operand is unsigned (activations) and the other signed (weights); any 8-bit tensor is
//! brought to that form exactly by flipping its top bit and its zero point with it
//! (`x - z == (x ^ 0x80) - (z ^ 0x80)` read with the other signedness), so the kernels only
//! see u8 x s8. Which side is which depends on the op: a convolution broadcasts weight rows
//! over activation columns (`R` = weights, s8), a MatMul broadcasts activation rows over weight
//! columns (`R` = activations, u8).
//!
//! Operands are packed once per layout: `R` in blocks of `MR` rows, `P` in panels of `NR`
//! columns, both with `k` grouped the way the path's instruction consumes it:
//! - `Quad`: 4 consecutive `k` per row or column, as bytes (`vpdpbusd`, and the portable path);
//! - `Pair`: 2 consecutive `k`, widened to i16 (AVX2's `vpmaddwd`). Widening first is what
//!   keeps AVX2 exact: `vpmaddubsw` would add two u8 x s8 products in 16 bits, which saturates
//!   (255 * -128 * 2 < -32768), the error onnxruntime's AVX2 path accepts.
//!
//! The AMX path (Intel's tile unit, `tdpbusd` on 16 x 64-byte tiles) keeps the `Quad` panels
//! and takes its rows row-major instead (each row's `k` bytes contiguous, as a tile row
//! loads them), both with `k` padded to a multiple of 64.
//!
//! The padding of `k` to the group size is zero on both sides, so it adds nothing; the sums
//! used by the zero-point corrections are over the real `k` only.

mod line_bytes;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

pub use line_bytes::{Bytes, LineBytes, Pairs, Store};

use crate::split::{self, Cost};
use crate::Isa;
use ferrolite_core::prepacked::Prepacks;
use ferrolite_core::scratch::{bytes_for, Carve};
use ferrolite_core::{op_ensure, OpResult};

/// Which integer multiply-add instructions the GEMM uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QPath {
    /// Plain Rust on the `Quad` layout.
    Portable,
    /// AVX2 `vpmaddwd` on i16 pairs (exact, no 16-bit saturation).
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX-VNNI `vpdpbusd` on byte quads, 256-bit (VEX-encoded; CPUs with AVX-VNNI but no
    /// AVX-512 VNNI, and sessions whose ISA is avx2 on CPUs with both).
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    /// AVX-512 VNNI `vpdpbusd` on byte quads, 512-bit.
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
    /// AMX-INT8 tiles (`tdpbusd`), where the CPU and the OS allow them and a product is deep
    /// enough to pay ([`QPath::amx_if_pays`]); the AVX-512 epilogue.
    #[cfg(target_arch = "x86_64")]
    Amx,
    /// Baseline NEON `SMULL` + `SADALP` on byte quads (aarch64 without the dot product).
    #[cfg(target_arch = "aarch64")]
    Neon,
    /// NEON `SDOT` on byte quads (aarch64 with FEAT_DotProd).
    #[cfg(target_arch = "aarch64")]
    NeonDot,
}

/// The int8 GEMM's part of an ISA's microkernel table ([`crate::table`]), chosen once per
/// table from the CPU's features (`qgemm/x86/*.rs` and `qgemm/neon.rs` fill it).
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    /// The tiles, packing and epilogue of every product. The AMX tiles replace AVX-512 VNNI's
    /// for deep products where they pay ([`QPath::amx_if_pays`]).
    pub(crate) path: QPath,
    /// The tile that reads a channels-last convolution's activations in place through tap
    /// pointers and requantizes per column in registers, where the path has one.
    #[cfg(target_arch = "x86_64")]
    pub(crate) indirect: Option<x86::IndirectTile>,
}

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    path: QPath::Portable,
    #[cfg(target_arch = "x86_64")]
    indirect: None,
};

/// How `k` is grouped in packed operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    Quad,
    /// The AVX2 path's (x86 only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Pair,
}

impl QPath {
    /// The path of a session's ISA, from its table: the widest VNNI the ISA's registers allow
    /// where the CPU has it, else AVX2's exact `vpmaddwd` (`table.rs`, `refined_x86`).
    pub fn for_isa(isa: Isa) -> QPath {
        isa.table().qgemm.path
    }

    /// Every path this CPU can run, whether or not an ISA maps to it (the GEMM tests run
    /// each; the kernel tests run each ISA's).
    #[cfg(test)]
    pub fn available() -> Vec<QPath> {
        #[allow(unused_mut)]
        let mut v = vec![QPath::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            let isas = Isa::available();
            if isas.iter().any(|i| i.has_avx2()) {
                v.push(QPath::Avx2);
                if std::arch::is_x86_feature_detected!("avxvnni") {
                    v.push(QPath::AvxVnni);
                }
            }
            if isas.iter().any(|&i| QPath::for_isa(i) == QPath::Avx512Vnni) {
                v.push(QPath::Avx512Vnni);
                if x86::amx_ready() {
                    v.push(QPath::Amx);
                }
            }
        }
        #[cfg(target_arch = "aarch64")]
        for isa in Isa::available() {
            let path = QPath::for_isa(isa);
            if !v.contains(&path) {
                v.push(path);
            }
        }
        v
    }

    /// (rows per block, columns per panel).
    pub fn tile(self) -> (usize, usize) {
        match self {
            QPath::Portable => (4, 8),
            #[cfg(target_arch = "x86_64")]
            QPath::Avx2 => (x86::AVX2_MR, x86::AVX2_NR),
            #[cfg(target_arch = "x86_64")]
            QPath::AvxVnni => (x86::AVX_VNNI_MR, x86::AVX_VNNI_NR),
            #[cfg(target_arch = "x86_64")]
            QPath::Avx512Vnni => (x86::VNNI_MR, x86::VNNI_NR),
            #[cfg(target_arch = "x86_64")]
            QPath::Amx => (x86::AMX_MR, x86::AMX_NR),
            #[cfg(target_arch = "aarch64")]
            QPath::Neon => (neon::NEON_MR, neon::NEON_NR),
            #[cfg(target_arch = "aarch64")]
            QPath::NeonDot => (neon::DOT_MR, neon::DOT_NR),
        }
    }

    /// The AMX path instead of AVX-512 VNNI for a product of depth `k` into `n` columns,
    /// where the tiles are available and pay: they pad `k` to 64 and the columns to 32, and
    /// their epilogue goes through memory, which a shallow or narrow product does not repay.
    pub fn amx_if_pays(self, k: usize, n: usize) -> QPath {
        #[cfg(target_arch = "x86_64")]
        if self == QPath::Avx512Vnni && k >= AMX_MIN_DEPTH && n >= 32 && x86::amx_ready() {
            return QPath::Amx;
        }
        let _ = (k, n);
        self
    }

    /// The path's instructions, as `info` and `bench` print them (with the AMX tiles where
    /// deep convolutions take them).
    pub fn describe(self) -> &'static str {
        match self {
            QPath::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            QPath::Avx2 => "avx2 vpmaddwd",
            #[cfg(target_arch = "x86_64")]
            QPath::AvxVnni => "avx-vnni",
            #[cfg(target_arch = "x86_64")]
            QPath::Avx512Vnni if x86::amx_ready() => "avx512-vnni, amx tiles for deep convolutions",
            #[cfg(target_arch = "x86_64")]
            QPath::Avx512Vnni => "avx512-vnni",
            #[cfg(target_arch = "x86_64")]
            QPath::Amx => "amx",
            #[cfg(target_arch = "aarch64")]
            QPath::Neon => "neon smull",
            #[cfg(target_arch = "aarch64")]
            QPath::NeonDot => "neon sdot",
        }
    }

    /// Packed depth in quads: `k / 4` rounded up, to a multiple of 16 on the AMX path (its
    /// tiles take 64 bytes of `k` at a time).
    fn quads(self, k: usize) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            QPath::Amx => k.div_ceil(x86::AMX_K_STEP) * 16,
            _ => k.div_ceil(4),
        }
    }

    /// Whether rows are packed row-major (the AMX path) rather than in quads.
    fn linear_rows(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self == QPath::Amx {
            return true;
        }
        false
    }

    fn group(self) -> Group {
        match self {
            #[cfg(target_arch = "x86_64")]
            QPath::Avx2 => Group::Pair,
            _ => Group::Quad,
        }
    }
}

/// The least depth for which [`QPath::amx_if_pays`] picks the AMX tiles.
const AMX_MIN_DEPTH: usize = 128;

/// Largest `k`: beyond it, 255 * 128 * k could overflow the i32 accumulators.
pub const MAX_K: usize = 1 << 16;

/// Which side of the product an operand is packed for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// `R`: `MR` rows at a time, broadcast.
    Rows,
    /// `P`: `NR` columns at a time, loaded as vectors.
    Panels,
}

/// An 8-bit operand in a path's packed layout, with its sums over `k` (for the zero-point
/// corrections of the other side).
#[derive(Clone, Debug)]
pub struct Packed<'s> {
    path: QPath,
    side: Side,
    /// Whether the stored bytes are read as i8 (weights) or u8 (activations).
    signed: bool,
    k: usize,
    /// Rows (`Side::Rows`) or columns (`Side::Panels`).
    len: usize,
    bytes: Bytes<'s>,
    pairs: Pairs<'s>,
    /// Sum over `k` of each row or column, as stored.
    pub sums: Vec<i32>,
}

/// An operand before packing: element `(i, kk)` (`i` over rows or columns) is
/// `data[i * rs + kk * cs] ^ flip`, read as i8 when `signed`.
#[derive(Clone, Copy, Debug)]
pub struct Source<'a> {
    pub data: &'a [u8],
    pub rs: usize,
    pub cs: usize,
    pub flip: u8,
    pub signed: bool,
}

impl<'s> Packed<'s> {
    /// Bytes of the packed operand and its sums.
    pub fn bytes(&self) -> usize {
        self.bytes.len() + size_of_val(&self.pairs[..]) + size_of_val(self.sums.as_slice())
    }

    /// Packs `len` rows or columns of depth `k` from `src`.
    pub fn new(
        path: QPath,
        side: Side,
        k: usize,
        len: usize,
        src: Source,
    ) -> OpResult<Packed<'static>> {
        op_ensure!(k <= MAX_K, "depth {k} exceeds the integer GEMM's {MAX_K}");
        if len > 0 && k > 0 {
            let last = (len - 1) * src.rs + (k - 1) * src.cs;
            op_ensure!(
                last < src.data.len(),
                "operand of {len}x{k} reads past its {} bytes",
                src.data.len()
            );
        }
        let (mr, nr) = path.tile();
        let block = if side == Side::Rows { mr } else { nr };
        let blocks = len.div_ceil(block);
        let g = match path.group() {
            Group::Quad => 4,
            Group::Pair => 2,
        };
        let kg = match path.group() {
            Group::Quad => path.quads(k),
            Group::Pair => k.div_ceil(2),
        };
        let total = blocks * kg * block * g;
        // AMX rows: each row's (padded) k bytes in a line.
        let linear = side == Side::Rows && path.linear_rows();
        let mut sums = vec![0i32; len];
        let (mut bytes, mut pairs) = (LineBytes::default(), Vec::new());
        match path.group() {
            Group::Quad => bytes.resize_zeroed(total),
            Group::Pair => pairs.resize(total, 0i16),
        }
        let read = |b: u8| -> i32 {
            let b = b ^ src.flip;
            if src.signed {
                b as i8 as i32
            } else {
                b as i32
            }
        };
        for b in 0..blocks {
            let base = b * kg * block * g;
            let lanes = block.min(len - b * block);
            let first = b * block;
            let mut store = |lane: usize, kk: usize, v: i32| {
                let at = if linear {
                    base + lane * kg * g + kk
                } else {
                    base + (kk / g) * block * g + lane * g + kk % g
                };
                match path.group() {
                    Group::Quad => bytes[at] = v as u8,
                    Group::Pair => pairs[at] = v as i16,
                }
            };
            if src.cs == 1 && path.group() == Group::Quad && !linear {
                // Contiguous over k: whole quads as one 4-byte word each (a byte loop with the
                // sum inside it was a fifth of bert_mini_dyn's run, packing its activations),
                // the sum in its own loop, which vectorises.
                let flip4 = u32::from_ne_bytes([src.flip; 4]);
                for lane in 0..lanes {
                    let line = &src.data[(first + lane) * src.rs..][..k];
                    sums[first + lane] = if src.signed {
                        line.iter().map(|&x| (x ^ src.flip) as i8 as i32).sum()
                    } else {
                        line.iter().map(|&x| (x ^ src.flip) as i32).sum()
                    };
                    let whole = k / 4 * 4;
                    for (q, quad) in line[..whole].chunks_exact(4).enumerate() {
                        let at = base + q * block * 4 + lane * 4;
                        let word = u32::from_ne_bytes(quad.try_into().expect("4 bytes")) ^ flip4;
                        bytes[at..at + 4].copy_from_slice(&word.to_ne_bytes());
                    }
                    let at = base + (k / 4) * block * 4 + lane * 4;
                    for (t, &x) in line[whole..].iter().enumerate() {
                        bytes[at + t] = x ^ src.flip;
                    }
                }
            } else if src.cs == 1 || k == 1 {
                // Each row or column is contiguous over k.
                for lane in 0..lanes {
                    let line = &src.data[(first + lane) * src.rs..][..k];
                    let mut s = 0i32;
                    for (kk, &x) in line.iter().enumerate() {
                        let v = read(x);
                        s += v;
                        store(lane, kk, v);
                    }
                    sums[first + lane] = s;
                }
            } else {
                // Consecutive rows or columns are contiguous for each k (rs == 1, typically).
                for kk in 0..k {
                    for lane in 0..lanes {
                        let v = read(src.data[(first + lane) * src.rs + kk * src.cs]);
                        sums[first + lane] += v;
                        store(lane, kk, v);
                    }
                }
            }
        }
        Ok(Packed {
            path,
            side,
            signed: src.signed,
            k,
            len,
            bytes: Store::Own(bytes),
            pairs: Store::Own(pairs),
            sums,
        })
    }

    pub fn k(&self) -> usize {
        self.k
    }

    /// [`Packed::new`] for constant weights, at prerun: an optimized model may hold the packed
    /// bytes (`ferrolite_core::prepacked`), which are then copied rather than packed again.
    pub fn new_weights(
        path: QPath,
        side: Side,
        k: usize,
        len: usize,
        src: Source,
        packs: &Prepacks,
    ) -> OpResult<Packed<'static>> {
        if !packs.active() {
            return Packed::new(path, side, k, len, src);
        }
        let (mr, nr) = path.tile();
        let block = if side == Side::Rows { mr } else { nr };
        let (g, kg) = match path.group() {
            Group::Quad => (4, path.quads(k)),
            Group::Pair => (2, k.div_ceil(2)),
        };
        let total = len.div_ceil(block) * kg * block * g;
        let (n_bytes, n_pairs) = match path.group() {
            Group::Quad => (total, 0),
            Group::Pair => (0, total),
        };
        let desc = [
            path as usize,
            side as usize,
            k,
            len,
            usize::from(src.signed),
        ];
        let mut fresh: Option<OpResult<Packed<'static>>> = None;
        let mut made = || {
            fresh
                .get_or_insert_with(|| Packed::new(path, side, k, len, src))
                .as_ref()
                .ok()
                .cloned()
        };
        let bytes = packs.take(&desc, n_bytes, || {
            made().map(|p| p.bytes.to_vec()).unwrap_or_default()
        });
        let pairs = packs.take(&desc, n_pairs, || {
            made().map(|p| p.pairs.to_vec()).unwrap_or_default()
        });
        let sums = packs.take(&desc, len, || made().map(|p| p.sums).unwrap_or_default());
        match fresh {
            // Packed here (nothing stored, or not all of it): that packing, or its error.
            Some(result) => result,
            None => Ok(Packed {
                path,
                side,
                signed: src.signed,
                k,
                len,
                bytes: Store::Own(LineBytes::from_slice(&bytes)),
                pairs: Store::Own(pairs.into_vec()),
                sums: sums.into_vec(),
            }),
        }
    }

    /// Packs the columns of a row-major `[k, n]` matrix (row stride `ld`) as unsigned panels:
    /// the per-run packing of activations, so it interleaves whole rows at a time, and skips
    /// the column sums unless `sums` (they are needed only against weights with non-zero zero
    /// points). It packs into `storage`, a region of scratch of [`Packed::panels_lens`]
    /// values (or buffers of its own): what an earlier run left there stays only in the last
    /// panel's lanes past `n`, whose columns no product stores.
    #[allow(clippy::too_many_arguments)]
    pub fn activation_panels(
        path: QPath,
        src: &[u8],
        k: usize,
        n: usize,
        ld: usize,
        flip: u8,
        sums: bool,
        storage: (Bytes<'s>, Pairs<'s>),
    ) -> OpResult<Packed<'s>> {
        op_ensure!(k <= MAX_K, "depth {k} exceeds the integer GEMM's {MAX_K}");
        op_ensure!(
            ld >= n && (k == 0 || n == 0 || (k - 1) * ld + n <= src.len()),
            "operand of {k}x{n} at stride {ld} reads past its {} bytes",
            src.len()
        );
        let nr = path.tile().1;
        let panels = n.div_ceil(nr);
        let row = |kk: usize| &src[kk * ld..kk * ld + n];
        let (mut bytes, mut pairs) = storage;
        match path.group() {
            Group::Quad => {
                // Every quad is written below, the padding of k (AMX) as zeros.
                let kq = path.quads(k);
                bytes.set_len(panels * kq * nr * 4)?;
                pairs.set_len(0)?;
                // A plain slice for the loops: the store's variant is not matched per byte.
                let bytes: &mut [u8] = &mut bytes;
                let pad = vec![flip; n];
                // One panel per task: its kq quads are contiguous.
                let panel = |(jp, dst): (usize, &mut [u8])| {
                    let lanes = nr.min(n - jp * nr);
                    // Quads of whole rows over whole vectors of lanes in one tight loop.
                    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
                    let mut done = 0;
                    #[cfg(target_arch = "x86_64")]
                    if lanes.is_multiple_of(16) {
                        done = k / 4;
                        assert!(dst.len() >= done * nr * 4);
                        // SAFETY: rows 0..4 * done are below k, each holds `jp * nr + lanes`
                        // bytes at its start (checked against `src` above), and `dst` holds
                        // `done` quads of `nr * 4` bytes (asserted).
                        unsafe {
                            x86::interleave_quads(
                                src.as_ptr().add(jp * nr),
                                ld,
                                done,
                                lanes,
                                flip,
                                dst.as_mut_ptr(),
                                nr * 4,
                            )
                        };
                    }
                    for (q, dst) in dst.chunks_exact_mut(nr * 4).enumerate().skip(done) {
                        let rows: [&[u8]; 4] = std::array::from_fn(|t| {
                            let r = if 4 * q + t < k {
                                row(4 * q + t)
                            } else {
                                &pad[..]
                            };
                            &r[jp * nr..jp * nr + lanes]
                        });
                        interleave4(rows, flip, &mut dst[..lanes * 4]);
                    }
                };
                let workers = split::worth(Cost::bytes(2 * k * n));
                split::for_rows(bytes, kq * nr * 4, workers, |jp, dst| panel((jp, dst)));
            }
            Group::Pair => {
                let kp = k.div_ceil(2);
                pairs.set_len(panels * kp * nr * 2)?;
                bytes.set_len(0)?;
                let pairs: &mut [i16] = &mut pairs;
                for q in 0..kp {
                    let r0 = row(2 * q);
                    let r1 = (2 * q + 1 < k).then(|| row(2 * q + 1));
                    for jp in 0..panels {
                        let dst = &mut pairs[(jp * kp + q) * nr * 2..][..nr * 2];
                        let lanes = nr.min(n - jp * nr);
                        for (l, d) in dst.chunks_exact_mut(2).take(lanes).enumerate() {
                            d[0] = (r0[jp * nr + l] ^ flip) as i16;
                            d[1] = r1.map_or(0, |r| (r[jp * nr + l] ^ flip) as i16);
                        }
                    }
                }
            }
        }
        let mut col_sums = vec![0i32; if sums { n } else { 0 }];
        if sums {
            for kk in 0..k {
                for (s, &b) in col_sums.iter_mut().zip(row(kk)) {
                    *s += (b ^ flip) as i32;
                }
            }
        }
        Ok(Packed {
            path,
            side: Side::Panels,
            signed: false,
            k,
            len: n,
            bytes,
            pairs,
            sums: col_sums,
        })
    }

    /// Packs `len` unsigned rows of depth `k` that are assembled on the fly: `line(i, buf)`
    /// writes row `i`'s `k` bytes into `buf`, which are stored XORed with `flip` (a
    /// channels-last convolution's patches, gathered from the taps' pixels). The row sums
    /// are computed only when `sums` (against weights with non-zero zero points); otherwise
    /// they read as 0. It packs into `storage`, a region of scratch of
    /// [`Packed::gathered_lens`] values (or buffers of its own).
    pub fn gathered_rows(
        path: QPath,
        k: usize,
        len: usize,
        flip: u8,
        sums: bool,
        storage: (Bytes<'s>, Pairs<'s>),
        mut line: impl FnMut(usize, &mut [u8]),
    ) -> OpResult<Packed<'s>> {
        op_ensure!(k <= MAX_K, "depth {k} exceeds the integer GEMM's {MAX_K}");
        let mr = path.tile().0;
        let blocks = len.div_ceil(mr);
        let (mut bytes, mut pairs) = storage;
        let mut row_sums = vec![0i32; len];
        let mut buf = vec![0u8; k];
        match path.group() {
            Group::Quad if path.linear_rows() => {
                let line_len = path.quads(k) * 4;
                // Lanes past `len` in the last block and the padding of k are zero.
                bytes.set_len_zeroed(blocks * mr * line_len)?;
                pairs.set_len(0)?;
                // A plain slice for the loops: the store's variant is not matched per byte.
                let bytes: &mut [u8] = &mut bytes;
                for (i, sum) in row_sums.iter_mut().enumerate() {
                    let dst = &mut bytes[i * line_len..][..k];
                    line(i, dst);
                    for b in dst.iter_mut() {
                        *b ^= flip;
                    }
                    if sums {
                        *sum = dst.iter().map(|&x| x as i32).sum();
                    }
                }
            }
            Group::Quad => {
                let kq = k.div_ceil(4);
                // Lanes past `len` in the last block and the padding of k are zero.
                bytes.set_len_zeroed(blocks * kq * mr * 4)?;
                pairs.set_len(0)?;
                let bytes: &mut [u8] = &mut bytes;
                let flip4 = u32::from_ne_bytes([flip; 4]);
                for (i, sum) in row_sums.iter_mut().enumerate() {
                    line(i, &mut buf);
                    if sums {
                        *sum = buf.iter().map(|&x| (x ^ flip) as i32).sum();
                    }
                    let (block, lane) = (i / mr, i % mr);
                    let base = block * kq * mr * 4 + lane * 4;
                    let whole = k / 4 * 4;
                    for (q, quad) in buf[..whole].chunks_exact(4).enumerate() {
                        let word = u32::from_ne_bytes(quad.try_into().expect("4 bytes")) ^ flip4;
                        let at = base + q * mr * 4;
                        bytes[at..at + 4].copy_from_slice(&word.to_ne_bytes());
                    }
                    let at = base + (k / 4) * mr * 4;
                    for (t, &x) in buf[whole..].iter().enumerate() {
                        bytes[at + t] = x ^ flip;
                    }
                }
            }
            Group::Pair => {
                let kp = k.div_ceil(2);
                pairs.set_len_zeroed(blocks * kp * mr * 2)?;
                bytes.set_len(0)?;
                let pairs: &mut [i16] = &mut pairs;
                for (i, sum) in row_sums.iter_mut().enumerate() {
                    line(i, &mut buf);
                    if sums {
                        *sum = buf.iter().map(|&x| (x ^ flip) as i32).sum();
                    }
                    let (block, lane) = (i / mr, i % mr);
                    let base = block * kp * mr * 2 + lane * 2;
                    for (kk, &x) in buf.iter().enumerate() {
                        pairs[base + (kk / 2) * mr * 2 + kk % 2] = (x ^ flip) as i16;
                    }
                }
            }
        }
        Ok(Packed {
            path,
            side: Side::Rows,
            signed: false,
            k,
            len,
            bytes,
            pairs,
            sums: row_sums,
        })
    }

    /// The bytes and pairs [`Packed::activation_panels`] stores for a `[k, n]` matrix.
    pub fn panels_lens(path: QPath, k: usize, n: usize) -> (usize, usize) {
        let nr = path.tile().1;
        let panels = n.div_ceil(nr);
        match path.group() {
            Group::Quad => (panels * path.quads(k) * nr * 4, 0),
            Group::Pair => (0, panels * k.div_ceil(2) * nr * 2),
        }
    }

    /// The bytes and pairs [`Packed::gathered_rows`] stores for `len` rows of depth `k`.
    pub fn gathered_lens(path: QPath, k: usize, len: usize) -> (usize, usize) {
        let mr = path.tile().0;
        let blocks = len.div_ceil(mr);
        match path.group() {
            Group::Quad if path.linear_rows() => (blocks * mr * path.quads(k) * 4, 0),
            Group::Quad => (blocks * k.div_ceil(4) * mr * 4, 0),
            Group::Pair => (0, blocks * k.div_ceil(2) * mr * 2),
        }
    }

    /// Scratch bytes of `lens` (from [`Packed::panels_lens`] or [`Packed::gathered_lens`]).
    pub fn scratch_bytes((bytes, pairs): (usize, usize)) -> usize {
        bytes_for::<u8>(bytes) + bytes_for::<i16>(pairs)
    }

    /// Storage for a packing of `lens` values, from `carve`.
    pub fn lent(
        carve: &mut Carve<'s>,
        (bytes, pairs): (usize, usize),
    ) -> OpResult<(Bytes<'s>, Pairs<'s>)> {
        Ok((
            Store::Lent(carve.take(bytes)?),
            Store::Lent(carve.take(pairs)?),
        ))
    }

    /// The bytes of column panel `jp` (`[k / 4][NR][4]`) of a packing in quads.
    pub fn panel_bytes(&self, jp: usize) -> &[u8] {
        let (kq, nr) = (self.path.quads(self.k), self.path.tile().1);
        &self.bytes[jp * kq * nr * 4..][..kq * nr * 4]
    }

    /// Rows or columns.
    pub fn len(&self) -> usize {
        self.len
    }
}

/// A per-row or per-column vector, or one value for all.
#[derive(Clone, Copy, Debug)]
pub enum Axis<'a, T> {
    All(T),
    Rows(&'a [T]),
    Cols(&'a [T]),
}

impl Axis<'_, i32> {
    /// Whether every zero point is 0 (`run` has checked the axis is the operand's own).
    fn is_zero(&self) -> bool {
        match self {
            Axis::All(v) => *v == 0,
            Axis::Rows(v) | Axis::Cols(v) => v.iter().all(|&v| v == 0),
        }
    }
}

impl<T: Copy> Axis<'_, T> {
    fn at(&self, m: usize, n: usize) -> T {
        match *self {
            Axis::All(v) => v,
            Axis::Rows(v) => v[m],
            Axis::Cols(v) => v[n],
        }
    }
}

/// Where the corrected i32 results go.
pub enum Out<'a> {
    /// `clamp(round_half_even(v * scale) + zero_point, lo, hi)` as u8 or s8 (`lo`/`hi` give
    /// the type's range, narrowed by a fused clamp).
    Quantized {
        data: &'a mut [u8],
        signed: bool,
        scale: Axis<'a, f32>,
        zero_point: i32,
        lo: i32,
        hi: i32,
    },
    /// The i32 values (MatMulInteger, ConvInteger).
    I32(&'a mut [i32]),
    /// `v * scale + bias` (MatMulIntegerToFloat).
    F32 {
        data: &'a mut [f32],
        scale: Axis<'a, f32>,
        bias: Option<Axis<'a, f32>>,
    },
}

/// The product's description: the packed operands, their zero points (as stored, after any
/// flip), an i32 bias added before the epilogue, and C's row stride.
pub struct Product<'a> {
    pub rows: &'a Packed<'a>,
    pub panels: &'a Packed<'a>,
    pub rows_zero: Axis<'a, i32>,
    pub panels_zero: Axis<'a, i32>,
    pub bias: Option<Axis<'a, i32>>,
    pub ldc: usize,
}

/// A raw pointer that may cross rayon tasks; every task writes a disjoint set of C's elements.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub *mut T);

impl<T> SendPtr<T> {
    /// The pointer (a method, so that closures capture the whole `SendPtr`).
    pub fn get(self) -> *mut T {
        self.0
    }
}
// SAFETY: only used to write disjoint tiles of one output from rayon tasks.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

impl Product<'_> {
    /// Computes C into `out` (`m x n` at row stride `ldc`), over the rayon threads when
    /// `parallel`.
    pub fn run(&self, out: &mut Out, parallel: bool) -> OpResult<()> {
        let (r, p) = (self.rows, self.panels);
        op_ensure!(
            r.side == Side::Rows && p.side == Side::Panels && r.path == p.path && r.k == p.k,
            "integer GEMM operands packed for different products"
        );
        op_ensure!(
            r.signed != p.signed,
            "integer GEMM needs one signed and one unsigned operand"
        );
        op_ensure!(
            !matches!(self.rows_zero, Axis::Cols(_)) && !matches!(self.panels_zero, Axis::Rows(_)),
            "integer GEMM zero points go per row of R and per column of P"
        );
        let rows_zero_used = match self.rows_zero {
            Axis::All(z) => z != 0,
            Axis::Rows(z) => z.iter().any(|&z| z != 0),
            Axis::Cols(_) => true,
        };
        op_ensure!(
            !rows_zero_used || p.sums.len() == p.len,
            "integer GEMM panels packed without the column sums their zero points need"
        );
        let signed = if r.signed { r } else { p };
        op_ensure!(
            signed.sums.len() == signed.len,
            "integer GEMM's signed operand packed without its sums"
        );
        let (m, n, k) = (r.len, p.len, r.k);
        if m == 0 || n == 0 {
            return Ok(());
        }
        let need = (m - 1) * self.ldc + n;
        let have = match out {
            Out::Quantized { data, .. } => data.len(),
            Out::I32(d) => d.len(),
            Out::F32 { data, .. } => data.len(),
        };
        op_ensure!(
            self.ldc >= n && have >= need,
            "integer GEMM output of {have} values is too small for {m}x{n} at stride {}",
            self.ldc
        );
        let (mr, nr) = r.path.tile();
        let (mb, nb) = (m.div_ceil(mr), n.div_ceil(nr));
        // Tiles are free to start: several tasks per worker even out a noisy machine.
        let threads = if parallel { split::threads() } else { 1 };
        let workers = split::workers(Cost::flops(2 * m * n * k.max(1)), threads);
        let tasks = (workers * split::BALANCE).min(mb * nb);
        let tasks = if workers <= 1 { 1 } else { tasks };
        // Split over columns first (activations are the big side of a convolution), then rows.
        let ncols = nb.min(tasks);
        let nrows = (tasks / ncols).clamp(1, mb);
        let per_c = nb.div_ceil(ncols);
        let per_r = mb.div_ceil(nrows);
        let sink = Sink::new(out);
        #[cfg(target_arch = "x86_64")]
        let fused = self.fused_requantization(sink);
        #[cfg(target_arch = "x86_64")]
        let fused_float = self.fused_float(sink);
        #[cfg(target_arch = "x86_64")]
        let fused_columns = self.fused_columns(sink);
        let task = |t: usize| {
            let (tc, tr) = (t % ncols, t / ncols);
            let mut tile = vec![0i32; mr * nr];
            // The AMX path's tiles, configured on whichever thread runs this task.
            #[cfg(target_arch = "x86_64")]
            if r.path == QPath::Amx && !x86::amx_tiles_ready() {
                unreachable!("the AMX path exists only where the tiles are ready");
            }
            let (cols, rows) = (
                tc * per_c..((tc + 1) * per_c).min(nb),
                tr * per_r..((tr + 1) * per_r).min(mb),
            );
            let mut one = |ib: usize, jp: usize| {
                #[cfg(target_arch = "x86_64")]
                if let Some(f) = &fused {
                    // SAFETY: tile (ib, jp) is this task's and inside the output (checked
                    // above).
                    unsafe { self.tile_quantized(ib, jp, f) };
                    return;
                }
                #[cfg(target_arch = "x86_64")]
                if let Some(f) = &fused_float {
                    // SAFETY: as above.
                    unsafe { self.tile_float(ib, jp, f) };
                    return;
                }
                #[cfg(target_arch = "x86_64")]
                if let Some(f) = &fused_columns {
                    // SAFETY: as above; the task configured the tiles (above).
                    unsafe { self.tile_columns(ib, jp, f, &mut tile) };
                    return;
                }
                self.tile(ib, jp, &mut tile);
                // SAFETY: tiles (ib, jp) are disjoint between tasks, and inside the output
                // (checked above).
                unsafe { self.epilogue(ib * mr, jp * nr, &tile, nr, sink) };
            };
            // The larger operand is streamed once, the smaller re-read from cache: row blocks
            // outside when R is the larger (a deep layer's weights against a few pixels).
            if m > n {
                for ib in rows {
                    for jp in cols.clone() {
                        one(ib, jp);
                    }
                }
            } else {
                for jp in cols {
                    for ib in rows.clone() {
                        one(ib, jp);
                    }
                }
            }
        };
        split::for_each_task(ncols * nrows, true, task);
        Ok(())
    }

    /// The convolution's common case on AVX-512 VNNI, requantized in the tile's registers:
    /// weights without zero points, one activation zero point, bias and scale per row (so
    /// the corrections and the scale are constant along each row), quantized output. Each
    /// tile reads its rows' constants ([`Product::tile_quantized`]).
    #[cfg(target_arch = "x86_64")]
    fn fused_requantization<'s>(&self, sink: Sink<'s>) -> Option<Fused<'s>> {
        let r = self.rows;
        let (
            QPath::Avx512Vnni,
            Axis::All(z),
            Sink::Quantized {
                ptr,
                scale,
                zero_point,
                lo,
                hi,
                ..
            },
        ) = (r.path, self.panels_zero, sink)
        else {
            return None;
        };
        let per_row = !matches!(scale, Axis::Cols(_)) && !matches!(self.bias, Some(Axis::Cols(_)));
        (self.rows_zero.is_zero() && per_row).then_some(Fused {
            activation_zero: z,
            scale,
            zero: zero_point,
            lo,
            hi,
            ptr,
        })
    }

    /// Tile (`ib`, `jp`) requantized in registers and stored (see
    /// [`Product::fused_requantization`]).
    ///
    /// # Safety
    /// The tile lies inside the output, and no other thread writes it meanwhile.
    #[cfg(target_arch = "x86_64")]
    unsafe fn tile_quantized(&self, ib: usize, jp: usize, f: &Fused) {
        let (r, p) = (self.rows, self.panels);
        let (mr, nr) = r.path.tile();
        let (m0, n0) = (ib * mr, jp * nr);
        let rows = (r.len - m0).min(mr);
        // Row i's bias with the zero-point correction, and its scale.
        let add: [i32; x86::VNNI_MR] = std::array::from_fn(|i| {
            let m = (m0 + i).min(r.len - 1);
            self.bias.map_or(0, |b| b.at(m, 0)) - f.activation_zero * r.sums[m]
        });
        let scale: [f32; x86::VNNI_MR] =
            std::array::from_fn(|i| f.scale.at((m0 + i).min(r.len - 1), 0));
        let q = x86::QuantizedTile {
            add: &add,
            scale: &scale,
            zero: f.zero,
            lo: f.lo,
            hi: f.hi,
            // SAFETY (offset): element (m0, n0) lies inside the output (the caller's contract).
            dst: unsafe { f.ptr.0.add(m0 * self.ldc + n0) },
            ldc: self.ldc,
            rows,
            cols: (p.len - n0).min(nr),
        };
        let (rb, pb, kq) = self.quad_blocks(ib, jp);
        // SAFETY: the Avx512Vnni path exists only on CPUs with AVX-512 VNNI; the output rows
        // are this task's (the caller's contract).
        unsafe { x86::tile_vnni_quantized(rb, pb, kq, r.signed, &q) };
    }

    /// MatMulIntegerToFloat's common case on AVX-512 VNNI, its float epilogue in the tile's
    /// registers: B (the panels) without zero points, one zero point for A, bias and scale
    /// per column or for all, so that the corrections are constant along each column.
    #[cfg(target_arch = "x86_64")]
    fn fused_float(&self, sink: Sink) -> Option<FusedFloat> {
        let (QPath::Avx512Vnni, Axis::All(rows_zero), Sink::F32 { ptr, scale, bias }) =
            (self.rows.path, self.rows_zero, sink)
        else {
            return None;
        };
        let ok = self.panels_zero.is_zero()
            && !matches!(scale, Axis::Rows(_))
            && !matches!(bias, Some(Axis::Rows(_)))
            && !matches!(self.bias, Some(Axis::Rows(_)));
        if !ok {
            return None;
        }
        let (add, col) = self.column_add(rows_zero);
        let padded = add.len();
        Some(FusedFloat {
            add,
            scale: (0..padded).map(|j| scale.at(0, col(j))).collect(),
            bias: bias.map(|b| (0..padded).map(|j| b.at(0, col(j))).collect()),
            ptr,
        })
    }

    /// Every column's constant term for panels without zero points and rows sharing
    /// `rows_zero`: the i32 bias less `rows_zero` times the column's sum. Once per product
    /// (tiles of one panel share them), padded to whole panels by repeating the last column
    /// (the padding is not stored); with the map from a padded column to its real one.
    #[cfg(target_arch = "x86_64")]
    fn column_add(&self, rows_zero: i32) -> (Vec<i32>, impl Fn(usize) -> usize) {
        let (n, nr) = (self.panels.len, self.rows.path.tile().1);
        let col = move |j: usize| j.min(n.saturating_sub(1));
        let add = (0..n.next_multiple_of(nr))
            .map(|j| {
                // Column sums exist whenever A's zero point is not zero (checked in `run`).
                let zero = if rows_zero != 0 {
                    rows_zero * self.panels.sums[col(j)]
                } else {
                    0
                };
                self.bias.map_or(0, |b| b.at(0, col(j))) - zero
            })
            .collect();
        (add, col)
    }

    /// The channels-last convolution's case on AMX, requantized per column as the tiles
    /// leave memory (the generic epilogue cost more than the tiles on shallow layers): the
    /// same products as [`Product::fused_float`] with a quantized output.
    #[cfg(target_arch = "x86_64")]
    fn fused_columns(&self, sink: Sink) -> Option<FusedColumns> {
        let (
            QPath::Amx,
            Axis::All(rows_zero),
            Sink::Quantized {
                ptr,
                scale,
                zero_point,
                lo,
                hi,
                ..
            },
        ) = (self.rows.path, self.rows_zero, sink)
        else {
            return None;
        };
        if !self.panels_zero.is_zero()
            || matches!(scale, Axis::Rows(_))
            || matches!(self.bias, Some(Axis::Rows(_)))
        {
            return None;
        }
        let (add, col) = self.column_add(rows_zero);
        let padded = add.len();
        Some(FusedColumns {
            add,
            scale: (0..padded).map(|j| scale.at(0, col(j))).collect(),
            zero: zero_point,
            lo,
            hi,
            ptr,
        })
    }

    /// Tile (`ib`, `jp`) through `tile`, requantized per column and stored (see
    /// [`Product::fused_columns`]).
    ///
    /// # Safety
    /// The tile lies inside the output, and no other thread writes it meanwhile; the thread's
    /// AMX tiles are configured.
    #[cfg(target_arch = "x86_64")]
    unsafe fn tile_columns(&self, ib: usize, jp: usize, f: &FusedColumns, tile: &mut [i32]) {
        let (r, p) = (self.rows, self.panels);
        let (mr, nr) = r.path.tile();
        let (m0, n0) = (ib * mr, jp * nr);
        self.tile(ib, jp, tile);
        let q = x86::ColumnQuantized {
            add: f.add[n0..n0 + nr].try_into().expect("a panel"),
            scale: f.scale[n0..n0 + nr].try_into().expect("a panel"),
            zero: f.zero,
            lo: f.lo,
            hi: f.hi,
            // SAFETY (offset): element (m0, n0) lies inside the output (the caller's contract).
            dst: unsafe { f.ptr.0.add(m0 * self.ldc + n0) },
            ldc: self.ldc,
            rows: (r.len - m0).min(mr),
            cols: (p.len - n0).min(nr),
        };
        // SAFETY: the AMX path exists only on CPUs with AVX-512 (its ISA's); the output rows
        // are this task's (the caller's contract).
        unsafe { x86::quantize_columns(tile, &q) };
    }

    /// Tile (`ib`, `jp`) with the float epilogue in registers, stored (see
    /// [`Product::fused_float`]).
    ///
    /// # Safety
    /// The tile lies inside the output, and no other thread writes it meanwhile.
    #[cfg(target_arch = "x86_64")]
    unsafe fn tile_float(&self, ib: usize, jp: usize, f: &FusedFloat) {
        let (r, p) = (self.rows, self.panels);
        let (mr, nr) = r.path.tile();
        let (m0, n0) = (ib * mr, jp * nr);
        // This panel's columns of the per-column constants.
        let add: &[i32; x86::VNNI_NR] = f.add[n0..n0 + nr].try_into().expect("a panel");
        let scale: &[f32; x86::VNNI_NR] = f.scale[n0..n0 + nr].try_into().expect("a panel");
        let bias: Option<&[f32; x86::VNNI_NR]> = f
            .bias
            .as_ref()
            .map(|b| b[n0..n0 + nr].try_into().expect("a panel"));
        let q = x86::ColumnFloat {
            add,
            scale,
            bias,
            // SAFETY (offset): element (m0, n0) lies inside the output (the caller's contract).
            dst: unsafe { f.ptr.0.add(m0 * self.ldc + n0) },
            ldc: self.ldc,
            rows: (r.len - m0).min(mr),
            cols: (p.len - n0).min(nr),
        };
        let (rb, pb, kq) = self.quad_blocks(ib, jp);
        // SAFETY: the Avx512Vnni path exists only on CPUs with AVX-512 VNNI; the output rows
        // are this task's (the caller's contract).
        unsafe { x86::tile_vnni_float(rb, pb, kq, r.signed, &q) };
    }

    /// Rows block `ib` and panel `jp` of the `Quad` layout, and their depth in quads.
    fn quad_blocks(&self, ib: usize, jp: usize) -> (&[u8], &[u8], usize) {
        let (mr, nr) = self.rows.path.tile();
        let kq = self.rows.path.quads(self.rows.k);
        (
            &self.rows.bytes[ib * kq * mr * 4..][..kq * mr * 4],
            &self.panels.bytes[jp * kq * nr * 4..][..kq * nr * 4],
            kq,
        )
    }

    /// The raw i32 tile (rows block `ib`, panel `jp`), `mr x nr`, row stride `nr`.
    fn tile(&self, ib: usize, jp: usize, tile: &mut [i32]) {
        let (r, p) = (self.rows, self.panels);
        let (mr, nr) = r.path.tile();
        match r.path.group() {
            Group::Quad => {
                let (rb, pb, kq) = self.quad_blocks(ib, jp);
                match r.path {
                    #[cfg(target_arch = "x86_64")]
                    QPath::Avx512Vnni => x86::tile_vnni(rb, pb, kq, r.signed, tile),
                    #[cfg(target_arch = "x86_64")]
                    QPath::AvxVnni => x86::tile_avx_vnni(rb, pb, kq, r.signed, tile),
                    // SAFETY: the task made sure this thread's tiles are configured
                    // (`Product::run`).
                    #[cfg(target_arch = "x86_64")]
                    QPath::Amx => unsafe { x86::tile_amx(rb, pb, kq, r.signed, tile) },
                    #[cfg(target_arch = "aarch64")]
                    QPath::Neon | QPath::NeonDot => {
                        if r.path == QPath::NeonDot {
                            neon::tile_dot(rb, pb, kq, r.signed, tile);
                        } else {
                            neon::tile_neon(rb, pb, kq, r.signed, tile);
                        }
                        // The tile holds sum (u - 128) s (see the neon module): add back
                        // 128 times the signed operand's sums (present: checked in `run`).
                        let (m0, n0) = (ib * mr, jp * nr);
                        if r.signed {
                            let sums = &r.sums[m0..(m0 + mr).min(r.len)];
                            for (row, &s) in tile.chunks_exact_mut(nr).zip(sums) {
                                for t in row {
                                    *t = t.wrapping_add(s.wrapping_mul(128));
                                }
                            }
                        } else {
                            let sums = &p.sums[n0..(n0 + nr).min(p.len)];
                            for row in tile.chunks_exact_mut(nr) {
                                for (t, &s) in row.iter_mut().zip(sums) {
                                    *t = t.wrapping_add(s.wrapping_mul(128));
                                }
                            }
                        }
                    }
                    _ => tile_portable(rb, pb, kq, mr, nr, r.signed, tile),
                }
            }
            Group::Pair => {
                let kp = r.k.div_ceil(2);
                let rb = &r.pairs[ib * kp * mr * 2..][..kp * mr * 2];
                let pb = &p.pairs[jp * kp * nr * 2..][..kp * nr * 2];
                #[cfg(target_arch = "x86_64")]
                x86::tile_avx2(rb, pb, kp, tile);
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (rb, pb, kp, tile);
            }
        }
    }

    /// Corrects the tile's valid part and writes it at (`m0`, `n0`).
    ///
    /// # Safety
    /// Those elements lie inside the output behind `sink`, and no other thread writes them
    /// meanwhile.
    unsafe fn epilogue(&self, m0: usize, n0: usize, tile: &[i32], nr: usize, sink: Sink) {
        match self.rows.path {
            // SAFETY: these paths exist only on CPUs with AVX2 and FMA, the AVX-512 one only on
            // CPUs with AVX-512 F/BW/VL/DQ and VNNI; the caller's contract carries over.
            #[cfg(target_arch = "x86_64")]
            QPath::Avx2 | QPath::AvxVnni => x86::epilogue_avx2(self, m0, n0, tile, nr, sink),
            #[cfg(target_arch = "x86_64")]
            QPath::Avx512Vnni | QPath::Amx => x86::epilogue_avx512(self, m0, n0, tile, nr, sink),
            // Portable and NEON (aarch64's baseline, which the plain loops vectorise to).
            #[allow(unreachable_patterns)]
            _ => self.epilogue_body(m0, n0, tile, nr, sink),
        }
    }

    /// # Safety
    /// As [`Product::epilogue`].
    #[inline(always)]
    unsafe fn epilogue_body(&self, m0: usize, n0: usize, tile: &[i32], nr: usize, sink: Sink) {
        let (r, p) = (self.rows, self.panels);
        let k = r.k as i32;
        let rows = (r.len - m0).min(r.path.tile().0);
        let cols = (p.len - n0).min(nr);
        let mut acc = [0i32; 64];
        let mut vals = [0f32; 64];
        // Present whenever a row zero point is not zero (checked in `run`).
        let csum = p.sums.get(n0..n0 + cols).unwrap_or(&[]);
        for i in 0..rows {
            let m = m0 + i;
            let off = m * self.ldc + n0;
            // The zero-point corrections: - zp[n] * rowsum[m] - zr[m] * colsum[n] + k zr zp,
            // with the terms constant along the row added once.
            let zr = match self.rows_zero {
                Axis::All(v) => v,
                Axis::Rows(v) => v[m],
                Axis::Cols(_) => unreachable!("checked in run"),
            };
            let acc = &mut acc[..cols];
            acc.copy_from_slice(&tile[i * nr..i * nr + cols]);
            let rsum = r.sums[m];
            let mut row_const = 0i32;
            match self.panels_zero {
                Axis::Cols(zp) => {
                    for ((a, &z), &c) in acc.iter_mut().zip(&zp[n0..n0 + cols]).zip(csum) {
                        *a += -z * rsum - zr * c + k * zr * z;
                    }
                }
                Axis::All(z) => {
                    row_const += -z * rsum + k * zr * z;
                    if zr != 0 {
                        for (a, &c) in acc.iter_mut().zip(csum) {
                            *a -= zr * c;
                        }
                    }
                }
                Axis::Rows(_) => unreachable!("checked in run"),
            }
            match self.bias {
                Some(Axis::All(b)) => row_const += b,
                Some(Axis::Rows(b)) => row_const += b[m],
                Some(Axis::Cols(b)) => {
                    for (a, &b) in acc.iter_mut().zip(&b[n0..n0 + cols]) {
                        *a += b;
                    }
                }
                None => {}
            }
            if row_const != 0 {
                for a in acc.iter_mut() {
                    *a += row_const;
                }
            }
            let acc = &acc[..cols];
            // SAFETY: (caller) elements m, n0..n0+cols are inside the output and this task's.
            match sink {
                Sink::I32(d) => {
                    std::slice::from_raw_parts_mut(d.0.add(off), cols).copy_from_slice(acc);
                }
                Sink::F32 { ptr, scale, bias } => {
                    let dst = std::slice::from_raw_parts_mut(ptr.0.add(off), cols);
                    scaled(acc, scale, m, n0, dst);
                    if let Some(b) = bias {
                        for (j, d) in dst.iter_mut().enumerate() {
                            *d += b.at(m, n0 + j);
                        }
                    }
                }
                Sink::Quantized {
                    ptr,
                    signed,
                    scale,
                    zero_point,
                    lo,
                    hi,
                } => {
                    let vals = &mut vals[..cols];
                    scaled(acc, scale, m, n0, vals);
                    let dst = std::slice::from_raw_parts_mut(ptr.0.add(off), cols);
                    requantize(vals, zero_point, lo, hi, signed, dst);
                }
            }
        }
    }
}

/// `out[4 l + t] = rows[t][l] ^ flip`: four rows' bytes interleaved, the quad layout.
fn interleave4(rows: [&[u8]; 4], flip: u8, out: &mut [u8]) {
    let n = out.len() / 4;
    // Where the vector loop stopped (only x86 has one).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86-64; every load reads 16 bytes at `l < n - 15` of rows
        // holding at least `n` bytes (checked by the slicing below), every store writes 64
        // bytes at `4 l` of `out`, which holds `4 n`.
        unsafe {
            let rows = rows.map(|r| &r[..n]);
            let x = _mm_set1_epi8(flip as i8);
            while done + 16 <= n {
                let ld = |r: &[u8]| {
                    _mm_xor_si128(_mm_loadu_si128(r.as_ptr().add(done) as *const __m128i), x)
                };
                let (a, b, c, d) = (ld(rows[0]), ld(rows[1]), ld(rows[2]), ld(rows[3]));
                let ab_lo = _mm_unpacklo_epi8(a, b);
                let ab_hi = _mm_unpackhi_epi8(a, b);
                let cd_lo = _mm_unpacklo_epi8(c, d);
                let cd_hi = _mm_unpackhi_epi8(c, d);
                let o = out.as_mut_ptr().add(4 * done) as *mut __m128i;
                _mm_storeu_si128(o, _mm_unpacklo_epi16(ab_lo, cd_lo));
                _mm_storeu_si128(o.add(1), _mm_unpackhi_epi16(ab_lo, cd_lo));
                _mm_storeu_si128(o.add(2), _mm_unpacklo_epi16(ab_hi, cd_hi));
                _mm_storeu_si128(o.add(3), _mm_unpackhi_epi16(ab_hi, cd_hi));
                done += 16;
            }
        }
    }
    for l in done..n {
        for t in 0..4 {
            out[4 * l + t] = rows[t][l] ^ flip;
        }
    }
}

/// `out[j] = acc[j] * scale` at row `m`, columns from `n0`.
#[inline(always)]
fn scaled(acc: &[i32], scale: Axis<f32>, m: usize, n0: usize, out: &mut [f32]) {
    match scale {
        Axis::All(s) => out
            .iter_mut()
            .zip(acc)
            .for_each(|(o, &a)| *o = a as f32 * s),
        Axis::Rows(s) => {
            let s = s[m];
            out.iter_mut()
                .zip(acc)
                .for_each(|(o, &a)| *o = a as f32 * s)
        }
        Axis::Cols(s) => {
            let s = &s[n0..n0 + out.len()];
            for ((o, &a), &s) in out.iter_mut().zip(acc).zip(s) {
                *o = a as f32 * s;
            }
        }
    }
}

/// `out = clamp(round_half_even(v) + zero_point, lo, hi)`, stored as u8 or as i8's bytes.
#[inline(always)]
pub fn requantize(v: &[f32], zero_point: i32, lo: i32, hi: i32, signed: bool, out: &mut [u8]) {
    debug_assert!(!signed || (lo >= -128 && hi <= 127));
    // Adding 1.5 * 2^23 rounds half to even in the default rounding mode and leaves the
    // integer in the low mantissa bits, for |v| < 2^22 (larger values saturate anyway, so they
    // are clamped first): integer arithmetic on the bits, which vectorizes, unlike `as i32`.
    const MAGIC: f32 = 12_582_912.0;
    const MAGIC_BITS: i32 = 0x4B40_0000;
    for (o, &x) in out.iter_mut().zip(v) {
        let r = (x.clamp(-4_000_000.0, 4_000_000.0) + MAGIC).to_bits() as i32 - MAGIC_BITS;
        // Clamped to the type's range, the low byte is the u8, or the i8's bits (no branch,
        // so the loop vectorizes).
        *o = (r + zero_point).clamp(lo, hi) as u8;
    }
}

/// A product requantized in the tile's registers: the activations' zero point and the
/// output's requantization (scale per row or for all).
#[cfg(target_arch = "x86_64")]
struct Fused<'a> {
    activation_zero: i32,
    scale: Axis<'a, f32>,
    zero: i32,
    lo: i32,
    hi: i32,
    ptr: SendPtr<u8>,
}

/// A product requantized per column as its AMX tiles are read back ([`Product::fused_columns`]).
#[cfg(target_arch = "x86_64")]
struct FusedColumns {
    /// Per column, padded to whole panels: as [`FusedFloat`]'s.
    add: Vec<i32>,
    scale: Vec<f32>,
    zero: i32,
    lo: i32,
    hi: i32,
    ptr: SendPtr<u8>,
}

/// A product with its float epilogue in the tile's registers: A's zero point, and the
/// output's scale and bias (per column or for all).
#[cfg(target_arch = "x86_64")]
struct FusedFloat {
    /// Per column, padded to whole panels: the i32 bias less A's zero point times the
    /// column's sum; the scale; the float bias.
    add: Vec<i32>,
    scale: Vec<f32>,
    bias: Option<Vec<f32>>,
    ptr: SendPtr<f32>,
}

/// [`Out`] as raw destination pointers, shared by the rayon tasks of one `run` (which holds
/// the `Out` borrowed mutably throughout); every task writes its own tiles only.
#[derive(Clone, Copy)]
enum Sink<'a> {
    Quantized {
        ptr: SendPtr<u8>,
        signed: bool,
        scale: Axis<'a, f32>,
        zero_point: i32,
        lo: i32,
        hi: i32,
    },
    I32(SendPtr<i32>),
    F32 {
        ptr: SendPtr<f32>,
        scale: Axis<'a, f32>,
        bias: Option<Axis<'a, f32>>,
    },
}

impl<'a> Sink<'a> {
    fn new(out: &'a mut Out) -> Sink<'a> {
        match out {
            Out::Quantized {
                data,
                signed,
                scale,
                zero_point,
                lo,
                hi,
            } => Sink::Quantized {
                ptr: SendPtr(data.as_mut_ptr()),
                signed: *signed,
                scale: *scale,
                zero_point: *zero_point,
                lo: *lo,
                hi: *hi,
            },
            Out::I32(d) => Sink::I32(SendPtr(d.as_mut_ptr())),
            Out::F32 { data, scale, bias } => Sink::F32 {
                ptr: SendPtr(data.as_mut_ptr()),
                scale: *scale,
                bias: *bias,
            },
        }
    }
}

/// The portable tile on the `Quad` layout.
fn tile_portable(
    rows: &[u8],
    panel: &[u8],
    kq: usize,
    mr: usize,
    nr: usize,
    rows_signed: bool,
    tile: &mut [i32],
) {
    tile.fill(0);
    let val = |b: u8, signed: bool| if signed { b as i8 as i32 } else { b as i32 };
    for q in 0..kq {
        let rq = &rows[q * mr * 4..][..mr * 4];
        let pq = &panel[q * nr * 4..][..nr * 4];
        for i in 0..mr {
            let a = &rq[i * 4..i * 4 + 4];
            let a = [
                val(a[0], rows_signed),
                val(a[1], rows_signed),
                val(a[2], rows_signed),
                val(a[3], rows_signed),
            ];
            let t = &mut tile[i * nr..(i + 1) * nr];
            for (j, c) in t.iter_mut().enumerate() {
                let b = &pq[j * 4..j * 4 + 4];
                *c += a[0] * val(b[0], !rows_signed)
                    + a[1] * val(b[1], !rows_signed)
                    + a[2] * val(b[2], !rows_signed)
                    + a[3] * val(b[3], !rows_signed);
            }
        }
    }
}

#[cfg(test)]
mod tests;
