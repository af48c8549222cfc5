//! Spatial geometry of convolutions: padding, output sizes, index iteration.
//!
//! Shared by Conv, ConvInteger, ConvTranspose and the CPU kernels, so that the reference and the
//! fast paths agree on every size by construction.

use crate::ops::nn::geometry::conv_output_size;
use crate::{op_ensure, OpResult};

pub use crate::ops::nn::geometry::AutoPad;

/// Attributes common to the convolution family, before they are resolved against shapes.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvParams {
    /// Spatial kernel size; taken from the weight shape when absent.
    pub kernel_shape: Option<Vec<usize>>,
    /// Default: all 1.
    pub strides: Option<Vec<usize>>,
    /// Default: all 1.
    pub dilations: Option<Vec<usize>>,
    /// `[begin..., end...]`; default all 0. Ignored unless `auto_pad` is `NotSet`.
    pub pads: Option<Vec<usize>>,
    pub auto_pad: AutoPad,
}

/// A resolved convolution geometry over `rank` spatial dimensions.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvGeometry {
    pub input: Vec<usize>,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pad_begin: Vec<usize>,
    pub pad_end: Vec<usize>,
    pub output: Vec<usize>,
}

fn list_or(
    v: &Option<Vec<usize>>,
    rank: usize,
    default: usize,
    what: &str,
) -> OpResult<Vec<usize>> {
    match v {
        None => Ok(vec![default; rank]),
        Some(v) => {
            op_ensure!(
                v.len() == rank,
                "{what} {v:?} must have {rank} values (one per spatial dimension)"
            );
            Ok(v.clone())
        }
    }
}

impl ConvParams {
    /// Kernel shape, strides and dilations resolved for a weight of spatial shape `w_spatial`.
    pub fn kernel_strides_dilations(
        &self,
        w_spatial: &[usize],
    ) -> OpResult<(Vec<usize>, Vec<usize>, Vec<usize>)> {
        let rank = w_spatial.len();
        let kernel = match &self.kernel_shape {
            None => w_spatial.to_vec(),
            Some(k) => {
                op_ensure!(
                    k.as_slice() == w_spatial,
                    "kernel_shape {k:?} does not match the weight's spatial shape {w_spatial:?}"
                );
                k.clone()
            }
        };
        let strides = list_or(&self.strides, rank, 1, "strides")?;
        let dilations = list_or(&self.dilations, rank, 1, "dilations")?;
        op_ensure!(
            strides.iter().all(|&s| s >= 1),
            "strides {strides:?} must be at least 1"
        );
        op_ensure!(
            dilations.iter().all(|&d| d >= 1),
            "dilations {dilations:?} must be at least 1"
        );
        Ok((kernel, strides, dilations))
    }

    /// Explicit pads as (begin, end), checked against `rank`.
    pub fn explicit_pads(&self, rank: usize) -> OpResult<(Vec<usize>, Vec<usize>)> {
        match &self.pads {
            None => Ok((vec![0; rank], vec![0; rank])),
            Some(p) => {
                op_ensure!(
                    p.len() == 2 * rank,
                    "pads {p:?} must have {} values (begin and end per spatial dimension)",
                    2 * rank
                );
                Ok((p[..rank].to_vec(), p[rank..].to_vec()))
            }
        }
    }

    /// The geometry of a forward convolution of spatial input `input` with a weight of spatial
    /// shape `w_spatial`.
    pub fn conv_geometry(&self, input: &[usize], w_spatial: &[usize]) -> OpResult<ConvGeometry> {
        let rank = input.len();
        op_ensure!(
            w_spatial.len() == rank,
            "the weight has {} spatial dimensions, the input {rank}",
            w_spatial.len()
        );
        let (kernel, strides, dilations) = self.kernel_strides_dilations(w_spatial)?;
        let (mut pad_begin, mut pad_end) = match self.auto_pad {
            AutoPad::NotSet => self.explicit_pads(rank)?,
            _ => (vec![0; rank], vec![0; rank]),
        };
        let mut output = vec![0; rank];
        for i in 0..rank {
            // One per-axis rule for convolutions and pooling windows.
            let axis = conv_output_size(
                input[i],
                kernel[i],
                strides[i],
                dilations[i],
                pad_begin[i],
                pad_end[i],
                self.auto_pad,
                false,
            )?;
            pad_begin[i] = axis.pad_begin;
            pad_end[i] = axis.pad_end;
            output[i] = axis.output;
        }
        Ok(ConvGeometry {
            input: input.to_vec(),
            kernel,
            strides,
            dilations,
            pad_begin,
            pad_end,
            output,
        })
    }
}

