//! The elementwise, pooling, softmax, reduction, normalisation and movement kernels against
//! the core reference implementations over many shapes.

use super::kernel_for;
use crate::CpuBackend;
use ferrolite_core::ops::elementwise::binary::{Binary, BinaryKind};
use ferrolite_core::ops::elementwise::clip::Clip;
use ferrolite_core::ops::elementwise::unary::{Unary, UnaryKind};
use ferrolite_core::ops::elementwise::variadic::{Variadic, VariadicKind};
use ferrolite_core::ops::nn::geometry::AutoPad;
use ferrolite_core::ops::nn::norm::{BatchNorm, LayerNorm};
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};
use ferrolite_core::ops::nn::reduce::{Reduce, ReduceKind};
use ferrolite_core::ops::nn::softmax::{Softmax, SoftmaxKind};
use ferrolite_core::ops::shape::concat::Concat;
use ferrolite_core::ops::shape::split::Split;
use ferrolite_core::ops::shape::transpose::Transpose;
use ferrolite_core::{DType, Op, Tensor};
use std::sync::Arc;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_vec(shape, (0..n).map(|_| self.next() * scale).collect()).unwrap()
    }
}

/// Runs `op` through the CPU provider (constants where `constant[i]`) and the reference,
/// single-threaded and on four threads; panics when no fast kernel is offered or the results
/// differ by more than `tol` relative to the largest magnitude.
fn check_tol(op: Arc<dyn Op>, inputs: &[Option<Tensor>], constant: &[bool], tol: f32) {
    for isa in crate::tests::tested_isas() {
        check_isa(CpuBackend::new(isa), op.clone(), inputs, constant, tol);
    }
}

/// [`check_tol`] on one backend.
fn check_isa(
    cpu: CpuBackend,
    op: Arc<dyn Op>,
    inputs: &[Option<Tensor>],
    constant: &[bool],
    tol: f32,
) {
    let (kernel, outputs) = kernel_for(&cpu, &op, inputs, constant);
    // An empty data input or output is the reference's (`kernel_for` checks that).
    let empty = outputs.iter().any(|o| o.numel() == 0)
        || inputs[0].as_ref().is_some_and(|x| x.numel() == 0);
    assert!(
        empty || kernel.name().starts_with("cpu."),
        "{}",
        kernel.name()
    );
    let refs: Vec<Option<&Tensor>> = inputs.iter().map(|t| t.as_ref()).collect();
    let expected = op.eval(&refs).unwrap();
    let shapes: Vec<_> = inputs
        .iter()
        .map(|t| t.as_ref().map(|t| t.shape().to_vec()))
        .collect();
    for threads in [1, 4] {
        let mut outs: Vec<Tensor> = outputs
            .iter()
            .map(|o| Tensor::full(DType::F32, &o.shape, f64::NAN).unwrap())
            .collect();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| kernel.run_alone(&refs, &mut outs)).unwrap();
        for (o, e) in outs.iter().zip(&expected) {
            assert_eq!(o.shape(), e.shape(), "{op:?}");
            let (got, want) = (o.as_slice::<f32>().unwrap(), e.as_slice::<f32>().unwrap());
            let scale = want
                .iter()
                .filter(|v| v.is_finite())
                .fold(1.0f32, |m, v| m.max(v.abs()));
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                let ok = (g - w).abs() <= tol * scale || (g.is_nan() && w.is_nan()) || (g == w);
                assert!(
                    ok,
                    "{op:?} {shapes:?} t{threads}: element {i}: got {g}, want {w}"
                );
            }
        }
    }
    // In place: the input arrives as the output's contents and is absent from `inputs`.
    if let Some(k) = kernel.in_place_input() {
        let mut in_place = refs.clone();
        in_place[k] = None;
        let source = refs[k].unwrap();
        for threads in [1, 4] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut outs =
                vec![
                    Tensor::from_bytes(source.dtype(), &outputs[0].shape, source.bytes()).unwrap(),
                ];
            pool.install(|| kernel.run_alone(&in_place, &mut outs))
                .unwrap();
            let (got, want) = (
                outs[0].as_slice::<f32>().unwrap(),
                expected[0].as_slice::<f32>().unwrap(),
            );
            let scale = want
                .iter()
                .filter(|v| v.is_finite())
                .fold(1.0f32, |m, v| m.max(v.abs()));
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                let ok = (g - w).abs() <= tol * scale || (g.is_nan() && w.is_nan()) || (g == w);
                assert!(
                    ok,
                    "{op:?} {shapes:?} in place t{threads}: element {i}: got {g}, want {w}"
                );
            }
        }
    }
}

