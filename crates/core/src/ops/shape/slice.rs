//! Slice: a strided window of the input, per axis `starts`, `ends`, `steps`.
//!
//! ONNX opset 1 gives starts/ends/axes as attributes; from opset 10 they (and steps) are
//! value-dependent inputs, which take precedence. Out-of-range starts and ends are clamped as the
//! spec says (so `INT_MAX`/`INT_MIN` ends mean "to the end"); steps may be negative.

use super::common::strided_copy;
use crate::op::{input, normalize_axes, optional, output, required, Prototype};
use crate::ops::util::{read_i64s, strides};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Slice {
    pub starts: Option<Vec<i64>>,
    pub ends: Option<Vec<i64>>,
    pub axes: Option<Vec<i64>>,
    pub steps: Option<Vec<i64>>,
}

/// A resolved slice: per input axis, the first index, the step and the output length.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SlicePlan {
    pub start: Vec<i64>,
    pub step: Vec<i64>,
    pub shape: Vec<usize>,
}

/// The slice parameters as lists of i64 (inputs override attributes).
pub struct SliceArgs {
    pub starts: Vec<i64>,
    pub ends: Vec<i64>,
    pub axes: Option<Vec<i64>>,
    pub steps: Option<Vec<i64>>,
}

impl Slice {
    fn args(&self, get: &dyn Fn(usize) -> OpResult<Option<Vec<i64>>>) -> OpResult<SliceArgs> {
        let pick = |i: usize, attr: &Option<Vec<i64>>| -> OpResult<Option<Vec<i64>>> {
            Ok(get(i)?.or_else(|| attr.clone()))
        };
        let Some(starts) = pick(1, &self.starts)? else {
            op_bail!("Slice needs starts (input 1 or attribute)");
        };
        let Some(ends) = pick(2, &self.ends)? else {
            op_bail!("Slice needs ends (input 2 or attribute)");
        };
        Ok(SliceArgs {
            starts,
            ends,
            axes: pick(3, &self.axes)?,
            steps: pick(4, &self.steps)?,
        })
    }

    /// Resolves the slice for an input shape.
    pub fn plan(shape: &[usize], a: &SliceArgs) -> OpResult<SlicePlan> {
        let rank = shape.len();
        let n = a.starts.len();
        if a.ends.len() != n {
            op_bail!("starts has {n} entries but ends has {}", a.ends.len());
        }
        let axes = match &a.axes {
            Some(ax) => {
                if ax.len() != n {
                    op_bail!("starts has {n} entries but axes has {}", ax.len());
                }
                normalize_axes(ax, rank)?
            }
            None => {
                if n > rank {
                    op_bail!("starts has {n} entries for an input of rank {rank}");
                }
                (0..n).collect()
            }
        };
        let steps = match &a.steps {
            Some(s) if s.len() != n => op_bail!("starts has {n} entries but steps has {}", s.len()),
            Some(s) => s.clone(),
            None => vec![1; n],
        };
        let mut plan = SlicePlan {
            start: vec![0; rank],
            step: vec![1; rank],
            shape: shape.to_vec(),
        };
        for k in 0..n {
            let ax = axes[k];
            let dim = shape[ax] as i128;
            let step = steps[k] as i128;
            if step == 0 {
                op_bail!("steps[{k}] is 0");
            }
            let adj = |v: i64| {
                let v = v as i128;
                if v < 0 {
                    v + dim
                } else {
                    v
                }
            };
            let (s, e) = if step > 0 {
                (adj(a.starts[k]).clamp(0, dim), adj(a.ends[k]).clamp(0, dim))
            } else {
                (
                    adj(a.starts[k]).clamp(0, (dim - 1).max(0)),
                    adj(a.ends[k]).clamp(-1, dim - 1),
                )
            };
            let len = if step > 0 {
                if e > s {
                    (e - s + step - 1) / step
                } else {
                    0
                }
            } else if s > e {
                (s - e + (-step) - 1) / (-step)
            } else {
                0
            };
            plan.start[ax] = if len == 0 { 0 } else { s as i64 };
            plan.step[ax] = steps[k];
            plan.shape[ax] = len as usize;
        }
        Ok(plan)
    }
}

fn opt_vals(inputs: &[Option<&Tensor>], i: usize) -> OpResult<Option<Vec<i64>>> {
    match inputs.get(i).copied().flatten() {
        Some(t) => Ok(Some(read_i64s(t, &format!("input {i}"), 1 << 10)?)),
        None => Ok(None),
    }
}

