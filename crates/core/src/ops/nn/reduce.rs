//! Reductions (ReduceSum, ReduceMean, ... ) and ArgMax/ArgMin.
//!
//! Axes came as an attribute in older opsets (ReduceSum until 13, the others until 18) and as
//! an optional value-dependent input after; [`Reduce`] accepts both. No axes means all axes,
//! unless `noop_with_empty_axes`, which makes the op the identity.

use super::{int_from_i128, int_to_i128, split_at_axis};
use crate::op::{input, normalize_axes, normalize_axis, optional, output, required, Prototype};
use crate::ops::util::{broadcast_offsets, read_i64s};
use crate::{
    dispatch_all, op_bail, DType, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo,
};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReduceKind {
    #[default]
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

impl ReduceKind {
    /// Every kind, for the backends' tests (the match fails to compile on a new variant
    /// until it is listed).
    pub const ALL: [ReduceKind; 10] = {
        use ReduceKind::*;
        const fn listed(k: ReduceKind) -> ReduceKind {
            match k {
                Sum | Mean | Max | Min | Prod | L1 | L2 | LogSum | LogSumExp | SumSquare => k,
            }
        }
        [
            listed(Sum),
            listed(Mean),
            listed(Max),
            listed(Min),
            listed(Prod),
            listed(L1),
            listed(L2),
            listed(LogSum),
            listed(LogSumExp),
            listed(SumSquare),
        ]
    };
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reduce {
    pub kind: ReduceKind,
    /// The attribute form; the `axes` input, when given, takes precedence.
    pub axes: Option<Vec<i64>>,
    pub keepdims: bool,
    pub noop_with_empty_axes: bool,
}

impl Default for Reduce {
    fn default() -> Self {
        Reduce {
            kind: ReduceKind::Sum,
            axes: None,
            keepdims: true,
            noop_with_empty_axes: false,
        }
    }
}

/// Resolved reduction: which axes (sorted), or `None` for the identity.
pub fn resolve_axes(
    r: &Reduce,
    axes_input: Option<&Tensor>,
    rank: usize,
) -> OpResult<Option<Vec<usize>>> {
    let axes = match axes_input {
        Some(t) => read_i64s(t, "input 1 (axes)", 64)?,
        None => r.axes.clone().unwrap_or_default(),
    };
    if axes.is_empty() {
        if r.noop_with_empty_axes {
            return Ok(None);
        }
        return Ok(Some((0..rank).collect()));
    }
    let mut a = normalize_axes(&axes, rank)?;
    a.sort_unstable();
    Ok(Some(a))
}

impl Reduce {
    fn shapes(&self, x: &[usize], axes: &[usize]) -> (Vec<usize>, Vec<usize>) {
        let keep: Vec<usize> = x
            .iter()
            .enumerate()
            .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
            .collect();
        let out = if self.keepdims {
            keep.clone()
        } else {
            x.iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, &d)| d)
                .collect()
        };
        (keep, out)
    }

    fn check_dtype(&self, dt: DType) -> OpResult<()> {
        if dt == DType::Bool && !matches!(self.kind, ReduceKind::Max | ReduceKind::Min) {
            op_bail!("input 0 is bool, which only ReduceMax and ReduceMin accept");
        }
        Ok(())
    }
}