fn check(op: Arc<dyn Op>, inputs: &[Option<Tensor>], constant: &[bool]) {
    check_tol(op, inputs, constant, 2e-6);
}

const BROADCASTS: &[(&[usize], &[usize])] = &[
    (&[7], &[7]),
    (&[2, 3, 5, 7], &[2, 3, 5, 7]),
    (&[300, 301], &[300, 301]),
    (&[2, 3, 5, 7], &[]),
    (&[], &[2, 3, 5, 7]),
    (&[2, 3, 5, 7], &[1]),
    (&[2, 3, 5, 7], &[3, 1, 1]),
    (&[2, 3, 5, 7], &[1, 3, 1, 1]),
    (&[3, 1, 1], &[2, 3, 5, 7]),
    (&[2, 3, 5, 7], &[7]),
    (&[1, 128, 19], &[19]),
    (&[19], &[4, 9, 19]),
    (&[3, 1, 5], &[1, 4, 1]),
    (&[2, 3, 1, 7], &[3, 5, 1]),
    (&[2, 1, 5, 1], &[1, 3, 1, 7]),
    (&[2, 3, 5, 7], &[2, 3, 1, 1]),
    (&[2, 3, 5, 7], &[2, 1, 5, 7]),
    (&[1, 64, 90, 91], &[1, 64, 1, 1]),
    (&[4, 160, 170], &[170]),
    (&[1, 1, 1], &[1]),
    (&[0, 3], &[3]),
    // Blocked (NCHWc) per-channel operands: a repeated run of 8, on either side, split
    // over threads at any offset.
    (&[2, 3, 4, 5, 8], &[1, 3, 1, 1, 8]),
    (&[1, 3, 1, 1, 8], &[2, 3, 4, 5, 8]),
    (&[1, 3, 61, 67, 8], &[1, 3, 1, 1, 8]),
    (&[3, 9, 5], &[3, 1, 5]),
];

#[test]
fn binary_broadcasts() {
    let mut r = Lcg(1);
    // Every kind with an f32 loop; PRelu and Pow have their own cases below (a slope that
    // broadcasts onto X; exponents that keep the results finite).
    let kinds: Vec<BinaryKind> = BinaryKind::examples()
        .into_iter()
        .filter(|&k| crate::elementwise::binary_op(k).is_ok())
        .collect();
    assert!(kinds.contains(&BinaryKind::PRelu) && kinds.contains(&BinaryKind::Pow));
    let plain = || {
        kinds
            .iter()
            .copied()
            .filter(|k| !matches!(k, BinaryKind::PRelu | BinaryKind::Pow))
    };
    assert!(plain().count() >= 4);
    for (a, b) in BROADCASTS {
        for kind in plain() {
            let (x, y) = (r.tensor(a, 2.0), r.tensor(b, 2.0));
            check(Arc::new(Binary::new(kind)), &[Some(x), Some(y)], &[]);
        }
        for kind in VariadicKind::ALL {
            let (x, y) = (r.tensor(a, 2.0), r.tensor(b, 2.0));
            check(Arc::new(Variadic { kind }), &[Some(x), Some(y)], &[]);
        }
    }
    // PRelu: the slope broadcasts onto X.
    for (x, s) in [
        (&[2usize, 3, 5, 7][..], &[3usize, 1, 1][..]),
        (&[4, 9], &[9]),
    ] {
        let (x, s) = (r.tensor(x, 2.0), r.tensor(s, 1.0));
        check(
            Arc::new(Binary::new(BinaryKind::PRelu)),
            &[Some(x), Some(s)],
            &[false, true],
        );
    }
}

#[test]
fn pow_exponents() {
    let mut r = Lcg(2);
    for e in [2.0f32, 0.5, 3.0, 1.0, 1.7, -0.5] {
        for shape in [&[37usize][..], &[2, 64, 33]] {
            let x = r.tensor(shape, 3.0);
            let x = Tensor::from_vec(
                shape,
                x.as_slice::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v.abs() + 0.1)
                    .collect(),
            )
            .unwrap();
            let e = Tensor::from_vec(&[], vec![e]).unwrap();
            check(
                Arc::new(Binary::new(BinaryKind::Pow)),
                &[Some(x), Some(e)],
                &[false, true],
            );
        }
    }
    // Element-wise exponents, negative bases with integral exponents.
    let x = r.tensor(&[5, 9], 3.0);
    let e = Tensor::from_vec(&[9], (0..9).map(|i| i as f32 - 4.0).collect()).unwrap();
    check(
        Arc::new(Binary::new(BinaryKind::Pow)),
        &[Some(x), Some(e)],
        &[],
    );
}

