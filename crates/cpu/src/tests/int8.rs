//! The integer kernels against the core reference (the float simulation of the ONNX
//! definitions) over many shapes, scales and zero points, with the extremes of each type.

use super::kernel_for;
use super::thread_pool;
use crate::{CpuBackend, Isa};
use ferrolite_core::ops::linalg::conv_geometry::{AutoPad, ConvParams};
use ferrolite_core::ops::quant::QLinearConv;
use ferrolite_core::{DType, Op, Tensor};
use std::sync::Arc;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }

    /// 8-bit values, a quarter of them at the type's extremes.
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| match self.next() % 8 {
                0 => 0,
                1 => 255,
                2 => 0x80,
                3 => 0x7f,
                _ => self.next() as u8,
            })
            .collect()
    }

    fn q8(&mut self, dtype: DType, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_bytes(dtype, shape, &self.bytes(n)).unwrap()
    }
}

fn scalar(dtype: DType, v: i64) -> Tensor {
    match dtype {
        DType::I8 => Tensor::scalar(v as i8),
        _ => Tensor::scalar(v as u8),
    }
}

/// Runs the kernel under every ISA and compares with the reference: equal, or one step apart
/// where `acc * multiplier` lands within f32 rounding of a half (the reference multiplies in
/// f64).
fn check_q(op: Arc<dyn Op>, inputs: &[Option<Tensor>], constant: &[bool]) -> String {
    check_q_every_isa(op, inputs, constant).swap_remove(0)
}

/// [`check_q`] under every ISA of the machine, the kernel each picked.
fn check_q_every_isa(op: Arc<dyn Op>, inputs: &[Option<Tensor>], constant: &[bool]) -> Vec<String> {
    let refs: Vec<Option<&Tensor>> = inputs.iter().map(|t| t.as_ref()).collect();
    let want = op.eval(&refs).unwrap().remove(0);
    let mut names = Vec::new();
    for isa in crate::tests::tested_isas() {
        let (kernel, outputs) = kernel_for(&CpuBackend::new(isa), &op, inputs, constant);
        let mut outs = vec![Tensor::full(outputs[0].dtype, &outputs[0].shape, 7.0).unwrap()];
        kernel.run_alone(&refs, &mut outs).unwrap();
        let (g, w) = (outs[0].to_i64_vec(), want.to_i64_vec());
        assert_eq!(g.len(), w.len());
        let off: Vec<usize> = (0..g.len()).filter(|&i| g[i] != w[i]).collect();
        for &i in &off {
            assert!(
                (g[i] - w[i]).abs() <= 1,
                "{isa:?} {op:?}: element {i}: {} vs {}",
                g[i],
                w[i]
            );
        }
        assert!(
            off.len() * 1000 <= g.len().max(1000),
            "{isa:?} {op:?}: {} of {} differ",
            off.len(),
            g.len()
        );
        names.push(kernel.name().to_string());
    }
    names
}

struct Case {
    x: &'static [usize],
    w: &'static [usize],
    group: usize,
    strides: &'static [usize],
    pads: &'static [usize],
    dilations: &'static [usize],
}

const fn case(x: &'static [usize], w: &'static [usize]) -> Case {
    Case {
        x,
        w,
        group: 1,
        strides: &[1, 1],
        pads: &[0, 0, 0, 0],
        dilations: &[1, 1],
    }
}

fn cases() -> Vec<Case> {
    vec![
        case(&[1, 1, 1, 1], &[1, 1, 1, 1]),
        // A kernel row that never lands inside the one-row image (im2col's empty taps).
        Case {
            pads: &[0, 1, 1, 1],
            ..case(&[1, 2, 1, 5], &[4, 2, 2, 3])
        },
        case(&[1, 5, 7, 9], &[3, 5, 1, 1]),
        case(&[2, 16, 6, 6], &[40, 16, 1, 1]),
        Case {
            pads: &[1, 1, 1, 1],
            ..case(&[1, 3, 9, 11], &[8, 3, 3, 3])
        },
        Case {
            strides: &[2, 2],
            pads: &[3, 3, 3, 3],
            ..case(&[1, 3, 20, 20], &[16, 3, 7, 7])
        },
        Case {
            strides: &[2, 2],
            ..case(&[1, 24, 9, 9], &[33, 24, 1, 1])
        },
        Case {
            pads: &[1, 0, 2, 1],
            dilations: &[2, 1],
            ..case(&[1, 4, 8, 10], &[5, 4, 3, 2])
        },
        Case {
            group: 2,
            pads: &[1, 1, 1, 1],
            ..case(&[1, 8, 6, 6], &[6, 4, 3, 3])
        },
        Case {
            group: 8,
            pads: &[1, 1, 1, 1],
            ..case(&[1, 8, 10, 10], &[8, 1, 3, 3])
        },
        Case {
            group: 12,
            strides: &[2, 2],
            pads: &[1, 1, 1, 1],
            ..case(&[2, 12, 15, 15], &[12, 1, 3, 3])
        },
        Case {
            group: 6,
            pads: &[2, 2, 2, 2],
            ..case(&[1, 6, 9, 40], &[6, 1, 5, 5])
        },
        // Channels not a multiple of 4 over two images: the channels-last VNNI path's padded
        // copy, with a pointer per kernel row, and per tap where the columns are dilated.
        // (Indices 12 and 14: weight zero points of 0 and 128, which that path takes.)
        Case {
            strides: &[2, 1],
            pads: &[2, 1, 2, 1],
            ..case(&[2, 3, 11, 8], &[9, 3, 5, 3])
        },
        Case {
            pads: &[1, 1, 1, 1],
            ..case(&[1, 64, 14, 14], &[70, 64, 3, 3])
        },
        Case {
            pads: &[1, 2, 0, 1],
            dilations: &[1, 2],
            ..case(&[2, 3, 9, 10], &[6, 3, 3, 3])
        },
        // Depthwise with a stride of 3 and asymmetric pads, and dilated with a stride of 2 on
        // odd sizes (the phase split's offsets).
        Case {
            group: 5,
            strides: &[3, 3],
            pads: &[2, 0, 1, 2],
            ..case(&[1, 5, 17, 16], &[5, 1, 4, 3])
        },
        Case {
            group: 7,
            strides: &[2, 2],
            dilations: &[2, 2],
            pads: &[3, 1, 2, 3],
            ..case(&[1, 7, 13, 21], &[7, 1, 3, 3])
        },
        // Depthwise over several channel chunks (16 + 8 channels of 40x40), two images.
        Case {
            group: 24,
            pads: &[1, 1, 1, 1],
            ..case(&[2, 24, 40, 40], &[24, 1, 3, 3])
        },
        // Depthwise on whole vectors of channels (32), stride 2, rows of a block of eight
        // output pixels and a tail.
        Case {
            group: 32,
            strides: &[2, 2],
            pads: &[1, 1, 1, 1],
            ..case(&[2, 32, 21, 23], &[32, 1, 3, 3])
        },
        // Depthwise with more taps (17x17) than the AVX-512 row's exact f32 sums allow, over
        // 33 channels (chunks of eight, the last with the odd channel).
        Case {
            group: 33,
            pads: &[8, 8, 8, 8],
            ..case(&[1, 33, 19, 18], &[33, 1, 17, 17])
        },
        // Depthwise on planes of more than a chunk's values: two channels a chunk, the odd
        // last one in the chunk before it.
        Case {
            group: 5,
            pads: &[1, 1, 1, 1],
            ..case(&[1, 5, 130, 130], &[5, 1, 3, 3])
        },
    ]
}

