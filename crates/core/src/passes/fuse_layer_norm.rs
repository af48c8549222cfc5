//! `fuse-layer-norm`: the decomposed layer normalization of BERT-style exports
//!
//! ```text
//! m = ReduceMean(x, last axis); d = x - m; v = ReduceMean(d^2); s = Sqrt(v + eps)
//! y = (d / s) * gamma + beta          (d^2 as Pow(d, 2) or Mul(d, d); gamma, beta optional)
//! ```
//!
//! becomes LayerNormalization(axis = -1). Only over the last axis, with constant eps / gamma /
//! beta (gamma and beta `[D]` with optional leading ones), and when the intermediate values
//! have no readers outside the pattern.

use super::rewrite::{
    binary, constant, info, input, is_scalar, other_operand, out, rewrite_all, scalar, unary, Arg,
    Rewrite, Uses,
};
use super::Pass;
use crate::ops::elementwise::binary::BinaryKind;
use crate::ops::elementwise::unary::UnaryKind;
use crate::ops::nn::norm::LayerNorm;
use crate::ops::nn::reduce::{Reduce, ReduceKind};
use crate::ops::nn::tensor_from_f64;
use crate::{DType, Graph, Node, Result, Tensor, ValueId};

pub struct FuseLayerNorm;

/// Whether `n` is a keepdims ReduceMean of its input 0 over exactly the last axis.
fn mean_over_last(g: &Graph, n: &Node) -> bool {
    let Some(r) = n.op.as_any().downcast_ref::<Reduce>() else {
        return false;
    };
    if r.kind != ReduceKind::Mean || !r.keepdims {
        return false;
    }
    let Some(rank) = input(n, 0)
        .and_then(|x| info(g, x))
        .map(|i| i.shape.len() as i64)
    else {
        return false;
    };
    let axes = match input(n, 1) {
        Some(v) => match constant(g, v) {
            Some(t) => t.to_i64_vec(),
            None => return false,
        },
        None => r.axes.clone().unwrap_or_default(),
    };
    rank >= 1 && matches!(axes.as_slice(), [a] if *a == -1 || *a == rank - 1)
}

/// A gamma or beta constant: `[D]` with optional leading ones, reshaped to `[D]`.
fn per_feature(g: &Graph, v: ValueId, d: usize, dtype: DType) -> Option<Tensor> {
    let t = constant(g, v)?;
    let s = t.shape();
    let ok = s.last() == Some(&d) && s[..s.len() - 1].iter().all(|&k| k == 1);
    (ok && t.dtype() == dtype).then(|| t.reshaped(&[d]).ok())?
}

/// Anchored at the first ReduceMean.
fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let r1 = &g.nodes[i];
    if !mean_over_last(g, r1) {
        return None;
    }
    let x = input(r1, 0)?;
    let xi = info(g, x)?;
    let dim = *xi.shape.last()?;
    if !xi.dtype.is_float() {
        return None;
    }
    let mean = out(r1)?;
    let sub_i = uses.single(mean)?;
    match binary(&g.nodes[sub_i])? {
        (BinaryKind::Sub, a, b) if a == x && b == mean => {}
        _ => return None,
    }
    let d = out(&g.nodes[sub_i])?;
    // d feeds the square and the division, nothing else.
    let [p, q] = uses.readers(d) else {
        return None;
    };
    if uses.is_output(d) {
        return None;
    }
    let is_square = |n: usize| match binary(&g.nodes[n]) {
        Some((BinaryKind::Pow, a, e)) => a == d && is_scalar(g, e, 2.0),
        Some((BinaryKind::Mul, a, b)) => a == d && b == d,
        _ => false,
    };
    let (sq_i, div_i) = if is_square(*p) { (*p, *q) } else { (*q, *p) };
    if !is_square(sq_i) {
        return None;
    }
    let r2_i = uses.single(out(&g.nodes[sq_i])?)?;
    if !mean_over_last(g, &g.nodes[r2_i]) {
        return None;
    }
    let var = out(&g.nodes[r2_i])?;
    let add_i = uses.single(var)?;
    let eps = scalar(g, other_operand(&g.nodes[add_i], BinaryKind::Add, var)?)?;
    let sqrt_i = uses.single(out(&g.nodes[add_i])?)?;
    if unary(&g.nodes[sqrt_i])? != UnaryKind::Sqrt {
        return None;
    }
    let std = out(&g.nodes[sqrt_i])?;
    match binary(&g.nodes[div_i])? {
        (BinaryKind::Div, a, b) if a == d && b == std && uses.single(std) == Some(div_i) => {}
        _ => return None,
    }
    let mut remove = vec![i, sub_i, sq_i, r2_i, add_i, sqrt_i];
    let mut target = div_i;
    let mut gamma = None;
    let mut beta = None;
    let normed = out(&g.nodes[div_i])?;
    if let Some(m_i) = uses.single(normed) {
        let gm = other_operand(&g.nodes[m_i], BinaryKind::Mul, normed);
        if let Some(t) = gm.and_then(|v| per_feature(g, v, dim, xi.dtype)) {
            remove.push(target);
            target = m_i;
            gamma = Some(t);
            let scaled = out(&g.nodes[m_i])?;
            if let Some(a_i) = uses.single(scaled) {
                let bv = other_operand(&g.nodes[a_i], BinaryKind::Add, scaled);
                if let Some(t) = bv.and_then(|v| per_feature(g, v, dim, xi.dtype)) {
                    remove.push(target);
                    target = a_i;
                    beta = Some(t);
                }
            }
        }
    }
    if info(g, out(&g.nodes[target])?)? != xi {
        return None;
    }
    let gamma = match gamma {
        Some(t) => t,
        None => tensor_from_f64(xi.dtype, &[dim], &vec![1.0; dim]).ok()?,
    };
    let op = LayerNorm {
        axis: -1,
        epsilon: eps,
        ..LayerNorm::default()
    };
    let beta = beta.map_or(Arg::Absent, |t| Arg::Const("beta", t));
    Some(Rewrite::replace(
        target,
        op,
        vec![Arg::Value(x), Arg::Const("gamma", gamma), beta],
        remove,
    ))
}