#[test]
fn unary_kinds() {
    let mut r = Lcg(3);
    // Every kind with an f32 loop: a kind that gets one is tested without an edit here.
    let kinds: Vec<UnaryKind> = UnaryKind::examples()
        .into_iter()
        .filter(|&k| crate::elementwise::unary_work(k).is_ok())
        .collect();
    assert!(kinds.len() >= 16, "{kinds:?}");
    for kind in kinds {
        let (lo, hi) = kind.test_domain();
        for shape in [&[1usize][..], &[3, 37], &[2, 16, 45, 47], &[0, 4]] {
            let x = r.tensor(shape, 1.0);
            let x = x.as_slice::<f32>().unwrap();
            let x = x.iter().map(|v| lo + (v + 1.0) * 0.5 * (hi - lo)).collect();
            let x = Tensor::from_vec(shape, x).unwrap();
            check(Arc::new(Unary { kind }), &[Some(x)], &[]);
        }
    }
}

#[test]
fn clip_bounds() {
    let mut r = Lcg(4);
    let x = r.tensor(&[3, 5, 17], 8.0);
    let s = |v: f32| Some(Tensor::from_vec(&[], vec![v]).unwrap());
    check(
        Arc::new(Clip::default()),
        &[Some(x.clone()), s(0.0), s(6.0)],
        &[true; 3],
    );
    check(
        Arc::new(Clip::default()),
        &[Some(x.clone()), None, s(1.0)],
        &[],
    );
    check(Arc::new(Clip::default()), &[Some(x.clone()), s(-1.0)], &[]);
    check(Arc::new(Clip::default()), &[Some(x.clone())], &[]);
    check(
        Arc::new(Clip {
            min: Some(-0.5),
            max: Some(0.5),
        }),
        &[Some(x)],
        &[],
    );
}

struct PoolCase {
    x: &'static [usize],
    k: [i64; 2],
    s: [i64; 2],
    pads: [i64; 4],
    d: [i64; 2],
    ceil: bool,
    auto_pad: AutoPad,
}

const fn pc(x: &'static [usize], k: [i64; 2]) -> PoolCase {
    PoolCase {
        x,
        k,
        s: [1, 1],
        pads: [0; 4],
        d: [1, 1],
        ceil: false,
        auto_pad: AutoPad::NotSet,
    }
}

#[test]
fn pools() {
    let cases = [
        pc(&[1, 1, 5, 5], [3, 3]),
        pc(&[2, 3, 9, 11], [2, 2]),
        PoolCase {
            s: [2, 2],
            pads: [1, 1, 1, 1],
            ..pc(&[1, 64, 112, 112], [3, 3])
        },
        PoolCase {
            s: [2, 2],
            ceil: true,
            ..pc(&[1, 4, 55, 55], [3, 3])
        },
        PoolCase {
            s: [2, 3],
            pads: [0, 2, 1, 1],
            ceil: true,
            ..pc(&[2, 2, 10, 13], [3, 4])
        },
        PoolCase {
            d: [2, 3],
            pads: [2, 1, 2, 3],
            ..pc(&[1, 2, 9, 12], [2, 3])
        },
        PoolCase {
            s: [3, 2],
            d: [2, 2],
            pads: [1, 1, 0, 2],
            ceil: true,
            ..pc(&[1, 3, 14, 15], [3, 3])
        },
        PoolCase {
            auto_pad: AutoPad::SameUpper,
            s: [2, 2],
            ..pc(&[1, 3, 7, 8], [3, 2])
        },
        PoolCase {
            auto_pad: AutoPad::SameLower,
            ..pc(&[1, 3, 7, 8], [2, 4])
        },
        PoolCase {
            pads: [2, 2, 2, 2],
            ..pc(&[1, 1, 3, 3], [5, 5])
        },
        pc(&[1, 5, 7, 7], [7, 7]),
    ];
    let mut r = Lcg(5);
    for c in &cases {
        let x = r.tensor(c.x, 3.0);
        // Every kind the kernels take, averages with and without the padding counted.
        let kinds: Vec<(PoolKind, bool)> = pool_kinds()
            .flat_map(|(kind, avg)| {
                let cips: &[bool] = if avg { &[false, true] } else { &[false] };
                cips.iter().map(move |&cip| (kind, cip))
            })
            .collect();
        assert_eq!(kinds.len(), 3, "{kinds:?}");
        for &(kind, cip) in &kinds {
            let p = Pool {
                kind,
                kernel_shape: c.k.to_vec(),
                strides: c.s.to_vec(),
                pads: c.pads.to_vec(),
                dilations: c.d.to_vec(),
                auto_pad: c.auto_pad,
                ceil_mode: c.ceil,
                count_include_pad: cip,
                ..Default::default()
            };
            check(Arc::new(p), &[Some(x.clone())], &[]);
        }
    }
    for shape in [
        &[1usize, 3, 7, 7][..],
        &[2, 5, 13],
        &[1, 512, 7, 7],
        &[3, 2],
    ] {
        for (kind, _) in pool_kinds() {
            let x = r.tensor(shape, 3.0);
            check(Arc::new(GlobalPool { kind, p: 2.0 }), &[Some(x)], &[]);
        }
    }
}

