//! The x86 integer tiles: AVX2 `vpmaddwd` on i16 pairs, and AVX-VNNI (256-bit) and AVX-512
//! VNNI `vpdpbusd` on byte quads. Each computes a whole `MR x NR` tile over all of `k` in registers.

use super::{Product, Sink};
use std::arch::x86_64::*;

pub const AVX2_MR: usize = 6;
pub const AVX2_NR: usize = 16;
pub const AVX_VNNI_MR: usize = 6;
pub const AVX_VNNI_NR: usize = 16;
/// Scaled values to output bytes: clamped to `[lo, hi]` less the zero point while still f32
/// (the bounds are integers, so clamping before rounding gives the rounded value clamped,
/// and keeps the conversion in range), rounded half to even (the default rounding mode), the
/// zero point added, narrowed to their low bytes (the u8, or the i8's bits).
#[derive(Clone, Copy)]
pub(crate) struct Narrow {
    lo: __m512,
    hi: __m512,
    zero: __m512i,
}

impl Narrow {
    /// # Safety
    /// The CPU has AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn new(zero: i32, lo: i32, hi: i32) -> Narrow {
        Narrow {
            lo: _mm512_set1_ps((lo - zero) as f32),
            hi: _mm512_set1_ps((hi - zero) as f32),
            zero: _mm512_set1_epi32(zero),
        }
    }

    /// # Safety
    /// The CPU has AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn bytes(self, scaled: __m512) -> __m128i {
        let f = _mm512_min_ps(_mm512_max_ps(scaled, self.lo), self.hi);
        _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(f), self.zero))
    }
}

pub const VNNI_MR: usize = 8;
pub const VNNI_NR: usize = 32;

/// AVX2 tile: `rows` is `[kp][6][2]` i16, `panel` `[kp][16][2]` i16.
pub fn tile_avx2(rows: &[i16], panel: &[i16], kp: usize, tile: &mut [i32]) {
    assert!(rows.len() >= kp * AVX2_MR * 2 && panel.len() >= kp * AVX2_NR * 2);
    assert!(tile.len() >= AVX2_MR * AVX2_NR);
    // SAFETY: the QPath::Avx2 path exists only on CPUs with AVX2 (`QPath::for_isa`); the
    // lengths were checked above.
    unsafe { tile_avx2_impl(rows.as_ptr(), panel.as_ptr(), kp, tile.as_mut_ptr()) }
}

#[target_feature(enable = "avx2")]
unsafe fn tile_avx2_impl(rows: *const i16, panel: *const i16, kp: usize, tile: *mut i32) {
    let mut acc = [[_mm256_setzero_si256(); 2]; AVX2_MR];
    for p in 0..kp {
        let pp = panel.add(p * AVX2_NR * 2);
        let b0 = _mm256_loadu_si256(pp as *const __m256i);
        let b1 = _mm256_loadu_si256(pp.add(16) as *const __m256i);
        let rp = rows.add(p * AVX2_MR * 2);
        for (r, acc) in acc.iter_mut().enumerate() {
            // One (k, k+1) pair of row r, in both halves of every 32-bit lane.
            let a = _mm256_set1_epi32((rp.add(r * 2) as *const i32).read_unaligned());
            acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(a, b0));
            acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(a, b1));
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        _mm256_storeu_si256(tile.add(r * AVX2_NR) as *mut __m256i, acc[0]);
        _mm256_storeu_si256(tile.add(r * AVX2_NR + 8) as *mut __m256i, acc[1]);
    }
}

