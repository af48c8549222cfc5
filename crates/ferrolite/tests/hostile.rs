//! The committed hostile-model corpus (`tests/hostile/`, written by scripts/make-hostile-corpus):
//! each model goes through what the fuzz targets do (load, prerun, run) and must fail with a
//! typed error naming the problem. Also replays `tests/fuzz-regressions/<target>/`, where
//! inputs that once crashed a fuzz target are kept: each must now load or fail, not panic.

use ferrolite::Session;
use std::path::{Path, PathBuf};

/// The fuzz targets' driver, compiled in here so that the replay runs what they run (not every
/// target has a replay here, hence `dead_code`).
#[allow(dead_code)]
#[path = "../../../fuzz/src/exercise.rs"]
mod exercise;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_hostile_model_fails_with_an_error_naming_the_problem() {
    let dir = repo().join("tests/hostile");
    let expected = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
    let mut cases = 0;
    for line in expected
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (file, text) = line.split_once('\t').expect("file<TAB>text");
        let outcome = Session::from_path(dir.join(file), exercise::options())
            .and_then(|s| exercise::exercise(&s));
        let e = outcome.expect_err(file).to_string();
        assert!(e.contains(text), "{file}: '{e}' does not say '{text}'");
        cases += 1;
    }
    assert!(cases >= 8, "only {cases} cases");
}

#[test]
fn fuzz_regressions_load_or_fail_without_panicking() {
    let dir = repo().join("tests/fuzz-regressions");
    let mut replayed = 0;
    for target in [
        "onnx_model",
        "onnx_structured",
        "tensor_file",
        "paddle_combined",
        "paddle_separate",
    ] {
        let Ok(entries) = std::fs::read_dir(dir.join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            // The outcome may be Ok or Err; a panic fails the test.
            let _ = match target {
                "tensor_file" => exercise::tensor_file(&data).map(|_| ()),
                "paddle_combined" | "paddle_separate" => replay_paddle(target, &data),
                _ => exercise::onnx(&data),
            };
            replayed += 1;
        }
    }
    eprintln!("{replayed} fuzz regression inputs replayed");
}

/// A packed Paddle input, as its fuzz target reads it.
fn replay_paddle(target: &str, data: &[u8]) -> ferrolite::Result<()> {
    use exercise::packed_paddle::{split_combined, split_separate};
    let bad = || ferrolite::Error::Other("not a packed Paddle input".into());
    if target == "paddle_combined" {
        let (program, params) = split_combined(data).ok_or_else(bad)?;
        exercise::paddle_combined(program, params)
    } else {
        let (program, files) = split_separate(data).ok_or_else(bad)?;
        exercise::paddle_separate(program, &files)
    }
}

/// A convolution over an empty plane (a zero dim) that padding gives outputs: every tap falls
/// in the padding, so each output is its channel's bias, through the Relu that follows. The
/// CPU kernels cut planes into chunks and once panicked on these (found by the 10-million
/// `onnx_model` run); no kernel takes them now, and the reference must still answer right.
#[test]
fn a_padded_convolution_over_an_empty_plane_gives_its_bias() {
    let dir = repo().join("tests/fuzz-regressions/onnx_model");
    for file in [
        "empty-plane-depthwise_5x0.onnx",
        "empty-plane-grouped_0x5.onnx",
    ] {
        let model = ferrolite::load_path(&dir.join(file)).unwrap();
        let bias = model
            .graph
            .values
            .iter()
            .find(|v| v.name == "B")
            .and_then(|v| v.constant.clone())
            .expect("the bias");
        let bias = bias.as_slice::<f32>().unwrap().to_vec();
        let session = Session::from_model(model, exercise::options()).unwrap();
        let shape = session.default_shapes().remove(0);
        let x = ferrolite::Tensor::zeros(ferrolite::DType::F32, &shape).unwrap();
        let y = &session.run(&[("x", x)]).unwrap()["y"];
        let (channels, plane) = (y.shape()[1], y.shape()[2] * y.shape()[3]);
        assert_eq!(channels, bias.len(), "{file}");
        assert!(plane > 0, "{file}: padding gives outputs");
        let y = y.as_slice::<f32>().unwrap();
        for (c, b) in bias.iter().enumerate() {
            let want = b.max(0.0);
            assert!(
                y[c * plane..][..plane].iter().all(|&v| v == want),
                "{file}: channel {c} is not {want}"
            );
        }
    }
}

/// An If whose condition the model declares a string tensor (found by `onnx_structured`): the
/// node's inputs are checked against its prototype when it runs, as inference never types it.
#[test]
fn an_if_whose_condition_is_a_string_is_refused_by_name() {
    let file = "tests/fuzz-regressions/onnx_structured/if-sequence-branches-panic";
    let data = std::fs::read(repo().join(file)).unwrap();
    let e = exercise::onnx(&data).unwrap_err().to_string();
    assert!(
        e.contains("If") && e.contains("cond") && e.contains("string"),
        "{e}"
    );
}