/// The pooling kinds the kernels take, with whether each averages.
fn pool_kinds() -> impl Iterator<Item = (PoolKind, bool)> {
    PoolKind::ALL.into_iter().filter_map(|kind| {
        let p = Pool {
            kind,
            ..Default::default()
        };
        crate::pool::averages(&p).map(|avg| (kind, avg))
    })
}

#[test]
fn softmaxes() {
    let mut r = Lcg(6);
    for shape in [&[7usize][..], &[3, 37], &[2, 4, 128, 128], &[2, 3, 5, 9]] {
        for axis in -(shape.len() as i64)..shape.len() as i64 {
            for kind in [SoftmaxKind::Softmax, SoftmaxKind::LogSoftmax] {
                for legacy_2d in [false, true] {
                    let x = r.tensor(shape, 6.0);
                    let op = Softmax {
                        kind,
                        axis,
                        legacy_2d,
                    };
                    check_tol(Arc::new(op), &[Some(x)], &[], 1e-5);
                }
            }
        }
    }
}

#[test]
fn reductions() {
    let mut r = Lcg(7);
    for shape in [
        &[7usize][..],
        &[3, 37],
        &[2, 3, 5, 9],
        &[1, 128, 256],
        &[4, 300, 70],
    ] {
        let rank = shape.len() as i64;
        let mut axes_sets: Vec<Option<Vec<i64>>> = vec![None, Some(vec![-1])];
        for a in 0..rank {
            axes_sets.push(Some(vec![a]));
            if a + 1 < rank {
                axes_sets.push(Some(vec![a + 1, a]));
            }
        }
        for axes in axes_sets {
            let kinds = ReduceKind::ALL.into_iter();
            for kind in kinds.filter(|&k| crate::reduce::Fold::of(k).is_ok()) {
                for keepdims in [true, false] {
                    let x = r.tensor(shape, 2.0);
                    // Half through the attribute, half through a constant axes input.
                    let as_input = keepdims && axes.is_some();
                    let op = Reduce {
                        kind,
                        axes: if as_input { None } else { axes.clone() },
                        keepdims,
                        noop_with_empty_axes: false,
                    };
                    let mut inputs = vec![Some(x)];
                    if as_input {
                        let a = axes.clone().unwrap_or_default();
                        inputs.push(Some(Tensor::from_vec(&[a.len()], a).unwrap()));
                    }
                    check_tol(Arc::new(op), &inputs, &[false, true], 1e-5);
                }
            }
        }
    }
}

