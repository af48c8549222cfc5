//! QLinearGlobalAveragePool, QLinearAveragePool (channels first or last) and QLinearSoftmax.

use super::{check_qparams, requantize, round_plus, what, QParams, UNARY_INPUTS};
use crate::op::{output, required, Prototype};
use crate::ops::nn::pool::{Pool, PoolKind};
use crate::ops::nn::softmax::{Softmax, SoftmaxKind};
use crate::{op_common, op_ensure, DType, InferCtx, InferInput, Op, OpResult, Tensor, TensorInfo};

/// Checks the pairs of the one-operand ops and that X has rank >= 3.
fn check_pool_input(op: &dyn Op, ctx: &InferCtx) -> OpResult<()> {
    check_qparams(op, ctx, 1, 2, 0)?;
    check_qparams(op, ctx, 3, 4, 0)?;
    let x = ctx.shape(0)?;
    op_ensure!(
        x.len() >= 3,
        "{} must have rank >= 3 (batch, channels and spatial axes), got shape {x:?}",
        what(op, 0)
    );
    Ok(())
}

/// `[N, D1.., C]` to `[N, C, D1..]` (`to_first`) or back, as a permutation of element indices:
/// element `i` of the result comes from element `perm[i]` of the source.
fn channel_permutation(shape_first: &[usize], to_first: bool) -> Vec<usize> {
    let (n, c) = (shape_first[0], shape_first[1]);
    let image: usize = shape_first[2..].iter().product();
    let mut perm = Vec::with_capacity(n * c * image);
    if to_first {
        for b in 0..n {
            for ch in 0..c {
                perm.extend((0..image).map(|s| (b * image + s) * c + ch));
            }
        }
    } else {
        for b in 0..n {
            for s in 0..image {
                perm.extend((0..c).map(|ch| (b * c + ch) * image + s));
            }
        }
    }
    perm
}

/// `[N, D1.., C]` as `[N, C, D1..]`.
fn to_channels_first(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![shape[0], shape[shape.len() - 1]];
    s.extend_from_slice(&shape[1..shape.len() - 1]);
    s
}

/// `[N, C, D1..]` as `[N, D1.., C]`.
fn to_channels_last(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![shape[0]];
    s.extend_from_slice(&shape[2..]);
    s.push(shape[1]);
    s
}

/// com.microsoft QLinearGlobalAveragePool: the mean of each channel over the spatial axes,
/// requantized. Like onnxruntime, the integer sum is scaled once by
/// `x_scale / (y_scale * image_size)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QLinearGlobalAveragePool {
    /// `[N, D1.., C]` instead of `[N, C, D1..]`.
    pub channels_last: bool,
}

impl QLinearGlobalAveragePool {
    fn out_shape(&self, x: &[usize]) -> Vec<usize> {
        let mut s = x.to_vec();
        let spatial = if self.channels_last {
            1..x.len() - 1
        } else {
            2..x.len()
        };
        s[spatial].fill(1);
        s
    }
}

impl Op for QLinearGlobalAveragePool {
    op_common!(
        "QLinearGlobalAveragePool",
        Prototype {
            inputs: UNARY_INPUTS,
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        check_pool_input(self, ctx)?;
        Ok(vec![TensorInfo::new(
            ctx.dtype(0)?,
            self.out_shape(ctx.shape(0)?),
        )])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let shape = x.shape();
        op_ensure!(
            shape.len() >= 3,
            "{} must have rank >= 3 (batch, channels and spatial axes), got shape {shape:?}",
            what(self, 0)
        );
        let xq = QParams::read(self, inputs, 1, 2)?;
        let yq = QParams::read(self, inputs, 3, 4)?;
        let first = if self.channels_last {
            to_channels_first(shape)
        } else {
            shape.to_vec()
        };
        let (n, c) = (first[0], first[1]);
        let image: usize = first[2..].iter().product();
        let xv = x.to_i64_vec();
        let scale = xq.scale / (yq.scale * image as f32);
        let mut vals = Vec::with_capacity(n * c);
        for b in 0..n {
            for ch in 0..c {
                let sum: i64 = (0..image)
                    .map(|s| {
                        xv[if self.channels_last {
                            (b * image + s) * c + ch
                        } else {
                            (b * c + ch) * image + s
                        }]
                    })
                    .sum();
                let acc = sum - xq.zero * image as i64;
                vals.push(round_plus(acc as f32 * scale, yq.zero));
            }
        }
        // One value per (batch, channel) is in the output's order in both layouts.
        Ok(vec![requantize(
            x.dtype(),
            &self.out_shape(shape),
            false,
            vals.into_iter(),
        )?])
    }
}

/// com.microsoft QLinearAveragePool: `quantize(AveragePool(dequantize(X)))`, the pooling in
/// f32. `pool` gives the window (its `kind` must be `Average`, without indices).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QLinearAveragePool {
    pub pool: Pool,
    /// `[N, D1.., C]` instead of `[N, C, D1..]`.
    pub channels_last: bool,
}