fn op(c: &Case) -> Arc<dyn Op> {
    Arc::new(QLinearConv {
        params: ConvParams {
            kernel_shape: None,
            strides: Some(c.strides.to_vec()),
            dilations: Some(c.dilations.to_vec()),
            pads: Some(c.pads.to_vec()),
            auto_pad: AutoPad::NotSet,
        },
        group: c.group,
    })
}

/// The dtypes of (x, w, y) the convolution tests run.
const CONV_DTYPES: [(DType, DType, DType); 3] = [
    (DType::U8, DType::I8, DType::U8),
    (DType::I8, DType::I8, DType::I8),
    (DType::U8, DType::U8, DType::I8),
];

/// QLinearConv's inputs for case `ci`: zero points at the ends of their ranges and in between,
/// per tensor or per channel, with and without a bias.
fn conv_inputs(
    rng: &mut Rng,
    ci: usize,
    c: &Case,
    (xd, wd, yd): (DType, DType, DType),
) -> Vec<Option<Tensor>> {
    let m = c.w[0];
    let x = rng.q8(xd, c.x);
    let w = rng.q8(wd, c.w);
    let k: usize = c.w[1..].iter().product();
    // Scales so that outputs spread over the whole range, saturating some.
    let x_scale = 0.02f32;
    let w_scale: Vec<f32> = (0..m).map(|i| 0.01 + 0.003 * (i % 7) as f32).collect();
    // Not a round ratio of the other scales: exact ties (acc * 1/180 = n + 0.5)
    // round either way in f32 against the reference's f64.
    let y_scale = x_scale * 0.01 * (k as f32).sqrt() * 60.0 * 1.013;
    let xz = if ci.is_multiple_of(2) {
        [0, 255][ci % 4 / 2]
    } else {
        100
    };
    let xz = if xd == DType::I8 { xz - 128 } else { xz };
    let wz: i64 = if wd == DType::I8 {
        [0, -128, 127][ci % 3]
    } else {
        [0, 255, 128][ci % 3]
    };
    let yz = if yd == DType::I8 { -3 } else { 131 };
    let mut bias: Vec<i32> = (0..m as i32).map(|i| (i - 3) * 997).collect();
    if ci % 4 == 3 {
        // One bias past 2^24: f32 sums that start from the bias would not be exact.
        bias[0] = 16_500_000;
    }
    let per_channel_zero = ci % 2 == 1;
    let wz_t = if per_channel_zero {
        let v: Vec<i64> = (0..m as i64).map(|i| wz - (i % 3) * wz.signum()).collect();
        let t = Tensor::from_vec(&[m], v).unwrap();
        t.cast(wd).unwrap()
    } else {
        scalar(wd, wz)
    };
    vec![
        Some(x),
        Some(Tensor::scalar(x_scale)),
        Some(scalar(xd, xz)),
        Some(w),
        Some(Tensor::from_vec(&[m], w_scale).unwrap()),
        Some(wz_t),
        Some(Tensor::scalar(y_scale)),
        Some(scalar(yd, yz)),
        (ci % 3 != 2).then(|| Tensor::from_vec(&[m], bias).unwrap()),
    ]
}

const CONV_CONSTANT: [bool; 9] = [false, true, true, true, true, true, true, true, true];

#[test]
fn qlinear_conv_matches_reference() {
    let mut rng = Rng(3);
    let mut names = Vec::new();
    for threads in [1, 3] {
        thread_pool(threads).install(|| {
            for (ci, c) in cases().iter().enumerate() {
                for dtypes in CONV_DTYPES {
                    let ins = conv_inputs(&mut rng, ci, c, dtypes);
                    names.push(check_q(op(c), &ins, &CONV_CONSTANT));
                }
            }
        });
    }
    assert!(names.iter().any(|n| n == "cpu.qconv.gemm"));
    assert!(names.iter().any(|n| n == "cpu.qconv.depthwise"));
}