#[test]
fn norms() {
    let mut r = Lcg(8);
    for (x, axis, s) in [
        (&[2usize, 5, 16][..], -1i64, &[16usize][..]),
        (&[1, 128, 256], -1, &[256]),
        (&[3, 4, 5], 1, &[4, 5]),
        (&[3, 4, 5], 1, &[1, 4, 5]),
        (&[6, 37], 0, &[6, 37]),
    ] {
        for bias in [false, true] {
            for outs in 1..=3 {
                let xt = r.tensor(x, 3.0);
                let st = r.tensor(s, 1.0);
                let mut inputs = vec![Some(xt), Some(st)];
                if bias {
                    inputs.push(Some(r.tensor(s, 1.0)));
                }
                let op = LayerNorm {
                    axis,
                    num_outputs: outs,
                    ..Default::default()
                };
                check_tol(Arc::new(op), &inputs, &[], 1e-5);
            }
        }
    }
    for x in [&[2usize, 3, 5, 7][..], &[1, 16, 64, 65], &[4, 3]] {
        let c = x[1];
        let mut inputs = vec![Some(r.tensor(x, 3.0))];
        for i in 0..4 {
            let t = r.tensor(&[c], 1.0);
            let t = if i == 3 {
                Tensor::from_vec(
                    &[c],
                    t.as_slice::<f32>()
                        .unwrap()
                        .iter()
                        .map(|v| v.abs() + 0.1)
                        .collect(),
                )
                .unwrap()
            } else {
                t
            };
            inputs.push(Some(t));
        }
        check_tol(Arc::new(BatchNorm { epsilon: 1e-3 }), &inputs, &[], 1e-5);
    }
}

#[test]
fn movement() {
    let mut r = Lcg(9);
    for (x, perm) in [
        (&[2usize, 3, 4][..], None),
        (&[2, 3, 4], Some(vec![0i64, 2, 1])),
        (&[2, 3, 4, 5], Some(vec![0, 2, 1, 3])),
        (&[2, 3, 4, 5], Some(vec![3, 1, 0, 2])),
        (&[1, 128, 4, 64], Some(vec![0, 2, 1, 3])),
        // The last two output axes swap the contiguous one (tiled): attention's K^T.
        (&[1, 128, 4, 64], Some(vec![0, 2, 3, 1])),
        (&[1, 116, 2, 28, 28], Some(vec![0, 2, 1, 3, 4])),
        (&[5, 1, 7], Some(vec![2, 1, 0])),
        (&[2, 64, 33, 40], Some(vec![0, 2, 3, 1])),
        (&[4, 3, 100, 100], Some(vec![0, 2, 3, 1])),
        (&[3, 4, 30, 20], Some(vec![0, 2, 3, 1])),
        (&[3, 2, 5], Some(vec![0, 2, 1])),
        (&[3, 40, 50, 17], Some(vec![1, 0, 3, 2])),
        (&[7], None),
        (&[], None),
    ] {
        let t = r.tensor(x, 1.0);
        check(Arc::new(Transpose { perm }), &[Some(t)], &[]);
    }
    for (shapes, axis) in [
        (vec![&[2usize, 3, 4][..], &[2, 5, 4]], 1i64),
        (vec![&[2, 3], &[1, 3], &[4, 3]], 0),
        (vec![&[2, 3], &[2, 1], &[2, 0]], -1),
        (vec![&[1, 64, 13, 13], &[1, 64, 13, 13]], 1),
        (vec![&[2, 32, 40, 40], &[2, 32, 20, 40]], 2),
        // One output row (batch 1) split over the threads inside and across inputs, an
        // empty input among them; several rows whose chunks cross row boundaries.
        (vec![&[1, 64, 55, 55], &[1, 0, 55, 55], &[1, 48, 55, 55]], 1),
        (vec![&[3, 40, 30, 30], &[3, 24, 30, 30]], 1),
    ] {
        let inputs: Vec<Option<Tensor>> = shapes.iter().map(|s| Some(r.tensor(s, 1.0))).collect();
        check(Arc::new(Concat { axis }), &inputs, &[]);
    }
    for (x, axis, split) in [
        (&[2usize, 6, 5][..], 1i64, vec![3i64, 3]),
        (&[2, 6, 5], -1, vec![1, 4]),
        (&[6, 5], 0, vec![1, 2, 3]),
    ] {
        let t = r.tensor(x, 1.0);
        let n = split.len();
        // The sizes as the attribute (before opset 13) and as an i64 input.
        let sizes = Tensor::from_vec(&[n], split.clone()).unwrap();
        let op = Split {
            axis,
            split: Some(split),
            num_outputs: n,
        };
        check(Arc::new(op), &[Some(t.clone())], &[]);
        let op = Split {
            axis,
            split: None,
            num_outputs: n,
        };
        check(Arc::new(op), &[Some(t), Some(sizes)], &[false, true]);
    }
}