impl Default for QLinearAveragePool {
    fn default() -> Self {
        QLinearAveragePool {
            pool: Pool {
                kind: PoolKind::Average,
                ..Pool::default()
            },
            channels_last: false,
        }
    }
}

impl QLinearAveragePool {
    /// The output shape, in the input's layout.
    fn out_shape(&self, x: &[usize]) -> OpResult<Vec<usize>> {
        op_ensure!(
            self.pool.kind == PoolKind::Average && !self.pool.with_indices,
            "the window must be an average pool without indices, got {:?}",
            self.pool.kind
        );
        let first = if self.channels_last {
            to_channels_first(x)
        } else {
            x.to_vec()
        };
        let mut out = first[..2].to_vec();
        out.extend(self.pool.geometry(&first)?.iter().map(|g| g.output));
        Ok(if self.channels_last {
            to_channels_last(&out)
        } else {
            out
        })
    }
}

impl Op for QLinearAveragePool {
    op_common!(
        "QLinearAveragePool",
        Prototype {
            inputs: UNARY_INPUTS,
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        check_pool_input(self, ctx)?;
        Ok(vec![TensorInfo::new(
            ctx.dtype(0)?,
            self.out_shape(ctx.shape(0)?)?,
        )])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        op_ensure!(
            x.rank() >= 3,
            "{} must have rank >= 3 (batch, channels and spatial axes), got shape {:?}",
            what(self, 0),
            x.shape()
        );
        let out_shape = self.out_shape(x.shape())?;
        let xq = QParams::read(self, inputs, 1, 2)?;
        let yq = QParams::read(self, inputs, 3, 4)?;
        let mut real: Vec<f32> = x.to_i64_vec().iter().map(|&q| xq.dequantize(q)).collect();
        let mut first = x.shape().to_vec();
        if self.channels_last {
            first = to_channels_first(x.shape());
            real = channel_permutation(&first, true)
                .iter()
                .map(|&i| real[i])
                .collect();
        }
        let pooled = self.pool.eval(&[Some(&Tensor::from_vec(&first, real)?)])?;
        let mut y = pooled[0].as_slice::<f32>()?.to_vec();
        if self.channels_last {
            y = channel_permutation(pooled[0].shape(), false)
                .iter()
                .map(|&i| y[i])
                .collect();
        }
        let vals = y.iter().map(|&v| yq.quantize(v));
        Ok(vec![requantize(x.dtype(), &out_shape, false, vals)?])
    }
}

/// com.microsoft QLinearSoftmax: `quantize(Softmax(dequantize(X)))`. `legacy_2d` is the
/// softmax of opset < 13 (the input coerced to 2-D at `axis`), as the node's `opset`
/// attribute says.
///
/// onnxruntime computes it from a lookup table of exponentials and multiplies by the reciprocal
/// of the output scale floored to an integer; with the output scale 1/256 its quantizer writes,
/// the two agree (checked on random inputs), with other scales they can differ by a step.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QLinearSoftmax {
    pub axis: i64,
    pub legacy_2d: bool,
}

