//! Every GPU kernel against the reference implementation, over many shapes and attributes.
//!
//! Each case is a subgraph as the partition pass makes it (inputs copied to the device, the
//! nodes, outputs copied back); the GPU's outputs must match the subgraph's reference
//! evaluation. Needs a GPU (lavapipe is enough): without one the tests say so and pass, unless
//! `FERROLITE_REQUIRE_GPU=1` (CI sets it), when they fail.

use ferrolite_core::device::Device;
use ferrolite_core::infer::infer_graph;
use ferrolite_core::ops::device::copy::DeviceCopy;
use ferrolite_core::ops::device::subgraph::Subgraph;
use ferrolite_core::ops::elementwise::{Binary, BinaryKind, Clip as ClipOp, Unary, UnaryKind};
use ferrolite_core::ops::extra::swish::Swish;
use ferrolite_core::ops::linalg::conv::Conv;
use ferrolite_core::ops::linalg::conv_geometry::ConvParams;
use ferrolite_core::ops::linalg::conv_transpose::ConvTranspose;
use ferrolite_core::ops::linalg::fully_connected::FullyConnected;
use ferrolite_core::ops::linalg::gemm::Gemm;
use ferrolite_core::ops::linalg::matmul::MatMul;
use ferrolite_core::ops::nn::norm::{BatchNorm, LayerNorm};
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};
use ferrolite_core::ops::nn::resize::{CoordMode, NearestMode, Resize, ResizeMode};
use ferrolite_core::ops::nn::softmax::{Softmax, SoftmaxKind};
use ferrolite_core::ops::shape::concat::Concat;
use ferrolite_core::ops::shape::reshape::Reshape;
use ferrolite_core::ops::shape::slice::Slice;
use ferrolite_core::ops::shape::split::Split;
use ferrolite_core::ops::shape::transpose::Transpose;
use ferrolite_core::plan::KernelRequest;
use ferrolite_core::{DType, Graph, Op, Tensor, TensorInfo, ValueId};
use ferrolite_gpu::GpuDevice;
use std::sync::{Arc, OnceLock};

/// The GPU, opened once for all tests; `None` (with a message) when there is none.
fn gpu() -> Option<&'static GpuDevice> {
    static GPU: OnceLock<Option<GpuDevice>> = OnceLock::new();
    GPU.get_or_init(|| match GpuDevice::open() {
        Ok(d) => {
            eprintln!("GPU tests run on {}", d.adapter());
            Some(d)
        }
        Err(e) => {
            assert!(
                std::env::var("FERROLITE_REQUIRE_GPU").as_deref() != Ok("1"),
                "FERROLITE_REQUIRE_GPU=1 but no GPU: {e} (install mesa-vulkan-drivers for lavapipe)"
            );
            eprintln!("no GPU ({e}): the GPU kernel tests are skipped");
            None
        }
    })
    .as_ref()
}

/// A deterministic pseudo-random tensor in [-1, 1).
fn rand(shape: &[usize], seed: u64) -> Tensor {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(shape, v).unwrap()
}

fn positive(shape: &[usize], seed: u64) -> Tensor {
    let t = rand(shape, seed);
    let v: Vec<f32> = t
        .to_f64_vec()
        .iter()
        .map(|x| x.abs() as f32 + 0.1)
        .collect();
    Tensor::from_vec(shape, v).unwrap()
}

/// An input of a test node.
enum Arg {
    /// A subgraph input (copied to the device at every run).
    Input(Tensor),
    /// A constant in the subgraph (weights, shapes).
    Const(Tensor),
    Absent,
}
use Arg::{Absent, Const, Input};

/// One node in a subgraph of its own.
struct Case {
    graph: Graph,
    inputs: Vec<Tensor>,
}

impl Case {
    fn new() -> Case {
        Case {
            graph: Graph::new(),
            inputs: Vec::new(),
        }
    }

    fn arg(&mut self, a: Arg) -> Option<ValueId> {
        match a {
            Input(t) => {
                let k = self.inputs.len();
                let x = self.graph.add_value(format!("x{k}"));
                self.graph.inputs.push(x);
                let dev = self
                    .graph
                    .add_op(
                        format!("to_gpu{k}"),
                        Arc::new(DeviceCopy::to_device("gpu")),
                        vec![Some(x)],
                        1,
                    )
                    .unwrap();
                self.inputs.push(t);
                Some(dev[0])
            }
            Const(t) => Some(
                self.graph
                    .add_constant(format!("c{}", self.graph.values.len()), t),
            ),
            Absent => None,
        }
    }

