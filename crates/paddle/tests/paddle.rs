//! Paddle frontend: attribute decoding, elementwise `axis` broadcasting, malformed programs
//! and parameters, and the model zoo in ../shared/models/paddle against the ONNX references.

use ferrolite::{Session, SessionOptions, Tensor};
use ferrolite_paddle::attr::{AttrValue, ScalarValue};
use ferrolite_paddle::model::{convert_program, persistable_vars, read_combined};
use ferrolite_paddle::params::write_tensor;
use ferrolite_paddle::proto::*;
use ferrolite_paddle::Error;
use prost::Message;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn tensor_var(name: &str, dtype: i32, dims: &[i64], persistable: bool) -> VarDesc {
    VarDesc {
        name: name.into(),
        r#type: Some(VarType {
            r#type: var_type::LOD_TENSOR,
            lod_tensor: Some(LoDTensorDesc {
                tensor: Some(TensorDesc {
                    data_type: dtype,
                    dims: dims.to_vec(),
                }),
                lod_level: 0,
            }),
            ..Default::default()
        }),
        persistable,
        ..Default::default()
    }
}

fn slot(name: &str, args: &[&str]) -> OpVar {
    OpVar {
        parameter: name.into(),
        arguments: args.iter().map(|s| s.to_string()).collect(),
    }
}

fn int_attr(name: &str, v: i32) -> Attr {
    Attr {
        name: name.into(),
        r#type: attr_type::INT,
        i: v,
        ..Default::default()
    }
}

fn op(t: &str, inputs: Vec<OpVar>, outputs: Vec<OpVar>, attrs: Vec<Attr>) -> OpDesc {
    OpDesc {
        r#type: t.into(),
        inputs,
        outputs,
        attrs,
        is_target: false,
    }
}

fn feed(var: &str, col: i32) -> OpDesc {
    op(
        "feed",
        vec![slot("X", &["feed"])],
        vec![slot("Out", &[var])],
        vec![int_attr("col", col)],
    )
}

fn fetch(var: &str, col: i32) -> OpDesc {
    op(
        "fetch",
        vec![slot("X", &[var])],
        vec![slot("Out", &["fetch"])],
        vec![int_attr("col", col)],
    )
}

fn program(vars: Vec<VarDesc>, ops: Vec<OpDesc>) -> ProgramDesc {
    ProgramDesc {
        blocks: vec![BlockDesc {
            idx: 0,
            parent_idx: -1,
            vars,
            ops,
            forward_block_idx: None,
        }],
        ..Default::default()
    }
}

