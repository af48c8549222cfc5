//! `fold-conv-scale`: Conv followed by Mul of a per-output-channel constant (`[M,1,1]`,
//! `[1,M,1,1]`, a scalar) scales the Conv's weights and bias instead. PP-OCR's MobileOne and
//! learnable-affine blocks write `Conv -> Mul(s) -> Add(b)`; with `fuse-conv-add-bias` after
//! this pass the whole affine lands in the Conv.

use super::fuse_conv_add_bias::per_channel;
use super::rewrite::{binary, constant, info, input, out, rewrite_all, Arg, Rewrite, Uses};
use super::Pass;
use crate::ops::elementwise::binary::BinaryKind;
use crate::ops::linalg::conv::Conv;
use crate::{DType, Graph, Result, Tensor};

pub struct FoldConvScale;

fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let conv = &g.nodes[i];
    let c = conv.op.as_any().downcast_ref::<Conv>()?;
    if c.activation.is_some() {
        return None;
    }
    let y = out(conv)?;
    let mul_i = uses.single(y)?;
    let mul = &g.nodes[mul_i];
    let (kind, a, b) = binary(mul)?;
    let other = match (kind, a == y, b == y) {
        (BinaryKind::Mul, true, false) => b,
        (BinaryKind::Mul, false, true) => a,
        _ => return None,
    };
    let y_shape = &info(g, y)?.shape;
    if info(g, out(mul)?)?.shape != *y_shape {
        return None;
    }
    let scale = per_channel(constant(g, other)?, y_shape)?;
    let w = constant(g, input(conv, 1)?)?;
    if w.dtype() != DType::F32 || w.shape().first() != Some(&scale.len()) {
        return None;
    }
    // W is [M, C/group, k...]: output channel m owns the m-th contiguous block.
    let per = w.numel() / scale.len().max(1);
    let mut wv = w.as_slice::<f32>().ok()?.to_vec();
    for (block, s) in wv.chunks_mut(per.max(1)).zip(&scale) {
        block.iter_mut().for_each(|v| *v *= s);
    }
    let w = Tensor::from_vec(w.shape(), wv).ok()?;
    let mut inputs = vec![Arg::Value(input(conv, 0)?), Arg::Const("scaled_w", w)];
    if let Some(b) = input(conv, 2) {
        let t = constant(g, b)?;
        if t.dtype() != DType::F32 || t.numel() != scale.len() {
            return None;
        }
        let bv: Vec<f32> = t
            .as_slice::<f32>()
            .ok()?
            .iter()
            .zip(&scale)
            .map(|(b, s)| b * s)
            .collect();
        inputs.push(Arg::Const(
            "scaled_b",
            Tensor::from_vec(&[bv.len()], bv).ok()?,
        ));
    }
    Some(Rewrite {
        target: Some(mul_i),
        op: Some(conv.op.clone()),
        inputs,
        name: Some(conv.name.clone()),
        remove: vec![i],
        rewire: None,
    })
}

impl Pass for FoldConvScale {
    fn name(&self) -> &'static str {
        "fold-conv-scale"
    }

    fn description(&self) -> &'static str {
        "fold Mul by a per-channel constant after Conv into the Conv's weights and bias"
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

    /// x -> Conv(group, bias?) -> Mul(const of `shape`) [-> Add(const) -> HardSwish] -> y
    fn graph(group: usize, with_bias: bool, shape: &[usize], mul_first: bool, tail: bool) -> Graph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let m = 4;
        let w = g.add_constant("w", data(&[m, 4 / group, 3, 3], 0.5));
        let mut ins = vec![Some(x), Some(w)];
        if with_bias {
            ins.push(Some(g.add_constant("b", data(&[m], 0.3))));
        }
        let conv = Conv {
            group,
            ..Conv::default()
        };
        let c = g.add_op("conv", Arc::new(conv), ins, 1).unwrap()[0];
        let k = g.add_constant("k", data(shape, 1.5));
        let ins = if mul_first {
            vec![Some(k), Some(c)]
        } else {
            vec![Some(c), Some(k)]
        };
        let mut y = g
            .add_op("mul", Arc::new(Binary::new(BinaryKind::Mul)), ins, 1)
            .unwrap()[0];
        if tail {
            let b = g.add_constant("shift", data(&[1], 0.7));
            let add = Arc::new(Binary::new(BinaryKind::Add));
            y = g.add_op("add", add, vec![Some(y), Some(b)], 1).unwrap()[0];
            let hs = Arc::new(Unary {
                kind: UnaryKind::HardSwish,
            });
            y = g.add_op("hs", hs, vec![Some(y)], 1).unwrap()[0];
        }
        g.outputs.push(y);
        g
    }

    #[test]
    fn per_channel_scales_fold_into_the_weights() {
        let x = data(&[1, 4, 6, 5], 1.0);
        for shape in [&[4, 1, 1][..], &[1, 4, 1, 1], &[], &[1]] {
            for with_bias in [false, true] {
                for mul_first in [false, true] {
                    for group in [1, 2, 4] {
                        let g = graph(group, with_bias, shape, mul_first, false);
                        let opt = check_fusion(&g, &x, &["Conv"]);
                        assert_eq!(opt.nodes[0].name, "conv");
                    }
                }
            }
        }
    }

    #[test]
    fn conv_mul_add_hardswish_becomes_one_conv() {
        let x = data(&[1, 4, 6, 5], 1.0);
        let g = graph(1, true, &[1], true, true);
        let opt = check_fusion(&g, &x, &["Conv"]);
        let c = opt.nodes[0].op.as_any().downcast_ref::<Conv>().unwrap();
        assert!(c.activation.is_some());
    }

    #[test]
    fn other_broadcasts_stay() {
        let x = data(&[1, 4, 6, 5], 1.0);
        for shape in [&[4, 1, 3][..], &[1, 1, 1, 3], &[3]] {
            let g = graph(1, false, shape, false, false);
            check_fusion(&g, &x, &["Conv", "Mul"]);
        }
    }
}
