//! Mapping functions for recurrent, signal-processing and miscellaneous ops.

use super::{op, MapError, MapFn, MapResult, NodeCtx};
use ferrolite_core::ops::misc::{
    det::Det,
    nms::NonMaxSuppression,
    reverse_sequence::ReverseSequence,
    tfidf::{TfIdfMode, TfIdfVectorizer},
    unique::Unique,
};
use ferrolite_core::ops::seq::dft::{Dft, Stft};
use ferrolite_core::ops::seq::rnn::{Activation, Direction, Gru, Lstm, RecurrentAttrs, Rnn};
use ferrolite_core::ops::seq::window::{MelWeightMatrix, Window, WindowKind};
use ferrolite_core::ops::text::{
    concat::StringConcat,
    normalizer::{CaseChange, StringNormalizer},
    regex_full_match::RegexFullMatch,
    split::StringSplit,
};
use ferrolite_core::DType;

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("RNN", rnn),
    ("GRU", gru),
    ("LSTM", lstm),
    ("NonMaxSuppression", nms),
    ("Unique", unique),
    ("Det", det),
    ("ReverseSequence", reverse_sequence),
    ("TfIdfVectorizer", tfidf_vectorizer),
    ("StringConcat", string_concat),
    ("StringSplit", string_split),
    ("StringNormalizer", string_normalizer),
    ("RegexFullMatch", regex_full_match),
    ("DFT", dft),
    ("STFT", stft),
    ("HannWindow", hann_window),
    ("HammingWindow", hamming_window),
    ("BlackmanWindow", blackman_window),
    ("MelWeightMatrix", mel_weight_matrix),
];

/// The attributes the three recurrent ops share.
fn recurrent_attrs(n: &NodeCtx) -> Result<RecurrentAttrs, MapError> {
    let dir = n.string("direction", "forward")?;
    let direction = Direction::parse(&dir)
        .ok_or_else(|| MapError::Invalid(format!("unknown direction '{dir}'")))?;
    let layout = n.int("layout", 0)?;
    if layout != 0 && layout != 1 {
        return Err(MapError::Invalid(format!(
            "layout must be 0 or 1, got {layout}"
        )));
    }
    let hidden_size = match n.int_opt("hidden_size")? {
        Some(h) if h <= 0 => {
            return Err(MapError::Invalid(format!(
                "hidden_size must be positive, got {h}"
            )))
        }
        h => h.map(|h| h as usize),
    };
    let mut activations = Vec::new();
    if let Some(names) = n.strings("activations")? {
        let alphas = n.floats("activation_alpha")?.unwrap_or_default();
        let betas = n.floats("activation_beta")?.unwrap_or_default();
        let (mut ai, mut bi) = (0, 0);
        for name in &names {
            // The alpha/beta lists are consumed in order by the functions that take them.
            let (a, used_a, used_b) =
                Activation::parse(name, alphas.get(ai).copied(), betas.get(bi).copied())
                    .ok_or_else(|| n.unsupported(format!("activation '{name}'")))?;
            ai += used_a as usize;
            bi += used_b as usize;
            activations.push(a);
        }
    }
    Ok(RecurrentAttrs {
        hidden_size,
        direction,
        batch_first: layout == 1,
        activations,
        clip: n.float_opt("clip")?,
        num_outputs: n.n_outputs().max(1),
    })
}

/// ONNX lists one set of activations for a single direction; bidirectional nodes list two.
/// Models sometimes give one set for both directions; repeat it then.
fn fill_activations(attrs: &mut RecurrentAttrs, per_direction: usize) {
    let dirs = attrs.direction.num_directions();
    if attrs.activations.len() == per_direction && dirs == 2 {
        let a = attrs.activations.clone();
        attrs.activations.extend(a);
    }
}

fn rnn(n: &NodeCtx) -> MapResult {
    let mut attrs = recurrent_attrs(n)?;
    fill_activations(&mut attrs, 1);
    op(Rnn { attrs })
}

fn gru(n: &NodeCtx) -> MapResult {
    let mut attrs = recurrent_attrs(n)?;
    fill_activations(&mut attrs, 2);
    op(Gru {
        attrs,
        linear_before_reset: n.int("linear_before_reset", 0)? != 0,
    })
}

fn lstm(n: &NodeCtx) -> MapResult {
    let mut attrs = recurrent_attrs(n)?;
    fill_activations(&mut attrs, 3);
    op(Lstm {
        attrs,
        input_forget: n.int("input_forget", 0)? != 0,
    })
}

fn nms(n: &NodeCtx) -> MapResult {
    op(NonMaxSuppression {
        center_point_box: n.int("center_point_box", 0)? != 0,
    })
}

fn unique(n: &NodeCtx) -> MapResult {
    op(Unique {
        sorted: n.int("sorted", 1)? != 0,
        axis: n.int_opt("axis")?,
        num_outputs: n.n_outputs().max(1),
    })
}

fn det(_: &NodeCtx) -> MapResult {
    op(Det)
}

fn string_concat(_: &NodeCtx) -> MapResult {
    op(StringConcat)
}

