//! An If inside a Loop through the Rust face, on `tests/models/loop_if.onnx`: the loop body and
//! the If's branches read the main graph's inputs, and the trip count depends on the data (the
//! loop runs until the running sum passes `limit`). The C and Python faces run the same file
//! (crates/capi/tests/capi.rs, crates/python/tests/test_ferrolite.py).
//!
//! `tests/models/sequences.onnx` takes and gives sequences, for the faces' handling of them.
//!
//! The files are written by [`loop_if_model`] and [`sequence_model`]; `FERROLITE_BLESS=1 cargo
//! test -p ferrolite --test control_flow` rewrites them after a change here.

use ferrolite::onnx::proto::{
    attribute_type, data_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use ferrolite::{Session, SessionOptions, Tensor};
use prost::Message;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/models")).join(name)
}

fn model(g: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        producer_name: "ferrolite tests".into(),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(g),
        ..Default::default()
    }
    .encode_to_vec()
}

/// A sequence of f32 tensors of unknown shape.
fn sequence_info(name: &str) -> ValueInfoProto {
    let tensor = TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: data_type::FLOAT,
            shape: None,
        })),
        ..Default::default()
    };
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::SequenceType(Box::new(
                type_proto::Sequence {
                    elem_type: Some(Box::new(tensor)),
                },
            ))),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn value_info(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type,
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Subgraph inputs and outputs, untyped as exporters often leave them.
fn untyped(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: format!("{op}_{}", outputs[0]),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::GRAPH,
        g: Some(Box::new(g)),
        ..Default::default()
    }
}

fn subgraph(name: &str, nodes: Vec<NodeProto>, inputs: &[&str], outputs: &[&str]) -> GraphProto {
    GraphProto {
        node: nodes,
        name: name.into(),
        input: inputs.iter().map(|n| untyped(n)).collect(),
        output: outputs.iter().map(|n| untyped(n)).collect(),
        ..Default::default()
    }
}

