//! The loader against malformed and hostile models: every case is an error naming what is
//! wrong, never a panic.

use ferrolite_core::{DType, Dim, Error, Tensor};
use ferrolite_onnx::model::{decode_model_proto, load_model, load_model_partial};
use ferrolite_onnx::proto::{
    attribute_type, data_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, SparseTensorProto, StringStringEntryProto,
    TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use ferrolite_onnx::{read_tensor_file, write_tensor_file};
use prost::Message;
use std::path::PathBuf;

// ---------------------------------------------------------------- builders

enum D {
    V(i64),
    P(&'static str),
    Unknown,
}

fn vi(name: &str, elem_type: i32, dims: &[D]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| tensor_shape_proto::Dimension {
            denotation: String::new(),
            value: match d {
                D::V(v) => Some(tensor_shape_proto::dimension::Value::DimValue(*v)),
                D::P(p) => Some(tensor_shape_proto::dimension::Value::DimParam(
                    p.to_string(),
                )),
                D::Unknown => None,
            },
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            denotation: String::new(),
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type,
                shape: Some(TensorShapeProto { dim }),
            })),
        }),
        doc_string: String::new(),
    }
}

fn f32_tensor(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: data_type::FLOAT,
        raw_data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    }
}

fn i64_tensor(name: &str, data: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![data.len() as i64],
        data_type: data_type::INT64,
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn graph(
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
) -> GraphProto {
    GraphProto {
        node: nodes,
        name: "g".into(),
        initializer: inits,
        input: inputs,
        output: outputs,
        ..Default::default()
    }
}

fn model(g: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        producer_name: "ferrolite-tests".into(),
        producer_version: "1".into(),
        graph: Some(g),
        ..Default::default()
    }
}

/// x [N, 6] → Reshape(x, [-1, 3]) → y.
fn reshape_graph() -> GraphProto {
    graph(
        vec![node("Reshape", "r", &["x", "s"], &["y"])],
        vec![i64_tensor("s", &[-1, 3])],
        vec![vi("x", data_type::FLOAT, &[D::P("N"), D::V(6)])],
        vec![vi("y", data_type::FLOAT, &[D::Unknown, D::V(3)])],
    )
}

fn load(g: GraphProto) -> ferrolite_core::Result<ferrolite_onnx::OnnxModel> {
    load_model(&model(g).encode_to_vec(), None)
}

fn err(g: GraphProto) -> String {
    match load(g) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

/// A fresh empty folder under the system temp folder.
fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrolite-onnx-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// xorshift64*: deterministic bytes without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

// ---------------------------------------------------------------- valid models

#[test]
fn loads_a_valid_model() {
    let m = load(reshape_graph()).unwrap();
    assert_eq!(m.ir_version, 8);
    assert_eq!(m.opsets, vec![(String::new(), 13)]);
    assert_eq!(m.producer, "ferrolite-tests 1");
    let g = &m.graph;
    assert_eq!(g.inputs.len(), 1);
    let x = g.value(g.inputs[0]);
    assert_eq!(x.name, "x");
    let d = x.declared.as_ref().unwrap();
    assert_eq!(d.dtype, DType::F32);
    assert_eq!(
        d.shape.as_deref(),
        Some(&[Dim::Symbolic("N".into()), Dim::Fixed(6)][..])
    );
    let y = g.value(g.outputs[0]);
    assert_eq!(y.name, "y");
    assert_eq!(
        y.declared.as_ref().unwrap().shape.as_deref(),
        Some(&[Dim::Symbolic(String::new()), Dim::Fixed(3)][..])
    );
    assert_eq!(g.nodes.len(), 1);
    assert_eq!(g.nodes[0].name, "r");
    assert_eq!(g.nodes[0].op.name(), "Reshape");
    let s = g.nodes[0].inputs[1].unwrap();
    assert_eq!(
        g.value(s)
            .constant
            .as_ref()
            .unwrap()
            .as_slice::<i64>()
            .unwrap(),
        &[-1, 3]
    );
    assert!(m.metadata.is_empty());
}

#[test]
fn metadata_props_are_kept_in_file_order() {
    let mut proto = model(reshape_graph());
    for (key, value) in [("character", "a\nb\nc"), ("author", "")] {
        proto.metadata_props.push(StringStringEntryProto {
            key: key.into(),
            value: value.into(),
        });
    }
    let m = load_model(&proto.encode_to_vec(), None).unwrap();
    assert_eq!(
        m.metadata,
        vec![
            ("character".to_string(), "a\nb\nc".to_string()),
            ("author".to_string(), String::new())
        ]
    );
}

#[test]
fn initializers_listed_as_inputs_are_constants() {
    // IR version 3 style: every initializer is also a graph input.
    let mut g = reshape_graph();
    g.input.push(vi("s", data_type::INT64, &[D::V(2)]));
    let mut m = model(g);
    m.ir_version = 3;
    let m = load_model(&m.encode_to_vec(), None).unwrap();
    let names: Vec<&str> = m
        .graph
        .inputs
        .iter()
        .map(|&i| m.graph.value(i).name.as_str())
        .collect();
    assert_eq!(names, ["x"]);
}

#[test]
fn ai_onnx_domain_and_unnamed_nodes_and_out_of_order_nodes() {
    let mut g = graph(
        vec![
            node("Reshape", "", &["t", "s2"], &["y"]),
            node("Reshape", "", &["x", "s"], &["t"]),
        ],
        vec![i64_tensor("s", &[-1, 3]), i64_tensor("s2", &[-1])],
        vec![vi("x", data_type::FLOAT, &[D::V(2), D::V(6)])],
        vec![vi("y", data_type::FLOAT, &[D::V(12)])],
    );
    g.node[0].domain = "ai.onnx".into();
    let mut m = model(g);
    m.opset_import = vec![OperatorSetIdProto {
        domain: "ai.onnx".into(),
        version: 11,
    }];
    let m = load_model(&m.encode_to_vec(), None).unwrap();
    assert_eq!(m.opsets, vec![(String::new(), 11)]);
    let names: Vec<&str> = m.graph.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["Reshape_1", "Reshape_0"]);
}

