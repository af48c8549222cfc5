//! Pad: grow (or, with negative pads, crop) each axis, filling with a constant or by
//! reflecting, repeating the edge, or wrapping around.
//!
//! Before ONNX opset 11 the pads and the constant are attributes; from 11 they are inputs
//! (pads value-dependent), and opset 18 adds an `axes` input selecting which axes the pads
//! apply to.

use super::common::{numel_of, scalar_bytes};
use crate::op::{input, normalize_axes, optional, output, required, Prototype};
use crate::ops::util::{read_i64s, strides};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PadMode {
    #[default]
    Constant,
    Reflect,
    Edge,
    Wrap,
}

impl PadMode {
    pub fn parse(s: &str) -> Option<PadMode> {
        Some(match s {
            "constant" => PadMode::Constant,
            "reflect" => PadMode::Reflect,
            "edge" => PadMode::Edge,
            "wrap" => PadMode::Wrap,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pad {
    pub mode: PadMode,
    /// Pads as an attribute (`[begin..., end...]`); input 1 takes precedence.
    pub pads: Option<Vec<i64>>,
    /// The fill value as an attribute; input 2 takes precedence.
    pub value: f64,
}

impl Pad {
    /// Per axis (begin, end) pads for an input rank.
    pub fn per_axis(
        &self,
        rank: usize,
        pads: Option<Vec<i64>>,
        axes: Option<Vec<i64>>,
    ) -> OpResult<Vec<(i64, i64)>> {
        let Some(pads) = pads.or_else(|| self.pads.clone()) else {
            op_bail!("Pad needs pads (input 1 or attribute)");
        };
        let axes = match axes {
            Some(a) => normalize_axes(&a, rank)?,
            None => (0..rank).collect(),
        };
        let k = axes.len();
        if pads.len() != 2 * k {
            op_bail!(
                "pads {pads:?} has {} entries, expected {}",
                pads.len(),
                2 * k
            );
        }
        let mut out = vec![(0i64, 0i64); rank];
        for (j, &a) in axes.iter().enumerate() {
            out[a] = (pads[j], pads[j + k]);
        }
        Ok(out)
    }

    fn output_shape(input: &[usize], pads: &[(i64, i64)]) -> OpResult<Vec<usize>> {
        let mut out = Vec::with_capacity(input.len());
        for (&n, &(b, e)) in input.iter().zip(pads) {
            let v = n as i128 + b as i128 + e as i128;
            if v < 0 || v > usize::MAX as i128 {
                op_bail!("pads {pads:?} give an invalid size for input {input:?}");
            }
            out.push(v as usize);
        }
        numel_of(&out)?;
        Ok(out)
    }

    /// For each output index along one axis, the source index (or `None` for the constant).
    pub fn axis_map(&self, n: usize, b: i64, out_n: usize) -> OpResult<Vec<Option<usize>>> {
        // Negative pads crop first; positive pads then pad the cropped range.
        let (n_, b_, o_) = (n as i128, b as i128, out_n as i128);
        let e_ = o_ - n_ - b_;
        let crop_lo = (-b_).max(0);
        let pad_lo = b_.max(0);
        // The length left after cropping both ends.
        let m = (n_ - crop_lo - (-e_).max(0)).max(0);
        if m == 0 && out_n > 0 && self.mode != PadMode::Constant {
            op_bail!("cannot pad an empty axis in {:?} mode", self.mode);
        }
        let mut map = Vec::with_capacity(out_n);
        for i in 0..out_n as i128 {
            let j = i - pad_lo;
            let src = if (0..m).contains(&j) {
                Some(j)
            } else {
                match self.mode {
                    PadMode::Constant => None,
                    PadMode::Edge => Some(j.clamp(0, m - 1)),
                    PadMode::Wrap => Some(j.rem_euclid(m)),
                    PadMode::Reflect => {
                        if m == 1 {
                            Some(0)
                        } else {
                            let p = 2 * (m - 1);
                            let r = j.rem_euclid(p);
                            Some(if r >= m { p - r } else { r })
                        }
                    }
                }
            };
            map.push(src.map(|s| (s + crop_lo) as usize));
        }
        Ok(map)
    }

    fn run(&self, x: &Tensor, pads: &[(i64, i64)], fill: &[u8]) -> OpResult<Tensor> {
        let shape = Pad::output_shape(x.shape(), pads)?;
        // Allocate first: it bounds the output size before the per-axis maps are built.
        let mut out = Tensor::zeros(x.dtype(), &shape)?;
        if out.numel() == 0 {
            return Ok(out);
        }
        let maps = x
            .shape()
            .iter()
            .zip(pads)
            .zip(&shape)
            .map(|((&n, &(b, _)), &o)| self.axis_map(n, b, o))
            .collect::<OpResult<Vec<_>>>()?;
        let es = x.dtype().size();
        let st = strides(x.shape());
        let sb = x.bytes();
        let ob = out.bytes_mut();
        let rank = shape.len();
        let mut idx = vec![0usize; rank];
        for k in 0..numel_of(&shape)? {
            let mut off = Some(0usize);
            for d in 0..rank {
                off = match (off, maps[d].get(idx[d]).copied().flatten()) {
                    (Some(o), Some(s)) => Some(o + s * st[d]),
                    _ => None,
                };
            }
            let dst = &mut ob[k * es..(k + 1) * es];
            match off {
                Some(o) => dst.copy_from_slice(&sb[o * es..(o + 1) * es]),
                None => dst.copy_from_slice(fill),
            }
            for d in (0..rank).rev() {
                idx[d] += 1;
                if idx[d] < shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Ok(out)
    }
}

fn read_opt(t: Option<&Tensor>, what: &str) -> OpResult<Option<Vec<i64>>> {
    t.map(|t| read_i64s(t, what, 1 << 10)).transpose()
}

impl Op for Pad {
    op_common!(
        "Pad",
        Prototype {
            inputs: &[
                input("data", DTypeSet::ALL),
                optional("pads", DTypeSet::I64),
                optional("constant_value", DTypeSet::ALL),
                optional("axes", DTypeSet::INDEX),
            ],
            outputs: &[output("output")],
            value_inputs: &[1, 3],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let v = |i: usize| -> OpResult<Option<&Tensor>> {
            if ctx.has(i) {
                Ok(Some(ctx.value(i)?))
            } else {
                Ok(None)
            }
        };
        let dt = ctx.dtype(0)?;
        if ctx.has(2) && ctx.dtype(2)? != dt {
            op_bail!(
                "input 2 (constant_value) is {}, expected {dt}",
                ctx.dtype(2)?
            );
        }
        let s = ctx.shape(0)?;
        let pads = self.per_axis(
            s.len(),
            read_opt(v(1)?, "input 1 (pads)")?,
            read_opt(v(3)?, "input 3 (axes)")?,
        )?;
        Ok(vec![TensorInfo::new(dt, Pad::output_shape(s, &pads)?)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let get = |i: usize| inputs.get(i).copied().flatten();
        let pads = self.per_axis(
            x.rank(),
            read_opt(get(1), "input 1 (pads)")?,
            read_opt(get(3), "input 3 (axes)")?,
        )?;
        let fill = match get(2) {
            Some(c) => {
                if c.dtype() != x.dtype() || c.numel() != 1 {
                    op_bail!(
                        "input 2 (constant_value) must be one {} element, got {}{:?}",
                        x.dtype(),
                        c.dtype(),
                        c.shape()
                    );
                }
                c.bytes().to_vec()
            }
            None => scalar_bytes(x.dtype(), self.value)?,
        };
        Ok(vec![self.run(x, &pads, &fill)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pad(mode: PadMode, x: &Tensor, pads: &[i64]) -> OpResult<Tensor> {
        let p = Tensor::from_vec(&[pads.len()], pads.to_vec()).unwrap();
        Pad {
            mode,
            ..Default::default()
        }
        .eval(&[Some(x), Some(&p)])
        .map(|mut v| v.remove(0))
    }

    #[test]
    fn modes_1d() {
        let x = Tensor::from_vec(&[3], vec![1i32, 2, 3]).unwrap();
        let v = |m, p: &[i64]| pad(m, &x, p).unwrap().to_i64_vec();
        assert_eq!(v(PadMode::Constant, &[2, 1]), vec![0, 0, 1, 2, 3, 0]);
        assert_eq!(v(PadMode::Edge, &[2, 1]), vec![1, 1, 1, 2, 3, 3]);
        assert_eq!(v(PadMode::Reflect, &[2, 1]), vec![3, 2, 1, 2, 3, 2]);
        assert_eq!(v(PadMode::Wrap, &[2, 1]), vec![2, 3, 1, 2, 3, 1]);
        // Reflecting further than the axis length keeps bouncing (numpy semantics).
        assert_eq!(v(PadMode::Reflect, &[5, 0]), vec![2, 1, 2, 3, 2, 1, 2, 3]);
        // Negative pads crop.
        assert_eq!(v(PadMode::Constant, &[-1, 1]), vec![2, 3, 0]);
        assert_eq!(v(PadMode::Edge, &[1, -1]), vec![1, 1, 2]);
        assert!(pad(PadMode::Constant, &x, &[-4, 0]).is_err());
        assert!(pad(PadMode::Constant, &x, &[1]).is_err());
        // Extreme pads must not overflow.
        let y = pad(PadMode::Constant, &x, &[i64::MIN, i64::MAX]).unwrap();
        assert_eq!(y.to_i64_vec(), vec![0, 0]);
        assert!(pad(PadMode::Edge, &x, &[i64::MIN, i64::MAX]).is_err());
        assert!(pad(PadMode::Constant, &x, &[i64::MAX, i64::MAX]).is_err());
    }

    #[test]
    fn constant_value_and_axes() {
        let x = Tensor::from_vec(&[2, 2], vec![1.0f32, 2., 3., 4.]).unwrap();
        let p = Tensor::from_vec(&[2], vec![1i64, 1]).unwrap();
        let c = Tensor::scalar(9.0f32);
        let a = Tensor::from_vec(&[1], vec![-1i64]).unwrap();
        let y = Pad::default()
            .eval(&[Some(&x), Some(&p), Some(&c), Some(&a)])
            .unwrap();
        assert_eq!(y[0].shape(), &[2, 4]);
        assert_eq!(
            y[0].as_slice::<f32>().unwrap(),
            &[9., 1., 2., 9., 9., 3., 4., 9.]
        );
        // Attribute form (opset < 11).
        let attr = Pad {
            mode: PadMode::Constant,
            pads: Some(vec![0, 1, 1, 0]),
            value: 1.5,
        };
        let y = attr.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[3, 3]);
        assert_eq!(
            y[0].as_slice::<f32>().unwrap(),
            &[1.5, 1., 2., 1.5, 3., 4., 1.5, 1.5, 1.5]
        );
        let bad_c = Tensor::scalar(9i64);
        assert!(Pad::default()
            .eval(&[Some(&x), Some(&p), Some(&bad_c), Some(&a)])
            .is_err());
    }

    #[test]
    fn reflect_2d() {
        let x = Tensor::from_vec(&[3, 2], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
        let y = pad(PadMode::Reflect, &x, &[0, 2, 0, 0]).unwrap();
        assert_eq!(y.shape(), &[3, 4]);
        assert_eq!(y.to_i64_vec(), vec![1, 2, 1, 2, 3, 4, 3, 4, 5, 6, 5, 6]);
    }
}