impl Op for Reduce {
    fn name(&self) -> &'static str {
        match self.kind {
            ReduceKind::Sum => "ReduceSum",
            ReduceKind::Mean => "ReduceMean",
            ReduceKind::Max => "ReduceMax",
            ReduceKind::Min => "ReduceMin",
            ReduceKind::Prod => "ReduceProd",
            ReduceKind::L1 => "ReduceL1",
            ReduceKind::L2 => "ReduceL2",
            ReduceKind::LogSum => "ReduceLogSum",
            ReduceKind::LogSumExp => "ReduceLogSumExp",
            ReduceKind::SumSquare => "ReduceSumSquare",
        }
    }

    fn prototype(&self) -> &'static Prototype {
        static P: Prototype = Prototype {
            inputs: &[
                input("data", DTypeSet::ALL),
                optional("axes", DTypeSet::I64),
            ],
            outputs: &[output("reduced")],
            value_inputs: &[1],
        };
        &P
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.shape(0)?;
        self.check_dtype(ctx.dtype(0)?)?;
        let axes_t = if ctx.has(1) {
            Some(ctx.value(1)?)
        } else {
            None
        };
        let shape = match resolve_axes(self, axes_t, x.len())? {
            None => x.to_vec(),
            Some(axes) => self.shapes(x, &axes).1,
        };
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, shape)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        self.check_dtype(x.dtype())?;
        let axes_t = inputs.get(1).copied().flatten();
        let Some(axes) = resolve_axes(self, axes_t, x.rank())? else {
            return Ok(vec![x.clone()]);
        };
        let (keep, out_shape) = self.shapes(x.shape(), &axes);
        let map = broadcast_offsets(&keep, x.shape());
        let n_out: usize = keep.iter().product();
        let count: usize = axes.iter().map(|&a| x.shape()[a]).product();
        let mut out = Tensor::zeros(x.dtype(), &out_shape)?;
        dispatch_all!(x.dtype(), T => {
            let xs = x.as_slice::<T>()?;
            let os = out.as_mut_slice::<T>()?;
            if T::DTYPE.is_float() || matches!(self.kind, ReduceKind::L2 | ReduceKind::LogSum | ReduceKind::LogSumExp) {
                let r = reduce_f64(self.kind, xs.iter().map(|v| v.to_f64()), &map, n_out, count);
                for (o, v) in os.iter_mut().zip(r) {
                    *o = T::from_f64(v);
                }
            } else {
                reduce_int(self.kind, xs, &map, os, count);
            }
        });
        Ok(vec![out])
    }
}

fn reduce_f64(
    kind: ReduceKind,
    xs: impl Iterator<Item = f64> + Clone,
    map: &[usize],
    n_out: usize,
    count: usize,
) -> Vec<f64> {
    use ReduceKind::*;
    let init = match kind {
        Max | LogSumExp => f64::NEG_INFINITY,
        Min => f64::INFINITY,
        Prod => 1.0,
        _ => 0.0,
    };
    let mut acc = vec![init; n_out];
    for (v, &o) in xs.clone().zip(map) {
        let a = &mut acc[o];
        *a = match kind {
            Sum | Mean | LogSum => *a + v,
            Max | LogSumExp => a.max(v),
            Min => a.min(v),
            Prod => *a * v,
            L1 => *a + v.abs(),
            L2 | SumSquare => *a + v * v,
        };
    }
    match kind {
        Mean => acc.iter_mut().for_each(|a| *a /= count as f64),
        L2 => acc.iter_mut().for_each(|a| *a = a.sqrt()),
        LogSum => acc.iter_mut().for_each(|a| *a = a.ln()),
        LogSumExp => {
            // Shift by the maximum so large inputs do not overflow.
            let max = acc.clone();
            let mut sum = vec![0.0; n_out];
            for (v, &o) in xs.zip(map) {
                if max[o].is_finite() {
                    sum[o] += (v - max[o]).exp();
                } else {
                    sum[o] += v.exp();
                }
            }
            for ((a, s), m) in acc.iter_mut().zip(sum).zip(max) {
                *a = if m.is_finite() { m + s.ln() } else { s.ln() };
            }
        }
        _ => {}
    }
    acc
}

/// Integer reductions, exact and wrapping like the element type.
fn reduce_int<T: Elem>(kind: ReduceKind, xs: &[T], map: &[usize], os: &mut [T], count: usize) {
    use ReduceKind::*;
    let mut acc: Vec<Option<i128>> = vec![None; os.len()];
    for (v, &o) in xs.iter().zip(map) {
        let v = int_to_i128(*v);
        let a = &mut acc[o];
        *a = Some(match (*a, kind) {
            (None, L1) => v.abs(),
            (None, SumSquare) => v.wrapping_mul(v),
            (None, _) => v,
            (Some(a), Sum | Mean) => a.wrapping_add(v),
            (Some(a), Max) => a.max(v),
            (Some(a), Min) => a.min(v),
            (Some(a), Prod) => a.wrapping_mul(v),
            (Some(a), L1) => a.wrapping_add(v.abs()),
            (Some(a), _) => a.wrapping_add(v.wrapping_mul(v)),
        });
    }
    for (o, a) in os.iter_mut().zip(acc) {
        *o = match (a, kind) {
            (Some(a), Mean) => int_from_i128(a / count.max(1) as i128),
            (Some(a), _) => int_from_i128(a),
            // An empty reduction: the identity of the operation.
            (None, Max) => T::from_f64(f64::NEG_INFINITY),
            (None, Min) => T::from_f64(f64::INFINITY),
            (None, Prod) => T::one(),
            (None, _) => T::zero(),
        };
    }
}

