//! `fold-transpose`: Transpose of a Transpose becomes one Transpose of the original input, or
//! nothing when the two cancel. (Transpose of a constant never reaches the passes: shape
//! inference folds it into a constant, so a MatMul reading `Transpose(W)` reads a constant.)

use super::rewrite::{info, input, out, producer, rewrite_all, Arg, Rewrite, Uses};
use super::Pass;
use crate::ops::elementwise::cast::Identity;
use crate::ops::shape::transpose::Transpose;
use crate::{Graph, Result};
use std::sync::Arc;

pub struct FoldTranspose;

/// Anchored at the outer Transpose.
fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let outer = &g.nodes[i];
    let t2 = outer.op.as_any().downcast_ref::<Transpose>()?;
    let mid = input(outer, 0)?;
    let inner_i = producer(g, mid)?;
    let inner = &g.nodes[inner_i];
    let t1 = inner.op.as_any().downcast_ref::<Transpose>()?;
    let x = input(inner, 0)?;
    let rank = info(g, x)?.shape.len();
    let (p1, p2) = (t1.resolved_perm(rank).ok()?, t2.resolved_perm(rank).ok()?);
    // out[i] = mid[p2[i]] = x[p1[p2[i]]]
    let perm: Vec<usize> = p2
        .iter()
        .map(|&k| p1.get(k).copied())
        .collect::<Option<_>>()?;
    // The inner Transpose goes when the outer one was its only reader.
    let remove = if uses.single(mid) == Some(i) {
        vec![inner_i]
    } else {
        vec![]
    };
    let y = out(outer)?;
    if perm.iter().enumerate().all(|(k, &p)| k == p) {
        if uses.is_output(y) {
            return Some(Rewrite::replace(i, Identity, vec![Arg::Value(x)], remove));
        }
        let mut all = remove;
        all.push(i);
        return Some(Rewrite {
            target: None,
            op: None,
            inputs: vec![],
            name: None,
            remove: all,
            rewire: Some((y, x)),
        });
    }
    let op = Transpose {
        perm: Some(perm.iter().map(|&p| p as i64).collect()),
    };
    Some(Rewrite {
        target: Some(i),
        op: Some(Arc::new(op)),
        inputs: vec![Arg::Value(x)],
        name: None,
        remove,
        rewire: None,
    })
}

impl Pass for FoldTranspose {
    fn name(&self) -> &'static str {
        "fold-transpose"
    }

    fn description(&self) -> &'static str {
        "merge Transpose of Transpose into one (or none when they cancel)"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        rewrite_all(graph, matcher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::unary::{Unary, UnaryKind};
    use crate::ops::linalg::matmul::MatMul;
    use crate::passes::testutil::{check_fusion, data};
    use crate::ValueId;

    fn tr(g: &mut Graph, x: ValueId, perm: &[i64]) -> ValueId {
        let name = format!("t{}", g.nodes.len());
        let op = Transpose {
            perm: (!perm.is_empty()).then(|| perm.to_vec()),
        };
        g.add_op(name, Arc::new(op), vec![Some(x)], 1).unwrap()[0]
    }

    fn neg(g: &mut Graph, x: ValueId) -> ValueId {
        let op = Unary {
            kind: UnaryKind::Neg,
        };
        let name = format!("neg{}", g.nodes.len());
        g.add_op(name, Arc::new(op), vec![Some(x)], 1).unwrap()[0]
    }

    #[test]
    fn transposes_merge() {
        let x_t = data(&[2, 3, 4, 5], 1.0);
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let a = tr(&mut g, x, &[0, 2, 1, 3]);
        let b = tr(&mut g, a, &[0, 1, 3, 2]);
        g.outputs.push(b);
        let opt = check_fusion(&g, &x_t, &["Transpose"]);
        let t = opt.nodes[0]
            .op
            .as_any()
            .downcast_ref::<Transpose>()
            .unwrap();
        assert_eq!(t.perm, Some(vec![0, 2, 3, 1]));

        // Three in a row, the middle one also read elsewhere.
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let a = tr(&mut g, x, &[3, 2, 1, 0]);
        let b = tr(&mut g, a, &[1, 0, 2, 3]);
        let c = tr(&mut g, b, &[0, 3, 2, 1]);
        let side = neg(&mut g, b);
        g.outputs.extend([c, side]);
        check_fusion(&g, &x_t, &["Transpose", "Transpose", "Neg"]);
    }

    #[test]
    fn cancelling_transposes_disappear() {
        let x_t = data(&[2, 3, 4], 1.0);
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let a = tr(&mut g, x, &[1, 2, 0]);
        let b = tr(&mut g, a, &[2, 0, 1]);
        let y = neg(&mut g, b);
        g.outputs.push(y);
        check_fusion(&g, &x_t, &["Neg"]);
        // As a graph output the result stays a distinct value (an Identity).
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let a = tr(&mut g, x, &[2, 1, 0]);
        let b = tr(&mut g, a, &[]);
        g.outputs.push(b);
        check_fusion(&g, &x_t, &["Identity"]);
    }

    #[test]
    fn transpose_of_a_constant_folds_before_the_passes() {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let w = g.add_constant("w", data(&[3, 4], 1.0));
        let wt = tr(&mut g, w, &[1, 0]);
        let y = g
            .add_op("mm", Arc::new(MatMul), vec![Some(x), Some(wt)], 1)
            .unwrap()[0];
        g.outputs.push(y);
        let opt = check_fusion(&g, &data(&[2, 4], 1.0), &["MatMul"]);
        let b = opt.nodes[0].inputs[1].unwrap();
        assert!(opt.value(b).constant.is_some());
    }
}