/// Channels-first GEMM convolutions over maps whose patch matrix (or pointwise input) is
/// made in several column blocks of whole output rows, the last one partial: a 3x3 "same"
/// convolution, a strided one (its phase-split rows) and a pointwise one.
#[test]
fn qlinear_conv_in_blocks_matches_reference() {
    let mut rng = Rng(5);
    let mut names = Vec::new();
    let big = [
        Case {
            pads: &[1, 1, 1, 1],
            ..case(&[1, 16, 130, 140], &[2, 16, 3, 3])
        },
        Case {
            strides: &[2, 2],
            pads: &[1, 0, 1, 1],
            ..case(&[1, 24, 200, 210], &[3, 24, 3, 3])
        },
        case(&[1, 32, 180, 190], &[5, 32, 1, 1]),
    ];
    for threads in [1, 2] {
        thread_pool(threads).install(|| {
            for (ci, c) in big.iter().enumerate() {
                for dtypes in CONV_DTYPES {
                    let ins = conv_inputs(&mut rng, ci, c, dtypes);
                    names.push(check_q(op(c), &ins, &CONV_CONSTANT));
                }
            }
        });
    }
    assert!(names.iter().all(|n| n == "cpu.qconv.gemm"), "{names:?}");
}

/// Case `c` as the `layout-nhwc-int8` pass runs it: the convolution wrapped to take its input
/// channels-last, and `ins` with that input permuted.
fn channels_last(c: &Case, mut ins: Vec<Option<Tensor>>) -> (Arc<dyn Op>, Vec<Option<Tensor>>) {
    use ferrolite_core::ops::layout::{Nhwc, TO_NHWC};
    let x = ins[0].take().unwrap();
    ins[0] = Some(ferrolite_core::ops::shape::common::permute(&x, x.shape(), &TO_NHWC).unwrap());
    let wrapped = Arc::new(Nhwc {
        inner: op(c),
        nhwc_inputs: vec![0],
    });
    (wrapped, ins)
}

/// Channels-last GEMM convolutions deep and wide enough for the AMX tiles where the CPU has
/// them, some with their weights streamed once per block of pixels (more than half a MiB of
/// them, the threads splitting the output channels): a 7x7 map in one block and a 24x24 one
/// in two (456 and 120 pixels). Zero points of 0 and not, per tensor and per channel (the
/// AMX path's fused and generic epilogues), and a 3x3 over 16 channels into 40.
#[test]
fn qlinear_conv_channels_last_deep_and_streamed() {
    let mut rng = Rng(7);
    let mut names = Vec::new();
    let deep = Case {
        pads: &[1, 1, 1, 1],
        ..case(&[1, 512, 7, 7], &[136, 512, 3, 3])
    };
    let big = Case {
        pads: &[1, 1, 1, 1],
        ..case(&[1, 256, 24, 24], &[264, 256, 3, 3])
    };
    let narrow = Case {
        pads: &[0, 1, 1, 0],
        ..case(&[2, 16, 9, 11], &[40, 16, 3, 3])
    };
    let runs = [
        (&deep, 0),
        (&deep, 1),
        (&deep, 2),
        (&big, 3),
        (&narrow, 0),
        (&narrow, 1),
    ];
    for threads in [1, 2] {
        thread_pool(threads).install(|| {
            for &(c, ci) in &runs {
                let ins = conv_inputs(&mut rng, ci, c, CONV_DTYPES[ci % 3]);
                let (wrapped, ins) = channels_last(c, ins);
                names.extend(check_q_every_isa(wrapped, &ins, &CONV_CONSTANT));
            }
        });
    }
    assert!(
        names.iter().all(|n| n.starts_with("cpu.qconv.nhwc.")),
        "{names:?}"
    );
    #[cfg(target_arch = "x86_64")]
    if crate::qgemm::x86::amx_ready() {
        eprintln!("AMX tiles tested");
        assert!(names.iter().any(|n| n == "cpu.qconv.nhwc.amx"), "{names:?}");
    }
}

#[test]
fn qlinear_conv_channels_last_matches_reference() {
    let mut rng = Rng(5);
    let mut names = Vec::new();
    for threads in [1, 3] {
        thread_pool(threads).install(|| {
            for (ci, c) in cases().iter().enumerate() {
                let depthwise = c.group > 1 && c.group == c.x[1] && c.group == c.w[0];
                if c.group > 1 && !depthwise {
                    continue;
                }
                for dtypes in CONV_DTYPES {
                    let ins = conv_inputs(&mut rng, ci, c, dtypes);
                    let (wrapped, ins) = channels_last(c, ins);
                    names.push(check_q(wrapped, &ins, &CONV_CONSTANT));
                }
            }
        });
    }
    assert!(names.iter().any(|n| n == "cpu.qconv.nhwc.gemm"));
    assert!(names.iter().any(|n| n == "cpu.qconv.nhwc.depthwise"));
}

#[test]
fn qlinear_matmul_and_matmul_integer_match_reference() {
    use ferrolite_core::ops::linalg::matmul::MatMulInteger;
    use ferrolite_core::ops::quant::QLinearMatMul;
    let mut rng = Rng(9);
    let mut names = Vec::new();
    for threads in [1, 2] {
        thread_pool(threads).install(|| {
            let shapes: [(&[usize], usize); 6] = [
                (&[1, 1], 1),
                (&[3, 7], 5),
                (&[2, 9, 33], 40),
                (&[1, 128, 256], 64),
                (&[17, 64], 1000),
                (&[2, 3, 5, 31], 17),
            ];
            for (si, &(a_shape, n)) in shapes.iter().enumerate() {
                let k = *a_shape.last().unwrap();
                for (ad, bd) in [
                    (DType::U8, DType::I8),
                    (DType::I8, DType::I8),
                    (DType::U8, DType::U8),
                ] {
                    let a = rng.q8(ad, a_shape);
                    let b = rng.q8(bd, &[k, n]);
                    let az: i64 = if ad == DType::U8 {
                        [0, 255, 131][si % 3]
                    } else {
                        [-128, 127, 5][si % 3]
                    };
                    let bz: Tensor = if si % 2 == 0 {
                        scalar(bd, if bd == DType::U8 { 128 } else { 0 })
                    } else {
                        let v: Vec<i64> = (0..n as i64)
                            .map(|j| {
                                if bd == DType::U8 {
                                    120 + j % 9
                                } else {
                                    j % 5 - 2
                                }
                            })
                            .collect();
                        Tensor::from_vec(&[n], v).unwrap().cast(bd).unwrap()
                    };
                    let ins = vec![
                        Some(a.clone()),
                        Some(b.clone()),
                        Some(scalar(ad, az)),
                        Some(bz.clone()),
                    ];
                    names.push(check_q(
                        Arc::new(MatMulInteger),
                        &ins,
                        &[false, true, true, true],
                    ));
                    // The reference wraps out-of-range results; scales that keep them in range.
                    let b_scale = if si % 2 == 0 {
                        Tensor::scalar(0.01f32)
                    } else {
                        Tensor::from_vec(
                            &[n],
                            (0..n).map(|j| 0.01 + 0.001 * (j % 4) as f32).collect(),
                        )
                        .unwrap()
                    };
                    let y_scale = 0.02 * 0.014 * 255.0 * 128.0 * (k as f32) / 120.0;
                    let ins = vec![
                        Some(a),
                        Some(Tensor::scalar(0.02f32)),
                        Some(scalar(ad, az)),
                        Some(b),
                        Some(b_scale),
                        Some(bz),
                        Some(Tensor::scalar(y_scale)),
                        Some(scalar(ad, if ad == DType::U8 { 128 } else { 0 })),
                    ];
                    let constant = [false, true, true, true, true, true, true, true];
                    names.push(check_q(Arc::new(QLinearMatMul), &ins, &constant));
                }
            }
        });
    }
    assert!(names.iter().any(|n| n == "cpu.qmatmul"));
    assert!(names.iter().any(|n| n == "cpu.matmul_integer"));
}

