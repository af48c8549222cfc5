//! The blocked (NCHWc) kernels against the reference over many shapes: convolutions
//! (ordinary, depthwise, plain input), pooling and the reorders.

use crate::tests::acts;
use crate::tests::{check, check_each, thread_pool, Lcg};
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::layout::{Nchwc, ReorderNchwc};
use ferrolite_core::ops::linalg::conv::Conv;
use ferrolite_core::ops::linalg::conv_geometry::ConvParams;
use ferrolite_core::ops::nn::geometry::AutoPad;
use ferrolite_core::ops::nn::norm::BatchNorm;
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};
use ferrolite_core::{Op, Tensor};
use std::sync::Arc;

/// A value below `n` from the generator.
fn below(rng: &mut Lcg, n: usize) -> usize {
    ((rng.next() + 1.0) / 2.0 * n as f32) as usize % n
}

fn blocked(x: &Tensor) -> Tensor {
    let op = ReorderNchwc {
        to_blocked: true,
        block: crate::nchwc::B,
    };
    op.eval(&[Some(x)]).unwrap().remove(0)
}

/// One convolution: input `[n, c, h, w]`, `m` outputs, square kernel `k`, stride, dilation,
/// pads (top, left, bottom, right), group 1 or depthwise.
#[allow(clippy::too_many_arguments)]
fn check_conv(
    rng: &mut Lcg,
    x: [usize; 4],
    m: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    pads: [usize; 4],
    depthwise: bool,
    act: Option<UnaryKind>,
) -> String {
    let c = x[1];
    let cg = if depthwise { 1 } else { c };
    let conv = Conv {
        params: ConvParams {
            kernel_shape: None,
            strides: Some(vec![stride, stride]),
            dilations: Some(vec![dilation, dilation]),
            pads: Some(pads.to_vec()),
            auto_pad: AutoPad::NotSet,
        },
        group: if depthwise { c } else { 1 },
        activation: act,
    };
    let blocked_input = c.is_multiple_of(8);
    let op: Arc<dyn Op> = Arc::new(Nchwc {
        inner: Arc::new(conv),
        blocked_input,
        block: crate::nchwc::B,
    });
    let xt = rng.tensor(&x);
    let xt = if blocked_input { blocked(&xt) } else { xt };
    let bias = (rng.next() > -0.5).then(|| rng.tensor(&[m]));
    let ins = vec![Some(xt), Some(rng.tensor(&[m, cg, k, k])), bias];
    check(op, &ins, &[false, true, true])
}

#[test]
fn blocked_convs_match_reference() {
    let acts = acts();
    let mut rng = Lcg(17);
    let mut names = Vec::new();
    for threads in [1, 3] {
        thread_pool(threads).install(|| {
            // Every tile width (1..=8 pixels and rows split over tiles), every block count,
            // plain inputs, strides, dilations, uneven pads, batches, chunked channels.
            for (i, &(c, m, hw, k, s, d)) in [
                (8, 8, 1, 1, 1, 1),
                (8, 16, 5, 3, 1, 1),
                (16, 24, 7, 3, 2, 1),
                (3, 16, 13, 3, 2, 1),
                (5, 8, 9, 5, 1, 2),
                (24, 40, 6, 1, 1, 1),
                (16, 8, 11, 7, 3, 1),
                (64, 16, 4, 3, 1, 1),
                (512, 16, 3, 1, 1, 1),
                (12, 32, 10, 3, 1, 1),
                // AVX-512: four blocks a unit with chunked channels, eight-pixel tiles of
                // flat rows, three blocks (a half-padded vector).
                (64, 32, 9, 3, 1, 1),
                (16, 64, 20, 1, 1, 1),
                (8, 24, 17, 3, 1, 1),
                // Flat 1x1 planes cut into even tiles (49 pixels as seven of seven), three
                // blocks.
                (32, 24, 7, 1, 1, 1),
            ]
            .iter()
            .enumerate()
            {
                let p = k / 2 * d;
                let pads = [p, p + i % 2, p + (i / 2) % 2, p];
                let n = 1 + i % 2;
                let act = acts[i % acts.len()];
                let hw2 = hw + i % 3;
                names.push(check_conv(
                    &mut rng,
                    [n, c, hw, hw2],
                    m,
                    k,
                    s,
                    d,
                    pads,
                    false,
                    act,
                ));
                check_conv(&mut rng, [n, c, hw, hw2], m, k, s, d, [0; 4], false, act);
            }
        });
    }
    assert!(names.iter().all(|n| n == "cpu.nchwc.conv"), "{names:?}");
}

