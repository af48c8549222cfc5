//! The channels-last depthwise QLinearConv on AVX-512: bands of output rows whose input rows
//! are converted once to `x - x_zero` in f32, sixteen channels a vector.

use super::{Kernels, QConvNhwcKernel};
use crate::qconv::range;
use crate::qgemm::x86::Narrow;
use std::arch::x86_64::*;

pub(crate) const KERNELS: Kernels = Kernels {
    depthwise_band: Some(depthwise_band),
    ..super::avx2::KERNELS
};

/// Output rows `first..first + rows` of image `b`, channels `channels`, of a depthwise
/// convolution, sixteen channels at a time: the band's input rows for those channels are
/// converted to `x - x_zero` in f32, padded with zeros, into one contiguous buffer (the
/// `kh` rows an output row reads stay in L1 as the rows go down), so that every output
/// vector is one FMA per tap, then the bias and the requantization in registers.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL; `out` points at output row `first` of image `b` and is
/// valid for `rows` whole rows, whose channels `channels` (from a multiple of 16) no other
/// thread writes meanwhile; `w` is the kernel's `[taps][C rounded up to 16]` f32 weights
/// (with whether sums may start from the bias); the kernel has at most 256 taps. `buf`
/// (scratch starting on a 64-byte line) holds the band: [`QConvNhwcKernel::band_floats`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
unsafe fn depthwise_band(
    k: &QConvNhwcKernel,
    (w, bias_in_sum): (&[f32], bool),
    x: &[u8],
    (b, first, rows): (usize, usize, usize),
    channels: std::ops::Range<usize>,
    out: *mut u8,
    buf: &mut [f32],
) {
    let g = &k.s.geometry;
    let (ih, iw) = (g.input[0], g.input[1]);
    let ow = g.output[1];
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (sh, dh) = (g.strides[0], g.dilations[0]);
    let c = k.s.out_channels;
    let cp = c.next_multiple_of(16);
    if rows == 0 || ow == 0 || c == 0 {
        return;
    }
    assert!(w.len() == kh * kw * cp && k.bias.len() == c && k.mult.len() == c);
    assert!(x.len() >= (b + 1) * ih * iw * c && kh * kw <= 256);
    let image = &x[b * ih * iw * c..(b + 1) * ih * iw * c];
    // Padded input rows `top..top + band_h` (top may lie in the padding, negative).
    let top = (first * sh) as isize - g.pad_begin[0] as isize;
    let band_h = (rows - 1) * sh + (kh - 1) * dh + 1;
    let width = k.band_width();
    let left = g.pad_begin[1];
    // A band row: the padded input row's pixels, sixteen channels each.
    let row_len = width * 16;
    // Every element is written below: zeros for the padding, the input for the rest.
    // The band starts on a 64-byte line (scratch does), so that every pixel's
    // sixteen channels are one line: loads spanning two lines cost this kernel about a
    // third of its time.
    let len = band_h * row_len;
    assert!(buf.len() >= len && buf.as_ptr().align_offset(64) == 0);
    let buf = &mut buf[..len];
    let zero = _mm512_set1_epi32(k.x.zero[0]);
    let (lo, hi) = range(k.y.signed);
    let narrow = Narrow::new(k.y.zero[0], lo, hi);
    let band = buf.as_ptr();
    // Channel groups start at multiples of 16.
    for c0 in (channels.start..channels.end.min(c)).step_by(16) {
        let n = (c - c0).min(16);
        let mask: __mmask16 = ((1u32 << n) - 1) as u16;
        // The band's rows for these sixteen channels, contiguous: the output rows'
        // sliding window of `kh` input rows stays in L1 as the rows go down.
        for (r, dst) in buf.chunks_exact_mut(row_len).enumerate() {
            let iy = top + r as isize;
            if iy < 0 || iy >= ih as isize {
                dst.fill(0.0);
                continue;
            }
            dst[..left * 16].fill(0.0);
            dst[(left + iw) * 16..].fill(0.0);
            let src = image[iy as usize * iw * c..][..iw * c].as_ptr().add(c0);
            let d = dst.as_mut_ptr().add(left * 16);
            if k.x.signed {
                convert_row::<true>((src, c, mask, zero), iw, d);
            } else {
                convert_row::<false>((src, c, mask, zero), iw, d);
            }
        }
        let bias = _mm512_maskz_loadu_epi32(mask, k.bias.as_ptr().add(c0));
        let ch = Channels {
            w_stride: cp,
            mask,
            bias,
            bias_in_sum: bias_in_sum.then(|| _mm512_cvtepi32_ps(bias)),
            scale: _mm512_maskz_loadu_ps(mask, k.mult.as_ptr().add(c0)),
            w: w.as_ptr().add(c0),
        };
        for oy in 0..rows {
            let dst = out.add(oy * ow * c + c0);
            let row = band.add(oy * sh * row_len);
            let mut ox = 0;
            while ox + PIXELS <= ow {
                pixels::<PIXELS>(k, &ch, narrow, row, row_len, ox, dst);
                ox += PIXELS;
            }
            // The row's tail (7, 14 and 28 pixels wide layers are common) in blocks
            // of 4, 2 and 1.
            if ox + 4 <= ow {
                pixels::<4>(k, &ch, narrow, row, row_len, ox, dst);
                ox += 4;
            }
            if ox + 2 <= ow {
                pixels::<2>(k, &ch, narrow, row, row_len, ox, dst);
                ox += 2;
            }
            if ox < ow {
                pixels::<1>(k, &ch, narrow, row, row_len, ox, dst);
            }
        }
    }
}

