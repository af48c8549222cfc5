//! The linear-algebra kernels against the core reference over many shapes: convolutions
//! (direct, depthwise, Winograd, transposed), MatMul and Gemm.

use super::{acts, check, thread_pool, Lcg};
use crate::CpuBackend;
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::conv::Conv;
use ferrolite_core::ops::linalg::conv_geometry::{AutoPad, ConvParams};
use ferrolite_core::ops::linalg::gemm::Gemm;
use ferrolite_core::ops::linalg::matmul::MatMul;
use ferrolite_core::{DType, Op, Tensor};
use std::sync::Arc;

struct ConvCase {
    x: &'static [usize],
    w: &'static [usize],
    group: usize,
    strides: Option<&'static [usize]>,
    dilations: Option<&'static [usize]>,
    pads: Option<&'static [usize]>,
    auto_pad: AutoPad,
    bias: bool,
}

const fn cc(x: &'static [usize], w: &'static [usize]) -> ConvCase {
    ConvCase {
        x,
        w,
        group: 1,
        strides: None,
        dilations: None,
        pads: None,
        auto_pad: AutoPad::NotSet,
        bias: false,
    }
}

fn conv_cases() -> Vec<ConvCase> {
    vec![
        // 1-D.
        cc(&[1, 1, 1], &[1, 1, 1]),
        ConvCase {
            strides: Some(&[2]),
            pads: Some(&[1, 2]),
            bias: true,
            ..cc(&[2, 3, 17], &[4, 3, 3])
        },
        ConvCase {
            dilations: Some(&[3]),
            ..cc(&[1, 2, 13], &[5, 2, 3])
        },
        ConvCase {
            group: 3,
            auto_pad: AutoPad::SameUpper,
            strides: Some(&[2]),
            ..cc(&[2, 6, 9], &[3, 2, 4])
        },
        // 2-D.
        cc(&[1, 1, 5, 5], &[1, 1, 3, 3]),
        ConvCase {
            group: 2,
            strides: Some(&[2, 1]),
            dilations: Some(&[1, 2]),
            pads: Some(&[0, 1, 2, 1]),
            bias: true,
            ..cc(&[2, 4, 7, 9], &[6, 2, 3, 2])
        },
        ConvCase {
            group: 8,
            pads: Some(&[1, 1, 1, 1]),
            bias: true,
            ..cc(&[1, 8, 10, 11], &[8, 1, 3, 3])
        },
        ConvCase {
            group: 4,
            strides: Some(&[2, 2]),
            pads: Some(&[1, 0, 0, 1]),
            ..cc(&[3, 4, 9, 8], &[8, 1, 3, 3])
        },
        ConvCase {
            bias: true,
            ..cc(&[2, 16, 9, 13], &[12, 16, 1, 1])
        },
        ConvCase {
            group: 3,
            ..cc(&[1, 6, 5, 5], &[9, 2, 1, 1])
        },
        ConvCase {
            strides: Some(&[2, 2]),
            ..cc(&[1, 3, 7, 7], &[4, 3, 1, 1])
        },
        ConvCase {
            pads: Some(&[1, 1, 0, 0]),
            ..cc(&[1, 3, 4, 4], &[2, 3, 1, 1])
        },
        ConvCase {
            strides: Some(&[3, 2]),
            auto_pad: AutoPad::SameUpper,
            ..cc(&[1, 3, 8, 7], &[5, 3, 4, 3])
        },
        ConvCase {
            strides: Some(&[2, 3]),
            auto_pad: AutoPad::SameLower,
            ..cc(&[2, 3, 8, 7], &[5, 3, 4, 3])
        },
        ConvCase {
            auto_pad: AutoPad::Valid,
            pads: Some(&[9, 9, 9, 9]),
            ..cc(&[1, 2, 6, 5], &[3, 2, 2, 2])
        },
        // Many output columns: column-blocked, in parallel (N=1) and per task (N=4).
        ConvCase {
            pads: Some(&[1, 1, 1, 1]),
            bias: true,
            ..cc(&[1, 3, 64, 70], &[4, 3, 3, 3])
        },
        ConvCase {
            pads: Some(&[1, 1, 1, 1]),
            ..cc(&[4, 3, 40, 41], &[4, 3, 3, 3])
        },
        // Deep kernel: small column blocks.
        ConvCase {
            pads: Some(&[2, 2, 2, 2]),
            ..cc(&[1, 64, 20, 20], &[8, 64, 5, 5])
        },
        ConvCase {
            bias: true,
            ..cc(&[1, 32, 60, 60], &[7, 32, 1, 1])
        },
        // Depthwise 3x3 stride 1 and 2, 5x5, dilated, asymmetric pads, odd widths.
        ConvCase {
            group: 5,
            pads: Some(&[1, 1, 1, 1]),
            bias: true,
            ..cc(&[2, 5, 13, 19], &[5, 1, 3, 3])
        },
        ConvCase {
            group: 6,
            strides: Some(&[2, 2]),
            pads: Some(&[1, 1, 1, 1]),
            ..cc(&[1, 6, 15, 22], &[6, 1, 3, 3])
        },
        ConvCase {
            group: 4,
            strides: Some(&[2, 2]),
            pads: Some(&[0, 0, 1, 1]),
            bias: true,
            ..cc(&[1, 4, 16, 16], &[4, 1, 3, 3])
        },
        ConvCase {
            group: 3,
            pads: Some(&[2, 2, 2, 2]),
            bias: true,
            ..cc(&[1, 3, 9, 37], &[3, 1, 5, 5])
        },
        ConvCase {
            group: 3,
            strides: Some(&[2, 2]),
            auto_pad: AutoPad::SameUpper,
            ..cc(&[1, 3, 11, 10], &[3, 1, 5, 5])
        },
        ConvCase {
            group: 4,
            dilations: Some(&[2, 3]),
            pads: Some(&[2, 3, 1, 0]),
            ..cc(&[1, 4, 12, 14], &[4, 1, 3, 3])
        },
        ConvCase {
            group: 2,
            strides: Some(&[3, 1]),
            ..cc(&[1, 2, 10, 8], &[2, 1, 2, 4])
        },
        ConvCase {
            group: 32,
            pads: Some(&[1, 1, 1, 1]),
            bias: true,
            ..cc(&[1, 32, 56, 56], &[32, 1, 3, 3])
        },
        // Stride 1 on wide rows (the flat path): dilated, asymmetric pads.
        ConvCase {
            group: 3,
            dilations: Some(&[2, 2]),
            pads: Some(&[2, 1, 0, 3]),
            bias: true,
            ..cc(&[2, 3, 10, 70], &[3, 1, 3, 3])
        },
        // Stride 2 on rows wider than the channel-blocked path takes: odd and even left pads.
        ConvCase {
            group: 5,
            strides: Some(&[2, 2]),
            pads: Some(&[1, 1, 1, 1]),
            bias: true,
            ..cc(&[1, 5, 20, 75], &[5, 1, 3, 3])
        },
        ConvCase {
            group: 3,
            strides: Some(&[2, 2]),
            pads: Some(&[0, 0, 1, 1]),
            ..cc(&[2, 3, 9, 80], &[3, 1, 3, 3])
        },
        // 1x1 with strides (resnet's shortcuts): the subsampled input as a pointwise conv;
        // even and odd widths, a stride of 1 on one axis, groups, batches.
        ConvCase {
            strides: Some(&[2, 2]),
            bias: true,
            ..cc(&[2, 6, 9, 11], &[4, 6, 1, 1])
        },
        ConvCase {
            group: 2,
            strides: Some(&[3, 2]),
            ..cc(&[1, 4, 10, 12], &[6, 2, 1, 1])
        },
        ConvCase {
            strides: Some(&[1, 2]),
            bias: true,
            ..cc(&[1, 64, 8, 40], &[24, 64, 1, 1])
        },
        // Phase planes with a column stride of 3 and dilation, odd top padding.
        ConvCase {
            strides: Some(&[2, 3]),
            dilations: Some(&[1, 2]),
            pads: Some(&[1, 2, 0, 2]),
            bias: true,
            ..cc(&[1, 4, 11, 17], &[5, 4, 3, 2])
        },
        // Few output channels with a deep input: B read in place, also past one KC block.
        ConvCase {
            bias: true,
            ..cc(&[1, 100, 9, 41], &[24, 100, 1, 1])
        },
        ConvCase {
            ..cc(&[1, 1100, 3, 11], &[20, 1100, 1, 1])
        },
        // Large GEMMs: k > KC, m > MC, many column blocks, row splits.
        ConvCase {
            pads: Some(&[1, 1, 1, 1]),
            bias: true,
            ..cc(&[1, 40, 14, 14], &[130, 40, 3, 3])
        },
        ConvCase {
            bias: true,
            ..cc(&[1, 1100, 7, 7], &[200, 1100, 1, 1])
        },
        ConvCase {
            strides: Some(&[2, 2]),
            pads: Some(&[3, 3, 3, 3]),
            ..cc(&[1, 3, 70, 70], &[16, 3, 7, 7])
        },
        // 3-D.
        ConvCase {
            strides: Some(&[2, 1, 2]),
            dilations: Some(&[1, 2, 1]),
            pads: Some(&[1, 0, 1, 1, 1, 0]),
            bias: true,
            ..cc(&[1, 2, 5, 6, 7], &[3, 2, 3, 2, 3])
        },
        ConvCase {
            group: 2,
            ..cc(&[2, 4, 3, 4, 5], &[4, 2, 1, 2, 2])
        },
        ConvCase {
            ..cc(&[1, 5, 2, 3, 4], &[3, 5, 1, 1, 1])
        },
    ]
}