/// AVX-512 VNNI tile: `rows` is `[kq][8][4]` bytes, `panel` `[kq][32][4]` bytes; the rows are
/// the signed side when `rows_signed`, else the panel is.
pub fn tile_vnni(rows: &[u8], panel: &[u8], kq: usize, rows_signed: bool, tile: &mut [i32]) {
    assert!(rows.len() >= kq * VNNI_MR * 4 && panel.len() >= kq * VNNI_NR * 4);
    assert!(tile.len() >= VNNI_MR * VNNI_NR);
    // SAFETY: QPath::Avx512Vnni exists only on CPUs with AVX-512 F/BW/VL and VNNI
    // (`QPath::for_isa`); the lengths were checked above.
    unsafe {
        if rows_signed {
            tile_vnni_impl::<true>(rows.as_ptr(), panel.as_ptr(), kq, tile.as_mut_ptr())
        } else {
            tile_vnni_impl::<false>(rows.as_ptr(), panel.as_ptr(), kq, tile.as_mut_ptr())
        }
    }
}

/// The 8x32 tile's i32 products over all of `k`, in registers.
///
/// # Safety
/// The CPU has AVX-512 VNNI; `rows` holds `kq * 32` bytes and `panel` `kq * 128`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn products_vnni<const ROWS_SIGNED: bool>(
    rows: *const u8,
    panel: *const u8,
    kq: usize,
) -> [[__m512i; 2]; VNNI_MR] {
    let mut acc = [[_mm512_setzero_si512(); 2]; VNNI_MR];
    for q in 0..kq {
        let pp = panel.add(q * VNNI_NR * 4);
        let b0 = _mm512_loadu_si512(pp as *const __m512i);
        let b1 = _mm512_loadu_si512(pp.add(64) as *const __m512i);
        let rp = rows.add(q * VNNI_MR * 4);
        for (r, acc) in acc.iter_mut().enumerate() {
            let a = _mm512_set1_epi32((rp.add(r * 4) as *const i32).read_unaligned());
            // vpdpbusd multiplies its first source's unsigned bytes by the second's signed ones.
            if ROWS_SIGNED {
                acc[0] = _mm512_dpbusd_epi32(acc[0], b0, a);
                acc[1] = _mm512_dpbusd_epi32(acc[1], b1, a);
            } else {
                acc[0] = _mm512_dpbusd_epi32(acc[0], a, b0);
                acc[1] = _mm512_dpbusd_epi32(acc[1], a, b1);
            }
        }
    }
    acc
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_vnni_impl<const ROWS_SIGNED: bool>(
    rows: *const u8,
    panel: *const u8,
    kq: usize,
    tile: *mut i32,
) {
    let acc = products_vnni::<ROWS_SIGNED>(rows, panel, kq);
    for (r, acc) in acc.iter().enumerate() {
        _mm512_storeu_si512(tile.add(r * VNNI_NR) as *mut __m512i, acc[0]);
        _mm512_storeu_si512(tile.add(r * VNNI_NR + 16) as *mut __m512i, acc[1]);
    }
}

/// A requantized output block for [`tile_vnni_quantized`]: row `i` of the tile goes to
/// `dst + i * ldc` as `clamp(round_half_even((acc + add[i]) * scale[i]) + zero, lo, hi)` bytes,
/// for its first `rows` rows and `cols` columns.
pub struct QuantizedTile<'a> {
    pub add: &'a [i32; VNNI_MR],
    pub scale: &'a [f32; VNNI_MR],
    pub zero: i32,
    pub lo: i32,
    pub hi: i32,
    pub dst: *mut u8,
    pub ldc: usize,
    pub rows: usize,
    pub cols: usize,
}