impl Op for Slice {
    op_common!(
        "Slice",
        Prototype {
            inputs: &[
                input("data", DTypeSet::ANY),
                optional("starts", DTypeSet::INDEX),
                optional("ends", DTypeSet::INDEX),
                optional("axes", DTypeSet::INDEX),
                optional("steps", DTypeSet::INDEX),
            ],
            outputs: &[output("output")],
            value_inputs: &[1, 2, 3, 4],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let get = |i: usize| -> OpResult<Option<Vec<i64>>> {
            if ctx.has(i) {
                Ok(Some(read_i64s(
                    ctx.value(i)?,
                    &format!("input {i}"),
                    1 << 10,
                )?))
            } else {
                Ok(None)
            }
        };
        let a = self.args(&get)?;
        let p = Slice::plan(ctx.shape(0)?, &a)?;
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, p.shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let a = self.args(&|i| opt_vals(inputs, i))?;
        let p = Slice::plan(x.shape(), &a)?;
        let st = strides(x.shape());
        let mut offset: i128 = 0;
        let mut ss = Vec::with_capacity(st.len());
        for ((&st, &start), &step) in st.iter().zip(&p.start).zip(&p.step) {
            offset += start as i128 * st as i128;
            ss.push(step as i128 * st as i128);
        }
        Ok(vec![strided_copy(x, &p.shape, &ss, offset)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        x: &Tensor,
        starts: &[i64],
        ends: &[i64],
        axes: Option<&[i64]>,
        steps: Option<&[i64]>,
    ) -> OpResult<Tensor> {
        let t = |v: &[i64]| Tensor::from_vec(&[v.len()], v.to_vec()).unwrap();
        let (s, e) = (t(starts), t(ends));
        let a = axes.map(t);
        let st = steps.map(t);
        Slice::default()
            .eval(&[Some(x), Some(&s), Some(&e), a.as_ref(), st.as_ref()])
            .map(|mut v| v.remove(0))
    }

    #[test]
    fn basic_and_clamped() {
        // 3x4: 0..12
        let x = Tensor::from_vec(&[3, 4], (0..12).map(|v| v as f32).collect()).unwrap();
        let y = run(&x, &[1, 0], &[2, 3], None, None).unwrap();
        assert_eq!(y.shape(), &[1, 3]);
        assert_eq!(y.to_f64_vec(), vec![4., 5., 6.]);
        let y = run(&x, &[1], &[i64::MAX], Some(&[1]), None).unwrap();
        assert_eq!(y.shape(), &[3, 3]);
        assert_eq!(y.to_f64_vec(), vec![1., 2., 3., 5., 6., 7., 9., 10., 11.]);
        let y = run(&x, &[10], &[20], Some(&[-1]), None).unwrap();
        assert_eq!(y.shape(), &[3, 0]);
        let y = run(&x, &[0, 1], &[-1, 1000], Some(&[0, 1]), Some(&[1, 2])).unwrap();
        assert_eq!(y.to_f64_vec(), vec![1., 3., 5., 7.]);
    }

    #[test]
    fn negative_steps() {
        let x = Tensor::from_vec(&[5], vec![0i64, 1, 2, 3, 4]).unwrap();
        let y = run(&x, &[-1], &[i64::MIN], None, Some(&[-1])).unwrap();
        assert_eq!(y.to_i64_vec(), vec![4, 3, 2, 1, 0]);
        let y = run(&x, &[20], &[0], None, Some(&[-2])).unwrap();
        assert_eq!(y.to_i64_vec(), vec![4, 2]);
        let y = run(&x, &[1], &[3], None, Some(&[-1])).unwrap();
        assert_eq!(y.shape(), &[0]);
        let y = run(&x, &[3], &[-100], None, Some(&[i64::MIN])).unwrap();
        assert_eq!(y.to_i64_vec(), vec![3]);
        assert!(run(&x, &[0], &[1], None, Some(&[0])).is_err());
        assert!(run(&x, &[0], &[1], Some(&[1]), None).is_err());
        assert!(run(&x, &[0, 0], &[1], None, None).is_err());
    }

    #[test]
    fn attributes() {
        let x = Tensor::from_vec(&[2, 3], vec![1u8, 2, 3, 4, 5, 6]).unwrap();
        let s = Slice {
            starts: Some(vec![1]),
            ends: Some(vec![3]),
            axes: Some(vec![1]),
            steps: None,
        };
        let y = s.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].to_i64_vec(), vec![2, 3, 5, 6]);
    }
}