fn conv_op(c: &ConvCase) -> Arc<dyn Op> {
    conv_op_act(c, None)
}

fn conv_op_act(c: &ConvCase, activation: Option<UnaryKind>) -> Arc<dyn Op> {
    Arc::new(Conv {
        params: ConvParams {
            kernel_shape: None,
            strides: c.strides.map(|v| v.to_vec()),
            dilations: c.dilations.map(|v| v.to_vec()),
            pads: c.pads.map(|v| v.to_vec()),
            auto_pad: c.auto_pad,
        },
        group: c.group,
        activation,
    })
}

#[test]
fn conv_matches_reference() {
    let mut rng = Lcg(42);
    let mut names = Vec::new();
    for threads in [1, 3] {
        thread_pool(threads).install(|| {
            for c in conv_cases() {
                let m = c.w[0];
                let ins = vec![
                    Some(rng.tensor(c.x)),
                    Some(rng.tensor(c.w)),
                    c.bias.then(|| rng.tensor(&[m])),
                ];
                // Constant (prepacked) weights and weights read at run time.
                names.push(check(conv_op(&c), &ins, &[false, true, true]));
                check(conv_op(&c), &ins, &[false, false, false]);
            }
        });
    }
    assert!(names.iter().any(|n| n == "cpu.conv.pointwise"));
    assert!(names.iter().any(|n| n == "cpu.conv.depthwise"));
    assert!(names.iter().any(|n| n == "cpu.conv.im2col"));
    assert!(names.iter().any(|n| n == "cpu.conv.phases"));
}