/// [`tile_vnni`] with the requantization applied to the accumulators in registers and the
/// bytes stored straight to the output (no i32 tile written and read back: for the few
/// multiply-adds of a shallow pointwise convolution that round trip cost more than the
/// products).
///
/// # Safety
/// As [`tile_vnni`]'s operands; `q.dst + i * q.ldc` is valid for `q.cols <= 32` bytes for
/// every `i < q.rows <= 8`, and no other thread writes them meanwhile.
pub unsafe fn tile_vnni_quantized(
    rows: &[u8],
    panel: &[u8],
    kq: usize,
    rows_signed: bool,
    q: &QuantizedTile,
) {
    assert!(rows.len() >= kq * VNNI_MR * 4 && panel.len() >= kq * VNNI_NR * 4);
    assert!(q.rows <= VNNI_MR && q.cols <= VNNI_NR);
    // SAFETY: as tile_vnni; the output as the caller vouches.
    unsafe {
        if rows_signed {
            tile_vnni_quantized_impl::<true>(rows.as_ptr(), panel.as_ptr(), kq, q)
        } else {
            tile_vnni_quantized_impl::<false>(rows.as_ptr(), panel.as_ptr(), kq, q)
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_vnni_quantized_impl<const ROWS_SIGNED: bool>(
    rows: *const u8,
    panel: *const u8,
    kq: usize,
    q: &QuantizedTile,
) {
    let acc = products_vnni::<ROWS_SIGNED>(rows, panel, kq);
    let narrow = Narrow::new(q.zero, q.lo, q.hi);
    let masks = half_masks(q.cols);
    for (r, acc) in acc.iter().enumerate().take(q.rows) {
        let (add, scale) = (_mm512_set1_epi32(q.add[r]), _mm512_set1_ps(q.scale[r]));
        for (h, &v) in acc.iter().enumerate() {
            let f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(v, add)), scale);
            let out = q.dst.add(r * q.ldc + 16 * h) as *mut i8;
            _mm_mask_storeu_epi8(out, masks[h], narrow.bytes(f));
        }
    }
}

/// A float output block with constants per column: column `j` of the tile goes to
/// `(acc + add[j]) as f32 * scale[j] + bias[j]` (the product, then the sum, as the epilogue
/// rounds them), row `i` at `dst + i * ldc`, for the first `rows` rows and `cols` columns.
pub struct ColumnFloat<'a> {
    pub add: &'a [i32; VNNI_NR],
    pub scale: &'a [f32; VNNI_NR],
    pub bias: Option<&'a [f32; VNNI_NR]>,
    pub dst: *mut f32,
    pub ldc: usize,
    pub rows: usize,
    pub cols: usize,
}

/// [`tile_vnni`] with the float epilogue applied in registers and stored to the output (the
/// i32 tile's round trip through memory and the generic epilogue cost half as much as the
/// products for MatMulIntegerToFloat's shallow products).
///
/// # Safety
/// As [`tile_vnni`]'s operands; `q.dst + i * q.ldc` is valid for `q.cols <= 32` floats for
/// every `i < q.rows <= 8`, and no other thread writes them meanwhile.
pub unsafe fn tile_vnni_float(
    rows: &[u8],
    panel: &[u8],
    kq: usize,
    rows_signed: bool,
    q: &ColumnFloat,
) {
    assert!(rows.len() >= kq * VNNI_MR * 4 && panel.len() >= kq * VNNI_NR * 4);
    assert!(q.rows <= VNNI_MR && q.cols <= VNNI_NR);
    // SAFETY: as tile_vnni; the output as the caller vouches.
    unsafe {
        if rows_signed {
            tile_vnni_float_impl::<true>(rows.as_ptr(), panel.as_ptr(), kq, q)
        } else {
            tile_vnni_float_impl::<false>(rows.as_ptr(), panel.as_ptr(), kq, q)
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_vnni_float_impl<const ROWS_SIGNED: bool>(
    rows: *const u8,
    panel: *const u8,
    kq: usize,
    q: &ColumnFloat,
) {
    let acc = products_vnni::<ROWS_SIGNED>(rows, panel, kq);
    let masks = half_masks(q.cols);
    let half = |h: usize| {
        (
            _mm512_loadu_si512(q.add.as_ptr().add(16 * h) as *const __m512i),
            _mm512_loadu_ps(q.scale.as_ptr().add(16 * h)),
            q.bias.map(|b| _mm512_loadu_ps(b.as_ptr().add(16 * h))),
        )
    };
    let halves = [half(0), half(1)];
    for (r, acc) in acc.iter().enumerate().take(q.rows) {
        for (h, (&v, &(add, scale, bias))) in acc.iter().zip(&halves).enumerate() {
            let mut f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(v, add)), scale);
            if let Some(b) = bias {
                f = _mm512_add_ps(f, b);
            }
            _mm512_mask_storeu_ps(q.dst.add(r * q.ldc + 16 * h), masks[h], f);
        }
    }
}

/// The rows of an indirect tile: row `r`'s depth is `taps` runs of `4 * quads` bytes, run `t`
/// at `ptrs[r * taps + t]` (a channels-last convolution's patch: each tap's input pixel, or a
/// run of the zero point), read XORed with `flip` (0x80 turns s8 into u8).
pub struct IndirectRows<'a> {
    pub ptrs: &'a [*const u8],
    pub taps: usize,
    pub quads: usize,
    pub flip: u8,
}