const PIXELS: usize = 8;

/// `x - x_zero` as f32 for `pixels` input pixels (`c` bytes apart from `src`), sixteen
/// channels each (those outside `mask` read as 0, giving `-x_zero`, which meets weights of
/// 0), into `dst`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn convert_row<const SIGNED: bool>(
    (src, c, mask, zero): (*const u8, usize, __mmask16, __m512i),
    pixels: usize,
    dst: *mut f32,
) {
    for ix in 0..pixels {
        let bytes = _mm_maskz_loadu_epi8(mask, src.add(ix * c) as *const i8);
        let v = if SIGNED {
            _mm512_cvtepi8_epi32(bytes)
        } else {
            _mm512_cvtepu8_epi32(bytes)
        };
        _mm512_storeu_ps(
            dst.add(ix * 16),
            _mm512_cvtepi32_ps(_mm512_sub_epi32(v, zero)),
        );
    }
}

/// Sixteen channels' constants: which are real, their bias and scale, and their weights
/// (`w[t * w_stride + ..]`, `w_stride` being C rounded up to 16).
struct Channels {
    w_stride: usize,
    mask: __mmask16,
    bias: __m512i,
    /// The bias as f32, where the sums start from it exactly (see `depthwise_band`).
    bias_in_sum: Option<__m512>,
    scale: __m512,
    w: *const f32,
}

/// Output pixels `ox..ox + N` of one row, sixteen channels: `row` is the band's first
/// input row of the output row at the channels' offset, `out` the output row there.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn pixels<const N: usize>(
    k: &QConvNhwcKernel,
    ch: &Channels,
    narrow: Narrow,
    row: *const f32,
    row_len: usize,
    ox: usize,
    out: *mut u8,
) {
    let g = &k.s.geometry;
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (dh, dw) = (g.dilations[0], g.dilations[1]);
    // A band pixel is sixteen channels.
    let step = g.strides[1] * 16;
    // Integer-valued f32 products and sums stay below 2^24 (|x w| < 2^16, at most 256
    // taps), where f32 is exact: FMA gives the integer sum.
    let mut sum = [ch.bias_in_sum.unwrap_or(_mm512_setzero_ps()); N];
    for ki in 0..kh {
        let r = row.add(ki * dh * row_len + ox * step);
        for kj in 0..kw {
            let wv = _mm512_loadu_ps(ch.w.add((ki * kw + kj) * ch.w_stride));
            let x = r.add(kj * dw * 16);
            for (j, s) in sum.iter_mut().enumerate() {
                *s = _mm512_fmadd_ps(_mm512_loadu_ps(x.add(j * step)), wv, *s);
            }
        }
    }
    let c = k.s.out_channels;
    for (j, s) in sum.iter().enumerate() {
        let acc = match ch.bias_in_sum {
            Some(_) => *s,
            None => _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_cvtps_epi32(*s), ch.bias)),
        };
        let dst = out.add((ox + j) * c) as *mut i8;
        _mm_mask_storeu_epi8(dst, ch.mask, narrow.bytes(_mm512_mul_ps(acc, ch.scale)));
    }
}