    fn node(
        &mut self,
        op: impl Op + 'static,
        args: Vec<Option<ValueId>>,
        outputs: usize,
    ) -> Vec<ValueId> {
        let name = format!("n{}", self.graph.nodes.len());
        self.graph
            .add_op(name, Arc::new(op), args, outputs)
            .unwrap()
    }

    /// Marks values as subgraph outputs (through CopyToHost nodes).
    fn outputs(&mut self, vs: &[ValueId]) {
        for (k, &v) in vs.iter().enumerate() {
            let y = self
                .graph
                .add_op(
                    format!("to_host{k}"),
                    Arc::new(DeviceCopy::to_host("gpu")),
                    vec![Some(v)],
                    1,
                )
                .unwrap();
            self.graph.outputs.push(y[0]);
        }
    }

    /// Infers types, checks that the GPU supports every node, and compares its outputs with the
    /// reference within `tol` (absolute, plus relative to the value).
    fn check(mut self, tol: f64) {
        let Some(gpu) = gpu() else { return };
        let types: Vec<TensorInfo> = self.inputs.iter().map(TensorInfo::of).collect();
        infer_graph(&mut self.graph, &types).unwrap();
        for node in &self.graph.nodes {
            if node.op.as_any().is::<DeviceCopy>() {
                continue;
            }
            let inputs = self.graph.infer_inputs(node);
            let outputs: Vec<TensorInfo> = node
                .outputs
                .iter()
                .map(|&o| self.graph.value(o).info.clone().unwrap())
                .collect();
            let req = KernelRequest {
                node,
                inputs: &inputs,
                outputs: &outputs,
                packs: ferrolite_core::prepacked::Prepacks::none(),
            };
            if let Err(why) = gpu.supports(&req) {
                panic!("{} ({}) is not supported: {why}", node.name, node.op.name());
            }
        }
        let exe = gpu.compile(&self.graph).unwrap();
        let ins: Vec<&Tensor> = self.inputs.iter().collect();
        // Twice: buffers reused across runs must not leak one run into the next.
        let _ = exe.run(&ins).unwrap();
        let got = exe.run(&ins).unwrap();
        let reference = Subgraph {
            device: "gpu".into(),
            graph: Arc::new(self.graph.clone()),
        };
        let opts: Vec<Option<&Tensor>> = ins.iter().map(|t| Some(*t)).collect();
        let want = reference.eval(&opts).unwrap();
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.shape(), w.shape(), "output {k}");
            for (i, (a, b)) in g.to_f64_vec().iter().zip(w.to_f64_vec()).enumerate() {
                let ok = (a - b).abs() <= tol * (1.0 + b.abs()) || (a.is_nan() && b.is_nan());
                assert!(ok, "output {k}[{i}]: GPU {a}, reference {b}");
            }
        }
    }
}

/// One node over `args` with one output.
fn single(op: impl Op + 'static, args: Vec<Arg>, tol: f64) {
    let mut c = Case::new();
    let ids = args.into_iter().map(|a| c.arg(a)).collect();
    let y = c.node(op, ids, 1);
    c.outputs(&y);
    c.check(tol);
}

fn conv_op(
    k: usize,
    stride: usize,
    pad: usize,
    dil: usize,
    group: usize,
    act: Option<UnaryKind>,
) -> Conv {
    Conv {
        params: ConvParams {
            kernel_shape: None,
            strides: Some(vec![stride; 2]),
            dilations: Some(vec![dil; 2]),
            pads: Some(vec![pad; 4]),
            ..Default::default()
        },
        group,
        activation: act.or(if k == 3 { Some(UnaryKind::Relu) } else { None }),
    }
}

#[test]
fn conv_matches_the_reference() {
    // (N, C, H, W, M, k, stride, pad, dilation, group)
    let cases = [
        (1, 3, 9, 11, 8, 3, 1, 1, 1, 1),
        (2, 4, 8, 8, 4, 3, 2, 1, 1, 1),
        (1, 8, 7, 7, 8, 3, 1, 1, 1, 8),  // depthwise
        (1, 6, 10, 9, 6, 5, 2, 2, 1, 6), // depthwise 5x5 stride 2
        (1, 8, 6, 6, 12, 3, 1, 2, 2, 4), // grouped, dilated
        (1, 5, 5, 7, 7, 1, 1, 0, 1, 1),  // 1x1, odd channels
        (1, 16, 4, 4, 32, 1, 1, 0, 1, 1),
        (1, 2, 1, 1, 3, 1, 1, 0, 1, 1),
    ];
    for (i, &(n, c, h, w, m, k, s, p, d, g)) in cases.iter().enumerate() {
        let seed = i as u64;
        let act = [
            None,
            Some(UnaryKind::HardSwish),
            Some(UnaryKind::Clip { min: 0.0, max: 6.0 }),
        ][i % 3];
        single(
            conv_op(k, s, p, d, g, act),
            vec![
                Input(rand(&[n, c, h, w], seed)),
                Const(rand(&[m, c / g, k, k], seed + 100)),
                if i % 2 == 0 {
                    Const(rand(&[m], seed + 200))
                } else {
                    Absent
                },
            ],
            1e-4,
        );
    }
    // 1-D.
    single(
        Conv {
            params: ConvParams {
                strides: Some(vec![2]),
                pads: Some(vec![1, 2]),
                ..Default::default()
            },
            group: 1,
            activation: Some(UnaryKind::LeakyRelu { alpha: 0.1 }),
        },
        vec![
            Input(rand(&[2, 3, 17], 7)),
            Const(rand(&[4, 3, 3], 8)),
            Const(rand(&[4], 9)),
        ],
        1e-4,
    );
}