/// A requantized output block with constants per column: column `j` of the tile goes to
/// `clamp(round_half_even((acc + add[j]) * scale[j]) + zero, lo, hi)`, row `i` at
/// `dst + i * ldc`, for the first `rows` rows and `cols` columns.
pub struct ColumnQuantized<'a> {
    pub add: &'a [i32; VNNI_NR],
    pub scale: &'a [f32; VNNI_NR],
    pub zero: i32,
    pub lo: i32,
    pub hi: i32,
    pub dst: *mut u8,
    pub ldc: usize,
    pub rows: usize,
    pub cols: usize,
}

/// An 8x32 tile of unsigned indirect rows against a signed panel (`[taps * quads][32][4]`
/// bytes), requantized per column in registers and stored: the channels-last convolution's
/// GEMM, which reads its activations where they are instead of packing them.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL and VNNI; `r.ptrs` holds `8 * r.taps` pointers, each valid for
/// `4 * r.quads` bytes; `q.dst + i * q.ldc` is valid for `q.cols <= 32` bytes for every
/// `i < q.rows <= 8`, and no other thread writes them meanwhile.
pub unsafe fn tile_vnni_indirect(r: &IndirectRows, panel: &[u8], q: &ColumnQuantized) {
    assert!(r.ptrs.len() >= VNNI_MR * r.taps && panel.len() >= r.taps * r.quads * VNNI_NR * 4);
    assert!(q.rows <= VNNI_MR && q.cols <= VNNI_NR);
    // SAFETY: as the caller vouches. A panel's last 16 columns are skipped where none of them
    // is stored (an output of 16 or 48 channels): half the products.
    unsafe {
        match (q.cols <= 16, r.flip != 0) {
            (false, false) => tile_vnni_indirect_impl::<2, false>(r, panel.as_ptr(), q),
            (false, true) => tile_vnni_indirect_impl::<2, true>(r, panel.as_ptr(), q),
            (true, false) => tile_vnni_indirect_impl::<1, false>(r, panel.as_ptr(), q),
            (true, true) => tile_vnni_indirect_impl::<1, true>(r, panel.as_ptr(), q),
        }
    }
}

/// The tile over the panel's first `HALVES` sixteen-column halves; `FLIP`: the rows' bytes
/// are flipped by `r.flip` first.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_vnni_indirect_impl<const HALVES: usize, const FLIP: bool>(
    r: &IndirectRows,
    panel: *const u8,
    q: &ColumnQuantized,
) {
    let mut acc = [[_mm512_setzero_si512(); HALVES]; VNNI_MR];
    let flip = _mm512_set1_epi8(r.flip as i8);
    let mut pp = panel;
    for t in 0..r.taps {
        let rows: [*const u8; VNNI_MR] = std::array::from_fn(|i| r.ptrs[i * r.taps + t]);
        for quad in 0..r.quads {
            let b: [__m512i; HALVES] =
                std::array::from_fn(|h| _mm512_loadu_si512(pp.add(64 * h) as *const __m512i));
            pp = pp.add(VNNI_NR * 4);
            for (row, acc) in rows.iter().zip(acc.iter_mut()) {
                let word = (row.add(4 * quad) as *const i32).read_unaligned();
                let mut a = _mm512_set1_epi32(word);
                if FLIP {
                    a = _mm512_xor_si512(a, flip);
                }
                for (acc, b) in acc.iter_mut().zip(&b) {
                    *acc = _mm512_dpbusd_epi32(*acc, a, *b);
                }
            }
        }
    }
    let columns = Columns::<HALVES>::new(q);
    for (i, acc) in acc.iter().enumerate().take(q.rows) {
        columns.store(q, i, acc);
    }
}

