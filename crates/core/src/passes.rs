//! Graph passes: small named rewrites run in an ordered list.
//!
//! The pipeline is plain code ([`default_pipeline`]); a user can disable a pass by name. Shape
//! inference with constant folding runs first (it needs the input shapes), then the passes.
//! With `FERROLITE_DUMP_GRAPH=DIR` the graph is written to `DIR` after every step.

use crate::infer::infer_graph;
use crate::ops::linalg::conv::Conv;
use crate::ops::nn::norm::BatchNorm;
use crate::{DType, Error, Graph, Result, Tensor, TensorInfo, ValueId};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// A graph rewrite. Returns whether it changed anything.
pub trait Pass: Send + Sync {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    fn run(&self, graph: &mut Graph) -> Result<bool>;
}

/// Removes Identity nodes and inference-mode Dropout nodes with a single output, rewiring their
/// readers to the input.
pub struct RemoveIdentity;

impl Pass for RemoveIdentity {
    fn name(&self) -> &'static str {
        "remove-identity"
    }

    fn description(&self) -> &'static str {
        "drop Identity and inference Dropout nodes"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        let mut replace: HashMap<ValueId, ValueId> = HashMap::new();
        let mut removed = HashSet::new();
        for (i, node) in graph.nodes.iter().enumerate() {
            let passthrough = matches!(node.op.name(), "Identity" | "Dropout")
                && node.outputs.len() == 1
                && node.inputs.first().copied().flatten().is_some();
            if passthrough {
                let out = node.outputs[0];
                // Graph outputs keep their value so that the output stays distinct from inputs.
                if graph.outputs.contains(&out) {
                    continue;
                }
                let mut src = node.inputs[0].expect("checked above");
                while let Some(&s) = replace.get(&src) {
                    src = s;
                }
                replace.insert(out, src);
                removed.insert(i);
            }
        }
        if removed.is_empty() {
            return Ok(false);
        }
        let mut i = 0;
        graph.nodes.retain(|_| {
            i += 1;
            !removed.contains(&(i - 1))
        });
        for node in &mut graph.nodes {
            for v in node.inputs.iter_mut().flatten() {
                if let Some(&s) = replace.get(v) {
                    *v = s;
                }
            }
        }
        graph.sort()?;
        Ok(true)
    }
}

/// Removes nodes no graph output depends on.
pub struct DeadCode;

impl Pass for DeadCode {
    fn name(&self) -> &'static str {
        "dead-code"
    }

    fn description(&self) -> &'static str {
        "remove nodes whose results are never used"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        Ok(graph.remove_dead_nodes() > 0)
    }
}

/// Folds an inference BatchNormalization that follows a Conv into the Conv's weights and bias:
/// `W' = W * s`, `B' = (B - mean) * s + bias` with `s = scale / sqrt(var + eps)` per channel.
pub struct FoldConvBatchNorm;

impl FoldConvBatchNorm {
    /// New (W, B) for a Conv with f32 weight `w` (output channels first) and bias `b`.
    fn fold(
        w: &Tensor,
        b: Option<&Tensor>,
        bn: [&Tensor; 4],
        eps: f64,
    ) -> Option<(Tensor, Tensor)> {
        let [scale, beta, mean, var] = bn;
        let cout = *w.shape().first()?;
        if [scale, beta, mean, var]
            .iter()
            .any(|t| t.numel() != cout || t.dtype() != DType::F32)
        {
            return None;
        }
        let (scale, beta) = (scale.as_slice::<f32>().ok()?, beta.as_slice::<f32>().ok()?);
        let (mean, var) = (mean.as_slice::<f32>().ok()?, var.as_slice::<f32>().ok()?);
        let bias: Vec<f32> = match b {
            Some(b) if b.numel() == cout => b.as_slice::<f32>().ok()?.to_vec(),
            Some(_) => return None,
            None => vec![0.0; cout],
        };
        let mut w2 = w.clone();
        let per = w.numel() / cout.max(1);
        let wd = w2.as_mut_slice::<f32>().ok()?;
        let mut b2 = Vec::with_capacity(cout);
        for c in 0..cout {
            let s = (scale[c] as f64 / (var[c] as f64 + eps).sqrt()) as f32;
            for v in &mut wd[c * per..(c + 1) * per] {
                *v *= s;
            }
            b2.push((bias[c] - mean[c]) * s + beta[c]);
        }
        Some((w2, Tensor::from_vec(&[cout], b2).ok()?))
    }
}

