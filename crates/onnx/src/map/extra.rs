//! Mapping functions for the extra family: attention, losses, RMS normalization, rotary
//! embeddings, grid sampling and image/column rearrangements.

use super::{op, MapError, MapFn, MapResult, NodeCtx};
use ferrolite_core::ops::extra::attention::Attention;

pub(super) const ENTRIES: &[(&str, MapFn)] = &[("Attention", attention)];

fn heads(n: &NodeCtx, name: &str) -> Result<Option<usize>, MapError> {
    match n.int_opt(name)? {
        None => Ok(None),
        Some(h) if h > 0 => Ok(Some(h as usize)),
        Some(h) => Err(MapError::Invalid(format!(
            "{name} must be positive, got {h}"
        ))),
    }
}

fn attention(n: &NodeCtx) -> MapResult {
    let mode = n.int("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        return Err(MapError::Invalid(format!(
            "qk_matmul_output_mode {mode} is not 0-3"
        )));
    }
    op(Attention {
        is_causal: n.int("is_causal", 0)? != 0,
        q_num_heads: heads(n, "q_num_heads")?,
        kv_num_heads: heads(n, "kv_num_heads")?,
        qk_matmul_output_mode: mode,
        scale: n.float_opt("scale")?.map(f64::from),
        softcap: n.float("softcap", 0.0)? as f64,
        softmax_precision: n.int_opt("softmax_precision")?,
        num_outputs: n.n_outputs().max(1),
    })
}
