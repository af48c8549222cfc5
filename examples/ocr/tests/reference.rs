//! The pipeline on the three images of `$FERROLITE_MODELS/ocr` (default `../shared/models`)
//! against RapidOCR's reads of them: at least 95% of the characters in order, and every box
//! corner within 4 pixels. The models are the repository's own (`models/`), in ferrolite's
//! optimized format; the test below keeps them equal to what `ferrolite opt` writes from the
//! zoo's ONNX files.

use ferrolite_ocr::raster::Image;
use ferrolite_ocr::{Ocr, OcrModels, OcrOptions, Reading};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models")
}

fn shared_models() -> PathBuf {
    std::env::var_os("FERROLITE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models"))
}

fn shared_ocr() -> Option<PathBuf> {
    let dir = shared_models().join("ocr");
    if dir.join("receipt.json").exists() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: OCR images not found at {} (set FERROLITE_MODELS to the model zoo folder)",
            dir.display()
        );
        None
    }
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[test]
fn edit_distance_counts_edits() {
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(edit_distance("Apples lkg", "Apples lkg"), 0);
}

struct RefLine {
    text: String,
    corners: Vec<[f64; 2]>,
}

fn reference(dir: &Path, name: &str) -> Vec<RefLine> {
    let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["rapidocr"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| RefLine {
            text: l["text"].as_str().unwrap().to_string(),
            corners: l["box"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| [p[0].as_f64().unwrap(), p[1].as_f64().unwrap()])
                .collect(),
        })
        .collect()
}

/// Checks a reading against RapidOCR's; returns (character match, largest corner distance).
fn compare(name: &str, reading: &Reading, want: &[RefLine]) -> (f64, f64) {
    let got_text: String = reading.lines.iter().map(|l| l.text.as_str()).collect();
    let want_text: String = want.iter().map(|l| l.text.as_str()).collect();
    let matched =
        1.0 - edit_distance(&got_text, &want_text) as f64 / want_text.chars().count() as f64;
    let got: Vec<&str> = reading.lines.iter().map(|l| l.text.as_str()).collect();
    let expected: Vec<&str> = want.iter().map(|l| l.text.as_str()).collect();
    assert!(
        matched >= 0.95,
        "{name}: {:.1}% of characters match\n got {got:?}\nwant {expected:?}",
        matched * 100.0
    );
    assert_eq!(
        reading.lines.len(),
        want.len(),
        "{name}: lines\n got {got:?}\nwant {expected:?}"
    );
    let mut worst = 0f64;
    for (line, want) in reading.lines.iter().zip(want) {
        for (p, q) in line.corners.iter().zip(&want.corners) {
            let d = (p[0] - q[0]).abs().max((p[1] - q[1]).abs());
            assert!(
                d <= 4.0,
                "{name}: '{}' corner {p:?}, RapidOCR's {q:?}",
                line.text
            );
            worst = worst.max(d);
        }
    }
    (matched, worst)
}

#[test]
fn reads_the_three_images_as_rapidocr_does() {
    let Some(dir) = shared_ocr() else { return };
    let ocr = Ocr::new(&OcrModels::in_dir(&repo_models()), &OcrOptions::default()).unwrap();
    for name in ["receipt", "sign", "rotated"] {
        let image = Image::read(&dir.join(format!("{name}.png"))).unwrap();
        let reading = ocr.read(&image).unwrap();
        let (matched, worst) = compare(name, &reading, &reference(&dir, name));
        eprintln!(
            "{name}: {} lines, {:.1}% of characters, corners within {worst} px",
            reading.lines.len(),
            matched * 100.0
        );
    }
}

#[test]
fn the_upside_down_image_is_turned_line_by_line() {
    let Some(dir) = shared_ocr() else { return };
    let ocr = Ocr::new(&OcrModels::in_dir(&repo_models()), &OcrOptions::default()).unwrap();
    let image = Image::read(&dir.join("rotated.png")).unwrap();
    let with = ocr.read(&image).unwrap();
    assert!(
        with.lines.iter().filter(|l| l.turned).count() >= 4,
        "{:?}",
        with.lines
    );
    // Without the classifier, the lines read upside down and differ from RapidOCR's.
    let options = OcrOptions {
        classify: false,
        ..OcrOptions::default()
    };
    let without = Ocr::new(&OcrModels::in_dir(&repo_models()), &options)
        .unwrap()
        .read(&image)
        .unwrap();
    let text = |r: &Reading| r.lines.iter().map(|l| l.text.clone()).collect::<String>();
    assert_ne!(text(&with), text(&without));
    assert!(without.lines.iter().all(|l| !l.turned));
}