#[test]
fn quantize_dequantize_and_int8_maxpool_match_reference() {
    use ferrolite_core::ops::layout::{Nhwc, TO_NHWC};
    use ferrolite_core::ops::nn::pool::{Pool, PoolKind};
    use ferrolite_core::ops::quant::{DequantizeLinear, QuantizeLinear};
    use ferrolite_core::ops::shape::common::permute;
    let mut rng = Rng(17);
    let mut names = Vec::new();
    for threads in [1, 2] {
        thread_pool(threads).install(|| {
            for (shape, dtype, zero) in [
                (&[1usize, 3, 5, 7][..], DType::U8, 0i64),
                (&[2, 4, 33, 65][..], DType::I8, -128),
                (&[70000][..], DType::U8, 255),
                (&[1, 8, 9, 9][..], DType::I8, 127),
                // Channels-last pools in 64-channel register blocks, with and without a tail.
                (&[1, 67, 6, 7][..], DType::U8, 3),
                (&[2, 128, 5, 4][..], DType::I8, 0),
            ] {
                // Values over and past the whole range, and halves (ties) on the grid.
                let n: usize = shape.iter().product();
                let x: Vec<f32> = (0..n)
                    .map(|i| match i % 5 {
                        0 => (i % 600) as f32 * 0.25 - 75.0,
                        1 => 1e9,
                        2 => -1e9,
                        _ => (rng.next() % 2000) as f32 * 0.05 - 50.0,
                    })
                    .collect();
                let x = Tensor::from_vec(shape, x).unwrap();
                let ins = vec![
                    Some(x),
                    Some(Tensor::scalar(0.5f32)),
                    Some(scalar(dtype, zero)),
                ];
                names.push(check_q(
                    Arc::new(QuantizeLinear::default()),
                    &ins,
                    &[false, true, true],
                ));
                let q = rng.q8(dtype, shape);
                let ins = vec![
                    Some(q.clone()),
                    Some(Tensor::scalar(0.037f32)),
                    Some(scalar(dtype, zero)),
                ];
                let op: Arc<dyn Op> = Arc::new(DequantizeLinear::default());
                let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
                let want = op.eval(&refs).unwrap().remove(0);
                for isa in crate::tests::tested_isas() {
                    let (k, outs) =
                        kernel_for(&CpuBackend::new(isa), &op, &ins, &[false, true, true]);
                    let mut y = vec![Tensor::zeros(outs[0].dtype, &outs[0].shape).unwrap()];
                    k.run_alone(&refs, &mut y).unwrap();
                    assert_eq!(
                        y[0].as_slice::<f32>().unwrap(),
                        want.as_slice::<f32>().unwrap()
                    );
                    names.push(k.name().to_string());
                }
                if shape.len() == 4 {
                    // Stride 1, stride 2 and 3 (split into phases), ceil mode, and dilation
                    // with a stride (the plain strided loop).
                    for (kernel, strides, pads, dilations, ceil_mode) in [
                        ([3, 3], [2, 2], [1, 1, 1, 1], [1, 1], false),
                        ([2, 2], [1, 1], [0, 0, 1, 1], [1, 1], false),
                        ([3, 3], [2, 2], [0, 0, 0, 0], [1, 1], true),
                        ([3, 2], [1, 3], [0, 1, 1, 0], [1, 1], false),
                        ([2, 3], [1, 2], [1, 0, 0, 1], [2, 2], true),
                        // Strides wider than the padded row: phases past its end.
                        ([1, 2], [5, 6], [0, 0, 0, 0], [1, 1], false),
                        ([2, 1], [3, 9], [1, 1, 1, 1], [1, 1], true),
                    ] {
                        let p = Pool {
                            kind: PoolKind::Max,
                            kernel_shape: kernel.to_vec(),
                            strides: strides.to_vec(),
                            pads: pads.to_vec(),
                            dilations: dilations.to_vec(),
                            ceil_mode,
                            ..Default::default()
                        };
                        let p: Arc<dyn Op> = Arc::new(p);
                        names.push(check_q(p.clone(), &[Some(q.clone())], &[false]));
                        // The same pool on the channels-last input (layout-nhwc-int8's).
                        let nhwc = Arc::new(Nhwc {
                            inner: p,
                            nhwc_inputs: vec![0],
                        });
                        let qt = permute(&q, q.shape(), &TO_NHWC).unwrap();
                        names.push(check_q(nhwc, &[Some(qt)], &[false]));
                    }
                }
            }
        });
    }
    for n in [
        "cpu.quantize",
        "cpu.dequantize",
        "cpu.qmaxpool",
        "cpu.qmaxpool.nhwc",
    ] {
        assert!(names.iter().any(|k| k == n), "{n} not run");
    }
}

