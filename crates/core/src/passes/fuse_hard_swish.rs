//! `fuse-hard-swish`: decomposed hardswish becomes one HardSwish. Two forms occur in exports:
//! `x * HardSigmoid(x)` with alpha 1/6, beta 0.5 (mobilenet_v3), and
//! `x * Clip(x + 3, 0, 6) / 6` (ppocr; the division may be a multiplication by 1/6).

use super::rewrite::{
    binary, input, is_scalar, other_operand, out, rewrite_all, unary, Arg, Rewrite, Uses,
};
use super::Pass;
use crate::ops::elementwise::binary::BinaryKind;
use crate::ops::elementwise::clip::Clip;
use crate::ops::elementwise::unary::{Unary, UnaryKind};
use crate::{Graph, Result};

pub struct FuseHardSwish;

fn close(a: f32, b: f64) -> bool {
    (a as f64 - b).abs() <= 1e-4
}

fn hard_swish(target: usize, x: crate::ValueId, remove: Vec<usize>) -> Rewrite {
    Rewrite::replace(
        target,
        Unary {
            kind: UnaryKind::HardSwish,
        },
        vec![Arg::Value(x)],
        remove,
    )
}

/// `x * HardSigmoid(x)`, anchored at the HardSigmoid.
fn from_hard_sigmoid(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let h = &g.nodes[i];
    let UnaryKind::HardSigmoid { alpha, beta } = unary(h)? else {
        return None;
    };
    if !close(alpha, 1.0 / 6.0) || !close(beta, 0.5) {
        return None;
    }
    let x = input(h, 0)?;
    let s = out(h)?;
    let m_i = uses.single(s)?;
    if other_operand(&g.nodes[m_i], BinaryKind::Mul, s)? != x {
        return None;
    }
    Some(hard_swish(m_i, x, vec![i]))
}

/// `x * Clip(x + 3, 0, 6) / 6`, anchored at the Add.
fn from_clip(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let add = &g.nodes[i];
    let (BinaryKind::Add, a, b) = binary(add)? else {
        return None;
    };
    let x = if is_scalar(g, b, 3.0) {
        a
    } else if is_scalar(g, a, 3.0) {
        b
    } else {
        return None;
    };
    let shifted = out(add)?;
    let c_i = uses.single(shifted)?;
    let clip = &g.nodes[c_i];
    let attrs = clip.op.as_any().downcast_ref::<Clip>()?;
    let bound_ok = |slot: usize, attr: Option<f32>, want: f64| match input(clip, slot) {
        Some(v) => is_scalar(g, v, want),
        None => attr.is_some_and(|a| close(a, want)),
    };
    let zero_min = match input(clip, 1) {
        Some(v) => super::rewrite::scalar(g, v) == Some(0.0),
        None => attrs.min == Some(0.0),
    };
    if input(clip, 0) != Some(shifted) || !zero_min || !bound_ok(2, attrs.max, 6.0) {
        return None;
    }
    let clipped = out(clip)?;
    let m_i = uses.single(clipped)?;
    if other_operand(&g.nodes[m_i], BinaryKind::Mul, clipped)? != x {
        return None;
    }
    let prod = out(&g.nodes[m_i])?;
    let d_i = uses.single(prod)?;
    let d = &g.nodes[d_i];
    let scaled = match binary(d)? {
        (BinaryKind::Div, p, k) => p == prod && is_scalar(g, k, 6.0),
        (BinaryKind::Mul, _, _) => {
            other_operand(d, BinaryKind::Mul, prod).is_some_and(|k| is_scalar(g, k, 1.0 / 6.0))
        }
        _ => false,
    };
    scaled.then(|| hard_swish(d_i, x, vec![i, c_i, m_i]))
}

fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let x_float = |r: Rewrite| -> Option<Rewrite> {
        let Arg::Value(x) = r.inputs.first()? else {
            return None;
        };
        let t = g.value(*x).info.as_ref()?;
        let y = out(&g.nodes[r.target?])?;
        // A scalar constant operand must not have broadcast x to a bigger shape.
        (t.dtype.is_float() && g.value(y).info.as_ref() == Some(t)).then_some(r)
    };
    from_hard_sigmoid(g, uses, i)
        .or_else(|| from_clip(g, uses, i))
        .and_then(x_float)
}

