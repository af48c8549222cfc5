//! PP-OCR on ferrolite: text detection (DB), direction classification and recognition (CTC),
//! from an image to text lines with scores and boxes.
//!
//! The pipeline and its defaults are PaddleOCR's, as RapidOCR packages them, so that the same
//! three ONNX models read the same text here as there:
//!
//! 1. **Detect.** Scale the image so that its shorter side is 736 pixels and each side a
//!    multiple of 32; run the detector; turn its probability map into boxes
//!    ([`detect::boxes_from_map`]).
//! 2. **Crop.** Cut each box out with a perspective warp into an upright rectangle; crops at
//!    least 1.5 times taller than wide are turned a quarter (vertical text).
//! 3. **Classify.** Resize each crop to 48x192 (padded), ask the direction classifier whether it
//!    is upside down, and turn it when the classifier is at least 90% sure.
//! 4. **Recognize.** Resize the crops to height 48, batch them by width (padded to the widest of
//!    the batch), run the recognizer and decode greedily ([`recognize::Dictionary`]). Lines
//!    scoring under 0.5 are dropped.
//!
//! ```no_run
//! use ferrolite_ocr::{Ocr, OcrModels, OcrOptions, raster::Image};
//! let ocr = Ocr::new(&OcrModels::in_dir("models".as_ref()), &OcrOptions::default())?;
//! let reading = ocr.read(&Image::read("models/ocr/receipt.png".as_ref())?)?;
//! for line in &reading.lines {
//!     println!("{} ({:.2})", line.text, line.score);
//! }
//! # Ok::<(), ferrolite_ocr::OcrError>(())
//! ```

pub mod detect;
pub mod geometry;
pub mod raster;
pub mod recognize;

use detect::{DbOptions, TextBox};
use ferrolite::{Session, SessionOptions, Tensor};
use geometry::Quad;
use raster::Image;
use recognize::Dictionary;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What can go wrong reading text.
#[derive(Debug, thiserror::Error)]
pub enum OcrError {
    #[error("cannot read image {path}: {reason}")]
    Image { path: String, reason: String },
    #[error("{model}: {source}")]
    Engine {
        model: String,
        #[source]
        source: ferrolite::Error,
    },
    #[error("{model}: {reason}")]
    Model { model: String, reason: String },
}

/// The three models' files.
#[derive(Clone, Debug)]
pub struct OcrModels {
    pub detector: PathBuf,
    pub classifier: PathBuf,
    pub recognizer: PathBuf,
}

impl OcrModels {
    /// The layout of the repository's `models/` folder: `ppocrv4_det/`, `ppocr_cls/` and
    /// `ppocrv4_rec/`, each holding `model.flm` (ferrolite's optimized format, written by
    /// `ferrolite opt`) or `model.onnx`. The optimized file is taken where both are there: it
    /// loads without decoding protobuf and maps its weights instead of copying them.
    pub fn in_dir(dir: &Path) -> OcrModels {
        let pick = |name: &str| {
            let optimized = dir.join(name).join("model.flm");
            if optimized.is_file() {
                optimized
            } else {
                dir.join(name).join("model.onnx")
            }
        };
        OcrModels {
            detector: pick("ppocrv4_det"),
            classifier: pick("ppocr_cls"),
            recognizer: pick("ppocrv4_rec"),
        }
    }
}

/// The pipeline's settings; the defaults are RapidOCR's.
#[derive(Clone, Debug)]
pub struct OcrOptions {
    /// Kernel threads per model (0: one per core).
    pub threads: usize,
    pub detector: DbOptions,
    /// Classify each crop's direction and turn the upside-down ones.
    pub classify: bool,
    /// The classifier's confidence needed to turn a crop.
    pub turn_threshold: f32,
    /// Lines whose recognition score is lower are dropped.
    pub text_score: f32,
    /// Crops per classifier and recognizer run.
    pub batch: usize,
}

impl Default for OcrOptions {
    fn default() -> Self {
        OcrOptions {
            threads: 0,
            detector: DbOptions::default(),
            classify: true,
            turn_threshold: 0.9,
            text_score: 0.5,
            batch: 6,
        }
    }
}