#[test]
fn empty_names_are_absent_inputs_and_anonymous_outputs() {
    let g = graph(
        vec![node("Reshape", "r", &["", "s", "", ""], &["", "y", ""])],
        vec![i64_tensor("s", &[-1])],
        vec![],
        vec![vi("y", data_type::FLOAT, &[])],
    );
    let m = load(g).unwrap();
    let n = &m.graph.nodes[0];
    // Trailing empty inputs/outputs are dropped; the others are kept as slots.
    assert_eq!(n.inputs.len(), 2);
    assert_eq!(n.inputs[0], None);
    assert_eq!(n.outputs.len(), 2);
    assert_eq!(m.graph.value(n.outputs[0]).name, "r:0");
    assert_eq!(m.graph.value(n.outputs[1]).name, "y");
}

#[test]
fn constant_nodes_become_constants() {
    let attr = |name: &str, ty: i32| AttributeProto {
        name: name.into(),
        r#type: ty,
        ..Default::default()
    };
    let mut nodes = Vec::new();
    let mut a = attr("value", attribute_type::TENSOR);
    a.t = Some(f32_tensor("", &[2], &[1.0, 2.0]));
    nodes.push((a, "c_tensor"));
    let mut a = attr("value_float", attribute_type::FLOAT);
    a.f = 2.5;
    nodes.push((a, "c_float"));
    let mut a = attr("value_floats", attribute_type::FLOATS);
    a.floats = vec![1.0, 2.0, 3.0];
    nodes.push((a, "c_floats"));
    let mut a = attr("value_int", attribute_type::INT);
    a.i = 7;
    nodes.push((a, "c_int"));
    let mut a = attr("value_ints", attribute_type::INTS);
    a.ints = vec![4, 5];
    nodes.push((a, "c_ints"));
    let outputs: Vec<ValueInfoProto> = nodes
        .iter()
        .map(|(_, n)| ValueInfoProto {
            name: n.to_string(),
            ..Default::default()
        })
        .collect();
    let protos = nodes
        .into_iter()
        .map(|(a, out)| {
            let mut n = node("Constant", "", &[], &[out]);
            n.attribute.push(a);
            n
        })
        .collect();
    let m = load(graph(protos, vec![], vec![], outputs)).unwrap();
    assert!(m.graph.nodes.is_empty());
    let c = |i: usize| m.graph.value(m.graph.outputs[i]).constant.clone().unwrap();
    assert_eq!(c(0).as_slice::<f32>().unwrap(), &[1.0, 2.0]);
    assert_eq!(c(1).shape(), &[] as &[usize]);
    assert_eq!(c(1).as_slice::<f32>().unwrap(), &[2.5]);
    assert_eq!(c(2).as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0]);
    assert_eq!(c(3).as_slice::<i64>().unwrap(), &[7]);
    assert_eq!(c(4).as_slice::<i64>().unwrap(), &[4, 5]);
}

