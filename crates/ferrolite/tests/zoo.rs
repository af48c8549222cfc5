//! Every case of the model zoo (`$FERROLITE_MODELS`, default `../shared/models`) gives its
//! reference outputs within 1e-4 absolute + 1e-4 relative, and bad inputs give typed errors.

use ferrolite::onnx::model::read_tensor_file;
use ferrolite::{Error, Session, SessionOptions, Tensor};
use std::path::{Path, PathBuf};

fn models_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("FERROLITE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models"));
    if dir.join("cases").is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: model zoo not found at {} (set FERROLITE_MODELS to its folder)",
            dir.display()
        );
        None
    }
}

fn load_set(dir: &Path, prefix: &str) -> Vec<(String, Tensor)> {
    let mut v = Vec::new();
    for k in 0.. {
        let f = dir.join(format!("{prefix}_{k}.pb"));
        if !f.exists() {
            break;
        }
        v.push(read_tensor_file(&f).expect("reference data reads"));
    }
    v
}

fn check_case(case: &Path, threads: usize) {
    check_case_with(
        case,
        SessionOptions {
            threads,
            ..Default::default()
        },
    )
}

fn check_case_with(case: &Path, options: SessionOptions) {
    let session = Session::from_path(case.join("model.onnx"), options)
        .unwrap_or_else(|e| panic!("{}: {e}", case.display()));
    let set = case.join("test_data_set_0");
    let inputs = load_set(&set, "input");
    let named: Vec<(&str, Tensor)> = inputs
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    let outputs = session
        .run(&named)
        .unwrap_or_else(|e| panic!("{}: {e}", case.display()));
    let expected = load_set(&set, "output");
    assert_eq!(outputs.len(), expected.len());
    for ((name, actual), (_, want)) in outputs.iter().zip(&expected) {
        assert_eq!(actual.shape(), want.shape(), "{}: {name}", case.display());
        let (a, w) = (actual.to_f64_vec(), want.to_f64_vec());
        let mut worst = 0.0f64;
        for (x, y) in a.iter().zip(&w) {
            let d = (x - y).abs();
            assert!(
                d <= 1e-4 + 1e-4 * y.abs(),
                "{}: output {name} differs: {x} vs {y}",
                case.display()
            );
            worst = worst.max(d);
        }
        eprintln!("{}: {name} max abs diff {worst:.2e}", case.display());
    }
}

/// The zoo's ONNX cases, sorted.
fn zoo_cases(dir: &Path) -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir.join("cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.onnx").exists())
        .collect();
    cases.sort();
    cases
}

#[test]
fn zoo_cases_match_references() {
    let Some(dir) = models_dir() else { return };
    let cases = zoo_cases(&dir);
    assert!(!cases.is_empty());
    for case in &cases {
        check_case(case, 2);
    }
}

/// The same with every instruction set this CPU has forced on the session: the portable
/// kernels are what an ARM or an old x86 machine runs.
#[test]
fn zoo_cases_match_references_on_every_isa() {
    let Some(dir) = models_dir() else { return };
    let cases = zoo_cases(&dir);
    for isa in ferrolite::Isa::available() {
        for case in &cases {
            let options = SessionOptions::default()
                .with_threads(1)
                .with_isa(isa.name());
            check_case_with(case, options);
        }
    }
    // An ISA the CPU lacks, or one nobody knows, is an error when the session is made.
    let model = dir.join("cases/mobilenet_v2/model.onnx");
    let bad = SessionOptions::default().with_isa("sse9");
    assert!(Session::from_path(&model, bad).is_err());
}

#[test]
fn wrong_inputs_are_typed_errors() {
    let Some(dir) = models_dir() else { return };
    let session = Session::from_path(
        dir.join("cases/mobilenet_v2/model.onnx"),
        SessionOptions::default(),
    )
    .unwrap();
    let good = Tensor::zeros(ferrolite::DType::F32, &[1, 3, 224, 224]).unwrap();
    // Missing input.
    assert!(matches!(session.run(&[]), Err(Error::Input { name, .. }) if name == "x"));
    // Unknown input name.
    assert!(matches!(
        session.run(&[("x", good.clone()), ("y", good.clone())]),
        Err(Error::Input { name, .. }) if name == "y"
    ));
    // Wrong dtype.
    let ints = Tensor::zeros(ferrolite::DType::I64, &[1, 3, 224, 224]).unwrap();
    assert!(matches!(
        session.run(&[("x", ints)]),
        Err(Error::Input { .. })
    ));
    // Wrong rank and wrong fixed dim.
    let rank3 = Tensor::zeros(ferrolite::DType::F32, &[3, 224, 224]).unwrap();
    assert!(matches!(
        session.run(&[("x", rank3)]),
        Err(Error::Input { .. })
    ));
    let chans = Tensor::zeros(ferrolite::DType::F32, &[1, 4, 224, 224]).unwrap();
    assert!(matches!(
        session.run(&[("x", chans)]),
        Err(Error::Input { .. })
    ));
    // The good input still works, with batch 2 (a new plan).
    let two = Tensor::zeros(ferrolite::DType::F32, &[2, 3, 224, 224]).unwrap();
    let out = session.run(&[("x", two)]).unwrap();
    assert_eq!(out.0[0].1.shape(), &[2, 1000]);
    let out = session.run(&[("x", good)]).unwrap();
    assert_eq!(out.0[0].1.shape(), &[1, 1000]);
}

/// Every fusion pass on zoo cases that contain its pattern: with the pass, the optimised graph
/// is smaller, and the outputs equal those of the session with the pass disabled.
/// A case's first input set, by name, and the input shapes.
fn case_inputs(case: &Path) -> (Vec<(String, Tensor)>, Vec<Vec<usize>>) {
    let inputs = load_set(&case.join("test_data_set_0"), "input");
    let shapes = inputs.iter().map(|(_, t)| t.shape().to_vec()).collect();
    (inputs, shapes)
}

