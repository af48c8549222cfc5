//! Sliding-window arithmetic shared by pooling and convolution: output sizes, `auto_pad`
//! resolution and `ceil_mode`.

use crate::{op_bail, OpError, OpResult};

/// How padding is chosen (ONNX `auto_pad`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AutoPad {
    /// Explicit `pads`.
    #[default]
    NotSet,
    /// Output size `ceil(in / stride)`; an odd total pad puts the extra one at the end.
    SameUpper,
    /// Like `SameUpper`, with the extra one at the beginning.
    SameLower,
    /// No padding.
    Valid,
}

impl AutoPad {
    /// Parses the ONNX attribute value.
    pub fn parse(s: &str) -> Option<AutoPad> {
        match s {
            "NOTSET" | "" => Some(AutoPad::NotSet),
            "SAME_UPPER" => Some(AutoPad::SameUpper),
            "SAME_LOWER" => Some(AutoPad::SameLower),
            "VALID" => Some(AutoPad::Valid),
            _ => None,
        }
    }
}

/// The resolved window geometry of one spatial axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AxisGeometry {
    pub input: usize,
    pub kernel: usize,
    pub stride: usize,
    pub dilation: usize,
    pub pad_begin: usize,
    pub pad_end: usize,
    pub output: usize,
}

impl AxisGeometry {
    /// Extent of the dilated kernel: `(kernel - 1) * dilation + 1`.
    pub fn effective_kernel(&self) -> usize {
        (self.kernel - 1) * self.dilation + 1
    }

    /// Input coordinate (possibly negative, in the padding) of tap `k` of output `o`.
    pub fn tap(&self, o: usize, k: usize) -> i64 {
        (o * self.stride + k * self.dilation) as i64 - self.pad_begin as i64
    }

    /// The taps `k` in `[lo, hi)` of output `o` that land inside the input, computed rather
    /// than searched, so that a window far larger than the input costs nothing.
    pub fn valid_taps(&self, o: usize) -> (usize, usize) {
        let start = (o * self.stride) as i128 - self.pad_begin as i128;
        let d = self.dilation as i128;
        let k = self.kernel as i128;
        // Smallest k with start + k*d >= 0, and smallest k with start + k*d >= input.
        let first_at_least = |bound: i128| ((bound - start).max(0) + d - 1) / d;
        let lo = first_at_least(0).min(k);
        let hi = first_at_least(self.input as i128).clamp(lo, k);
        (lo as usize, hi as usize)
    }

    /// The taps of output `o` before the end padding runs out (what `count_include_pad`
    /// counts): those at positions below `input + pad_end`.
    pub fn padded_taps(&self, o: usize) -> usize {
        let start = (o * self.stride) as i128 - self.pad_begin as i128;
        let d = self.dilation as i128;
        let limit = (self.input + self.pad_end) as i128;
        (((limit - start).max(0) + d - 1) / d).min(self.kernel as i128) as usize
    }
}

/// Largest value accepted for a kernel, stride, dilation or pad: keeps every product of the
/// arithmetic below far from overflow.
const MAX_GEOM: i64 = 1 << 31;