/// Calls `f` with every multi-index of `shape` in row-major order (once for rank 0).
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; shape.len()];
    loop {
        f(&idx);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(strides: &[usize], pads: Option<&[usize]>, auto_pad: AutoPad) -> ConvParams {
        ConvParams {
            strides: Some(strides.to_vec()),
            pads: pads.map(|p| p.to_vec()),
            auto_pad,
            ..Default::default()
        }
    }

    #[test]
    fn explicit_pads_and_strides() {
        // 5x5 input, 3x3 kernel, stride 2, pads 1 all round: floor((5+2-3)/2)+1 = 3.
        let g = p(&[2, 2], Some(&[1, 1, 1, 1]), AutoPad::NotSet)
            .conv_geometry(&[5, 5], &[3, 3])
            .unwrap();
        assert_eq!(g.output, vec![3, 3]);
        // Asymmetric: H pads (1,1) W pads (0,0) on 7x5: H floor((7+2-3)/2)+1=4, W floor((5-3)/2)+1=2.
        let g = p(&[2, 2], Some(&[1, 0, 1, 0]), AutoPad::NotSet)
            .conv_geometry(&[7, 5], &[3, 3])
            .unwrap();
        assert_eq!(g.output, vec![4, 2]);
    }

    #[test]
    fn same_and_valid() {
        // in 5, k 3, stride 2: out 3, total pad (3-1)*2+3-5 = 2 -> 1/1.
        let g = p(&[2], None, AutoPad::SameUpper)
            .conv_geometry(&[5], &[3])
            .unwrap();
        assert_eq!((g.output[0], g.pad_begin[0], g.pad_end[0]), (3, 1, 1));
        // in 4, k 3, stride 1: out 4, total 2 -> 1/1; k 4: total 3 -> upper 1/2, lower 2/1.
        let g = p(&[1], None, AutoPad::SameUpper)
            .conv_geometry(&[4], &[4])
            .unwrap();
        assert_eq!((g.output[0], g.pad_begin[0], g.pad_end[0]), (4, 1, 2));
        let g = p(&[1], None, AutoPad::SameLower)
            .conv_geometry(&[4], &[4])
            .unwrap();
        assert_eq!((g.output[0], g.pad_begin[0], g.pad_end[0]), (4, 2, 1));
        let g = p(&[2], Some(&[5, 5]), AutoPad::Valid)
            .conv_geometry(&[7], &[3])
            .unwrap();
        assert_eq!((g.output[0], g.pad_begin[0]), (3, 0));
    }

    #[test]
    fn dilation_and_errors() {
        let d = ConvParams {
            dilations: Some(vec![2]),
            ..Default::default()
        };
        // Extent 2*(3-1)+1 = 5 on 7: 3 outputs.
        assert_eq!(d.conv_geometry(&[7], &[3]).unwrap().output, vec![3]);
        assert!(d.conv_geometry(&[4], &[3]).is_err());
        assert!(p(&[0], None, AutoPad::NotSet)
            .conv_geometry(&[4], &[3])
            .is_err());
        assert!(p(&[1], Some(&[1]), AutoPad::NotSet)
            .conv_geometry(&[4], &[3])
            .is_err());
        let huge = ConvParams {
            dilations: Some(vec![usize::MAX]),
            ..Default::default()
        };
        assert!(huge.conv_geometry(&[4], &[3]).is_err());
    }

    #[test]
    fn index_iteration() {
        let mut seen = Vec::new();
        for_each_index(&[2, 2], |i| seen.push(i.to_vec()));
        assert_eq!(seen, vec![vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]]);
        let mut n = 0;
        for_each_index(&[], |_| n += 1);
        assert_eq!(n, 1);
        for_each_index(&[3, 0], |_| n += 1);
        assert_eq!(n, 1);
    }
}
