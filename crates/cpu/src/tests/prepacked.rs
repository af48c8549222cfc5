//! `Kernel::prepacked_bytes` of the kernels the backend picks: at least the weights they were
//! built from when they prepack them, within a small factor of it, and 0 for kernels without
//! weights.

use super::kernel_for;
use super::Lcg;
use crate::{CpuBackend, Isa};
use ferrolite_core::ops::elementwise::binary::{Binary, BinaryKind};
use ferrolite_core::ops::elementwise::unary::{Unary, UnaryKind};
use ferrolite_core::ops::layout::{Nchwc, Nhwc, ReorderNchwc, TO_NHWC};
use ferrolite_core::ops::linalg::conv::Conv;
use ferrolite_core::ops::linalg::conv_geometry::{AutoPad, ConvParams};
use ferrolite_core::ops::linalg::conv_transpose::ConvTranspose;
use ferrolite_core::ops::linalg::fully_connected::FullyConnected;
use ferrolite_core::ops::linalg::gemm::Gemm;
use ferrolite_core::ops::linalg::matmul::{MatMul, MatMulInteger};
use ferrolite_core::ops::quant::QLinearConv;
use ferrolite_core::ops::shape::common::permute;
use ferrolite_core::{DType, Op, Tensor};
use std::sync::Arc;

/// Builds `op` under every ISA and checks each kernel's prepacked bytes lie in
/// `[weight_bytes, 4 * weight_bytes + 64 KiB]`; returns the kernel names.
fn check_prepacked(
    op: Arc<dyn Op>,
    inputs: &[Option<Tensor>],
    constant: &[bool],
    weight_bytes: usize,
) -> Vec<String> {
    crate::tests::tested_isas()
        .into_iter()
        .map(|isa| {
            let (kernel, _) = kernel_for(&CpuBackend::new(isa), &op, inputs, constant);
            let got = kernel.prepacked_bytes();
            assert!(
                (weight_bytes..=4 * weight_bytes + 64 * 1024).contains(&got),
                "{isa:?} {}: {got} prepacked bytes for {weight_bytes} bytes of weights",
                kernel.name()
            );
            kernel.name().to_string()
        })
        .collect()
}

fn conv(group: usize, pad: usize) -> Conv {
    Conv {
        params: ConvParams {
            kernel_shape: None,
            strides: Some(vec![1, 1]),
            dilations: Some(vec![1, 1]),
            pads: Some(vec![pad; 4]),
            auto_pad: AutoPad::NotSet,
        },
        group,
        activation: None,
    }
}

fn blocked(x: &Tensor) -> Tensor {
    let op = ReorderNchwc {
        to_blocked: true,
        block: crate::nchwc::B,
    };
    op.eval(&[Some(x)]).unwrap().remove(0)
}

#[test]
fn conv_kernels_report_their_packed_weights() {
    let mut rng = Lcg(3);
    let mut names = Vec::new();
    // 16 -> 32 channels 3x3, 1x1, a depthwise 3x3, and 64 -> 128 channels 3x3 (Winograd);
    // plain and blocked.
    for (x_shape, w_shape, group, pad) in [
        ([1, 16, 20, 20], [32, 16, 3, 3], 1, 1),
        ([1, 16, 20, 20], [32, 16, 1, 1], 1, 0),
        ([1, 16, 20, 20], [16, 1, 3, 3], 16, 1),
        ([1, 64, 32, 32], [128, 64, 3, 3], 1, 1),
    ] {
        let x = rng.tensor(&x_shape);
        let w = rng.tensor(&w_shape);
        let bias = rng.tensor(&[w_shape[0]]);
        let weight_bytes = w.numel() * 4;
        let ins = vec![Some(x.clone()), Some(w.clone()), Some(bias.clone())];
        let constant = [false, true, true];
        names.extend(check_prepacked(
            Arc::new(conv(group, pad)),
            &ins,
            &constant,
            weight_bytes,
        ));
        let nchwc = Arc::new(Nchwc {
            inner: Arc::new(conv(group, pad)),
            blocked_input: true,
            block: crate::nchwc::B,
        });
        let ins = vec![Some(blocked(&x)), Some(w), Some(bias)];
        names.extend(check_prepacked(nchwc, &ins, &constant, weight_bytes));
    }
    names.sort();
    names.dedup();
    // Plain and blocked kernels, pointwise, depthwise and Winograd among them.
    assert!(names.len() >= 5, "{names:?}");
    for kind in ["pointwise", "depthwise", "winograd"] {
        assert!(names.iter().any(|n| n.contains(kind)), "{kind}: {names:?}");
    }
}