/// 3x3 stride-1 convolutions big enough for the blocked Winograd kernel under AVX-512 (the
/// direct kernel elsewhere): odd and even sizes (partial tiles at the bottom and right),
/// uneven and no pads, batches, activations, 16 to 128 input channels, output channels in
/// whole and partial panels, and as many threads as blocks of tiles or fewer.
#[test]
fn blocked_winograd_convs_match_reference() {
    let acts = acts();
    let mut rng = Lcg(29);
    let mut names = Vec::new();
    for threads in [1, 3] {
        thread_pool(threads).install(|| {
            for (i, &(c, m, h, w, pads)) in [
                (64, 8, 24, 25, [1, 1, 1, 1]),
                (72, 24, 30, 27, [1, 0, 1, 2]),
                (128, 64, 28, 28, [1, 1, 1, 1]),
                (64, 40, 30, 31, [0, 0, 0, 0]),
                (64, 32, 57, 29, [1, 1, 0, 1]),
                // Few input channels (squeezenet's expand convs), output channels that
                // leave the last panel of 32 one or two vectors, or part of one.
                (16, 64, 55, 55, [1, 1, 1, 1]),
                (32, 24, 27, 14, [1, 1, 1, 1]),
                (48, 200, 13, 13, [1, 1, 1, 1]),
                (16, 8, 12, 12, [1, 1, 1, 1]),
            ]
            .iter()
            .enumerate()
            {
                let x = [1 + i % 2, c, h, w];
                let act = acts[i % acts.len()];
                names.extend(check_conv_each(&mut rng, x, m, pads, act));
            }
        });
    }
    for (isa, name) in names {
        let want = if isa.name() == "avx512" {
            "cpu.nchwc.winograd4"
        } else {
            "cpu.nchwc.conv"
        };
        assert_eq!(name, want, "{isa}");
    }
}

