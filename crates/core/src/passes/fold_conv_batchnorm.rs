//! `fold-conv-batchnorm`.

use super::Pass;
use crate::ops::linalg::conv::Conv;
use crate::ops::nn::norm::BatchNorm;
use crate::{DType, Graph, Result, Tensor, ValueId};
use std::collections::HashSet;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::{default_pipeline, optimize};
    use crate::plan::Plan;
    use crate::TensorInfo;
    use std::sync::Arc;

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
