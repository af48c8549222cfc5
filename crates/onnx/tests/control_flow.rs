//! If, Loop and Scan from ONNX: subgraphs read outer-scope values (through two levels), and
//! unsupported ops inside a subgraph are listed with the others.

use ferrolite_core::infer::infer_graph;
use ferrolite_core::plan::Plan;
use ferrolite_core::Tensor;
use ferrolite_onnx::model::{load_model, load_model_partial};
use ferrolite_onnx::proto::{
    attribute_type, data_type, type_proto, AttributeProto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use prost::Message;

fn vi(name: &str, elem_type: i32) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type,
                shape: Some(TensorShapeProto { dim: vec![] }),
            })),
        }),
        doc_string: String::new(),
    }
}

/// Subgraphs often leave their inputs' and outputs' types out.
fn untyped(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], graphs: &[(&str, GraphProto)]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: format!("{op}_{}", outputs[0]),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: graphs
            .iter()
            .map(|(name, g)| AttributeProto {
                name: name.to_string(),
                r#type: attribute_type::GRAPH,
                g: Some(Box::new(g.clone())),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn graph(nodes: Vec<NodeProto>, inputs: &[&str], outputs: &[&str]) -> GraphProto {
    GraphProto {
        node: nodes,
        name: "g".into(),
        input: inputs.iter().map(|n| untyped(n)).collect(),
        output: outputs.iter().map(|n| untyped(n)).collect(),
        ..Default::default()
    }
}

fn model(mut g: GraphProto) -> Vec<u8> {
    g.input = vec![vi("x", data_type::FLOAT), vi("flag", data_type::BOOL)];
    g.initializer = vec![
        TensorProto {
            name: "m".into(),
            data_type: data_type::INT64,
            int64_data: vec![3],
            ..Default::default()
        },
        TensorProto {
            name: "zero".into(),
            dims: vec![2],
            data_type: data_type::FLOAT,
            float_data: vec![0.0, 0.0],
            ..Default::default()
        },
    ];
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(g),
        ..Default::default()
    }
    .encode_to_vec()
}

/// s = 0; 3 times: s = flag ? s + x : s - x. The If inside the loop body reads the body's `s`
/// and the main graph's `x` and `flag`.
fn accumulate(branch_op: &str) -> GraphProto {
    let then_branch = graph(vec![node("Add", &["s", "x"], &["t"], &[])], &[], &["t"]);
    let else_branch = graph(vec![node(branch_op, &["s", "x"], &["e"], &[])], &[], &["e"]);
    let body = graph(
        vec![
            node("Identity", &["cond"], &["cond_out"], &[]),
            node(
                "If",
                &["flag"],
                &["next"],
                &[("then_branch", then_branch), ("else_branch", else_branch)],
            ),
        ],
        &["i", "cond", "s"],
        &["cond_out", "next"],
    );
    graph(
        vec![node(
            "Loop",
            &["m", "", "zero"],
            &["sum"],
            &[("body", body)],
        )],
        &[],
        &["sum"],
    )
}

#[test]
fn a_loop_body_and_an_if_inside_it_read_outer_values() {
    let mut m = load_model(&model(accumulate("Sub")), None).unwrap();
    let x = Tensor::from_vec(&[2], vec![1.5f32, -2.0]).unwrap();
    let types = vec![
        ferrolite_core::TensorInfo::of(&x),
        ferrolite_core::TensorInfo::new(ferrolite_core::DType::Bool, vec![]),
    ];
    let dynamic = infer_graph(&mut m.graph, &types).unwrap();
    let plan = Plan::build(&m.graph, &dynamic, None).unwrap();
    for (flag, want) in [(true, [4.5, -6.0]), (false, [-4.5, 6.0])] {
        let flag = Tensor::from_bools(&[], &[flag]).unwrap();
        let out = plan.run(&[&x, &flag]).unwrap();
        assert_eq!(out[0].to_f64_vec(), want);
    }
}

#[test]
fn unsupported_ops_inside_subgraphs_are_listed_with_the_node() {
    let partial = load_model_partial(&model(accumulate("NoSuchOp")), None).unwrap();
    let ops: Vec<String> = partial
        .unsupported
        .iter()
        .map(|u| format!("{} {}", u.op, u.node))
        .collect();
    assert_eq!(ops, ["NoSuchOp NoSuchOp_e"]);
    let e = load_model(&model(accumulate("NoSuchOp")), None)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("NoSuchOp"), "{e}");
}

#[test]
fn a_name_no_scope_defines_is_an_error() {
    let body = graph(
        vec![node("Add", &["s", "nowhere"], &["next"], &[])],
        &["i", "cond", "s"],
        &["cond", "next"],
    );
    let g = graph(
        vec![node(
            "Loop",
            &["m", "", "zero"],
            &["sum"],
            &[("body", body)],
        )],
        &[],
        &["sum"],
    );
    let e = load_model(&model(g), None).err().unwrap().to_string();
    assert!(e.contains("nowhere") && e.contains("body"), "{e}");
}
