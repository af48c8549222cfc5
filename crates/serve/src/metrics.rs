//! Prometheus metrics, per model, in the text exposition format (`GET /metrics`).
//!
//! Plain atomics: a request's bookkeeping is a few relaxed adds, and nothing here allocates
//! per request.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The protocol a request came by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Grpc,
}

const PROTOCOLS: [(Protocol, &str); 2] = [(Protocol::Http, "http"), (Protocol::Grpc, "grpc")];

/// How an inference request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Refused as malformed or not fitting the model (4xx).
    ClientError,
    /// Refused because the queue was full (503 / UNAVAILABLE).
    Rejected,
    /// Failed in the engine (500).
    ServerError,
}

const OUTCOMES: [(Outcome, &str); 4] = [
    (Outcome::Success, "success"),
    (Outcome::ClientError, "client_error"),
    (Outcome::Rejected, "rejected"),
    (Outcome::ServerError, "server_error"),
];

/// Bucket upper bounds in seconds.
const BOUNDS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A latency histogram (cumulative buckets are summed when rendered).
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS.len() + 1],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BOUNDS.iter().position(|&b| s <= b).unwrap_or(BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            cumulative += b.load(Ordering::Relaxed);
            let le = BOUNDS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count());
    }
}

/// One model's counters and histograms.
#[derive(Default)]
pub struct ModelMetrics {
    requests: [[AtomicU64; 4]; 2],
    /// From the request's arrival (the whole request received) to its response (queue wait
    /// included).
    pub request_latency: Histogram,
    /// Time in the engine's run alone.
    pub compute_latency: Histogram,
}

impl ModelMetrics {
    fn counter(&self, protocol: Protocol, outcome: Outcome) -> &AtomicU64 {
        let p = PROTOCOLS
            .iter()
            .position(|(x, _)| *x == protocol)
            .unwrap_or(0);
        let o = OUTCOMES
            .iter()
            .position(|(x, _)| *x == outcome)
            .unwrap_or(0);
        &self.requests[p][o]
    }

    pub fn count(&self, protocol: Protocol, outcome: Outcome) {
        self.counter(protocol, outcome)
            .fetch_add(1, Ordering::Relaxed);
    }

    pub fn requests(&self, protocol: Protocol, outcome: Outcome) -> u64 {
        self.counter(protocol, outcome).load(Ordering::Relaxed)
    }
}

/// What `/metrics` shows of one model.
pub struct ModelSnapshot<'a> {
    pub name: &'a str,
    pub metrics: &'a ModelMetrics,
    pub queue_depth: usize,
    pub queue_capacity: usize,
    pub sessions: usize,
    pub busy_sessions: usize,
}

/// Label values escaped as the exposition format asks.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Picks one histogram of a model.
type HistogramOf = fn(&ModelMetrics) -> &Histogram;
/// Reads one gauge of a model.
type GaugeOf = fn(&ModelSnapshot<'_>) -> usize;

/// The exposition text for every model.
pub fn render(models: &[ModelSnapshot<'_>]) -> String {
    let mut out = String::new();
    let header = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    header(
        &mut out,
        "ferrolite_inference_requests_total",
        "counter",
        "Inference requests by model, protocol and outcome.",
    );
    for m in models {
        for (pi, (_, protocol)) in PROTOCOLS.iter().enumerate() {
            for (oi, (_, outcome)) in OUTCOMES.iter().enumerate() {
                let n = m.metrics.requests[pi][oi].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "ferrolite_inference_requests_total{{model=\"{}\",protocol=\"{protocol}\",outcome=\"{outcome}\"}} {n}",
                    escape(m.name)
                );
            }
        }
    }
    let histograms: [(&str, &str, HistogramOf); 2] = [
        (
            "ferrolite_request_duration_seconds",
            "Time from a request's arrival (all of it received) to its response, queue wait included.",
            |m| &m.request_latency,
        ),
        (
            "ferrolite_compute_duration_seconds",
            "Time a request spent running in the engine.",
            |m| &m.compute_latency,
        ),
    ];
    for (name, help, get) in histograms {
        header(&mut out, name, "histogram", help);
        for m in models {
            get(m.metrics).render(&mut out, name, &format!("model=\"{}\"", escape(m.name)));
        }
    }
    let gauges: [(&str, &str, GaugeOf); 4] = [
        (
            "ferrolite_queue_depth",
            "Requests waiting for a session.",
            |m| m.queue_depth,
        ),
        (
            "ferrolite_queue_capacity",
            "Requests the queue holds before refusing.",
            |m| m.queue_capacity,
        ),
        ("ferrolite_sessions", "Sessions serving the model.", |m| {
            m.sessions
        }),
        (
            "ferrolite_sessions_busy",
            "Sessions running a request now.",
            |m| m.busy_sessions,
        ),
    ];
    for (name, help, get) in gauges {
        header(&mut out, name, "gauge", help);
        for m in models {
            let _ = writeln!(out, "{name}{{model=\"{}\"}} {}", escape(m.name), get(m));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = ModelMetrics::default();
        for ms in [0.2, 3.0, 3.0, 40.0, 20_000.0] {
            m.request_latency
                .observe(Duration::from_secs_f64(ms / 1000.0));
        }
        m.count(Protocol::Grpc, Outcome::Rejected);
        let text = render(&[ModelSnapshot {
            name: "a\"b",
            metrics: &m,
            queue_depth: 3,
            queue_capacity: 8,
            sessions: 2,
            busy_sessions: 1,
        }]);
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        };
        let h = "ferrolite_request_duration_seconds";
        assert_eq!(
            line(&format!("{h}_bucket{{model=\"a\\\"b\",le=\"0.0005\"}}")),
            "1"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{model=\"a\\\"b\",le=\"0.005\"}}")),
            "3"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{model=\"a\\\"b\",le=\"0.05\"}}")),
            "4"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{model=\"a\\\"b\",le=\"+Inf\"}}")),
            "5"
        );
        assert_eq!(line(&format!("{h}_count")), "5");
        let sum: f64 = line(&format!("{h}_sum")).parse().unwrap();
        assert!((sum - 20.0462).abs() < 1e-6, "{sum}");
        assert_eq!(
            line("ferrolite_inference_requests_total{model=\"a\\\"b\",protocol=\"grpc\",outcome=\"rejected\"}"),
            "1"
        );
        assert_eq!(line("ferrolite_queue_depth"), "3");
        assert_eq!(line("ferrolite_sessions_busy"), "1");
    }
}