/// One line of text: what it says, how sure the recognizer is, and its box in the image's
/// pixels (corners clockwise from the top-left of the text).
#[derive(Clone, Debug, PartialEq)]
pub struct TextLine {
    pub text: String,
    pub score: f32,
    pub corners: Quad,
    /// Whether the direction classifier turned the crop (the text was upside down).
    pub turned: bool,
}

/// Where the time of one read went.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// Model runs: detector, classifier, recognizer.
    pub models: [Duration; 3],
    /// Everything else: resizing, normalising, box finding, cropping, decoding.
    pub processing: Duration,
}

impl Timings {
    /// The time in the three models.
    pub fn model_total(&self) -> Duration {
        self.models.iter().sum()
    }

    /// The whole read.
    pub fn total(&self) -> Duration {
        self.model_total() + self.processing
    }
}

/// The result of reading an image.
#[derive(Clone, Debug)]
pub struct Reading {
    pub lines: Vec<TextLine>,
    pub timings: Timings,
}

/// The loaded pipeline: three sessions and the recognizer's dictionary.
pub struct Ocr {
    detector: Session,
    classifier: Session,
    recognizer: Session,
    dictionary: Dictionary,
    options: OcrOptions,
}

/// The classifier's input: 3 x 48 x 192.
const CLS_HEIGHT: usize = 48;
const CLS_WIDTH: usize = 192;
/// The recognizer's input height, and its narrowest padded width.
const REC_HEIGHT: usize = 48;
const REC_MIN_WIDTH: usize = 320;

fn engine(model: &Path) -> impl Fn(ferrolite::Error) -> OcrError + '_ {
    move |source| OcrError::Engine {
        model: model.display().to_string(),
        source,
    }
}

impl Ocr {
    /// Loads the three models. The recognizer's dictionary comes from its `character` metadata.
    pub fn new(models: &OcrModels, options: &OcrOptions) -> Result<Ocr, OcrError> {
        let session_options = SessionOptions::default().with_threads(options.threads);
        let open =
            |path: &Path| Session::from_path(path, session_options.clone()).map_err(engine(path));
        let detector = open(&models.detector)?;
        let classifier = open(&models.classifier)?;
        let recognizer = open(&models.recognizer)?;
        let characters =
            recognizer
                .model()
                .metadata("character")
                .ok_or_else(|| OcrError::Model {
                    model: models.recognizer.display().to_string(),
                    reason: "no character dictionary (metadata 'character')".into(),
                })?;
        let dictionary = Dictionary::from_lines(characters);
        Ok(Ocr {
            detector,
            classifier,
            recognizer,
            dictionary,
            options: options.clone(),
        })
    }

    /// Reads the text in a BGR image.
    pub fn read(&self, image: &Image) -> Result<Reading, OcrError> {
        let mut timings = Timings::default();
        let start = Instant::now();
        // Images past 2000 pixels are read at 2000 (a bigger detector input only costs time);
        // ones under 30 pixels are scaled up to 30. Boxes are scaled back at the end.
        let (raw_w, raw_h) = (image.width as f64, image.height as f64);
        let resized = fit_sides(image, MAX_SIDE, MIN_SIDE);
        let image = resized.as_ref().unwrap_or(image);
        let (ratio_w, ratio_h) = (
            raw_w / image.width.max(1) as f64,
            raw_h / image.height.max(1) as f64,
        );
        let mut boxes = self.detect(image, &mut timings)?;
        let mut crops: Vec<Image> = boxes.iter().map(|b| crop(image, &b.corners)).collect();
        let turned = if self.options.classify {
            self.classify(&mut crops, &mut timings)?
        } else {
            vec![false; crops.len()]
        };
        let reads = self.recognize(&crops, &mut timings)?;
        for b in &mut boxes {
            for p in &mut b.corners {
                *p = [
                    (p[0] * ratio_w).clamp(0.0, raw_w),
                    (p[1] * ratio_h).clamp(0.0, raw_h),
                ];
            }
        }
        let lines = boxes
            .into_iter()
            .zip(reads)
            .zip(turned)
            .filter(|((_, (_, score)), _)| *score >= self.options.text_score)
            .map(|((b, (text, score)), turned)| TextLine {
                text,
                score,
                corners: b.corners,
                turned,
            })
            .collect();
        timings.processing = start.elapsed().saturating_sub(timings.model_total());
        Ok(Reading { lines, timings })
    }

