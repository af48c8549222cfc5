//! `fuse-scale-shift`: `Mul` by a per-channel constant followed by `Add` of a per-channel
//! constant (`[C,1,1]`, `[1,C,1,1]`, a scalar) is one per-channel affine map: it becomes a
//! BatchNormalization with mean 0, variance 1 and epsilon 0, whose kernel makes one pass over
//! the data instead of two (`v * scale + shift`, rounded as the Mul and the Add were). PP-OCR's
//! learnable affine blocks after activations have this form.

use super::fuse_conv_add_bias::per_channel;
use super::rewrite::{binary, constant, info, out, rewrite_all, Arg, Rewrite, Uses};
use super::Pass;
use crate::ops::elementwise::binary::BinaryKind;
use crate::ops::nn::norm::BatchNorm;
use crate::{DType, Graph, Result, Tensor, ValueId};

pub struct FuseScaleShift;

/// The data operand and per-channel constant values of a Mul or Add whose other operand has
/// the output's shape.
fn split(g: &Graph, a: ValueId, b: ValueId, y: &[usize]) -> Option<(ValueId, Vec<f32>)> {
    for (x, k) in [(a, b), (b, a)] {
        let x_info = info(g, x)?;
        if x_info.shape == y && x_info.dtype == DType::F32 && g.value(x).constant.is_none() {
            if let Some(vals) = constant(g, k).and_then(|t| per_channel(t, y)) {
                return Some((x, vals));
            }
        }
    }
    None
}

fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let mul = &g.nodes[i];
    let (kind, a, b) = binary(mul)?;
    if kind != BinaryKind::Mul {
        return None;
    }
    let m = out(mul)?;
    let y_shape = info(g, m)?.shape.clone();
    if y_shape.len() < 2 {
        return None;
    }
    let (x, scale) = split(g, a, b, &y_shape)?;
    let add_i = uses.single(m)?;
    let add = &g.nodes[add_i];
    let (kind, a2, b2) = binary(add)?;
    if kind != BinaryKind::Add || info(g, out(add)?)?.shape != y_shape {
        return None;
    }
    let (from, shift) = split(g, a2, b2, &y_shape)?;
    if from != m {
        return None;
    }
    let c = scale.len();
    let vec = |v: Vec<f32>| Tensor::from_vec(&[c], v).ok();
    Some(Rewrite::replace(
        add_i,
        BatchNorm { epsilon: 0.0 },
        vec![
            Arg::Value(x),
            Arg::Const("scale", vec(scale)?),
            Arg::Const("shift", vec(shift)?),
            Arg::Const("mean", vec(vec![0.0; c])?),
            Arg::Const("var", vec(vec![1.0; c])?),
        ],
        vec![i],
    ))
}

impl Pass for FuseScaleShift {
    fn name(&self) -> &'static str {
        "fuse-scale-shift"
    }

    fn description(&self) -> &'static str {
        "Mul then Add of per-channel constants -> one per-channel affine (BatchNormalization)"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        rewrite_all(graph, matcher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::binary::Binary;
    use crate::ops::elementwise::unary::{Unary, UnaryKind};
    use crate::passes::testutil::{check_fusion, data};
    use std::sync::Arc;

    /// x -> Relu -> Mul(const `ms`) -> Add(const `as_`) -> y, operands in either order.
    fn graph(ms: &[usize], as_: &[usize], swap: bool) -> Graph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let relu = Arc::new(Unary {
            kind: UnaryKind::Relu,
        });
        let r = g.add_op("relu", relu, vec![Some(x)], 1).unwrap()[0];
        let s = g.add_constant("s", data(ms, 1.5));
        let ins = if swap {
            vec![Some(s), Some(r)]
        } else {
            vec![Some(r), Some(s)]
        };
        let m = g
            .add_op("mul", Arc::new(Binary::new(BinaryKind::Mul)), ins, 1)
            .unwrap()[0];
        let b = g.add_constant("b", data(as_, 0.7));
        let ins = if swap {
            vec![Some(b), Some(m)]
        } else {
            vec![Some(m), Some(b)]
        };
        let y = g
            .add_op("add", Arc::new(Binary::new(BinaryKind::Add)), ins, 1)
            .unwrap()[0];
        g.outputs.push(y);
        g
    }

    #[test]
    fn per_channel_mul_add_becomes_one_affine() {
        let x = data(&[2, 3, 4, 5], 2.0);
        for (ms, as_) in [
            (&[1][..], &[1][..]),
            (&[], &[3, 1, 1]),
            (&[1, 3, 1, 1], &[]),
            (&[3, 1, 1], &[1, 3, 1, 1]),
        ] {
            for swap in [false, true] {
                let g = graph(ms, as_, swap);
                check_fusion(&g, &x, &["Relu", "BatchNormalization"]);
            }
        }
    }

    #[test]
    fn other_broadcasts_stay() {
        let x = data(&[2, 3, 4, 5], 2.0);
        for (ms, as_) in [(&[5][..], &[1][..]), (&[1][..], &[4, 1])] {
            let g = graph(ms, as_, false);
            check_fusion(&g, &x, &["Relu", "Mul", "Add"]);
        }
    }
}
