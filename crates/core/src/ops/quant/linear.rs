//! QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked) and DynamicQuantizeLinear.

use super::{int_range, QUANTIZED};
use crate::op::{input, normalize_axis, optional, output, required, Prototype};
use crate::{
    lowp, op_bail, op_common, op_ensure, DType, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor,
    TensorInfo,
};

/// How a scale (and zero point) maps onto the elements of the data tensor.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Layout {
    /// Extent of the data before the axis, along it, and after it.
    axis_len: usize,
    inner: usize,
    kind: LayoutKind,
}

#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
enum LayoutKind {
    PerTensor,
    PerAxis,
    /// Blocks of `block` along the axis; the scale has `blocks` entries on that axis.
    Blocked {
        block: usize,
        blocks: usize,
    },
}

impl Layout {
    /// Checks a scale of shape `s` against data of shape `x`.
    fn new(x: &[usize], s: &[usize], axis: i64, block_size: i64, what: &str) -> OpResult<Layout> {
        let numel: usize = s.iter().product();
        if numel == 1 && block_size <= 0 {
            return Ok(Layout {
                axis_len: 1,
                inner: 1,
                kind: LayoutKind::PerTensor,
            });
        }
        let a = normalize_axis(axis, x.len())?;
        let axis_len = x[a];
        let inner: usize = x[a + 1..].iter().product();
        if block_size <= 0 {
            op_ensure!(
                s.len() == 1 && s[0] == axis_len,
                "{what} of shape {s:?} must be a scalar or 1-D with {axis_len} elements (axis {a} of {x:?})"
            );
            return Ok(Layout {
                axis_len,
                inner,
                kind: LayoutKind::PerAxis,
            });
        }
        let block = block_size as usize;
        let blocks = axis_len.div_ceil(block);
        let ok = s.len() == x.len()
            && s.iter()
                .zip(x)
                .enumerate()
                .all(|(i, (&sd, &xd))| if i == a { sd == blocks } else { sd == xd });
        op_ensure!(
            ok,
            "{what} of shape {s:?} does not match blocks of {block} along axis {a} of {x:?}"
        );
        Ok(Layout {
            axis_len,
            inner,
            kind: LayoutKind::Blocked { block, blocks },
        })
    }

    /// Index into the scale for data element `i`.
    fn index(&self, i: usize) -> usize {
        match self.kind {
            LayoutKind::PerTensor => 0,
            LayoutKind::PerAxis => (i / self.inner) % self.axis_len,
            LayoutKind::Blocked { block, blocks } => {
                let inner = i % self.inner;
                let a = (i / self.inner) % self.axis_len;
                let outer = i / (self.inner * self.axis_len);
                (outer * blocks + a / block) * self.inner + inner
            }
        }
    }
}

/// Rounds `v` to the precision of float dtype `d` (numpy computes in the input's dtype).
fn round_to(d: DType, v: f64) -> f64 {
    crate::dispatch_float!(d, T => { T::from_f64(v).to_f64() }, v)
}

/// ONNX QuantizeLinear: `y = saturate(round(x / scale) + zero_point)`; to float8, a
/// (saturating) cast of `x / scale`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QuantizeLinear {
    pub axis: i64,
    /// 0: per tensor or per axis; otherwise the block size along `axis`.
    pub block_size: i64,
    /// The output type when there is no zero point (default u8).
    pub output_dtype: Option<DType>,
    pub saturate: bool,
}

impl Default for QuantizeLinear {
    fn default() -> Self {
        QuantizeLinear {
            axis: 1,
            block_size: 0,
            output_dtype: None,
            saturate: true,
        }
    }
}

impl QuantizeLinear {
    fn out_dtype(&self, zp: Option<DType>) -> OpResult<DType> {
        let d = match (zp, self.output_dtype) {
            (Some(z), Some(o)) if z != o => {
                op_bail!("input 2 (y_zero_point) is {z} but output_dtype is {o}")
            }
            (Some(z), _) => z,
            (None, Some(o)) => o,
            (None, None) => DType::U8,
        };
        op_ensure!(
            QUANTIZED.contains(d),
            "output type {d} is not a quantized type, expected one of {QUANTIZED}"
        );
        Ok(d)
    }
}