impl Pass for FuseHardSwish {
    fn name(&self) -> &'static str {
        "fuse-hard-swish"
    }

    fn description(&self) -> &'static str {
        "x * HardSigmoid(x) and x * Clip(x + 3, 0, 6) / 6 -> HardSwish"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        rewrite_all(graph, matcher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::binary::Binary;
    use crate::ops::linalg::conv::Conv;
    use crate::passes::testutil::{check_fusion, data};
    use crate::{Op, Tensor, ValueId};
    use std::sync::Arc;

    fn bin(g: &mut Graph, name: &str, kind: BinaryKind, a: ValueId, b: ValueId) -> ValueId {
        g.add_op(name, Arc::new(Binary::new(kind)), vec![Some(a), Some(b)], 1)
            .unwrap()[0]
    }

    #[test]
    fn hard_sigmoid_form() {
        for swap in [false, true] {
            let mut g = Graph::new();
            let x = g.add_value("x");
            g.inputs.push(x);
            let hs = Arc::new(Unary {
                kind: UnaryKind::HardSigmoid {
                    alpha: 0.16666667,
                    beta: 0.5,
                },
            });
            let s = g.add_op("hs", hs, vec![Some(x)], 1).unwrap()[0];
            let y = if swap {
                bin(&mut g, "mul", BinaryKind::Mul, s, x)
            } else {
                bin(&mut g, "mul", BinaryKind::Mul, x, s)
            };
            g.outputs.push(y);
            check_fusion(&g, &data(&[2, 3, 4], 5.0), &["HardSwish"]);
        }
        // alpha 0.2 is a plain HardSigmoid gate, not hardswish.
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let hs = Arc::new(Unary {
            kind: UnaryKind::HARD_SIGMOID,
        });
        let s = g.add_op("hs", hs, vec![Some(x)], 1).unwrap()[0];
        let y = bin(&mut g, "mul", BinaryKind::Mul, x, s);
        g.outputs.push(y);
        check_fusion(&g, &data(&[5], 5.0), &["HardSigmoid", "Mul"]);
    }

    /// conv -> [x + 3 -> Clip(0, 6) -> x * . -> / 6]: becomes one Conv with a HardSwish epilogue.
    #[test]
    fn clip_form_then_folds_into_conv() {
        for (div, attr_bounds) in [(true, false), (false, false), (true, true)] {
            let mut g = Graph::new();
            let input = g.add_value("input");
            g.inputs.push(input);
            let w = g.add_constant("w", data(&[3, 2, 1, 1], 2.0));
            let x = g
                .add_op(
                    "conv",
                    Arc::new(Conv::default()),
                    vec![Some(input), Some(w)],
                    1,
                )
                .unwrap()[0];
            let three = g.add_constant("three", Tensor::scalar(3.0f32));
            let a = bin(&mut g, "add", BinaryKind::Add, three, x);
            let clip: Arc<dyn Op>;
            let mut ins = vec![Some(a)];
            if attr_bounds {
                clip = Arc::new(Clip {
                    min: Some(0.0),
                    max: Some(6.0),
                });
            } else {
                clip = Arc::new(Clip::default());
                ins.push(Some(g.add_constant("lo", Tensor::scalar(0.0f32))));
                ins.push(Some(g.add_constant("hi", Tensor::scalar(6.0f32))));
            }
            let c = g.add_op("clip", clip, ins, 1).unwrap()[0];
            let m = bin(&mut g, "mul", BinaryKind::Mul, x, c);
            let y = if div {
                let six = g.add_constant("six", Tensor::scalar(6.0f32));
                bin(&mut g, "div", BinaryKind::Div, m, six)
            } else {
                let sixth = g.add_constant("sixth", Tensor::scalar(1.0f32 / 6.0));
                bin(&mut g, "div", BinaryKind::Mul, sixth, m)
            };
            g.outputs.push(y);
            let opt = check_fusion(&g, &data(&[1, 2, 4, 4], 3.0), &["Conv"]);
            let conv = opt.nodes[0].op.as_any().downcast_ref::<Conv>().unwrap();
            assert_eq!(
                conv.activation,
                Some(crate::ops::elementwise::unary::UnaryKind::HardSwish)
            );
        }
    }

    #[test]
    fn wrong_constants_stay() {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let three = g.add_constant("three", Tensor::scalar(3.0f32));
        let a = bin(&mut g, "add", BinaryKind::Add, x, three);
        let clip = Arc::new(Clip {
            min: Some(0.0),
            max: Some(5.0),
        });
        let c = g.add_op("clip", clip, vec![Some(a)], 1).unwrap()[0];
        let m = bin(&mut g, "mul", BinaryKind::Mul, x, c);
        let six = g.add_constant("six", Tensor::scalar(6.0f32));
        let y = bin(&mut g, "div", BinaryKind::Div, m, six);
        g.outputs.push(y);
        check_fusion(&g, &data(&[7], 4.0), &["Add", "Clip", "Mul", "Div"]);
    }
}
