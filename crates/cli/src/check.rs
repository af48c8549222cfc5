//! `check`: run ONNX backend-test style cases and compare with their reference outputs.

use ferrolite::{DType, Error, Result, Session, SessionOptions, Tensor};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// How one output compared.
#[derive(Debug)]
pub struct Comparison {
    pub max_abs: f64,
    /// Over the values whose reference is not 0.
    pub max_rel: f64,
    pub passed: bool,
    pub note: String,
}

/// Compares elementwise: a value passes when |actual - expected| <= atol + rtol * |expected|;
/// NaN matches NaN and equal infinities match.
pub fn compare(actual: &Tensor, expected: &Tensor, atol: f64, rtol: f64) -> Comparison {
    if actual.shape() != expected.shape() {
        return Comparison {
            max_abs: f64::NAN,
            max_rel: f64::NAN,
            passed: false,
            note: format!(
                "shape {:?}, expected {:?}",
                actual.shape(),
                expected.shape()
            ),
        };
    }
    if actual.dtype() != expected.dtype() {
        return Comparison {
            max_abs: f64::NAN,
            max_rel: f64::NAN,
            passed: false,
            note: format!("dtype {}, expected {}", actual.dtype(), expected.dtype()),
        };
    }
    if !actual.dtype().is_bytes() {
        return compare_values(actual, expected, atol, rtol);
    }
    let (a, e) = (actual.to_f64_vec(), expected.to_f64_vec());
    let mut max_abs = 0.0f64;
    let mut max_rel = 0.0f64;
    let mut bad = 0usize;
    for (&x, &y) in a.iter().zip(&e) {
        if x == y || (x.is_nan() && y.is_nan()) {
            continue;
        }
        let d = (x - y).abs();
        let d = if d.is_nan() { f64::INFINITY } else { d };
        max_abs = max_abs.max(d);
        // Where the reference is 0 the relative difference is infinite whatever the error:
        // the absolute one covers those values.
        if y != 0.0 {
            max_rel = max_rel.max(d / y.abs());
        }
        if d > atol + rtol * y.abs() {
            bad += 1;
        }
    }
    Comparison {
        max_abs,
        max_rel,
        passed: bad == 0,
        note: if bad > 0 {
            format!("{bad} of {} values out of tolerance", a.len())
        } else {
            String::new()
        },
    }
}

/// Strings compare exactly; sequences item by item; optionals by presence, then content.
fn compare_values(actual: &Tensor, expected: &Tensor, atol: f64, rtol: f64) -> Comparison {
    let exact = |passed: bool, note: String| Comparison {
        max_abs: if passed { 0.0 } else { f64::NAN },
        max_rel: if passed { 0.0 } else { f64::NAN },
        passed,
        note,
    };
    if let (Ok(a), Ok(e)) = (actual.strings(), expected.strings()) {
        let differ: Vec<_> = a.iter().zip(e).filter(|(x, y)| x != y).collect();
        let note = match differ.first() {
            Some((x, y)) => format!(
                "{} of {} strings differ (first: {x:?}, expected {y:?})",
                differ.len(),
                a.len()
            ),
            None => String::new(),
        };
        return exact(differ.is_empty(), note);
    }
    if let (Ok(a), Ok(e)) = (actual.sequence(), expected.sequence()) {
        if a.len() != e.len() {
            return exact(false, format!("{} items, expected {}", a.len(), e.len()));
        }
        let mut worst = exact(true, String::new());
        for (k, (x, y)) in a.iter().zip(e).enumerate() {
            let c = compare(x, y, atol, rtol);
            worst.max_abs = worst.max_abs.max(c.max_abs);
            worst.max_rel = worst.max_rel.max(c.max_rel);
            if !c.passed && worst.passed {
                worst.passed = false;
                worst.note = format!("item {k}: {}", c.note);
            }
        }
        return worst;
    }
    match (actual.optional(), expected.optional()) {
        (Ok(Some(a)), Ok(Some(e))) => compare(a, e, atol, rtol),
        (Ok(None), Ok(None)) => exact(true, String::new()),
        (Ok(a), Ok(_)) => exact(
            false,
            format!(
                "{}, expected the other",
                if a.is_some() { "a value" } else { "empty" }
            ),
        ),
        _ => exact(false, format!("cannot compare {} values", actual.dtype())),
    }
}