impl Pass for FoldConvBatchNorm {
    fn name(&self) -> &'static str {
        "fold-conv-batchnorm"
    }

    fn description(&self) -> &'static str {
        "fold BatchNormalization after Conv into the Conv's weights and bias"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        let consumers = graph.consumers();
        let mut changed = false;
        let mut removed = HashSet::new();
        for bn_i in 0..graph.nodes.len() {
            let bn = &graph.nodes[bn_i];
            let Some(norm) = bn.op.as_any().downcast_ref::<BatchNorm>() else {
                continue;
            };
            let Some(Some(x)) = bn.inputs.first().copied() else {
                continue;
            };
            let Some(conv_i) = graph.value(x).producer.map(|n| n.0) else {
                continue;
            };
            let conv = &graph.nodes[conv_i];
            let single_use = consumers.get(&x).is_some_and(|c| c.len() == 1);
            if conv.op.as_any().downcast_ref::<Conv>().is_none()
                || !single_use
                || graph.outputs.contains(&x)
            {
                continue;
            }
            let constant = |slot: Option<&Option<ValueId>>| {
                slot.copied()
                    .flatten()
                    .and_then(|v| graph.value(v).constant.clone())
            };
            let (Some(w), Some(scale), Some(beta), Some(mean), Some(var)) = (
                constant(conv.inputs.get(1)),
                constant(bn.inputs.get(1)),
                constant(bn.inputs.get(2)),
                constant(bn.inputs.get(3)),
                constant(bn.inputs.get(4)),
            ) else {
                continue;
            };
            let has_bias = conv.inputs.get(2).copied().flatten().is_some();
            let b = constant(conv.inputs.get(2));
            if w.dtype() != DType::F32 || (has_bias && b.is_none()) {
                continue;
            }
            let Some((w2, b2)) =
                Self::fold(&w, b.as_ref(), [&scale, &beta, &mean, &var], norm.epsilon)
            else {
                continue;
            };
            let y = bn.outputs[0];
            let name = conv.name.clone();
            let w_id = graph.add_constant(format!("{name}.folded_w"), w2);
            let b_id = graph.add_constant(format!("{name}.folded_b"), b2);
            let conv = &mut graph.nodes[conv_i];
            conv.inputs = vec![conv.inputs[0], Some(w_id), Some(b_id)];
            conv.outputs = vec![y];
            removed.insert(bn_i);
            changed = true;
        }
        if changed {
            let mut i = 0;
            graph.nodes.retain(|_| {
                i += 1;
                !removed.contains(&(i - 1))
            });
            graph.sort()?;
        }
        Ok(changed)
    }
}

/// The passes, in order.
pub fn default_pipeline() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(RemoveIdentity),
        Box::new(DeadCode),
        Box::new(FoldConvBatchNorm),
    ]
}

/// Name of the shape-inference step, which cannot be disabled.
pub const SHAPE_INFERENCE: &str = "shape-inference";

/// Where to dump graphs, from `FERROLITE_DUMP_GRAPH`.
pub fn dump_dir_from_env() -> Option<PathBuf> {
    std::env::var_os("FERROLITE_DUMP_GRAPH").map(PathBuf::from)
}

