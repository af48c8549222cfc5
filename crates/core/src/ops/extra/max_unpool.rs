//! MaxUnpool: scatters pooled values back to the positions MaxPool's indices recorded, zeros
//! elsewhere. Indices are flat offsets into the unpooled tensor of the default output shape;
//! an explicit larger `output_shape` pads that result at the end of each axis.

use crate::op::{input, optional, output, required, Prototype};
use crate::ops::util::{read_i64s, strides, to_dim};
use crate::{
    dispatch_all, op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MaxUnpool {
    pub kernel_shape: Vec<i64>,
    /// Begin pads then end pads; zeros when empty.
    pub pads: Vec<i64>,
    /// Ones when empty.
    pub strides: Vec<i64>,
}

impl MaxUnpool {
    fn default_shape(&self, x: &[usize]) -> OpResult<Vec<usize>> {
        let k = self.kernel_shape.len();
        if x.len() != k + 2 {
            op_bail!(
                "input 0 {x:?} must have rank {} for kernel_shape {:?}",
                k + 2,
                self.kernel_shape
            );
        }
        let mut out = x[..2].to_vec();
        for d in 0..k {
            let s = self.strides.get(d).copied().unwrap_or(1);
            let p =
                self.pads.get(d).copied().unwrap_or(0) + self.pads.get(d + k).copied().unwrap_or(0);
            let v = (x[d + 2] as i64 - 1) * s - p + self.kernel_shape[d];
            out.push(to_dim(v, "the unpooled dimension")?);
        }
        Ok(out)
    }

    fn shapes(
        &self,
        x: &[usize],
        explicit: Option<Vec<i64>>,
    ) -> OpResult<(Vec<usize>, Vec<usize>)> {
        let inferred = self.default_shape(x)?;
        let out = match explicit {
            None => inferred.clone(),
            Some(v) => {
                let o: Vec<usize> = v
                    .iter()
                    .map(|&d| to_dim(d, "output_shape"))
                    .collect::<OpResult<_>>()?;
                if o.len() != inferred.len() || o.iter().zip(&inferred).any(|(a, b)| a < b) {
                    op_bail!("input 2 (output_shape) {o:?} is smaller than the unpooled shape {inferred:?}");
                }
                o
            }
        };
        Ok((inferred, out))
    }
}

impl Op for MaxUnpool {
    op_common!(
        "MaxUnpool",
        Prototype {
            inputs: &[
                input("X", DTypeSet::FLOAT),
                input("I", DTypeSet::I64),
                optional("output_shape", DTypeSet::I64),
            ],
            outputs: &[output("output")],
            value_inputs: &[2],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let explicit = match ctx.opt_i64s(2)? {
            Some(v) if v.len() > 64 => op_bail!("input 2 (output_shape) is too long"),
            v => v,
        };
        let (_, out) = self.shapes(ctx.shape(0)?, explicit)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, out)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (x, idx) = (required(inputs, 0)?, required(inputs, 1)?);
        if x.shape() != idx.shape() {
            op_bail!(
                "input 1 (I) {:?} must have the shape of input 0 {:?}",
                idx.shape(),
                x.shape()
            );
        }
        let explicit = match inputs.get(2).copied().flatten() {
            Some(t) => Some(read_i64s(t, "input 2 (output_shape)", 64)?),
            None => None,
        };
        let (inferred, os) = self.shapes(x.shape(), explicit)?;
        let numel: usize = inferred.iter().product();
        let (ist, ost) = (strides(&inferred), strides(&os));
        let iv = idx.to_i64_vec();
        let mut out = Tensor::zeros(x.dtype(), &os)?;
        dispatch_all!(x.dtype(), T => {
            let xv = x.as_slice::<T>()?;
            let ov = out.as_mut_slice::<T>()?;
            for (&v, &i) in xv.iter().zip(&iv) {
                if i < 0 || i as usize >= numel {
                    op_bail!("input 1 (I) holds index {i}, outside [0, {numel})");
                }
                let dst: usize = (0..os.len()).map(|a| (i as usize / ist[a]) % inferred[a] * ost[a]).sum();
                ov[dst] = v;
            }
        });
        Ok(vec![out])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpool_2x2() {
        let u = MaxUnpool {
            kernel_shape: vec![2, 2],
            strides: vec![2, 2],
            ..Default::default()
        };
        let x = Tensor::from_slice(&[1, 1, 1, 1], &[7.0f32]).unwrap();
        let i = Tensor::from_slice(&[1, 1, 1, 1], &[3i64]).unwrap();
        let y = u.eval(&[Some(&x), Some(&i)]).unwrap();
        assert_eq!(y[0].to_f64_vec(), vec![0.0, 0.0, 0.0, 7.0]);
        let s = Tensor::from_slice(&[4], &[1i64, 1, 3, 3]).unwrap();
        let y = u.eval(&[Some(&x), Some(&i), Some(&s)]).unwrap();
        assert_eq!(y[0].to_f64_vec(), vec![0., 0., 0., 0., 7., 0., 0., 0., 0.]);
    }
}
