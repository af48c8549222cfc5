//! DepthToSpace and SpaceToDepth: move `blocksize x blocksize` blocks between the channel axis
//! and the spatial axes of an NCHW tensor.

use super::common::permute;
use crate::op::{input, output, required, Prototype};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DepthToSpaceMode {
    /// depth-column-row: channels split as `[b, b, C/b²]`.
    #[default]
    Dcr,
    /// column-row-depth: channels split as `[C/b², b, b]`.
    Crd,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DepthToSpace {
    pub blocksize: i64,
    pub mode: DepthToSpaceMode,
}

impl Default for DepthToSpace {
    fn default() -> Self {
        DepthToSpace {
            blocksize: 1,
            mode: DepthToSpaceMode::Dcr,
        }
    }
}

fn nchw(s: &[usize]) -> OpResult<[usize; 4]> {
    match s {
        &[n, c, h, w] => Ok([n, c, h, w]),
        _ => op_bail!("input 0 must be 4-D (NCHW), got shape {s:?}"),
    }
}

fn block(b: i64) -> OpResult<usize> {
    if !(1..=1 << 16).contains(&b) {
        op_bail!("blocksize must be positive, got {b}");
    }
    Ok(b as usize)
}

impl DepthToSpace {
    fn output_shape(&self, s: &[usize]) -> OpResult<Vec<usize>> {
        let [n, c, h, w] = nchw(s)?;
        let b = block(self.blocksize)?;
        if c % (b * b) != 0 {
            op_bail!("channels {c} are not divisible by blocksize² {}", b * b);
        }
        match (h.checked_mul(b), w.checked_mul(b)) {
            (Some(hb), Some(wb)) => Ok(vec![n, c / (b * b), hb, wb]),
            _ => op_bail!("output of {s:?} with blocksize {b} is too large"),
        }
    }
}

impl Op for DepthToSpace {
    op_common!(
        "DepthToSpace",
        Prototype {
            inputs: &[input("input", DTypeSet::ANY)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(
            ctx.dtype(0)?,
            self.output_shape(ctx.shape(0)?)?,
        )])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let out = self.output_shape(x.shape())?;
        let [n, c, h, w] = nchw(x.shape())?;
        let b = block(self.blocksize)?;
        let cb = c / (b * b);
        let y = match self.mode {
            DepthToSpaceMode::Dcr => permute(x, &[n, b, b, cb, h, w], &[0, 3, 4, 1, 5, 2])?,
            DepthToSpaceMode::Crd => permute(x, &[n, cb, b, b, h, w], &[0, 1, 4, 2, 5, 3])?,
        };
        Ok(vec![y.reshaped(&out)?])
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpaceToDepth {
    pub blocksize: i64,
}

impl Default for SpaceToDepth {
    fn default() -> Self {
        SpaceToDepth { blocksize: 1 }
    }
}

impl SpaceToDepth {
    fn output_shape(&self, s: &[usize]) -> OpResult<Vec<usize>> {
        let [n, c, h, w] = nchw(s)?;
        let b = block(self.blocksize)?;
        if h % b != 0 || w % b != 0 {
            op_bail!("spatial size {h}x{w} is not divisible by blocksize {b}");
        }
        match c.checked_mul(b * b) {
            Some(cb) => Ok(vec![n, cb, h / b, w / b]),
            None => op_bail!("output of {s:?} with blocksize {b} is too large"),
        }
    }
}

impl Op for SpaceToDepth {
    op_common!(
        "SpaceToDepth",
        Prototype {
            inputs: &[input("input", DTypeSet::ANY)],
            outputs: &[output("output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(
            ctx.dtype(0)?,
            self.output_shape(ctx.shape(0)?)?,
        )])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let out = self.output_shape(x.shape())?;
        let [n, c, h, w] = nchw(x.shape())?;
        let b = block(self.blocksize)?;
        let y = permute(x, &[n, c, h / b, b, w / b, b], &[0, 3, 5, 1, 2, 4])?;
        Ok(vec![y.reshaped(&out)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_modes() {
        // 1x4x1x1 -> 1x1x2x2
        let x = Tensor::from_vec(&[1, 4, 1, 1], vec![0i64, 1, 2, 3]).unwrap();
        let d = DepthToSpace {
            blocksize: 2,
            mode: DepthToSpaceMode::Dcr,
        };
        let y = d.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 2, 2]);
        assert_eq!(y[0].to_i64_vec(), vec![0, 1, 2, 3]);
        // 1x8x1x1, DCR vs CRD: with 2 output channels.
        let x = Tensor::from_vec(&[1, 8, 1, 1], (0..8).collect::<Vec<i64>>()).unwrap();
        let y = d.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 2, 2, 2]);
        // DCR: out[c, i, j] = in[(i*2 + j)*2 + c]
        assert_eq!(y[0].to_i64_vec(), vec![0, 2, 4, 6, 1, 3, 5, 7]);
        let crd = DepthToSpace {
            blocksize: 2,
            mode: DepthToSpaceMode::Crd,
        };
        // CRD: out[c, i, j] = in[c*4 + i*2 + j]
        assert_eq!(
            crd.eval(&[Some(&x)]).unwrap()[0].to_i64_vec(),
            (0..8).collect::<Vec<i64>>()
        );
        // SpaceToDepth inverts DCR.
        let s = SpaceToDepth { blocksize: 2 };
        let back = s.eval(&[Some(&y[0])]).unwrap();
        assert_eq!(back[0].shape(), &[1, 8, 1, 1]);
        assert_eq!(back[0].to_i64_vec(), (0..8).collect::<Vec<i64>>());
        assert!(d
            .eval(&[Some(
                &Tensor::zeros(crate::DType::F32, &[1, 3, 1, 1]).unwrap()
            )])
            .is_err());
        assert!(s
            .eval(&[Some(
                &Tensor::zeros(crate::DType::F32, &[1, 1, 3, 2]).unwrap()
            )])
            .is_err());
    }

    #[test]
    fn space_to_depth_2x2() {
        // 1x1x2x4 -> 1x4x1x2
        let x = Tensor::from_vec(&[1, 1, 2, 4], (0..8).collect::<Vec<i64>>()).unwrap();
        let y = SpaceToDepth { blocksize: 2 }.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[1, 4, 1, 2]);
        assert_eq!(y[0].to_i64_vec(), vec![0, 2, 1, 3, 4, 6, 5, 7]);
    }
}
