//! One `Session` shared by 8 threads, every output checked: concurrent runs share the weights
//! and must not share buffers. The soak runs `FERROLITE_SOAK_RUNS` runs per thread (default
//! 1000) over several input shapes, bit for bit against the same session's answers computed
//! one run at a time.

use ferrolite::onnx::model::read_tensor_file;
use ferrolite::{Session, SessionOptions, Tensor, TensorView};
use std::path::{Path, PathBuf};

fn case_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("FERROLITE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models"));
    for name in ["ppocr_mobile_v2_cls", "mobilenet_v3_small"] {
        let case = dir.join("cases").join(name);
        if case.join("model.onnx").exists() {
            return Some(case);
        }
    }
    eprintln!(
        "SKIPPED: no ppocr_mobile_v2_cls or mobilenet_v3_small case under {} \
         (set FERROLITE_MODELS to the model zoo folder)",
        dir.display()
    );
    None
}

fn close(actual: &Tensor, want: &Tensor) -> Result<(), String> {
    if actual.shape() != want.shape() {
        return Err(format!("shape {:?} vs {:?}", actual.shape(), want.shape()));
    }
    for (i, (x, y)) in actual
        .to_f64_vec()
        .iter()
        .zip(want.to_f64_vec())
        .enumerate()
    {
        if (x - y).abs() > 1e-4 + 1e-4 * y.abs() {
            return Err(format!("element {i}: {x} vs {y}"));
        }
    }
    Ok(())
}

#[test]
fn eight_threads_fifty_runs_each() {
    let Some(case) = case_dir() else { return };
    let set = case.join("test_data_set_0");
    let (in_name, input) = read_tensor_file(&set.join("input_0.pb")).unwrap();
    let (out_name, want) = read_tensor_file(&set.join("output_0.pb")).unwrap();
    let session = Session::from_path(
        case.join("model.onnx"),
        SessionOptions::default().with_threads(2),
    )
    .unwrap();
    // A second input (all zeros) interleaved with the reference one: if two runs shared a
    // buffer, one of them would see the other's data.
    let zeros = Tensor::zeros(input.dtype(), input.shape()).unwrap();
    let want_zeros = session
        .run(&[(in_name.as_str(), zeros.clone())])
        .unwrap()
        .require(&out_name)
        .unwrap()
        .clone();
    let input_f32: Vec<f32> = input.as_slice::<f32>().unwrap().to_vec();
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for t in 0..8 {
            let (session, input, zeros) = (&session, &input, &zeros);
            let (in_name, out_name) = (in_name.as_str(), out_name.as_str());
            let (want, want_zeros, input_f32) = (&want, &want_zeros, &input_f32);
            handles.push(s.spawn(move || {
                for r in 0..50 {
                    let use_ref = (t + r) % 2 == 0;
                    let out = if r % 3 == 0 && use_ref {
                        // The borrowed-slice path.
                        let view = TensorView::from_slice(input.shape(), input_f32).unwrap();
                        session.run_views(&[(in_name, view)]).unwrap()
                    } else if use_ref {
                        session.run_refs(&[(in_name, input)]).unwrap()
                    } else {
                        session.run_refs(&[(in_name, zeros)]).unwrap()
                    };
                    let expect = if use_ref { want } else { want_zeros };
                    close(out.require(out_name).unwrap(), expect)
                        .unwrap_or_else(|e| panic!("thread {t} run {r}: {e}"));
                }
            }));
        }
        for h in handles {
            h.join().expect("a worker thread failed");
        }
    });
}

/// Runs per thread of the soak: `FERROLITE_SOAK_RUNS` (default 1000).
fn soak_runs() -> usize {
    std::env::var("FERROLITE_SOAK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

#[test]
fn soak_eight_threads_mixed_shapes_bit_exact() {
    let Some(case) = case_dir() else { return };
    let session = Session::from_path(
        case.join("model.onnx"),
        SessionOptions::default().with_threads(2),
    )
    .unwrap();
    let input = &session.inputs()[0];
    let name = input.name.clone();
    // Text lines 48 high and 32, 96 or 192 wide when the model takes them (the classifier
    // does), else the reference input's shape.
    let (_, reference) = read_tensor_file(&case.join("test_data_set_0/input_0.pb")).unwrap();
    let free =
        input.check_shape(&[1, 3, 48, 32]).is_ok() && input.check_shape(&[1, 3, 48, 96]).is_ok();
    let shapes: Vec<Vec<usize>> = if free {
        [32, 96, 192].map(|w| vec![1, 3, 48, w]).to_vec()
    } else {
        vec![reference.shape().to_vec()]
    };
    // Two inputs per shape, and each answer from a run on its own.
    let cases: Vec<(Tensor, Vec<u32>)> = shapes
        .iter()
        .flat_map(|shape| {
            (0..2).map(move |k| {
                let n: usize = shape.iter().product();
                let data: Vec<f32> = (0..n)
                    .map(|i| ((i * (5 + k)) % 17) as f32 / 8.0 - 1.0)
                    .collect();
                Tensor::from_vec(shape, data).unwrap()
            })
        })
        .map(|x| {
            let out = session.run(&[(name.as_str(), x.clone())]).unwrap();
            let bits = out
                .iter()
                .next()
                .unwrap()
                .1
                .as_slice::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect();
            (x, bits)
        })
        .collect();
    let runs = soak_runs();
    std::thread::scope(|s| {
        for t in 0..8usize {
            let (session, cases, name) = (&session, &cases, name.as_str());
            s.spawn(move || {
                for r in 0..runs {
                    let (x, want) = &cases[(t * 7 + r) % cases.len()];
                    let out = session.run_refs(&[(name, x)]).unwrap();
                    let got = out.iter().next().unwrap().1.as_slice::<f32>().unwrap();
                    assert!(
                        got.iter().map(|v| v.to_bits()).eq(want.iter().copied()),
                        "thread {t} run {r}: shape {:?} differs from its single run",
                        x.shape()
                    );
                }
            });
        }
    });
}