#[test]
fn conv_transpose_matches_the_reference() {
    // (C, M, k, stride, pad, group)
    for (i, &(c, m, k, s, p, g)) in [
        (4, 2, 2, 2, 0, 1),
        (3, 6, 3, 2, 1, 1),
        (4, 4, 4, 2, 1, 2),
        (2, 3, 3, 1, 0, 1),
    ]
    .iter()
    .enumerate()
    {
        let op = ConvTranspose {
            params: ConvParams {
                strides: Some(vec![s; 2]),
                pads: Some(vec![p; 4]),
                ..Default::default()
            },
            group: g,
            ..Default::default()
        };
        single(
            op,
            vec![
                Input(rand(&[1, c, 5, 6], i as u64)),
                Const(rand(&[c, m / g, k, k], 50 + i as u64)),
                Const(rand(&[m], 70 + i as u64)),
            ],
            1e-4,
        );
    }
}

#[test]
fn matmul_gemm_and_fully_connected_match_the_reference() {
    for (i, (a, b)) in [
        (vec![5, 7], vec![7, 8]),
        (vec![3, 5, 7], vec![7, 6]),
        (vec![2, 1, 4, 3], vec![3, 3, 5]),
        (vec![7], vec![7, 4]),
        (vec![4, 7], vec![7]),
        (vec![1, 4, 16, 32], vec![1, 4, 32, 16]),
        (vec![2, 33, 64], vec![64, 37]),
    ]
    .into_iter()
    .enumerate()
    {
        single(
            MatMul,
            vec![Input(rand(&a, i as u64)), Input(rand(&b, 10 + i as u64))],
            1e-4,
        );
    }
    for (i, &(ta, tb, c)) in [
        (false, false, 0),
        (true, false, 1),
        (false, true, 2),
        (true, true, 3),
    ]
    .iter()
    .enumerate()
    {
        let (m, k, n) = (5, 6, 8);
        let a = if ta { vec![k, m] } else { vec![m, k] };
        let b = if tb { vec![n, k] } else { vec![k, n] };
        let cshape: Vec<usize> = [vec![n], vec![m, n], vec![m, 1], vec![]][c].clone();
        single(
            Gemm {
                alpha: 0.5,
                beta: 2.0,
                trans_a: ta,
                trans_b: tb,
                activation: if i == 1 {
                    Some(UnaryKind::Sigmoid)
                } else {
                    None
                },
            },
            vec![
                Input(rand(&a, 20 + i as u64)),
                Const(rand(&b, 30 + i as u64)),
                Const(rand(&cshape, 40 + i as u64)),
            ],
            1e-4,
        );
    }
    single(
        FullyConnected {
            activation: Some(UnaryKind::Relu),
        },
        vec![
            Input(rand(&[2, 3, 9], 1)),
            Const(rand(&[9, 12], 2)),
            Const(rand(&[12], 3)),
        ],
        1e-4,
    );
    single(
        FullyConnected { activation: None },
        vec![Input(rand(&[4, 9], 4)), Const(rand(&[9, 5], 5)), Absent],
        1e-4,
    );
}