/// `s = 0; do { s = flag ? s + x : s - x } while sum(|s|) < limit`, with the iteration numbers
/// as a scan output: inputs x (f32 [2]), flag (bool []), limit (f32 []); outputs sum (f32 [2])
/// and iterations (i64 [n]).
pub fn loop_if_model() -> Vec<u8> {
    let then_branch = subgraph(
        "then",
        vec![node("Add", &["s", "x"], &["t"], vec![])],
        &[],
        &["t"],
    );
    let else_branch = subgraph(
        "else",
        vec![node("Sub", &["s", "x"], &["e"], vec![])],
        &[],
        &["e"],
    );
    let keepdims = AttributeProto {
        name: "keepdims".into(),
        r#type: attribute_type::INT,
        i: 0,
        ..Default::default()
    };
    let body = subgraph(
        "body",
        vec![
            node(
                "If",
                &["flag"],
                &["next"],
                vec![
                    graph_attr("then_branch", then_branch),
                    graph_attr("else_branch", else_branch),
                ],
            ),
            node("Abs", &["next"], &["magnitude"], vec![]),
            node("ReduceSum", &["magnitude"], &["total"], vec![keepdims]),
            node("Less", &["total", "limit"], &["go_on"], vec![]),
            node("Identity", &["i"], &["i_out"], vec![]),
        ],
        &["i", "cond", "s"],
        &["go_on", "next", "i_out"],
    );
    let main = GraphProto {
        node: vec![node(
            "Loop",
            &["", "start", "zero"],
            &["sum", "iterations"],
            vec![graph_attr("body", body)],
        )],
        name: "loop_if".into(),
        input: vec![
            value_info("x", data_type::FLOAT, &[2]),
            value_info("flag", data_type::BOOL, &[]),
            value_info("limit", data_type::FLOAT, &[]),
        ],
        output: vec![
            value_info("sum", data_type::FLOAT, &[2]),
            untyped("iterations"),
        ],
        initializer: vec![
            TensorProto {
                name: "start".into(),
                data_type: data_type::BOOL,
                int32_data: vec![1],
                ..Default::default()
            },
            TensorProto {
                name: "zero".into(),
                dims: vec![2],
                data_type: data_type::FLOAT,
                float_data: vec![0.0, 0.0],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    model(main)
}

/// pieces = SplitToSequence(x, 2) (f32 [n] -> a sequence of [2] and a last shorter piece),
/// count = SequenceLength(pieces), joined = ConcatFromSequence(items, axis 0).
pub fn sequence_model() -> Vec<u8> {
    let axis = AttributeProto {
        name: "axis".into(),
        r#type: attribute_type::INT,
        i: 0,
        ..Default::default()
    };
    model(GraphProto {
        node: vec![
            node("SplitToSequence", &["x", "two"], &["pieces"], vec![]),
            node("SequenceLength", &["pieces"], &["count"], vec![]),
            node("ConcatFromSequence", &["items"], &["joined"], vec![axis]),
        ],
        name: "sequences".into(),
        input: vec![
            value_info("x", data_type::FLOAT, &[5]),
            sequence_info("items"),
        ],
        output: vec![
            sequence_info("pieces"),
            value_info("count", data_type::INT64, &[]),
            untyped("joined"),
        ],
        initializer: vec![TensorProto {
            name: "two".into(),
            data_type: data_type::INT64,
            int64_data: vec![2],
            ..Default::default()
        }],
        ..Default::default()
    })
}

#[test]
fn the_fixtures_are_what_the_generators_write() {
    for (name, want) in [
        ("loop_if.onnx", loop_if_model()),
        ("sequences.onnx", sequence_model()),
    ] {
        if std::env::var_os("FERROLITE_BLESS").is_some() {
            std::fs::create_dir_all(fixture(name).parent().unwrap()).unwrap();
            std::fs::write(fixture(name), &want).unwrap();
        }
        let got = std::fs::read(fixture(name)).expect("tests/models (FERROLITE_BLESS=1)");
        assert!(
            got == want,
            "tests/models/{name} is stale: FERROLITE_BLESS=1 rewrites it"
        );
    }
}

#[test]
fn sequences_go_in_and_come_out() {
    let session = Session::from_path(fixture("sequences.onnx"), SessionOptions::default()).unwrap();
    let items = Tensor::from_sequence(vec![
        Tensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap(),
        Tensor::from_vec(&[1], vec![3.0f32]).unwrap(),
    ]);
    let x = Tensor::from_vec(&[5], vec![0.5f32, 1.5, 2.5, 3.5, 4.5]).unwrap();
    let out = session.run(&[("x", x), ("items", items)]).unwrap();
    let pieces: Vec<Vec<f64>> = out["pieces"]
        .sequence()
        .unwrap()
        .iter()
        .map(|t| t.to_f64_vec())
        .collect();
    assert_eq!(pieces, [vec![0.5, 1.5], vec![2.5, 3.5], vec![4.5]]);
    assert_eq!(out["count"].to_f64_vec(), [3.0]);
    assert_eq!(out["joined"].to_f64_vec(), [1.0, 2.0, 3.0]);
}

#[test]
fn the_trip_count_follows_the_data_and_the_branches_read_outer_values() {
    let session = Session::from_path(fixture("loop_if.onnx"), SessionOptions::default()).unwrap();
    let x = Tensor::from_vec(&[2], vec![1.5f32, -2.0]).unwrap();
    // Each iteration adds 3.5 to sum(|s|): 10 stops after 3 iterations, 20 after 6.
    for (flag, limit, sum, n) in [
        (true, 10.0f32, [4.5, -6.0], 3),
        (false, 10.0, [-4.5, 6.0], 3),
        (true, 20.0, [9.0, -12.0], 6),
        (false, 1.0, [-1.5, 2.0], 1),
    ] {
        let out = session
            .run(&[
                ("x", x.clone()),
                ("flag", Tensor::from_bools(&[], &[flag]).unwrap()),
                ("limit", Tensor::from_vec(&[], vec![limit]).unwrap()),
            ])
            .unwrap();
        assert_eq!(out["sum"].to_f64_vec(), sum, "flag {flag}, limit {limit}");
        let iterations: Vec<f64> = (0..n).map(|i| i as f64).collect();
        assert_eq!(out["iterations"].shape(), [n]);
        assert_eq!(out["iterations"].to_f64_vec(), iterations);
    }
}

/// 1000 iterations that each scan out the 64 KiB input: no one tensor is large, but what the
/// loop holds grows by 64 KiB per iteration (64 MB at the end).
fn accumulating_loop() -> Vec<u8> {
    let body = subgraph(
        "body",
        vec![
            node("Identity", &["cond"], &["cond_out"], vec![]),
            node("Identity", &["x"], &["slice"], vec![]),
        ],
        &["i", "cond"],
        &["cond_out", "slice"],
    );
    model(GraphProto {
        node: vec![node(
            "Loop",
            &["trips", ""],
            &["stacked"],
            vec![graph_attr("body", body)],
        )],
        name: "accumulating".into(),
        input: vec![value_info("x", data_type::FLOAT, &[16384])],
        output: vec![untyped("stacked")],
        initializer: vec![TensorProto {
            name: "trips".into(),
            data_type: data_type::INT64,
            int64_data: vec![1000],
            ..Default::default()
        }],
        ..Default::default()
    })
}

#[test]
fn the_session_memory_cap_stops_a_growing_loop() {
    let x = Tensor::from_vec(&[16384], vec![1.0f32; 16384]).unwrap();
    let options = SessionOptions::default().with_max_memory(1 << 20);
    let session = Session::from_bytes(&accumulating_loop(), options).unwrap();
    let e = session.run(&[("x", x.clone())]).unwrap_err().to_string();
    // 16 slices of 64 KiB fill 1 MiB; the 17th (iteration 16) is over.
    assert!(
        e.contains("Loop") && e.contains("after iteration 16") && e.contains("1048576 bytes"),
        "{e}"
    );
    // Under a cap that holds the whole stack, it runs.
    let options = SessionOptions::default().with_max_memory(256 << 20);
    let session = Session::from_bytes(&accumulating_loop(), options).unwrap();
    let out = session.run(&[("x", x)]).unwrap();
    assert_eq!(out["stacked"].shape(), [1000, 16384]);
}

/// `y = cond ? zeros(s) : zeros(s)`, each branch a ConstantOfShape of the outer input `s`:
/// a tensor sized at run time inside a subgraph.
fn branch_sized_by_input() -> Vec<u8> {
    let branch = |name: &str| {
        subgraph(
            name,
            vec![node("ConstantOfShape", &["s"], &["zeros"], vec![])],
            &[],
            &["zeros"],
        )
    };
    model(GraphProto {
        node: vec![NodeProto {
            name: "pick".into(),
            ..node(
                "If",
                &["cond"],
                &["y"],
                vec![
                    graph_attr("then_branch", branch("then")),
                    graph_attr("else_branch", branch("else")),
                ],
            )
        }],
        name: "sized_by_input".into(),
        input: vec![
            value_info("cond", data_type::BOOL, &[]),
            value_info("s", data_type::INT64, &[2]),
        ],
        output: vec![untyped("y")],
        ..Default::default()
    })
}

#[test]
fn the_session_memory_cap_bounds_the_tensors_of_a_branch() {
    let options = SessionOptions::default().with_max_memory(512 << 10);
    let session = Session::from_bytes(&branch_sized_by_input(), options).unwrap();
    let inputs = |rows: i64| {
        [
            ("cond", Tensor::from_bools(&[], &[true]).unwrap()),
            ("s", Tensor::from_vec(&[2], vec![rows, 512i64]).unwrap()),
        ]
    };
    // 64 x 512 f32 (128 KiB) fits the cap.
    let out = session.run(&inputs(64)).unwrap();
    assert_eq!(out["y"].shape(), [64, 512]);
    // 512 x 512 (1 MiB) does not: the error names the If and the branch's node.
    let e = session.run(&inputs(512)).unwrap_err().to_string();
    assert!(
        e.contains("pick") && e.contains("ConstantOfShape") && e.contains("1048576"),
        "{e}"
    );
    // Without a cap it runs.
    let session = Session::from_bytes(&branch_sized_by_input(), SessionOptions::default());
    let out = session.unwrap().run(&inputs(512)).unwrap();
    assert_eq!(out["y"].shape(), [512, 512]);
}
