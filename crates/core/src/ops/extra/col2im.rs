//! Col2Im: the inverse of im2col. Input `[N, C * prod(block), L]` holds, for each of the `L`
//! sliding block positions over the (padded) image, the block's values; overlapping values are
//! summed into the image `[N, C, *image_shape]`.

use crate::op::{input, output, required, Prototype};
use crate::ops::nn::tensor_from_f64;
use crate::ops::util::{read_i64s, strides, to_dim};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Col2Im {
    /// Ones when empty.
    pub dilations: Vec<i64>,
    /// Begin pads then end pads; zeros when empty.
    pub pads: Vec<i64>,
    /// Ones when empty.
    pub strides: Vec<i64>,
}

/// Validated geometry: image dims, block dims, blocks per dim, and per-dim (dilation, begin pad,
/// stride).
struct Geo {
    image: Vec<usize>,
    block: Vec<usize>,
    blocks: Vec<usize>,
    dps: Vec<(usize, usize, usize)>,
}

impl Col2Im {
    fn geo(&self, x: &[usize], image: &[i64], block: &[i64]) -> OpResult<(Geo, Vec<usize>)> {
        let k = image.len();
        if k == 0 || block.len() != k || x.len() != 3 {
            op_bail!("expected input [N, C*prod(block), L] with image_shape and block_shape of equal length; got {x:?}, {image:?}, {block:?}");
        }
        let image: Vec<usize> = image
            .iter()
            .map(|&v| to_dim(v, "image_shape"))
            .collect::<OpResult<_>>()?;
        let block: Vec<usize> = block
            .iter()
            .map(|&v| to_dim(v, "block_shape"))
            .collect::<OpResult<_>>()?;
        let attr = |v: &[i64], i: usize, d: i64, what: &str| -> OpResult<usize> {
            to_dim(v.get(i).copied().unwrap_or(d), what)
        };
        let mut blocks = Vec::with_capacity(k);
        let mut dps = Vec::with_capacity(k);
        for i in 0..k {
            let dil = attr(&self.dilations, i, 1, "dilations")?;
            let (pb, pe) = (
                attr(&self.pads, i, 0, "pads")?,
                attr(&self.pads, i + k, 0, "pads")?,
            );
            let st = attr(&self.strides, i, 1, "strides")?;
            let span = dil * block[i].saturating_sub(1) + 1;
            let padded = image[i] + pb + pe;
            if st == 0 || dil == 0 || block[i] == 0 || padded < span {
                op_bail!("block {block:?} does not fit image {image:?} with the given pads, strides and dilations");
            }
            blocks.push((padded - span) / st + 1);
            dps.push((dil, pb, st));
        }
        let bsz: usize = block.iter().product();
        let l: usize = blocks.iter().product();
        if !x[1].is_multiple_of(bsz) || x[2] != l {
            op_bail!("input 0 {x:?} must be [N, C*{bsz}, {l}]");
        }
        let mut out = vec![x[0], x[1] / bsz];
        out.extend_from_slice(&image);
        Ok((
            Geo {
                image,
                block,
                blocks,
                dps,
            },
            out,
        ))
    }
}

impl Op for Col2Im {
    op_common!(
        "Col2Im",
        Prototype {
            inputs: &[
                input("input", DTypeSet::ALL),
                input("image_shape", DTypeSet::I64),
                input("block_shape", DTypeSet::I64),
            ],
            outputs: &[output("output")],
            value_inputs: &[1, 2],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let image = read_i64s(ctx.value(1)?, "input 1 (image_shape)", 16)?;
        let block = read_i64s(ctx.value(2)?, "input 2 (block_shape)", 16)?;
        let (_, out) = self.geo(ctx.shape(0)?, &image, &block)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, out)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let image = read_i64s(required(inputs, 1)?, "input 1 (image_shape)", 16)?;
        let block = read_i64s(required(inputs, 2)?, "input 2 (block_shape)", 16)?;
        let (g, out) = self.geo(x.shape(), &image, &block)?;
        let xv = x.to_f64_vec();
        let (bsz, l) = (g.block.iter().product::<usize>(), x.shape()[2]);
        let isz: usize = g.image.iter().product();
        let (bst, lst, ist) = (strides(&g.block), strides(&g.blocks), strides(&g.image));
        let mut y = vec![0.0; out.iter().product()];
        for nc in 0..out[0] * out[1] {
            for kk in 0..bsz {
                for li in 0..l {
                    let mut at = Some(0usize);
                    for d in 0..g.image.len() {
                        let (dil, pb, st) = g.dps[d];
                        let kd = (kk / bst[d]) % g.block[d];
                        let ld = (li / lst[d]) % g.blocks[d];
                        let p = (ld * st + kd * dil) as i64 - pb as i64;
                        at = at
                            .filter(|_| p >= 0 && (p as usize) < g.image[d])
                            .map(|a| a + p as usize * ist[d]);
                    }
                    if let Some(a) = at {
                        y[nc * isz + a] += xv[(nc * bsz + kk) * l + li];
                    }
                }
            }
        }
        Ok(vec![tensor_from_f64(x.dtype(), &out, &y)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_blocks_sum() {
        // 1-by-3 image, 1-by-2 blocks at stride 1: two blocks overlapping at the middle pixel.
        let x = Tensor::from_slice(&[1, 2, 2], &[1.0f32, 10., 2., 20.]).unwrap();
        let img = Tensor::from_slice(&[2], &[1i64, 3]).unwrap();
        let blk = Tensor::from_slice(&[2], &[1i64, 2]).unwrap();
        let y = Col2Im::default()
            .eval(&[Some(&x), Some(&img), Some(&blk)])
            .unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 1, 3]);
        // Block 0 puts (1, 2) at columns 0-1; block 1 puts (10, 20) at columns 1-2.
        assert_eq!(y[0].to_f64_vec(), vec![1.0, 12.0, 20.0]);
    }
}
