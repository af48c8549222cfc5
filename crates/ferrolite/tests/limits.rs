//! Memory limits at prerun: the per-tensor limit and a session's cap (`max_memory`) refuse a
//! plan with a typed error naming the tensor and node, before anything is allocated, for
//! shapes the file computes (ConstantOfShape, Expand, Tile) as well as for whole plans. During
//! a run, the cap bounds the tensors whose sizes only the inputs decide.

use ferrolite::onnx::proto::{
    attribute_type, data_type, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use ferrolite::{DType, Error, Session, SessionOptions, Tensor};
use prost::Message;
use std::path::Path;

fn demo() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../models/ppocr_cls/model.onnx"
    ))
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

fn i64_tensor(name: &str, data: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![data.len() as i64],
        data_type: data_type::INT64,
        int64_data: data.to_vec(),
        ..Default::default()
    }
}

/// x (f32 [1]) -> `op`(x, shape constant) -> y, with `x` added so the node is not folded away.
fn model(op: &str, constant: &[i64]) -> Vec<u8> {
    let mut nodes = Vec::new();
    let main_input = if op == "ConstantOfShape" { "s" } else { "x" };
    nodes.push(NodeProto {
        op_type: op.into(),
        name: format!("big_{}", op.to_lowercase()),
        input: if op == "ConstantOfShape" {
            vec!["s".into()]
        } else {
            vec![main_input.into(), "s".into()]
        },
        output: vec!["big".into()],
        attribute: if op == "ConstantOfShape" {
            vec![AttributeProto {
                name: "value".into(),
                r#type: attribute_type::TENSOR,
                t: Some(TensorProto {
                    dims: vec![1],
                    data_type: data_type::FLOAT,
                    float_data: vec![0.0],
                    ..Default::default()
                }),
                ..Default::default()
            }]
        } else {
            vec![]
        },
        ..Default::default()
    });
    nodes.push(NodeProto {
        op_type: "Add".into(),
        name: "add".into(),
        input: vec!["big".into(), "x".into()],
        output: vec!["y".into()],
        ..Default::default()
    });
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: "g".into(),
            initializer: vec![i64_tensor("s", constant)],
            input: vec![value_info("x", data_type::FLOAT, &[1])],
            output: vec![ValueInfoProto {
                name: "y".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn prerun_error(bytes: &[u8], options: SessionOptions) -> Error {
    let session = Session::from_bytes(bytes, options).unwrap();
    session
        .prerun(&[vec![1]])
        .expect_err("prerun should refuse the plan")
}

#[test]
fn shapes_computed_from_the_file_are_refused_at_prerun() {
    // 2^60 elements (ConstantOfShape), 2^40 (Expand), 2^36 (Tile): over the per-tensor limit
    // without any cap, and the error names the node.
    for (op, shape) in [
        ("ConstantOfShape", vec![1 << 30, 1 << 30]),
        ("Expand", vec![1 << 20, 1 << 20]),
        ("Tile", vec![1 << 36]),
    ] {
        let e = prerun_error(&model(op, &shape), SessionOptions::default());
        assert!(matches!(e, Error::MemoryLimit { .. }), "{op}: {e:?}");
        let text = e.to_string();
        assert!(
            text.contains(&format!("big_{}", op.to_lowercase())),
            "{text}"
        );
        assert!(text.contains("memory limit"), "{text}");
    }
    // Dims whose product overflows 64 bits: shape inference refuses them, naming the node.
    let e = prerun_error(
        &model("ConstantOfShape", &[1 << 40, 1 << 40, 1 << 40]),
        SessionOptions::default(),
    );
    let text = e.to_string();
    assert!(
        text.contains("big_constantofshape") && text.contains("too many elements"),
        "{text}"
    );
}

#[test]
fn a_cap_refuses_tensors_that_fit_the_per_tensor_limit() {
    // 1 MiB of f32 zeros: fine by default, over a 512 KiB cap.
    let bytes = model("ConstantOfShape", &[512, 512]);
    let ok = Session::from_bytes(&bytes, SessionOptions::default()).unwrap();
    let y = ok
        .run(&[("x", Tensor::full(DType::F32, &[1], 2.0).unwrap())])
        .unwrap();
    assert_eq!(y.iter().next().unwrap().1.shape(), &[512, 512]);
    let e = prerun_error(&bytes, SessionOptions::default().with_max_memory(512 << 10));
    match e {
        Error::MemoryLimit {
            needed,
            limit,
            what,
        } => {
            assert_eq!(limit, 512 << 10);
            assert!(needed >= 1 << 20, "{needed}");
            assert!(what.contains("big_constantofshape"), "{what}");
        }
        e => panic!("{e:?}"),
    }
}

/// x (f32 [1]) + ConstantOfShape(s), `s` (i64 [2]) an input: a tensor sized at run time.
fn sized_by_input() -> Vec<u8> {
    let mut m = ModelProto::decode(model("ConstantOfShape", &[1, 1]).as_slice()).unwrap();
    let g = m.graph.as_mut().unwrap();
    g.initializer.clear();
    g.input.push(value_info("s", data_type::INT64, &[2]));
    m.encode_to_vec()
}

#[test]
fn a_cap_refuses_a_tensor_sized_at_run_time() {
    let session = Session::from_bytes(
        &sized_by_input(),
        SessionOptions::default().with_max_memory(512 << 10),
    )
    .unwrap();
    let x = Tensor::full(DType::F32, &[1], 2.0).unwrap();
    let run = |rows: i64| {
        let s = Tensor::from_vec(&[2], vec![rows, 512i64]).unwrap();
        session.run(&[("x", x.clone()), ("s", s)])
    };
    assert_eq!(run(64).unwrap()["y"].shape(), &[64, 512]);
    match run(512).unwrap_err() {
        Error::MemoryLimit {
            needed,
            limit,
            what,
        } => {
            assert_eq!((needed, limit), (1 << 20, 512 << 10));
            assert!(what.contains("big_constantofshape"), "{what}");
        }
        e => panic!("{e:?}"),
    }
    // The session goes on after the refusal.
    assert_eq!(run(8).unwrap()["y"].shape(), &[8, 512]);
}

#[test]
fn a_cap_counts_weights_arena_scratch_and_prepacked_copies() {
    let shape = vec![1, 3, 48, 192];
    let roomy = Session::from_path(demo(), SessionOptions::default()).unwrap();
    let prepared = roomy.prerun(std::slice::from_ref(&shape)).unwrap();
    let weights: u64 = prepared
        .graph
        .values
        .iter()
        .filter_map(|v| v.constant.as_ref())
        .map(|t| t.byte_len() as u64)
        .sum();
    let memory = prepared.plan.memory_stats(roomy.threads());
    let (arena, scratch) = (memory.arena_bytes, memory.scratch.bytes(roomy.threads()));
    let prepacked = prepared.plan.prepacked_bytes();
    assert!(
        weights > 100_000 && arena > 0 && prepacked > 0,
        "{weights} {arena} {prepacked}"
    );
    let total = weights + arena + scratch + prepacked;
    // The convolutions' scratch counts: a cap that leaves room for all else is refused.
    assert!(scratch > 0, "{memory:?}");
    let no_scratch = SessionOptions::default().with_max_memory(total - scratch);
    match Session::from_path(demo(), no_scratch)
        .unwrap()
        .prerun(std::slice::from_ref(&shape))
    {
        Err(Error::MemoryLimit { what, needed, .. }) => {
            assert!(what.contains("scratch"), "{what}");
            assert_eq!(needed, total);
        }
        r => panic!("{r:?}"),
    }
    // Exactly the total fits, and runs.
    let fits =
        Session::from_path(demo(), SessionOptions::default().with_max_memory(total)).unwrap();
    let x = Tensor::full(DType::F32, &shape, 0.5).unwrap();
    assert_eq!(
        fits.run(&[("x", x.clone())]).unwrap().into_vec()[0]
            .1
            .to_f64_vec(),
        roomy.run(&[("x", x)]).unwrap().into_vec()[0].1.to_f64_vec()
    );
    // One byte less is refused as a whole plan; less than the weights, as the weights.
    let tight =
        Session::from_path(demo(), SessionOptions::default().with_max_memory(total - 1)).unwrap();
    match tight.prerun(std::slice::from_ref(&shape)) {
        Err(Error::MemoryLimit { what, needed, .. }) => {
            assert!(what.contains("the plan"), "{what}");
            assert_eq!(needed, total);
        }
        r => panic!("{r:?}"),
    }
    let tiny = Session::from_path(
        demo(),
        SessionOptions::default().with_max_memory(weights - 1),
    )
    .unwrap();
    let e = tiny.prerun(&[shape]).unwrap_err().to_string();
    assert!(e.contains("the weights"), "{e}");
}