/// Checks two runs' outputs agree within 1e-4 (absolute plus relative); prints the worst
/// difference of each, labelled `what`.
fn assert_same_outputs(what: &str, a: &[(String, Tensor)], b: &[(String, Tensor)]) {
    assert_eq!(a.len(), b.len());
    for ((n, x), (_, y)) in a.iter().zip(b) {
        assert_eq!(x.shape(), y.shape());
        let mut worst = 0.0f64;
        for (u, v) in x.to_f64_vec().iter().zip(y.to_f64_vec()) {
            let d = (u - v).abs();
            assert!(
                d <= 1e-4 + 1e-4 * v.abs(),
                "{what}: output {n} differs: {u} vs {v}"
            );
            worst = worst.max(d);
        }
        eprintln!("{what}: {n} max abs diff {worst:.2e}");
    }
}

/// The blocked layout keeps every CNN's outputs. Networks whose conv work is mostly in
/// Winograd convolutions (resnet18, ppocrv4_det) stay plain where the ISA prefers Winograd
/// (AVX2, portable); the others, and all of them under AVX-512, are blocked.
#[test]
fn blocked_layout_keeps_zoo_outputs() {
    let Some(dir) = models_dir() else { return };
    let isa = ferrolite::Isa::select(None).unwrap();
    let winograd = ferrolite_cpu::LayoutNchwc { isa }.prefers_winograd();
    eprintln!("isa {isa}: Winograd convolutions stay plain: {winograd}");
    for (name, expect_blocked) in [
        ("squeezenet1_1", true),
        ("mobilenet_v2", true),
        ("mobilenet_v3_small", true),
        ("shufflenet_v2_x1_0", true),
        ("ppocrv4_det", !winograd),
        ("resnet18", !winograd),
    ] {
        let case = dir.join("cases").join(name);
        let (inputs, shapes) = case_inputs(&case);
        let named: Vec<(&str, Tensor)> = inputs
            .iter()
            .map(|(n, t)| (n.as_str(), t.clone()))
            .collect();
        let mut results = Vec::new();
        let mut blocked = Vec::new();
        for disabled in [vec![], vec!["layout-nchwc".to_string()]] {
            let options = SessionOptions {
                threads: 2,
                disabled_passes: disabled,
                ..Default::default()
            };
            let session = Session::from_path(case.join("model.onnx"), options).unwrap();
            let plan = session.prerun(&shapes).unwrap();
            let ops = plan.graph.nodes.iter().map(|n| n.op.name());
            blocked.push(ops.filter(|op| op.starts_with("Nchwc")).count());
            results.push(session.run(&named).unwrap().into_vec());
        }
        assert_eq!(blocked[1], 0);
        assert_eq!(
            blocked[0] > 0,
            expect_blocked,
            "{name}: {} blocked nodes",
            blocked[0]
        );
        assert_same_outputs(&format!("layout-nchwc on {name}"), &results[0], &results[1]);
    }
}

#[test]
fn fusion_passes_keep_zoo_outputs() {
    let Some(dir) = models_dir() else { return };
    let cases = [
        ("fuse-conv-add-bias", "squeezenet1_1"),
        ("fuse-conv-add-bias", "mobilenet_v3_small"),
        ("fuse-activation", "squeezenet1_1"),
        ("fuse-activation", "mobilenet_v2"),
        ("fuse-hard-swish", "mobilenet_v3_small"),
        ("fuse-hard-swish", "ppocr_mobile_v2_cls"),
        ("fuse-gelu", "bert_mini"),
        ("fuse-layer-norm", "bert_mini"),
        ("fuse-matmul-add", "bert_mini"),
        ("fuse-matmul-add", "mobilenet_v3_small"),
        ("fold-transpose", "bert_mini"),
        ("remove-neutral", "bert_mini"),
        ("fold-conv-scale", "ppocrv4_det"),
        ("fuse-scale-shift", "ppocrv4_det"),
    ];
    for (pass, name) in cases {
        let case = dir.join("cases").join(name);
        let (inputs, shapes) = case_inputs(&case);
        let named: Vec<(&str, Tensor)> = inputs
            .iter()
            .map(|(n, t)| (n.as_str(), t.clone()))
            .collect();
        let mut results = Vec::new();
        let mut sizes = Vec::new();
        // fuse-scale-shift would otherwise absorb the zero Add that remove-neutral drops (bert's
        // attention mask after its scale), leaving the node count unchanged either way. The
        // blocked layout adds reorders, which would blur the node counts.
        let also: &[&str] = if pass == "remove-neutral" {
            &["fuse-scale-shift", "layout-nchwc"]
        } else {
            &["layout-nchwc"]
        };
        let base: Vec<String> = also.iter().map(|p| p.to_string()).collect();
        let with_pass = base.clone();
        let mut without = base;
        without.push(pass.to_string());
        for disabled in [with_pass, without] {
            let options = SessionOptions {
                threads: 1,
                disabled_passes: disabled,
                ..Default::default()
            };
            let session = Session::from_path(case.join("model.onnx"), options).unwrap();
            sizes.push(session.prerun(&shapes).unwrap().graph.nodes.len());
            results.push(session.run(&named).unwrap().into_vec());
        }
        assert!(
            sizes[0] < sizes[1],
            "{pass} does not fire on {name}: {} vs {} nodes",
            sizes[0],
            sizes[1]
        );
        assert_same_outputs(&format!("{pass} on {name}"), &results[0], &results[1]);
    }
}
