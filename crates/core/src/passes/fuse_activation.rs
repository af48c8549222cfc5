//! `fuse-activation`: Conv / ConvTranspose / Gemm / FullyConnected followed by an element-wise
//! activation ([`UnaryKind::fuses_as_epilogue`], or Clip with constant bounds) becomes the
//! producer with that activation as its epilogue.

use super::rewrite::{constant, input, out, rewrite_all, unary, Arg, Rewrite, Uses};
use super::Pass;
use crate::ops::elementwise::clip::Clip;
use crate::ops::elementwise::unary::UnaryKind;
use crate::ops::linalg::conv::Conv;
use crate::ops::linalg::conv_transpose::ConvTranspose;
use crate::ops::linalg::fully_connected::FullyConnected;
use crate::ops::linalg::gemm::Gemm;
use crate::{Graph, Node, Op, Result};
use std::sync::Arc;

pub struct FuseActivation;

/// The activation a node computes on its input 0, if it is one the epilogue takes.
fn activation_of(g: &Graph, n: &Node) -> Option<UnaryKind> {
    if let Some(kind) = unary(n) {
        return kind.fuses_as_epilogue().then_some(kind);
    }
    let clip = n.op.as_any().downcast_ref::<Clip>()?;
    // A bound input wins over the attribute; it must be a one-element constant.
    let bound = |i: usize, attr: Option<f32>, none: f32| -> Option<f32> {
        match input(n, i) {
            Some(v) => {
                let t = constant(g, v)?;
                (t.numel() == 1 && t.dtype().is_float()).then(|| t.to_f64_vec()[0] as f32)
            }
            None => Some(attr.unwrap_or(none)),
        }
    };
    let min = bound(1, clip.min, f32::NEG_INFINITY)?;
    let max = bound(2, clip.max, f32::INFINITY)?;
    Some(UnaryKind::Clip { min, max })
}

/// The producer op with `act` as its epilogue, when it supports one and has none yet.
fn with_activation(op: &dyn Op, act: UnaryKind) -> Option<Arc<dyn Op>> {
    let any = op.as_any();
    if let Some(c) = any.downcast_ref::<Conv>() {
        return c.activation.is_none().then(|| {
            Arc::new(Conv {
                activation: Some(act),
                ..c.clone()
            }) as Arc<dyn Op>
        });
    }
    if let Some(c) = any.downcast_ref::<ConvTranspose>() {
        return c.activation.is_none().then(|| {
            Arc::new(ConvTranspose {
                activation: Some(act),
                ..c.clone()
            }) as Arc<dyn Op>
        });
    }
    if let Some(c) = any.downcast_ref::<Gemm>() {
        return c.activation.is_none().then(|| {
            Arc::new(Gemm {
                activation: Some(act),
                ..c.clone()
            }) as Arc<dyn Op>
        });
    }
    if let Some(c) = any.downcast_ref::<FullyConnected>() {
        return c.activation.is_none().then(|| {
            Arc::new(FullyConnected {
                activation: Some(act),
            }) as Arc<dyn Op>
        });
    }
    None
}

fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let p = &g.nodes[i];
    let y = out(p)?;
    if !g.value(y).info.as_ref()?.dtype.is_float() {
        return None;
    }
    let a_i = uses.single(y)?;
    let a = &g.nodes[a_i];
    // The activation reads y as its data input only (not as a Clip bound).
    if input(a, 0) != Some(y) || a.inputs.iter().skip(1).flatten().any(|&v| v == y) {
        return None;
    }
    let op = with_activation(p.op.as_ref(), activation_of(g, a)?)?;
    let inputs = p
        .inputs
        .iter()
        .map(|v| v.map_or(Arg::Absent, Arg::Value))
        .collect();
    // The activation node keeps its output value and takes the producer's op and name.
    Some(Rewrite {
        target: Some(a_i),
        op: Some(op),
        inputs,
        name: Some(p.name.clone()),
        remove: vec![i],
        rewire: None,
    })
}