    fn detect(&self, image: &Image, timings: &mut Timings) -> Result<Vec<TextBox>, OcrError> {
        // Very wide or very short images get black bands above and below (RapidOCR's
        // letterbox), so that lines are not squeezed below the network's resolution.
        const MIN_HEIGHT: usize = 30;
        const MAX_RATIO: usize = 8;
        let (w, h) = (image.width, image.height);
        if w == 0 || h == 0 {
            return Ok(Vec::new());
        }
        let pad = if h <= MIN_HEIGHT || w > MAX_RATIO * h {
            ((w / MAX_RATIO).max(MIN_HEIGHT) * 2).abs_diff(h) / 2
        } else {
            0
        };
        let padded;
        let image = if pad > 0 {
            padded = image.pad_vertical(pad, pad);
            &padded
        } else {
            image
        };
        let options = &self.options.detector;
        let (iw, ih) = detect::input_size(image.width, image.height, options.limit_side_len);
        let input = image.resize_linear(iw, ih).to_chw_normalized(iw);
        let prob = self.run(
            &self.detector,
            &[1, 3, ih, iw],
            input,
            &mut timings.models[0],
        )?;
        let prob = prob
            .as_slice::<f32>()
            .map_err(engine(Path::new("detector")))?;
        if prob.len() != iw * ih {
            return Err(OcrError::Model {
                model: "detector".into(),
                reason: format!("a {}-value map for a {iw}x{ih} input", prob.len()),
            });
        }
        let mut boxes = detect::boxes_from_map(prob, iw, ih, image.width, image.height, options);
        for b in &mut boxes {
            for p in &mut b.corners {
                p[1] = (p[1] - pad as f64).clamp(0.0, h as f64);
            }
        }
        Ok(boxes)
    }

    /// Turns the crops the classifier finds upside down; returns which it turned.
    fn classify(&self, crops: &mut [Image], timings: &mut Timings) -> Result<Vec<bool>, OcrError> {
        let mut turned = vec![false; crops.len()];
        for batch in by_width(crops).chunks(self.options.batch.max(1)) {
            let mut input = Vec::with_capacity(batch.len() * 3 * CLS_HEIGHT * CLS_WIDTH);
            for &i in batch {
                input.extend(
                    fit_height(&crops[i], CLS_HEIGHT, CLS_WIDTH).to_chw_normalized(CLS_WIDTH),
                );
            }
            let shape = [batch.len(), 3, CLS_HEIGHT, CLS_WIDTH];
            let probs = self.run(&self.classifier, &shape, input, &mut timings.models[1])?;
            let probs = probs
                .as_slice::<f32>()
                .map_err(engine(Path::new("classifier")))?;
            for (&i, p) in batch.iter().zip(probs.chunks_exact(2)) {
                // Labels: 0 and 180 degrees; the first maximum wins ties, as argmax does.
                if p[1] > p[0] && p[1] > self.options.turn_threshold {
                    crops[i] = crops[i].rotate_180();
                    turned[i] = true;
                }
            }
        }
        Ok(turned)
    }

    fn recognize(
        &self,
        crops: &[Image],
        timings: &mut Timings,
    ) -> Result<Vec<(String, f32)>, OcrError> {
        let mut reads = vec![(String::new(), 0.0); crops.len()];
        for batch in by_width(crops).chunks(self.options.batch.max(1)) {
            // The batch is padded to its widest crop, and never narrower than 320.
            let widest = batch
                .iter()
                .map(|&i| aspect(&crops[i]))
                .fold(REC_MIN_WIDTH as f64 / REC_HEIGHT as f64, f64::max);
            let width = (REC_HEIGHT as f64 * widest) as usize;
            let mut input = Vec::with_capacity(batch.len() * 3 * REC_HEIGHT * width);
            for &i in batch {
                input.extend(fit_height(&crops[i], REC_HEIGHT, width).to_chw_normalized(width));
            }
            let shape = [batch.len(), 3, REC_HEIGHT, width];
            let probs = self.run(&self.recognizer, &shape, input, &mut timings.models[2])?;
            let classes = probs.shape().last().copied().unwrap_or(0);
            if probs.rank() != 3 || classes == 0 || probs.shape()[0] != batch.len() {
                return Err(OcrError::Model {
                    model: "recognizer".into(),
                    reason: format!("output shape {:?} for {} crops", probs.shape(), batch.len()),
                });
            }
            let probs = probs
                .as_slice::<f32>()
                .map_err(engine(Path::new("recognizer")))?;
            let per_crop = probs.len() / batch.len();
            for (&i, p) in batch.iter().zip(probs.chunks_exact(per_crop)) {
                reads[i] = self.dictionary.decode(p, classes);
            }
        }
        Ok(reads)
    }