fn dump(dir: &Path, step: usize, name: &str, graph: &Graph) -> Result<()> {
    let io = |e| Error::Io {
        path: dir.display().to_string(),
        source: e,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let base = dir.join(format!("{step:02}-{name}"));
    std::fs::write(base.with_extension("txt"), graph.to_text()).map_err(io)?;
    std::fs::write(base.with_extension("dot"), graph.to_dot()).map_err(io)?;
    Ok(())
}

/// Infers shapes for `input_types`, folds constants and runs the enabled passes. Returns the
/// names of dynamic nodes (see [`crate::infer`]).
pub fn optimize(
    graph: &mut Graph,
    input_types: &[TensorInfo],
    passes: &[Box<dyn Pass>],
    disabled: &[String],
) -> Result<HashSet<String>> {
    for d in disabled {
        if !passes.iter().any(|p| p.name() == d) {
            let names: Vec<&str> = passes.iter().map(|p| p.name()).collect();
            return Err(Error::Other(format!(
                "unknown pass '{d}'; passes are: {}",
                names.join(", ")
            )));
        }
    }
    let dump_dir = dump_dir_from_env();
    if let Some(dir) = &dump_dir {
        dump(dir, 0, "loaded", graph)?;
    }
    let mut dynamic = infer_graph(graph, input_types)?;
    if let Some(dir) = &dump_dir {
        dump(dir, 1, SHAPE_INFERENCE, graph)?;
    }
    for (i, pass) in passes.iter().enumerate() {
        if disabled.iter().any(|d| d == pass.name()) {
            continue;
        }
        pass.run(graph)?;
        if let Some(dir) = &dump_dir {
            dump(dir, i + 2, pass.name(), graph)?;
        }
    }
    // Nodes removed by passes are no longer dynamic.
    let present: HashSet<&str> = graph.nodes.iter().map(|n| n.name.as_str()).collect();
    dynamic.retain(|n| present.contains(n.as_str()));
    Ok(dynamic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::cast::Identity;
    use crate::ops::elementwise::unary::{Unary, UnaryKind};
    use crate::plan::Plan;
    use crate::{DType, Tensor};
    use std::sync::Arc;

    /// x -> Identity -> Relu -> y, plus a dead Neg branch reading x.
    fn graph() -> Graph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let a = g
            .add_op("id", Arc::new(Identity), vec![Some(x)], 1)
            .unwrap()[0];
        let relu = Arc::new(Unary {
            kind: UnaryKind::Relu,
        });
        let y = g.add_op("relu", relu, vec![Some(a)], 1).unwrap()[0];
        let neg = Arc::new(Unary {
            kind: UnaryKind::Neg,
        });
        g.add_op("unused", neg, vec![Some(x)], 1).unwrap();
        g.outputs.push(y);
        g
    }

    fn run(g: &Graph, disabled: &[String]) -> (Graph, Tensor) {
        let mut g = g.clone();
        let types = [TensorInfo::new(DType::F32, vec![4])];
        let dynamic = optimize(&mut g, &types, &default_pipeline(), disabled).unwrap();
        let plan = Plan::build(&g, &dynamic, None).unwrap();
        let x = Tensor::from_vec(&[4], vec![-1.0f32, 2.0, -3.0, 4.0]).unwrap();
        let y = plan.run(&[&x]).unwrap().remove(0);
        (g, y)
    }

    #[test]
    fn identity_and_dead_nodes_are_removed() {
        let (g, y) = run(&graph(), &[]);
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op.name()).collect();
        assert_eq!(ops, vec!["Relu"]);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[0.0, 2.0, 0.0, 4.0]);
    }

    #[test]
    fn disabled_passes_keep_nodes_and_results() {
        let all: Vec<String> = default_pipeline()
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        let (g, y) = run(&graph(), &all);
        assert_eq!(g.nodes.len(), 3);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[0.0, 2.0, 0.0, 4.0]);
        let mut g2 = graph();
        let e = optimize(
            &mut g2,
            &[TensorInfo::new(DType::F32, vec![4])],
            &default_pipeline(),
            &["nope".into()],
        );
        assert!(e.is_err());
    }

    #[test]
    fn constant_chains_fold_before_running() {
        // A shape computed from constants (Relu of a constant) folds before Reshape needs it.
        use crate::ops::shape::reshape::Reshape;
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let s = g.add_constant("s", Tensor::from_vec(&[2], vec![2i64, -1]).unwrap());
        let relu = Arc::new(Unary {
            kind: UnaryKind::Relu,
        });
        let s2 = g.add_op("relu_shape", relu, vec![Some(s)], 1).unwrap()[0];
        let y = g
            .add_op(
                "reshape",
                Arc::new(Reshape::default()),
                vec![Some(x), Some(s2)],
                1,
            )
            .unwrap()[0];
        g.outputs.push(y);
        let types = [TensorInfo::new(DType::F32, vec![2, 3])];
        let dynamic = optimize(&mut g, &types, &default_pipeline(), &[]).unwrap();
        assert!(dynamic.is_empty());
        assert_eq!(g.nodes.len(), 1);
        assert_eq!(g.value(y).info.as_ref().unwrap().shape, vec![2, 3]);
    }
    #[test]
    fn conv_batchnorm_folds_into_the_weights() {
        use crate::ops::linalg::conv::Conv;
        use crate::ops::nn::norm::BatchNorm;
        // x [1,2,3,3] -> Conv(2->2, 1x1, bias) -> BatchNorm -> y
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let w = g.add_constant(
            "w",
            Tensor::from_vec(&[2, 2, 1, 1], vec![1.0f32, 2.0, -1.0, 0.5]).unwrap(),
        );
        let b = g.add_constant("b", Tensor::from_vec(&[2], vec![0.5f32, -0.25]).unwrap());
        let c = g
            .add_op(
                "conv",
                Arc::new(Conv::default()),
                vec![Some(x), Some(w), Some(b)],
                1,
            )
            .unwrap()[0];
        let k = |name: &str, v: Vec<f32>| {
            Tensor::from_vec(&[2], v)
                .map(|t| (name.to_string(), t))
                .unwrap()
        };
        let consts: Vec<ValueId> = [
            k("scale", vec![2.0, 0.5]),
            k("beta", vec![0.1, -0.2]),
            k("mean", vec![0.3, 1.0]),
            k("var", vec![4.0, 0.25]),
        ]
        .into_iter()
        .map(|(n, t)| g.add_constant(n, t))
        .collect();
        let mut ins = vec![Some(c)];
        ins.extend(consts.iter().map(|&v| Some(v)));
        let y = g
            .add_op("bn", Arc::new(BatchNorm::default()), ins, 1)
            .unwrap()[0];
        g.outputs.push(y);
        let types = [TensorInfo::new(DType::F32, vec![1, 2, 3, 3])];
        let xs: Vec<f32> = (0..18).map(|i| (i as f32 * 0.37).sin()).collect();
        let x_t = Tensor::from_vec(&[1, 2, 3, 3], xs).unwrap();
        let mut outs = Vec::new();
        for disabled in [vec!["fold-conv-batchnorm".to_string()], vec![]] {
            let mut g2 = g.clone();
            let dynamic = optimize(&mut g2, &types, &default_pipeline(), &disabled).unwrap();
            let ops: Vec<&str> = g2.nodes.iter().map(|n| n.op.name()).collect();
            if disabled.is_empty() {
                assert_eq!(ops, vec!["Conv"]);
            } else {
                assert_eq!(ops, vec!["Conv", "BatchNormalization"]);
            }
            let plan = Plan::build(&g2, &dynamic, None).unwrap();
            outs.push(plan.run(&[&x_t]).unwrap().remove(0).to_f64_vec());
        }
        for (a, b) in outs[0].iter().zip(&outs[1]) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }
}
