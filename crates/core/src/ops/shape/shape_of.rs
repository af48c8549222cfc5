//! Shape and Size: the input's dimensions (optionally a `start..end` range of them) and its
//! element count, as i64 tensors.

use crate::op::{input, output, required, Prototype};
use crate::{op_common, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    /// First dimension to report; negative counts from the end. Clamped to `[0, rank]`.
    pub start: i64,
    /// One past the last dimension; `None` means the rank.
    pub end: Option<i64>,
}

impl Shape {
    /// The output for an input shape.
    fn of(&self, shape: &[usize]) -> OpResult<Tensor> {
        let (s, e) = self.range(shape.len());
        let dims: Vec<i64> = shape[s..e].iter().map(|&d| d as i64).collect();
        Ok(Tensor::from_vec(&[dims.len()], dims)?)
    }

    /// The reported range of dimensions for a rank.
    pub fn range(&self, rank: usize) -> (usize, usize) {
        let r = rank as i64;
        let clamp = |v: i64| {
            let v = if v < 0 { v.saturating_add(r) } else { v };
            v.clamp(0, r) as usize
        };
        let s = clamp(self.start);
        let e = clamp(self.end.unwrap_or(r));
        (s, e.max(s))
    }
}

impl Op for Shape {
    op_common!(
        "Shape",
        Prototype {
            inputs: &[input("data", DTypeSet::ANY)],
            outputs: &[output("shape")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let (s, e) = self.range(ctx.shape(0)?.len());
        Ok(vec![TensorInfo::new(DType::I64, vec![e - s])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        Ok(vec![self.of(required(inputs, 0)?.shape())?])
    }

    fn fold_from_shapes(&self, ctx: &InferCtx) -> Option<OpResult<Vec<Tensor>>> {
        Some(ctx.shape(0).and_then(|s| Ok(vec![self.of(s)?])))
    }
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Size;

impl Op for Size {
    op_common!(
        "Size",
        Prototype {
            inputs: &[input("data", DTypeSet::ANY)],
            outputs: &[output("size")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(DType::I64, vec![])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        Ok(vec![Tensor::scalar(x.numel() as i64)])
    }

    fn fold_from_shapes(&self, ctx: &InferCtx) -> Option<OpResult<Vec<Tensor>>> {
        Some(
            ctx.shape(0)
                .map(|s| vec![Tensor::scalar(s.iter().product::<usize>() as i64)]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_ranges() {
        let x = Tensor::zeros(DType::F32, &[3, 4, 5]).unwrap();
        let run = |s: Shape| s.eval(&[Some(&x)]).unwrap()[0].to_i64_vec();
        assert_eq!(run(Shape::default()), vec![3, 4, 5]);
        assert_eq!(
            run(Shape {
                start: 1,
                end: Some(-1)
            }),
            vec![4]
        );
        assert_eq!(
            run(Shape {
                start: -10,
                end: Some(10)
            }),
            vec![3, 4, 5]
        );
        assert_eq!(
            run(Shape {
                start: 2,
                end: Some(1)
            }),
            Vec::<i64>::new()
        );
        assert_eq!(
            run(Shape {
                start: -1,
                end: None
            }),
            vec![5]
        );
        let s = Size.eval(&[Some(&x)]).unwrap();
        assert_eq!(s[0].shape(), &[] as &[usize]);
        assert_eq!(s[0].to_i64_vec(), vec![60]);
    }
}