#[test]
fn every_attribute_type_decodes() {
    let scalar = |t: i32, b: bool, i: i64, r: f64| Scalar {
        r#type: t,
        b,
        i,
        r,
        c: None,
    };
    let cases: Vec<(Attr, AttrValue)> = vec![
        (
            Attr {
                r#type: attr_type::INT,
                i: -7,
                ..Default::default()
            },
            AttrValue::Int(-7),
        ),
        (
            Attr {
                r#type: attr_type::FLOAT,
                f: 1.5,
                ..Default::default()
            },
            AttrValue::Float(1.5),
        ),
        (
            Attr {
                r#type: attr_type::STRING,
                s: "SAME".into(),
                ..Default::default()
            },
            AttrValue::String("SAME".into()),
        ),
        (
            Attr {
                r#type: attr_type::INTS,
                ints: vec![1, -2],
                ..Default::default()
            },
            AttrValue::Ints(vec![1, -2]),
        ),
        (
            Attr {
                r#type: attr_type::FLOATS,
                floats: vec![0.5, 2.0],
                ..Default::default()
            },
            AttrValue::Floats(vec![0.5, 2.0]),
        ),
        (
            Attr {
                r#type: attr_type::STRINGS,
                strings: vec!["a".into(), "b".into()],
                ..Default::default()
            },
            AttrValue::Strings(vec!["a".into(), "b".into()]),
        ),
        (
            Attr {
                r#type: attr_type::BOOLEAN,
                b: true,
                ..Default::default()
            },
            AttrValue::Boolean(true),
        ),
        (
            Attr {
                r#type: attr_type::BOOLEANS,
                bools: vec![true, false],
                ..Default::default()
            },
            AttrValue::Booleans(vec![true, false]),
        ),
        (
            Attr {
                r#type: attr_type::BLOCK,
                block_idx: 3,
                ..Default::default()
            },
            AttrValue::Block(3),
        ),
        (
            Attr {
                r#type: attr_type::LONG,
                l: 1 << 40,
                ..Default::default()
            },
            AttrValue::Long(1 << 40),
        ),
        (
            Attr {
                r#type: attr_type::BLOCKS,
                blocks_idx: vec![1, 2],
                ..Default::default()
            },
            AttrValue::Blocks(vec![1, 2]),
        ),
        (
            Attr {
                r#type: attr_type::LONGS,
                longs: vec![-1, 1 << 40],
                ..Default::default()
            },
            AttrValue::Longs(vec![-1, 1 << 40]),
        ),
        (
            Attr {
                r#type: attr_type::FLOAT64S,
                float64s: vec![0.25, -1e300],
                ..Default::default()
            },
            AttrValue::Float64s(vec![0.25, -1e300]),
        ),
        (
            Attr {
                r#type: attr_type::VAR,
                var_name: "v".into(),
                ..Default::default()
            },
            AttrValue::Var("v".into()),
        ),
        (
            Attr {
                r#type: attr_type::VARS,
                vars_name: vec!["v".into(), "w".into()],
                ..Default::default()
            },
            AttrValue::Vars(vec!["v".into(), "w".into()]),
        ),
        (
            Attr {
                r#type: attr_type::FLOAT64,
                float64: 1e-12,
                ..Default::default()
            },
            AttrValue::Float64(1e-12),
        ),
        (
            Attr {
                r#type: attr_type::SCALAR,
                scalar: Some(scalar(scalar_type::FLOAT64, false, 0, 2.5)),
                ..Default::default()
            },
            AttrValue::Scalar(ScalarValue::Float64(2.5)),
        ),
        (
            Attr {
                r#type: attr_type::SCALARS,
                scalars: vec![
                    scalar(scalar_type::LONG, false, 4, 0.0),
                    scalar(scalar_type::BOOLEAN, true, 0, 0.0),
                ],
                ..Default::default()
            },
            AttrValue::Scalars(vec![ScalarValue::Long(4), ScalarValue::Bool(true)]),
        ),
    ];
    for (mut a, want) in cases {
        a.name = "a".into();
        // Through the wire format, as read from a file.
        let o = OpDesc {
            r#type: "x".into(),
            attrs: vec![a],
            ..Default::default()
        };
        let back = OpDesc::decode(o.encode_to_vec().as_slice()).unwrap();
        assert_eq!(AttrValue::decode(&back.attrs[0]).unwrap(), want);
    }
    // Proto2 writers emit unpacked repeated fields; both forms decode.
    let unpacked = [0x30u8, 0x05, 0x30, 0x07]; // field 6 (ints), varint 5 and 7
    let a = Attr::decode(&unpacked[..]).unwrap();
    assert_eq!(a.ints, vec![5, 7]);
    let bad = Attr {
        name: "z".into(),
        r#type: 99,
        ..Default::default()
    };
    assert!(AttrValue::decode(&bad).unwrap_err().contains("99"));
    assert_eq!(AttrValue::Ints(vec![1, 2]).as_i64s(), Some(vec![1, 2]));
    assert_eq!(AttrValue::Long(5).as_f64(), Some(5.0));
    assert_eq!(AttrValue::Boolean(true).as_i64(), Some(1));
}

fn f32_tensor(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::from_vec(shape, v).unwrap()
}

fn run(p: &ProgramDesc, params: HashMap<String, Tensor>, x: Tensor) -> Tensor {
    let m = convert_program(p, params).unwrap();
    let model = ferrolite::Model {
        graph: m.graph,
        format: ferrolite::Format::Paddle,
        producer: String::new(),
        opsets: vec![],
        metadata: vec![],
        optimized: None,
    };
    let s = Session::from_model(model, SessionOptions::default()).unwrap();
    s.run(&[("x", x)]).unwrap().into_vec().remove(0).1
}