#[test]
fn binary_ops_broadcast_like_the_reference() {
    let shapes = [
        (vec![2, 3, 4], vec![2, 3, 4]),
        (vec![2, 3, 4], vec![4]),
        (vec![2, 3, 4], vec![3, 1]),
        (vec![1, 3, 1], vec![2, 1, 5]),
        (vec![2, 3, 4], vec![]),
        (vec![], vec![2, 2]),
        (vec![1, 8, 5, 5], vec![1, 8, 1, 1]),
    ];
    let Some(gpu) = gpu() else { return };
    // Every kind the GPU lowers, from BinaryKind::examples, but Pow (its own cases below).
    let kinds: Vec<BinaryKind> = BinaryKind::examples()
        .into_iter()
        .filter(|&kind| {
            let two = vec![
                (DType::F32, vec![2, 3], None),
                (DType::F32, vec![2, 3], None),
            ];
            let op = Arc::new(Binary::new(kind));
            kind != BinaryKind::Pow && verdict(gpu, op, two, vec![2, 3], DType::F32).is_ok()
        })
        .collect();
    assert!(kinds.len() >= 5, "{kinds:?}");
    for (i, (a, b)) in shapes.iter().enumerate() {
        for (k, &kind) in kinds.iter().enumerate() {
            // PRelu's slope broadcasts onto X only.
            let onto_a = b.len() <= a.len()
                && b.iter()
                    .rev()
                    .zip(a.iter().rev())
                    .all(|(&x, &y)| x == 1 || x == y);
            if kind == BinaryKind::PRelu && !onto_a {
                continue;
            }
            let seed = (i * 10 + k) as u64;
            let rhs = if matches!(kind, BinaryKind::Div | BinaryKind::Mod { .. }) {
                positive(b, seed + 1)
            } else {
                rand(b, seed + 1)
            };
            let rhs = if k % 2 == 0 { Const(rhs) } else { Input(rhs) };
            single(Binary::new(kind), vec![Input(rand(a, seed)), rhs], 1e-5);
        }
    }
    // Pow: squares of negatives, a fractional power of positives.
    single(
        Binary::new(BinaryKind::Pow),
        vec![Input(rand(&[3, 4], 1)), Const(Tensor::scalar(2.0f32))],
        1e-5,
    );
    single(
        Binary::new(BinaryKind::Pow),
        vec![Input(positive(&[3, 4], 2)), Const(Tensor::scalar(0.5f32))],
        1e-5,
    );
    single(
        Binary::new(BinaryKind::Pow),
        vec![Input(rand(&[3, 4], 3)), Const(Tensor::scalar(3.0f32))],
        1e-5,
    );
}

#[test]
fn unary_ops_and_activations_match_the_reference() {
    use UnaryKind::*;
    let Some(gpu) = gpu() else { return };
    // Every kind the GPU lowers, from UnaryKind::examples (the others are refused by name,
    // below): a kind that gets WGSL is tested here without an edit.
    let kinds: Vec<UnaryKind> = UnaryKind::examples()
        .into_iter()
        .filter(|&kind| {
            let one = vec![(DType::F32, vec![2, 3], None)];
            verdict(gpu, Arc::new(Unary { kind }), one, vec![2, 3], DType::F32).is_ok()
        })
        .collect();
    assert!(kinds.len() >= 25, "{kinds:?}");
    for (i, &kind) in kinds.iter().enumerate() {
        // Inputs over the kind's test domain ([-8, 8] for the activations: past every knee).
        let (lo, hi) = kind.test_domain();
        let x = rand(&[3, 50], i as u64);
        let v: Vec<f32> = x
            .to_f64_vec()
            .iter()
            .map(|a| lo + (*a as f32 + 1.0) * 0.5 * (hi - lo))
            .collect();
        single(
            Unary { kind },
            vec![Input(Tensor::from_vec(&[3, 50], v).unwrap())],
            2e-5,
        );
    }
    for kind in [Log, Sqrt, Reciprocal] {
        single(Unary { kind }, vec![Input(positive(&[40], 9))], 2e-5);
    }
    single(
        ClipOp::default(),
        vec![
            Input(rand(&[2, 9], 1)),
            Const(Tensor::scalar(-0.25f32)),
            Const(Tensor::scalar(0.5f32)),
        ],
        0.0,
    );
    single(
        ClipOp::default(),
        vec![
            Input(rand(&[2, 9], 2)),
            Absent,
            Const(Tensor::scalar(0.1f32)),
        ],
        0.0,
    );
    single(Swish { alpha: 1.5 }, vec![Input(rand(&[17], 3))], 1e-5);
}

#[test]
fn batch_norm_matches_the_reference() {
    for (i, shape) in [vec![2, 3, 4, 5], vec![1, 6], vec![1, 4, 7]]
        .iter()
        .enumerate()
    {
        let c = shape[1];
        let s = i as u64 * 10;
        single(
            BatchNorm { epsilon: 1e-3 },
            vec![
                Input(rand(shape, s)),
                Const(rand(&[c], s + 1)),
                Const(rand(&[c], s + 2)),
                Const(rand(&[c], s + 3)),
                Const(positive(&[c], s + 4)),
            ],
            1e-4,
        );
    }
}