/// ArgMax / ArgMin along one axis; output i64.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ArgReduce {
    /// ArgMax when true, ArgMin when false.
    pub max: bool,
    pub axis: i64,
    pub keepdims: bool,
    /// On ties, the last index instead of the first.
    pub select_last_index: bool,
}

impl Default for ArgReduce {
    fn default() -> Self {
        ArgReduce {
            max: true,
            axis: 0,
            keepdims: true,
            select_last_index: false,
        }
    }
}

impl ArgReduce {
    fn out_shape(&self, x: &[usize]) -> OpResult<(usize, Vec<usize>)> {
        let axis = normalize_axis(self.axis, x.len())?;
        if x[axis] == 0 {
            op_bail!("input 0 has an empty axis {axis} (shape {x:?})");
        }
        let mut s = x.to_vec();
        if self.keepdims {
            s[axis] = 1;
        } else {
            s.remove(axis);
        }
        Ok((axis, s))
    }
}

impl Op for ArgReduce {
    fn name(&self) -> &'static str {
        if self.max {
            "ArgMax"
        } else {
            "ArgMin"
        }
    }

    fn prototype(&self) -> &'static Prototype {
        static P: Prototype = Prototype {
            inputs: &[input("data", DTypeSet::NUMERIC)],
            outputs: &[output("reduced")],
            value_inputs: &[],
        };
        &P
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let (_, s) = self.out_shape(ctx.shape(0)?)?;
        Ok(vec![TensorInfo::new(DType::I64, s)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let (axis, shape) = self.out_shape(x.shape())?;
        let (outer, len, inner) = split_at_axis(x.shape(), axis);
        let mut res = Vec::with_capacity(outer * inner);
        dispatch_all!(x.dtype(), T => {
            let xs = x.as_slice::<T>()?;
            for o in 0..outer {
                for i in 0..inner {
                    let at = |k: usize| xs[o * len * inner + k * inner + i];
                    let mut best = 0usize;
                    for k in 1..len {
                        let (v, b) = (at(k), at(best));
                        let better = if self.max { v > b } else { v < b };
                        if better || (self.select_last_index && v == b) {
                            best = k;
                        }
                    }
                    res.push(best as i64);
                }
            }
        });
        Ok(vec![Tensor::from_vec(&shape, res)?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, f32t};
    use super::*;

    fn run(r: &Reduce, x: &Tensor, axes: Option<&[i64]>) -> Tensor {
        let a = axes.map(|a| Tensor::from_slice(&[a.len()], a).unwrap());
        r.eval(&[Some(x), a.as_ref()]).unwrap().remove(0)
    }

    #[test]
    fn kinds_on_floats() {
        let x = f32t(&[2, 2], &[1., -2., 3., 4.]);
        let mk = |kind| Reduce {
            kind,
            keepdims: false,
            ..Default::default()
        };
        let cases = [
            (ReduceKind::Sum, [-1., 7.]),
            (ReduceKind::Mean, [-0.5, 3.5]),
            (ReduceKind::Max, [1., 4.]),
            (ReduceKind::Min, [-2., 3.]),
            (ReduceKind::Prod, [-2., 12.]),
            (ReduceKind::L1, [3., 7.]),
            (ReduceKind::L2, [5f64.sqrt(), 5.]),
            (ReduceKind::SumSquare, [5., 25.]),
            (ReduceKind::LogSum, [f64::NAN, 7f64.ln()]),
            (
                ReduceKind::LogSumExp,
                [
                    (1f64.exp() + (-2f64).exp()).ln(),
                    (3f64.exp() + 4f64.exp()).ln(),
                ],
            ),
        ];
        for (k, e) in cases {
            let y = run(&mk(k), &x, Some(&[1]));
            assert_eq!(y.shape(), &[2]);
            assert_close(&y, &e, 1e-6);
        }
    }

    #[test]
    fn axes_keepdims_noop() {
        let x = f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let r = Reduce::default();
        let y = run(&r, &x, None);
        assert_eq!(y.shape(), &[1, 1]);
        assert_close(&y, &[21.], 0.0);
        let y = run(&r, &x, Some(&[]));
        assert_eq!(y.shape(), &[1, 1]);
        let y = run(&r, &x, Some(&[-2]));
        assert_close(&y, &[5., 7., 9.], 0.0);
        assert_eq!(y.shape(), &[1, 3]);
        let noop = Reduce {
            noop_with_empty_axes: true,
            ..Default::default()
        };
        assert_eq!(run(&noop, &x, Some(&[])).shape(), &[2, 3]);
        let attr = Reduce {
            kind: ReduceKind::Mean,
            axes: Some(vec![1]),
            ..Default::default()
        };
        assert_close(&run(&attr, &x, None), &[2., 5.], 0.0);
        assert!(r
            .eval(&[Some(&x), Some(&Tensor::from_vec(&[1], vec![2i64]).unwrap())])
            .is_err());
    }

    #[test]
    fn ints_bools_and_empty() {
        let x = Tensor::from_vec(&[3], vec![i64::MAX - 1, 1, -5]).unwrap();
        let r = Reduce {
            keepdims: false,
            ..Default::default()
        };
        assert_eq!(run(&r, &x, None).to_i64_vec(), vec![i64::MAX - 5]);
        let u = Tensor::from_vec(&[2], vec![u64::MAX, 0]).unwrap();
        let m = Reduce {
            kind: ReduceKind::Max,
            ..Default::default()
        };
        assert_eq!(run(&m, &u, None).as_slice::<u64>().unwrap(), &[u64::MAX]);
        let mean = Reduce {
            kind: ReduceKind::Mean,
            ..Default::default()
        };
        let i = Tensor::from_vec(&[2], vec![3i32, 4]).unwrap();
        assert_eq!(run(&mean, &i, None).to_i64_vec(), vec![3]);
        let b = Tensor::from_bools(&[2, 2], &[false, true, false, false]).unwrap();
        let y = run(&m, &b, Some(&[1]));
        assert_eq!(y.dtype(), DType::Bool);
        assert_eq!(y.to_i64_vec(), vec![1, 0]);
        assert!(r.eval(&[Some(&b), None]).is_err());
        let e = Tensor::zeros(DType::F32, &[2, 0, 4]).unwrap();
        let y = run(&m, &e, Some(&[1]));
        assert_eq!(y.shape(), &[2, 1, 4]);
        assert!(y.to_f64_vec().iter().all(|v| *v == f64::NEG_INFINITY));
        let p = Reduce {
            kind: ReduceKind::Prod,
            ..Default::default()
        };
        assert!(run(&p, &e, Some(&[1]))
            .to_f64_vec()
            .iter()
            .all(|v| *v == 1.0));
    }

    #[test]
    fn argmax_argmin() {
        let x = f32t(&[2, 3], &[1., 5., 5., 7., 0., 7.]);
        let a = ArgReduce {
            axis: 1,
            ..Default::default()
        };
        let y = a.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[2, 1]);
        assert_eq!(y[0].to_i64_vec(), vec![1, 0]);
        let last = ArgReduce {
            axis: 1,
            select_last_index: true,
            keepdims: false,
            ..Default::default()
        };
        let y = last.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[2]);
        assert_eq!(y[0].to_i64_vec(), vec![2, 2]);
        let min = ArgReduce {
            max: false,
            axis: 0,
            ..Default::default()
        };
        assert_eq!(
            min.eval(&[Some(&x)]).unwrap()[0].to_i64_vec(),
            vec![0, 1, 0]
        );
    }
}