/// The store masks of a tile's two sixteen-column halves, `cols` of its columns real.
#[inline]
fn half_masks(cols: usize) -> [__mmask16; 2] {
    [
        ((1u32 << cols.min(16)) - 1) as u16,
        ((1u32 << cols.saturating_sub(16)) - 1) as u16,
    ]
}

/// A [`ColumnQuantized`] output's constants in registers, for its first `HALVES`
/// sixteen-column halves.
struct Columns<const HALVES: usize> {
    add: [__m512i; HALVES],
    scale: [__m512; HALVES],
    masks: [__mmask16; 2],
    narrow: Narrow,
}

impl<const HALVES: usize> Columns<HALVES> {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    fn new(q: &ColumnQuantized) -> Self {
        // SAFETY: `add` and `scale` hold 32 values, HALVES <= 2 vectors of 16.
        unsafe {
            Columns {
                add: std::array::from_fn(|h| {
                    _mm512_loadu_si512(q.add.as_ptr().add(16 * h) as *const __m512i)
                }),
                scale: std::array::from_fn(|h| _mm512_loadu_ps(q.scale.as_ptr().add(16 * h))),
                masks: half_masks(q.cols),
                narrow: Narrow::new(q.zero, q.lo, q.hi),
            }
        }
    }

    /// Requantizes row `i`'s sums `acc` and stores its real columns.
    ///
    /// # Safety
    /// `q.dst + i * q.ldc` is valid for `q.cols` bytes, which no other thread writes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn store(&self, q: &ColumnQuantized, i: usize, acc: &[__m512i; HALVES]) {
        for (h, &acc) in acc.iter().enumerate() {
            let sum = _mm512_add_epi32(acc, self.add[h]);
            let f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), self.scale[h]);
            let out = q.dst.add(i * q.ldc + 16 * h) as *mut i8;
            // SAFETY: the caller's contract.
            unsafe { _mm_mask_storeu_epi8(out, self.masks[h], self.narrow.bytes(f)) };
        }
    }
}

/// AVX-VNNI tile (256-bit): `rows` is `[kq][6][4]` bytes, `panel` `[kq][16][4]` bytes; the
/// rows are the signed side when `rows_signed`, else the panel is.
pub fn tile_avx_vnni(rows: &[u8], panel: &[u8], kq: usize, rows_signed: bool, tile: &mut [i32]) {
    assert!(rows.len() >= kq * AVX_VNNI_MR * 4 && panel.len() >= kq * AVX_VNNI_NR * 4);
    assert!(tile.len() >= AVX_VNNI_MR * AVX_VNNI_NR);
    // SAFETY: QPath::AvxVnni exists only on CPUs with AVX2 and AVX-VNNI (`QPath::for_isa`);
    // the lengths were checked above.
    unsafe {
        if rows_signed {
            tile_avx_vnni_impl::<true>(rows.as_ptr(), panel.as_ptr(), kq, tile.as_mut_ptr())
        } else {
            tile_avx_vnni_impl::<false>(rows.as_ptr(), panel.as_ptr(), kq, tile.as_mut_ptr())
        }
    }
}