/// `elementwise_add` of X [2,3,2] and Y [3] at axis 1: Y runs along axis 1, not the last axis.
#[test]
fn elementwise_axis_broadcasts_from_the_axis() {
    for (kind, f) in [
        ("elementwise_add", (|a, b| a + b) as fn(f32, f32) -> f32),
        ("elementwise_mul", |a, b| a * b),
        ("elementwise_sub", |a, b| a - b),
    ] {
        for axis in [1, -1] {
            let ydims: Vec<i64> = if axis == 1 { vec![3] } else { vec![2] };
            let p = program(
                vec![
                    tensor_var("x", var_type::FP32, &[-1, 3, 2], false),
                    tensor_var("y", var_type::FP32, &ydims, true),
                    tensor_var("out", var_type::FP32, &[-1, 3, 2], false),
                ],
                vec![
                    feed("x", 0),
                    op(
                        kind,
                        vec![slot("X", &["x"]), slot("Y", &["y"])],
                        vec![slot("Out", &["out"])],
                        vec![int_attr("axis", axis)],
                    ),
                    fetch("out", 0),
                ],
            );
            let yv: Vec<f32> = (0..ydims[0]).map(|i| 10.0 * (i + 1) as f32).collect();
            let params = HashMap::from([(
                "y".to_string(),
                f32_tensor(&[ydims[0] as usize], yv.clone()),
            )]);
            let xv: Vec<f32> = (0..12).map(|i| i as f32).collect();
            let got = run(&p, params, f32_tensor(&[2, 3, 2], xv.clone()));
            assert_eq!(got.shape(), &[2, 3, 2]);
            let got = got.to_f64_vec();
            for i in 0..12 {
                let yi = if axis == 1 { (i / 2) % 3 } else { i % 2 };
                assert_eq!(got[i] as f32, f(xv[i], yv[yi]), "{kind} axis {axis} at {i}");
            }
        }
    }
}

/// X [2,3] fed, Y a [3,1]-shaped parameter at axis 0 of a rank-3 X... and a non-constant Y
/// lined up at axis 1 through an Unsqueeze.
#[test]
fn elementwise_axis_with_a_computed_operand() {
    let p = program(
        vec![
            tensor_var("x", var_type::FP32, &[2, 3, 2], false),
            tensor_var("m", var_type::FP32, &[2, 3], false),
            tensor_var("out", var_type::FP32, &[2, 3, 2], false),
        ],
        vec![
            feed("x", 0),
            op(
                "reduce_sum",
                vec![slot("X", &["x"])],
                vec![slot("Out", &["m"])],
                vec![Attr {
                    name: "dim".into(),
                    r#type: attr_type::INTS,
                    ints: vec![2],
                    ..Default::default()
                }],
            ),
            op(
                "elementwise_add",
                vec![slot("X", &["x"]), slot("Y", &["m"])],
                vec![slot("Out", &["out"])],
                vec![int_attr("axis", 0)],
            ),
            fetch("out", 0),
        ],
    );
    let xv: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let got = run(&p, HashMap::new(), f32_tensor(&[2, 3, 2], xv.clone())).to_f64_vec();
    for i in 0..12 {
        let pair = i / 2;
        let m = xv[2 * pair] + xv[2 * pair + 1];
        assert_eq!(got[i] as f32, xv[i] + m);
    }
}

#[test]
fn unsqueeze_positions_follow_paddle() {
    use ferrolite_paddle::map::unsqueeze_positions;
    assert_eq!(unsqueeze_positions(2, &[0, 2]).unwrap(), vec![0, 2]);
    assert_eq!(unsqueeze_positions(2, &[-1]).unwrap(), vec![2]);
    assert_eq!(unsqueeze_positions(1, &[1, 1]).unwrap(), vec![1, 2]);
    assert!(unsqueeze_positions(1, &[5]).is_err());
}

