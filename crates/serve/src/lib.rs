//! `ferrolite serve`: a model server speaking the Open Inference Protocol (KServe v2), REST on
//! axum and gRPC on tonic, so that KServe, Triton-style routers and their clients can deploy
//! and scale ferrolite models.
//!
//! - [`model`]: the repository (one folder per model) and each model's pool of sessions behind
//!   a bounded queue.
//! - [`codec`]: tensors from and to the protocol's JSON, binary and gRPC forms.
//! - [`http`] and [`grpc`]: the two faces of the same handlers in this module.
//! - [`metrics`] and [`log`]: Prometheus text at `/metrics`, JSON lines on stderr.
//!
//! docs/serving.md is the user's guide.

pub mod codec;
pub mod error;
pub mod grpc;
pub mod http;
pub mod log;
pub mod metrics;
pub mod model;
pub mod proto;

use error::ServeError;
use ferrolite::Tensor;
use metrics::{Outcome, Protocol};
use model::{PoolOptions, Repository, ServedModel};
use serde_json::json;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The protocol extensions this server implements (server metadata lists them).
pub const EXTENSIONS: [&str; 1] = ["binary_tensor_data"];

/// What `ferrolite serve` was asked for.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub model_repository: PathBuf,
    pub host: IpAddr,
    /// 0 picks a free port (the "listening" log line says which).
    pub http_port: u16,
    pub grpc_port: u16,
    pub pool: PoolOptions,
    /// Largest request body (HTTP) or message (gRPC) accepted, in bytes.
    pub max_body_bytes: usize,
    /// Log every request.
    pub debug_log: bool,
    /// Threads that accept, parse and answer requests (0: one per 8 cores, 1 to 4).
    pub io_threads: usize,
}

/// What the handlers share.
pub struct State {
    pub repository: Repository,
    pub max_body_bytes: usize,
    shutting_down: AtomicBool,
}

impl State {
    pub fn ready(&self) -> bool {
        !self.shutting_down.load(Ordering::Acquire)
    }
}

/// An output the client asked for, and whether it wants it as binary (HTTP only).
pub struct RequestedOutput {
    pub name: String,
    pub binary: bool,
}

/// A decoded inference request, protocol aside.
pub struct Inference {
    pub model: Arc<ServedModel>,
    pub id: String,
    /// Empty: every output.
    pub outputs: Vec<RequestedOutput>,
}

/// Runs a decoded request through its model's queue and keeps the model's metrics.
pub async fn infer(
    request: &Inference,
    inputs: Vec<(String, Tensor)>,
    protocol: Protocol,
    arrived: Instant,
) -> Result<Vec<(String, Tensor)>, ServeError> {
    let model = &request.model;
    let result = run_queued(model, &request.outputs, inputs).await;
    let outcome = match &result {
        Ok(_) => Outcome::Success,
        Err(e) => match e.kind {
            error::ErrorKind::Unavailable => Outcome::Rejected,
            error::ErrorKind::Internal => Outcome::ServerError,
            _ => Outcome::ClientError,
        },
    };
    model.metrics.count(protocol, outcome);
    if outcome == Outcome::Success {
        model.metrics.request_latency.observe(arrived.elapsed());
    }
    let failed = result.is_err() && outcome != Outcome::ClientError;
    if !failed && !log::debug_enabled() {
        return result;
    }
    let mut fields = vec![
        ("model", json!(model.name)),
        ("id", json!(request.id)),
        ("protocol", json!(format!("{protocol:?}").to_lowercase())),
        // Server-side time, from the request's arrival: a refusal shows here how prompt it was.
        ("ms", json!(arrived.elapsed().as_secs_f64() * 1000.0)),
    ];
    match &result {
        Err(e) if failed => {
            fields.push(("error", json!(e.message)));
            log::warn("inference failed", &fields);
        }
        _ => {
            fields.push(("ok", json!(result.is_ok())));
            log::debug("inference", &fields);
        }
    }
    result
}

async fn run_queued(
    model: &ServedModel,
    requested: &[RequestedOutput],
    inputs: Vec<(String, Tensor)>,
) -> Result<Vec<(String, Tensor)>, ServeError> {
    for r in requested {
        if !model.outputs.iter().any(|o| o.name == r.name) {
            let known: Vec<&str> = model.outputs.iter().map(|o| o.name.as_str()).collect();
            return Err(ServeError::bad_request(format!(
                "model '{}' has no output '{}' (outputs: {})",
                model.name,
                r.name,
                known.join(", ")
            )));
        }
    }
    let receiver = model.submit(inputs)?;
    let (result, compute) = receiver.await.map_err(|_| {
        ServeError::new(
            error::ErrorKind::Internal,
            "the session dropped the request",
        )
    })?;
    model.metrics.compute_latency.observe(compute);
    let mut outputs = result?;
    if !requested.is_empty() {
        let mut picked = Vec::with_capacity(requested.len());
        for r in requested {
            if let Some(i) = outputs.iter().position(|(n, _)| *n == r.name) {
                picked.push(outputs.swap_remove(i));
            }
        }
        outputs = picked;
    }
    Ok(outputs)
}

