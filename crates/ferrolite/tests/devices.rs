//! Sessions with a device: the fake device (see `ferrolite_core::device::fake`) runs the
//! subgraphs the partition pass gives it and must give the CPU's outputs, also when it fails to
//! compile or to run (the CPU then runs its subgraphs, with a warning).

use ferrolite::core::device::fake::{FakeCounters, FakeDevice, FakeFailure};
use ferrolite::core::passes::partition::Placement;
use ferrolite::{DeviceOption, Session, SessionOptions, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../models/ppocr_cls/model.onnx"
);

/// A deterministic input for the shipped classifier (x: [1, 3, 48, 192]).
fn input() -> Tensor {
    let shape = [1, 3, 48, 192];
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37 + 0.1).sin()).collect();
    Tensor::from_vec(&shape, v).unwrap()
}

fn session(device: DeviceOption) -> Session {
    Session::from_path(
        MODEL,
        SessionOptions::default()
            .with_threads(2)
            .with_device(device),
    )
    .unwrap()
}

/// A session on `device`, with the device's counters.
fn on_fake(device: FakeDevice) -> (Session, Arc<FakeCounters>) {
    let counters = device.counters.clone();
    (session(DeviceOption::Custom(Arc::new(device))), counters)
}

fn run(session: &Session) -> Vec<Tensor> {
    let out = session.run(&[("x", input())]).unwrap();
    out.into_vec().into_iter().map(|(_, t)| t).collect()
}

fn assert_close(got: &[Tensor], want: &[Tensor]) {
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(want) {
        assert_eq!(a.shape(), b.shape());
        let worst = a
            .to_f64_vec()
            .iter()
            .zip(b.to_f64_vec())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(worst <= 1e-4, "max abs diff {worst}");
    }
}

fn load(c: &AtomicUsize) -> usize {
    c.load(Ordering::Relaxed)
}

/// The names of the subgraphs the partition pass made for the session's input shape.
fn subgraphs(session: &Session) -> Vec<String> {
    let prepared = session.prerun(&[vec![1, 3, 48, 192]]).unwrap();
    let report = prepared
        .partition
        .as_ref()
        .expect("a device session reports");
    report.subgraphs.iter().map(|s| s.name.clone()).collect()
}

#[test]
fn fake_device_with_every_op_gives_the_cpu_outputs() {
    let want = run(&session(DeviceOption::Cpu));
    let (s, counters) = on_fake(FakeDevice::default());
    assert_close(&run(&s), &want);
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    // The whole classifier is one subgraph: x in, the class scores out.
    let prepared = s.prerun(&[vec![1, 3, 48, 192]]).unwrap();
    let report = prepared.partition.as_ref().unwrap();
    assert_eq!(report.subgraphs.len(), 1);
    assert!(report
        .nodes
        .iter()
        .all(|n| n.placement == Placement::Device(0)));
    let ops: Vec<&str> = prepared.graph.nodes.iter().map(|n| n.op.name()).collect();
    assert_eq!(ops, ["Subgraph"]);
    let sub = &report.subgraphs[0];
    assert_eq!((sub.copies_in.len(), sub.copies_out.len()), (1, 1));
    assert_eq!(sub.copies_in[0].value, "x");
    assert_eq!(sub.copies_in[0].bytes, 3 * 48 * 192 * 4);
    assert_eq!(load(&counters.compiled), 1);
    assert_eq!(load(&counters.runs), 1);
    assert_eq!(load(&counters.copies), 2);
    assert_close(&run(&s), &want);
    assert_eq!(load(&counters.runs), 2);
}

#[test]
fn failed_compile_falls_back_to_the_cpu_with_a_warning() {
    let want = run(&session(DeviceOption::Cpu));
    let (s, counters) = on_fake(FakeDevice::default().failing(FakeFailure::Compile));
    assert_close(&run(&s), &want);
    let names = subgraphs(&s);
    let warnings = s.warnings();
    assert_eq!(warnings.len(), names.len(), "{warnings:?}");
    for (w, name) in warnings.iter().zip(&names) {
        assert!(w.contains(&format!("subgraph '{name}'")), "{w}");
        assert!(w.contains("could not be compiled for device 'fake'"), "{w}");
        assert!(w.contains("told to fail compiling"), "{w}");
    }
    assert_eq!(load(&counters.compiled), 0);
    assert_eq!(load(&counters.runs), 0);
    assert_close(&run(&s), &want);
}

#[test]
fn failed_run_falls_back_and_later_runs_still_work() {
    let want = run(&session(DeviceOption::Cpu));
    let (s, counters) = on_fake(FakeDevice::default().failing(FakeFailure::Run));
    assert_close(&run(&s), &want);
    let names = subgraphs(&s);
    let warnings = s.warnings();
    assert_eq!(warnings.len(), names.len(), "{warnings:?}");
    for (w, name) in warnings.iter().zip(&names) {
        assert!(
            w.contains(&format!("subgraph '{name}' failed on device 'fake'")),
            "{w}"
        );
        assert!(w.contains("told to fail running"), "{w}");
    }
    // The second run goes straight to the CPU: right outputs, no new warning.
    assert_close(&run(&s), &want);
    assert_eq!(s.warnings().len(), names.len());
    assert_eq!(load(&counters.compiled), names.len());
    assert_eq!(load(&counters.runs), 0);
}

