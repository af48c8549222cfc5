//! The committed hostile-model corpus (`tests/hostile/`, written by scripts/make-hostile-corpus):
//! each model goes through what the fuzz targets do (load, prerun, run) and must fail with a
//! typed error naming the problem. Also replays `tests/fuzz-regressions/<target>/`, where
//! inputs that once crashed a fuzz target are kept: each must now load or fail, not panic.

use ferrolite::{exercise, Session};
use std::path::{Path, PathBuf};

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
