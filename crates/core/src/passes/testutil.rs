//! Test helpers for passes, here and in backends: a hand-built graph optimised with a pipeline
//! gives the unoptimised graph's outputs (both run on reference kernels), and has the expected
//! ops afterwards. They panic on a mismatch, as tests do.

use super::{default_pipeline, optimize, Pass};
use crate::plan::Plan;
use crate::{Graph, Tensor, TensorInfo};

/// Runs `g` on its one input `x` unoptimised and optimised by the device-independent passes;
/// checks the optimised op list equals `ops` and the outputs agree within 1e-5 (relative).
/// Returns the optimised graph.
pub fn check_fusion(g: &Graph, x: &Tensor, ops: &[&str]) -> Graph {
    check_passes(g, x, ops, &[])
}

/// [`check_fusion`] with every device-independent pass except `disabled`.
pub fn check_passes(g: &Graph, x: &Tensor, ops: &[&str], disabled: &[&str]) -> Graph {
    check_pipeline(g, x, ops, &default_pipeline, disabled)
}

/// [`check_fusion`] with the passes `pipeline` makes, except `disabled`.
pub fn check_pipeline(
    g: &Graph,
    x: &Tensor,
    ops: &[&str],
    pipeline: &dyn Fn() -> Vec<Box<dyn Pass>>,
    disabled: &[&str],
) -> Graph {
    let types = [TensorInfo::of(x)];
    let refs = [x];
    let all: Vec<String> = pipeline().iter().map(|p| p.name().to_string()).collect();
    let mut plain = g.clone();
    let dynamic = optimize(&mut plain, &types, &pipeline(), &all).unwrap();
    let want = Plan::build(&plain, &dynamic, None)
        .unwrap()
        .run(&refs)
        .unwrap();
    let mut opt = g.clone();
    let disabled: Vec<String> = disabled.iter().map(|d| d.to_string()).collect();
    let dynamic = optimize(&mut opt, &types, &pipeline(), &disabled).unwrap();
    let names: Vec<&str> = opt.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(names, ops, "optimised graph:\n{}", opt.to_text());
    let got = Plan::build(&opt, &dynamic, None)
        .unwrap()
        .run(&refs)
        .unwrap();
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(&want) {
        assert_eq!(a.shape(), b.shape());
        for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "{x} vs {y}\n{}",
                opt.to_text()
            );
        }
    }
    opt
}

/// A deterministic f32 tensor with values in about [-scale, scale].
pub fn data(shape: &[usize], scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| (i as f32 * 0.731 + 0.17).sin() * scale)
        .collect();
    Tensor::from_vec(shape, v).unwrap()
}