/// Paddle's interpolation ops: nearest (truncating, asymmetric) and bilinear with
/// align_corners, checked against hand-computed values.
#[test]
fn interpolation_maps_to_resize() {
    let attrs = |align: bool, extra: Vec<Attr>| {
        let mut v = vec![Attr {
            name: "align_corners".into(),
            r#type: attr_type::BOOLEAN,
            b: align,
            ..Default::default()
        }];
        v.extend(extra);
        v
    };
    let x = || f32_tensor(&[1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]);
    let prog = |kind: &str, a: Vec<Attr>| {
        program(
            vec![
                tensor_var("x", var_type::FP32, &[1, 1, 2, 2], false),
                tensor_var("out", var_type::FP32, &[1, 1, -1, -1], false),
            ],
            vec![
                feed("x", 0),
                op(
                    kind,
                    vec![slot("X", &["x"])],
                    vec![slot("Out", &["out"])],
                    a,
                ),
                fetch("out", 0),
            ],
        )
    };
    let scale2 = Attr {
        name: "scale".into(),
        r#type: attr_type::FLOATS,
        floats: vec![2.0, 2.0],
        ..Default::default()
    };
    let got = run(
        &prog("nearest_interp_v2", attrs(false, vec![scale2])),
        HashMap::new(),
        x(),
    );
    assert_eq!(got.shape(), &[1, 1, 4, 4]);
    assert_eq!(
        got.to_f64_vec(),
        vec![1., 1., 2., 2., 1., 1., 2., 2., 3., 3., 4., 4., 3., 3., 4., 4.]
    );
    let size3 = vec![int_attr("out_h", 3), int_attr("out_w", 3)];
    let got = run(
        &prog("bilinear_interp_v2", attrs(true, size3)),
        HashMap::new(),
        x(),
    );
    assert_eq!(got.shape(), &[1, 1, 3, 3]);
    assert_eq!(
        got.to_f64_vec(),
        vec![1., 1.5, 2., 2., 2.5, 3., 3., 3.5, 4.]
    );
}

fn two_param_program() -> ProgramDesc {
    program(
        vec![
            tensor_var("feed", var_type::FP32, &[], true),
            tensor_var("x", var_type::FP32, &[-1, 2], false),
            tensor_var("b_w", var_type::FP32, &[2], true),
            tensor_var("a_w", var_type::FP32, &[2, 2], true),
            tensor_var("h", var_type::FP32, &[-1, 2], false),
            tensor_var("out", var_type::FP32, &[-1, 2], false),
        ],
        vec![
            feed("x", 0),
            op(
                "matmul_v2",
                vec![slot("X", &["x"]), slot("Y", &["a_w"])],
                vec![slot("Out", &["h"])],
                vec![],
            ),
            op(
                "elementwise_add",
                vec![slot("X", &["h"]), slot("Y", &["b_w"])],
                vec![slot("Out", &["out"])],
                vec![int_attr("axis", -1)],
            ),
            fetch("out", 0),
        ],
    )
}

fn params_bytes() -> (Vec<u8>, Vec<u8>) {
    let a = write_tensor(
        &f32_tensor(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]),
        var_type::FP32,
    );
    let b = write_tensor(&f32_tensor(&[2], vec![0.5, -0.5]), var_type::FP32);
    (a, b)
}

#[test]
fn combined_params_round_trip_and_run() {
    let p = two_param_program();
    let vars = persistable_vars(&p);
    let names: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["a_w", "b_w"], "sorted, feed/fetch excluded");
    let (a, b) = params_bytes();
    let bytes = [a, b].concat();
    let params = read_combined(&bytes, &vars).unwrap();
    let got = run(&p, params, f32_tensor(&[1, 2], vec![1.0, 1.0]));
    assert_eq!(got.to_f64_vec(), vec![4.5, 5.5]);
}

