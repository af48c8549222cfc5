//! The int8 GEMM on AVX-512 VNNI: 512-bit `vpdpbusd` on byte quads, an 8x32 tile, with forms
//! that requantize or convert in registers (per-tensor, per column, float), the
//! channels-last convolution's in-place (indirect) tile, and the epilogue compiled for AVX-512.

use crate::qgemm::{Product, Sink};
use std::arch::x86_64::*;

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

/// AVX-512 VNNI tile: `rows` is `[kq][8][4]` bytes, `panel` `[kq][32][4]` bytes; the rows are
/// the signed side when `rows_signed`, else the panel is.
pub fn tile_vnni(rows: &[u8], panel: &[u8], kq: usize, rows_signed: bool, tile: &mut [i32]) {
    assert!(rows.len() >= kq * VNNI_MR * 4 && panel.len() >= kq * VNNI_NR * 4);
    assert!(tile.len() >= VNNI_MR * VNNI_NR);
    // SAFETY: QPath::Avx512Vnni exists only on CPUs with AVX-512 F/BW/VL and VNNI
    // (`refined_x86` in table.rs picks it by detection); the lengths were checked above.
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

/// On AVX-512 VNNI, with the channels-last convolution's in-place tile.
pub(crate) const AVX512_VNNI: crate::qgemm::Kernels = crate::qgemm::Kernels {
    path: crate::qgemm::QPath::Avx512Vnni,
    indirect: Some(tile_vnni_indirect),
};

/// The signature of [`tile_vnni_indirect`], a table entry.
pub(crate) type IndirectTile = unsafe fn(&IndirectRows, &[u8], &ColumnQuantized);

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
pub(super) struct Columns<const HALVES: usize> {
    add: [__m512i; HALVES],
    scale: [__m512; HALVES],
    masks: [__mmask16; 2],
    narrow: Narrow,
}

impl<const HALVES: usize> Columns<HALVES> {
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) fn new(q: &ColumnQuantized) -> Self {
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
    pub(super) unsafe fn store(&self, q: &ColumnQuantized, i: usize, acc: &[__m512i; HALVES]) {
        for (h, &acc) in acc.iter().enumerate() {
            let sum = _mm512_add_epi32(acc, self.add[h]);
            let f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), self.scale[h]);
            let out = q.dst.add(i * q.ldc + 16 * h) as *mut i8;
            // SAFETY: the caller's contract.
            unsafe { _mm_mask_storeu_epi8(out, self.masks[h], self.narrow.bytes(f)) };
        }
    }
}

/// The epilogue compiled for AVX-512, its loops 16 wide (the 32-column tiles of the VNNI
/// path are two vectors a row).
///
/// # Safety
/// As [`Product::epilogue`], on a CPU with AVX-512 F/BW/VL/DQ, AVX2 and FMA.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
pub(in crate::qgemm) unsafe fn epilogue_avx512(
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