#[test]
fn qgemm_matches_reference() {
    use ferrolite_core::ops::quant::QGemm;
    let mut rng = Rng(23);
    let mut names = Vec::new();
    for (m, k, n, trans_b, with_c, quantized) in [
        (1, 512, 1000, false, true, true),
        (3, 7, 5, true, false, true),
        (17, 64, 33, true, true, false),
        (2, 300, 40, false, false, false),
    ] {
        for (ad, bd) in [
            (DType::U8, DType::I8),
            (DType::I8, DType::I8),
            (DType::U8, DType::U8),
        ] {
            let op = Arc::new(QGemm {
                alpha: 1.0,
                trans_a: false,
                trans_b,
            });
            let b_shape = if trans_b { [n, k] } else { [k, n] };
            let bz: Tensor = if n % 2 == 0 {
                scalar(bd, if bd == DType::U8 { 128 } else { 0 })
            } else {
                let v: Vec<i64> = (0..n as i64)
                    .map(|j| {
                        if bd == DType::U8 {
                            125 + j % 7
                        } else {
                            j % 5 - 2
                        }
                    })
                    .collect();
                Tensor::from_vec(&[n], v).unwrap().cast(bd).unwrap()
            };
            let bs = Tensor::from_vec(
                &[n],
                (0..n).map(|j| 0.01 + 0.002 * (j % 5) as f32).collect(),
            )
            .unwrap();
            let c: Vec<i32> = (0..n as i32).map(|j| j * 311 - 5000).collect();
            let ins = vec![
                Some(rng.q8(ad, &[m, k])),
                Some(Tensor::scalar(0.03f32)),
                Some(scalar(ad, if ad == DType::U8 { 131 } else { -7 })),
                Some(rng.q8(bd, &b_shape)),
                Some(bs),
                Some(bz),
                with_c.then(|| Tensor::from_vec(&[n], c).unwrap()),
                quantized.then(|| Tensor::scalar(0.02f32 * (k as f32).sqrt())),
                quantized.then(|| scalar(ad, if ad == DType::U8 { 100 } else { 3 })),
            ];
            let constant = [false, true, true, true, true, true, true, true, true];
            if quantized {
                names.push(check_q(op, &ins, &constant));
            } else {
                let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
                let want = op.eval(&refs).unwrap().remove(0);
                for isa in crate::tests::tested_isas() {
                    let dynop: Arc<dyn Op> = op.clone();
                    let (kernel, outs) = kernel_for(&CpuBackend::new(isa), &dynop, &ins, &constant);
                    let mut y = vec![Tensor::zeros(outs[0].dtype, &outs[0].shape).unwrap()];
                    kernel.run_alone(&refs, &mut y).unwrap();
                    assert_eq!(
                        y[0].as_slice::<f32>().unwrap(),
                        want.as_slice::<f32>().unwrap()
                    );
                    names.push(kernel.name().to_string());
                }
            }
        }
    }
    assert!(names.iter().all(|n| n == "cpu.qgemm"), "{names:?}");
}

/// MatMulInteger with A's zero point only known at run time (DynamicQuantizeLinear's).
#[test]
fn matmul_integer_reads_a_runtime_zero_point() {
    use ferrolite_core::ops::linalg::matmul::MatMulInteger;
    let mut rng = Rng(31);
    let op: Arc<dyn Op> = Arc::new(MatMulInteger);
    let ins = vec![
        Some(rng.q8(DType::U8, &[1, 9, 40])),
        Some(rng.q8(DType::I8, &[40, 24])),
        Some(scalar(DType::U8, 77)),
        Some(scalar(DType::I8, 0)),
    ];
    assert_eq!(
        check_q(op, &ins, &[false, true, false, true]),
        "cpu.matmul_integer"
    );
}

/// The one-input table kernels equal the op's reference exactly under every ISA (the
/// AVX-512 VBMI lookup among them), over lengths around its 64-byte blocks and past the
/// threads' chunks, and over every input byte.
#[test]
fn unary_table_kernels_are_exact_on_every_isa() {
    use ferrolite_core::ops::quant::{QLinearLeakyRelu, QLinearSigmoid};
    let mut rng = Rng(43);
    for d in [DType::U8, DType::I8] {
        for len in [1, 63, 64, 65, 127, 256, 1000, 70_001] {
            let mut x = rng.q8(d, &[len]);
            if len == 256 {
                let every: Vec<u8> = (0..=255).collect();
                x = Tensor::from_bytes(d, &[256], &every).unwrap();
            }
            let ins = vec![
                Some(x),
                Some(Tensor::scalar(0.05f32)),
                Some(scalar(d, if d == DType::U8 { 120 } else { -8 })),
                Some(Tensor::scalar(0.004f32)),
                Some(scalar(d, if d == DType::U8 { 10 } else { -118 })),
            ];
            let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
            let constant = [false, true, true, true, true];
            let ops: [Arc<dyn Op>; 2] = [
                Arc::new(QLinearSigmoid),
                Arc::new(QLinearLeakyRelu { alpha: 0.1 }),
            ];
            for op in ops {
                let want = op.eval(&refs).unwrap().remove(0);
                for isa in crate::tests::tested_isas() {
                    let (kernel, outs) = kernel_for(&CpuBackend::new(isa), &op, &ins, &constant);
                    let mut y = vec![Tensor::full(outs[0].dtype, &outs[0].shape, 7.0).unwrap()];
                    kernel.run_alone(&refs, &mut y).unwrap();
                    assert_eq!(y[0].bytes(), want.bytes(), "{isa:?} {op:?} {d} len {len}");
                }
            }
        }
    }
}