fn regex_full_match(n: &NodeCtx) -> MapResult {
    let pattern = n.string("pattern", "")?;
    op(RegexFullMatch::new(&pattern).map_err(|e| MapError::Invalid(e.to_string()))?)
}

fn string_split(n: &NodeCtx) -> MapResult {
    let maxsplit =
        match n.int_opt("maxsplit")? {
            None => None,
            Some(m) => Some(usize::try_from(m).map_err(|_| {
                MapError::Invalid(format!("maxsplit must not be negative, got {m}"))
            })?),
        };
    op(StringSplit {
        delimiter: n.string("delimiter", "")?,
        maxsplit,
    })
}

fn string_normalizer(n: &NodeCtx) -> MapResult {
    let case_change = match n.string("case_change_action", "NONE")?.as_str() {
        "NONE" => CaseChange::None,
        "LOWER" => CaseChange::Lower,
        "UPPER" => CaseChange::Upper,
        a => {
            return Err(MapError::Invalid(format!(
                "case_change_action must be NONE, LOWER or UPPER, got '{a}'"
            )))
        }
    };
    op(StringNormalizer {
        case_change,
        case_sensitive: n.int("is_case_sensitive", 0)? != 0,
        stopwords: n.strings("stopwords")?.unwrap_or_default(),
    })
}

fn tfidf_vectorizer(n: &NodeCtx) -> MapResult {
    let (pool, vocabulary) = match n.strings("pool_strings")? {
        Some(strings) if !strings.is_empty() => TfIdfVectorizer::string_pool(&strings),
        _ => (n.ints("pool_int64s")?.unwrap_or_default(), Vec::new()),
    };
    let count = |name: &str| -> Result<usize, MapError> {
        usize::try_from(n.int(name, -1)?)
            .map_err(|_| MapError::Invalid(format!("{name} must be given and not negative")))
    };
    let list = |name: &str| -> Result<Vec<usize>, MapError> {
        n.ints(name)?
            .unwrap_or_default()
            .into_iter()
            .map(|v| {
                usize::try_from(v)
                    .map_err(|_| MapError::Invalid(format!("{name} holds the negative {v}")))
            })
            .collect()
    };
    let mode = match n.string("mode", "")?.as_str() {
        "TF" => TfIdfMode::Tf,
        "IDF" => TfIdfMode::Idf,
        "TFIDF" => TfIdfMode::TfIdf,
        m => {
            return Err(MapError::Invalid(format!(
                "mode must be TF, IDF or TFIDF, got '{m}'"
            )))
        }
    };
    op(TfIdfVectorizer {
        min_gram_length: count("min_gram_length")?,
        max_gram_length: count("max_gram_length")?,
        max_skip_count: count("max_skip_count")?,
        mode,
        ngram_counts: list("ngram_counts")?,
        ngram_indexes: list("ngram_indexes")?,
        pool,
        weights: n.floats("weights")?.unwrap_or_default(),
        vocabulary,
    })
}

fn reverse_sequence(n: &NodeCtx) -> MapResult {
    let axis = |name: &str, default: i64| -> Result<usize, MapError> {
        match n.int(name, default)? {
            a @ (0 | 1) => Ok(a as usize),
            a => Err(MapError::Invalid(format!("{name} must be 0 or 1, got {a}"))),
        }
    };
    op(ReverseSequence {
        batch_axis: axis("batch_axis", 1)?,
        time_axis: axis("time_axis", 0)?,
    })
}

fn dft(n: &NodeCtx) -> MapResult {
    // Opset 20 moved the axis to input 2 (default -2); before, it is an attribute (default 1).
    let axis = if n.opset >= 20 { -2 } else { n.int("axis", 1)? };
    op(Dft {
        axis,
        inverse: n.int("inverse", 0)? != 0,
        onesided: n.int("onesided", 0)? != 0,
    })
}

fn stft(n: &NodeCtx) -> MapResult {
    op(Stft {
        onesided: n.int("onesided", 1)? != 0,
    })
}

/// The `output_datatype` attribute (an ONNX element type, float by default).
fn output_dtype(n: &NodeCtx) -> Result<DType, MapError> {
    let t = n.int("output_datatype", 1)?;
    crate::tensor::dtype_of(t as i32).ok_or_else(|| n.unsupported(format!("output_datatype {t}")))
}

fn window(n: &NodeCtx, kind: WindowKind) -> MapResult {
    op(Window {
        kind,
        periodic: n.int("periodic", 1)? != 0,
        dtype: output_dtype(n)?,
    })
}

fn hann_window(n: &NodeCtx) -> MapResult {
    window(n, WindowKind::Hann)
}

fn hamming_window(n: &NodeCtx) -> MapResult {
    window(n, WindowKind::Hamming)
}

fn blackman_window(n: &NodeCtx) -> MapResult {
    window(n, WindowKind::Blackman)
}

fn mel_weight_matrix(n: &NodeCtx) -> MapResult {
    op(MelWeightMatrix {
        dtype: output_dtype(n)?,
    })
}
