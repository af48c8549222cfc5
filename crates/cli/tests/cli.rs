//! The `ferrolite` binary as a user runs it: `opt` writes an optimized model that `info`,
//! `run` and `check` take, and printing into a closed pipe ends quietly.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferrolite"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{cmd:?}: {stdout}{stderr}");
    stdout
}

#[test]
fn opt_writes_a_model_the_other_commands_take() {
    let dir = std::env::temp_dir().join(format!("ferrolite-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let flm = dir.join("cls.flm");
    let case = repo().join("models/ppocr_cls");
    let said = ok(bin()
        .arg("opt")
        .arg(case.join("model.onnx"))
        .args(["--shape", "x=1x3x48x192", "-o"])
        .arg(&flm));
    assert!(
        said.contains("optimized for input shapes [[1, 3, 48, 192]]"),
        "{said}"
    );
    let info = ok(bin().arg("info").arg(&flm));
    assert!(info.contains("format   ferrolite"), "{info}");
    assert!(info.contains("prepacked weights"), "{info}");
    // The case's reference input is 1x3x48x192: `check` runs it through the optimized file.
    let checked = ok(bin().arg("check").arg(&case).arg("--model").arg(&flm));
    assert!(checked.contains("1 passed"), "{checked}");
    // Without --shape, a model with symbolic dims is written as it is.
    let said = ok(bin()
        .arg("opt")
        .arg(case.join("model.onnx"))
        .arg("-o")
        .arg(dir.join("symbolic.flm")));
    assert!(said.contains("not optimized"), "{said}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_closed_pipe_ends_the_output_without_a_panic() {
    let mut child = bin()
        .arg("info")
        .arg(repo().join("models/ppocr_cls/model.onnx"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the reading end before the first line is printed.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
