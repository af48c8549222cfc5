//! Older opsets keep their meaning: PRelu before opset 7 applies its slope per channel.

use ferrolite_core::infer::infer_graph;
use ferrolite_core::plan::Plan;
use ferrolite_core::{Tensor, TensorInfo};
use ferrolite_onnx::model::load_model;
use ferrolite_onnx::proto::{
    data_type, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, ValueInfoProto,
};
use prost::Message;

fn prelu_model(opset: i64, slope: &[f32]) -> Vec<u8> {
    let io = |name: &str| ValueInfoProto {
        name: name.into(),
        ..Default::default()
    };
    ModelProto {
        ir_version: 3,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                op_type: "PRelu".into(),
                input: vec!["x".into(), "slope".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            initializer: vec![TensorProto {
                name: "slope".into(),
                dims: vec![slope.len() as i64],
                data_type: data_type::FLOAT,
                float_data: slope.to_vec(),
                ..Default::default()
            }],
            input: vec![io("x")],
            output: vec![io("y")],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn run(bytes: &[u8], x: &Tensor) -> ferrolite_core::Result<Vec<f64>> {
    let mut m = load_model(bytes, None)?;
    let dynamic = infer_graph(&mut m.graph, &[TensorInfo::of(x)])?;
    let plan = Plan::build(&m.graph, &dynamic, None)?;
    Ok(plan.run(&[x])?[0].to_f64_vec())
}

#[test]
fn prelu_before_opset_7_takes_one_slope_per_channel() {
    // x [2, 3, 2]: every value -1, so y is minus the slope of its channel.
    let x = Tensor::from_vec(&[2, 3, 2], vec![-1.0f32; 12]).unwrap();
    let slopes = [0.1f32, 0.2, 0.3];
    let want: Vec<f64> = (0..12).map(|i| -f64::from(slopes[(i / 2) % 3])).collect();
    for opset in [1, 6] {
        let got = run(&prelu_model(opset, &slopes), &x).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() < 1e-7,
                "opset {opset}: {got:?} against {want:?}"
            );
        }
    }
    // One slope for every channel.
    let got = run(&prelu_model(6, &[0.5]), &x).unwrap();
    assert!(got.iter().all(|&v| (v + 0.5).abs() < 1e-7), "{got:?}");
    // From opset 7 on, [3] broadcasts from the last axis (size 2): an error naming the shapes.
    let e = run(&prelu_model(7, &slopes), &x).unwrap_err().to_string();
    assert!(e.contains("[3]"), "{e}");
}