    /// Runs a one-input, one-output model, adding its time to `time`.
    fn run(
        &self,
        session: &Session,
        shape: &[usize],
        data: Vec<f32>,
        time: &mut Duration,
    ) -> Result<Tensor, OcrError> {
        let name = session.inputs()[0].name.clone();
        let input = Tensor::from_vec(shape, data).map_err(engine(Path::new(&name)))?;
        let start = Instant::now();
        let outputs = session
            .run(&[(&name, input)])
            .map_err(engine(Path::new(&name)))?;
        *time += start.elapsed();
        let (_, out) = outputs
            .into_vec()
            .into_iter()
            .next()
            .ok_or_else(|| OcrError::Model {
                model: name,
                reason: "no output".into(),
            })?;
        Ok(out)
    }
}

/// The image's sides are brought within these bounds before detection.
const MAX_SIDE: usize = 2000;
const MIN_SIDE: usize = 30;

/// The image scaled so that its longer side is at most `max_side`, or else its shorter side at
/// least `min_side`, each side then rounded to a multiple of 32; `None` when it fits already.
fn fit_sides(image: &Image, max_side: usize, min_side: usize) -> Option<Image> {
    let (w, h) = (image.width, image.height);
    let ratio = if w.max(h) > max_side {
        max_side as f64 / w.max(h) as f64
    } else if w.min(h) < min_side && w.min(h) > 0 {
        min_side as f64 / w.min(h) as f64
    } else {
        return None;
    };
    let side =
        |v: usize| (((v as f64 * ratio) as usize) as f64 / 32.0).round_ties_even() as usize * 32;
    let (nw, nh) = (side(w).max(32), side(h).max(32));
    Some(image.resize_linear(nw, nh))
}

fn aspect(image: &Image) -> f64 {
    image.width as f64 / image.height.max(1) as f64
}

/// Crop indices from the narrowest to the widest (relative to height), so that a batch pads
/// little.
fn by_width(crops: &[Image]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..crops.len()).collect();
    order.sort_by(|&a, &b| aspect(&crops[a]).total_cmp(&aspect(&crops[b])));
    order
}

/// Resizes to `height`, keeping the aspect ratio, but no wider than `max_width`.
fn fit_height(image: &Image, height: usize, max_width: usize) -> Image {
    let width = ((height as f64 * aspect(image)).ceil() as usize).clamp(1, max_width);
    image.resize_linear(width, height)
}

/// Cuts the quadrilateral out of the image into an upright rectangle; one at least 1.5 times
/// taller than wide is turned a quarter counter-clockwise, as vertical text reads.
pub fn crop(image: &Image, corners: &Quad) -> Image {
    let dist =
        |a: usize, b: usize| (corners[a][0] - corners[b][0]).hypot(corners[a][1] - corners[b][1]);
    let width = dist(0, 1).max(dist(2, 3)) as usize;
    let height = dist(0, 3).max(dist(1, 2)) as usize;
    let (width, height) = (width.max(1), height.max(1));
    let (w, h) = (width as f64, height as f64);
    let target = [[0.0, 0.0], [w, 0.0], [w, h], [0.0, h]];
    // Output pixels map back to the image through the inverse of corners -> target.
    let to_source = geometry::perspective_transform(&target, corners).unwrap_or([
        1.0,
        0.0,
        corners[0][0],
        0.0,
        1.0,
        corners[0][1],
        0.0,
        0.0,
        1.0,
    ]);
    let out = image.warp_perspective_cubic(&to_source, width, height);
    if height as f64 / width as f64 >= 1.5 {
        out.rotate_90_ccw()
    } else {
        out
    }
}