/// Files named `<prefix>_<K>.pb` in a folder, sorted by K.
fn numbered(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>> {
    let io = |e| Error::Io {
        path: dir.display().to_string(),
        source: e,
    };
    let mut files: Vec<(usize, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if let Some(k) = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('_'))
            .and_then(|r| r.strip_suffix(".pb"))
            .and_then(|k| k.parse::<usize>().ok())
        {
            files.push((k, path));
        }
    }
    files.sort();
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// The outcome of one case.
struct CaseResult {
    name: String,
    passed: bool,
    error: String,
    op_types: Vec<String>,
}

fn run_case(
    dir: &Path,
    model: Option<(&Path, Option<&Path>)>,
    atol: f64,
    rtol: f64,
    quiet: bool,
    options: &SessionOptions,
) -> Result<bool> {
    let session = match model {
        Some((m, params)) => crate::open_session(m, params, options.clone())?,
        None => Session::from_path(dir.join("model.onnx"), options.clone())?,
    };
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::Io {
            path: dir.display().to_string(),
            source: e,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("test_data_set_"))
        })
        .collect();
    sets.sort();
    if sets.is_empty() {
        return Err(Error::Other("no test_data_set_* folder".into()));
    }
    let mut all_passed = true;
    for set in &sets {
        let mut inputs: Vec<(String, Tensor)> = Vec::new();
        for (k, file) in numbered(set, "input")?.into_iter().enumerate() {
            // Sequences and optionals are stored as their own messages: read by declared kind.
            let kind = session.inputs().get(k).map_or(DType::F32, |i| i.dtype);
            let (name, t) = ferrolite::onnx::model::read_value_file(&file, kind)?;
            let name = if session.inputs().iter().any(|i| i.name == name) {
                name
            } else {
                session
                    .inputs()
                    .get(k)
                    .map(|i| i.name.clone())
                    .ok_or_else(|| {
                        Error::Other(format!(
                            "{}: more inputs than the model has",
                            file.display()
                        ))
                    })?
            };
            inputs.push((name, t));
        }
        let named: Vec<(&str, Tensor)> = inputs
            .iter()
            .map(|(n, t)| (n.as_str(), t.clone()))
            .collect();
        let outputs = session.run(&named)?;
        let expected_files = numbered(set, "output")?;
        if expected_files.len() != outputs.len() {
            return Err(Error::Other(format!(
                "the model has {} outputs, the case {} expects {}",
                outputs.len(),
                set.display(),
                expected_files.len()
            )));
        }
        for (k, file) in expected_files.iter().enumerate() {
            let kind = session.outputs().get(k).map_or(DType::F32, |o| o.dtype);
            let (pb_name, expected) = ferrolite::onnx::model::read_value_file(file, kind)?;
            // Match by name when the reference names an output, else by position.
            let (name, actual) = match outputs.get(&pb_name) {
                Some(t) => (pb_name.clone(), t),
                None => {
                    let (n, t) = &outputs.0[k];
                    (n.clone(), t)
                }
            };
            let c = compare(actual, &expected, atol, rtol);
            all_passed &= c.passed;
            if !quiet {
                println!(
                    "  {} output {name}: max abs diff {:.3e}, max rel diff {:.3e}  {}{}",
                    set.file_name().and_then(|n| n.to_str()).unwrap_or_default(),
                    c.max_abs,
                    c.max_rel,
                    if c.passed { "PASS" } else { "FAIL" },
                    if c.note.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", c.note)
                    }
                );
            }
        }
    }
    Ok(all_passed)
}

pub fn check_cases(
    cases: &[PathBuf],
    model: Option<(&Path, Option<&Path>)>,
    atol: f64,
    rtol: f64,
    quiet: bool,
    json: Option<&Path>,
    options: &SessionOptions,
) -> Result<ExitCode> {
    let mut results = Vec::with_capacity(cases.len());
    for dir in cases {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("case")
            .to_string();
        if !quiet {
            println!("{name}");
        }
        // A bug in one op must not hide the results of the other cases. Nothing outlives a
        // case's run but the options, which the run only reads.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_case(dir, model, atol, rtol, quiet, options)
        }));
        let (passed, error) = match outcome {
            Ok(Ok(p)) => (
                p,
                if p {
                    String::new()
                } else {
                    "outputs differ".to_string()
                },
            ),
            Ok(Err(e)) => (false, e.to_string()),
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                (false, format!("panic: {msg}"))
            }
        };
        let op_types = std::fs::read(dir.join("model.onnx"))
            .ok()
            .and_then(|b| ferrolite::onnx::model::op_types(&b).ok())
            .unwrap_or_default();
        println!(
            "{} {name}{}",
            if passed { "PASS" } else { "FAIL" },
            if error.is_empty() {
                String::new()
            } else {
                format!(": {error}")
            }
        );
        results.push(CaseResult {
            name,
            passed,
            error,
            op_types,
        });
    }
    let passed = results.iter().filter(|r| r.passed).count();
    println!("{} passed, {} failed", passed, results.len() - passed);
    if let Some(path) = json {
        std::fs::write(path, to_json(&results)).map_err(|e| Error::Io {
            path: path.display().to_string(),
            source: e,
        })?;
    }
    Ok(if passed == results.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub(crate) fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn to_json(results: &[CaseResult]) -> String {
    let items: Vec<String> = results
        .iter()
        .map(|r| {
            let ops: Vec<String> = r.op_types.iter().map(|o| json_str(o)).collect();
            format!(
                "{{\"case\": {}, \"passed\": {}, \"error\": {}, \"ops\": [{}]}}",
                json_str(&r.name),
                r.passed,
                json_str(&r.error),
                ops.join(", ")
            )
        })
        .collect();
    format!("[\n{}\n]\n", items.join(",\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_rule() {
        let e = Tensor::from_vec(&[3], vec![1.0f32, 100.0, f32::NAN]).unwrap();
        let a = Tensor::from_vec(&[3], vec![1.00005f32, 100.005, f32::NAN]).unwrap();
        assert!(compare(&a, &e, 1e-4, 1e-4).passed);
        let b = Tensor::from_vec(&[3], vec![1.001f32, 100.0, f32::NAN]).unwrap();
        let c = compare(&b, &e, 1e-4, 1e-4);
        assert!(!c.passed);
        assert!((c.max_abs - 1e-3).abs() < 1e-6);
        let s = Tensor::from_vec(&[1, 3], vec![1.0f32, 100.0, f32::NAN]).unwrap();
        assert!(!compare(&s, &e, 1e-4, 1e-4).passed);
        let i = Tensor::from_vec(&[3], vec![1i64, 100, 0]).unwrap();
        assert!(!compare(&i, &e, 1e-4, 1e-4).passed);
    }

    #[test]
    fn relative_difference_skips_zero_references() {
        let e = Tensor::from_vec(&[3], vec![0.0f32, 2.0, -4.0]).unwrap();
        let a = Tensor::from_vec(&[3], vec![0.5f32, 2.5, -4.0]).unwrap();
        let c = compare(&a, &e, 1.0, 0.0);
        assert!(c.passed);
        assert_eq!((c.max_abs, c.max_rel), (0.5, 0.25));
    }
}