#[test]
fn qlinear_table_kernels_match_reference() {
    use ferrolite_core::ops::quant::{
        QLinearAdd, QLinearConcat, QLinearGlobalAveragePool, QLinearLeakyRelu, QLinearMul,
        QLinearSigmoid,
    };
    let mut rng = Rng(41);
    let mut names = Vec::new();
    for d in [DType::U8, DType::I8] {
        let z = |v: i64| scalar(d, if d == DType::U8 { v } else { v - 128 });
        let q = |s: f32, zv: i64| [Some(Tensor::scalar(s)), Some(z(zv))];
        let x = rng.q8(d, &[2, 5, 6, 7]);
        let x2 = rng.q8(d, &[2, 5, 6, 7]);
        let per_channel = rng.q8(d, &[2, 5, 1, 1]);
        let unary_ins = |x: &Tensor| {
            let mut v = vec![Some(x.clone())];
            v.extend(q(0.05, 120));
            v.extend(q(0.004, 10));
            v
        };
        let c1 = [false, true, true, true, true];
        names.push(check_q(Arc::new(QLinearSigmoid), &unary_ins(&x), &c1));
        names.push(check_q(
            Arc::new(QLinearLeakyRelu { alpha: 0.1 }),
            &unary_ins(&x),
            &c1,
        ));
        let binary = |a: &Tensor, b: &Tensor| {
            let mut v = vec![Some(a.clone())];
            v.extend(q(0.05, 120));
            v.push(Some(b.clone()));
            v.extend(q(0.03, 128));
            v.extend(q(0.07, 100));
            v
        };
        let c2 = [false, true, true, false, true, true, true, true];
        names.push(check_q(Arc::new(QLinearAdd), &binary(&x, &x2), &c2));
        for (a, b) in [(&x, &x2), (&x, &per_channel), (&per_channel, &x)] {
            names.extend(check_q_every_isa(Arc::new(QLinearMul), &binary(a, b), &c2));
        }
        // Over several of the kernels' chunks of work (32 KiB), per element and per channel.
        let (big, big2) = (rng.q8(d, &[1, 3, 150, 160]), rng.q8(d, &[1, 3, 150, 160]));
        let big_channel = rng.q8(d, &[1, 3, 1, 1]);
        for (a, b) in [(&big, &big2), (&big, &big_channel), (&big_channel, &big)] {
            names.extend(check_q_every_isa(Arc::new(QLinearMul), &binary(a, b), &c2));
        }
        // One operand a single value: a constant `[1]` (squeezenet's dropout scale), or a
        // scalar computed at run time on the left.
        let one = rng.q8(d, &[1]);
        let cb = [false, true, true, true, true, true, true, true];
        for (ins, constant) in [(binary(&x, &one), &cb), (binary(&rng.q8(d, &[]), &x2), &c2)] {
            for op in [Arc::new(QLinearMul) as Arc<dyn Op>, Arc::new(QLinearAdd)] {
                let name = check_q(op, &ins, constant);
                assert!(name == "cpu.qmul" || name == "cpu.qadd", "{name}");
                names.push(name);
            }
        }
        let mut gap = vec![Some(x.clone())];
        gap.extend(q(0.05, 120));
        gap.extend(q(0.02, 90));
        names.push(check_q(
            Arc::new(QLinearGlobalAveragePool {
                channels_last: false,
            }),
            &gap,
            &c1,
        ));
        // Channels last: one pixel's channels at a time, past the i32 partial sums' 2^16
        // pixels in the second.
        for shape in [&[2usize, 6, 7, 5][..], &[1, 300, 300, 2]] {
            let mut gap = vec![Some(rng.q8(d, shape))];
            gap.extend(q(0.05, 120));
            gap.extend(q(0.02, 90));
            let op = QLinearGlobalAveragePool {
                channels_last: true,
            };
            names.push(check_q(Arc::new(op), &gap, &c1));
        }
        // Concat: one input at the output's scale (copied), one requantized.
        let mut cat: Vec<Option<Tensor>> = q(0.05, 120).into();
        cat.push(Some(x.clone()));
        cat.extend(q(0.05, 120));
        cat.push(Some(x2.clone()));
        cat.extend(q(0.09, 3));
        let c3 = [true, true, false, true, true, false, true, true];
        names.push(check_q(Arc::new(QLinearConcat { axis: 1 }), &cat, &c3));
    }
    for n in [
        "cpu.qsigmoid",
        "cpu.qleaky_relu",
        "cpu.qadd",
        "cpu.qmul",
        "cpu.qglobal_average",
        "cpu.qconcat",
    ] {
        assert!(names.iter().any(|k| k == n), "{n} not run: {names:?}");
    }
    if Isa::available().iter().any(|i| i.has_avx512()) {
        assert!(names.iter().any(|k| k == "cpu.qmul.simd"), "{names:?}");
    }
}

#[test]
fn dynamic_quantize_matches_reference() {
    use ferrolite_core::ops::quant::DynamicQuantizeLinear;
    let op: Arc<dyn Op> = Arc::new(DynamicQuantizeLinear);
    for (n, lo, hi) in [
        (1usize, 0.5f32, 0.5f32),
        (1000, -3.0, 7.0),
        (100_000, 0.1, 9.0),
        (77, -5.0, -1.0),
        (70, -2.0, 3.0),
    ] {
        let mut x: Vec<f32> = (0..n)
            .map(|i| lo + (hi - lo) * ((i * 7919) % n) as f32 / n as f32)
            .collect();
        if n == 70 {
            // The range's ends in the last lane of a vector and past the last whole block.
            x[31] = 11.0;
            x[69] = -9.0;
        }
        let x = Tensor::from_vec(&[n], x).unwrap();
        let refs = [Some(&x)];
        let want = op.eval(&refs).unwrap();
        for isa in crate::tests::tested_isas() {
            let (k, outs) = kernel_for(&CpuBackend::new(isa), &op, &[Some(x.clone())], &[false]);
            let mut got: Vec<Tensor> = outs
                .iter()
                .map(|o| Tensor::zeros(o.dtype, &o.shape).unwrap())
                .collect();
            k.run_alone(&refs, &mut got).unwrap();
            assert_eq!(k.name(), "cpu.dynamic_quantize");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.bytes(), w.bytes(), "{isa:?} n {n}");
            }
        }
    }
}