/// A 3x3 stride-1 blocked convolution of `x` to `m` channels: the kernel name per ISA.
fn check_conv_each(
    rng: &mut Lcg,
    x: [usize; 4],
    m: usize,
    pads: [usize; 4],
    act: Option<UnaryKind>,
) -> Vec<(crate::Isa, String)> {
    let conv = Conv {
        params: ConvParams {
            kernel_shape: None,
            strides: Some(vec![1, 1]),
            dilations: Some(vec![1, 1]),
            pads: Some(pads.to_vec()),
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
        activation: act,
    };
    let op: Arc<dyn Op> = Arc::new(Nchwc {
        inner: Arc::new(conv),
        blocked_input: true,
        block: crate::nchwc::B,
    });
    let xt = blocked(&rng.tensor(&x));
    let bias = (rng.next() > -0.5).then(|| rng.tensor(&[m]));
    let ins = vec![Some(xt), Some(rng.tensor(&[m, x[1], 3, 3])), bias];
    check_each(op, &ins, &[false, true, true])
}

#[test]
fn blocked_depthwise_convs_match_reference() {
    let acts = acts();
    let mut rng = Lcg(23);
    let mut names = Vec::new();
    for threads in [1, 2] {
        thread_pool(threads).install(|| {
            for i in 0..24 {
                let c = 8 * (1 + below(&mut rng, 3));
                let (h, w) = (1 + below(&mut rng, 40), 1 + below(&mut rng, 20));
                let k = [1, 3, 5][below(&mut rng, 3)];
                let (s, d) = (1 + below(&mut rng, 2), 1 + usize::from(i % 5 == 4));
                let p = if i % 3 == 0 { 0 } else { k / 2 * d };
                let pads = [p, p, p + below(&mut rng, 2), p];
                if (h + pads[0] + pads[2]) < (k - 1) * d + 1 || (w + 2 * p) < (k - 1) * d + 1 {
                    continue;
                }
                let act = acts[i % acts.len()];
                let x = [1 + i % 2, c, h, w];
                names.push(check_conv(&mut rng, x, c, k, s, d, pads, true, act));
            }
        });
    }
    // Planes copied band by band (several bands, the last one short), then planes too big
    // to copy: read in place, border pixels clipped.
    for (i, (k, s, d, pads, hw)) in [
        (3, 1, 1, [1, 1, 1, 1], [57, 50]),
        (3, 2, 1, [1, 0, 1, 1], [61, 70]),
        (5, 1, 2, [4, 3, 4, 4], [45, 52]),
        (5, 2, 1, [2, 2, 1, 2], [62, 70]),
        (3, 1, 1, [1, 1, 1, 1], [131, 170]),
        (3, 2, 1, [1, 0, 1, 1], [140, 151]),
        (5, 1, 2, [4, 3, 4, 4], [133, 160]),
        (5, 2, 1, [2, 2, 1, 2], [130, 162]),
    ]
    .into_iter()
    .enumerate()
    {
        let x = [1, 16, hw[0], hw[1]];
        let act = acts[(i + 1) % acts.len()];
        names.push(check_conv(&mut rng, x, 16, k, s, d, pads, true, act));
    }
    assert!(names.len() > 20 && names.iter().all(|n| n == "cpu.nchwc.depthwise"));
}

#[test]
fn blocked_pools_match_reference() {
    let mut rng = Lcg(29);
    for (x, k, s, pads, d, ceil) in [
        ([1, 8, 9, 9], [3, 3], [2, 2], [0, 0, 0, 0], [1, 1], false),
        ([2, 16, 112, 17], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], true),
        ([1, 8, 7, 8], [2, 2], [2, 2], [0, 0, 0, 0], [1, 1], true),
        ([1, 24, 13, 13], [3, 3], [1, 1], [1, 0, 1, 2], [1, 1], false),
        ([1, 8, 10, 11], [3, 2], [1, 3], [0, 1, 0, 1], [2, 1], false),
        ([1, 8, 5, 5], [5, 5], [1, 1], [2, 2, 2, 2], [1, 1], false),
    ] {
        let xt = blocked(&rng.tensor(&x));
        for (kind, cip) in [
            (PoolKind::Max, false),
            (PoolKind::Average, false),
            (PoolKind::Average, true),
        ] {
            let p = Pool {
                kind,
                kernel_shape: k.to_vec(),
                strides: s.to_vec(),
                pads: pads.to_vec(),
                dilations: d.to_vec(),
                ceil_mode: ceil,
                count_include_pad: cip,
                ..Default::default()
            };
            let op = Nchwc {
                inner: Arc::new(p),
                blocked_input: true,
                block: crate::nchwc::B,
            };
            let name = check(Arc::new(op), &[Some(xt.clone())], &[]);
            assert!(name.starts_with("cpu.nchwc."), "{name}");
        }
    }
    for x in [[1, 8, 7, 7], [2, 16, 1, 1], [1, 512, 13, 13]] {
        let xt = blocked(&rng.tensor(&x));
        for kind in [PoolKind::Max, PoolKind::Average] {
            let op = Nchwc {
                inner: Arc::new(GlobalPool { kind, p: 2.0 }),
                blocked_input: true,
                block: crate::nchwc::B,
            };
            let name = check(Arc::new(op), &[Some(xt.clone())], &[]);
            assert_eq!(name, "cpu.nchwc.globalpool");
        }
    }
}

