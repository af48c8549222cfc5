//! Layouts other than the plain NCHW: blocked channels (NCHWc) and channels last (NHWC).
//!
//! A blocked tensor `[N, C/b, H, W, b]` holds the plain `[N, C, H, W]` with each run of `b`
//! channels interleaved per pixel, so one SIMD register holds one pixel of `b` channels: a
//! convolution then reads its input without packing it, and pooling or a depthwise convolution
//! works on whole registers. The block `b` is the backend's choice (the CPU's is in its kernel
//! table, per ISA); the ops here take any block, which a blocked tensor states as its last dim.
//! Only tensors whose channel count is a multiple of the block are blocked, so no padding
//! channels exist.
//!
//! [`ReorderNchwc`] converts between the layouts; [`Nchwc`] runs a plain op (Conv, MaxPool,
//! AveragePool, their global forms, BatchNormalization) on blocked tensors: its shape inference
//! and reference unblock the inputs, run the plain op and block the result, so its semantics are
//! the plain op's.

use super::shape::common::permute;
use crate::op::{input, output, required, Prototype};
use crate::registry::Layout;
use crate::{op_bail, op_ensure, DTypeSet, InferCtx, InferInput, Op, OpResult, Tensor, TensorInfo};
use std::sync::Arc;

/// The layout of an op inside an [`Nchwc`] wrapper: blocked channels.
pub const NCHWC: Layout = Layout("nchwc");
/// The layout of an op inside an [`Nhwc`] wrapper: channels last.
pub const NHWC: Layout = Layout("nhwc");

/// `[N, C, H, W]` -> `[N, C/b, H, W, b]` for the block `b`; `None` unless the shape is 4-D
/// with `C` a positive multiple of `b`.
pub fn blocked_shape(plain: &[usize], block: usize) -> Option<Vec<usize>> {
    match *plain {
        [n, c, h, w] if block > 0 && c % block == 0 && c > 0 => {
            Some(vec![n, c / block, h, w, block])
        }
        _ => None,
    }
}

/// `[N, C/b, H, W, b]` -> `[N, C, H, W]`, the block `b` being the last dim.
pub fn plain_shape(blocked: &[usize]) -> OpResult<Vec<usize>> {
    match *blocked {
        [n, cb, h, w, b] if b > 0 => match cb.checked_mul(b) {
            Some(c) => Ok(vec![n, c, h, w]),
            None => op_bail!("blocked shape {blocked:?} has too many channels"),
        },
        _ => op_bail!("a blocked (NCHWc) tensor must be [N, C/b, H, W, b], got shape {blocked:?}"),
    }
}

/// The block of a blocked shape (its last dim), checked against the `block` an op expects.
fn check_block(blocked: &[usize], block: usize) -> OpResult<()> {
    match blocked.last() {
        Some(&b) if b == block => Ok(()),
        _ => op_bail!("input 0 must be blocked by {block} channels, got shape {blocked:?}"),
    }
}

/// `[N, C, H, W]` -> blocked by `block`, with the error an op reports.
fn to_blocked_shape(plain: &[usize], block: usize) -> OpResult<Vec<usize>> {
    match blocked_shape(plain, block) {
        Some(s) => Ok(s),
        None => op_bail!(
            "[N, C, H, W] with C a positive multiple of the block {block} expected, got shape \
             {plain:?}"
        ),
    }
}

/// Moves every element between the layouts: `to_blocked` takes a plain tensor and blocks it by
/// `block`; otherwise `x` is blocked (by its last dim) and `block` is not read.
fn reorder(x: &Tensor, to_blocked: bool, block: usize) -> OpResult<Tensor> {
    let (plain, out_shape) = if to_blocked {
        (x.shape().to_vec(), to_blocked_shape(x.shape(), block)?)
    } else {
        let p = plain_shape(x.shape())?;
        (p.clone(), p)
    };
    let [n, c, h, w] = plain[..] else {
        unreachable!("plain shapes are 4-D")
    };
    let block = if to_blocked { block } else { x.shape()[4] };
    let hw = h * w;
    let xs = x.to_f64_vec();
    let mut ys = vec![0.0; xs.len()];
    for b in 0..n {
        for ch in 0..c {
            for p in 0..hw {
                let pi = (b * c + ch) * hw + p;
                let bi = ((b * (c / block) + ch / block) * hw + p) * block + ch % block;
                if to_blocked {
                    ys[bi] = xs[pi];
                } else {
                    ys[pi] = xs[bi];
                }
            }
        }
    }
    super::nn::tensor_from_f64(x.dtype(), &out_shape, &ys)
}