#[test]
fn pooling_matches_the_reference() {
    // (kind, kernel, stride, pads, dilation, ceil, count_include_pad, H, W)
    let cases = [
        (
            PoolKind::Max,
            3,
            2,
            vec![1, 1, 1, 1],
            1,
            false,
            false,
            9,
            10,
        ),
        (PoolKind::Max, 2, 2, vec![0, 0, 0, 0], 1, true, false, 7, 7),
        (PoolKind::Max, 3, 1, vec![0, 0, 0, 0], 2, false, false, 8, 9),
        (
            PoolKind::Average,
            3,
            2,
            vec![1, 1, 1, 1],
            1,
            false,
            false,
            9,
            10,
        ),
        (
            PoolKind::Average,
            3,
            2,
            vec![1, 1, 1, 1],
            1,
            false,
            true,
            9,
            10,
        ),
        (
            PoolKind::Average,
            3,
            2,
            vec![0, 1, 1, 0],
            1,
            true,
            true,
            8,
            8,
        ),
        (
            PoolKind::Average,
            2,
            1,
            vec![0, 0, 0, 0],
            1,
            false,
            false,
            5,
            6,
        ),
    ];
    for (i, (kind, k, s, pads, d, ceil, cip, h, w)) in cases.into_iter().enumerate() {
        let op = Pool {
            kind,
            kernel_shape: vec![k; 2],
            strides: vec![s as i64; 2],
            pads,
            dilations: vec![d; 2],
            ceil_mode: ceil,
            count_include_pad: cip,
            ..Default::default()
        };
        single(op, vec![Input(rand(&[2, 3, h, w], i as u64))], 1e-5);
    }
    let pool_1d = Pool {
        kind: PoolKind::Average,
        kernel_shape: vec![3],
        strides: vec![2],
        pads: vec![1, 1],
        ..Default::default()
    };
    single(pool_1d, vec![Input(rand(&[1, 4, 11], 9))], 1e-5);
    for kind in [PoolKind::Average, PoolKind::Max] {
        single(
            GlobalPool { kind, p: 2.0 },
            vec![Input(rand(&[2, 5, 7, 3], 4))],
            1e-5,
        );
    }
}

#[test]
fn movement_ops_match_the_reference() {
    for (i, perm) in [
        vec![0, 2, 3, 1],
        vec![3, 2, 1, 0],
        vec![1, 0, 2, 3],
        vec![0, 1, 3, 2],
    ]
    .into_iter()
    .enumerate()
    {
        single(
            Transpose { perm: Some(perm) },
            vec![Input(rand(&[2, 3, 4, 5], i as u64))],
            0.0,
        );
    }
    for axis in [0, 1, -1] {
        single(
            Concat { axis },
            vec![
                Input(rand(&[2, 3, 4], 1)),
                Const(rand(&[2, 3, 4], 2)),
                Input(rand(&[2, 3, 4], 3)),
            ],
            0.0,
        );
    }
    single(
        Concat { axis: 1 },
        vec![Input(rand(&[1, 2, 3, 3], 1)), Input(rand(&[1, 5, 3, 3], 2))],
        0.0,
    );
    for (starts, ends, axes, steps) in [
        (vec![1], vec![3], vec![1], vec![1]),
        (vec![0, 1], vec![2, 5], vec![0, 2], vec![1, 2]),
        (vec![-1], vec![-100], vec![2], vec![-1]),
        (vec![3, 0], vec![0, 5], vec![1, 2], vec![-2, 3]),
    ] {
        single(
            Slice {
                starts: Some(starts),
                ends: Some(ends),
                axes: Some(axes),
                steps: Some(steps),
            },
            vec![Input(rand(&[2, 4, 6], 5))],
            0.0,
        );
    }
    for (axis, split) in [(1, Some(vec![1, 3])), (2, None), (-1, Some(vec![2, 0, 4]))] {
        let n = split.as_ref().map_or(3, |s| s.len());
        let mut c = Case::new();
        let x = c.arg(Input(rand(&[2, 4, 6], 6)));
        let ys = c.node(
            Split {
                axis,
                split,
                num_outputs: n,
            },
            vec![x],
            n,
        );
        c.outputs(&ys);
        c.check(0.0);
    }
}