#[test]
fn conv_activations_match_reference() {
    let mut rng = Lcg(5);
    let acts = acts();
    for threads in [1, 2] {
        thread_pool(threads).install(|| {
            for (i, c) in conv_cases().iter().enumerate() {
                let act = acts[i % acts.len()];
                let act = if act.is_none() {
                    acts[1 + threads]
                } else {
                    act
                };
                let ins = vec![
                    Some(rng.tensor(c.x)),
                    Some(rng.tensor(c.w)),
                    Some(rng.tensor(&[c.w[0]])),
                ];
                check(conv_op_act(c, act), &ins, &[false, true, true]);
            }
        });
    }
}

/// Depthwise convolutions on small planes (the channel-blocked path): channel counts around
/// the block of 8, every kernel/stride/dilation/padding mix, batches, bias, activations.
#[test]
fn depthwise_small_planes_match_reference() {
    let acts = acts();
    let mut rng = Lcg(11);
    let mut names = Vec::new();
    let mut i = 0usize;
    for threads in [1, 2] {
        thread_pool(threads).install(|| {
            for c in [1usize, 7, 8, 9, 20] {
                for h in [1usize, 2, 4, 7, 8, 9, 14, 15] {
                    for (kh, kw) in [(3usize, 3usize), (5, 5), (3, 5)] {
                        for s in [1usize, 2] {
                            i += 1;
                            let (d, pads) = match i % 4 {
                                0 => (1, vec![kh / 2, kw / 2, kh / 2, kw / 2]),
                                1 => (1, vec![0, 1, kh - 1, 0]),
                                2 => (2, vec![kh - 1, kw - 1, kh - 1, kw - 1]),
                                _ => (1, vec![0, 0, 0, 0]),
                            };
                            let w_in = if i.is_multiple_of(5) { h + 3 } else { h };
                            if h + pads[0] + pads[2] < d * (kh - 1) + 1
                                || w_in + pads[1] + pads[3] < d * (kw - 1) + 1
                            {
                                continue;
                            }
                            let n = if i.is_multiple_of(3) { 2 } else { 1 };
                            let op: Arc<dyn Op> = Arc::new(Conv {
                                params: ConvParams {
                                    kernel_shape: None,
                                    strides: Some(vec![s, s]),
                                    dilations: Some(vec![d, d]),
                                    pads: Some(pads),
                                    auto_pad: AutoPad::NotSet,
                                },
                                group: c,
                                activation: acts[i % acts.len()],
                            });
                            let ins = vec![
                                Some(rng.tensor(&[n, c, h, w_in])),
                                Some(rng.tensor(&[c, 1, kh, kw])),
                                i.is_multiple_of(2).then(|| rng.tensor(&[c])),
                            ];
                            let name = check(op.clone(), &ins, &[false, true, true]);
                            // One channel is an ordinary convolution (group 1).
                            if c > 1 {
                                names.push(name);
                            }
                            check(op, &ins, &[false, false, false]);
                        }
                    }
                }
            }
        });
    }
    assert!(names.len() > 250, "{} cases", names.len());
    assert!(names.iter().all(|n| n == "cpu.conv.depthwise_c8"));
}

