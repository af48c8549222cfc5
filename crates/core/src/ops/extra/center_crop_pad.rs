//! CenterCropPad: crops or zero-pads the given axes to the requested sizes, keeping the center
//! (an odd difference puts the extra element at the end).

use crate::op::{input, normalize_axes, output, required, Prototype};
use crate::ops::util::{read_i64s, strides, to_dim};
use crate::{
    dispatch_all, op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CenterCropPad {
    /// The axes `shape` lists sizes for; all axes when `None`.
    pub axes: Option<Vec<i64>>,
}

impl CenterCropPad {
    fn out_shape(&self, x: &[usize], shape: &[i64]) -> OpResult<Vec<usize>> {
        let axes = match &self.axes {
            Some(a) => normalize_axes(a, x.len())?,
            None => (0..x.len()).collect(),
        };
        if axes.len() != shape.len() {
            op_bail!(
                "input 1 (shape) has {} values for {} axes",
                shape.len(),
                axes.len()
            );
        }
        let mut out = x.to_vec();
        for (&a, &s) in axes.iter().zip(shape) {
            out[a] = to_dim(s, "input 1 (shape)")?;
        }
        Ok(out)
    }
}

impl Op for CenterCropPad {
    op_common!(
        "CenterCropPad",
        Prototype {
            inputs: &[
                input("input_data", DTypeSet::ALL),
                input("shape", DTypeSet::INDEX)
            ],
            outputs: &[output("output_data")],
            value_inputs: &[1],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let shape = read_i64s(ctx.value(1)?, "input 1 (shape)", 64)?;
        Ok(vec![TensorInfo::new(
            ctx.dtype(0)?,
            self.out_shape(ctx.shape(0)?, &shape)?,
        )])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let shape = read_i64s(required(inputs, 1)?, "input 1 (shape)", 64)?;
        let xs = x.shape();
        let os = self.out_shape(xs, &shape)?;
        // Per axis, the signed shift from an output index to the input index.
        let shift: Vec<i64> = xs
            .iter()
            .zip(&os)
            .map(|(&i, &o)| (i as i64 - o as i64) / 2)
            .collect();
        let (ist, ost) = (strides(xs), strides(&os));
        let mut out = Tensor::zeros(x.dtype(), &os)?;
        let n: usize = os.iter().product();
        dispatch_all!(x.dtype(), T => {
            let xv = x.as_slice::<T>()?;
            let ov = out.as_mut_slice::<T>()?;
            'outer: for (o, slot) in ov.iter_mut().enumerate().take(n) {
                let mut src = 0usize;
                for ax in 0..os.len() {
                    let i = ((o / ost[ax]) % os[ax]) as i64 + shift[ax];
                    if i < 0 || i as usize >= xs[ax] {
                        continue 'outer;
                    }
                    src += i as usize * ist[ax];
                }
                *slot = xv[src];
            }
        });
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crop_and_pad() {
        let x = Tensor::from_slice(&[2, 3], &[1i32, 2, 3, 4, 5, 6]).unwrap();
        // Rows 2 -> 3 (one zero row at the end), columns 3 -> 1 (the middle one).
        let s = Tensor::from_slice(&[2], &[3i64, 1]).unwrap();
        let y = CenterCropPad::default()
            .eval(&[Some(&x), Some(&s)])
            .unwrap();
        assert_eq!(y[0].shape(), &[3, 1]);
        assert_eq!(y[0].to_i64_vec(), vec![2, 5, 0]);
        let c = CenterCropPad {
            axes: Some(vec![-1]),
        };
        let s = Tensor::from_slice(&[1], &[2i64]).unwrap();
        assert_eq!(
            c.eval(&[Some(&x), Some(&s)]).unwrap()[0].to_i64_vec(),
            vec![1, 2, 4, 5]
        );
    }
}