/// Output size and resolved pads of one axis.
///
/// `pad_begin`/`pad_end` are the explicit pads (ignored unless `auto_pad` is `NotSet`).
/// With `ceil_mode` the output is rounded up, except that the last window must start inside the
/// input or the left padding.
#[allow(clippy::too_many_arguments)]
pub fn conv_output_size(
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
    auto_pad: AutoPad,
    ceil_mode: bool,
) -> OpResult<AxisGeometry> {
    for (v, what) in [
        (kernel, "kernel size"),
        (stride, "stride"),
        (dilation, "dilation"),
    ] {
        if v == 0 || v as i64 > MAX_GEOM {
            op_bail!("{what} must be in 1..={MAX_GEOM}, got {v}");
        }
    }
    for p in [pad_begin, pad_end] {
        if p as i64 > MAX_GEOM {
            op_bail!("pad {p} is too large");
        }
    }
    let (i, k, s, d) = (
        input as i128,
        kernel as i128,
        stride as i128,
        dilation as i128,
    );
    let eff = (k - 1) * d + 1;
    let (out, pb, pe) = match auto_pad {
        AutoPad::NotSet => {
            let (pb, pe) = (pad_begin as i128, pad_end as i128);
            let span = i + pb + pe - eff;
            if span < 0 {
                op_bail!(
                    "the window ({eff} with dilation) is larger than the padded input ({})",
                    i + pb + pe
                );
            }
            let mut out = if ceil_mode {
                (span + s - 1) / s + 1
            } else {
                span / s + 1
            };
            if ceil_mode && (out - 1) * s >= i + pb {
                out -= 1;
            }
            (out, pb, pe)
        }
        AutoPad::Valid => {
            let span = i - eff;
            if span < 0 {
                op_bail!("the window ({eff} with dilation) is larger than the input ({i})");
            }
            (span / s + 1, 0, 0)
        }
        AutoPad::SameUpper | AutoPad::SameLower => {
            let out = (i + s - 1) / s;
            let total = ((out - 1) * s + eff - i).max(0);
            let small = total / 2;
            if auto_pad == AutoPad::SameUpper {
                (out, small, total - small)
            } else {
                (out, total - small, small)
            }
        }
    };
    let conv = |v: i128| usize::try_from(v).map_err(|_| OpError(format!("bad size {v}")));
    Ok(AxisGeometry {
        input,
        kernel,
        stride,
        dilation,
        pad_begin: conv(pb)?,
        pad_end: conv(pe)?,
        output: conv(out)?,
    })
}

/// Reads an optional per-axis i64 attribute as sizes: `default` for each axis when empty.
pub fn axis_values(v: &[i64], n: usize, default: usize, what: &str) -> OpResult<Vec<usize>> {
    if v.is_empty() {
        return Ok(vec![default; n]);
    }
    if v.len() != n {
        op_bail!("{what} has {} values, expected {n}", v.len());
    }
    v.iter()
        .map(|&x| {
            if !(0..=MAX_GEOM).contains(&x) {
                op_bail!("{what} value {x} is out of range");
            }
            Ok(x as usize)
        })
        .collect()
}