#[test]
fn malformed_params_are_typed_errors() {
    let p = two_param_program();
    let vars = persistable_vars(&p);
    let (a, b) = params_bytes();
    let whole = [a.clone(), b.clone()].concat();

    // Truncated anywhere: a typed error naming the variable being read, never a panic.
    for cut in 0..whole.len() {
        match read_combined(&whole[..cut], &vars) {
            Err(Error::Truncated { var, .. }) => {
                assert_eq!(var, if cut < a.len() { "a_w" } else { "b_w" });
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    // A missing variable: the file ends where b_w should start.
    assert!(matches!(
        read_combined(&a, &vars),
        Err(Error::Truncated { ref var, .. }) if var == "b_w"
    ));
    // An extra variable.
    let extra = [whole.clone(), b.clone()].concat();
    assert!(matches!(
        read_combined(&extra, &vars),
        Err(Error::TrailingData { extra, .. }) if extra == b.len()
    ));
    // Wrong LoDTensor version, wrong tensor version.
    let mut v = whole.clone();
    v[0] = 1;
    assert!(matches!(
        read_combined(&v, &vars),
        Err(Error::Version {
            what: "LoDTensor",
            found: 1,
            ..
        })
    ));
    let mut v = whole.clone();
    v[12] = 2;
    assert!(matches!(
        read_combined(&v, &vars),
        Err(Error::Version {
            what: "tensor",
            found: 2,
            ..
        })
    ));
    // Dims that disagree with the program (and so with the data that follows).
    let wrong = write_tensor(&f32_tensor(&[4], vec![1.0; 4]), var_type::FP32);
    let v = [wrong, b.clone()].concat();
    let e = read_combined(&v, &vars).unwrap_err();
    assert!(
        matches!(e, Error::Mismatch { ref var, .. } if var == "a_w"),
        "{e}"
    );
    assert!(e.to_string().contains("[2, 2]"), "{e}");
    // Wrong dtype.
    let wrong = write_tensor(
        &Tensor::from_vec(&[2, 2], vec![1i64; 4]).unwrap(),
        var_type::INT64,
    );
    let v = [wrong, b.clone()].concat();
    assert!(matches!(
        read_combined(&v, &vars),
        Err(Error::Mismatch { .. })
    ));
    // ... except int8 where a float is declared: quantized weights, which keep their type.
    let int8 = write_tensor(
        &Tensor::from_vec(&[2, 2], vec![1i8, -2, 3, 127]).unwrap(),
        var_type::INT8,
    );
    let v = [int8, b.clone()].concat();
    let params = read_combined(&v, &vars).unwrap();
    assert_eq!(params["a_w"].dtype(), ferrolite::DType::I8);
    assert_eq!(params["a_w"].to_f64_vec(), vec![1.0, -2.0, 3.0, 127.0]);
    // Absurd LoD level count or data size: refused before allocating.
    let mut v = whole.clone();
    v[4..12].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        read_combined(&v, &vars),
        Err(Error::Truncated { .. })
    ));
    // Random bytes never panic.
    let mut seed = 1u64;
    for _ in 0..200 {
        let mut v = whole.clone();
        for _ in 0..4 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (seed >> 33) as usize % v.len();
            v[i] = (seed >> 17) as u8;
        }
        let _ = read_combined(&v, &vars);
    }
}

/// Paddle's quantization passes save scales with other unit dims than the program declares
/// (0-d where [1] is declared, [1, C] where [C] is): the same data, read with the program's
/// dims. Other disagreements stay errors.
#[test]
fn params_with_other_unit_dims_take_the_program_dims() {
    let prog = |dims: &[i64]| {
        program(
            vec![
                tensor_var("x", var_type::FP32, &[-1, 2], false),
                tensor_var("s", var_type::FP32, dims, true),
                tensor_var("out", var_type::FP32, &[-1, 2], false),
            ],
            vec![
                feed("x", 0),
                op(
                    "elementwise_mul",
                    vec![slot("X", &["x"]), slot("Y", &["s"])],
                    vec![slot("Out", &["out"])],
                    vec![int_attr("axis", -1)],
                ),
                fetch("out", 0),
            ],
        )
    };
    let scalar = write_tensor(&f32_tensor(&[], vec![3.0]), var_type::FP32);
    let one = write_tensor(&f32_tensor(&[1], vec![3.0]), var_type::FP32);
    let row = write_tensor(&f32_tensor(&[1, 2], vec![3.0, 4.0]), var_type::FP32);
    for (declared, bytes, want, out) in [
        (&[1][..], &scalar, &[1][..], [3.0, 6.0]),
        (&[1, 1][..], &scalar, &[1, 1][..], [3.0, 6.0]),
        (&[][..], &one, &[][..], [3.0, 6.0]),
        (&[2][..], &row, &[2][..], [3.0, 8.0]),
    ] {
        let p = prog(declared);
        let params = read_combined(bytes, &persistable_vars(&p)).unwrap();
        assert_eq!(params["s"].shape(), want, "declared {declared:?}");
        let got = run(&p, params, f32_tensor(&[1, 2], vec![1.0, 2.0]));
        assert_eq!(got.to_f64_vec(), out);
    }
    // Other sizes, or a declared unknown size, are still refused.
    let two = write_tensor(&f32_tensor(&[2], vec![3.0, 4.0]), var_type::FP32);
    let col = write_tensor(&f32_tensor(&[2, 1, 3], vec![0.0; 6]), var_type::FP32);
    for (declared, bytes) in [
        (&[1][..], &two),
        (&[2][..], &scalar),
        (&[-1][..], &scalar),
        (&[3, 2][..], &col),
    ] {
        let p = prog(declared);
        let e = read_combined(bytes, &persistable_vars(&p)).unwrap_err();
        assert!(
            matches!(e, Error::Mismatch { ref var, .. } if var == "s"),
            "declared {declared:?}: {e}"
        );
    }
}

