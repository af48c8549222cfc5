//! `remove-neutral`: `x + 0`, `0 + x`, `x - 0`, `x * 1`, `1 * x` and `x / 1` with a scalar
//! constant are `x` (bert exports add a zero attention mask). Only when the result has x's dtype
//! and shape, so the constant did not broadcast x to a bigger shape. (`-0 + 0` gives `+0`,
//! a difference no consumer can observe except through the sign of zero.)

use super::rewrite::{binary, out, rewrite_all, scalar, Arg, Rewrite, Uses};
use super::Pass;
use crate::ops::elementwise::binary::BinaryKind;
use crate::ops::elementwise::cast::Identity;
use crate::{Graph, Result};

pub struct RemoveNeutral;

fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let n = &g.nodes[i];
    let (kind, a, b) = binary(n)?;
    let is = |v, want: f64| scalar(g, v) == Some(want);
    let x = match kind {
        BinaryKind::Add if is(b, 0.0) => a,
        BinaryKind::Add if is(a, 0.0) => b,
        BinaryKind::Sub if is(b, 0.0) => a,
        BinaryKind::Mul if is(b, 1.0) => a,
        BinaryKind::Mul if is(a, 1.0) => b,
        BinaryKind::Div if is(b, 1.0) => a,
        _ => return None,
    };
    let y = out(n)?;
    let xi = g.value(x).info.as_ref()?;
    if g.value(y).info.as_ref() != Some(xi) {
        return None;
    }
    if uses.is_output(y) {
        // A graph output stays a value of its own.
        return Some(Rewrite::replace(i, Identity, vec![Arg::Value(x)], vec![]));
    }
    Some(Rewrite {
        target: None,
        op: None,
        inputs: vec![],
        name: None,
        remove: vec![i],
        rewire: Some((y, x)),
    })
}

impl Pass for RemoveNeutral {
    fn name(&self) -> &'static str {
        "remove-neutral"
    }

    fn description(&self) -> &'static str {
        "drop Add/Sub of 0 and Mul/Div by 1 (scalar constants)"
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
    use crate::{Tensor, ValueId};
    use std::sync::Arc;

    fn graph(kind: BinaryKind, k: Tensor, const_first: bool, then_neg: bool) -> Graph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let c = g.add_constant("k", k);
        let ins: Vec<Option<ValueId>> = if const_first {
            vec![Some(c), Some(x)]
        } else {
            vec![Some(x), Some(c)]
        };
        let mut y = g
            .add_op("bin", Arc::new(Binary::new(kind)), ins, 1)
            .unwrap()[0];
        if then_neg {
            let neg = Arc::new(Unary {
                kind: UnaryKind::Neg,
            });
            y = g.add_op("neg", neg, vec![Some(y)], 1).unwrap()[0];
        }
        g.outputs.push(y);
        g
    }

    #[test]
    fn neutral_operations_disappear() {
        let x = data(&[2, 3], 1.0);
        let cases = [
            (BinaryKind::Add, 0.0f32, false),
            (BinaryKind::Add, 0.0, true),
            (BinaryKind::Sub, 0.0, false),
            (BinaryKind::Mul, 1.0, false),
            (BinaryKind::Mul, 1.0, true),
            (BinaryKind::Div, 1.0, false),
        ];
        for (kind, k, first) in cases {
            check_fusion(&graph(kind, Tensor::scalar(k), first, true), &x, &["Neg"]);
            let k1 = Tensor::from_vec(&[1, 1], vec![k]).unwrap();
            check_fusion(&graph(kind, k1, first, true), &x, &["Neg"]);
            check_fusion(
                &graph(kind, Tensor::scalar(k), first, false),
                &x,
                &["Identity"],
            );
        }
    }

    #[test]
    fn other_constants_and_broadcasts_stay() {
        let x = data(&[2, 3], 1.0);
        check_fusion(
            &graph(BinaryKind::Sub, Tensor::scalar(0.0f32), true, true),
            &x,
            &["Sub", "Neg"],
        );
        check_fusion(
            &graph(BinaryKind::Div, Tensor::scalar(1.0f32), true, true),
            &x,
            &["Div", "Neg"],
        );
        check_fusion(
            &graph(BinaryKind::Add, Tensor::scalar(0.5f32), false, true),
            &x,
            &["Add", "Neg"],
        );
        // A rank-3 zero broadcasts x to [1, 2, 3].
        let z = Tensor::from_vec(&[1, 1, 1], vec![0.0f32]).unwrap();
        check_fusion(&graph(BinaryKind::Add, z, false, true), &x, &["Add", "Neg"]);
    }
}
