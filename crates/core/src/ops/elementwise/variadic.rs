//! Max, Min, Sum, Mean over one or more inputs with numpy broadcasting.
//!
//! Max and Min propagate NaN like numpy's `maximum`/`minimum`. Sum and Mean (float only)
//! accumulate in f64 and round once.

use super::{nan_max, nan_min, same_dtype};
use crate::op::{output, required, variadic, Prototype};
use crate::ops::util::{broadcast_all, broadcast_offsets};
use crate::{dispatch_all, op_bail, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum VariadicKind {
    Max,
    Min,
    Sum,
    Mean,
}

impl VariadicKind {
    /// Every kind, for the backends' tests (the match fails to compile on a new variant
    /// until it is listed).
    pub const ALL: [VariadicKind; 4] = {
        use VariadicKind::*;
        const fn listed(k: VariadicKind) -> VariadicKind {
            match k {
                Max | Min | Sum | Mean => k,
            }
        }
        [listed(Max), listed(Min), listed(Sum), listed(Mean)]
    };

    pub fn name(self) -> &'static str {
        match self {
            VariadicKind::Max => "Max",
            VariadicKind::Min => "Min",
            VariadicKind::Sum => "Sum",
            VariadicKind::Mean => "Mean",
        }
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Variadic {
    pub kind: VariadicKind,
}

static P_NUMERIC: Prototype = Prototype {
    inputs: &[variadic("data_0", DTypeSet::NUMERIC, 1)],
    outputs: &[output("out")],
    value_inputs: &[],
};
static P_FLOAT: Prototype = Prototype {
    inputs: &[variadic("data_0", DTypeSet::FLOAT, 1)],
    outputs: &[output("out")],
    value_inputs: &[],
};

impl Op for Variadic {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn prototype(&self) -> &'static Prototype {
        match self.kind {
            VariadicKind::Max | VariadicKind::Min => &P_NUMERIC,
            VariadicKind::Sum | VariadicKind::Mean => &P_FLOAT,
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        if ctx.is_empty() {
            op_bail!("{} needs at least one input", self.kind.name());
        }
        let dt = ctx.dtype(0)?;
        let mut shapes = Vec::with_capacity(ctx.len());
        for i in 0..ctx.len() {
            same_dtype(i, dt, ctx.dtype(i)?)?;
            shapes.push(ctx.shape(i)?);
        }
        Ok(vec![TensorInfo::new(dt, broadcast_all(shapes)?)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        if inputs.is_empty() {
            op_bail!("{} needs at least one input", self.kind.name());
        }
        let ts: Vec<&Tensor> = (0..inputs.len())
            .map(|i| required(inputs, i))
            .collect::<OpResult<_>>()?;
        let dt = ts[0].dtype();
        for (i, t) in ts.iter().enumerate() {
            same_dtype(i, dt, t.dtype())?;
        }
        let shape = broadcast_all(ts.iter().map(|t| t.shape()))?;
        // Allocate the output first: it checks the size before the offset tables are built.
        let mut out = Tensor::zeros(dt, &shape)?;
        let offsets: Vec<Vec<usize>> = ts
            .iter()
            .map(|t| broadcast_offsets(t.shape(), &shape))
            .collect();
        let kind = self.kind;
        dispatch_all!(dt, T => {
            let slices: Vec<&[T]> = ts.iter().map(|t| t.as_slice::<T>()).collect::<crate::Result<_>>()?;
            let o = out.as_mut_slice::<T>()?;
            for (i, o) in o.iter_mut().enumerate() {
                let first = slices[0][offsets[0][i]];
                let rest = slices.iter().zip(&offsets).skip(1).map(|(s, off)| s[off[i]]);
                *o = match kind {
                    VariadicKind::Max => rest.fold(first, nan_max),
                    VariadicKind::Min => rest.fold(first, nan_min),
                    VariadicKind::Sum => T::from_f64(rest.fold(first.to_f64(), |acc, v| acc + v.to_f64())),
                    VariadicKind::Mean => T::from_f64(
                        rest.fold(first.to_f64(), |acc, v| acc + v.to_f64()) / ts.len() as f64,
                    ),
                };
            }
        });
        Ok(vec![out])
    }

    fn flops(&self, inputs: &[Option<TensorInfo>], outputs: &[TensorInfo]) -> u64 {
        let n = inputs.len().saturating_sub(1) as u64;
        outputs.first().map_or(0, |o| o.numel() as u64 * n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, f32s, run};
    use super::*;

    #[test]
    fn variadic_ops_broadcast() {
        let a = f32s(&[3], &[3.0, 2.0, 1.0]);
        let b = f32s(&[2, 1], &[1.0, 4.0]);
        let c = f32s(&[], &[2.5]);
        let r = |k| run(&Variadic { kind: k }, &[Some(&a), Some(&b), Some(&c)]).remove(0);
        let mx = r(VariadicKind::Max);
        assert_eq!(mx.shape(), &[2, 3]);
        assert_close(&mx, &[3.0, 2.5, 2.5, 4.0, 4.0, 4.0]);
        assert_close(&r(VariadicKind::Min), &[1.0, 1.0, 1.0, 2.5, 2.0, 1.0]);
        assert_close(&r(VariadicKind::Sum), &[6.5, 5.5, 4.5, 9.5, 8.5, 7.5]);
        assert_close(
            &r(VariadicKind::Mean),
            &[6.5 / 3.0, 5.5 / 3.0, 1.5, 9.5 / 3.0, 8.5 / 3.0, 2.5],
        );
        let one = run(
            &Variadic {
                kind: VariadicKind::Sum,
            },
            &[Some(&a)],
        )
        .remove(0);
        assert_close(&one, &[3.0, 2.0, 1.0]);
    }

    #[test]
    fn ints_and_nan() {
        let a = Tensor::from_vec(&[2], vec![u64::MAX, 3]).unwrap();
        let b = Tensor::from_vec(&[2], vec![1u64, 7]).unwrap();
        let m = run(
            &Variadic {
                kind: VariadicKind::Max,
            },
            &[Some(&a), Some(&b)],
        )
        .remove(0);
        assert_eq!(m.as_slice::<u64>().unwrap(), &[u64::MAX, 7]);
        let x = f32s(&[2], &[f32::NAN, 1.0]);
        let y = f32s(&[2], &[1.0, f32::NAN]);
        let m = run(
            &Variadic {
                kind: VariadicKind::Min,
            },
            &[Some(&x), Some(&y)],
        )
        .remove(0);
        assert_close(&m, &[f64::NAN, f64::NAN]);
        assert!(Variadic {
            kind: VariadicKind::Max
        }
        .eval(&[Some(&a), Some(&x)])
        .is_err());
    }
}