#[test]
fn noncombined_missing_file_is_named() {
    let dir = std::env::temp_dir().join(format!("ferrolite-paddle-nc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let p = two_param_program();
    std::fs::write(dir.join("__model__"), p.encode_to_vec()).unwrap();
    let (a, b) = params_bytes();
    std::fs::write(dir.join("a_w"), &a).unwrap();
    let e = ferrolite_paddle::load(&dir, None).unwrap_err();
    assert!(
        matches!(e, Error::MissingVariable { ref var, .. } if var == "b_w"),
        "{e}"
    );
    // With the file present it loads and runs; an over-long file is an error.
    std::fs::write(dir.join("b_w"), &b).unwrap();
    let s = Session::from_path(&dir, SessionOptions::default()).unwrap();
    let out = s
        .run(&[("x", f32_tensor(&[1, 2], vec![1.0, 0.0]))])
        .unwrap();
    assert_eq!(out.get("out").unwrap().to_f64_vec(), vec![1.5, 1.5]);
    std::fs::write(dir.join("b_w"), [b.clone(), vec![0]].concat()).unwrap();
    assert!(matches!(
        ferrolite_paddle::load(&dir, None),
        Err(Error::TrailingData { .. })
    ));
    // A parameter file that is a symbolic link out of the folder is refused, naming it.
    let outside = std::env::temp_dir().join(format!("ferrolite-paddle-out-{}", std::process::id()));
    std::fs::write(&outside, &b).unwrap();
    std::fs::remove_file(dir.join("b_w")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("b_w")).unwrap();
    let e = ferrolite_paddle::load(&dir, None).unwrap_err().to_string();
    assert!(
        e.contains("b_w") && e.contains("outside the model's folder"),
        "{e}"
    );
    let _ = std::fs::remove_file(&outside);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn parameter_names_that_leave_the_folder_are_refused() {
    for bad in ["../a_w", "/etc/passwd", "..", "a\\w", "a\0w"] {
        let mut p = two_param_program();
        for v in &mut p.blocks[0].vars {
            if v.name == "a_w" {
                v.name = bad.to_string();
            }
        }
        let vars = persistable_vars(&p);
        let e = ferrolite_paddle::model::read_separate_with(
            &vars,
            |name: &str| -> ferrolite_paddle::Result<Vec<u8>> {
                panic!("asked for the file of '{name}'")
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cannot be a parameter file name"), "{bad}: {e}");
    }
}

#[test]
fn malformed_programs_are_typed_errors() {
    use ferrolite_paddle::decode_program;
    assert!(matches!(decode_program(&[]), Err(Error::InvalidProgram(_))));
    assert!(matches!(
        decode_program(b"{\"program\": {}}"),
        Err(Error::PirProgram { .. })
    ));
    let bytes = two_param_program().encode_to_vec();
    for cut in 1..bytes.len() {
        // Truncated programs either fail to decode or decode to a prefix; neither panics.
        if let Ok(p) = decode_program(&bytes[..cut]) {
            let _ = convert_program(&p, HashMap::new());
        }
    }
    // An op reading a variable nothing defines.
    let mut p = two_param_program();
    p.blocks[0].ops[1].inputs[0].arguments[0] = "nope".into();
    let (a, b) = params_bytes();
    let params = read_combined(&[a, b].concat(), &persistable_vars(&p)).unwrap();
    let e = convert_program(&p, params).unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    // Unsupported ops are listed together.
    let mut p = two_param_program();
    p.blocks[0].ops[1].r#type = "frobnicate".into();
    p.blocks[0].ops[2].r#type = "wibble".into();
    let (a, b) = params_bytes();
    let params = read_combined(&[a, b].concat(), &persistable_vars(&p)).unwrap();
    match convert_program(&p, params) {
        Err(Error::UnsupportedOps(ops)) => {
            let names: Vec<&str> = ops.iter().map(|o| o.op.as_str()).collect();
            assert_eq!(names, ["frobnicate", "wibble"]);
        }
        other => panic!("{other:?}"),
    }
    // PIR json files get the export hint.
    let dir = std::env::temp_dir().join(format!("ferrolite-paddle-pir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("inference.json"), "{}").unwrap();
    let e = ferrolite_paddle::load(&dir, None).unwrap_err();
    assert!(e.to_string().contains("FLAGS_enable_pir_api=0"), "{e}");
    let e = ferrolite_paddle::load(&dir.join("inference.json"), None).unwrap_err();
    assert!(matches!(e, Error::PirProgram { .. }));
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- the model zoo ----

fn models_root() -> PathBuf {
    std::env::var_os("FERROLITE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models"))
}

fn check_model(model: &Path, case: &Path) -> f64 {
    let s = Session::from_path(model, SessionOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", model.display()));
    let data = case.join("test_data_set_0");
    let mut inputs = Vec::new();
    for k in 0.. {
        let f = data.join(format!("input_{k}.pb"));
        if !f.exists() {
            break;
        }
        let (name, t) = ferrolite::onnx::model::read_tensor_file(&f).unwrap();
        inputs.push((name, t));
    }
    let named: Vec<(&str, Tensor)> = inputs
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    let outs = s.run(&named).unwrap();
    let mut worst = 0.0f64;
    for (k, (name, got)) in outs.iter().enumerate() {
        let (_, want) =
            ferrolite::onnx::model::read_tensor_file(&data.join(format!("output_{k}.pb"))).unwrap();
        assert_eq!(
            got.shape(),
            want.shape(),
            "{} output {name}",
            model.display()
        );
        for (g, w) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
            let d = (g - w).abs();
            assert!(
                d <= 1e-4 + 1e-4 * w.abs(),
                "{} output {name}: {g} vs {w}",
                model.display()
            );
            worst = worst.max(d);
        }
    }
    worst
}

#[test]
fn model_zoo_matches_onnx_references() {
    let root = models_root();
    if !root.join("paddle").is_dir() {
        eprintln!(
            "skipping: no Paddle models at {} (set FERROLITE_MODELS)",
            root.join("paddle").display()
        );
        return;
    }
    let mut ran = 0;
    let mut dirs: Vec<_> = std::fs::read_dir(root.join("paddle"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let case = root.join("cases").join(&name);
        if !case.is_dir() {
            continue;
        }
        let d = check_model(&dir, &case);
        eprintln!("{name}: max abs diff {d:.3e}");
        ran += 1;
        // model file + params file, as Paddle Lite's --model_file/--param_file.
        let s = Session::from_paddle(
            dir.join("inference.pdmodel"),
            Some(&dir.join("inference.pdiparams")),
            SessionOptions::default(),
        );
        assert!(s.is_ok(), "{name}: {:?}", s.err());
        if dir.join("noncombined").is_dir() {
            let d = check_model(&dir.join("noncombined"), &case);
            eprintln!("{name}/noncombined: max abs diff {d:.3e}");
        }
    }
    assert!(ran >= 5, "only {ran} Paddle models found");
}

/// Writes small Paddle fuzz seeds (the test programs above, packed as fuzz/src/lib.rs reads
/// them) into `$FERROLITE_FUZZ_SEEDS/paddle_combined` and `.../paddle_separate`;
/// scripts/fuzz-corpus runs it. Ignored otherwise.
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let Some(dir) = std::env::var_os("FERROLITE_FUZZ_SEEDS").map(PathBuf::from) else {
        eprintln!("set FERROLITE_FUZZ_SEEDS to a folder");
        return;
    };
    let p = two_param_program().encode_to_vec();
    let (a, b) = params_bytes();
    let mut combined = (p.len() as u32).to_le_bytes().to_vec();
    combined.extend(&p);
    combined.extend(&a);
    combined.extend(&b);
    let mut separate = (p.len() as u32).to_le_bytes().to_vec();
    separate.extend(&p);
    for (name, data) in [("a_w", &a), ("b_w", &b)] {
        separate.extend((name.len() as u16).to_le_bytes());
        separate.extend(name.as_bytes());
        separate.extend((data.len() as u32).to_le_bytes());
        separate.extend(data.iter());
    }
    for (target, data) in [("paddle_combined", combined), ("paddle_separate", separate)] {
        std::fs::create_dir_all(dir.join(target)).unwrap();
        std::fs::write(dir.join(target).join("two_param_program"), data).unwrap();
    }
}
