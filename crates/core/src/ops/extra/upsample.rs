//! Upsample (opsets 7-9, deprecated for Resize): each axis grows by a scale factor, sampling
//! the input at `out / scale` (asymmetric), by nearest (floor) or (multi)linear interpolation.
//! Opset 7 gives the scales as an attribute, opset 9 as an input.

use crate::op::{input, optional, output, required, Prototype};
use crate::ops::nn::tensor_from_f64;
use crate::ops::util::strides;
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Upsample {
    pub linear: bool,
    /// The opset-7 attribute; the `scales` input is used when this is `None`.
    pub scales: Option<Vec<f32>>,
}

impl Upsample {
    fn out_shape(&self, x: &[usize], scales: &[f32]) -> OpResult<Vec<usize>> {
        if scales.len() != x.len() || scales.iter().any(|&s| !(s.is_finite() && s >= 1.0)) {
            op_bail!("scales {scales:?} must be >= 1, one per axis of input 0 {x:?}");
        }
        x.iter()
            .zip(scales)
            .map(|(&d, &s)| {
                let v = (d as f64 * s as f64).floor();
                if v > (1u64 << 40) as f64 {
                    op_bail!("scale {s} makes dimension {d} too large");
                }
                Ok(v as usize)
            })
            .collect()
    }

    fn scales_of(&self, t: Option<&Tensor>) -> OpResult<Vec<f32>> {
        match (&self.scales, t) {
            (Some(s), _) => Ok(s.clone()),
            (None, Some(t)) => Ok(t.to_f64_vec().iter().map(|&v| v as f32).collect()),
            (None, None) => op_bail!("input 1 (scales) is missing"),
        }
    }
}

impl Op for Upsample {
    op_common!(
        "Upsample",
        Prototype {
            inputs: &[
                input("X", DTypeSet::ALL),
                optional("scales", DTypeSet::FLOAT)
            ],
            outputs: &[output("Y")],
            value_inputs: &[1],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let v = if ctx.has(1) {
            Some(ctx.value(1)?)
        } else {
            None
        };
        let s = self.out_shape(ctx.shape(0)?, &self.scales_of(v)?)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, s)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let scales = self.scales_of(inputs.get(1).copied().flatten())?;
        let xs = x.shape();
        let os = self.out_shape(xs, &scales)?;
        let (ist, ost) = (strides(xs), strides(&os));
        let xv = x.to_f64_vec();
        let n: usize = os.iter().product();
        let mut y = Vec::with_capacity(n);
        // Per axis: (low index, high index, weight of high).
        let mut taps = vec![(0usize, 0usize, 0.0f64); xs.len()];
        for o in 0..n {
            for ax in 0..xs.len() {
                let oi = (o / ost[ax]) % os[ax];
                let f = oi as f64 / scales[ax] as f64;
                let lo = (f.floor() as usize).min(xs[ax] - 1);
                taps[ax] = if self.linear {
                    (lo, (lo + 1).min(xs[ax] - 1), f - lo as f64)
                } else {
                    (lo, lo, 0.0)
                };
            }
            let mut acc = 0.0;
            for combo in 0..1usize << xs.len() {
                let mut w = 1.0;
                let mut at = 0;
                for (ax, &(lo, hi, t)) in taps.iter().enumerate() {
                    let high = combo >> ax & 1 == 1;
                    w *= if high { t } else { 1.0 - t };
                    at += if high { hi } else { lo } * ist[ax];
                }
                if w != 0.0 {
                    acc += w * xv[at];
                }
            }
            y.push(acc);
        }
        Ok(vec![tensor_from_f64(x.dtype(), &os, &y)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_and_linear() {
        let x = Tensor::from_slice(&[1, 2], &[1.0f32, 3.]).unwrap();
        let s = Tensor::from_slice(&[2], &[1.0f32, 2.]).unwrap();
        let y = Upsample::default().eval(&[Some(&x), Some(&s)]).unwrap();
        assert_eq!(y[0].to_f64_vec(), vec![1.0, 1.0, 3.0, 3.0]);
        let l = Upsample {
            linear: true,
            scales: Some(vec![1.0, 2.0]),
        };
        // Samples at 0, 0.5, 1, 1.5 (clamped to the last pixel).
        assert_eq!(
            l.eval(&[Some(&x)]).unwrap()[0].to_f64_vec(),
            vec![1.0, 2.0, 3.0, 3.0]
        );
    }
}
