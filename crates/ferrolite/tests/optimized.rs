//! ferrolite's optimized format (`ferrolite opt`, docs/format.md): every zoo case, Paddle form
//! and int8 case gives bit-identical outputs from its optimized file, loaded through a memory
//! map; damaged or hostile files give typed errors; the committed files of each format version
//! load or are refused by their version.

use ferrolite::core::format::{self, HEADER_LEN};
use ferrolite::onnx::model::read_tensor_file;
use ferrolite::{Session, SessionOptions, Tensor};
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

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn options() -> SessionOptions {
    SessionOptions::default().with_threads(1)
}

fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrolite-optimized-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn inputs_of(case: &Path) -> Vec<(String, Tensor)> {
    (0..)
        .map(|k| case.join(format!("test_data_set_0/input_{k}.pb")))
        .take_while(|f| f.exists())
        .map(|f| read_tensor_file(&f).unwrap())
        .collect()
}

/// Deterministic inputs of the session's default shapes.
fn made_up_inputs(session: &Session) -> Vec<(String, Tensor)> {
    session
        .inputs()
        .iter()
        .zip(session.default_shapes())
        .map(|(info, shape)| {
            let n: usize = shape.iter().product();
            let values: Vec<f64> = (0..n).map(|i| ((i * 7919) % 255) as f64 / 255.0).collect();
            let t = Tensor::from_vec(&shape, values)
                .unwrap()
                .cast(info.dtype)
                .unwrap();
            (info.name.clone(), t)
        })
        .collect()
}

/// Optimizes `source` for `inputs`' shapes, reloads the file through a memory map, and checks
/// that both give the same bytes.
fn check_bit_exact(what: &str, source: &Session, inputs: &[(String, Tensor)]) {
    let shapes: Vec<Vec<usize>> = source
        .inputs()
        .iter()
        .map(|i| {
            let (_, t) = inputs.iter().find(|(n, _)| *n == i.name).unwrap();
            t.shape().to_vec()
        })
        .collect();
    let bytes = source
        .optimized_model_bytes(Some(&shapes))
        .unwrap_or_else(|e| panic!("{what}: opt: {e}"));
    let path = temp_file(&format!("{}.flm", what.replace('/', "_")));
    std::fs::write(&path, &bytes).unwrap();
    let optimized =
        Session::from_path(&path, options()).unwrap_or_else(|e| panic!("{what}: load: {e}"));
    let named: Vec<(&str, Tensor)> = inputs
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    let want = source.run(&named).unwrap();
    let got = optimized
        .run(&named)
        .unwrap_or_else(|e| panic!("{what}: run: {e}"));
    assert_eq!(want.len(), got.len(), "{what}");
    for ((name, w), (_, g)) in want.iter().zip(got.iter()) {
        assert_eq!(w.shape(), g.shape(), "{what}: {name}");
        assert!(w.bytes() == g.bytes(), "{what}: output {name} differs");
    }
    // The weights were used from the map, not copied.
    let prepared = optimized.prerun(&shapes).unwrap();
    let mapped = prepared
        .graph
        .values
        .iter()
        .filter_map(|v| v.constant.as_ref())
        .filter(|t| t.byte_len() >= 4096)
        .all(|t| t.is_shared_view());
    assert!(mapped, "{what}: large weights were copied out of the map");
    // Every prepacked buffer the file stores was taken, none packed again.
    let (used, stored) = prepared.stored_prepacked;
    assert_eq!(
        used, stored,
        "{what}: {used} of {stored} stored prepacked buffers taken"
    );
    std::fs::remove_file(&path).ok();
    eprintln!(
        "{what}: bit-exact, {} bytes, {stored} prepacked buffers taken from the file",
        bytes.len()
    );
}

#[test]
fn every_zoo_case_runs_bit_exact_from_its_optimized_file() {
    let Some(dir) = models_dir() else { return };
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir.join("cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.onnx").exists())
        .collect();
    cases.sort();
    assert!(cases.len() >= 8, "the zoo has {} cases", cases.len());
    for case in &cases {
        let source = Session::from_path(case.join("model.onnx"), options()).unwrap();
        let name = case.file_name().unwrap().to_string_lossy();
        check_bit_exact(&name, &source, &inputs_of(case));
    }
}