/// MatMulIntegerToFloat (what the `quantize` pass makes of MatMulInteger -> Cast -> Mul ->
/// Add): A's scale and zero point known at run time, B's per tensor or per column, with and
/// without a bias, over odd shapes; f32 results within the float tolerance of the reference.
#[test]
fn matmul_integer_to_float_matches_reference() {
    use ferrolite_core::ops::quant::MatMulIntegerToFloat;
    let mut rng = Rng(37);
    let op: Arc<dyn Op> = Arc::new(MatMulIntegerToFloat);
    for (i, &(a_shape, k, n)) in [
        (&[1usize, 9, 40][..], 40, 24),
        (&[2, 5, 64][..], 64, 70),
        (&[7, 3][..], 3, 1),
        (&[1, 128, 256][..], 256, 33),
    ]
    .iter()
    .enumerate()
    {
        let per_column = i % 2 == 1;
        let cols = if per_column { n } else { 1 };
        let qshape: Vec<usize> = if per_column { vec![n] } else { vec![] };
        let b_scale: Vec<f32> = (0..cols).map(|j| 0.01 + 0.002 * j as f32).collect();
        let b_zero: Vec<i8> = (0..cols).map(|j| (j % 5) as i8 - 2).collect();
        let bias = (i != 2).then(|| {
            let v: Vec<f32> = (0..n).map(|j| (j as f32 - 3.0) * 0.25).collect();
            Tensor::from_vec(&[n], v).unwrap()
        });
        let ins = vec![
            Some(rng.q8(DType::U8, a_shape)),
            Some(rng.q8(DType::I8, &[k, n])),
            Some(Tensor::scalar(0.037f32)),
            Some(
                Tensor::from_vec(&[cols], b_scale)
                    .unwrap()
                    .reshaped(&qshape)
                    .unwrap(),
            ),
            Some(scalar(DType::U8, 119)),
            Some(
                Tensor::from_vec(&[cols], b_zero)
                    .unwrap()
                    .reshaped(&qshape)
                    .unwrap(),
            ),
            bias,
        ];
        let constant = [false, true, false, true, false, true, true];
        assert_eq!(
            super::check(op.clone(), &ins, &constant),
            "cpu.matmul_integer_to_float"
        );
    }
}