impl Pass for FuseActivation {
    fn name(&self) -> &'static str {
        "fuse-activation"
    }

    fn description(&self) -> &'static str {
        "fold an activation (Relu, Clip, Sigmoid, ...; UnaryKind::fuses_as_epilogue) into the preceding Conv, ConvTranspose, Gemm or FullyConnected"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        rewrite_all(graph, matcher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::unary::Unary;
    use crate::passes::testutil::{check_fusion, data};
    use crate::Tensor;

    fn conv_then(act: Arc<dyn Op>, extra: Vec<Tensor>, as_output_too: bool) -> (Graph, Tensor) {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let w = g.add_constant("w", data(&[3, 2, 3, 3], 0.5));
        let b = g.add_constant("b", data(&[3], 0.3));
        let c = g
            .add_op(
                "conv",
                Arc::new(Conv::default()),
                vec![Some(x), Some(w), Some(b)],
                1,
            )
            .unwrap()[0];
        let mut ins = vec![Some(c)];
        for (k, t) in extra.into_iter().enumerate() {
            ins.push(Some(g.add_constant(format!("k{k}"), t)));
        }
        let y = g.add_op("act", act, ins, 1).unwrap()[0];
        g.outputs.push(y);
        if as_output_too {
            g.outputs.push(c);
        }
        (g, data(&[1, 2, 5, 5], 2.0))
    }

    #[test]
    fn activations_fold_into_conv() {
        let un = |kind| Arc::new(Unary { kind }) as Arc<dyn Op>;
        let cases: Vec<(Arc<dyn Op>, Vec<Tensor>, UnaryKind)> = vec![
            (un(UnaryKind::Relu), vec![], UnaryKind::Relu),
            (
                un(UnaryKind::LeakyRelu { alpha: 0.1 }),
                vec![],
                UnaryKind::LeakyRelu { alpha: 0.1 },
            ),
            (
                un(UnaryKind::HARD_SIGMOID),
                vec![],
                UnaryKind::HardSigmoid {
                    alpha: 0.2,
                    beta: 0.5,
                },
            ),
            (un(UnaryKind::HardSwish), vec![], UnaryKind::HardSwish),
            (un(UnaryKind::Sigmoid), vec![], UnaryKind::Sigmoid),
            (un(UnaryKind::Mish), vec![], UnaryKind::Mish),
            (
                Arc::new(Clip::default()),
                vec![Tensor::scalar(0.0f32), Tensor::scalar(6.0f32)],
                UnaryKind::Clip { min: 0.0, max: 6.0 },
            ),
            (
                Arc::new(Clip {
                    min: Some(-1.0),
                    max: None,
                }),
                vec![],
                UnaryKind::Clip {
                    min: -1.0,
                    max: f32::INFINITY,
                },
            ),
        ];
        for (op, extra, want) in cases {
            let (g, x) = conv_then(op, extra, false);
            let opt = check_fusion(&g, &x, &["Conv"]);
            let conv = opt.nodes[0].op.as_any().downcast_ref::<Conv>().unwrap();
            assert_eq!(conv.activation, Some(want));
            assert_eq!(opt.nodes[0].name, "conv");
        }
    }

    #[test]
    fn shared_or_output_values_are_not_fused() {
        let relu = Arc::new(Unary {
            kind: UnaryKind::Relu,
        });
        let (g, x) = conv_then(relu, vec![], true);
        check_fusion(&g, &x, &["Conv", "Relu"]);
        // Unsupported activation (Tanh) stays.
        let tanh = Arc::new(Unary {
            kind: UnaryKind::Tanh,
        });
        let (g, x) = conv_then(tanh, vec![], false);
        check_fusion(&g, &x, &["Conv", "Tanh"]);
    }

    #[test]
    fn gemm_and_conv_transpose_take_activations() {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let w = g.add_constant("w", data(&[4, 3], 1.0));
        let y = g
            .add_op("gemm", Arc::new(Gemm::default()), vec![Some(x), Some(w)], 1)
            .unwrap()[0];
        let y = g
            .add_op(
                "relu",
                Arc::new(Unary {
                    kind: UnaryKind::Relu,
                }),
                vec![Some(y)],
                1,
            )
            .unwrap()[0];
        g.outputs.push(y);
        check_fusion(&g, &data(&[2, 4], 1.0), &["Gemm"]);

        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let w = g.add_constant("w", data(&[2, 3, 2, 2], 1.0));
        let y = g
            .add_op(
                "convt",
                Arc::new(ConvTranspose::default()),
                vec![Some(x), Some(w)],
                1,
            )
            .unwrap()[0];
        let y = g
            .add_op(
                "sig",
                Arc::new(Unary {
                    kind: UnaryKind::Sigmoid,
                }),
                vec![Some(y)],
                1,
            )
            .unwrap()[0];
        g.outputs.push(y);
        check_fusion(&g, &data(&[1, 2, 3, 3], 1.0), &["ConvTranspose"]);
    }
}