impl Op for QuantizeLinear {
    fn pointwise(&self) -> bool {
        true
    }

    op_common!(
        "QuantizeLinear",
        Prototype {
            inputs: &[
                input("x", DTypeSet::FLOAT.union(DTypeSet::of(DType::I32))),
                input("y_scale", DTypeSet::FLOAT),
                optional("y_zero_point", QUANTIZED),
            ],
            outputs: &[output("y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.shape(0)?;
        Layout::new(
            x,
            ctx.shape(1)?,
            self.axis,
            self.block_size,
            "input 1 (y_scale)",
        )?;
        let zp = if ctx.has(2) {
            let s = ctx.shape(2)?;
            op_ensure!(
                s == ctx.shape(1)? || s.iter().product::<usize>() == 1,
                "input 2 (y_zero_point) shape {s:?} differs from input 1 (y_scale) {:?}",
                ctx.shape(1)?
            );
            Some(ctx.dtype(2)?)
        } else {
            None
        };
        Ok(vec![TensorInfo::new(self.out_dtype(zp)?, x)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let scale = required(inputs, 1)?;
        let zp = inputs.get(2).copied().flatten();
        let to = self.out_dtype(zp.map(|z| z.dtype()))?;
        let layout = Layout::new(
            x.shape(),
            scale.shape(),
            self.axis,
            self.block_size,
            "input 1 (y_scale)",
        )?;
        let zl = match zp {
            Some(z) => Some(Layout::new(
                x.shape(),
                z.shape(),
                self.axis,
                self.block_size,
                "input 2 (y_zero_point)",
            )?),
            None => None,
        };
        let sv = scale.to_f64_vec();
        let zv = zp.map(|z| z.to_f64_vec());
        // numpy divides in the dtype of x (f32 for integer x).
        let calc = if x.dtype().is_float() {
            x.dtype()
        } else {
            DType::F32
        };
        let xv = x.to_f64_vec();
        let q: Vec<f64> = xv
            .iter()
            .enumerate()
            .map(|(i, &v)| round_to(calc, v / sv[layout.index(i)]))
            .collect();
        let zero = |i: usize| match (&zv, &zl) {
            (Some(z), Some(l)) => z[l.index(i)],
            _ => 0.0,
        };
        let mut out = Tensor::zeros(to, x.shape())?;
        if let Some((lo, hi)) = int_range(to) {
            crate::dispatch_all!(to, T => {
                for (i, (o, &v)) in out.as_mut_slice::<T>()?.iter_mut().zip(&q).enumerate() {
                    let r = (v.round_ties_even() + zero(i)).clamp(lo, hi);
                    *o = T::from_i64(if r.is_nan() { 0 } else { r as i64 });
                }
            });
        } else if to == DType::F4E2M1 {
            let o = out.as_mut_slice::<lowp::F4E2M1>()?;
            for (i, (o, &v)) in o.iter_mut().zip(&q).enumerate() {
                *o = lowp::F4E2M1::from_f64(round_to(calc, v + zero(i)));
            }
        } else {
            // Float8: the zero point is zero by definition and ignored.
            let t = Tensor::from_vec(x.shape(), q)?;
            out = crate::ops::elementwise::cast::cast_with(
                &t,
                to,
                self.saturate,
                lowp::E8M0Round::Up,
            )?;
        }
        Ok(vec![out])
    }
}

/// ONNX DequantizeLinear: `y = (x - zero_point) * scale`, computed in f32.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DequantizeLinear {
    pub axis: i64,
    pub block_size: i64,
    /// The output type (default: the scale's type).
    pub output_dtype: Option<DType>,
}

impl Default for DequantizeLinear {
    fn default() -> Self {
        DequantizeLinear {
            axis: 1,
            block_size: 0,
            output_dtype: None,
        }
    }
}

impl Op for DequantizeLinear {
    fn pointwise(&self) -> bool {
        true
    }

    op_common!(
        "DequantizeLinear",
        Prototype {
            inputs: &[
                input("x", QUANTIZED.union(DTypeSet::of(DType::I32))),
                input("x_scale", DTypeSet::FLOAT),
                optional("x_zero_point", QUANTIZED.union(DTypeSet::of(DType::I32))),
            ],
            outputs: &[output("y")],
            value_inputs: &[],
        }
    );

    /// Not folded by shape inference: the `quantize` pass reads the 8-bit constants behind
    /// it, and folds what stays float itself.
    fn is_foldable(&self) -> bool {
        false
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.shape(0)?;
        Layout::new(
            x,
            ctx.shape(1)?,
            self.axis,
            self.block_size,
            "input 1 (x_scale)",
        )?;
        if ctx.has(2) {
            op_ensure!(
                ctx.dtype(2)? == ctx.dtype(0)?,
                "input 2 (x_zero_point) is {}, expected {} like input 0",
                ctx.dtype(2)?,
                ctx.dtype(0)?
            );
            Layout::new(
                x,
                ctx.shape(2)?,
                self.axis,
                self.block_size,
                "input 2 (x_zero_point)",
            )?;
        }
        let to = self.output_dtype.unwrap_or(ctx.dtype(1)?);
        op_ensure!(to.is_float(), "output_dtype {to} is not a float type");
        Ok(vec![TensorInfo::new(to, x)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let scale = required(inputs, 1)?;
        let to = self.output_dtype.unwrap_or(scale.dtype());
        op_ensure!(to.is_float(), "output_dtype {to} is not a float type");
        let layout = Layout::new(
            x.shape(),
            scale.shape(),
            self.axis,
            self.block_size,
            "input 1 (x_scale)",
        )?;
        let sv = scale.to_f64_vec();
        // Float types have no zero point (float8 requires it to be zero; float4 ignores it).
        let zp = inputs
            .get(2)
            .copied()
            .flatten()
            .filter(|_| !x.dtype().is_minifloat());
        let zero = match zp {
            Some(z) => Some((
                Layout::new(
                    x.shape(),
                    z.shape(),
                    self.axis,
                    self.block_size,
                    "input 2 (x_zero_point)",
                )?,
                z.to_f64_vec(),
            )),
            None => None,
        };
        let xv = x.to_f64_vec();
        let y: Vec<f64> = xv
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let z = zero.as_ref().map_or(0.0, |(l, z)| z[l.index(i)]);
                let d = (v - z) as f32 as f64;
                (d * sv[layout.index(i)]) as f32 as f64
            })
            .collect();
        let mut out = Tensor::zeros(to, x.shape())?;
        crate::dispatch_float!(to, T => {
            for (o, &v) in out.as_mut_slice::<T>()?.iter_mut().zip(&y) {
                *o = T::from_f64(v);
            }
        }, op_bail!("output_dtype {to} is not a float type"));
        Ok(vec![out])
    }
}

/// ONNX DynamicQuantizeLinear: u8 quantization with scale and zero point from the data range
/// (which always includes 0). Computed in f32 like the reference.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DynamicQuantizeLinear;

impl Op for DynamicQuantizeLinear {
    op_common!(
        "DynamicQuantizeLinear",
        Prototype {
            inputs: &[input("x", DTypeSet::of(DType::F32))],
            outputs: &[output("y"), output("y_scale"), output("y_zero_point")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![
            TensorInfo::new(DType::U8, ctx.shape(0)?),
            TensorInfo::new(DType::F32, []),
            TensorInfo::new(DType::U8, []),
        ])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let xs = x.as_slice::<f32>()?;
        let maxx = xs.iter().copied().fold(0f32, f32::max);
        let minx = xs.iter().copied().fold(0f32, f32::min);
        let range = if maxx == minx { 1.0 } else { maxx - minx };
        let scale = range / 255.0;
        let zp = (0.0 - minx / scale).clamp(0.0, 255.0).round_ties_even();
        let y: Vec<u8> = xs
            .iter()
            .map(|&v| ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8)
            .collect();
        Ok(vec![
            Tensor::from_vec(x.shape(), y)?,
            Tensor::scalar(scale),
            Tensor::scalar(zp as u8),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::testutil::{f32s, run};

    #[test]
    fn quantize_per_tensor_and_axis() {
        let x = f32s(&[6], &[0.0, 2.0, 3.0, 1000.0, -254.0, -1000.0]);
        let s = f32s(&[], &[2.0]);
        let z = Tensor::scalar(128u8);
        let y = run(&QuantizeLinear::default(), &[Some(&x), Some(&s), Some(&z)]).remove(0);
        // 3/2 = 1.5 rounds to even 2; saturates at 255 and 0.
        assert_eq!(y.as_slice::<u8>().unwrap(), &[128, 129, 130, 255, 1, 0]);
        let y = run(&QuantizeLinear::default(), &[Some(&x), Some(&s)]).remove(0);
        assert_eq!(y.as_slice::<u8>().unwrap(), &[0, 1, 2, 255, 0, 0]);

        let x = f32s(&[1, 2, 2], &[1.0, 2.0, 1.0, 2.0]);
        let s = f32s(&[2], &[1.0, 0.5]);
        let z = Tensor::from_vec(&[2], vec![0i8, -1]).unwrap();
        let y = run(&QuantizeLinear::default(), &[Some(&x), Some(&s), Some(&z)]).remove(0);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[1, 2, 1, 3]);
    }

    #[test]
    fn quantize_blocked_int4_float8() {
        // Blocks of 2 along axis 1 of a [1, 3] tensor: scales [1, 2].
        let x = f32s(&[1, 3], &[3.0, -20.0, 5.0]);
        let s = f32s(&[1, 2], &[1.0, 2.0]);
        let q = QuantizeLinear {
            block_size: 2,
            output_dtype: Some(DType::I4),
            ..Default::default()
        };
        let y = run(&q, &[Some(&x), Some(&s)]).remove(0);
        assert_eq!(y.dtype(), DType::I4);
        assert_eq!(y.to_i64_vec(), [3, -8, 2]);
        let z = Tensor::scalar(lowp::F8E4M3FN(0));
        let x = f32s(&[3], &[0.5, 1000.0, -3.0]);
        let s = f32s(&[], &[0.5]);
        let y = run(&QuantizeLinear::default(), &[Some(&x), Some(&s), Some(&z)]).remove(0);
        assert_eq!(y.to_f64_vec(), [1.0, 448.0, -6.0]);
    }

    #[test]
    fn dequantize() {
        let x = Tensor::from_vec(&[4], vec![0u8, 3, 128, 255]).unwrap();
        let s = f32s(&[], &[2.0]);
        let z = Tensor::scalar(128u8);
        let y = run(
            &DequantizeLinear::default(),
            &[Some(&x), Some(&s), Some(&z)],
        )
        .remove(0);
        assert_eq!(y.to_f64_vec(), [-256.0, -250.0, 0.0, 254.0]);
        let x = Tensor::from_vec(
            &[2, 2],
            vec![lowp::I4(-8), lowp::I4(7), lowp::I4(1), lowp::I4(2)],
        )
        .unwrap();
        let s = f32s(&[2], &[1.0, 0.5]);
        let d = DequantizeLinear {
            axis: 0,
            output_dtype: Some(DType::F16),
            ..Default::default()
        };
        let y = run(&d, &[Some(&x), Some(&s)]).remove(0);
        assert_eq!(y.dtype(), DType::F16);
        assert_eq!(y.to_f64_vec(), [-8.0, 7.0, 0.5, 1.0]);
    }

    #[test]
    fn dynamic() {
        let x = f32s(&[3], &[0.0, 2.0, -0.55]);
        let out = run(&DynamicQuantizeLinear, &[Some(&x)]);
        let scale = (2.0f32 - -0.55f32) / 255.0;
        assert_eq!(out[1].as_slice::<f32>().unwrap(), &[scale]);
        assert_eq!(out[2].as_slice::<u8>().unwrap(), &[55]);
        assert_eq!(out[0].as_slice::<u8>().unwrap(), &[55, 255, 0]);
    }
}