#[test]
fn stale_or_odd_value_info_never_fails() {
    let mut g = reshape_graph();
    g.value_info = vec![
        vi("nothing_has_this_name", data_type::FLOAT, &[D::V(1)]),
        vi("y", data_type::STRING, &[D::V(1)]),
        vi(
            "y",
            data_type::FLOAT,
            &[D::P("whatever"), D::V(-1), D::Unknown],
        ),
        ValueInfoProto {
            name: "x".into(),
            ..Default::default()
        },
        ValueInfoProto {
            name: "y".into(),
            r#type: Some(TypeProto {
                denotation: String::new(),
                value: Some(type_proto::Value::SequenceType(Box::default())),
            }),
            doc_string: String::new(),
        },
    ];
    load(g).unwrap();
}

#[test]
fn output_may_be_an_input_or_an_initializer() {
    let mut g = reshape_graph();
    g.output.push(vi("x", data_type::FLOAT, &[]));
    g.output.push(ValueInfoProto {
        name: "s".into(),
        ..Default::default()
    });
    let m = load(g).unwrap();
    assert_eq!(m.graph.outputs.len(), 3);
}

// ---------------------------------------------------------------- malformed bytes

#[test]
fn empty_and_random_bytes_are_errors() {
    assert!(matches!(load_model(&[], None), Err(Error::InvalidModel(_))));
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for _ in 0..3000 {
        let len = rng.below(300);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        match load_model(&bytes, None) {
            Err(Error::InvalidModel(msg)) => assert!(!msg.is_empty()),
            Err(e) => panic!("unexpected error kind: {e}"),
            Ok(_) => panic!("random bytes {bytes:?} loaded as a model"),
        }
    }
}

#[test]
fn truncated_model_never_panics() {
    let mut g = reshape_graph();
    g.initializer.push(f32_tensor("w", &[4, 4], &[0.5; 16]));
    let bytes = model(g).encode_to_vec();
    let mut errors = 0;
    for n in 0..bytes.len() {
        // A cut on a field boundary can still be a (different) valid protobuf; anything else is
        // an error. Either way, no panic.
        if load_model(&bytes[..n], None).is_err() {
            errors += 1;
        }
    }
    assert!(errors > bytes.len() / 2, "{errors} of {}", bytes.len());
    assert!(load_model(&bytes, None).is_ok());
}

#[test]
fn mutated_model_never_panics() {
    let bytes = model(reshape_graph()).encode_to_vec();
    let mut rng = Rng(42);
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(b.len());
            b[i] = rng.next() as u8;
        }
        let _ = load_model(&b, None);
    }
}

#[test]
fn deep_nesting_is_an_error() {
    // NodeProto { attribute: [ AttributeProto { g: GraphProto { node: [ ... ] } } ] }, nested
    // far deeper than any model: prost's recursion limit must turn it into an error.
    fn len_delim(tag: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, &mut v);
        prost::encoding::encode_varint(payload.len() as u64, &mut v);
        v.extend_from_slice(payload);
        v
    }
    let mut node = Vec::new();
    for _ in 0..2000 {
        let graph = len_delim(1, &node); // GraphProto.node
        let attr = len_delim(6, &graph); // AttributeProto.g
        node = len_delim(5, &attr); // NodeProto.attribute
    }
    let graph = len_delim(1, &node);
    let model = len_delim(7, &graph); // ModelProto.graph
    let e = load_model(&model, None).unwrap_err().to_string();
    assert!(e.contains("protobuf"), "{e}");
}

