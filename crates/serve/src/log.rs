//! Structured logs: one JSON object per line on stderr, with a time, a level, a message and
//! fields, for log collectors to parse.

use serde_json::{Map, Value};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static DEBUG: AtomicBool = AtomicBool::new(false);

/// Turns per-request (debug) lines on or off.
pub fn set_debug(on: bool) {
    DEBUG.store(on, Ordering::Relaxed);
}

pub fn debug_enabled() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

/// Writes one line: `{"ts": seconds since the epoch, "level", "msg", ...fields}`.
pub fn event(level: &str, msg: &str, fields: &[(&str, Value)]) {
    if level == "debug" && !debug_enabled() {
        return;
    }
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut obj = Map::new();
    obj.insert("ts".into(), Value::from((ts * 1000.0).round() / 1000.0));
    obj.insert("level".into(), Value::from(level));
    obj.insert("msg".into(), Value::from(msg));
    for (k, v) in fields {
        obj.insert((*k).to_string(), v.clone());
    }
    let line = Value::Object(obj).to_string();
    // One write per line so that lines from several threads do not interleave.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

pub fn info(msg: &str, fields: &[(&str, Value)]) {
    event("info", msg, fields);
}

pub fn warn(msg: &str, fields: &[(&str, Value)]) {
    event("warn", msg, fields);
}

pub fn debug(msg: &str, fields: &[(&str, Value)]) {
    event("debug", msg, fields);
}