#[test]
fn reorders_match_reference() {
    let mut rng = Lcg(31);
    for x in [[1, 8, 1, 1], [2, 16, 3, 5], [1, 24, 9, 9], [1, 8, 4, 2]] {
        let xt = rng.tensor(&x);
        let to = check(
            Arc::new(ReorderNchwc {
                to_blocked: true,
                block: crate::nchwc::B,
            }),
            &[Some(xt.clone())],
            &[],
        );
        let from = check(
            Arc::new(ReorderNchwc {
                to_blocked: false,
                block: crate::nchwc::B,
            }),
            &[Some(blocked(&xt))],
            &[],
        );
        assert_eq!(
            (to.as_str(), from.as_str()),
            ("cpu.to_nchwc", "cpu.from_nchwc")
        );
    }
}

#[test]
fn blocked_batchnorm_matches_reference() {
    let mut rng = Lcg(37);
    for x in [[1, 8, 5, 7], [2, 24, 3, 3]] {
        let c = x[1];
        let xt = blocked(&rng.tensor(&x));
        let var = Tensor::from_vec(&[c], (0..c).map(|i| 0.5 + i as f32 / 8.0).collect()).unwrap();
        let ins = vec![
            Some(xt),
            Some(rng.tensor(&[c])),
            Some(rng.tensor(&[c])),
            Some(rng.tensor(&[c])),
            Some(var),
        ];
        let op = Nchwc {
            inner: Arc::new(BatchNorm { epsilon: 1e-3 }),
            blocked_input: true,
            block: crate::nchwc::B,
        };
        let name = check(Arc::new(op), &ins, &[false, true, true, true, true]);
        assert_eq!(name, "cpu.nchwc.batchnorm");
    }
}

/// Tensors blocked by other than the [`crate::nchwc::B`] channels the kernels are written for
/// (a file optimized where the table chose another block) are not taken by the blocked
/// kernels: each says why, and the plan falls back to the reference, which takes any block.
#[test]
fn blocked_kernels_refuse_another_block_and_say_so() {
    let mut rng = Lcg(41);
    let x = rng.tensor(&[1, 16, 5, 5]);
    let w = rng.tensor(&[16, 16, 3, 3]);
    let other = 2 * crate::nchwc::B;
    let xb = ReorderNchwc {
        to_blocked: true,
        block: other,
    }
    .eval(&[Some(&x)])
    .unwrap()
    .remove(0);
    let wrap = |inner: Arc<dyn Op>| -> Arc<dyn Op> {
        Arc::new(Nchwc {
            inner,
            blocked_input: true,
            block: other,
        })
    };
    type Case = (Arc<dyn Op>, Vec<Option<Tensor>>);
    let cases: [Case; 5] = [
        (
            wrap(Arc::new(Conv::default())),
            vec![Some(xb.clone()), Some(w)],
        ),
        (
            wrap(Arc::new(Pool {
                kind: PoolKind::Max,
                kernel_shape: vec![3, 3],
                ..Default::default()
            })),
            vec![Some(xb.clone())],
        ),
        (
            wrap(Arc::new(GlobalPool {
                kind: PoolKind::Average,
                p: 2.0,
            })),
            vec![Some(xb.clone())],
        ),
        (
            Arc::new(ReorderNchwc {
                to_blocked: true,
                block: other,
            }),
            vec![Some(x)],
        ),
        (
            Arc::new(ReorderNchwc {
                to_blocked: false,
                block: other,
            }),
            vec![Some(xb)],
        ),
    ];
    for isa in crate::tests::tested_isas() {
        for (op, ins) in &cases {
            let backend = crate::CpuBackend::new(isa);
            let (selection, _, _) = crate::tests::selection_for(&backend, op, ins, &[false, true]);
            assert!(selection.kernel.is_none(), "{isa:?} {op:?}");
            let why = format!("blocks by {} channels, not {other}", crate::nchwc::B);
            assert!(
                selection
                    .considered
                    .iter()
                    .any(|c| c.to_string().contains(&why)),
                "{isa:?} {op:?}: {:?}",
                selection.considered
            );
        }
    }
}