#[test]
fn softmax_and_layer_norm_match_the_reference() {
    for (shape, axis) in [
        (vec![3, 10], -1),
        (vec![2, 3, 130], -1),
        (vec![2, 5, 4], 1),
        (vec![4, 3, 2], 0),
    ] {
        for kind in [SoftmaxKind::Softmax, SoftmaxKind::LogSoftmax] {
            single(
                Softmax {
                    kind,
                    axis,
                    legacy_2d: false,
                },
                vec![Input(rand(&shape, 3))],
                1e-5,
            );
        }
    }
    single(
        Softmax {
            kind: SoftmaxKind::Softmax,
            axis: 1,
            legacy_2d: true,
        },
        vec![Input(rand(&[2, 3, 4], 4))],
        1e-5,
    );
    for (shape, axis, bias) in [
        (vec![4, 256], -1, true),
        (vec![2, 3, 5, 7], -2, false),
        (vec![1, 70], 1, true),
    ] {
        let from = if axis < 0 {
            shape.len() as i64 + axis
        } else {
            axis
        } as usize;
        let norm: Vec<usize> = shape[from..].to_vec();
        single(
            LayerNorm {
                axis,
                epsilon: 1e-5,
                ..Default::default()
            },
            vec![
                Input(rand(&shape, 1)),
                Const(rand(&norm, 2)),
                if bias { Const(rand(&norm, 3)) } else { Absent },
            ],
            1e-4,
        );
    }
}

#[test]
fn resize_matches_the_reference() {
    let scales = |v: &[f32]| Const(Tensor::from_slice(&[v.len()], v).unwrap());
    let modes = [
        (
            ResizeMode::Nearest,
            CoordMode::Asymmetric,
            NearestMode::Floor,
        ),
        (
            ResizeMode::Nearest,
            CoordMode::HalfPixel,
            NearestMode::RoundPreferFloor,
        ),
        (
            ResizeMode::Nearest,
            CoordMode::AlignCorners,
            NearestMode::RoundPreferCeil,
        ),
        (ResizeMode::Linear, CoordMode::HalfPixel, NearestMode::Floor),
        (
            ResizeMode::Linear,
            CoordMode::AlignCorners,
            NearestMode::Floor,
        ),
        (
            ResizeMode::Linear,
            CoordMode::PytorchHalfPixel,
            NearestMode::Floor,
        ),
        (ResizeMode::Cubic, CoordMode::HalfPixel, NearestMode::Floor),
    ];
    for (i, (mode, coord, nearest)) in modes.into_iter().enumerate() {
        for s in [
            [1.0, 1.0, 2.0, 2.0],
            [1.0, 1.0, 0.5, 0.75],
            [1.0, 1.0, 1.5, 3.0],
        ] {
            let op = Resize {
                mode,
                coordinate_transformation_mode: coord,
                nearest_mode: nearest,
                ..Default::default()
            };
            single(
                op,
                vec![Input(rand(&[1, 2, 6, 8], i as u64)), Absent, scales(&s)],
                1e-5,
            );
        }
    }
    // Sizes instead of scales.
    single(
        Resize {
            mode: ResizeMode::Linear,
            ..Default::default()
        },
        vec![
            Input(rand(&[1, 3, 5, 5], 9)),
            Absent,
            Absent,
            Const(Tensor::from_slice(&[4], &[1i64, 3, 8, 11]).unwrap()),
        ],
        1e-5,
    );
}

#[test]
fn reductions_match_the_reference() {
    use ferrolite_core::ops::nn::reduce::{Reduce, ReduceKind};
    let Some(gpu) = gpu() else { return };
    // Every kind the GPU lowers, but LogSum (of positive values, its own case below).
    let kinds: Vec<ReduceKind> = ReduceKind::ALL
        .into_iter()
        .filter(|&kind| {
            let op = Arc::new(Reduce {
                kind,
                ..Default::default()
            });
            let one = vec![(DType::F32, vec![2, 3], None)];
            kind != ReduceKind::LogSum && verdict(gpu, op, one, vec![1, 1], DType::F32).is_ok()
        })
        .collect();
    assert!(kinds.len() >= 9, "{kinds:?}");
    for (i, axes) in [vec![1], vec![-1], vec![0, 2], vec![1, 2, 3], vec![]]
        .into_iter()
        .enumerate()
    {
        for (k, &kind) in kinds.iter().enumerate() {
            let op = Reduce {
                kind,
                axes: if axes.is_empty() {
                    None
                } else {
                    Some(axes.clone())
                },
                keepdims: (i + k) % 2 == 0,
                noop_with_empty_axes: false,
            };
            single(
                op,
                vec![Input(rand(&[2, 3, 4, 5], (i * 10 + k) as u64))],
                1e-5,
            );
        }
    }
    // LogSum of positive values; axes as a constant input.
    single(
        Reduce {
            kind: ReduceKind::LogSum,
            ..Default::default()
        },
        vec![
            Input(positive(&[3, 4], 1)),
            Const(Tensor::from_slice(&[1], &[0i64]).unwrap()),
        ],
        1e-5,
    );
}