/// Resolves the geometry of every spatial axis.
///
/// `strides`, `dilations` and `pads` may be empty (1, 1 and 0). `pads` is ONNX-ordered: all the
/// begins, then all the ends.
pub fn window_geometry(
    spatial: &[usize],
    kernel: &[usize],
    strides: &[i64],
    dilations: &[i64],
    pads: &[i64],
    auto_pad: AutoPad,
    ceil_mode: bool,
) -> OpResult<Vec<AxisGeometry>> {
    let n = spatial.len();
    if kernel.len() != n {
        op_bail!(
            "kernel has {} spatial dimensions, the input has {n}",
            kernel.len()
        );
    }
    let strides = axis_values(strides, n, 1, "strides")?;
    let dilations = axis_values(dilations, n, 1, "dilations")?;
    let pads = axis_values(pads, 2 * n, 0, "pads")?;
    (0..n)
        .map(|a| {
            conv_output_size(
                spatial[a],
                kernel[a],
                strides[a],
                dilations[a],
                pads[a],
                pads[n + a],
                auto_pad,
                ceil_mode,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {

    #[test]
    fn computed_tap_ranges_match_a_scan_of_every_tap() {
        for input in 1..7 {
            for kernel in 1..6 {
                for stride in 1..4 {
                    for dilation in 1..4 {
                        for (pad_begin, pad_end) in [(0, 0), (1, 0), (2, 3), (5, 5)] {
                            let g = AxisGeometry {
                                input,
                                kernel,
                                stride,
                                dilation,
                                pad_begin,
                                pad_end,
                                output: 6,
                            };
                            for o in 0..g.output {
                                let inside: Vec<usize> = (0..kernel)
                                    .filter(|&k| (0..input as i64).contains(&g.tap(o, k)))
                                    .collect();
                                let (lo, hi) = g.valid_taps(o);
                                assert_eq!((lo..hi).collect::<Vec<_>>(), inside, "{g:?} o={o}");
                                let padded = (0..kernel)
                                    .filter(|&k| g.tap(o, k) < (input + pad_end) as i64)
                                    .count();
                                assert_eq!(g.padded_taps(o), padded, "{g:?} o={o}");
                            }
                        }
                    }
                }
            }
        }
        // A window of 2^26 taps costs nothing to describe.
        let g = AxisGeometry {
            input: 15,
            kernel: 1 << 26,
            stride: 2,
            dilation: 1,
            pad_begin: (1 << 25) - 7,
            pad_end: 1 << 25,
            output: 8,
        };
        let (lo, hi) = g.valid_taps(3);
        assert_eq!(hi - lo, 15);
    }

    use super::*;

    fn out(
        i: usize,
        k: usize,
        s: usize,
        d: usize,
        p: (usize, usize),
        a: AutoPad,
        c: bool,
    ) -> (usize, usize, usize) {
        let g = conv_output_size(i, k, s, d, p.0, p.1, a, c).unwrap();
        (g.output, g.pad_begin, g.pad_end)
    }

    #[test]
    fn explicit_and_ceil() {
        assert_eq!(out(32, 2, 1, 1, (0, 0), AutoPad::NotSet, false), (31, 0, 0));
        assert_eq!(out(28, 3, 1, 1, (2, 2), AutoPad::NotSet, false), (30, 2, 2));
        assert_eq!(out(4, 3, 2, 1, (0, 0), AutoPad::NotSet, false), (1, 0, 0));
        assert_eq!(out(4, 3, 2, 1, (0, 0), AutoPad::NotSet, true), (2, 0, 0));
        // The last window would start past the input: dropped.
        assert_eq!(out(2, 1, 2, 1, (0, 0), AutoPad::NotSet, true), (1, 0, 0));
        // ...but a window starting in the left padding... here (2+1-3)/3 ceil + 1 = 1.
        assert_eq!(out(2, 3, 3, 1, (1, 1), AutoPad::NotSet, true), (1, 1, 1));
        // Dilation: effective kernel 9.
        assert_eq!(out(32, 5, 3, 2, (0, 0), AutoPad::NotSet, true), (9, 0, 0));
        assert_eq!(out(32, 5, 3, 2, (0, 0), AutoPad::NotSet, false), (8, 0, 0));
        assert!(conv_output_size(2, 5, 1, 1, 0, 0, AutoPad::NotSet, false).is_err());
        assert!(conv_output_size(2, 1, 0, 1, 0, 0, AutoPad::NotSet, false).is_err());
    }

    #[test]
    fn auto_pad() {
        assert_eq!(
            out(5, 3, 2, 1, (9, 9), AutoPad::SameUpper, false),
            (3, 1, 1)
        );
        assert_eq!(
            out(32, 2, 1, 1, (0, 0), AutoPad::SameUpper, false),
            (32, 0, 1)
        );
        assert_eq!(
            out(32, 2, 1, 1, (0, 0), AutoPad::SameLower, false),
            (32, 1, 0)
        );
        assert_eq!(out(32, 5, 3, 1, (0, 0), AutoPad::Valid, false), (10, 0, 0));
        let g = window_geometry(
            &[5, 6],
            &[2, 2],
            &[],
            &[],
            &[1, 0, 0, 1],
            AutoPad::NotSet,
            false,
        )
        .unwrap();
        assert_eq!((g[0].output, g[1].output), (5, 6));
        assert!(window_geometry(&[5], &[2], &[1, 1], &[], &[], AutoPad::NotSet, false).is_err());
    }
}