#[test]
fn gemm_based_kernels_report_their_packed_weights() {
    let mut rng = Lcg(5);
    let (m, k, n) = (8, 64, 48);
    let ins = vec![Some(rng.tensor(&[m, k])), Some(rng.tensor(&[k, n]))];
    check_prepacked(Arc::new(MatMul), &ins, &[false, true], k * n * 4);
    let ins = vec![
        Some(rng.tensor(&[m, k])),
        Some(rng.tensor(&[k, n])),
        Some(rng.tensor(&[n])),
    ];
    check_prepacked(
        Arc::new(Gemm::default()),
        &ins,
        &[false, true, true],
        k * n * 4,
    );
    let fc = Arc::new(FullyConnected { activation: None });
    check_prepacked(fc, &ins, &[false, true, true], k * n * 4);
    // ConvTranspose 16 -> 8 channels 3x3 (W is `[C, M, KH, KW]`).
    let op = Arc::new(ConvTranspose {
        params: ConvParams {
            kernel_shape: None,
            strides: Some(vec![2, 2]),
            dilations: Some(vec![1, 1]),
            pads: Some(vec![1; 4]),
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
        activation: None,
        output_padding: None,
        output_shape: None,
    });
    let ins = vec![
        Some(rng.tensor(&[1, 16, 8, 8])),
        Some(rng.tensor(&[16, 8, 3, 3])),
        Some(rng.tensor(&[8])),
    ];
    let names = check_prepacked(op, &ins, &[false, true, true], 16 * 8 * 9 * 4);
    assert!(
        names.iter().all(|n| n.contains("conv_transpose")),
        "{names:?}"
    );
}

/// An 8-bit tensor of `shape` with values spread over the type's range.
fn q8(rng: &mut Lcg, dtype: DType, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let bytes: Vec<u8> = (0..n).map(|_| (rng.next() * 127.0) as i8 as u8).collect();
    Tensor::from_bytes(dtype, shape, &bytes).unwrap()
}

#[test]
fn int8_kernels_report_their_packed_weights() {
    let mut rng = Lcg(7);
    // QLinearConv 16 -> 32 channels 3x3, plain and channels-last.
    let (x, w) = (
        q8(&mut rng, DType::U8, &[1, 16, 20, 20]),
        q8(&mut rng, DType::I8, &[32, 16, 3, 3]),
    );
    let ins = vec![
        Some(x.clone()),
        Some(Tensor::scalar(0.02f32)),
        Some(Tensor::scalar(128u8)),
        Some(w.clone()),
        Some(Tensor::scalar(0.01f32)),
        Some(Tensor::scalar(0i8)),
        Some(Tensor::scalar(0.5f32)),
        Some(Tensor::scalar(128u8)),
        Some(Tensor::from_vec(&[32], vec![5i32; 32]).unwrap()),
    ];
    let constant = [false, true, true, true, true, true, true, true, true];
    let qconv = Arc::new(QLinearConv {
        params: ConvParams {
            kernel_shape: None,
            strides: Some(vec![1, 1]),
            dilations: Some(vec![1, 1]),
            pads: Some(vec![1; 4]),
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
    });
    let mut names = check_prepacked(qconv.clone(), &ins, &constant, w.numel());
    let mut nhwc_ins = ins;
    nhwc_ins[0] = Some(permute(&x, x.shape(), &TO_NHWC).unwrap());
    let nhwc = Arc::new(Nhwc {
        inner: qconv,
        nhwc_inputs: vec![0],
    });
    names.extend(check_prepacked(nhwc, &nhwc_ins, &constant, w.numel()));
    assert!(names.iter().any(|n| n.contains("nhwc")), "{names:?}");

    // MatMulInteger with a constant B.
    let (m, k, n) = (8, 64, 48);
    let ins = vec![
        Some(q8(&mut rng, DType::U8, &[m, k])),
        Some(q8(&mut rng, DType::I8, &[k, n])),
        Some(Tensor::scalar(128u8)),
        Some(Tensor::scalar(0i8)),
    ];
    check_prepacked(
        Arc::new(MatMulInteger),
        &ins,
        &[false, true, true, true],
        k * n,
    );
}

#[test]
fn elementwise_kernels_prepack_nothing() {
    let mut rng = Lcg(9);
    let (a, b) = (rng.tensor(&[2, 8, 5]), rng.tensor(&[2, 8, 5]));
    let provider = CpuBackend::new(Isa::detect());
    let relu: Arc<dyn Op> = Arc::new(Unary {
        kind: UnaryKind::Relu,
    });
    let add: Arc<dyn Op> = Arc::new(Binary::new(BinaryKind::Add));
    let (k, _) = kernel_for(&provider, &relu, &[Some(a.clone())], &[]);
    assert_eq!(k.prepacked_bytes(), 0, "{}", k.name());
    // A constant operand is read, not copied.
    let (k, _) = kernel_for(&provider, &add, &[Some(a), Some(b)], &[false, true]);
    assert_eq!(k.prepacked_bytes(), 0, "{}", k.name());
}
