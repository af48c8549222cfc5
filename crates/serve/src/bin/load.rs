//! `ferrolite-load`: a bounded load run against a KServe v2 gRPC server, every response checked.
//!
//! ```text
//! ferrolite-load --grpc 127.0.0.1:8001 --model mobilenet_v2 --case CASE_DIR \
//!     --requests 10000 --concurrency 8 [--variants 4] [--timeout-s 600] [--json]
//! ```
//!
//! CASE_DIR is a zoo case (model.onnx, test_data_set_0/input_K.pb and output_K.pb). Requests
//! cycle through `--variants` inputs: the case's own, then copies scaled by 1.1, 1.2, ... Each
//! variant's expected outputs come from a local session of the same model, itself checked
//! against the case's reference outputs, and every response is compared with the outputs of
//! the variant it was sent with: a response lost, swapped or computed from the wrong input
//! counts as a mismatch. Each client has its own connection. The run stops after the fixed
//! count, or fails at the timeout; it exits non-zero on any error or mismatch.

use ferrolite::{DType, Session, SessionOptions, Tensor};
use ferrolite_serve::codec::{datatype_name, to_raw};
use ferrolite_serve::proto::{
    InferInputTensor, ModelInferRequest, ModelInferResponse, MODEL_INFER_PATH,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::codec::ProstCodec;
use tonic::codegen::http::uri::PathAndQuery;

struct Args {
    grpc: String,
    model: String,
    case: PathBuf,
    requests: usize,
    concurrency: usize,
    variants: usize,
    timeout: Duration,
    json: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        grpc: String::new(),
        model: String::new(),
        case: PathBuf::new(),
        requests: 1000,
        concurrency: 8,
        variants: 4,
        timeout: Duration::from_secs(600),
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--json" {
            a.json = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<usize>()
                .map_err(|_| format!("{flag}: '{value}' is not a number"))
        };
        match flag.as_str() {
            "--grpc" => a.grpc = value.clone(),
            "--model" => a.model = value.clone(),
            "--case" => a.case = PathBuf::from(&value),
            "--requests" => a.requests = number()?,
            "--concurrency" => a.concurrency = number()?.max(1),
            "--variants" => a.variants = number()?.max(1),
            "--timeout-s" => a.timeout = Duration::from_secs(number()? as u64),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if a.grpc.is_empty() || a.model.is_empty() || a.case.as_os_str().is_empty() {
        return Err("usage: ferrolite-load --grpc HOST:PORT --model NAME --case CASE_DIR [--requests N] [--concurrency C] [--variants V] [--timeout-s S] [--json]".into());
    }
    Ok(a)
}

/// A request to send and the outputs it must come back with.
struct Variant {
    request: ModelInferRequest,
    expected: Vec<(String, Tensor)>,
}

fn read_pb(path: &Path) -> Result<Tensor, String> {
    ferrolite::onnx::model::read_tensor_file(path)
        .map(|(_, t)| t)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return f64::INFINITY;
    }
    a.to_f64_vec()
        .iter()
        .zip(b.to_f64_vec())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

fn variants(a: &Args) -> Result<Vec<Variant>, String> {
    let session = Session::from_path(a.case.join("model.onnx"), SessionOptions::default())
        .map_err(|e| e.to_string())?;
    let data = a.case.join("test_data_set_0");
    let mut base = Vec::new();
    for (i, info) in session.inputs().iter().enumerate() {
        base.push((
            info.name.clone(),
            read_pb(&data.join(format!("input_{i}.pb")))?,
        ));
    }
    let mut out = Vec::new();
    for v in 0..a.variants {
        let scale = 1.0 + 0.1 * v as f64;
        let inputs: Vec<(String, Tensor)> = base
            .iter()
            .map(|(n, t)| {
                let t = if v > 0 && t.dtype() == DType::F32 {
                    let scaled: Vec<f32> =
                        t.to_f64_vec().iter().map(|x| (x * scale) as f32).collect();
                    Tensor::from_vec(t.shape(), scaled).map_err(|e| e.to_string())?
                } else {
                    t.clone()
                };
                Ok((n.clone(), t))
            })
            .collect::<Result<_, String>>()?;
        let refs: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let expected = session
            .run_refs(&refs)
            .map_err(|e| e.to_string())?
            .into_vec();
        if v == 0 {
            // The local outputs stand for the reference only where they match it.
            for (i, (name, t)) in expected.iter().enumerate() {
                let reference = read_pb(&data.join(format!("output_{i}.pb")))?;
                let d = max_diff(t, &reference);
                if d > 1e-3 {
                    return Err(format!(
                        "local run of {name} is {d} from the case's reference"
                    ));
                }
            }
        }
        let request = ModelInferRequest {
            model_name: a.model.clone(),
            id: format!("variant-{v}"),
            inputs: inputs
                .iter()
                .map(|(n, t)| InferInputTensor {
                    name: n.clone(),
                    datatype: datatype_name(t.dtype()).unwrap_or("").into(),
                    shape: t.shape().iter().map(|&d| d as i64).collect(),
                    ..Default::default()
                })
                .collect(),
            raw_input_contents: inputs.iter().map(|(_, t)| to_raw(t).into()).collect(),
            ..Default::default()
        };
        out.push(Variant { request, expected });
    }
    Ok(out)
}

/// Whether a response carries exactly the expected outputs (within 1e-4: the server and the
/// local session run the same kernels, but possibly with other thread counts).
fn matches(response: &ModelInferResponse, expected: &[(String, Tensor)]) -> bool {
    if response.outputs.len() != expected.len()
        || response.raw_output_contents.len() != expected.len()
    {
        return false;
    }
    response
        .outputs
        .iter()
        .zip(&response.raw_output_contents)
        .all(|(o, raw)| {
            let Some((_, want)) = expected.iter().find(|(n, _)| *n == o.name) else {
                return false;
            };
            let shape: Vec<usize> = o.shape.iter().map(|&d| d.max(0) as usize).collect();
            match Tensor::from_bytes(want.dtype(), &shape, raw) {
                Ok(got) => max_diff(&got, want) <= 1e-4,
                Err(_) => false,
            }
        })
}

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    errors: Vec<String>,
    mismatches: usize,
}