/// Plain `[N, C, H, W]` -> blocked by `block` channels (`ToNchwc`), or back (`FromNchwc`,
/// whose input states its block).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReorderNchwc {
    pub to_blocked: bool,
    pub block: usize,
}

static REORDER_PROTO: Prototype = Prototype {
    inputs: &[input("X", DTypeSet::FLOAT)],
    outputs: &[output("Y")],
    value_inputs: &[],
};

impl Op for ReorderNchwc {
    fn name(&self) -> &'static str {
        if self.to_blocked {
            "ToNchwc"
        } else {
            "FromNchwc"
        }
    }

    fn prototype(&self) -> &'static Prototype {
        &REORDER_PROTO
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.shape(0)?;
        let shape = if self.to_blocked {
            to_blocked_shape(x, self.block)?
        } else {
            check_block(x, self.block)?;
            plain_shape(x)?
        };
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        if !self.to_blocked {
            check_block(x.shape(), self.block)?;
        }
        Ok(vec![reorder(x, self.to_blocked, self.block)?])
    }
}

/// A plain op run on blocked tensors: input 0 is blocked when `blocked_input` (a Conv whose
/// channel count is not a multiple of the block reads its plain input), the other inputs
/// (weights, bias) are as the plain op takes them, and output 0 is blocked by `block` channels,
/// as a blocked input 0 is.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Nchwc {
    #[serde(with = "crate::ops::codec::arc_op")]
    pub inner: Arc<dyn Op>,
    pub blocked_input: bool,
    pub block: usize,
}

impl Nchwc {
    /// The plain shapes of the inputs, as the inner op sees them.
    fn plain_inputs<'a>(
        &self,
        inputs: &'a [Option<InferInput<'a>>],
        x_plain: &'a [usize],
    ) -> Vec<Option<InferInput<'a>>> {
        let mut v = inputs.to_vec();
        if let Some(Some(x)) = v.first_mut() {
            x.shape = x_plain;
            x.value = None;
        }
        v
    }
}

