//! `bench`: latency statistics, peak memory and a per-node profile of one model.

use crate::check::json_str;
use crate::inputs::collect_inputs;
use crate::stats::Stats;
use ferrolite::core::plan::{MemoryStats, Plan};
use ferrolite::session::node_flops;
use ferrolite::{Error, Prepared, Result, Session, SessionOptions, Tensor};
use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// What `bench` was asked to do.
pub struct BenchArgs<'a> {
    pub model: &'a Path,
    pub inputs: &'a [String],
    pub shapes: &'a [String],
    pub seed: u64,
    pub warmup: usize,
    pub iters: Option<usize>,
    pub seconds: Option<f64>,
    pub json: bool,
    pub profile: bool,
    pub serve: bool,
    /// Sessions running at once, each on its own thread (throughput mode when given).
    pub sessions: Option<usize>,
    pub options: SessionOptions,
}

/// When neither `--iters` nor `--seconds` is given.
const DEFAULT_SECONDS: f64 = 3.0;

/// Accumulated per-step times of profiled runs.
struct Profile {
    sums: Vec<Duration>,
    runs: u32,
}

pub fn bench(a: &BenchArgs) -> Result<()> {
    if let Some(sessions) = a.sessions {
        return throughput(a, sessions.max(1));
    }
    // What the process holds before the model: its code, libraries and runtime, which the
    // session's own memory is measured above.
    let before = rss_bytes("VmRSS:");
    let t0 = Instant::now();
    let session = Session::from_path(a.model, a.options.clone())?;
    let load = t0.elapsed();
    let inputs = collect_inputs(&session, a.inputs, a.shapes, a.seed)?;
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(_, t, _)| t.shape().to_vec()).collect();
    let t1 = Instant::now();
    let prepared = session.prerun(&shapes)?;
    let prerun = t1.elapsed();
    let named: Vec<(&str, Tensor)> = inputs
        .iter()
        .map(|(n, t, _)| (n.as_str(), t.clone()))
        .collect();
    let memory = prepared.plan.memory_stats(session.threads());
    let flops = prepared.flops();

    let t2 = Instant::now();
    session.run(&named)?;
    let first = t2.elapsed();
    for _ in 1..a.warmup {
        session.run(&named)?;
    }
    if a.serve {
        return serve(&session, &named, (load, prerun), before, &memory, flops);
    }

    let bar = std::io::stderr().is_terminal() && !a.json;
    let (iters, seconds) = match (a.iters, a.seconds) {
        (Some(n), _) => (Some(n.max(1)), None),
        (None, Some(s)) => (None, Some(s)),
        (None, None) => (None, Some(DEFAULT_SECONDS)),
    };
    let mut times = Vec::new();
    let mut profile = Profile {
        sums: vec![Duration::ZERO; prepared.plan.steps.len()],
        runs: 0,
    };
    let start = Instant::now();
    let mut last_draw: Option<Instant> = None;
    loop {
        let t = Instant::now();
        if a.profile {
            let (_, steps, _) = session.run_profiled(&named)?;
            times.push(t.elapsed());
            for (s, d) in profile.sums.iter_mut().zip(steps) {
                *s += d;
            }
            profile.runs += 1;
        } else {
            session.run(&named)?;
            times.push(t.elapsed());
        }
        let elapsed = start.elapsed().as_secs_f64();
        let done = match (iters, seconds) {
            (Some(n), _) => times.len() >= n,
            (None, Some(s)) => elapsed >= s,
            _ => true,
        };
        if bar && (done || last_draw.is_none_or(|l| l.elapsed() >= Duration::from_millis(100))) {
            let fraction = match (iters, seconds) {
                (Some(n), _) => times.len() as f64 / n as f64,
                (None, Some(s)) => elapsed / s,
                _ => 1.0,
            };
            draw_bar(fraction, times.len(), times.last().copied());
            last_draw = Some(Instant::now());
        }
        if done {
            break;
        }
    }
    if bar {
        eprint!("\r\x1b[K");
    }
    let stats = Stats::of(&times).ok_or_else(|| Error::Other("no timed runs".into()))?;
    let rss = peak_rss_bytes();
    let report = Report {
        before,
        model: a.model,
        threads: session.threads(),
        isa: session.isa().name(),
        precision: session.precision(),
        load,
        prerun,
        first,
        stats,
        rss,
        memory,
        flops,
        profile: a.profile.then(|| profile_rows(&prepared, &profile)),
    };
    if a.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

