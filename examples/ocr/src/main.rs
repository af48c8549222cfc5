//! `ferrolite-ocr`: reads the text in images with PP-OCR on ferrolite.

use clap::Parser;
use ferrolite_ocr::raster::Image;
use ferrolite_ocr::{Ocr, OcrError, OcrModels, OcrOptions, Reading};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Reads the text in images: PP-OCRv4 detection, direction classification and recognition.
#[derive(Parser)]
#[command(name = "ferrolite-ocr", version)]
struct Args {
    /// PNG or JPEG images.
    #[arg(required = true)]
    images: Vec<PathBuf>,
    /// The folder holding ppocrv4_det/, ppocr_cls/ and ppocrv4_rec/ (default: the repository's
    /// models/).
    #[arg(long)]
    models: Option<PathBuf>,
    /// Kernel threads per model (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Print JSON: per image, its lines (text, score, box) and the time split.
    #[arg(long)]
    json: bool,
    /// Write the image with the boxes drawn (with several images: NAME gets the image's name
    /// appended, as in out-receipt.png).
    #[arg(long, value_name = "OUT.png")]
    draw: Option<PathBuf>,
    /// Skip the direction classifier.
    #[arg(long)]
    no_cls: bool,
    /// Timing: read each image this many times and report medians.
    #[arg(long, default_value_t = 1)]
    iters: usize,
    /// Timing: unmeasured reads before the measured ones.
    #[arg(long, default_value_t = 0)]
    warmup: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn default_models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models")
}

fn run(args: &Args) -> Result<(), OcrError> {
    let models = OcrModels::in_dir(args.models.as_deref().unwrap_or(&default_models()));
    let options = OcrOptions {
        threads: args.threads,
        classify: !args.no_cls,
        ..OcrOptions::default()
    };
    let load_start = Instant::now();
    let ocr = Ocr::new(&models, &options)?;
    let load = load_start.elapsed();
    let mut reports = Vec::new();
    for path in &args.images {
        let decode_start = Instant::now();
        let image = Image::read(path)?;
        let decode = decode_start.elapsed();
        for _ in 0..args.warmup {
            ocr.read(&image)?;
        }
        let mut runs = Vec::with_capacity(args.iters.max(1));
        for _ in 0..args.iters.max(1) {
            runs.push(ocr.read(&image)?);
        }
        let drawn = match &args.draw {
            Some(out) => {
                let out = draw_path(out, path, args.images.len());
                draw(&image, &runs[0], &out)?;
                Some(out)
            }
            None => None,
        };
        if args.json {
            reports.push(json_report(path, &runs, decode, drawn.as_deref()));
        } else {
            print_report(path, &runs, decode, drawn.as_deref());
        }
    }
    if args.json {
        let out = serde_json::json!({
            "load_ms": ms(load),
            "threads": args.threads,
            "images": reports,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        println!("models loaded in {:.1} ms", ms(load));
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The median by total time, so that its split adds up.
fn median(runs: &[Reading]) -> &Reading {
    let mut order: Vec<&Reading> = runs.iter().collect();
    order.sort_by_key(|r| r.timings.total());
    order[order.len() / 2]
}

fn draw_path(out: &Path, image: &Path, images: usize) -> PathBuf {
    if images == 1 {
        return out.to_path_buf();
    }
    let stem = out.file_stem().unwrap_or_default().to_string_lossy();
    let name = image.file_stem().unwrap_or_default().to_string_lossy();
    out.with_file_name(format!("{stem}-{name}.png"))
}

fn draw(image: &Image, reading: &Reading, out: &Path) -> Result<(), OcrError> {
    let mut canvas = image.clone();
    let thickness = (image.width.max(image.height) / 400).max(2);
    for line in &reading.lines {
        // Red boxes; blue for lines that were upside down.
        let color: &[u8] = if line.turned {
            &[255, 0, 0]
        } else {
            &[0, 0, 255]
        };
        canvas.draw_polygon(&line.corners, color, thickness);
    }
    canvas.write_png(out)
}

fn print_report(path: &Path, runs: &[Reading], decode: Duration, drawn: Option<&Path>) {
    let reading = &runs[0];
    println!("{}: {} lines", path.display(), reading.lines.len());
    for line in &reading.lines {
        let corners: Vec<String> = line
            .corners
            .iter()
            .map(|p| format!("{},{}", p[0], p[1]))
            .collect();
        let turned = if line.turned {
            "  (was upside down)"
        } else {
            ""
        };
        println!(
            "  {:<32} {:.3}  [{}]{turned}",
            line.text,
            line.score,
            corners.join(" ")
        );
    }
    let m = median(runs);
    let t = &m.timings;
    let label = if runs.len() > 1 {
        format!("median of {}", runs.len())
    } else {
        "one read".to_string()
    };
    println!(
        "time ({label}): {:.1} ms = models {:.1} ms (detector {:.1}, classifier {:.1}, recognizer {:.1}) + pre/post-processing {:.1} ms; image decoded in {:.1} ms",
        ms(t.total()),
        ms(t.model_total()),
        ms(t.models[0]),
        ms(t.models[1]),
        ms(t.models[2]),
        ms(t.processing),
        ms(decode),
    );
    if runs.len() > 1 {
        let mut totals: Vec<f64> = runs.iter().map(|r| ms(r.timings.total())).collect();
        totals.sort_by(f64::total_cmp);
        println!(
            "whole pipeline: min {:.1} ms, median {:.1} ms, max {:.1} ms",
            totals[0],
            totals[totals.len() / 2],
            totals[totals.len() - 1]
        );
    }
    if let Some(out) = drawn {
        println!("boxes drawn to {}", out.display());
    }
}

fn json_report(
    path: &Path,
    runs: &[Reading],
    decode: Duration,
    drawn: Option<&Path>,
) -> serde_json::Value {
    let lines: Vec<serde_json::Value> = runs[0]
        .lines
        .iter()
        .map(|l| {
            serde_json::json!({
                "text": l.text,
                "score": l.score,
                "box": l.corners,
                "turned": l.turned,
            })
        })
        .collect();
    let t = &median(runs).timings;
    let totals: Vec<f64> = runs.iter().map(|r| ms(r.timings.total())).collect();
    serde_json::json!({
        "image": path.display().to_string(),
        "lines": lines,
        "iters": runs.len(),
        "time_ms": {
            "total": ms(t.total()),
            "detector": ms(t.models[0]),
            "classifier": ms(t.models[1]),
            "recognizer": ms(t.models[2]),
            "processing": ms(t.processing),
            "decode": ms(decode),
            "totals": totals,
        },
        "drawn": drawn.map(|p| p.display().to_string()),
    })
}