#[test]
fn pad_matches_the_reference_in_every_mode() {
    use ferrolite_core::ops::shape::pad::{Pad, PadMode};
    let pads = |v: &[i64]| Const(Tensor::from_slice(&[v.len()], v).unwrap());
    for mode in [
        PadMode::Constant,
        PadMode::Reflect,
        PadMode::Edge,
        PadMode::Wrap,
    ] {
        for p in [
            vec![0, 1, 2, 0, 2, 1],
            vec![0, 0, 3, 0, 0, 3],
            vec![1, -1, 1, 0, 2, -2],
        ] {
            let op = Pad {
                mode,
                pads: None,
                value: 0.0,
            };
            single(
                op,
                vec![
                    Input(rand(&[2, 4, 5], 3)),
                    pads(&p),
                    Const(Tensor::scalar(0.5f32)),
                ],
                0.0,
            );
        }
    }
}

/// Several nodes in one subgraph: aliases, buffers shared by lifetime, two outputs.
#[test]
fn chains_share_buffers_and_alias_reshapes_correctly() {
    let mut c = Case::new();
    let x = c.arg(Input(rand(&[1, 4, 6, 6], 1)));
    let w1 = c.arg(Const(rand(&[8, 4, 3, 3], 2)));
    let w2 = c.arg(Const(rand(&[8, 8, 1, 1], 3)));
    let y1 = c.node(
        conv_op(3, 1, 1, 1, 1, Some(UnaryKind::Relu)),
        vec![x, w1, None],
        1,
    );
    let y2 = c.node(conv_op(1, 1, 0, 1, 1, None), vec![Some(y1[0]), w2, None], 1);
    let sum = c.node(
        Binary::new(BinaryKind::Add),
        vec![Some(y1[0]), Some(y2[0])],
        1,
    );
    let shape = c.arg(Const(Tensor::from_slice(&[2], &[8i64, 36]).unwrap()));
    let flat = c.node(Reshape::default(), vec![Some(sum[0]), shape], 1);
    let sm = c.node(Softmax::default(), vec![Some(flat[0])], 1);
    let wt = c.arg(Const(rand(&[36, 5], 4)));
    let fc = c.node(
        FullyConnected { activation: None },
        vec![Some(sm[0]), wt, None],
        1,
    );
    c.outputs(&[fc[0], y2[0]]);
    c.check(1e-4);
}

/// The GPU's verdict on one node over inputs (dtype, shape, constant value) with one output.
fn verdict(
    gpu: &GpuDevice,
    op: Arc<dyn Op>,
    inputs: Vec<(DType, Vec<usize>, Option<Tensor>)>,
    out: Vec<usize>,
    out_dtype: DType,
) -> Result<(), String> {
    let mut g = Graph::new();
    let ids: Vec<Option<ValueId>> = inputs
        .iter()
        .enumerate()
        .map(|(i, (_, _, c))| {
            Some(match c {
                Some(t) => g.add_constant(format!("c{i}"), t.clone()),
                None => g.add_value(format!("x{i}")),
            })
        })
        .collect();
    let y = g.add_op("n", op, ids, 1).unwrap();
    assert_eq!(y.len(), 1);
    let node = &g.nodes[0];
    let infer: Vec<Option<ferrolite_core::InferInput>> = inputs
        .iter()
        .map(|(dtype, shape, c)| {
            Some(ferrolite_core::InferInput {
                dtype: *dtype,
                shape,
                value: c.as_ref(),
            })
        })
        .collect();
    let outputs = [TensorInfo::new(out_dtype, out)];
    let req = KernelRequest {
        node,
        inputs: &infer,
        outputs: &outputs,
        packs: ferrolite_core::prepacked::Prepacks::none(),
    };
    gpu.supports(&req)
}