fn draw_bar(fraction: f64, runs: usize, last: Option<Duration>) {
    const WIDTH: usize = 30;
    let filled = ((fraction.clamp(0.0, 1.0)) * WIDTH as f64).round() as usize;
    let last = last.map_or(String::new(), |d| {
        format!("  last {:.3} ms", d.as_secs_f64() * 1e3)
    });
    eprint!(
        "\r[{}{}] {:>3.0}%  {runs} runs{last}\x1b[K",
        "#".repeat(filled),
        " ".repeat(WIDTH - filled),
        fraction.clamp(0.0, 1.0) * 100.0
    );
    let _ = std::io::stderr().flush();
}

/// Peak resident set size of this process (VmHWM), where the OS tells it.
pub fn peak_rss_bytes() -> Option<u64> {
    rss_bytes("VmHWM:")
}

/// A size line of `/proc/self/status` (`VmHWM:` the peak resident set, `VmRSS:` the
/// current one), in bytes, on Linux.
fn rss_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line
        .trim_start_matches(field)
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

fn mb(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

/// The memory line of `info` and `bench`.
pub fn memory_text(m: &MemoryStats) -> String {
    let mut s = format!(
        "intermediates {} tensors, {} in all, {} peak live (by lifetime), {} planned arena \
         ({} shared buffers)",
        m.intermediates,
        mb(m.intermediate_bytes),
        mb(m.peak_live_bytes),
        mb(m.arena_bytes),
        m.arena_buffers
    );
    if m.unknown > 0 {
        let _ = write!(s, "; {} sized only at run time", m.unknown);
    }
    if !m.scratch.is_none() {
        let _ = write!(
            s,
            "; kernels' scratch {} ({} shared + {} per thread, {} threads)",
            mb(m.scratch.bytes(m.threads)),
            mb(m.scratch.shared as u64),
            mb(m.scratch.per_thread as u64),
            m.threads
        );
    }
    s
}

fn memory_json(m: &MemoryStats) -> String {
    format!(
        "{{\"intermediates\":{},\"intermediate_bytes\":{},\"peak_live_bytes\":{},\"arena_bytes\":{},\"arena_buffers\":{},\"unknown\":{},\"scratch_bytes\":{},\"scratch_shared_bytes\":{},\"scratch_per_thread_bytes\":{},\"threads\":{}}}",
        m.intermediates,
        m.intermediate_bytes,
        m.peak_live_bytes,
        m.arena_bytes,
        m.arena_buffers,
        m.unknown,
        m.scratch.bytes(m.threads),
        m.scratch.shared,
        m.scratch.per_thread,
        m.threads
    )
}

/// One line of the per-node or per-op-type profile.
struct Row {
    name: String,
    op: String,
    kernel: String,
    count: usize,
    /// Mean time per run.
    time: Duration,
    flops: u64,
}

impl Row {
    fn gflops(&self) -> Option<f64> {
        (self.flops > 0 && !self.time.is_zero())
            .then(|| self.flops as f64 / self.time.as_secs_f64() / 1e9)
    }
}

struct ProfileRows {
    nodes: Vec<Row>,
    op_types: Vec<Row>,
    total: Duration,
}

fn profile_rows(prepared: &Prepared, profile: &Profile) -> ProfileRows {
    let plan: &Plan = &prepared.plan;
    let runs = profile.runs.max(1);
    let means: Vec<Duration> = profile.sums.iter().map(|d| *d / runs).collect();
    let nodes: Vec<Row> = plan
        .steps
        .iter()
        .zip(&means)
        .map(|(s, &t)| Row {
            name: s.node.name.clone(),
            op: s.node.op.name().to_string(),
            kernel: s.kernel.name().to_string(),
            count: 1,
            time: t,
            flops: node_flops(&prepared.graph, &s.node),
        })
        .collect();
    let op_types = plan
        .time_by_op_type(&means)
        .into_iter()
        .map(|o| Row {
            flops: nodes
                .iter()
                .filter(|n| n.op == o.op_type)
                .map(|n| n.flops)
                .sum(),
            name: o.op_type.clone(),
            op: o.op_type,
            kernel: String::new(),
            count: o.count,
            time: o.time,
        })
        .collect();
    ProfileRows {
        total: means.iter().sum(),
        nodes,
        op_types,
    }
}

struct Report<'a> {
    model: &'a Path,
    threads: usize,
    /// The CPU kernels' instruction set.
    isa: &'static str,
    precision: ferrolite::Precision,
    load: Duration,
    prerun: Duration,
    first: Duration,
    stats: Stats,
    /// The resident set before loading the model, and the peak.
    before: Option<u64>,
    rss: Option<u64>,
    memory: MemoryStats,
    flops: u64,
    profile: Option<ProfileRows>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn share(t: Duration, total: Duration) -> f64 {
    if total.is_zero() {
        0.0
    } else {
        t.as_secs_f64() / total.as_secs_f64() * 100.0
    }
}

impl Report<'_> {
    fn text(&self) -> String {
        let s = &self.stats;
        let mut o = String::new();
        let _ = writeln!(o, "model    {}", self.model.display());
        let _ = writeln!(
            o,
            "setup    load {:.3} ms  prerun {:.3} ms  first run {:.3} ms  ({} thread(s), isa {}, precision {})",
            ms(self.load),
            ms(self.prerun),
            ms(self.first),
            self.threads,
            self.isa,
            self.precision
        );
        let _ = writeln!(
            o,
            "latency  min {:.3}  median {:.3}  mean {:.3}  p90 {:.3}  max {:.3} ms  ({} runs)",
            s.min, s.median, s.mean, s.p90, s.max, s.n
        );
        if self.flops > 0 && s.median > 0.0 {
            let _ = writeln!(
                o,
                "compute  {:.3} GFLOP per run, {:.1} GFLOP/s at the median",
                self.flops as f64 / 1e9,
                self.flops as f64 / (s.median / 1e3) / 1e9
            );
        }
        let _ = writeln!(
            o,
            "memory   peak RSS {}",
            match (self.rss, self.before) {
                (Some(peak), Some(before)) => format!(
                    "{} ({} above the {} the process held before loading the model)",
                    mb(peak),
                    mb(peak.saturating_sub(before)),
                    mb(before)
                ),
                (Some(peak), None) => mb(peak),
                _ => "n/a (read from /proc/self/status, only on Linux)".to_string(),
            }
        );
        let _ = writeln!(o, "         {}", memory_text(&self.memory));
        if let Some(p) = &self.profile {
            let _ = writeln!(
                o,
                "\nprofile  mean time per node over {} runs (steps sum to {:.3} ms)",
                s.n,
                ms(p.total)
            );
            let _ = writeln!(
                o,
                "{:>4}  {:<32} {:<20} {:<16} {:>10} {:>6} {:>8}",
                "#", "node", "op", "kernel", "ms", "%", "GFLOP/s"
            );
            for (i, r) in p.nodes.iter().enumerate() {
                let _ = writeln!(
                    o,
                    "{:>4}  {:<32} {:<20} {:<16} {:>10.4} {:>6.2} {:>8}",
                    i,
                    clip(&r.name, 32),
                    clip(&r.op, 20),
                    clip(&r.kernel, 16),
                    ms(r.time),
                    share(r.time, p.total),
                    r.gflops().map_or(String::new(), |g| format!("{g:.1}"))
                );
            }
            let _ = writeln!(o, "\nby op type");
            let _ = writeln!(
                o,
                "{:<24} {:>6} {:>10} {:>6} {:>8}",
                "op", "nodes", "ms", "%", "GFLOP/s"
            );
            for r in &p.op_types {
                let _ = writeln!(
                    o,
                    "{:<24} {:>6} {:>10.4} {:>6.2} {:>8}",
                    clip(&r.op, 24),
                    r.count,
                    ms(r.time),
                    share(r.time, p.total),
                    r.gflops().map_or(String::new(), |g| format!("{g:.1}"))
                );
            }
        }
        o
    }

    fn json(&self) -> String {
        let s = &self.stats;
        let mut o = format!(
            "{{\"model\":{},\"threads\":{},\"isa\":{},\"precision\":{},\"load_ms\":{:.6},\"prerun_ms\":{:.6},\
             \"first_run_ms\":{:.6},\"runs\":{},\"latency_ms\":{{\"min\":{:.6},\"median\":{:.6},\
             \"mean\":{:.6},\"p90\":{:.6},\"max\":{:.6}}},\"peak_rss_bytes\":{},\"baseline_rss_bytes\":{},\
             \"flops\":{},\"memory\":{}",
            json_str(&self.model.display().to_string()),
            self.threads,
            json_str(self.isa),
            json_str(&self.precision.to_string()),
            ms(self.load),
            ms(self.prerun),
            ms(self.first),
            s.n,
            s.min,
            s.median,
            s.mean,
            s.p90,
            s.max,
            self.rss.map_or("null".to_string(), |b| b.to_string()),
            self.before.map_or("null".to_string(), |b| b.to_string()),
            self.flops,
            memory_json(&self.memory)
        );
        if let Some(p) = &self.profile {
            let rows = |rows: &[Row], nodes: bool| -> String {
                let items: Vec<String> = rows
                    .iter()
                    .map(|r| {
                        let head = if nodes {
                            format!(
                                "\"name\":{},\"op\":{},\"kernel\":{}",
                                json_str(&r.name),
                                json_str(&r.op),
                                json_str(&r.kernel)
                            )
                        } else {
                            format!("\"op\":{},\"nodes\":{}", json_str(&r.op), r.count)
                        };
                        format!(
                            "{{{head},\"ms\":{:.6},\"share\":{:.6},\"flops\":{},\"gflops_per_s\":{}}}",
                            ms(r.time),
                            share(r.time, p.total) / 100.0,
                            r.flops,
                            r.gflops().map_or("null".to_string(), |g| format!("{g:.3}"))
                        )
                    })
                    .collect();
                format!("[{}]", items.join(","))
            };
            let _ = write!(
                o,
                ",\"profile\":{{\"total_ms\":{:.6},\"nodes\":{},\"op_types\":{}}}",
                ms(p.total),
                rows(&p.nodes, true),
                rows(&p.op_types, false)
            );
        }
        o.push('}');
        o
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let head: String = s.chars().take(n.saturating_sub(1)).collect();
        format!("{head}…")
    }
}