#[target_feature(enable = "avx2,avxvnni")]
unsafe fn tile_avx_vnni_impl<const ROWS_SIGNED: bool>(
    rows: *const u8,
    panel: *const u8,
    kq: usize,
    tile: *mut i32,
) {
    let mut acc = [[_mm256_setzero_si256(); 2]; AVX_VNNI_MR];
    for q in 0..kq {
        let pp = panel.add(q * AVX_VNNI_NR * 4);
        let b0 = _mm256_loadu_si256(pp as *const __m256i);
        let b1 = _mm256_loadu_si256(pp.add(32) as *const __m256i);
        let rp = rows.add(q * AVX_VNNI_MR * 4);
        for (r, acc) in acc.iter_mut().enumerate() {
            let a = _mm256_set1_epi32((rp.add(r * 4) as *const i32).read_unaligned());
            // The first source's bytes are the unsigned ones.
            if ROWS_SIGNED {
                acc[0] = _mm256_dpbusd_avx_epi32(acc[0], b0, a);
                acc[1] = _mm256_dpbusd_avx_epi32(acc[1], b1, a);
            } else {
                acc[0] = _mm256_dpbusd_avx_epi32(acc[0], a, b0);
                acc[1] = _mm256_dpbusd_avx_epi32(acc[1], a, b1);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        _mm256_storeu_si256(tile.add(r * AVX_VNNI_NR) as *mut __m256i, acc[0]);
        _mm256_storeu_si256(tile.add(r * AVX_VNNI_NR + 8) as *mut __m256i, acc[1]);
    }
}

/// The quad layout of `quads` groups of four rows (row stride `ld`) over `lanes` columns (a
/// multiple of 16): quad `q` of column `l` at `dst + q * step + 4 l`, every byte XORed with
/// `flip`.
///
/// # Safety
/// Rows `0..4 * quads` hold `lanes` bytes each at `src + row * ld`; `dst` holds `quads`
/// groups of `step >= 4 * lanes` bytes.
pub unsafe fn interleave_quads(
    src: *const u8,
    ld: usize,
    quads: usize,
    lanes: usize,
    flip: u8,
    dst: *mut u8,
    step: usize,
) {
    // SSE2 is part of x86-64.
    let x = _mm_set1_epi8(flip as i8);
    for q in 0..quads {
        let rows = src.add(4 * q * ld);
        let out = dst.add(q * step);
        for l in (0..lanes).step_by(16) {
            let ld_row = |t: usize| {
                _mm_xor_si128(_mm_loadu_si128(rows.add(t * ld + l) as *const __m128i), x)
            };
            let (a, b, c, d) = (ld_row(0), ld_row(1), ld_row(2), ld_row(3));
            let ab_lo = _mm_unpacklo_epi8(a, b);
            let ab_hi = _mm_unpackhi_epi8(a, b);
            let cd_lo = _mm_unpacklo_epi8(c, d);
            let cd_hi = _mm_unpackhi_epi8(c, d);
            let o = out.add(4 * l) as *mut __m128i;
            _mm_storeu_si128(o, _mm_unpacklo_epi16(ab_lo, cd_lo));
            _mm_storeu_si128(o.add(1), _mm_unpackhi_epi16(ab_lo, cd_lo));
            _mm_storeu_si128(o.add(2), _mm_unpacklo_epi16(ab_hi, cd_hi));
            _mm_storeu_si128(o.add(3), _mm_unpackhi_epi16(ab_hi, cd_hi));
        }
    }
}

/// Rows per block and columns per panel of the AMX path: a 2x2 grid of 16x16 i32 tiles.
pub const AMX_MR: usize = 32;
pub const AMX_NR: usize = 32;

/// Bytes of `k` per AMX step (one 16 x 64-byte tile of each operand).
pub const AMX_K_STEP: usize = 64;

/// Whether the AMX tiles may run: the CPU has AMX-TILE and AMX-INT8, Linux granted this
/// process the tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM)`, needed once per process
/// before any thread touches a tile), and `FERROLITE_AMX` is not `0`. Decided once.
pub fn amx_ready() -> bool {
    static READY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *READY.get_or_init(|| {
        if std::env::var("FERROLITE_AMX").is_ok_and(|v| v.trim() == "0") {
            return false;
        }
        // CPUID leaf 7: EDX bit 24 is AMX-TILE, bit 25 AMX-INT8.
        let edx = __cpuid_count(7, 0).edx;
        if edx & (3 << 24) != 3 << 24 {
            return false;
        }
        amx_permission()
    })
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn amx_permission() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a plain system call with integer arguments; it only changes which register
    // state this process may use.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn amx_permission() -> bool {
    false
}

/// The tile configuration (palette 1): tmm0-3 the four 16x16 i32 accumulators, tmm4-5 the
/// rows' two 16 x 64-byte halves, tmm6-7 the panel's.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl TileConfig {
    /// The configuration the tile kernels use.
    fn ours() -> TileConfig {
        let mut cfg = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb: [0; 16],
            rows: [0; 16],
        };
        for t in 0..8 {
            cfg.colsb[t] = 64;
            cfg.rows[t] = 16;
        }
        cfg
    }
}