#[test]
fn matmul_matches_reference() {
    let mut rng = Lcg(7);
    let cases: &[(&[usize], &[usize])] = &[
        (&[1, 1], &[1, 1]),
        (&[3, 5], &[5, 7]),
        (&[5], &[5, 3]),
        (&[4, 5], &[5]),
        (&[5], &[5]),
        (&[2, 3, 4], &[4, 5]),
        (&[2, 1, 3, 4], &[5, 4, 6]),
        (&[1, 100, 33], &[33, 17]),
        (&[7], &[3, 7, 2]),
        (&[3, 0], &[0, 4]),
        (&[130, 65], &[65, 31]),
        (&[4, 1, 9, 3], &[1, 2, 3, 9]),
        (&[300, 270], &[270, 70]),
        (&[3, 50, 64], &[3, 64, 50]),
        (&[1, 7, 600], &[600, 2100]),
    ];
    for threads in [1, 4] {
        thread_pool(threads).install(|| {
            for (a, b) in cases {
                let ins = vec![Some(rng.tensor(a)), Some(rng.tensor(b))];
                check(Arc::new(MatMul), &ins, &[false, true]);
                check(Arc::new(MatMul), &ins, &[false, false]);
            }
        });
    }
}

#[test]
fn gemm_matches_reference() {
    let acts = acts();
    let mut rng = Lcg(99);
    let (m, k, n) = (37, 19, 23);
    let c_shapes: &[Option<&[usize]>] = &[
        None,
        Some(&[]),
        Some(&[1]),
        Some(&[n]),
        Some(&[m, 1]),
        Some(&[m, n]),
        Some(&[1, n]),
    ];
    for threads in [1, 3] {
        thread_pool(threads).install(|| {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                for c in c_shapes {
                    for (alpha, beta) in [(1.0, 1.0), (0.5, -2.0), (1.5, 0.0)] {
                        let a = if ta {
                            rng.tensor(&[k, m])
                        } else {
                            rng.tensor(&[m, k])
                        };
                        let b = if tb {
                            rng.tensor(&[n, k])
                        } else {
                            rng.tensor(&[k, n])
                        };
                        let op = Gemm {
                            alpha,
                            beta,
                            trans_a: ta,
                            trans_b: tb,
                            activation: acts
                                [(c.map_or(0, |s| s.len()) + usize::from(ta)) % acts.len()],
                        };
                        let ins = vec![Some(a), Some(b), c.map(|s| rng.tensor(s))];
                        check(Arc::new(op.clone()), &ins, &[false, true, true]);
                        check(Arc::new(op), &ins, &[false, false, false]);
                    }
                }
            }
            // Degenerate sizes.
            for (m, k, n) in [(1, 1, 1), (1, 5, 1), (3, 0, 2)] {
                let ins = vec![Some(rng.tensor(&[m, k])), Some(rng.tensor(&[k, n])), None];
                check(Arc::new(Gemm::default()), &ins, &[false, false]);
            }
        });
    }
}