/// A persistent benchmark process for scripts (hidden `--serve`): prints one JSON line when
/// ready (with the resident set before loading), then answers each stdin line `run K` with
/// the K run times, `rss` with the peak RSS;
/// `quit` or the end of input stops it. Timing stays inside the process, so the pipe costs
/// nothing that is measured.
fn serve(
    session: &Session,
    named: &[(&str, Tensor)],
    (load, prerun): (Duration, Duration),
    before: Option<u64>,
    memory: &MemoryStats,
    flops: u64,
) -> Result<()> {
    let out = std::io::stdout();
    let say = |line: String| -> Result<()> {
        let mut o = out.lock();
        writeln!(o, "{line}")
            .and_then(|_| o.flush())
            .map_err(|e| Error::Other(format!("stdout: {e}")))
    };
    say(format!(
        "{{\"ready\":true,\"threads\":{},\"load_ms\":{:.6},\"prerun_ms\":{:.6},\"flops\":{},\
         \"baseline_rss_bytes\":{},\"memory\":{}}}",
        session.threads(),
        ms(load),
        ms(prerun),
        flops,
        before.map_or("null".to_string(), |b| b.to_string()),
        memory_json(memory)
    ))?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| Error::Other(format!("stdin: {e}")))?;
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("run"), k) => {
                let k: usize = k.and_then(|k| k.parse().ok()).unwrap_or(1);
                let mut times = Vec::with_capacity(k);
                for _ in 0..k {
                    let t = Instant::now();
                    session.run(named)?;
                    times.push(format!("{:.6}", ms(t.elapsed())));
                }
                say(format!("{{\"times_ms\":[{}]}}", times.join(",")))?;
            }
            (Some("rss"), _) => say(format!(
                "{{\"peak_rss_bytes\":{}}}",
                peak_rss_bytes().map_or("null".to_string(), |b| b.to_string())
            ))?,
            (Some("quit"), _) => break,
            (None, _) => {}
            (Some(other), _) => say(format!(
                "{{\"error\":{}}}",
                json_str(&format!("unknown command '{other}'"))
            ))?,
        }
    }
    Ok(())
}

