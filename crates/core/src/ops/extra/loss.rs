//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (which is NLL over a log-softmax along
//! the class axis 1, optionally also returning that log-probability).

use crate::op::{input, optional, optional_output, output, required, Prototype};
use crate::ops::nn::tensor_from_f64;
use crate::{op_bail, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reduction {
    None,
    Sum,
    #[default]
    Mean,
}

impl Reduction {
    pub fn parse(s: &str) -> Option<Reduction> {
        match s {
            "none" => Some(Reduction::None),
            "sum" => Some(Reduction::Sum),
            "mean" => Some(Reduction::Mean),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Loss {
    /// SoftmaxCrossEntropyLoss when true, NegativeLogLikelihoodLoss otherwise.
    pub softmax: bool,
    pub reduction: Reduction,
    /// Targets equal to this contribute nothing (and no weight to the mean).
    pub ignore_index: Option<i64>,
    /// 2 when SoftmaxCrossEntropyLoss's log_prob output is wanted.
    pub num_outputs: usize,
}

impl Loss {
    fn check(&self, x: &[usize], t: &[usize], w: Option<&[usize]>) -> OpResult<Vec<TensorInfo>> {
        if x.len() < 2 {
            op_bail!("input 0 (scores) must be N x C x ..., got {x:?}");
        }
        let want: Vec<usize> = [x[0]].iter().chain(&x[2..]).copied().collect();
        if t != want.as_slice() {
            op_bail!("input 1 (target) must have shape {want:?}, got {t:?}");
        }
        if let Some(w) = w {
            if w != [x[1]] {
                op_bail!("input 2 (weight) must have shape [{}], got {w:?}", x[1]);
            }
        }
        Ok(vec![])
    }

    fn out_shape(&self, t: &[usize]) -> Vec<usize> {
        match self.reduction {
            Reduction::None => t.to_vec(),
            _ => vec![],
        }
    }
}

impl Op for Loss {
    fn name(&self) -> &'static str {
        if self.softmax {
            "SoftmaxCrossEntropyLoss"
        } else {
            "NegativeLogLikelihoodLoss"
        }
    }

    fn prototype(&self) -> &'static Prototype {
        static P: Prototype = Prototype {
            inputs: &[
                input("scores", DTypeSet::FLOAT),
                input("target", DTypeSet::INDEX),
                optional("weight", DTypeSet::FLOAT),
            ],
            outputs: &[output("output"), optional_output("log_prob")],
            value_inputs: &[],
        };
        &P
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.shape(0)?;
        let w = if ctx.has(2) {
            Some(ctx.shape(2)?)
        } else {
            None
        };
        self.check(x, ctx.shape(1)?, w)?;
        let dt = ctx.dtype(0)?;
        let mut out = vec![TensorInfo::new(dt, self.out_shape(ctx.shape(1)?))];
        if self.num_outputs > 1 {
            if !self.softmax {
                op_bail!("NegativeLogLikelihoodLoss has one output");
            }
            out.push(TensorInfo::new(dt, x));
        }
        Ok(out)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let (x, t) = (required(inputs, 0)?, required(inputs, 1)?);
        let w = inputs.get(2).copied().flatten();
        self.check(x.shape(), t.shape(), w.map(|w| w.shape()))?;
        let (n, c) = (x.shape()[0], x.shape()[1]);
        let d: usize = x.shape()[2..].iter().product();
        let mut lp = x.to_f64_vec();
        if self.softmax {
            for ni in 0..n {
                for di in 0..d {
                    let at = |k: usize| (ni * c + k) * d + di;
                    let max = (0..c).map(|k| lp[at(k)]).fold(f64::NEG_INFINITY, f64::max);
                    let lse = (0..c).map(|k| (lp[at(k)] - max).exp()).sum::<f64>().ln() + max;
                    for k in 0..c {
                        lp[at(k)] -= lse;
                    }
                }
            }
        }
        let wv = w.map(|w| w.to_f64_vec());
        let tv = t.to_i64_vec();
        let mut loss = vec![0.0; n * d];
        let mut wsum = 0.0;
        for ni in 0..n {
            for di in 0..d {
                let k = tv[ni * d + di];
                if Some(k) == self.ignore_index {
                    continue;
                }
                if k < 0 || k as usize >= c {
                    op_bail!("input 1 (target) holds class {k}, outside [0, {c})");
                }
                let wk = wv.as_ref().map_or(1.0, |w| w[k as usize]);
                wsum += wk;
                loss[ni * d + di] = -lp[(ni * c + k as usize) * d + di] * wk;
            }
        }
        let dt = x.dtype();
        let total: f64 = loss.iter().sum();
        let out = match self.reduction {
            Reduction::None => tensor_from_f64(dt, t.shape(), &loss)?,
            Reduction::Sum => tensor_from_f64(dt, &[], &[total])?,
            Reduction::Mean => tensor_from_f64(dt, &[], &[total / wsum])?,
        };
        let mut outs = vec![out];
        if self.num_outputs > 1 {
            outs.push(tensor_from_f64(dt, x.shape(), &lp)?);
        }
        Ok(outs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_weighted_mean_with_ignore() {
        // x[n, t[n]] = -1, -2, -3; target 2 is ignored; weights w[0]=1, w[1]=3.
        let x = Tensor::from_slice(&[3, 3], &[-1.0f32, 0., 0., 0., -2., 0., 0., 0., -3.]).unwrap();
        let t = Tensor::from_slice(&[3], &[0i64, 1, 2]).unwrap();
        let w = Tensor::from_slice(&[3], &[1.0f32, 3., 5.]).unwrap();
        let l = Loss {
            ignore_index: Some(2),
            num_outputs: 1,
            ..Default::default()
        };
        let y = l.eval(&[Some(&x), Some(&t), Some(&w)]).unwrap();
        // (1*1 + 3*2) / (1 + 3)
        assert_eq!(y[0].to_f64_vec(), vec![7.0 / 4.0]);
        let none = Loss {
            reduction: Reduction::None,
            num_outputs: 1,
            ..Default::default()
        };
        let y = none.eval(&[Some(&x), Some(&t)]).unwrap();
        assert_eq!(y[0].to_f64_vec(), vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn sce_uniform_scores() {
        // Equal scores over 2 classes: log-prob -ln 2 everywhere.
        let x = Tensor::from_slice(&[1, 2], &[5.0f32, 5.0]).unwrap();
        let t = Tensor::from_slice(&[1], &[1i64]).unwrap();
        let l = Loss {
            softmax: true,
            reduction: Reduction::Sum,
            num_outputs: 2,
            ..Default::default()
        };
        let y = l.eval(&[Some(&x), Some(&t)]).unwrap();
        let ln2 = 2f64.ln();
        assert!((y[0].to_f64_vec()[0] - ln2).abs() < 1e-6);
        assert!((y[1].to_f64_vec()[0] + ln2).abs() < 1e-6);
        assert!(l
            .eval(&[Some(&x), Some(&Tensor::from_slice(&[1], &[2i64]).unwrap())])
            .is_err());
    }
}