/// Loads the AMX tile configuration on this thread.
///
/// # Safety
/// [`amx_ready`] returned true.
unsafe fn amx_configure() {
    let cfg = TileConfig::ours();
    // SAFETY: the config is a valid palette-1 layout of 64 bytes; AMX is enabled for this
    // process (the caller's contract).
    unsafe {
        std::arch::asm!("ldtilecfg [{}]", in(reg) &cfg as *const TileConfig, options(nostack, readonly));
    }
}

/// This thread's current tile configuration (all zeros where none is loaded).
///
/// # Safety
/// [`amx_ready`] returned true.
unsafe fn amx_current() -> TileConfig {
    let mut cfg = TileConfig {
        palette: 0,
        start_row: 0,
        reserved: [0; 14],
        colsb: [0; 16],
        rows: [0; 16],
    };
    // SAFETY: `sttilecfg` writes the 64-byte configuration into `cfg`, which is 64 bytes;
    // AMX is enabled for this process (the caller's contract).
    unsafe {
        std::arch::asm!("sttilecfg [{}]", in(reg) &mut cfg as *mut TileConfig, options(nostack));
    }
    cfg
}

/// AMX tile: `rows` is 32 rows of `4 kq` bytes each (row-major, `k` zero-padded), `panel`
/// `[kq][32][4]` bytes, `kq` a multiple of 16; `tile` gets the 32x32 i32 products, row
/// stride 32. Unsigned rows times signed panel (`tdpbusd`), or signed times unsigned
/// (`tdpbsud`) when `rows_signed`.
///
/// # Safety
/// The thread's tiles are configured ([`amx_tiles_ready`]).
pub unsafe fn tile_amx(rows: &[u8], panel: &[u8], kq: usize, rows_signed: bool, tile: &mut [i32]) {
    assert!(kq.is_multiple_of(16));
    assert!(rows.len() >= AMX_MR * kq * 4 && panel.len() >= kq * AMX_NR * 4);
    assert!(tile.len() >= AMX_MR * AMX_NR);
    let row_stride = kq * 4;
    let panel_stride = AMX_NR * 4;
    let (r, p, t) = (rows.as_ptr(), panel.as_ptr(), tile.as_mut_ptr());
    // SAFETY: every tile load reads 16 lines of 64 bytes: rows `16 h..16 h + 16` at byte
    // `64 s` of their `4 kq` (inside `rows`, asserted), and quads `16 s..16 s + 16` of the
    // panel at lane `16 h` (inside `panel`); the stores write 16 lines of 16 i32 inside
    // `tile` (asserted). The tiles are configured (the caller's contract).
    unsafe {
        std::arch::asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        );
        for s in 0..kq / 16 {
            let rs = r.add(s * AMX_K_STEP);
            let ps = p.add(s * 16 * panel_stride);
            std::arch::asm!(
                "tileloadd tmm4, [{r0} + {rst}*1]",
                "tileloadd tmm5, [{r1} + {rst}*1]",
                "tileloadd tmm6, [{p0} + {pst}*1]",
                "tileloadd tmm7, [{p1} + {pst}*1]",
                r0 = in(reg) rs,
                r1 = in(reg) rs.add(16 * row_stride),
                p0 = in(reg) ps,
                p1 = in(reg) ps.add(64),
                rst = in(reg) row_stride,
                pst = in(reg) panel_stride,
                options(nostack, readonly)
            );
            if rows_signed {
                std::arch::asm!(
                    "tdpbsud tmm0, tmm4, tmm6",
                    "tdpbsud tmm1, tmm4, tmm7",
                    "tdpbsud tmm2, tmm5, tmm6",
                    "tdpbsud tmm3, tmm5, tmm7",
                    options(nostack, nomem)
                );
            } else {
                std::arch::asm!(
                    "tdpbusd tmm0, tmm4, tmm6",
                    "tdpbusd tmm1, tmm4, tmm7",
                    "tdpbusd tmm2, tmm5, tmm6",
                    "tdpbusd tmm3, tmm5, tmm7",
                    options(nostack, nomem)
                );
            }
        }
        let stride = AMX_NR * 4;
        std::arch::asm!(
            "tilestored [{t0} + {st}*1], tmm0",
            "tilestored [{t1} + {st}*1], tmm1",
            "tilestored [{t2} + {st}*1], tmm2",
            "tilestored [{t3} + {st}*1], tmm3",
            t0 = in(reg) t,
            t1 = in(reg) t.add(16),
            t2 = in(reg) t.add(16 * AMX_NR),
            t3 = in(reg) t.add(16 * AMX_NR + 16),
            st = in(reg) stride,
            options(nostack)
        );
    }
}