#[test]
fn the_cli_prints_text_json_and_draws_the_boxes() {
    let image = repo_models().join("ocr/receipt.png");
    let out_dir = std::env::temp_dir().join(format!("ferrolite-ocr-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let drawn = out_dir.join("boxes.png");
    let run = Command::new(env!("CARGO_BIN_EXE_ferrolite-ocr"))
        .arg(&image)
        .arg("--json")
        .arg("--draw")
        .arg(&drawn)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let lines = json["images"][0]["lines"].as_array().unwrap();
    let texts: Vec<&str> = lines.iter().map(|l| l["text"].as_str().unwrap()).collect();
    assert!(
        texts.contains(&"TOTAL") && texts.contains(&"7.88"),
        "{texts:?}"
    );
    let t = &json["images"][0]["time_ms"];
    let parts =
        ["detector", "classifier", "recognizer", "processing"].map(|k| t[k].as_f64().unwrap());
    assert!((parts.iter().sum::<f64>() - t["total"].as_f64().unwrap()).abs() < 0.01);
    // The drawing is the image with red boxes: same size, and red where the first box's
    // top-left corner is.
    let original = Image::read(&image).unwrap();
    let boxes = Image::read(&drawn).unwrap();
    assert_eq!(
        (boxes.width, boxes.height),
        (original.width, original.height)
    );
    let corner = &lines[0]["box"][0];
    let (x, y) = (
        corner[0].as_f64().unwrap() as usize,
        corner[1].as_f64().unwrap() as usize,
    );
    let at = (y * boxes.width + x) * 3;
    assert_eq!(&boxes.data[at..at + 3], &[0, 0, 255]);
    assert_ne!(boxes.data, original.data);
    std::fs::remove_dir_all(&out_dir).ok();
}

#[test]
fn bad_images_and_missing_models_are_errors_that_name_the_file() {
    let junk = std::env::temp_dir().join(format!("ferrolite-ocr-junk-{}.png", std::process::id()));
    std::fs::write(&junk, b"\x89PNG\r\n\x1a\nnot really").unwrap();
    let e = Image::read(&junk).unwrap_err().to_string();
    assert!(e.contains("ferrolite-ocr-junk"), "{e}");
    std::fs::remove_file(&junk).ok();
    assert!(Image::decode(&[]).is_err());
    let missing = OcrModels::in_dir(Path::new("/nonexistent/models"));
    let e = Ocr::new(&missing, &OcrOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("/nonexistent/models/ppocrv4_det/model.onnx"),
        "{e}"
    );
    // A model without a dictionary cannot be the recognizer.
    let models = OcrModels {
        recognizer: repo_models().join("ppocr_cls/model.onnx"),
        ..OcrModels::in_dir(&repo_models())
    };
    let e = Ocr::new(&models, &OcrOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("character"), "{e}");
}

#[test]
fn tiny_blank_and_wide_images_read_without_error() {
    let ocr = Ocr::new(&OcrModels::in_dir(&repo_models()), &OcrOptions::default()).unwrap();
    for (w, h) in [(1, 1), (5, 40), (400, 20), (64, 64)] {
        let mut image = Image::new(w, h, 3);
        image.data.fill(255);
        let reading = ocr.read(&image).unwrap();
        assert!(reading.lines.is_empty(), "{w}x{h}: {:?}", reading.lines);
    }
    let empty = Image::new(0, 0, 3);
    assert!(ocr.read(&empty).unwrap().lines.is_empty());
}

#[test]
fn the_shipped_models_are_the_optimized_files_opt_writes_from_the_onnx_ones() {
    let shipped = OcrModels::in_dir(&repo_models());
    for path in [&shipped.detector, &shipped.classifier, &shipped.recognizer] {
        assert_eq!(path.extension().unwrap(), "flm", "{}", path.display());
    }
    let cases = shared_models().join("cases");
    let onnx = OcrModels {
        detector: cases.join("ppocrv4_det/model.onnx"),
        classifier: repo_models().join("ppocr_cls/model.onnx"),
        recognizer: cases.join("ppocrv4_rec/model.onnx"),
    };
    if !onnx.detector.exists() || !onnx.recognizer.exists() {
        eprintln!(
            "SKIPPED: the zoo's PP-OCR ONNX models are not at {} (set FERROLITE_MODELS)",
            cases.display()
        );
        return;
    }
    for (source, optimized) in [
        (&onnx.detector, &shipped.detector),
        (&onnx.classifier, &shipped.classifier),
        (&onnx.recognizer, &shipped.recognizer),
    ] {
        let written = ferrolite::Session::from_path(source, ferrolite::SessionOptions::default())
            .unwrap()
            .optimized_model_bytes(None)
            .unwrap();
        let committed = std::fs::read(optimized).unwrap();
        assert!(
            written == committed,
            "{} is not what `ferrolite opt {}` writes now: run scripts/ocr-models",
            optimized.display(),
            source.display()
        );
    }
    // And the pipeline reads the same from either form.
    let image = Image::read(&repo_models().join("ocr/receipt.png")).unwrap();
    let from_onnx = Ocr::new(&onnx, &OcrOptions::default())
        .unwrap()
        .read(&image)
        .unwrap();
    let from_flm = Ocr::new(&shipped, &OcrOptions::default())
        .unwrap()
        .read(&image)
        .unwrap();
    assert!(!from_flm.lines.is_empty());
    assert_eq!(from_onnx.lines, from_flm.lines);
}
