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
    // `info --ops`: the op tags the file needs (what FERROLITE_OPS takes), sorted, one a line.
    let tags = ok(bin().arg("info").arg("--ops").arg(&flm));
    let tags: Vec<&str> = tags.lines().collect();
    for needed in ["Conv", "Softmax", "Reshape"] {
        assert!(tags.contains(&needed), "{tags:?}");
    }
    assert!(tags.windows(2).all(|w| w[0] < w[1]), "{tags:?}");
    let known = ferrolite::core::ops::codec::OP_TAGS;
    assert!(tags.iter().all(|t| known.contains(t)), "{tags:?}");
    // ... and only of an optimized model, which it says.
    let out = bin()
        .arg("info")
        .arg("--ops")
        .arg(case.join("model.onnx"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("write one with `ferrolite opt` first"),
        "{said}"
    );
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

/// Two processes running the same optimized file share its pages: each one's proportional share
/// of the mapping is about half of what it has resident.
#[cfg(target_os = "linux")]
#[test]
fn two_processes_share_an_optimized_files_pages() {
    let dir = std::env::temp_dir().join(format!("ferrolite-cli-share-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let flm = dir.join("cls.flm");
    ok(bin()
        .arg("opt")
        .arg(repo().join("models/ppocr_cls/model.onnx"))
        .args(["--shape", "x=1x3x48x192", "-o"])
        .arg(&flm));
    let spawn = || {
        bin()
            .arg("bench")
            .arg(&flm)
            .args(["--seconds", "8"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut children = [spawn(), spawn()];
    // (Rss, Pss) in kB of the file's mappings in one process.
    let mapped = |pid: u32| -> (u64, u64) {
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
        let (mut rss, mut pss, mut inside) = (0, 0, false);
        for line in smaps.lines() {
            let field = |name: &str| -> Option<u64> {
                line.strip_prefix(name)?
                    .trim()
                    .trim_end_matches(" kB")
                    .parse()
                    .ok()
            };
            if line.contains(" /") || line.ends_with(']') || line.split_whitespace().count() == 5 {
                inside = line.ends_with(flm.to_str().unwrap());
            } else if inside {
                rss += field("Rss:").unwrap_or(0);
                pss += field("Pss:").unwrap_or(0);
            }
        }
        (rss, pss)
    };
    // Once both have run for a while; the smaller of the two is then all shared pages.
    let mut seen = None;
    for tick in 0..120 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (a, b) = (mapped(children[0].id()), mapped(children[1].id()));
        if a.0 > 0 && b.0 > 0 && tick >= 10 {
            seen = Some(if a.0 <= b.0 { (a, b) } else { (b, a) });
            break;
        }
    }
    let mut ended = Vec::new();
    for c in &mut children {
        ended.push(c.try_wait().ok().flatten());
        c.kill().ok();
        c.wait().ok();
    }
    std::fs::remove_dir_all(&dir).ok();
    let Some(((rss, pss), _)) = seen else {
        panic!("the two processes did not both map the file (exited early: {ended:?})")
    };
    eprintln!("the file in one of two processes: Rss {rss} kB, Pss {pss} kB");
    assert!(
        pss * 10 <= rss * 6,
        "the mapping is not shared: Rss {rss} kB, Pss {pss} kB"
    );
}

/// `bench --sessions N`: N sessions run at once, every run counted.
#[test]
fn bench_sessions_reports_throughput_over_all_sessions() {
    let model = repo().join("models/ppocr_cls/model.onnx");
    let out = ok(bin()
        .args([
            "bench",
            "--sessions",
            "2",
            "--iters",
            "4",
            "--warmup",
            "1",
            "--json",
            "--shape",
            "x=1x3x48x192",
        ])
        .arg(&model));
    let line = out
        .lines()
        .find(|l| l.contains("throughput_per_s"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("\"sessions\": 2"), "{line}");
    // Each of the 2 sessions ran its 4 timed runs.
    assert!(line.contains("\"runs\": 8"), "{line}");
    let per_s: f64 = line
        .split("\"throughput_per_s\": ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(per_s > 0.0, "{line}");
}