/// Configures this thread's AMX tiles for [`tile_amx`] unless they already are, and says
/// whether they are ready. The configuration stays for the thread's life: loading and
/// releasing it per task cost more than resnet18's stem convolution itself (hundreds of
/// small tasks). The CPU holds it per thread, so reading it back (`sttilecfg`) tells whether
/// this thread has it, with no bookkeeping of ours.
pub fn amx_tiles_ready() -> bool {
    if !amx_ready() {
        return false;
    }
    // SAFETY: AMX is ready (checked).
    unsafe {
        if amx_current() != TileConfig::ours() {
            amx_configure();
        }
    }
    true
}

/// Requantizes an AMX tile read back from memory (`tile`, 32 x 32 i32, row stride 32) per
/// column: `(acc + add[j]) as f32 * scale[j]`, narrowed, to `q.dst + i * q.ldc + j` for the
/// first `q.rows` rows and `q.cols` columns.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL; `q.dst + i * q.ldc` is valid for `q.cols` bytes for every
/// `i < q.rows`, and no other thread writes them meanwhile.
pub unsafe fn quantize_columns(tile: &[i32], q: &ColumnQuantized) {
    assert!(q.rows <= AMX_MR && q.cols <= AMX_NR && tile.len() >= AMX_MR * AMX_NR);
    // SAFETY: the tile holds 32 rows of 32 (asserted); the output as the caller vouches.
    unsafe { quantize_columns_impl(tile.as_ptr(), q) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn quantize_columns_impl(tile: *const i32, q: &ColumnQuantized) {
    let columns = Columns::<2>::new(q);
    for r in 0..q.rows {
        let acc =
            [0, 1].map(|h| _mm512_loadu_si512(tile.add(r * AMX_NR + 16 * h) as *const __m512i));
        columns.store(q, r, &acc);
    }
}

/// The epilogue compiled for AVX2, so that its loops vectorize 8 wide.
///
/// # Safety
/// As [`Product::epilogue`], on a CPU with AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn epilogue_avx2(
    p: &Product,
    m0: usize,
    n0: usize,
    tile: &[i32],
    nr: usize,
    sink: Sink,
) {
    // SAFETY: the caller's contract.
    unsafe { p.epilogue_body(m0, n0, tile, nr, sink) }
}

/// The epilogue compiled for AVX-512, its loops 16 wide (the 32-column tiles of the VNNI
/// path are two vectors a row).
///
/// # Safety
/// As [`Product::epilogue`], on a CPU with AVX-512 F/BW/VL/DQ, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
pub(super) unsafe fn epilogue_avx512(
    p: &Product,
    m0: usize,
    n0: usize,
    tile: &[i32],
    nr: usize,
    sink: Sink,
) {
    // SAFETY: the caller's contract.
    unsafe { p.epilogue_body(m0, n0, tile, nr, sink) }
}