/// `--sessions N`: N sessions of the model, each run back to back on its own thread for the
/// same time (or number of runs each); reports inferences per second over all of them. This is
/// what a server with N sessions per model can at best sustain (`ferrolite serve
/// --sessions N`).
fn throughput(a: &BenchArgs, sessions: usize) -> Result<()> {
    let mut options = a.options.clone();
    if sessions > 1 {
        // Pinned, every session's threads would share the first CPUs.
        options = options.with_thread_pinning(false);
    }
    let model = ferrolite::load_path(a.model)?;
    let list = (0..sessions)
        .map(|_| Session::from_model(model.clone(), options.clone()))
        .collect::<Result<Vec<_>>>()?;
    let inputs = collect_inputs(&list[0], a.inputs, a.shapes, a.seed)?;
    let named: Vec<(&str, Tensor)> = inputs
        .iter()
        .map(|(n, t, _)| (n.as_str(), t.clone()))
        .collect();
    for s in &list {
        for _ in 0..a.warmup.max(1) {
            s.run(&named)?;
        }
    }
    let seconds = match (a.iters, a.seconds) {
        (Some(_), _) => None,
        (None, s) => Some(s.unwrap_or(DEFAULT_SECONDS)),
    };
    let start = Instant::now();
    let per_session: Vec<Result<Vec<Duration>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = list
            .iter()
            .map(|s| {
                let named = &named;
                scope.spawn(move || {
                    let mut times = Vec::new();
                    loop {
                        let t = Instant::now();
                        s.run(named)?;
                        times.push(t.elapsed());
                        let done = match (a.iters, seconds) {
                            (Some(n), _) => times.len() >= n.max(1),
                            (None, Some(limit)) => start.elapsed().as_secs_f64() >= limit,
                            _ => true,
                        };
                        if done {
                            return Ok(times);
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Other("a run panicked".into())))
            })
            .collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let mut times = Vec::new();
    for t in per_session {
        times.extend(t?);
    }
    let stats = Stats::of(&times).ok_or_else(|| Error::Other("no timed runs".into()))?;
    let per_s = times.len() as f64 / wall;
    let threads = list[0].threads();
    if a.json {
        println!(
            "{{\"model\": {}, \"sessions\": {sessions}, \"threads\": {threads}, \"runs\": {}, \"seconds\": {wall:.3}, \"throughput_per_s\": {per_s:.2}, \"median_ms\": {:.3}, \"p90_ms\": {:.3}, \"isa\": {}}}",
            json_str(&a.model.display().to_string()),
            times.len(),
            stats.median,
            stats.p90,
            json_str(&list[0].cpu_description()),
        );
    } else {
        println!("model       {}", a.model.display());
        println!("backend     {}", list[0].cpu_description());
        println!("sessions    {sessions} x {threads} thread(s), run at once");
        println!(
            "throughput  {per_s:.1} inferences/s ({} runs in {wall:.2} s)",
            times.len()
        );
        println!(
            "latency     median {:.3} ms, p90 {:.3} ms, max {:.3} ms",
            stats.median, stats.p90, stats.max
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            let b = peak_rss_bytes().unwrap();
            assert!(b > 1 << 20, "{b}");
        }
    }

    #[test]
    fn rows_report_gflops_only_with_flops() {
        let mut r = Row {
            name: "n".into(),
            op: "Conv".into(),
            kernel: "k".into(),
            count: 1,
            time: Duration::from_millis(2),
            flops: 4_000_000_000,
        };
        assert!((r.gflops().unwrap() - 2000.0).abs() < 1e-6);
        r.flops = 0;
        assert!(r.gflops().is_none());
        assert_eq!(
            share(Duration::from_millis(1), Duration::from_millis(4)),
            25.0
        );
        assert_eq!(clip("abcdef", 4), "abc…");
    }
}