async fn client(
    addr: String,
    variants: Arc<Vec<Variant>>,
    next: Arc<AtomicUsize>,
    total: usize,
    tally: Arc<Mutex<Tally>>,
) -> Result<(), String> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .initial_stream_window_size(1 << 26)
        .initial_connection_window_size(1 << 26)
        .connect()
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(1 << 30);
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= total {
            return Ok(());
        }
        let variant = &variants[i % variants.len()];
        let started = Instant::now();
        grpc.ready().await.map_err(|e| e.to_string())?;
        let reply = grpc
            .unary(
                tonic::Request::new(variant.request.clone()),
                PathAndQuery::from_static(MODEL_INFER_PATH),
                ProstCodec::<ModelInferRequest, ModelInferResponse>::default(),
            )
            .await;
        let elapsed = started.elapsed();
        let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
        match reply {
            Ok(r) => {
                let r = r.into_inner();
                if r.id != variant.request.id || !matches(&r, &variant.expected) {
                    t.mismatches += 1;
                }
                t.latencies.push(elapsed);
            }
            Err(status) => t
                .errors
                .push(format!("{:?}: {}", status.code(), status.message())),
        }
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let variants = match variants(&args) {
        Ok(v) => Arc::new(v),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // One thread: the generator shares the machine with the server and should take little.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let tally = Arc::new(Mutex::new(Tally::default()));
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let outcome: Result<Vec<Result<(), String>>, String> = runtime.block_on(async {
        let tasks: Vec<_> = (0..args.concurrency)
            .map(|_| {
                tokio::spawn(client(
                    args.grpc.clone(),
                    variants.clone(),
                    next.clone(),
                    args.requests,
                    tally.clone(),
                ))
            })
            .collect();
        let all = async {
            let mut results = Vec::new();
            for t in tasks {
                results.push(t.await.unwrap_or_else(|e| Err(e.to_string())));
            }
            results
        };
        tokio::time::timeout(args.timeout, all)
            .await
            .map_err(|_| format!("the run did not finish within {:?}", args.timeout))
    });
    let wall = started.elapsed().as_secs_f64();
    let t = tally.lock().unwrap_or_else(|p| p.into_inner());
    let mut ms: Vec<f64> = t.latencies.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let mut failures: Vec<String> = match &outcome {
        Ok(results) => results.iter().filter_map(|r| r.clone().err()).collect(),
        Err(e) => vec![e.clone()],
    };
    let answered = t.latencies.len() + t.errors.len();
    if answered != args.requests {
        failures.push(format!(
            "{} requests sent, {answered} answered",
            args.requests
        ));
    }
    let ok = t.latencies.len() - t.mismatches;
    let per_s = t.latencies.len() as f64 / wall;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "model": args.model,
                "requests": args.requests,
                "concurrency": args.concurrency,
                "ok": ok,
                "errors": t.errors.len(),
                "mismatches": t.mismatches,
                "seconds": wall,
                "throughput_per_s": per_s,
                "p50_ms": percentile(&ms, 0.5),
                "p90_ms": percentile(&ms, 0.9),
                "p99_ms": percentile(&ms, 0.99),
                "max_ms": ms.last().copied().unwrap_or(f64::NAN),
                "failures": failures,
            })
        );
    } else {
        println!(
            "{} requests, {} clients: {ok} ok, {} errors, {} mismatches in {wall:.2} s",
            args.requests,
            args.concurrency,
            t.errors.len(),
            t.mismatches
        );
        println!(
            "throughput {per_s:.1} inferences/s; latency p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            percentile(&ms, 0.5),
            percentile(&ms, 0.9),
            percentile(&ms, 0.99),
            ms.last().copied().unwrap_or(f64::NAN)
        );
        for f in &failures {
            println!("failure: {f}");
        }
    }
    if let Some(first) = t.errors.first() {
        eprintln!("first error: {first}");
    }
    if t.errors.is_empty() && t.mismatches == 0 && failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