#[test]
fn int8_cases_run_bit_exact_from_their_optimized_files() {
    let Some(dir) = models_dir() else { return };
    let quant = dir.join("quant/cases");
    let Ok(entries) = std::fs::read_dir(&quant) else {
        eprintln!("SKIPPED: no int8 cases at {}", quant.display());
        return;
    };
    let mut cases: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    cases.sort();
    for case in cases.iter().filter(|c| c.join("model.onnx").exists()) {
        let source = Session::from_path(case.join("model.onnx"), options()).unwrap();
        let name = format!("quant/{}", case.file_name().unwrap().to_string_lossy());
        check_bit_exact(&name, &source, &inputs_of(case));
    }
}

#[test]
fn paddle_models_combined_and_not_run_bit_exact_from_their_optimized_files() {
    let Some(dir) = models_dir() else { return };
    let mut models: Vec<PathBuf> = std::fs::read_dir(dir.join("paddle"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    models.sort();
    for m in &models {
        let name = m.file_name().unwrap().to_string_lossy().to_string();
        let combined = Session::from_path(m, options()).unwrap();
        let inputs = made_up_inputs(&combined);
        check_bit_exact(&format!("paddle/{name}"), &combined, &inputs);
        let separate = m.join("noncombined");
        if separate.is_dir() {
            let s = Session::from_path(&separate, options()).unwrap();
            check_bit_exact(&format!("paddle/{name}/noncombined"), &s, &inputs);
        }
    }
}

/// The repository's own small model, optimized for the portable kernels (which every machine
/// runs), with its bytes.
fn small_optimized() -> (Session, Vec<u8>) {
    let source = Session::from_path(
        repo().join("models/ppocr_cls/model.onnx"),
        options().with_isa("portable"),
    )
    .unwrap();
    let bytes = source
        .optimized_model_bytes(Some(&[vec![1, 3, 48, 192]]))
        .unwrap();
    (source, bytes)
}

fn load_err(bytes: &[u8]) -> String {
    match Session::from_bytes(bytes, options()).and_then(|s| {
        let shapes = s.default_shapes();
        s.prerun(&shapes).map(|_| ())
    }) {
        Ok(()) => panic!("a damaged file loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn damaged_and_hostile_files_give_typed_errors() {
    let (_, good) = small_optimized();
    assert!(Session::from_bytes(&good, options()).is_ok());
    let u64_at = |at: usize| u64::from_le_bytes(good[at..at + 8].try_into().unwrap()) as usize;
    let (graph_at, graph_len, data_at) = (u64_at(64), u64_at(72), u64_at(88));

    // Truncated anywhere: inside the header, the graph, the data.
    for cut in [
        0,
        7,
        100,
        HEADER_LEN + 10,
        graph_at + graph_len,
        good.len() - 1,
    ] {
        let e = load_err(&good[..cut]);
        assert!(
            e.contains("truncated") || e.contains("outside") || e.contains("empty"),
            "cut at {cut}: {e}"
        );
    }
    // A flipped bit in the graph section.
    let mut flipped = good.clone();
    flipped[graph_at + graph_len / 2] ^= 0x10;
    assert!(load_err(&flipped).contains("checksum"));
    // A newer version.
    let next = format::FORMAT_VERSION + 1;
    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&next.to_le_bytes());
    let e = load_err(&newer);
    assert!(
        e.contains(&format!("format version {next} is not supported")),
        "{e}"
    );
    // Sections pointing outside the file, or a misaligned data section.
    let mut outside = good.clone();
    outside[72..80].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(load_err(&outside).contains("outside the file"));
    let mut far = good.clone();
    far[88..96].copy_from_slice(&((good.len() as u64 + 64).to_le_bytes()));
    assert!(load_err(&far).contains("outside the file"));
    let mut misaligned = good.clone();
    misaligned[88..96].copy_from_slice(&((data_at as u64 - 8).to_le_bytes()));
    assert!(load_err(&misaligned).contains("boundary"));
    // Random damage anywhere in the graph section: an error or a model, never a panic.
    for k in 0..200usize {
        let mut bad = good.clone();
        let at = graph_at + (k * 7919) % graph_len;
        bad[at] = bad[at].wrapping_add(1 + k as u8);
        format::reseal(&mut bad);
        let _ = Session::from_bytes(&bad, options()).and_then(|s| {
            let shapes = s.default_shapes();
            s.prerun(&shapes).map(|_| ())
        });
    }
}

/// `tests/optimized/ppocr_cls-vN.flm`: ppocr_cls optimized for the portable kernels by each
/// format version N (`scripts/make-optimized-fixture`). The current version's must load and
/// match the source; an older one must be read or refused with the version error.
#[test]
fn the_committed_files_of_every_version_load_or_are_refused_by_version() {
    let mut current = false;
    for version in 1..=format::FORMAT_VERSION {
        let path = repo().join(format!("tests/optimized/ppocr_cls-v{version}.flm"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()),
            version
        );
        let file = Session::from_path(&path, options());
        if version != format::FORMAT_VERSION {
            let Err(e) = file else {
                panic!("a file of version {version} must be refused")
            };
            let e = e.to_string();
            assert!(
                e.contains(&format!("format version {version} is not supported")),
                "{e}"
            );
            continue;
        }
        current_version_matches_its_source(file.unwrap());
        current = true;
    }
    assert!(current, "no file of the current version");
}

fn current_version_matches_its_source(file: Session) {
    let (source, _) = small_optimized();
    let x = Tensor::from_vec(
        &[1, 3, 48, 192],
        (0..3 * 48 * 192)
            .map(|i| ((i % 97) as f32) / 97.0)
            .collect(),
    )
    .unwrap();
    let want = source.run(&[("x", x.clone())]).unwrap();
    let got = file.run(&[("x", x)]).unwrap();
    for ((name, w), (_, g)) in want.iter().zip(got.iter()) {
        assert!(w.bytes() == g.bytes(), "output {name} differs");
    }
}

#[test]
fn an_optimized_model_refuses_other_shapes_and_isas() {
    let (_, bytes) = small_optimized();
    let s = Session::from_bytes(&bytes, options()).unwrap();
    assert_eq!(
        s.isa().name(),
        "portable",
        "the file's ISA is the session's"
    );
    let e = s.prerun(&[vec![1, 3, 48, 320]]).unwrap_err().to_string();
    assert!(e.contains("48") || e.contains("shape"), "{e}");
    if ferrolite::Isa::available().len() > 1 {
        let other = ferrolite::Isa::available()
            .into_iter()
            .find(|i| i.name() != "portable")
            .unwrap();
        let s = Session::from_bytes(&bytes, options().with_isa(other.name())).unwrap();
        let e = s.prerun(&[vec![1, 3, 48, 192]]).unwrap_err().to_string();
        assert!(e.contains("optimized for the portable CPU kernels"), "{e}");
    }
}

/// Seeds for the `optimized_model` fuzz target, written to `$FERROLITE_FUZZ_SEEDS/optimized_model`:
/// the repository's classifier for every ISA here (and unoptimized, its dims symbolic), and
/// each ONNX conformance node model under `$FERROLITE_CONFORMANCE_NODES` that loads, up to
/// 1 MiB. scripts/fuzz-corpus runs it. Ignored otherwise.
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let Some(dir) = std::env::var_os("FERROLITE_FUZZ_SEEDS").map(PathBuf::from) else {
        eprintln!("set FERROLITE_FUZZ_SEEDS to a folder");
        return;
    };
    let out = dir.join("optimized_model");
    std::fs::create_dir_all(&out).unwrap();
    let demo = repo().join("models/ppocr_cls/model.onnx");
    let mut written = 0;
    let mut put = |name: String, bytes: Vec<u8>| {
        if bytes.len() <= 1 << 20 {
            std::fs::write(out.join(name), bytes).unwrap();
            written += 1;
        }
    };
    for isa in ferrolite::Isa::available() {
        let s = Session::from_path(&demo, options().with_isa(isa.name())).unwrap();
        put(
            format!("ppocr_cls-{}", isa.name()),
            s.optimized_model_bytes(Some(&[vec![1, 3, 48, 64]]))
                .unwrap(),
        );
    }
    let s = Session::from_path(&demo, options()).unwrap();
    put(
        "ppocr_cls-symbolic".into(),
        s.optimized_model_bytes(None).unwrap(),
    );
    if let Some(nodes) = std::env::var_os("FERROLITE_CONFORMANCE_NODES") {
        let mut cases: Vec<PathBuf> = std::fs::read_dir(nodes)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        cases.sort();
        for case in cases {
            let Ok(s) = Session::from_path(case.join("model.onnx"), options()) else {
                continue;
            };
            if let Ok(bytes) = s.optimized_model_bytes(None) {
                put(
                    case.file_name().unwrap().to_string_lossy().into_owned(),
                    bytes,
                );
            }
        }
    }
    eprintln!("{written} seeds in {}", out.display());
}