/// What the GPU refuses, it refuses with a reason that names what is missing (the text
/// `ferrolite explain` shows), and never by compiling something it cannot run.
#[test]
fn unsupported_nodes_are_refused_with_a_reason() {
    use ferrolite_core::ops::shape::gather::Gather;
    let Some(gpu) = gpu() else { return };
    let reason = |op: Arc<dyn Op>,
                  inputs: Vec<(DType, Vec<usize>, Option<Tensor>)>,
                  out: Vec<usize>,
                  out_dtype: DType| {
        verdict(gpu, op, inputs, out, out_dtype).expect_err("the GPU should refuse this node")
    };
    let f16 = reason(
        Arc::new(Unary {
            kind: UnaryKind::Relu,
        }),
        vec![(DType::F16, vec![4], None)],
        vec![4],
        DType::F16,
    );
    assert!(f16.contains("f16") && f16.contains("f32"), "{f16}");
    let gather = reason(
        Arc::new(Gather::default()),
        vec![(DType::F32, vec![5, 3], None), (DType::I64, vec![2], None)],
        vec![2, 3],
        DType::F32,
    );
    assert!(
        gather.contains("i64") || gather.contains("Gather"),
        "{gather}"
    );
    let conv3d = reason(
        Arc::new(Conv::default()),
        vec![
            (DType::F32, vec![1, 2, 4, 4, 4], None),
            (
                DType::F32,
                vec![3, 2, 1, 1, 1],
                Some(rand(&[3, 2, 1, 1, 1], 1)),
            ),
        ],
        vec![1, 3, 4, 4, 4],
        DType::F32,
    );
    assert!(conv3d.contains("3-D"), "{conv3d}");
    let hardmax = reason(
        Arc::new(Softmax {
            kind: SoftmaxKind::Hardmax,
            ..Default::default()
        }),
        vec![(DType::F32, vec![2, 3], None)],
        vec![2, 3],
        DType::F32,
    );
    assert!(hardmax.contains("Hardmax"), "{hardmax}");
    let dynamic_weights = reason(
        Arc::new(conv_op(3, 1, 1, 1, 1, None)),
        vec![
            (DType::F32, vec![1, 2, 5, 5], None),
            (DType::F32, vec![2, 2, 3, 3], None),
        ],
        vec![1, 2, 5, 5],
        DType::F32,
    );
    assert!(
        dynamic_weights.contains("not a constant"),
        "{dynamic_weights}"
    );
    // An epilogue the GPU has no WGSL for refuses the Conv with the function's reason.
    let tan_epilogue = reason(
        Arc::new(conv_op(3, 1, 1, 1, 1, Some(UnaryKind::Tan))),
        vec![
            (DType::F32, vec![1, 2, 5, 5], None),
            (DType::F32, vec![2, 2, 3, 3], Some(rand(&[2, 2, 3, 3], 2))),
        ],
        vec![1, 2, 5, 5],
        DType::F32,
    );
    assert_eq!(tan_epilogue, "op Tan has no GPU kernel");
}

/// Every function the fusion passes fold into an epilogue runs there on the GPU, in the direct
/// convolution kernel (3x3) and in the matmul kernel (pointwise).
#[test]
fn every_fusable_epilogue_lowers_and_matches_the_reference() {
    let kinds: Vec<UnaryKind> = UnaryKind::examples()
        .into_iter()
        .filter(|k| k.fuses_as_epilogue())
        .collect();
    assert!(kinds.len() >= 6, "{kinds:?}");
    for (i, &kind) in kinds.iter().enumerate() {
        for k in [3, 1] {
            let seed = (10 * i + k) as u64;
            // Weights and inputs in [-2, 2), so sums reach past Clip's and HardSigmoid's knees.
            let x: Vec<f32> = rand(&[1, 4, 6, 7], seed)
                .to_f64_vec()
                .iter()
                .map(|v| (v * 2.0) as f32)
                .collect();
            single(
                conv_op(k, 1, k / 2, 1, 1, Some(kind)),
                vec![
                    Input(Tensor::from_vec(&[1, 4, 6, 7], x).unwrap()),
                    Const(rand(&[8, 4, k, k], seed + 1)),
                    Const(rand(&[8], seed + 2)),
                ],
                1e-4,
            );
        }
    }
}

/// A function the GPU has no WGSL for is refused by name, as a standalone op and as an
/// epilogue alike; every other one lowers both ways.
#[test]
fn unary_kinds_without_wgsl_are_refused_by_name() {
    let Some(gpu) = gpu() else { return };
    for kind in UnaryKind::examples() {
        let standalone = verdict(
            gpu,
            Arc::new(Unary { kind }),
            vec![(DType::F32, vec![2, 3], None)],
            vec![2, 3],
            DType::F32,
        );
        let epilogue = verdict(
            gpu,
            Arc::new(FullyConnected {
                activation: Some(kind),
            }),
            vec![
                (DType::F32, vec![2, 3], None),
                (DType::F32, vec![3, 4], Some(rand(&[3, 4], 1))),
            ],
            vec![2, 4],
            DType::F32,
        );
        if let Err(why) = &standalone {
            assert_eq!(why, &format!("op {} has no GPU kernel", kind.name()));
        }
        assert_eq!(standalone, epilogue, "{kind}");
    }
}