#[test]
fn conv_only_device_gets_several_subgraphs() {
    let want = run(&session(DeviceOption::Cpu));
    let (s, counters) = on_fake(FakeDevice::with_ops(&["Conv"]));
    assert_close(&run(&s), &want);
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    let prepared = s.prerun(&[vec![1, 3, 48, 192]]).unwrap();
    let report = prepared.partition.as_ref().unwrap();
    let n = report.subgraphs.len();
    assert!(n > 1, "{n} subgraph(s)");
    for node in &report.nodes {
        match &node.placement {
            Placement::Device(_) => assert_eq!(node.op, "Conv"),
            Placement::Unsupported(why) => assert!(why.contains(&node.op), "{why}"),
            Placement::TooSmall(_) => assert_eq!(node.op, "Conv"),
            Placement::Dynamic => {}
        }
    }
    assert_eq!(load(&counters.runs), n);
    let copies: usize = report
        .subgraphs
        .iter()
        .map(|g| g.copies_in.len() + g.copies_out.len())
        .sum();
    assert_eq!(load(&counters.copies), copies);
}

#[test]
fn device_options_parse() {
    assert!(matches!(
        "cpu".parse::<DeviceOption>(),
        Ok(DeviceOption::Cpu)
    ));
    assert!(matches!(
        "gpu".parse::<DeviceOption>(),
        Ok(DeviceOption::Gpu)
    ));
    match "fake:ops=Conv+Relu,fail=run".parse::<DeviceOption>() {
        Ok(DeviceOption::Custom(d)) => assert_eq!(d.name(), "fake"),
        other => panic!("{other:?}"),
    }
    assert!("fake:fail=sometimes".parse::<DeviceOption>().is_err());
    assert!("tpu".parse::<DeviceOption>().is_err());
}

/// A zoo model (`$FERROLITE_MODELS`, default `../shared/models`) split into many subgraphs by a
/// device with a few ops gives its reference outputs; skipped when the zoo is missing.
#[test]
fn zoo_model_split_across_devices_gives_the_reference_outputs() {
    use ferrolite::onnx::model::read_tensor_file;
    use std::path::{Path, PathBuf};
    let dir = std::env::var_os("FERROLITE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models"));
    let case = dir.join("cases/mobilenet_v3_small");
    if !case.join("model.onnx").exists() {
        eprintln!(
            "SKIPPED: no mobilenet_v3_small case under {}",
            dir.display()
        );
        return;
    }
    let set = case.join("test_data_set_0");
    let (name, x) = read_tensor_file(&set.join("input_0.pb")).unwrap();
    let (_, want) = read_tensor_file(&set.join("output_0.pb")).unwrap();
    let device = FakeDevice::with_ops(&["Conv", "Relu", "Add", "MatMul"]);
    let counters = device.counters.clone();
    let options = SessionOptions::default()
        .with_threads(2)
        .with_device(DeviceOption::Custom(Arc::new(device)));
    let s = Session::from_path(case.join("model.onnx"), options).unwrap();
    let out = s.run(&[(name.as_str(), x.clone())]).unwrap();
    let got = &out.iter().next().unwrap().1;
    assert_eq!(got.shape(), want.shape());
    for (a, b) in got.to_f64_vec().iter().zip(want.to_f64_vec()) {
        assert!((a - b).abs() <= 1e-4 + 1e-4 * b.abs(), "{a} vs {b}");
    }
    let prepared = s.prerun(&[x.shape().to_vec()]).unwrap();
    let n = prepared.partition.as_ref().unwrap().subgraphs.len();
    assert!(n > 1, "{n} subgraph(s)");
    assert_eq!(load(&counters.runs), n);
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
}

/// The GPU device in a session: the shipped classifier runs on it and matches the CPU. Needs a
/// GPU adapter (lavapipe is enough); without one the session warns and runs on the CPU, which
/// this test reports, and fails when `FERROLITE_REQUIRE_GPU=1` (CI).
#[cfg(feature = "gpu")]
#[test]
fn gpu_device_runs_the_classifier_like_the_cpu() {
    let want = run(&session(DeviceOption::Cpu));
    let s = session(DeviceOption::Gpu);
    if s.device().is_none() {
        let required = std::env::var("FERROLITE_REQUIRE_GPU").as_deref() == Ok("1");
        assert!(
            !required,
            "FERROLITE_REQUIRE_GPU=1 but no GPU: {:?}",
            s.warnings()
        );
        eprintln!("SKIPPED: no GPU ({:?})", s.warnings());
        return;
    }
    let got = run(&s);
    for (a, b) in got.iter().zip(&want) {
        assert_eq!(a.shape(), b.shape());
        for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
            assert!((x - y).abs() <= 1e-3 + 1e-3 * y.abs(), "{x} vs {y}");
        }
    }
    assert!(s.warnings().is_empty(), "{:?}", s.warnings());
    let prepared = s.prerun(&[vec![1, 3, 48, 192]]).unwrap();
    let report = prepared.partition.as_ref().unwrap();
    assert_eq!(report.subgraphs.len(), 1, "{:?}", report.subgraphs);
    assert!(report
        .nodes
        .iter()
        .all(|n| n.placement == Placement::Device(0)));
    // The same plan runs again (buffers are reused between runs), also from several threads
    // at once (runs on one device take turns).
    let again = run(&s);
    assert_eq!(again[0].to_f64_vec(), got[0].to_f64_vec());
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4).map(|_| scope.spawn(|| run(&s))).collect();
        for h in handles {
            assert_eq!(h.join().unwrap()[0].to_f64_vec(), got[0].to_f64_vec());
        }
    });
}

/// Without the `gpu` feature, asking for the GPU is an error that says how to get it.
#[cfg(not(feature = "gpu"))]
#[test]
fn gpu_option_without_the_feature_is_a_clear_error() {
    let options = SessionOptions::default().with_device(DeviceOption::Gpu);
    let Err(err) = Session::from_path(MODEL, options) else {
        panic!("a build without the gpu feature opened a GPU session");
    };
    assert!(err.to_string().contains("`gpu` feature"), "{err}");
}
