//! Graph passes: small named rewrites run in an ordered list.
//!
//! The pipeline is plain code ([`default_pipeline`]); a user can disable a pass by name. Shape
//! inference with constant folding runs first (it needs the input shapes), then the passes.
//! With `FERROLITE_DUMP_GRAPH=DIR` the graph is written to `DIR` after every step.

#[cfg(feature = "analysis")]
mod fold_conv_batchnorm;
#[cfg(feature = "analysis")]
mod fold_conv_scale;
#[cfg(feature = "analysis")]
mod fold_transpose;
#[cfg(feature = "analysis")]
mod fuse_activation;
#[cfg(feature = "analysis")]
mod fuse_conv_add_bias;
#[cfg(feature = "analysis")]
mod fuse_gelu;
#[cfg(feature = "analysis")]
mod fuse_hard_swish;
#[cfg(feature = "analysis")]
mod fuse_layer_norm;
#[cfg(feature = "analysis")]
mod fuse_matmul_add;
#[cfg(feature = "analysis")]
mod fuse_scale_shift;
#[cfg(feature = "analysis")]
mod lookup_int8;
pub mod partition;
#[cfg(feature = "analysis")]
mod quantize;
#[cfg(feature = "analysis")]
mod remove_neutral;
pub mod rewrite;
#[doc(hidden)]
pub mod testutil;

#[cfg(feature = "analysis")]
pub use fold_conv_batchnorm::FoldConvBatchNorm;
#[cfg(feature = "analysis")]
pub use fold_conv_scale::FoldConvScale;
#[cfg(feature = "analysis")]
pub use fold_transpose::FoldTranspose;
#[cfg(feature = "analysis")]
pub use fuse_activation::FuseActivation;
#[cfg(feature = "analysis")]
pub use fuse_conv_add_bias::FuseConvAddBias;
#[cfg(feature = "analysis")]
pub use fuse_gelu::FuseGelu;
#[cfg(feature = "analysis")]
pub use fuse_hard_swish::FuseHardSwish;
#[cfg(feature = "analysis")]
pub use fuse_layer_norm::FuseLayerNorm;
#[cfg(feature = "analysis")]
pub use fuse_matmul_add::FuseMatMulAdd;
#[cfg(feature = "analysis")]
pub use fuse_scale_shift::FuseScaleShift;
#[cfg(feature = "analysis")]
pub use lookup_int8::LookupInt8;
pub use partition::{Partition, PartitionOptions, PartitionReport};
#[cfg(feature = "analysis")]
pub use quantize::Quantize;
#[cfg(feature = "analysis")]
pub use remove_neutral::RemoveNeutral;

use crate::infer::{infer_graph_folding, MAX_FOLD_BYTES};
use crate::{Error, Graph, Result, TensorInfo, ValueId};
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

/// The device-independent passes, in order (backends append their own: see
/// [`session_pipeline`] and [`crate::plan::Backend::passes`]). None in a build without the
/// `analysis` feature (the light build, which runs optimized models: docs/format.md).
#[cfg(not(feature = "analysis"))]
pub fn default_pipeline() -> Vec<Box<dyn Pass>> {
    Vec::new()
}

/// The device-independent passes, in order (backends append their own: see
/// [`session_pipeline`] and [`crate::plan::Backend::passes`]).
#[cfg(feature = "analysis")]
pub fn default_pipeline() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(RemoveIdentity),
        Box::new(Quantize),
        Box::new(DeadCode),
        Box::new(RemoveNeutral),
        Box::new(FoldConvBatchNorm),
        // Before fuse-conv-add-bias, so that Conv + Mul + Add becomes one Conv.
        Box::new(FoldConvScale),
        // Before fuse-activation, so that Conv + Add + Relu becomes one Conv.
        Box::new(FuseConvAddBias),
        // Before fuse-activation, which folds the HardSwish they make into its producer.
        Box::new(FuseHardSwish),
        Box::new(FuseGelu),
        Box::new(FuseLayerNorm),
        Box::new(FuseMatMulAdd),
        Box::new(FuseActivation),
        // After the Conv fusions, which absorb a Mul/Add right after a Conv more cheaply.
        Box::new(FuseScaleShift),
        Box::new(FoldTranspose),
        // After the fusions, so that it sees a QDQ hard-swish as one HardSwish.
        Box::new(LookupInt8),
    ]
}

/// A session's passes: the device-independent ones, then `partition` for a device, then the
/// CPU backend's own (its layout pass, which then only sees the nodes left on the CPU).
pub fn session_pipeline(
    partition: Option<Partition>,
    backend: Vec<Box<dyn Pass>>,
) -> Vec<Box<dyn Pass>> {
    let mut passes = default_pipeline();
    if let Some(p) = partition {
        passes.push(Box::new(p));
    }
    passes.extend(backend);
    passes
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
    optimize_folding(graph, input_types, passes, disabled, MAX_FOLD_BYTES)
}

/// [`optimize`], folding constants of at most `max_fold_bytes` each.
pub fn optimize_folding(
    graph: &mut Graph,
    input_types: &[TensorInfo],
    passes: &[Box<dyn Pass>],
    disabled: &[String],
    max_fold_bytes: usize,
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
    let mut dynamic = infer_graph_folding(graph, input_types, max_fold_bytes)?;
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
}