#[test]
fn qlinear_add_matches_reference_exactly() {
    use ferrolite_core::ops::quant::QLinearAdd;
    let mut rng = Rng(59);
    let mut names = Vec::new();
    for d in [DType::U8, DType::I8] {
        let z = |v: i64| scalar(d, if d == DType::U8 { v } else { v - 128 });
        // Lengths around the vector widths, and scales whose ratios are not round.
        for (sa, sb) in [
            (&[1usize, 3, 7, 5][..], &[1usize, 3, 7, 5][..]),
            (&[2, 33, 17], &[2, 33, 17]),
            (&[1, 64, 56, 56], &[1, 64, 56, 56]),
            (&[4, 9, 15], &[1]),
            (&[], &[3, 1, 23]),
        ] {
            for (za, zb, zc) in [(0, 255, 128), (128, 3, 0), (255, 0, 255), (17, 200, 90)] {
                let ins = vec![
                    Some(rng.q8(d, sa)),
                    Some(Tensor::scalar(0.0371f32)),
                    Some(z(za)),
                    Some(rng.q8(d, sb)),
                    Some(Tensor::scalar(0.0213f32)),
                    Some(z(zb)),
                    Some(Tensor::scalar(0.0459f32)),
                    Some(z(zc)),
                ];
                let op: Arc<dyn Op> = Arc::new(QLinearAdd);
                let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
                let want = op.eval(&refs).unwrap().remove(0);
                let constant = [false, true, true, false, true, true, true, true];
                for isa in crate::tests::tested_isas() {
                    let (k, outs) = kernel_for(&CpuBackend::new(isa), &op, &ins, &constant);
                    let mut y = vec![Tensor::full(outs[0].dtype, &outs[0].shape, 7.0).unwrap()];
                    k.run_alone(&refs, &mut y).unwrap();
                    assert_eq!(
                        y[0].to_i64_vec(),
                        want.to_i64_vec(),
                        "{isa:?} {} {sa:?} + {sb:?}",
                        k.name()
                    );
                    names.push(k.name().to_string());
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    if Isa::available().iter().any(|i| i.has_avx2()) && std::arch::is_x86_feature_detected!("fma") {
        assert!(names.iter().any(|n| n == "cpu.qadd.simd"));
    }
}

/// Runs the kernel each ISA of the machine picks and asserts it gives the reference's bytes
/// and shape; the kernels' names.
fn check_exact(
    op: &Arc<dyn Op>,
    ins: &[Option<Tensor>],
    constant: &[bool],
    what: &str,
) -> Vec<String> {
    let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
    let want = op.eval(&refs).unwrap().remove(0);
    let mut names = Vec::new();
    for isa in crate::tests::tested_isas() {
        let (k, outs) = kernel_for(&CpuBackend::new(isa), op, ins, constant);
        let mut y = vec![Tensor::full(outs[0].dtype, &outs[0].shape, 7.0).unwrap()];
        k.run_alone(&refs, &mut y).unwrap();
        assert_eq!(y[0].shape(), want.shape(), "{isa:?} {what}");
        assert_eq!(y[0].bytes(), want.bytes(), "{isa:?} {} {what}", k.name());
        names.push(k.name().to_string());
    }
    names
}

/// QdqBinary is the float simulation's own arithmetic: the kernel must give the reference's
/// bits on every element, for every pairing of operand shapes the pass makes.
#[test]
fn qdq_binary_matches_reference_exactly() {
    use ferrolite_core::ops::elementwise::binary::BinaryKind;
    use ferrolite_core::ops::quant::QdqBinary;
    let mut rng = Rng(61);
    for d in [DType::U8, DType::I8] {
        let z = |v: i64| scalar(d, if d == DType::U8 { v } else { v - 128 });
        for (sa, sb) in [
            (&[1usize, 3, 7, 5][..], &[1usize, 3, 7, 5][..]),
            (&[2, 33, 17], &[2, 33, 17]),
            (&[1, 24, 40, 40], &[1, 24, 40, 40]),
            (&[1, 96, 20, 20], &[1, 96, 1, 1]),
            (&[2, 5, 1, 1], &[2, 5, 9, 7]),
            (&[4, 9, 15], &[1]),
            (&[], &[3, 1, 23]),
        ] {
            for (za, zb, zy) in [(0, 255, 128), (128, 3, 0), (255, 0, 255), (17, 200, 90)] {
                for kind in [BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul] {
                    // Scales whose products and quotients are not round; Mul's output step
                    // is larger so that not every value saturates.
                    let sy = if kind == BinaryKind::Mul {
                        0.61f32
                    } else {
                        0.0459
                    };
                    let ins = vec![
                        Some(rng.q8(d, sa)),
                        Some(Tensor::scalar(0.0371f32)),
                        Some(z(za)),
                        Some(rng.q8(d, sb)),
                        Some(Tensor::scalar(0.0213f32)),
                        Some(z(zb)),
                        Some(Tensor::scalar(sy)),
                        Some(z(zy)),
                    ];
                    let op: Arc<dyn Op> = Arc::new(QdqBinary { kind });
                    let constant = [false, true, true, false, true, true, true, true];
                    let what =
                        format!("{kind:?} {d} {sa:?} with {sb:?}, zero points {za} {zb} {zy}");
                    for name in check_exact(&op, &ins, &constant, &what) {
                        assert_eq!(name, "cpu.qdq_binary");
                    }
                }
            }
        }
    }
}

/// A table per channel: every plane through its channel's table, as the reference.
#[test]
fn channel_lookup_matches_reference_exactly() {
    use ferrolite_core::ops::quant::QLinearChannelLookup;
    let mut rng = Rng(71);
    for (shape, output) in [
        (&[2usize, 3, 5, 7][..], DType::U8),
        (&[1, 24, 40, 40], DType::I8),
        (&[3, 5, 1], DType::I8),
        (&[1, 2, 130], DType::U8),
    ] {
        let tables = rng.bytes(shape[1] * 256);
        let op: Arc<dyn Op> = Arc::new(QLinearChannelLookup { tables, output });
        for d in [DType::U8, DType::I8] {
            let ins = vec![Some(rng.q8(d, shape))];
            let what = format!("{d} {shape:?} -> {output}");
            for name in check_exact(&op, &ins, &[false], &what) {
                assert_eq!(name, "cpu.qchannel_lookup");
            }
        }
    }
}

/// Nearest Resize of 8-bit values gathers the bytes the reference picks.
#[test]
fn int8_nearest_resize_matches_reference_exactly() {
    use ferrolite_core::ops::nn::resize::{CoordMode, NearestMode, Resize};
    let mut rng = Rng(67);
    for d in [DType::U8, DType::I8] {
        for (x, sizes) in [
            (&[1usize, 3, 5, 7][..], &[1i64, 3, 10, 14][..]),
            (&[2, 4, 6, 6], &[2, 4, 3, 3]),
            (&[1, 2, 4, 5], &[1, 2, 7, 11]),
        ] {
            for (coord, nearest) in [
                (CoordMode::Asymmetric, NearestMode::Floor),
                (CoordMode::HalfPixel, NearestMode::RoundPreferFloor),
                (CoordMode::AlignCorners, NearestMode::RoundPreferCeil),
            ] {
                let op: Arc<dyn Op> = Arc::new(Resize {
                    coordinate_transformation_mode: coord,
                    nearest_mode: nearest,
                    ..Resize::default()
                });
                let ins = vec![
                    Some(rng.q8(d, x)),
                    None,
                    None,
                    Some(Tensor::from_vec(&[4], sizes.to_vec()).unwrap()),
                ];
                let what = format!("{d} {x:?} -> {sizes:?} {coord:?}");
                for name in check_exact(&op, &ins, &[false, true, true, true], &what) {
                    assert_eq!(name, "cpu.resize.8bit");
                }
            }
        }
    }
}

#[test]
fn int8_transpose_matches_reference_exactly() {
    use ferrolite_core::ops::shape::transpose::Transpose;
    let mut rng = Rng(11);
    for (x, perm) in [
        (&[2usize, 3, 4][..], None),
        // To and from channels last, row by row and tiled.
        (&[1, 3, 20, 20], Some(vec![0i64, 2, 3, 1])),
        // Two to four channels gathered row by row, split across threads and planes.
        (&[4, 3, 100, 100], Some(vec![0, 2, 3, 1])),
        (&[3, 2, 90, 70], Some(vec![0, 2, 3, 1])),
        (&[2, 4, 5, 5], Some(vec![0, 2, 3, 1])),
        (&[3, 2, 5], Some(vec![0, 2, 1])),
        (&[2, 64, 33, 40], Some(vec![0, 2, 3, 1])),
        (&[2, 33, 40, 64], Some(vec![0, 3, 1, 2])),
        (&[1, 7, 9, 5], Some(vec![0, 3, 1, 2])),
        (&[1, 116, 2, 28, 28], Some(vec![0, 2, 1, 3, 4])),
    ] {
        for dtype in [DType::U8, DType::I8] {
            let t = rng.q8(dtype, x);
            let op: Arc<dyn Op> = Arc::new(Transpose { perm: perm.clone() });
            let want = op.eval(&[Some(&t)]).unwrap().remove(0);
            for isa in crate::tests::tested_isas() {
                let ins = [Some(t.clone())];
                let (k, outs) = kernel_for(&CpuBackend::new(isa), &op, &ins, &[false]);
                assert_eq!(k.name(), "cpu.transpose");
                let mut y = vec![Tensor::full(dtype, &outs[0].shape, 7.0).unwrap()];
                for threads in [1, 3] {
                    thread_pool(threads)
                        .install(|| k.run_alone(&[Some(&t)], &mut y))
                        .unwrap();
                    assert_eq!(y[0].shape(), want.shape());
                    assert_eq!(y[0].bytes(), want.bytes(), "{isa:?} {x:?} {perm:?} {dtype}");
                }
            }
        }
    }
}