impl Pass for FuseLayerNorm {
    fn name(&self) -> &'static str {
        "fuse-layer-norm"
    }

    fn description(&self) -> &'static str {
        "decomposed mean/variance normalization over the last axis -> LayerNormalization"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        rewrite_all(graph, matcher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::binary::Binary;
    use crate::ops::elementwise::unary::Unary;
    use crate::passes::testutil::{check_fusion, data};
    use std::sync::Arc;

    fn bin(g: &mut Graph, kind: BinaryKind, a: ValueId, b: ValueId) -> ValueId {
        let name = format!("n{}", g.nodes.len());
        g.add_op(name, Arc::new(Binary::new(kind)), vec![Some(a), Some(b)], 1)
            .unwrap()[0]
    }

    fn mean(g: &mut Graph, x: ValueId, axes_input: bool, axis: i64) -> ValueId {
        let name = format!("n{}", g.nodes.len());
        if axes_input {
            let a = g.add_constant(
                format!("{name}.axes"),
                Tensor::from_vec(&[1], vec![axis]).unwrap(),
            );
            g.add_op(
                name,
                Arc::new(Reduce {
                    kind: ReduceKind::Mean,
                    ..Reduce::default()
                }),
                vec![Some(x), Some(a)],
                1,
            )
            .unwrap()[0]
        } else {
            let op = Reduce {
                kind: ReduceKind::Mean,
                axes: Some(vec![axis]),
                ..Reduce::default()
            };
            g.add_op(name, Arc::new(op), vec![Some(x)], 1).unwrap()[0]
        }
    }

    /// The decomposed pattern over `axis` of a [2, 3, 8] input.
    fn graph(pow: bool, axes_input: bool, affine: usize, axis: i64, leak: bool) -> Graph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let m = mean(&mut g, x, axes_input, axis);
        let d = bin(&mut g, BinaryKind::Sub, x, m);
        let sq = if pow {
            let two = g.add_constant("two", Tensor::scalar(2.0f32));
            bin(&mut g, BinaryKind::Pow, d, two)
        } else {
            bin(&mut g, BinaryKind::Mul, d, d)
        };
        let v = mean(&mut g, sq, axes_input, axis);
        let eps = g.add_constant("eps", Tensor::scalar(1e-5f32));
        let e = bin(&mut g, BinaryKind::Add, v, eps);
        let s = g
            .add_op(
                "sqrt",
                Arc::new(Unary {
                    kind: UnaryKind::Sqrt,
                }),
                vec![Some(e)],
                1,
            )
            .unwrap()[0];
        let mut y = bin(&mut g, BinaryKind::Div, d, s);
        if affine >= 1 {
            let gamma = g.add_constant("gamma", data(&[8], 2.0));
            y = bin(&mut g, BinaryKind::Mul, gamma, y);
        }
        if affine >= 2 {
            let beta = g.add_constant("beta", data(&[1, 8], 1.0));
            y = bin(&mut g, BinaryKind::Add, y, beta);
        }
        g.outputs.push(y);
        if leak {
            g.outputs.push(v);
        }
        g
    }

    #[test]
    fn decomposed_forms_fuse() {
        let x = data(&[2, 3, 8], 3.0);
        for pow in [true, false] {
            for axes_input in [false, true] {
                for affine in 0..3 {
                    for axis in [-1, 2] {
                        let g = graph(pow, axes_input, affine, axis, false);
                        let opt = check_fusion(&g, &x, &["LayerNormalization"]);
                        let ln = opt.nodes[0]
                            .op
                            .as_any()
                            .downcast_ref::<LayerNorm>()
                            .unwrap();
                        assert!((ln.epsilon - 1e-5).abs() < 1e-9);
                        assert_eq!(opt.nodes[0].inputs[2].is_some(), affine == 2);
                    }
                }
            }
        }
    }

    #[test]
    fn other_axes_or_shared_values_stay() {
        let x = data(&[2, 3, 8], 3.0);
        let g = graph(true, false, 2, 1, false);
        let opt = check_fusion(
            &g,
            &x,
            &[
                "ReduceMean",
                "Sub",
                "Pow",
                "ReduceMean",
                "Add",
                "Sqrt",
                "Div",
                "Mul",
                "Add",
            ],
        );
        assert_eq!(opt.nodes.len(), 9);
        let g = graph(true, false, 2, -1, true);
        let opt = check_fusion(
            &g,
            &x,
            &[
                "ReduceMean",
                "Sub",
                "Pow",
                "ReduceMean",
                "Add",
                "Sqrt",
                "Div",
                "Mul",
                "Add",
            ],
        );
        assert_eq!(opt.nodes.len(), 9);
    }
}