#[test]
fn unsupported_requests_fall_back() {
    use ferrolite_core::plan::{KernelProvider, KernelRequest};
    use ferrolite_core::{InferInput, Node, TensorInfo, ValueId};
    let x = Tensor::from_vec(&[1, 1, 3], vec![1.0f64, 2., 3.]).unwrap();
    let w = Tensor::from_vec(&[1, 1, 1], vec![1.0f64]).unwrap();
    let op: Arc<dyn Op> = Arc::new(Conv::default());
    let infer_inputs = vec![
        Some(InferInput {
            dtype: x.dtype(),
            shape: x.shape(),
            value: None,
        }),
        Some(InferInput {
            dtype: w.dtype(),
            shape: w.shape(),
            value: None,
        }),
    ];
    let outputs = vec![TensorInfo::new(DType::F64, [1, 1, 3])];
    let node = Node {
        name: "n".into(),
        op,
        inputs: vec![Some(ValueId(0)), Some(ValueId(1))],
        outputs: vec![ValueId(2)],
    };
    let req = KernelRequest {
        node: &node,
        inputs: &infer_inputs,
        outputs: &outputs,
        packs: ferrolite_core::prepacked::Prepacks::none(),
    };
    assert!(CpuBackend::default().kernel(&req).unwrap().is_none());
}

#[test]
fn conv_transpose_matches_reference() {
    let acts = acts();
    use ferrolite_core::ops::linalg::conv_transpose::ConvTranspose;
    let mut rng = Lcg(11);
    type Case = (
        &'static [usize],
        &'static [usize],
        usize,
        &'static [usize],
        Option<&'static [usize]>,
        &'static [usize],
        Option<&'static [usize]>,
    );
    // x, w, group, strides, pads, dilations, output_padding
    let cases: &[Case] = &[
        (
            &[1, 8, 10, 12],
            &[8, 4, 2, 2],
            1,
            &[2, 2],
            None,
            &[1, 1],
            None,
        ),
        (
            &[2, 6, 7, 5],
            &[6, 3, 3, 3],
            1,
            &[2, 2],
            Some(&[1, 1, 1, 1]),
            &[1, 1],
            Some(&[1, 1]),
        ),
        (
            &[1, 4, 5, 6],
            &[4, 3, 3, 2],
            2,
            &[1, 2],
            Some(&[0, 1, 2, 0]),
            &[2, 1],
            None,
        ),
        (
            &[1, 3, 9, 9],
            &[3, 5, 4, 4],
            1,
            &[3, 3],
            Some(&[1, 2, 1, 0]),
            &[1, 1],
            None,
        ),
        (
            &[1, 300, 6, 6],
            &[300, 20, 2, 2],
            1,
            &[2, 2],
            None,
            &[1, 1],
            None,
        ),
        // Several bands of input rows: in parallel (kernel rows within the stride, output
        // rows between and after them only the bias), and in turn (overlapping rows).
        (
            &[1, 4, 40, 64],
            &[4, 24, 2, 2],
            1,
            &[2, 2],
            None,
            &[1, 1],
            None,
        ),
        (
            &[1, 2, 45, 30],
            &[2, 40, 2, 2],
            1,
            &[3, 3],
            None,
            &[1, 1],
            Some(&[2, 2]),
        ),
        // Kernel = stride: every output value from one column value (3 wide, and 2 above).
        (
            &[1, 5, 7, 9],
            &[5, 6, 3, 3],
            1,
            &[3, 3],
            None,
            &[1, 1],
            None,
        ),
        (
            &[1, 3, 50, 60],
            &[3, 30, 3, 3],
            1,
            &[2, 2],
            Some(&[1, 1, 1, 1]),
            &[1, 1],
            None,
        ),
    ];
    for threads in [1, 3] {
        thread_pool(threads).install(|| {
            for (i, &(x, w, group, strides, pads, dil, opad)) in cases.iter().enumerate() {
                let op = ConvTranspose {
                    params: ConvParams {
                        kernel_shape: None,
                        strides: Some(strides.to_vec()),
                        dilations: Some(dil.to_vec()),
                        pads: pads.map(|p| p.to_vec()),
                        auto_pad: AutoPad::NotSet,
                    },
                    group,
                    activation: acts[i % acts.len()],
                    output_padding: opad.map(|p| p.to_vec()),
                    output_shape: None,
                };
                let m = w[1] * group;
                let ins = vec![
                    Some(rng.tensor(x)),
                    Some(rng.tensor(w)),
                    (i % 2 == 0).then(|| rng.tensor(&[m])),
                ];
                let op: Arc<dyn Op> = Arc::new(op);
                assert_eq!(
                    check(op.clone(), &ins, &[false, true, true]),
                    "cpu.conv_transpose"
                );
                check(op, &ins, &[false, false, false]);
            }
        });
    }
}
