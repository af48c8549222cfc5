//! Resize (and Upsample, mapped onto it): nearest, N-D separable linear and cubic
//! interpolation, with every ONNX coordinate transformation, antialiasing, `axes` and
//! `keep_aspect_ratio_policy`.
//!
//! Inputs follow opset 11+: X, roi, scales, sizes (all but X optional and value-dependent).
//! Opset-10 Resize and Upsample-9 have (X, scales): `scales_at_input_1` says so. Upsample-7
//! had scales as an attribute: `scales_attr`.

use crate::op::{input, normalize_axes, optional, output, required, Prototype};
use crate::ops::util::strides;
use crate::{
    dispatch_all, op_bail, op_common, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ResizeMode {
    #[default]
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CoordMode {
    #[default]
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum NearestMode {
    #[default]
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Opset-10 Resize / Upsample: floor when upsampling, ceil when downsampling.
    Simple,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum KeepAspectRatio {
    #[default]
    Stretch,
    NotLarger,
    NotSmaller,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Resize {
    pub mode: ResizeMode,
    pub coordinate_transformation_mode: CoordMode,
    pub nearest_mode: NearestMode,
    pub cubic_coeff_a: f64,
    pub exclude_outside: bool,
    pub extrapolation_value: f64,
    pub antialias: bool,
    pub axes: Option<Vec<i64>>,
    pub keep_aspect_ratio_policy: KeepAspectRatio,
    /// Input 1 is `scales` (opset-10 Resize, Upsample-9) instead of `roi`.
    pub scales_at_input_1: bool,
    /// Upsample-7's scales attribute.
    pub scales_attr: Option<Vec<f64>>,
}

impl Default for Resize {
    fn default() -> Self {
        Resize {
            mode: ResizeMode::Nearest,
            coordinate_transformation_mode: CoordMode::HalfPixel,
            nearest_mode: NearestMode::RoundPreferFloor,
            cubic_coeff_a: -0.75,
            exclude_outside: false,
            extrapolation_value: 0.0,
            antialias: false,
            axes: None,
            keep_aspect_ratio_policy: KeepAspectRatio::Stretch,
            scales_at_input_1: false,
            scales_attr: None,
        }
    }
}

/// Output shape, per-axis scale and per-axis roi (start, end) of one call.
struct ResizePlan {
    out: Vec<usize>,
    scales: Vec<f64>,
    roi: Vec<(f64, f64)>,
}

/// Empty tensors stand for absent inputs (opset 11-12 required them to be listed).
fn nonempty(t: Option<&Tensor>) -> Option<&Tensor> {
    t.filter(|t| t.numel() > 0)
}

/// Largest output dimension accepted, so hostile scales fail cleanly.
const MAX_DIM: f64 = (1u64 << 40) as f64;

impl Resize {
    fn plan(
        &self,
        x: &[usize],
        roi: Option<&Tensor>,
        scales: Option<&Tensor>,
        sizes: Option<&Tensor>,
    ) -> OpResult<ResizePlan> {
        let r = x.len();
        let axes = match &self.axes {
            Some(a) => normalize_axes(a, r)?,
            None => (0..r).collect(),
        };
        let n = axes.len();
        let scales_v: Option<Vec<f64>> = match (&self.scales_attr, nonempty(scales)) {
            (_, Some(t)) => Some(t.to_f64_vec()),
            (Some(a), None) => Some(a.clone()),
            (None, None) => None,
        };
        let sizes_v = nonempty(sizes).map(|t| t.to_i64_vec());
        let mut plan = ResizePlan {
            out: x.to_vec(),
            scales: vec![1.0; r],
            roi: vec![(0.0, 1.0); r],
        };
        if let Some(roi) = nonempty(roi) {
            let v = roi.to_f64_vec();
            if v.len() != 2 * n {
                op_bail!("input 1 (roi) has {} values, expected {}", v.len(), 2 * n);
            }
            for (i, &a) in axes.iter().enumerate() {
                plan.roi[a] = (v[i], v[n + i]);
            }
        }
        match (scales_v, sizes_v) {
            (Some(_), Some(_)) => op_bail!("only one of scales and sizes may be given"),
            (None, None) => op_bail!("one of scales and sizes must be given"),
            (Some(s), None) => {
                if s.len() != n {
                    op_bail!("scales has {} values, expected {n}", s.len());
                }
                for (i, &a) in axes.iter().enumerate() {
                    if s[i].is_nan() || s[i] <= 0.0 || !s[i].is_finite() {
                        op_bail!("scale {} must be positive", s[i]);
                    }
                    let o = (x[a] as f64 * s[i]).floor();
                    if o > MAX_DIM {
                        op_bail!("scale {} makes axis {a} too large", s[i]);
                    }
                    plan.scales[a] = s[i];
                    plan.out[a] = o as usize;
                }
            }
            (None, Some(z)) => {
                if z.len() != n {
                    op_bail!("input 3 (sizes) has {} values, expected {n}", z.len());
                }
                for (i, &a) in axes.iter().enumerate() {
                    if z[i] < 0 || z[i] as f64 > MAX_DIM {
                        op_bail!("size {} is out of range", z[i]);
                    }
                    plan.out[a] = z[i] as usize;
                    plan.scales[a] = if x[a] == 0 {
                        1.0
                    } else {
                        z[i] as f64 / x[a] as f64
                    };
                }
                if self.keep_aspect_ratio_policy != KeepAspectRatio::Stretch {
                    let it = axes.iter().map(|&a| plan.scales[a]);
                    let s = if self.keep_aspect_ratio_policy == KeepAspectRatio::NotLarger {
                        it.fold(f64::INFINITY, f64::min)
                    } else {
                        it.fold(f64::NEG_INFINITY, f64::max)
                    };
                    for &a in &axes {
                        plan.scales[a] = s;
                        plan.out[a] = (s * x[a] as f64 + 0.5).floor() as usize;
                    }
                }
            }
        }
        Ok(plan)
    }

    fn inputs<'a>(&self, get: impl Fn(usize) -> Option<&'a Tensor>) -> [Option<&'a Tensor>; 3] {
        if self.scales_at_input_1 {
            [None, get(1), None]
        } else {
            [get(1), get(2), get(3)]
        }
    }

    /// Output shape and per-axis taps (input index, weight; `None` = extrapolate) of a call
    /// with these roi/scales/sizes inputs (for optimised kernels).
    #[allow(clippy::type_complexity)]
    pub fn axis_tables(
        &self,
        x: &[usize],
        inputs: &[Option<&Tensor>],
    ) -> OpResult<(Vec<usize>, Vec<Vec<Option<Vec<(usize, f64)>>>>)> {
        let [roi, scales, sizes] = self.inputs(|i| inputs.get(i).copied().flatten());
        let plan = self.plan(x, roi, scales, sizes)?;
        let taps = (0..x.len())
            .map(|a| self.axis_taps(x[a], plan.out[a], plan.scales[a], plan.roi[a]))
            .collect();
        Ok((plan.out, taps))
    }

    /// Source coordinate of output `o` on an axis, or `None` when it is outside (only
    /// tf_crop_and_resize).
    fn source_coord(
        &self,
        o: usize,
        inp: usize,
        out: usize,
        scale: f64,
        roi: (f64, f64),
    ) -> Option<f64> {
        let x = o as f64;
        let (i_len, o_len) = (inp as f64, out as f64);
        let c = match self.coordinate_transformation_mode {
            CoordMode::HalfPixel => (x + 0.5) / scale - 0.5,
            CoordMode::HalfPixelSymmetric => {
                let adjustment = o_len / (scale * i_len);
                let offset = i_len / 2.0 * (1.0 - adjustment);
                offset + (x + 0.5) / scale - 0.5
            }
            CoordMode::PytorchHalfPixel => {
                if out > 1 {
                    (x + 0.5) / scale - 0.5
                } else {
                    0.0
                }
            }
            CoordMode::AlignCorners => {
                // The ONNX tests use the unrounded resized length `scale * in` here.
                let len = scale * i_len;
                if len != 1.0 {
                    x * (i_len - 1.0) / (len - 1.0)
                } else {
                    0.0
                }
            }
            CoordMode::Asymmetric => x / scale,
            CoordMode::TfHalfPixelForNn => (x + 0.5) / scale,
            CoordMode::TfCropAndResize => {
                let c = if out > 1 {
                    roi.0 * (i_len - 1.0) + x * (roi.1 - roi.0) * (i_len - 1.0) / (o_len - 1.0)
                } else {
                    0.5 * (roi.0 + roi.1) * (i_len - 1.0)
                };
                if c < 0.0 || c > i_len - 1.0 {
                    return None;
                }
                c
            }
        };
        Some(c)
    }

    /// Taps (input index, weight) of every output index along one axis; `None` = extrapolate.
    fn axis_taps(
        &self,
        inp: usize,
        out: usize,
        scale: f64,
        roi: (f64, f64),
    ) -> Vec<Option<Vec<(usize, f64)>>> {
        let last = inp as i64 - 1;
        let clamp = |i: i64| i.clamp(0, last.max(0)) as usize;
        (0..out)
            .map(|o| {
                let c = self.source_coord(o, inp, out, scale, roi)?;
                if self.mode == ResizeMode::Nearest {
                    let f = c.floor();
                    let frac = c - f;
                    let i = if frac == 0.0 {
                        f
                    } else {
                        match self.nearest_mode {
                            NearestMode::RoundPreferFloor => {
                                if frac <= 0.5 {
                                    f
                                } else {
                                    f + 1.0
                                }
                            }
                            NearestMode::RoundPreferCeil => {
                                if frac < 0.5 {
                                    f
                                } else {
                                    f + 1.0
                                }
                            }
                            NearestMode::Floor => f,
                            NearestMode::Ceil => f + 1.0,
                            NearestMode::Simple => {
                                if scale < 1.0 {
                                    f + 1.0
                                } else {
                                    f
                                }
                            }
                        }
                    };
                    return Some(vec![(clamp(i as i64), 1.0)]);
                }
                // An integral coordinate is treated as ratio 1 from the index below, as the
                // ONNX reference does (it matters for antialias footprints).
                let (base, ratio) = if c == c.floor() {
                    (c as i64 - 1, 1.0)
                } else {
                    (c.floor() as i64, c - c.floor())
                };
                let s = if self.antialias { scale.min(1.0) } else { 1.0 };
                let (reach, kernel): (f64, Box<dyn Fn(f64) -> f64>) = match self.mode {
                    ResizeMode::Linear => (1.0, Box::new(|d: f64| (1.0 - d.abs()).max(0.0))),
                    _ => {
                        let a = self.cubic_coeff_a;
                        (
                            2.0,
                            Box::new(move |d: f64| {
                                let x = d.abs();
                                if x <= 1.0 {
                                    ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
                                } else if x < 2.0 {
                                    ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
                                } else {
                                    0.0
                                }
                            }),
                        )
                    }
                };
                let start = (-reach / s).floor() as i64 + 1;
                let end = 2 - start; // exclusive, relative to base (symmetric footprint)
                let mut taps: Vec<(i64, f64)> = (start..end)
                    .map(|k| (base + k, kernel(s * (k as f64 - ratio))))
                    .collect();
                if self.exclude_outside {
                    for t in taps.iter_mut() {
                        if t.0 < 0 || t.0 > last {
                            t.1 = 0.0;
                        }
                    }
                }
                let sum: f64 = taps.iter().map(|t| t.1).sum();
                if (self.antialias || self.exclude_outside) && sum != 0.0 {
                    taps.iter_mut().for_each(|t| t.1 /= sum);
                }
                Some(taps.into_iter().map(|(i, w)| (clamp(i), w)).collect())
            })
            .collect()
    }
}

impl Op for Resize {
    op_common!(
        "Resize",
        Prototype {
            inputs: &[
                input("X", DTypeSet::NUMERIC),
                optional("roi", DTypeSet::FLOAT),
                optional("scales", DTypeSet::FLOAT),
                optional("sizes", DTypeSet::I64),
            ],
            outputs: &[output("Y")],
            value_inputs: &[1, 2, 3],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let get = |i: usize| if ctx.has(i) { ctx.value(i).ok() } else { None };
        for i in 1..4 {
            if ctx.has(i) {
                ctx.value(i)?;
            }
        }
        let [roi, scales, sizes] = self.inputs(get);
        let plan = self.plan(ctx.shape(0)?, roi, scales, sizes)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, plan.out)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let [roi, scales, sizes] = self.inputs(|i| inputs.get(i).copied().flatten());
        let plan = self.plan(x.shape(), roi, scales, sizes)?;
        let r = x.rank();
        if x.numel() == 0 && plan.out.iter().product::<usize>() > 0 {
            op_bail!(
                "cannot resize the empty input {:?} to {:?}",
                x.shape(),
                plan.out
            );
        }
        // Allocate first: it refuses absurd output sizes before the tap tables are built.
        let mut out = Tensor::zeros(x.dtype(), &plan.out)?;
        let taps: Vec<_> = (0..r)
            .map(|a| self.axis_taps(x.shape()[a], plan.out[a], plan.scales[a], plan.roi[a]))
            .collect();
        let extrap = self.extrapolation_value;
        dispatch_all!(x.dtype(), T => {
            if self.mode == ResizeMode::Nearest {
                // Gather in the element type: exact for every dtype.
                let xs = x.as_slice::<T>()?;
                let in_str = strides(x.shape());
                let out_str = strides(&plan.out);
                for (j, o) in out.as_mut_slice::<T>()?.iter_mut().enumerate() {
                    let mut off = 0;
                    let mut outside = false;
                    for a in 0..r {
                        let oa = (j / out_str[a]) % plan.out[a];
                        match &taps[a][oa] {
                            Some(t) => off += t[0].0 * in_str[a],
                            None => outside = true,
                        }
                    }
                    *o = if outside { T::from_f64(extrap) } else { xs[off] };
                }
            } else {
                // Separable: interpolate one axis at a time in f64.
                let mut cur = x.to_f64_vec();
                let mut shape = x.shape().to_vec();
                for a in 0..r {
                    if plan.out[a] == shape[a] && plan.scales[a] == 1.0 && self.coordinate_transformation_mode != CoordMode::TfCropAndResize {
                        continue;
                    }
                    let outer: usize = shape[..a].iter().product();
                    let inner: usize = shape[a + 1..].iter().product();
                    let (ilen, olen) = (shape[a], plan.out[a]);
                    let mut next = vec![0.0; outer * olen * inner];
                    for o in 0..outer {
                        for (j, t) in taps[a].iter().enumerate() {
                            for i in 0..inner {
                                next[(o * olen + j) * inner + i] = match t {
                                    None => extrap,
                                    Some(t) => t.iter().map(|&(k, w)| w * cur[(o * ilen + k) * inner + i]).sum(),
                                };
                            }
                        }
                    }
                    cur = next;
                    shape[a] = olen;
                }
                for (o, v) in out.as_mut_slice::<T>()?.iter_mut().zip(cur) {
                    *o = T::from_f64(v);
                }
            }
        });
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, f32t};
    use super::*;

    fn scales(v: &[f32]) -> Tensor {
        Tensor::from_slice(&[v.len()], v).unwrap()
    }

    fn sizes(v: &[i64]) -> Tensor {
        Tensor::from_slice(&[v.len()], v).unwrap()
    }

    #[test]
    fn nearest_upsample_and_axes() {
        let x = f32t(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
        let r = Resize {
            axes: Some(vec![3]),
            ..Default::default()
        };
        let y = r
            .eval(&[Some(&x), None, Some(&scales(&[2.0])), None])
            .unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 2, 4]);
        assert_close(&y[0], &[1., 1., 2., 2., 3., 3., 4., 4.], 0.0);
        let up = Resize {
            scales_at_input_1: true,
            coordinate_transformation_mode: CoordMode::Asymmetric,
            nearest_mode: NearestMode::Simple,
            ..Default::default()
        };
        let y = up
            .eval(&[Some(&x), Some(&scales(&[1., 1., 1., 2.]))])
            .unwrap();
        assert_close(&y[0], &[1., 1., 2., 2., 3., 3., 4., 4.], 0.0);
        let i = Tensor::from_vec(&[1, 3], vec![i64::MAX, 1, 2]).unwrap();
        let y = Resize::default()
            .eval(&[Some(&i), None, None, Some(&sizes(&[1, 2]))])
            .unwrap();
        // half_pixel: x=0 -> 0.25 -> 0; x=1 -> 1.75 -> 2.
        assert_eq!(y[0].to_i64_vec(), vec![i64::MAX, 2]);
    }

    #[test]
    fn linear_modes() {
        let x = f32t(&[1, 2], &[1., 3.]);
        let lin = |c| Resize {
            mode: ResizeMode::Linear,
            coordinate_transformation_mode: c,
            ..Default::default()
        };
        let s = scales(&[1., 2.]);
        // half_pixel: coords -0.25, 0.25, 0.75, 1.25 -> clamped edges.
        let y = lin(CoordMode::HalfPixel)
            .eval(&[Some(&x), None, Some(&s), None])
            .unwrap();
        assert_close(&y[0], &[1., 1.5, 2.5, 3.], 1e-7);
        let y = lin(CoordMode::AlignCorners)
            .eval(&[Some(&x), None, None, Some(&sizes(&[1, 3]))])
            .unwrap();
        assert_close(&y[0], &[1., 2., 3.], 1e-7);
        let y = lin(CoordMode::Asymmetric)
            .eval(&[Some(&x), None, Some(&s), None])
            .unwrap();
        assert_close(&y[0], &[1., 2., 3., 3.], 1e-7);
        // tf_crop_and_resize over roi [0.5, 1.5] (in normalized coords): coords 0.5, 1.5.
        let t = Resize {
            extrapolation_value: 9.0,
            ..lin(CoordMode::TfCropAndResize)
        };
        let roi = scales(&[0., 0.5, 1., 1.5]);
        let y = t
            .eval(&[Some(&x), Some(&roi), None, Some(&sizes(&[1, 2]))])
            .unwrap();
        assert_close(&y[0], &[2., 9.], 1e-7);
    }

    #[test]
    fn cubic_and_aspect() {
        // Cubic weights at ratio 0.5 with A = -0.75: [-0.09375, 0.59375, 0.59375, -0.09375].
        let x = f32t(&[4], &[0., 0., 1., 0.]);
        let c = Resize {
            mode: ResizeMode::Cubic,
            coordinate_transformation_mode: CoordMode::Asymmetric,
            ..Default::default()
        };
        let y = c
            .eval(&[Some(&x), None, Some(&scales(&[2.0])), None])
            .unwrap();
        // Output 3 sits at 1.5: taps 0..3 -> weight of index 2 is 0.59375.
        assert!((y[0].to_f64_vec()[3] - 0.59375).abs() < 1e-6);
        let x = f32t(&[1, 1, 2, 4], &[0.; 8]);
        let k = Resize {
            axes: Some(vec![2, 3]),
            keep_aspect_ratio_policy: KeepAspectRatio::NotLarger,
            ..Default::default()
        };
        let y = k
            .eval(&[Some(&x), None, None, Some(&sizes(&[1, 3]))])
            .unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 1, 2]);
        assert!(Resize::default()
            .eval(&[Some(&x), None, None, None])
            .is_err());
    }
}