impl Default for QLinearSoftmax {
    fn default() -> Self {
        QLinearSoftmax {
            axis: -1,
            legacy_2d: false,
        }
    }
}

impl QLinearSoftmax {
    fn softmax(&self) -> Softmax {
        Softmax {
            kind: SoftmaxKind::Softmax,
            axis: self.axis,
            legacy_2d: self.legacy_2d,
        }
    }
}

impl Op for QLinearSoftmax {
    op_common!(
        "QLinearSoftmax",
        Prototype {
            inputs: UNARY_INPUTS,
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        check_qparams(self, ctx, 1, 2, 0)?;
        check_qparams(self, ctx, 3, 4, 0)?;
        // The float softmax checks the axis.
        self.softmax().infer(&InferCtx {
            inputs: &[Some(InferInput {
                dtype: DType::F32,
                shape: ctx.shape(0)?,
                value: None,
            })],
        })?;
        Ok(vec![ctx.like(0)?])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let xq = QParams::read(self, inputs, 1, 2)?;
        let yq = QParams::read(self, inputs, 3, 4)?;
        let real: Vec<f32> = x.to_i64_vec().iter().map(|&q| xq.dequantize(q)).collect();
        let p = self
            .softmax()
            .eval(&[Some(&Tensor::from_vec(x.shape(), real)?)])?;
        let vals = p[0].as_slice::<f32>()?.iter().map(|&v| yq.quantize(v));
        Ok(vec![requantize(x.dtype(), x.shape(), false, vals)?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{f, i8s, u8s};
    use super::*;
    use crate::ops::elementwise::testutil::run;

    #[test]
    fn global_average_pool_u8() {
        // Two channels of 4: sums 0 + 255 * 3 = 765 and 4 * 10 = 40, zero point 10.
        // (765 - 40) * 0.5 / (1 * 4) = 90.625 -> 91 + 5; (40 - 40) -> 0 + 5.
        let x = u8s(&[1, 2, 2, 2], &[0, 255, 255, 255, 10, 10, 10, 10]);
        let args = [
            Some(&f(0.5)),
            Some(&Tensor::scalar(10u8)),
            Some(&f(1.0)),
            Some(&Tensor::scalar(5u8)),
        ];
        let mut inputs = vec![Some(&x)];
        inputs.extend(args);
        let y = run(&QLinearGlobalAveragePool::default(), &inputs).remove(0);
        assert_eq!(y.shape(), &[1, 2, 1, 1]);
        assert_eq!(y.as_slice::<u8>().unwrap(), &[96, 5]);
        // Channels last: the same data is 4 pixels of 2 channels.
        let op = QLinearGlobalAveragePool {
            channels_last: true,
        };
        let x = u8s(&[1, 2, 2, 2], &[0, 10, 255, 10, 255, 10, 255, 10]);
        inputs[0] = Some(&x);
        let y = run(&op, &inputs).remove(0);
        assert_eq!(y.shape(), &[1, 1, 1, 2]);
        assert_eq!(y.as_slice::<u8>().unwrap(), &[96, 5]);
    }

    #[test]
    fn global_average_pool_i8_ties_and_saturation() {
        // Means 0.5 -> 0 and 1.5 -> 2 (ties to even); -128 * 4 saturates at -128.
        let x = i8s(&[3, 1, 1, 2], &[0, 1, 1, 2, -128, -128]);
        let y = run(
            &QLinearGlobalAveragePool::default(),
            &[Some(&x), Some(&f(1.0)), None, Some(&f(0.25)), None],
        )
        .remove(0);
        // 0.5 / 0.25 = 2; 1.5 / 0.25 = 6; -128 / 0.25 -> -128.
        assert_eq!(y.as_slice::<i8>().unwrap(), &[2, 6, -128]);
        let y = run(
            &QLinearGlobalAveragePool::default(),
            &[Some(&x), Some(&f(1.0)), None, Some(&f(1.0)), None],
        )
        .remove(0);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[0, 2, -128]);
        let e = QLinearGlobalAveragePool::default()
            .eval(&[
                Some(&i8s(&[2, 1], &[1, 2])),
                Some(&f(1.0)),
                None,
                Some(&f(1.0)),
            ])
            .unwrap_err();
        assert!(e.0.contains("rank >= 3"), "{e}");
    }

    #[test]
    fn average_pool() {
        let op = QLinearAveragePool {
            pool: Pool {
                kind: PoolKind::Average,
                kernel_shape: vec![2],
                strides: vec![2],
                ..Pool::default()
            },
            channels_last: false,
        };
        // x = q - 128 over 1 x 1 x 6: means of (0, 1), (127, 127), (-128, -127) -> 0.5, 127,
        // -127.5; on the output (scale 1, zp 128): 128.5 -> 128 and 0.5 -> 0 (ties to even), 255.
        let x = u8s(&[1, 1, 6], &[128, 129, 255, 255, 0, 1]);
        let q = [
            Some(&f(1.0)),
            Some(&Tensor::scalar(128u8)),
            Some(&f(1.0)),
            Some(&Tensor::scalar(128u8)),
        ];
        let mut inputs = vec![Some(&x)];
        inputs.extend(q);
        let y = run(&op, &inputs).remove(0);
        assert_eq!(y.shape(), &[1, 1, 3]);
        assert_eq!(y.as_slice::<u8>().unwrap(), &[128, 255, 0]);
        // i8 channels last, two channels of 2 x 2 averaged over a 2 x 2 window.
        let op = QLinearAveragePool {
            pool: Pool {
                kind: PoolKind::Average,
                kernel_shape: vec![2, 2],
                ..Pool::default()
            },
            channels_last: true,
        };
        let x = i8s(&[1, 2, 2, 2], &[1, -128, 2, -128, 3, -128, 4, -127]);
        let y = run(&op, &[Some(&x), Some(&f(1.0)), None, Some(&f(1.0)), None]).remove(0);
        assert_eq!(y.shape(), &[1, 1, 1, 2]);
        // 2.5 -> 2; -127.75 -> -128.
        assert_eq!(y.as_slice::<i8>().unwrap(), &[2, -128]);
    }

    #[test]
    fn softmax() {
        // Two equal logits: 0.5 each; on scale 1/256 that is 128 (u8); 128 - 128 = 0 (i8).
        // [0, ln 3]: 0.25, 0.75 -> 64, 192.
        let x = u8s(&[2, 2], &[7, 7, 0, 255]);
        let ln3 = 3f32.ln() / 255.0;
        let y = run(
            &QLinearSoftmax::default(),
            &[Some(&x), Some(&f(ln3)), None, Some(&f(1.0 / 256.0)), None],
        )
        .remove(0);
        assert_eq!(y.as_slice::<u8>().unwrap(), &[128, 128, 64, 192]);
        // One certain class: 1.0 / (1/256) = 256 saturates at 255 (u8) and 127 (i8).
        let x = i8s(&[1, 3], &[-128, 127, -128]);
        let y = run(
            &QLinearSoftmax {
                axis: 1,
                legacy_2d: true,
            },
            &[
                Some(&x),
                Some(&f(1.0)),
                None,
                Some(&f(1.0 / 256.0)),
                Some(&Tensor::scalar(-128i8)),
            ],
        )
        .remove(0);
        assert_eq!(y.as_slice::<i8>().unwrap(), &[-128, 127, -128]);
        let e = QLinearSoftmax {
            axis: 2,
            legacy_2d: false,
        }
        .infer(&InferCtx {
            inputs: &[
                Some(InferInput {
                    dtype: DType::U8,
                    shape: &[2, 2],
                    value: None,
                }),
                Some(InferInput {
                    dtype: DType::F32,
                    shape: &[],
                    value: None,
                }),
                None,
                Some(InferInput {
                    dtype: DType::F32,
                    shape: &[],
                    value: None,
                }),
                None,
            ],
        })
        .unwrap_err();
        assert!(e.0.contains("axis 2"), "{e}");
    }
}
