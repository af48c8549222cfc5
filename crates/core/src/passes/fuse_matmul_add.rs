//! `fuse-matmul-add`: MatMul with a constant 2-D B `[K, N]` followed by Add of a constant `[N]`
//! (either operand order; leading ones allowed) becomes a FullyConnected with that bias.

use super::rewrite::{binary, constant, info, input, out, rewrite_all, Arg, Rewrite, Uses};
use super::Pass;
use crate::ops::elementwise::binary::BinaryKind;
use crate::ops::linalg::fully_connected::FullyConnected;
use crate::ops::linalg::matmul::MatMul;
use crate::{Graph, Result};

pub struct FuseMatMulAdd;

fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let mm = &g.nodes[i];
    mm.op.as_any().downcast_ref::<MatMul>()?;
    let (x, w) = (input(mm, 0)?, input(mm, 1)?);
    let wt = constant(g, w)?;
    let x_info = info(g, x)?;
    if wt.shape().len() != 2 || x_info.shape.is_empty() || !x_info.dtype.is_float() {
        return None;
    }
    let n = wt.shape()[1];
    let y = out(mm)?;
    let add_i = uses.single(y)?;
    let add = &g.nodes[add_i];
    let (kind, a, b) = binary(add)?;
    let other = match (kind, a == y, b == y) {
        (BinaryKind::Add, true, false) => b,
        (BinaryKind::Add, false, true) => a,
        _ => return None,
    };
    let y_info = info(g, y)?;
    if info(g, out(add)?)? != y_info {
        return None;
    }
    let bias = constant(g, other)?;
    let s = bias.shape();
    let row = s.last() == Some(&n) && s[..s.len() - 1].iter().all(|&d| d == 1);
    if !row || s.len() > y_info.shape.len() || bias.dtype() != x_info.dtype {
        return None;
    }
    let bias = bias.reshaped(&[n]).ok()?;
    Some(Rewrite {
        target: Some(add_i),
        op: Some(std::sync::Arc::new(FullyConnected::default())),
        inputs: vec![Arg::Value(x), Arg::Value(w), Arg::Const("bias", bias)],
        name: Some(mm.name.clone()),
        remove: vec![i],
        rewire: None,
    })
}

impl Pass for FuseMatMulAdd {
    fn name(&self) -> &'static str {
        "fuse-matmul-add"
    }

    fn description(&self) -> &'static str {
        "MatMul by a constant [K,N] matrix + Add of a constant [N] -> FullyConnected"
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
    use crate::Tensor;
    use std::sync::Arc;

    fn graph(w_shape: &[usize], bias_shape: &[usize], bias_first: bool, relu: bool) -> Graph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let w = g.add_constant("w", data(w_shape, 0.5));
        let y = g
            .add_op("mm", Arc::new(MatMul), vec![Some(x), Some(w)], 1)
            .unwrap()[0];
        let b = g.add_constant("b", data(bias_shape, 1.0));
        let ins = if bias_first {
            vec![Some(b), Some(y)]
        } else {
            vec![Some(y), Some(b)]
        };
        let mut y = g
            .add_op("add", Arc::new(Binary::new(BinaryKind::Add)), ins, 1)
            .unwrap()[0];
        if relu {
            let op = Arc::new(Unary {
                kind: UnaryKind::Relu,
            });
            y = g.add_op("relu", op, vec![Some(y)], 1).unwrap()[0];
        }
        g.outputs.push(y);
        g
    }

    #[test]
    fn matmul_add_becomes_fully_connected() {
        for x_shape in [&[2, 3, 5][..], &[4, 5], &[5]] {
            let x = data(x_shape, 1.0);
            for (bias, first) in [(&[7][..], false), (&[7][..], true), (&[1, 7][..], false)] {
                if bias.len() > x_shape.len() {
                    continue;
                }
                let opt =
                    check_fusion(&graph(&[5, 7], bias, first, false), &x, &["FullyConnected"]);
                assert_eq!(opt.nodes[0].name, "mm");
                let b = opt.value(opt.nodes[0].inputs[2].unwrap());
                assert_eq!(b.constant.as_ref().map(Tensor::shape), Some(&[7usize][..]));
            }
        }
        // With an activation after, fuse-activation folds it in too.
        let opt = check_fusion(
            &graph(&[5, 7], &[7], false, true),
            &data(&[3, 5], 1.0),
            &["FullyConnected"],
        );
        let fc = opt.nodes[0]
            .op
            .as_any()
            .downcast_ref::<FullyConnected>()
            .unwrap();
        assert!(fc.activation.is_some());
    }

    #[test]
    fn non_row_biases_and_batched_weights_stay() {
        let x = data(&[4, 5], 1.0);
        check_fusion(
            &graph(&[5, 7], &[4, 7], false, false),
            &x,
            &["MatMul", "Add"],
        );
        check_fusion(
            &graph(&[5, 7], &[4, 1], false, false),
            &x,
            &["MatMul", "Add"],
        );
        // A rank-3 bias changes the output rank.
        check_fusion(
            &graph(&[5, 7], &[1, 1, 7], false, false),
            &x,
            &["MatMul", "Add"],
        );
        check_fusion(
            &graph(&[2, 5, 7], &[7], false, false),
            &data(&[2, 4, 5], 1.0),
            &["MatMul", "Add"],
        );
    }
}
