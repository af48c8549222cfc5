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

/// The fuzz crate's packing (fuzz/src/lib.rs): `[u32 LE program length][program]` then the
/// combined parameters, or files as `[u16 LE name length][name][u32 LE length][bytes]`.
fn replay_paddle(target: &str, data: &[u8]) -> ferrolite::Result<()> {
    let bad = || ferrolite::Error::Other("not a packed Paddle input".into());
    let n = u32::from_le_bytes(data.get(..4).ok_or_else(bad)?.try_into().unwrap()) as usize;
    let program = data.get(4..4 + n).ok_or_else(bad)?;
    let mut rest = &data[4 + n..];
    if target == "paddle_combined" {
        return exercise::paddle_combined(program, rest);
    }
    let mut files = Vec::new();
    while rest.len() >= 2 {
        let name_len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
        let name = String::from_utf8_lossy(rest.get(2..2 + name_len).ok_or_else(bad)?).into_owned();
        let len_at = 2 + name_len;
        let len = u32::from_le_bytes(
            rest.get(len_at..len_at + 4)
                .ok_or_else(bad)?
                .try_into()
                .unwrap(),
        ) as usize;
        let body = rest.get(len_at + 4..len_at + 4 + len).ok_or_else(bad)?;
        files.push((name, body.to_vec()));
        rest = &rest[len_at + 4 + len..];
    }
    exercise::paddle_separate(program, &files)
}
