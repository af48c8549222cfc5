//! The blocked depthwise rows under NEON.

use super::*;

/// One output row (`out`) under NEON: the inner pixels eight (then four, two, one) at a time
/// without bounds tests, a block's eight channels in two vectors, each tap's weights loaded
/// once for the pixels; the border pixels through [`pixel`]. The activation runs after.
pub(super) fn row_neon(
    g: &ConvGeometry,
    plane: &[f32],
    w: &[f32],
    bias: &[f32; B],
    oy: usize,
    plan: &RowPlan,
    out: &mut [f32],
) {
    let (ih, iw, ow) = (g.input[0], g.input[1], g.output[1]);
    let (sw, dw, kw, pl) = (g.strides[1], g.dilations[1], g.kernel[1], g.pad_begin[1]);
    assert!(plane.len() >= ih * iw * B && w.len() >= g.kernel[0] * kw * B);
    assert!(out.len() == ow * B && plan.inner.end <= ow);
    for ox in (0..plan.inner.start).chain(plan.inner.end..ow) {
        out[ox * B..(ox + 1) * B].copy_from_slice(&pixel(g, plane, w, bias, oy, ox, plan));
    }
    // Kernel row kh's first input value (a row of the image).
    let row = |kh: usize| (oy * g.strides[0] + kh * g.dilations[0] - g.pad_begin[0]) * iw;
    let first = plan.inner.start;
    let n = plan.inner.end - first;
    let x0 = first * sw - pl.min(first * sw);
    let (x, wp, o) = (plane.as_ptr(), w.as_ptr(), out.as_mut_ptr());
    let mut i = 0;
    macro_rules! pixels {
        ($p:literal) => {{
            // SAFETY: the inner pixels' taps (kernel rows in plan.kh, every column) lie inside
            // the image (RowPlan), their weights inside `w` (asserted), and pixels
            // first + i.. first + i + $p inside `out` (i + $p <= n, inner.end <= ow).
            unsafe {
                let out = o.add((first + i) * B);
                inner_neon::<$p>(
                    x,
                    wp,
                    bias,
                    plan.kh.clone(),
                    row,
                    kw,
                    x0 + i * sw,
                    sw,
                    dw,
                    out,
                )
            };
            i += $p;
        }};
    }
    while i + 8 <= n {
        pixels!(8);
    }
    if i + 4 <= n {
        pixels!(4);
    }
    if i + 2 <= n {
        pixels!(2);
    }
    while i < n {
        pixels!(1);
    }
}

/// `P` inner pixels from column `col` (`sw` apart), stored at `out`: bias plus, over kernel
/// rows `kh` (row `r(kh)` of the image) and `kw` taps `dw` apart, input times weight
/// (`[KH][KW][8]`).
///
/// # Safety
/// Every tap must lie inside the plane at `x` and its weight inside `w`; `out` must hold
/// `P * 8` floats.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn inner_neon<const P: usize>(
    x: *const f32,
    w: *const f32,
    bias: &[f32; B],
    kh: Range<usize>,
    r: impl Fn(usize) -> usize,
    kw: usize,
    col: usize,
    sw: usize,
    dw: usize,
    out: *mut f32,
) {
    use std::arch::aarch64::*;
    // SAFETY: the caller's contract; `bias` holds eight values.
    unsafe {
        let b = [vld1q_f32(bias.as_ptr()), vld1q_f32(bias.as_ptr().add(4))];
        let mut acc = [b; P];
        for h in kh {
            let base = r(h) + col;
            for k in 0..kw {
                let wk = w.add((h * kw + k) * B);
                let (w0, w1) = (vld1q_f32(wk), vld1q_f32(wk.add(4)));
                let xk = x.add((base + k * dw) * B);
                for (p, a) in acc.iter_mut().enumerate() {
                    let xp = xk.add(p * sw * B);
                    a[0] = vfmaq_f32(a[0], vld1q_f32(xp), w0);
                    a[1] = vfmaq_f32(a[1], vld1q_f32(xp.add(4)), w1);
                }
            }
        }
        for (p, a) in acc.iter().enumerate() {
            vst1q_f32(out.add(p * B), a[0]);
            vst1q_f32(out.add(p * B + 4), a[1]);
        }
    }
}