impl Op for Nchwc {
    fn name(&self) -> &'static str {
        match self.inner.name() {
            "Conv" => "NchwcConv",
            "MaxPool" => "NchwcMaxPool",
            "AveragePool" => "NchwcAveragePool",
            "GlobalAveragePool" => "NchwcGlobalAveragePool",
            "GlobalMaxPool" => "NchwcGlobalMaxPool",
            "BatchNormalization" => "NchwcBatchNormalization",
            _ => "Nchwc",
        }
    }

    fn prototype(&self) -> &'static Prototype {
        self.inner.prototype()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn wrapped(&self) -> Option<(Layout, &dyn Op)> {
        Some((NCHWC, self.inner.as_ref()))
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.shape(0)?;
        let x_plain = if self.blocked_input {
            check_block(x, self.block)?;
            plain_shape(x)?
        } else {
            x.to_vec()
        };
        let plain = self.plain_inputs(ctx.inputs, &x_plain);
        let outs = self.inner.infer(&InferCtx { inputs: &plain })?;
        op_ensure!(
            outs.len() == 1,
            "{} has {} outputs; only single-output ops run blocked",
            self.inner.name(),
            outs.len()
        );
        let y = &outs[0];
        let Some(shape) = blocked_shape(&y.shape, self.block) else {
            op_bail!(
                "output shape {:?} cannot be blocked (4-D with channels a multiple of {})",
                y.shape,
                self.block
            );
        };
        Ok(vec![TensorInfo::new(y.dtype, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let x_plain = if self.blocked_input {
            check_block(x.shape(), self.block)?;
            Some(reorder(x, false, self.block)?)
        } else {
            None
        };
        let mut plain: Vec<Option<&Tensor>> = inputs.to_vec();
        plain[0] = Some(x_plain.as_ref().unwrap_or(x));
        let ys = self.inner.eval(&plain)?;
        op_ensure!(ys.len() == 1, "only single-output ops run blocked");
        Ok(vec![reorder(&ys[0], true, self.block)?])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        let plain = |t: &TensorInfo| {
            plain_shape(&t.shape)
                .map(|s| TensorInfo::new(t.dtype, s))
                .unwrap_or_else(|_| t.clone())
        };
        let mut ins = inputs.to_vec();
        if self.blocked_input {
            if let Some(Some(x)) = ins.first_mut() {
                *x = plain(x);
            }
        }
        let outs: Vec<TensorInfo> = outputs.iter().map(plain).collect();
        self.inner.flops(&ins, &outs)
    }
}

/// `[N, C, H, W]` -> `[N, H, W, C]`, the axis order of a channels-last tensor.
pub const TO_NHWC: [usize; 4] = [0, 2, 3, 1];
/// `[N, H, W, C]` -> `[N, C, H, W]`.
pub const FROM_NHWC: [usize; 4] = [0, 3, 1, 2];

fn permuted(shape: &[usize], perm: &[usize; 4]) -> OpResult<Vec<usize>> {
    op_ensure!(
        shape.len() == 4,
        "a channels-last (NHWC) tensor must be 4-D, got shape {shape:?}"
    );
    Ok(perm.iter().map(|&a| shape[a]).collect())
}

/// A plain op run on channels-last tensors (`[N, H, W, C]`, made by the CPU's
/// `layout-nhwc-int8` pass): the inputs listed in `nhwc_inputs` and output 0 are channels-last,
/// the other inputs (scales, zero points, weights) as the plain op takes them. Channels last
/// keep one pixel's channels together, which is what an integer convolution reads as a GEMM
/// row without packing it and what a depthwise kernel vectorizes over. Shape inference and the
/// reference permute to the plain layout, run the plain op and permute back, so the semantics
/// are the plain op's.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Nhwc {
    #[serde(with = "crate::ops::codec::arc_op")]
    pub inner: Arc<dyn Op>,
    pub nhwc_inputs: Vec<usize>,
}

impl Op for Nhwc {
    fn name(&self) -> &'static str {
        match self.inner.name() {
            "QLinearConv" => "NhwcQLinearConv",
            "MaxPool" => "NhwcMaxPool",
            "QLinearGlobalAveragePool" => "NhwcQLinearGlobalAveragePool",
            "QLinearConcat" => "NhwcQLinearConcat",
            _ => "Nhwc",
        }
    }

    fn prototype(&self) -> &'static Prototype {
        self.inner.prototype()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn wrapped(&self) -> Option<(Layout, &dyn Op)> {
        Some((NHWC, self.inner.as_ref()))
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let mut shapes = Vec::new();
        for &i in &self.nhwc_inputs {
            shapes.push((i, permuted(ctx.shape(i)?, &FROM_NHWC)?));
        }
        let mut plain = ctx.inputs.to_vec();
        for (i, s) in &shapes {
            if let Some(Some(x)) = plain.get_mut(*i) {
                x.shape = s;
                x.value = None;
            }
        }
        let outs = self.inner.infer(&InferCtx { inputs: &plain })?;
        op_ensure!(
            !outs.is_empty(),
            "{} has no outputs to run channels-last",
            self.inner.name()
        );
        let mut outs = outs;
        outs[0].shape = permuted(&outs[0].shape, &TO_NHWC)?;
        Ok(outs)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let mut plain_values = Vec::new();
        for &i in &self.nhwc_inputs {
            let x = required(inputs, i)?;
            plain_values.push((i, permute(x, x.shape(), &FROM_NHWC)?));
        }
        let mut plain: Vec<Option<&Tensor>> = inputs.to_vec();
        for (i, t) in &plain_values {
            plain[*i] = Some(t);
        }
        let mut ys = self.inner.eval(&plain)?;
        op_ensure!(!ys.is_empty(), "{} gave no outputs", self.inner.name());
        let y = &ys[0];
        op_ensure!(
            y.rank() == 4,
            "output 0 of {} is not 4-D",
            self.inner.name()
        );
        ys[0] = permute(y, y.shape(), &TO_NHWC)?;
        Ok(ys)
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        let plain = |t: &TensorInfo| TensorInfo {
            shape: permuted(&t.shape, &FROM_NHWC).unwrap_or_else(|_| t.shape.clone()),
            ..t.clone()
        };
        let mut ins = inputs.to_vec();
        for &i in &self.nhwc_inputs {
            if let Some(Some(x)) = ins.get_mut(i) {
                *x = plain(x);
            }
        }
        let outs: Vec<TensorInfo> = outputs.iter().map(plain).collect();
        self.inner.flops(&ins, &outs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::linalg::conv::Conv;
    use crate::ops::nn::pool::{Pool, PoolKind};

    fn ramp(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        Tensor::from_vec(shape, v).unwrap()
    }

    #[test]
    fn reorder_places_channels_by_hand() {
        // Channel c of pixel p holds 100 c + p; blocked, pixel p of block b holds 8 values.
        let (c, hw) = (16, 3);
        let v: Vec<f32> = (0..c * hw)
            .map(|i| (100 * (i / hw) + i % hw) as f32)
            .collect();
        let x = Tensor::from_vec(&[1, c, 1, hw], v).unwrap();
        let y = ReorderNchwc {
            to_blocked: true,
            block: 8,
        }
        .eval(&[Some(&x)])
        .unwrap();
        assert_eq!(y[0].shape(), &[1, 2, 1, 3, 8]);
        let ys = y[0].as_slice::<f32>().unwrap();
        // Block 1, pixel 2, lane 3 is channel 11.
        assert_eq!(ys[(3 + 2) * 8 + 3], 1102.0);
        let back = ReorderNchwc {
            to_blocked: false,
            block: 8,
        }
        .eval(&[Some(&y[0])])
        .unwrap();
        assert_eq!(
            back[0].as_slice::<f32>().unwrap(),
            x.as_slice::<f32>().unwrap()
        );
        assert_eq!(back[0].shape(), x.shape());
    }

    #[test]
    fn reorder_rejects_unblockable_shapes() {
        let x = ramp(&[1, 6, 2, 2]);
        let err = ReorderNchwc {
            to_blocked: true,
            block: 8,
        }
        .eval(&[Some(&x)])
        .unwrap_err();
        assert!(err.0.contains("multiple of the block 8"), "{err}");
        let err = ReorderNchwc {
            to_blocked: false,
            block: 8,
        }
        .eval(&[Some(&x)])
        .unwrap_err();
        assert!(err.0.contains("blocked by 8 channels"), "{err}");
    }

    #[test]
    fn blocked_ops_match_the_plain_ops() {
        let x = ramp(&[1, 16, 5, 6]);
        let xb = reorder(&x, true, 8).unwrap();
        let w = ramp(&[8, 16, 3, 3]);
        let conv: Arc<dyn Op> = Arc::new(Conv::default());
        let pool: Arc<dyn Op> = Arc::new(Pool {
            kind: PoolKind::Max,
            kernel_shape: vec![2, 2],
            ..Pool::default()
        });
        for (op, ins) in [(conv, vec![Some(&x), Some(&w)]), (pool, vec![Some(&x)])] {
            let want = op.eval(&ins).unwrap().remove(0);
            let blocked = Nchwc {
                inner: op.clone(),
                blocked_input: true,
                block: 8,
            };
            let mut bins = ins.clone();
            bins[0] = Some(&xb);
            let got = blocked.eval(&bins).unwrap().remove(0);
            let infos: Vec<Option<InferInput>> = bins
                .iter()
                .map(|t| {
                    t.map(|t| InferInput {
                        dtype: t.dtype(),
                        shape: t.shape(),
                        value: None,
                    })
                })
                .collect();
            let inferred = blocked.infer(&InferCtx { inputs: &infos }).unwrap();
            assert_eq!(inferred[0].shape, got.shape(), "{}", blocked.name());
            let got = reorder(&got, false, 8).unwrap();
            assert_eq!(got.shape(), want.shape());
            assert_eq!(got.to_f64_vec(), want.to_f64_vec(), "{}", blocked.name());
        }
    }

    #[test]
    fn conv_reads_a_plain_input_when_asked() {
        let x = ramp(&[1, 3, 4, 4]);
        let w = ramp(&[8, 3, 3, 3]);
        let conv: Arc<dyn Op> = Arc::new(Conv::default());
        let want = conv.eval(&[Some(&x), Some(&w)]).unwrap().remove(0);
        let blocked = Nchwc {
            inner: conv,
            blocked_input: false,
            block: 8,
        };
        let got = blocked.eval(&[Some(&x), Some(&w)]).unwrap().remove(0);
        assert_eq!(got.shape(), &[1, 1, 2, 2, 8]);
        assert_eq!(
            reorder(&got, false, 8).unwrap().to_f64_vec(),
            want.to_f64_vec()
        );
    }

    #[test]
    fn any_block_round_trips_and_matches_the_plain_op() {
        // The block is the backend's choice: 4 (one NEON register), 8, 16 (one AVX-512 one).
        let x = ramp(&[2, 16, 3, 5]);
        let w = ramp(&[16, 16, 3, 3]);
        let conv: Arc<dyn Op> = Arc::new(Conv::default());
        let want = conv.eval(&[Some(&x), Some(&w)]).unwrap().remove(0);
        for block in [1, 4, 8, 16] {
            let xb = ReorderNchwc {
                to_blocked: true,
                block,
            }
            .eval(&[Some(&x)])
            .unwrap()
            .remove(0);
            assert_eq!(xb.shape(), &[2, 16 / block, 3, 5, block]);
            // Channel c of pixel p sits in block c / b, lane c % b.
            let (xs, bs) = (x.as_slice::<f32>().unwrap(), xb.as_slice::<f32>().unwrap());
            let (n, c, p) = (1, 13, 7);
            let blocked_at = ((n * (16 / block) + c / block) * 15 + p) * block + c % block;
            assert_eq!(bs[blocked_at], xs[(n * 16 + c) * 15 + p], "block {block}");
            let back = ReorderNchwc {
                to_blocked: false,
                block,
            }
            .eval(&[Some(&xb)])
            .unwrap();
            assert_eq!(back[0].to_f64_vec(), x.to_f64_vec(), "block {block}");
            let blocked = Nchwc {
                inner: conv.clone(),
                blocked_input: true,
                block,
            };
            let got = blocked.eval(&[Some(&xb), Some(&w)]).unwrap().remove(0);
            assert_eq!(got.shape().last(), Some(&block));
            let got = reorder(&got, false, block).unwrap();
            assert_eq!(got.to_f64_vec(), want.to_f64_vec(), "block {block}");
        }
    }

    #[test]
    fn a_block_other_than_the_ops_is_an_error_not_a_panic() {
        let x = ramp(&[1, 16, 2, 2]);
        let xb = reorder(&x, true, 8).unwrap();
        // Reading a tensor blocked by 8 as if by 16, and a block of 0 from a hostile file.
        let err = ReorderNchwc {
            to_blocked: false,
            block: 16,
        }
        .eval(&[Some(&xb)])
        .unwrap_err();
        assert!(err.0.contains("blocked by 16 channels"), "{err}");
        let err = ReorderNchwc {
            to_blocked: true,
            block: 0,
        }
        .eval(&[Some(&x)])
        .unwrap_err();
        assert!(err.0.contains("block 0"), "{err}");
        let w = ramp(&[8, 16, 1, 1]);
        let blocked = Nchwc {
            inner: Arc::new(Conv::default()),
            blocked_input: true,
            block: 4,
        };
        assert!(blocked.eval(&[Some(&xb), Some(&w)]).is_err());
        assert!(plain_shape(&[1, usize::MAX, 1, 1, 2]).is_err());
    }
}
