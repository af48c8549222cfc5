//! `fuse-gelu`: `x * 0.5 * (1 + Erf(x / sqrt(2)))` becomes Gelu (exact form). The scaling may be
//! `Div` by 1.4142 or `Mul` by 0.7071, and the 0.5 may multiply x, the Erf term, or the
//! product.

use super::rewrite::{
    binary, input, is_scalar, other_operand, out, producer, rewrite_all, unary, Arg, Rewrite, Uses,
};
use super::Pass;
use crate::ops::elementwise::binary::BinaryKind;
use crate::ops::elementwise::unary::{Unary, UnaryKind};
use crate::{Graph, Result, ValueId};
use std::f64::consts::{FRAC_1_SQRT_2, SQRT_2};

pub struct FuseGelu;

/// `x` when `v` is `x / sqrt(2)` or `x * (1/sqrt(2))`, with the producing node.
fn scaled_input(g: &Graph, v: ValueId) -> Option<(ValueId, usize)> {
    let p = producer(g, v)?;
    let n = &g.nodes[p];
    match binary(n)? {
        (BinaryKind::Div, x, k) if is_scalar(g, k, SQRT_2) => Some((x, p)),
        (BinaryKind::Mul, a, k) if is_scalar(g, k, FRAC_1_SQRT_2) => Some((a, p)),
        (BinaryKind::Mul, k, b) if is_scalar(g, k, FRAC_1_SQRT_2) => Some((b, p)),
        _ => None,
    }
}

/// Anchored at the Erf.
fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let erf = &g.nodes[i];
    if unary(erf)? != UnaryKind::Erf {
        return None;
    }
    let u = input(erf, 0)?;
    let (x, scale_i) = scaled_input(g, u)?;
    uses.single(u)?;
    let e = out(erf)?;
    let add_i = uses.single(e)?;
    let one = other_operand(&g.nodes[add_i], BinaryKind::Add, e)?;
    if !is_scalar(g, one, 1.0) {
        return None;
    }
    let a = out(&g.nodes[add_i])?;
    let m1_i = uses.single(a)?;
    let o = other_operand(&g.nodes[m1_i], BinaryKind::Mul, a)?;
    let m1_out = out(&g.nodes[m1_i])?;
    let (target, mut remove) = if o == x {
        // (x * (1 + erf)) * 0.5
        let m2_i = uses.single(m1_out)?;
        let k = other_operand(&g.nodes[m2_i], BinaryKind::Mul, m1_out)?;
        is_scalar(g, k, 0.5).then_some((m2_i, vec![m1_i]))?
    } else if is_scalar(g, o, 0.5) {
        // x * ((1 + erf) * 0.5)
        let m2_i = uses.single(m1_out)?;
        (other_operand(&g.nodes[m2_i], BinaryKind::Mul, m1_out)? == x)
            .then_some((m2_i, vec![m1_i]))?
    } else {
        // (x * 0.5) * (1 + erf)
        let h_i = producer(g, o)?;
        uses.single(o)?;
        let k = other_operand(&g.nodes[h_i], BinaryKind::Mul, x)?;
        is_scalar(g, k, 0.5).then_some((m1_i, vec![h_i]))?
    };
    remove.extend([scale_i, i, add_i]);
    let xt = g.value(x).info.as_ref()?;
    let y = out(&g.nodes[target])?;
    if !xt.dtype.is_float() || g.value(y).info.as_ref() != Some(xt) {
        return None;
    }
    Some(Rewrite::replace(
        target,
        Unary {
            kind: UnaryKind::Gelu { tanh: false },
        },
        vec![Arg::Value(x)],
        remove,
    ))
}

impl Pass for FuseGelu {
    fn name(&self) -> &'static str {
        "fuse-gelu"
    }

    fn description(&self) -> &'static str {
        "x * 0.5 * (1 + Erf(x / sqrt(2))) -> Gelu"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        rewrite_all(graph, matcher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::binary::Binary;
    use crate::passes::testutil::{check_fusion, data};
    use crate::Tensor;
    use std::sync::Arc;

    fn bin(g: &mut Graph, kind: BinaryKind, a: ValueId, b: ValueId) -> ValueId {
        let name = format!("n{}", g.nodes.len());
        g.add_op(name, Arc::new(Binary::new(kind)), vec![Some(a), Some(b)], 1)
            .unwrap()[0]
    }

    /// Builds the pattern with the given scaling (div by 1.4142 or mul by 0.7071) and the 0.5
    /// placement: 0 = on the product, 1 = on x, 2 = on the Erf term.
    fn graph(div: bool, half_at: usize, k: f32) -> Graph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let u = if div {
            let c = g.add_constant("sqrt2", Tensor::scalar((2.0f32.sqrt() * 1e4).round() / 1e4));
            bin(&mut g, BinaryKind::Div, x, c)
        } else {
            let c = g.add_constant("rsqrt2", Tensor::scalar(k));
            bin(&mut g, BinaryKind::Mul, c, x)
        };
        let e = g
            .add_op(
                "erf",
                Arc::new(Unary {
                    kind: UnaryKind::Erf,
                }),
                vec![Some(u)],
                1,
            )
            .unwrap()[0];
        let one = g.add_constant("one", Tensor::scalar(1.0f32));
        let a = bin(&mut g, BinaryKind::Add, one, e);
        let half = g.add_constant("half", Tensor::scalar(0.5f32));
        let y = match half_at {
            0 => {
                let m = bin(&mut g, BinaryKind::Mul, x, a);
                bin(&mut g, BinaryKind::Mul, m, half)
            }
            1 => {
                let h = bin(&mut g, BinaryKind::Mul, half, x);
                bin(&mut g, BinaryKind::Mul, h, a)
            }
            _ => {
                let h = bin(&mut g, BinaryKind::Mul, a, half);
                bin(&mut g, BinaryKind::Mul, x, h)
            }
        };
        g.outputs.push(y);
        g
    }

    #[test]
    fn orderings_fuse() {
        let x = data(&[2, 3, 8], 3.0);
        for div in [true, false] {
            for half_at in 0..3 {
                check_fusion(&graph(div, half_at, 0.5f32.sqrt()), &x, &["Gelu"]);
            }
        }
    }

    #[test]
    fn wrong_constants_stay() {
        let x = data(&[6], 3.0);
        let opt = check_fusion(
            &graph(false, 0, 0.6),
            &x,
            &["Mul", "Erf", "Add", "Mul", "Mul"],
        );
        assert_eq!(opt.nodes.len(), 5);
    }
}