#[test]
fn no_graph_is_an_error() {
    let m = ModelProto {
        ir_version: 8,
        ..Default::default()
    };
    let e = load_model(&m.encode_to_vec(), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no graph"), "{e}");
}

// ---------------------------------------------------------------- tensors

#[test]
fn tensor_dims_disagreeing_with_data() {
    // raw_data one element short.
    let mut g = reshape_graph();
    g.initializer.push(f32_tensor("w", &[2, 3], &[1.0; 5]));
    let e = err(g);
    assert!(e.contains("'w'") && e.contains("raw_data"), "{e}");
    // Typed field with too many elements.
    let mut g = reshape_graph();
    g.initializer.push(TensorProto {
        name: "w".into(),
        dims: vec![2],
        data_type: data_type::FLOAT,
        float_data: vec![1.0, 2.0, 3.0],
        ..Default::default()
    });
    let e = err(g);
    assert!(e.contains("'w'") && e.contains("2 elements"), "{e}");
    // int64 shape tensor whose dims say 3.
    let mut g = reshape_graph();
    g.initializer[0].dims = vec![3];
    let e = err(g);
    assert!(e.contains("'s'"), "{e}");
    // No data at all for a non-empty tensor.
    let mut g = reshape_graph();
    g.initializer.push(TensorProto {
        name: "w".into(),
        dims: vec![4],
        data_type: data_type::INT32,
        ..Default::default()
    });
    assert!(err(g).contains("'w'"));
}

#[test]
fn negative_and_huge_dims() {
    let mut g = reshape_graph();
    g.initializer.push(f32_tensor("w", &[2, -3], &[]));
    let e = err(g);
    assert!(e.contains("'w'") && e.contains("negative"), "{e}");
    for dims in [
        vec![1i64 << 40, 1 << 40],
        vec![1 << 40],
        vec![i64::MAX, i64::MAX, 2],
    ] {
        let mut g = reshape_graph();
        g.initializer.push(f32_tensor("w", &dims, &[]));
        let e = err(g);
        assert!(e.contains("'w'"), "{e}");
        // Same with typed (empty) data.
        let mut g = reshape_graph();
        g.initializer.push(TensorProto {
            name: "w".into(),
            dims: dims.clone(),
            data_type: data_type::INT64,
            ..Default::default()
        });
        assert!(err(g).contains("'w'"));
    }
}

#[test]
fn unsupported_tensor_types() {
    let mut g = reshape_graph();
    g.initializer.push(TensorProto {
        name: "w".into(),
        dims: vec![1],
        data_type: data_type::COMPLEX64,
        float_data: vec![1.0, 2.0],
        ..Default::default()
    });
    let e = err(g);
    assert!(e.contains("'w'") && e.contains("COMPLEX64"), "{e}");
}

#[test]
fn sparse_initializer_is_an_error() {
    let mut g = reshape_graph();
    g.sparse_initializer.push(SparseTensorProto {
        values: Some(f32_tensor("sp", &[1], &[1.0])),
        indices: Some(i64_tensor("", &[0])),
        dims: vec![4],
    });
    let e = err(g);
    assert!(e.contains("sparse") && e.contains("'sp'"), "{e}");
}

// ---------------------------------------------------------------- external data

fn external(name: &str, dims: &[i64], kv: &[(&str, &str)]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: data_type::FLOAT,
        data_location: 1,
        external_data: kv
            .iter()
            .map(|(k, v)| StringStringEntryProto {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

fn with_external(t: TensorProto, dir: Option<&std::path::Path>) -> ferrolite_core::Result<()> {
    let mut g = reshape_graph();
    g.initializer.push(t);
    load_model(&model(g).encode_to_vec(), dir).map(|_| ())
}

#[test]
fn external_data() {
    let dir = temp_dir("external");
    let data: Vec<u8> = [0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(dir.join("weights.bin"), &data).unwrap();
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/w.bin"), &data).unwrap();

    // Valid, with and without offset/length, in a subfolder.
    let t = external(
        "w",
        &[2],
        &[
            ("location", "weights.bin"),
            ("offset", "8"),
            ("length", "8"),
        ],
    );
    let mut g = reshape_graph();
    g.initializer.push(t.clone());
    let m = load_model(&model(g).encode_to_vec(), Some(&dir)).unwrap();
    let w = m.graph.values.iter().find(|v| v.name == "w").unwrap();
    assert_eq!(
        w.constant.as_ref().unwrap().as_slice::<f32>().unwrap(),
        &[2.0, 3.0]
    );
    with_external(
        external("w", &[6], &[("location", "weights.bin")]),
        Some(&dir),
    )
    .unwrap();
    with_external(
        external("w", &[1], &[("location", "./sub/w.bin")]),
        Some(&dir),
    )
    .unwrap();

    // Without the model's folder.
    assert!(with_external(t, None).is_err());

    let bad = [
        external("w", &[2], &[("location", "../weights.bin")]),
        external("w", &[2], &[("location", "sub/../../x.bin")]),
        external("w", &[2], &[("location", "/etc/passwd")]),
        external(
            "w",
            &[2],
            &[("location", dir.join("weights.bin").to_str().unwrap())],
        ),
        external("w", &[2], &[]),
        external("w", &[2], &[("location", "missing.bin")]),
        // Past the end: offset, length, and a shape bigger than the file.
        external("w", &[2], &[("location", "weights.bin"), ("offset", "20")]),
        external(
            "w",
            &[2],
            &[
                ("location", "weights.bin"),
                ("offset", "18446744073709551615"),
            ],
        ),
        external("w", &[7], &[("location", "weights.bin")]),
        external("w", &[7], &[("location", "weights.bin"), ("length", "28")]),
        external("w", &[2], &[("location", "weights.bin"), ("length", "12")]),
        external("w", &[2], &[("location", "weights.bin"), ("offset", "-1")]),
        external("w", &[1 << 40, 1 << 40], &[("location", "weights.bin")]),
        external("w", &[1 << 40], &[("location", "weights.bin")]),
    ];
    for t in bad {
        let kv = format!("{:?}", t.external_data);
        match with_external(t, Some(&dir)) {
            Ok(()) => panic!("{kv} loaded"),
            Err(e) => assert!(
                e.to_string().contains("weights.bin")
                    || e.to_string().contains("'w'")
                    || e.to_string().contains("missing.bin"),
                "{kv}: {e}"
            ),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------- graph structure

#[test]
fn cycle_is_an_error_naming_nodes() {
    let g = graph(
        vec![
            node("Reshape", "a", &["y", "s"], &["t"]),
            node("Reshape", "b", &["t", "s"], &["y"]),
        ],
        vec![i64_tensor("s", &[-1])],
        vec![],
        vec![vi("y", data_type::FLOAT, &[])],
    );
    let e = err(g);
    assert!(
        e.contains("cycle") && e.contains('a') && e.contains('b'),
        "{e}"
    );
    // A node reading its own output.
    let g = graph(
        vec![node("Reshape", "self", &["y", "s"], &["y"])],
        vec![i64_tensor("s", &[-1])],
        vec![],
        vec![vi("y", data_type::FLOAT, &[])],
    );
    assert!(err(g).contains("self"));
}

#[test]
fn unknown_value_is_an_error() {
    let mut g = reshape_graph();
    g.node[0].input[1] = "nowhere".into();
    let e = err(g);
    assert!(e.contains("'r'") && e.contains("'nowhere'"), "{e}");
    let mut g = reshape_graph();
    g.output.push(vi("ghost", data_type::FLOAT, &[]));
    assert!(err(g).contains("'ghost'"));
}

#[test]
fn a_name_for_two_values_is_an_error() {
    // Two nodes producing the same name.
    let mut g = reshape_graph();
    g.node.push(node("Reshape", "r2", &["x", "s"], &["y"]));
    assert!(err(g).contains("'y'"));
    // A node output shadowing a graph input, and an initializer.
    let mut g = reshape_graph();
    g.node.push(node("Reshape", "r2", &["y", "s"], &["x"]));
    assert!(err(g).contains("'x'"));
    let mut g = reshape_graph();
    g.node.push(node("Reshape", "r2", &["y", "s"], &["s"]));
    assert!(err(g).contains("'s'"));
    // Two initializers, two graph inputs.
    let mut g = reshape_graph();
    g.initializer.push(i64_tensor("s", &[1]));
    assert!(err(g).contains("'s'"));
    let mut g = reshape_graph();
    g.input.push(vi("x", data_type::FLOAT, &[]));
    assert!(err(g).contains("'x'"));
    // A node output with the same name twice.
    let mut g = reshape_graph();
    g.node[0].output = vec!["y".into(), "y".into()];
    assert!(err(g).contains("'y'"));
}

#[test]
fn unknown_ops_are_all_listed_in_one_error() {
    let mut g = reshape_graph();
    g.node.push(node("FancyOp", "f1", &["y"], &["z1"]));
    g.node.push(node("OtherOp", "", &["z1"], &["z2"]));
    g.node.push(node("FancyOp", "f2", &["z2"], &["z3"]));
    let mut ms = node("FusedGelu", "ms", &["z3"], &["z4"]);
    ms.domain = "com.microsoft".into();
    g.node.push(ms);
    // An op of the default domain in another domain is not the same op.
    let mut ml = node("Reshape", "ml", &["z4", "s"], &["z5"]);
    ml.domain = "ai.onnx.ml".into();
    g.node.push(ml);
    g.output = vec![vi("z5", data_type::FLOAT, &[])];
    let bytes = model(g).encode_to_vec();
    let Err(Error::UnsupportedOps(list)) = load_model(&bytes, None) else {
        panic!("expected UnsupportedOps");
    };
    let got: Vec<(&str, &str)> = list
        .iter()
        .map(|u| (u.op.as_str(), u.node.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("FancyOp", "f1"),
            ("OtherOp", "OtherOp_2"),
            ("FancyOp", "f2"),
            ("com.microsoft:FusedGelu", "ms"),
            ("ai.onnx.ml:Reshape", "ml"),
        ]
    );
    assert!(list[3].reason.contains("com.microsoft"));
    let msg = Error::UnsupportedOps(list).to_string();
    assert!(msg.contains("FancyOp") && msg.contains("OtherOp"), "{msg}");

    // The partial load still gives inputs, outputs, constants and the mapped nodes.
    let p = load_model_partial(&bytes, None).unwrap();
    assert_eq!(p.unsupported.len(), 5);
    assert_eq!(p.model.graph.nodes.len(), 1);
    assert_eq!(p.model.graph.inputs.len(), 1);
    assert_eq!(p.model.graph.value(p.model.graph.outputs[0]).name, "z5");
}

/// x (u8 [2]) -> com.microsoft QLinearAdd(x, x) -> y, with per-tensor scales and zero points.
fn qlinear_add_graph() -> GraphProto {
    let u8_scalar = |name: &str, v: u8| TensorProto {
        name: name.into(),
        data_type: data_type::UINT8,
        raw_data: vec![v],
        ..Default::default()
    };
    let mut add = node(
        "QLinearAdd",
        "qadd",
        &["x", "s", "z", "x", "s", "z", "s", "z"],
        &["y"],
    );
    add.domain = "com.microsoft".into();
    graph(
        vec![add],
        vec![f32_tensor("s", &[], &[0.5]), u8_scalar("z", 128)],
        vec![vi("x", data_type::UINT8, &[D::V(2)])],
        vec![vi("y", data_type::UINT8, &[D::V(2)])],
    )
}

#[test]
fn com_microsoft_ops_map_and_unknown_ones_are_listed() {
    let mut m = model(qlinear_add_graph());
    m.opset_import.push(OperatorSetIdProto {
        domain: "com.microsoft".into(),
        version: 1,
    });
    let loaded = load_model(&m.encode_to_vec(), None).unwrap();
    let ops: Vec<&str> = loaded.graph.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(ops, ["QLinearAdd"]);

    // An unknown op of that domain, and an op of another domain: both listed, with reasons.
    let mut g = qlinear_add_graph();
    let mut unknown = node("QAttention", "qa", &["y"], &["z1"]);
    unknown.domain = "com.microsoft".into();
    let mut other = node("QLinearAdd", "other", &["z1"], &["z2"]);
    other.domain = "ai.onnx.ml".into();
    g.node.extend([unknown, other]);
    g.output = vec![vi("z2", data_type::UINT8, &[])];
    let Err(Error::UnsupportedOps(list)) = load(g) else {
        panic!("expected UnsupportedOps");
    };
    let got: Vec<(&str, &str)> = list
        .iter()
        .map(|u| (u.op.as_str(), u.node.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("com.microsoft:QAttention", "qa"),
            ("ai.onnx.ml:QLinearAdd", "other")
        ]
    );
    assert!(list[0].reason.contains("com.microsoft"), "{}", list[0]);
    assert!(list[1].reason.contains("ai.onnx.ml"), "{}", list[1]);
}

#[test]
fn invalid_attribute_names_the_node() {
    let mut g = reshape_graph();
    g.node[0].attribute.push(AttributeProto {
        name: "allowzero".into(),
        r#type: attribute_type::STRING,
        s: b"yes".to_vec(),
        ..Default::default()
    });
    let e = load(g).unwrap_err();
    assert!(matches!(e, Error::InvalidModel(_)));
    assert!(e.to_string().contains("'r'"), "{e}");
}

#[test]
fn bad_constant_nodes_name_the_node() {
    let cases: Vec<AttributeProto> = vec![
        AttributeProto {
            name: "value_string".into(),
            r#type: attribute_type::STRING,
            s: b"x".to_vec(),
            ..Default::default()
        },
        AttributeProto {
            name: "value_strings".into(),
            r#type: attribute_type::STRINGS,
            ..Default::default()
        },
        AttributeProto {
            name: "sparse_value".into(),
            r#type: attribute_type::SPARSE_TENSOR,
            sparse_tensor: Some(SparseTensorProto::default()),
            ..Default::default()
        },
        AttributeProto {
            name: "value".into(),
            r#type: attribute_type::TENSOR,
            ..Default::default()
        },
        AttributeProto {
            name: "value".into(),
            r#type: attribute_type::TENSOR,
            t: Some(f32_tensor("", &[3], &[1.0])),
            ..Default::default()
        },
        AttributeProto {
            name: "value_int".into(),
            r#type: attribute_type::FLOAT,
            ..Default::default()
        },
    ];
    for a in cases {
        let mut n = node("Constant", "konst", &[], &["c"]);
        n.attribute.push(a.clone());
        let g = graph(
            vec![n],
            vec![],
            vec![],
            vec![vi("c", data_type::FLOAT, &[])],
        );
        let e = err(g);
        assert!(e.contains("'konst'"), "{}: {e}", a.name);
    }
    // No attribute, two attributes, two outputs.
    let mut n = node("Constant", "konst", &[], &["c"]);
    let g = graph(vec![n.clone()], vec![], vec![], vec![]);
    assert!(err(g).contains("'konst'"));
    let a = AttributeProto {
        name: "value_int".into(),
        r#type: attribute_type::INT,
        ..Default::default()
    };
    n.attribute = vec![a.clone(), a.clone()];
    assert!(err(graph(vec![n.clone()], vec![], vec![], vec![])).contains("'konst'"));
    n.attribute = vec![a];
    n.output.push("d".into());
    assert!(err(graph(vec![n], vec![], vec![], vec![])).contains("'konst'"));
}

#[test]
fn graph_io_with_unsupported_types() {
    for t in [data_type::COMPLEX64, data_type::UNDEFINED, 999] {
        let mut g = reshape_graph();
        g.input[0] = vi("x", t, &[D::V(6)]);
        let e = err(g);
        assert!(e.contains("graph input 'x'"), "{e}");
    }
    let mut g = reshape_graph();
    g.output[0] = vi("y", data_type::COMPLEX128, &[]);
    assert!(err(g).contains("graph output 'y'"));
    let mut g = reshape_graph();
    g.input[0].r#type = Some(TypeProto {
        denotation: String::new(),
        value: Some(type_proto::Value::MapType(Box::default())),
    });
    assert!(err(g).contains("'x'"));
    // Negative and missing dims are unknown, not errors; an input without a type is allowed.
    let mut g = reshape_graph();
    g.input[0] = vi("x", data_type::FLOAT, &[D::V(-1), D::Unknown]);
    let m = load(g).unwrap();
    let d = m.graph.value(m.graph.inputs[0]).declared.clone().unwrap();
    assert_eq!(
        d.shape.unwrap(),
        [Dim::Symbolic(String::new()), Dim::Symbolic(String::new())]
    );
    let mut g = reshape_graph();
    g.input[0].r#type = None;
    let m = load(g).unwrap();
    assert!(m.graph.value(m.graph.inputs[0]).declared.is_none());
}

// ---------------------------------------------------------------- tensor files

#[test]
fn tensor_file_roundtrip() {
    let dir = temp_dir("pb");
    let p = dir.join("t.pb");
    let t = Tensor::from_slice(&[2, 2], &[1i32, -2, 3, -4]).unwrap();
    write_tensor_file(&p, "thing", &t).unwrap();
    let (name, back) = read_tensor_file(&p).unwrap();
    assert_eq!(name, "thing");
    assert_eq!(back.shape(), &[2, 2]);
    assert_eq!(back.as_slice::<i32>().unwrap(), &[1, -2, 3, -4]);
    std::fs::write(&p, b"\xff\xff\xff").unwrap();
    assert!(read_tensor_file(&p).is_err());
    assert!(read_tensor_file(&dir.join("missing.pb")).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------- real models

fn models_dir() -> PathBuf {
    match std::env::var_os("FERROLITE_MODELS") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models"),
    }
}

/// A real model: its case name, graph inputs as (name, dtype), graph output names.
type Case = (
    &'static str,
    &'static [(&'static str, DType)],
    &'static [&'static str],
);

const CASES: &[Case] = &[
    ("mobilenet_v2", &[("x", DType::F32)], &["fetch_name_0"]),
    (
        "mobilenet_v3_small",
        &[("x", DType::F32)],
        &["fetch_name_0"],
    ),
    ("resnet18", &[("x", DType::F32)], &["fetch_name_0"]),
    ("squeezenet1_1", &[("x", DType::F32)], &["fetch_name_0"]),
    (
        "shufflenet_v2_x1_0",
        &[("x", DType::F32)],
        &["fetch_name_0"],
    ),
    (
        "bert_mini",
        &[("input_ids", DType::I64)],
        &["fetch_name_0", "fetch_name_1"],
    ),
    (
        "ppocr_mobile_v2_cls",
        &[("x", DType::F32)],
        &["save_infer_model/scale_0.tmp_1"],
    ),
    ("ppocrv4_det", &[("x", DType::F32)], &["sigmoid_0.tmp_0"]),
];

#[test]
fn real_models_load() {
    let root = models_dir().join("cases");
    if !root.is_dir() {
        eprintln!(
            "SKIPPED real_models_load: {} not found (set FERROLITE_MODELS to the models folder)",
            root.display()
        );
        return;
    }
    for &(case, inputs, outputs) in CASES {
        let dir = root.join(case);
        let path = dir.join("model.onnx");
        if !path.is_file() {
            eprintln!("SKIPPED {case}: {} not found", path.display());
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let proto = decode_model_proto(&bytes).unwrap();
        let gp = proto.graph.as_ref().unwrap();

        match ferrolite_onnx::load_model_file(&path) {
            Ok(m) => assert_eq!(m.graph.outputs.len(), outputs.len()),
            Err(Error::UnsupportedOps(list)) => {
                assert!(!list.is_empty());
                let supported = ferrolite_onnx::map::supported_ops();
                for u in &list {
                    // Only reported for ops the table lacks or refuses, never silently.
                    assert!(
                        !supported.contains(&u.op) || !u.reason.is_empty(),
                        "{case}: {u}"
                    );
                }
                eprintln!("{case}: {} node(s) with unsupported ops", list.len());
            }
            Err(e) => panic!("{case}: {e}"),
        }

        let p = load_model_partial(&bytes, Some(&dir)).unwrap();
        let g = &p.model.graph;
        assert!(p.model.opsets.iter().any(|(d, v)| d.is_empty() && *v >= 11));
        let got: Vec<(&str, DType)> = g
            .inputs
            .iter()
            .map(|&i| {
                let v = g.value(i);
                (v.name.as_str(), v.declared.as_ref().unwrap().dtype)
            })
            .collect();
        assert_eq!(got, inputs, "{case}");
        let got: Vec<&str> = g
            .outputs
            .iter()
            .map(|&o| g.value(o).name.as_str())
            .collect();
        assert_eq!(got, outputs, "{case}");
        for &o in &g.outputs {
            assert_eq!(g.value(o).declared.as_ref().unwrap().dtype, DType::F32);
        }

        // Every initializer is a constant of the declared shape; so is every Constant node.
        for t in &gp.initializer {
            let v = g.values.iter().find(|v| v.name == t.name).unwrap();
            let c = v.constant.as_ref().unwrap();
            let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
            assert_eq!(c.shape(), dims.as_slice(), "{case}: {}", t.name);
        }
        let n_constant_nodes = gp.node.iter().filter(|n| n.op_type == "Constant").count();
        let n_constants = g.values.iter().filter(|v| v.constant.is_some()).count();
        assert_eq!(
            n_constants,
            gp.initializer.len() + n_constant_nodes,
            "{case}"
        );
        assert_eq!(
            g.nodes.len() + p.unsupported.len() + n_constant_nodes,
            gp.node.len(),
            "{case}"
        );

        // The test data's inputs fit the declared inputs.
        let input_pb = dir.join("test_data_set_0/input_0.pb");
        if input_pb.is_file() {
            let (name, t) = read_tensor_file(&input_pb).unwrap();
            let x = g.value(g.inputs[0]);
            assert_eq!(name, x.name);
            let d = x.declared.as_ref().unwrap();
            assert_eq!(t.dtype(), d.dtype);
            let shape = d.shape.as_ref().unwrap();
            assert_eq!(shape.len(), t.rank());
            for (dim, &n) in shape.iter().zip(t.shape()) {
                if let Dim::Fixed(f) = dim {
                    assert_eq!(*f, n, "{case}");
                }
            }
        }

        if case == "mobilenet_v2" {
            let x = g.value(g.inputs[0]);
            assert_eq!(
                x.declared.as_ref().unwrap().shape.as_deref(),
                Some(
                    &[
                        Dim::Symbolic("DynamicDimension.0".into()),
                        Dim::Fixed(3),
                        Dim::Fixed(224),
                        Dim::Fixed(224)
                    ][..]
                )
            );
        }

        // Truncations of a real model: errors (or a different valid model), never a panic.
        if case == "ppocr_mobile_v2_cls" {
            for n in [
                1,
                2,
                7,
                100,
                1000,
                bytes.len() / 3,
                bytes.len() / 2,
                bytes.len() - 1,
            ] {
                let _ = load_model(&bytes[..n], Some(&dir));
            }
            assert!(load_model(&bytes[..bytes.len() / 2], Some(&dir)).is_err());
        }
    }
}