#[test]
fn resizes() {
    use ferrolite_core::ops::nn::resize::{CoordMode, NearestMode, Resize, ResizeMode};
    let mut r = Lcg(10);
    let scales = |v: &[f32]| Some(Tensor::from_vec(&[v.len()], v.to_vec()).unwrap());
    let sizes = |v: &[i64]| Some(Tensor::from_vec(&[v.len()], v.to_vec()).unwrap());
    for mode in [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic] {
        for coord in [
            CoordMode::HalfPixel,
            CoordMode::Asymmetric,
            CoordMode::AlignCorners,
            CoordMode::PytorchHalfPixel,
            CoordMode::TfHalfPixelForNn,
        ] {
            // Linear taps of tf_half_pixel_for_nn shift N and C too: no fast kernel.
            if mode != ResizeMode::Nearest && coord == CoordMode::TfHalfPixelForNn {
                continue;
            }
            for nearest in [NearestMode::RoundPreferFloor, NearestMode::Floor] {
                for (x, sc, sz) in [
                    (&[1usize, 3, 5, 7][..], scales(&[1.0, 1.0, 2.0, 2.0]), None),
                    (&[2, 2, 9, 8], scales(&[1.0, 1.0, 0.5, 1.7]), None),
                    (&[1, 4, 6, 6], None, sizes(&[1, 4, 13, 4])),
                ] {
                    let op = Resize {
                        mode,
                        coordinate_transformation_mode: coord,
                        nearest_mode: nearest,
                        ..Default::default()
                    };
                    let xt = r.tensor(x, 2.0);
                    check_tol(
                        Arc::new(op),
                        &[Some(xt), None, sc, sz],
                        &[false, true, true, true],
                        1e-5,
                    );
                }
            }
        }
    }
}

#[test]
fn conv_transposes() {
    use ferrolite_core::ops::elementwise::unary::UnaryKind;
    use ferrolite_core::ops::linalg::conv_geometry::{AutoPad, ConvParams};
    use ferrolite_core::ops::linalg::conv_transpose::ConvTranspose;
    struct Case {
        x: &'static [usize],
        w: &'static [usize],
        group: usize,
        strides: Option<Vec<usize>>,
        dilations: Option<Vec<usize>>,
        pads: Option<Vec<usize>>,
        auto_pad: AutoPad,
        output_padding: Option<Vec<usize>>,
        output_shape: Option<Vec<usize>>,
    }
    let c = |x, w| Case {
        x,
        w,
        group: 1,
        strides: None,
        dilations: None,
        pads: None,
        auto_pad: AutoPad::NotSet,
        output_padding: None,
        output_shape: None,
    };
    let cases = vec![
        c(&[1, 1, 3, 3], &[1, 2, 3, 3]),
        Case {
            strides: Some(vec![2, 2]),
            ..c(&[1, 64, 20, 20], &[64, 32, 2, 2])
        },
        Case {
            strides: Some(vec![3, 2]),
            pads: Some(vec![1, 2, 0, 1]),
            output_padding: Some(vec![1, 0]),
            ..c(&[2, 3, 5, 7], &[3, 4, 3, 4])
        },
        Case {
            dilations: Some(vec![2, 3]),
            group: 3,
            ..c(&[1, 6, 6, 5], &[6, 2, 3, 2])
        },
        Case {
            strides: Some(vec![2, 2]),
            auto_pad: AutoPad::SameUpper,
            ..c(&[1, 4, 5, 6], &[4, 3, 3, 3])
        },
        Case {
            strides: Some(vec![2, 2]),
            output_shape: Some(vec![12, 14]),
            ..c(&[1, 2, 5, 6], &[2, 3, 3, 3])
        },
        Case {
            strides: Some(vec![2, 2]),
            pads: Some(vec![3, 3, 3, 3]),
            ..c(&[1, 2, 4, 4], &[2, 2, 3, 3])
        },
    ];
    let mut r = Lcg(11);
    for case in cases {
        for (bias, act) in [(false, None), (true, Some(UnaryKind::Relu))] {
            let op = ConvTranspose {
                params: ConvParams {
                    kernel_shape: None,
                    strides: case.strides.clone(),
                    dilations: case.dilations.clone(),
                    pads: case.pads.clone(),
                    auto_pad: case.auto_pad,
                },
                group: case.group,
                activation: act,
                output_padding: case.output_padding.clone(),
                output_shape: case.output_shape.clone(),
            };
            let m = case.w[1] * case.group;
            let mut inputs = vec![Some(r.tensor(case.x, 1.0)), Some(r.tensor(case.w, 1.0))];
            if bias {
                inputs.push(Some(r.tensor(&[m], 1.0)));
            }
            check_tol(Arc::new(op), &inputs, &[false, true, true], 1e-5);
        }
    }
}