/// Loads the repository and serves it until SIGTERM or SIGINT; then finishes the requests in
/// flight and returns.
pub fn run(options: ServeOptions) -> Result<(), String> {
    log::set_debug(options.debug_log);
    return_large_buffers_to_the_os();
    let repository = Repository::load(&options.model_repository, &options.pool)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(io_threads(options.io_threads))
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let state = Arc::new(State {
        repository,
        max_body_bytes: options.max_body_bytes,
        shutting_down: AtomicBool::new(false),
    });
    let result = runtime.block_on(serve(state.clone(), &options));
    // The servers have drained; the queues are empty. Stop the sessions.
    state.repository.close();
    log::info("stopped", &[]);
    result
}

async fn serve(state: Arc<State>, options: &ServeOptions) -> Result<(), String> {
    let http_listener =
        tokio::net::TcpListener::bind(SocketAddr::new(options.host, options.http_port))
            .await
            .map_err(|e| format!("HTTP port {}: {e}", options.http_port))?;
    let grpc_listener =
        tokio::net::TcpListener::bind(SocketAddr::new(options.host, options.grpc_port))
            .await
            .map_err(|e| format!("gRPC port {}: {e}", options.grpc_port))?;
    let http_addr = http_listener.local_addr().map_err(|e| e.to_string())?;
    let grpc_addr = grpc_listener.local_addr().map_err(|e| e.to_string())?;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let http = tokio::spawn(http::serve(
        state.clone(),
        http_listener,
        stopped(stop_rx.clone()),
    ));
    let grpc = tokio::spawn(grpc::serve(state.clone(), grpc_listener, stopped(stop_rx)));
    log::info(
        "listening",
        &[
            ("http", json!(http_addr.to_string())),
            ("grpc", json!(grpc_addr.to_string())),
            (
                "models",
                json!(state
                    .repository
                    .models
                    .iter()
                    .map(|m| m.name.clone())
                    .collect::<Vec<_>>()),
            ),
        ],
    );

    let signal = shutdown_signal().await;
    log::info(
        "shutting down: finishing the requests in flight",
        &[("signal", json!(signal))],
    );
    state.shutting_down.store(true, Ordering::Release);
    let _ = stop_tx.send(true);
    let http = http.await.map_err(|e| e.to_string())?;
    let grpc = grpc.await.map_err(|e| e.to_string())?;
    http.and(grpc)
}

/// Request-sized buffers (a 224x224 image is 588 KiB, and the message, the tensor and the
/// output each hold one) are allocated on the I/O threads and freed on others. glibc's malloc
/// raises its mmap threshold to the largest block freed, so after the first few requests these
/// buffers come from its arenas, which keep them: measured with mobilenet_v2 and 8 clients, the
/// server's RSS went 104 -> 111 MiB over two identical 10,000-request runs. A fixed threshold
/// of 256 KiB maps each such buffer and unmaps it when freed: 55 MiB, flat, same throughput
/// (docs/serving.md). A user's own `MALLOC_MMAP_THRESHOLD_` wins. The server calls it at
/// start; it is public for its test (`tests/malloc_threshold.rs`).
pub fn return_large_buffers_to_the_os() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: mallopt only sets a malloc parameter; it is called before the runtime and
        // the session threads start, and glibc serialises it with its arenas anyway.
        let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) };
        if set != 1 {
            log::debug("malloc's mmap threshold left as it was", &[]);
        }
    }
}

/// Blocks from this size up are mapped on their own (see `return_large_buffers_to_the_os`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD_BYTES: std::ffi::c_int = 256 * 1024;

/// The I/O threads only parse and copy; the sessions run on their own threads, and on a small
/// machine every thread more takes time from them (measured: two I/O threads instead of one cost
/// mobilenet_v2 about 1% of its throughput on 2 cores, docs/serving.md).
fn io_threads(asked: usize) -> usize {
    if asked > 0 {
        return asked;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 8).clamp(1, 4)
}

/// Waits for SIGTERM (what Kubernetes sends) or SIGINT.
async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "ctrl-c"
    }
}
