//! The `ferrolite` command-line tool: run, bench, check, info, dump, explain, opt, serve.

mod bench;
mod check;
mod explain;
mod inputs;
mod report;
mod stats;

use clap::{Parser, Subcommand};
use ferrolite::{Session, SessionOptions};
use std::path::{Path, PathBuf};

/// Opens a model: ONNX, or Paddle (folder or program file), with an explicit Paddle params
/// file or folder when given.
pub fn open_session(
    model: &Path,
    params: Option<&Path>,
    options: SessionOptions,
) -> ferrolite::Result<Session> {
    match params {
        Some(p) => Session::from_paddle(model, Some(p), options),
        None => Session::from_path(model, options),
    }
}
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ferrolite",
    version,
    about = "Neural-network inference for edge devices"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options shared by the commands that build a session.
#[derive(clap::Args, Clone, Debug)]
struct EngineArgs {
    /// Worker threads (0 = one per core).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Skip a graph pass by name (repeatable).
    #[arg(long = "disable-pass", value_name = "NAME")]
    disable_pass: Vec<String>,
    /// Use only the reference implementations (slow; for debugging kernels).
    #[arg(long)]
    reference: bool,
    /// Let the OS move worker threads between CPUs (by default each is pinned to its own).
    #[arg(long)]
    no_pin: bool,
    /// Where to run: cpu, gpu (subgraphs it supports; the CPU runs the rest), or the test
    /// suite's fake device (fake, fake:ops=Conv+Relu, fake:fail=compile|run).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Subgraphs smaller than this many ops (counted by work) stay on the CPU.
    #[arg(long, value_name = "N")]
    min_subgraph_ops: Option<u64>,
    /// The CPU kernels' instruction set: portable, avx2 or avx512 on x86-64, portable, neon or
    /// neon-dot on aarch64 (default: FERROLITE_ISA, else the best this CPU has).
    #[arg(long, value_name = "ISA")]
    isa: Option<String>,
    /// Refuse plans needing more memory than this (weights, arena and prepacked weights):
    /// bytes, or with a K, M or G suffix (powers of 1024), e.g. 512M.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_memory: Option<u64>,
    /// fast, or accurate: kernels within a few ulps of the direct sum (no Winograd F(4x4,
    /// 3x3)), for deep networks whose outputs must stay close to a reference.
    #[arg(long, default_value = "fast")]
    precision: ferrolite::Precision,
}

/// A size in bytes, optionally with a K, M or G suffix (powers of 1024).
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, scale) = match t.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&t[..i], 1u64 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&t[..i], 1 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("'{text}' is not a size (bytes, or a number with K, M or G)"))
}

impl EngineArgs {
    fn options(&self) -> ferrolite::Result<SessionOptions> {
        let mut partition = ferrolite::PartitionOptions::default();
        if let Some(n) = self.min_subgraph_ops {
            partition.min_ops = n;
        }
        Ok(SessionOptions {
            threads: self.threads,
            disabled_passes: self.disable_pass.clone(),
            optimized_kernels: !self.reference,
            pin_threads: !self.no_pin,
            device: self.device.parse()?,
            partition,
            isa: self.isa.clone(),
            max_memory: self.max_memory,
            precision: self.precision,
        })
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run a model on inputs from files (.npy or ONNX TensorProto .pb) or on seeded random data.
    Run {
        /// ONNX file, Paddle model folder, or Paddle program file (.pdmodel / __model__).
        model: PathBuf,
        /// Paddle parameters: combined params file, or folder of per-variable files.
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// NAME=FILE (repeatable); a bare FILE is the first input without one.
        #[arg(long = "input", value_name = "NAME=FILE")]
        input: Vec<String>,
        /// NAME=1x3x224x224: shape for a random input (repeatable).
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shape: Vec<String>,
        /// Write each output as OUTPUT_NAME.npy into this folder.
        #[arg(long)]
        output_dir: Option<PathBuf>,
        /// Seed for random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Timed runs after the first (the median is reported).
        #[arg(long, default_value_t = 0)]
        repeat: usize,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Measure latency (min / median / mean / p90), setup times and memory; --profile times
    /// every node and op type.
    Bench {
        model: PathBuf,
        /// NAME=FILE (repeatable); a bare FILE is the first input without one.
        #[arg(long = "input", value_name = "NAME=FILE")]
        input: Vec<String>,
        /// NAME=1x3x224x224: shape for a random input (repeatable).
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shape: Vec<String>,
        /// Seed for random inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Untimed runs first (at least one, reported as "first run").
        #[arg(long, default_value_t = 5)]
        warmup: usize,
        /// Timed runs.
        #[arg(long, conflicts_with = "seconds")]
        iters: Option<usize>,
        /// Run for this long instead of a number of runs (default 3 s).
        #[arg(long)]
        seconds: Option<f64>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Time every node and op type (mean per run).
        #[arg(long)]
        profile: bool,
        /// Persistent process for scripts: answers `run K` lines on stdin with JSON.
        #[arg(long, hide = true)]
        serve: bool,
        /// Throughput: N sessions run at once, each on its own thread; prints inferences/s
        /// (what `serve --sessions N` can at best sustain).
        #[arg(long, value_name = "N", conflicts_with_all = ["profile", "serve"])]
        sessions: Option<usize>,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Run ONNX backend-test style cases (model.onnx + test_data_set_*/{input,output}_K.pb) and
    /// compare with the reference outputs.
    Check {
        #[arg(required = true)]
        cases: Vec<PathBuf>,
        /// Run this model (ONNX or Paddle) on the cases' data instead of their model.onnx;
        /// inputs match by name, outputs by name or else by position.
        #[arg(long, value_name = "MODEL")]
        model: Option<PathBuf>,
        /// Paddle parameters for --model.
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// Absolute tolerance.
        #[arg(long, default_value_t = 1e-4)]
        atol: f64,
        /// Relative tolerance: |actual - expected| <= atol + rtol * |expected|.
        #[arg(long, default_value_t = 1e-4)]
        rtol: f64,
        /// Print only one line per case.
        #[arg(long)]
        quiet: bool,
        /// Write per-case results as JSON to this file.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Inputs, outputs, op histogram, parameter count and FLOPs of a model.
    Info {
        model: PathBuf,
        /// Paddle parameters: combined params file, or folder of per-variable files.
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// NAME=DIMS for the FLOPs estimate (symbolic dims default to 1).
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shape: Vec<String>,
        /// Print only the op kinds an optimized model needs, one per line: the list that
        /// FERROLITE_OPS takes to tailor a light build to it (docs/format.md).
        #[arg(long)]
        ops: bool,
    },
    /// Print the graph as text or Graphviz DOT.
    Dump {
        model: PathBuf,
        /// Paddle parameters: combined params file, or folder of per-variable files.
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// Graphviz DOT instead of text.
        #[arg(long)]
        dot: bool,
        /// The graph after shape inference and passes.
        #[arg(long)]
        optimized: bool,
        /// NAME=DIMS for --optimized (symbolic dims default to 1).
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shape: Vec<String>,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Where every node runs and why: with a device, placements, subgraphs with their sizes and
    /// FLOP shares, and the host/device copies; for the CPU, each node's kernel and the
    /// kernels passed over, with the reason.
    Explain {
        model: PathBuf,
        /// Paddle parameters: combined params file, or folder of per-variable files.
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// NAME=DIMS (symbolic dims default to 1).
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shape: Vec<String>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// List the graph passes in the order they run.
    Passes,
    /// Run the analysis phase once (frontend, shape inference, every pass) and write the model
    /// in ferrolite's optimized format (docs/format.md), for this machine's CPU kernels. The
    /// file loads with no protobuf decoding and no passes, its weights used from a memory map.
    Opt {
        /// ONNX file, Paddle model folder, or Paddle program file (.pdmodel / __model__).
        model: PathBuf,
        /// Paddle parameters: combined params file, or folder of per-variable files.
        #[arg(long, value_name = "FILE")]
        params: Option<PathBuf>,
        /// NAME=DIMS (repeatable): the input shapes to optimize for. Without any, a model with
        /// fixed input shapes is optimized for them, and one with symbolic dims is written
        /// unoptimized, its dims kept symbolic (its passes then run at prerun).
        #[arg(long = "shape", value_name = "NAME=DIMS")]
        shape: Vec<String>,
        /// The file to write.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Serve every model of a folder over the Open Inference Protocol (KServe v2), REST and
    /// gRPC, until SIGTERM (docs/serving.md).
    #[cfg(feature = "serve")]
    Serve {
        /// One folder per model, named as clients will call it, holding an ONNX file, a Paddle
        /// model or a ferrolite .flm file (Triton's numbered version folders are read too).
        #[arg(long, value_name = "DIR")]
        model_repository: PathBuf,
        /// Address to listen on.
        #[arg(long, default_value = "0.0.0.0")]
        host: std::net::IpAddr,
        /// REST port (0: any free port, given in the "listening" log line).
        #[arg(long, default_value_t = 8000)]
        http_port: u16,
        /// gRPC port (0: any free port).
        #[arg(long, default_value_t = 8001)]
        grpc_port: u16,
        /// Sessions per model: requests that run at once.
        #[arg(long, default_value_t = 1)]
        sessions: usize,
        /// Threads per session.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Requests per model that may wait for a session; beyond it they get 503 / UNAVAILABLE.
        #[arg(long, default_value_t = 64)]
        queue_size: usize,
        /// Largest request body (REST) or message (gRPC), in MiB.
        #[arg(long, default_value_t = 64)]
        max_body_mb: usize,
        /// The CPU kernels' instruction set (as for the other commands).
        #[arg(long, value_name = "ISA")]
        isa: Option<String>,
        /// Log every request (JSON lines on stderr, as the other logs).
        #[arg(long)]
        log_requests: bool,
        /// Threads that accept, parse and answer requests (0: one per 8 cores, 1 to 4).
        #[arg(long, default_value_t = 0)]
        io_threads: usize,
    },
}

/// Rust ignores SIGPIPE, so printing to a closed pipe (`ferrolite info m.onnx | head`) would
/// panic in `println!`. Like other command-line tools, end quietly instead.
fn restore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a valid handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    restore_sigpipe();
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> ferrolite::Result<ExitCode> {
    match command {
        Command::Run {
            model,
            params,
            input,
            shape,
            output_dir,
            seed,
            repeat,
            engine,
        } => report::run_model(
            &model,
            params.as_deref(),
            &input,
            &shape,
            output_dir.as_deref(),
            seed,
            repeat,
            &engine.options()?,
        ),
        Command::Bench {
            model,
            input,
            shape,
            seed,
            warmup,
            iters,
            seconds,
            json,
            profile,
            serve,
            sessions,
            engine,
        } => {
            bench::bench(&bench::BenchArgs {
                model: &model,
                inputs: &input,
                shapes: &shape,
                seed,
                warmup,
                iters,
                seconds,
                json,
                profile,
                serve,
                sessions,
                options: engine.options()?,
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            cases,
            model,
            params,
            atol,
            rtol,
            quiet,
            json,
            engine,
        } => check::check_cases(
            &cases,
            model.as_deref().map(|m| (m, params.as_deref())),
            atol,
            rtol,
            quiet,
            json.as_deref(),
            &engine.options()?,
        ),
        Command::Opt {
            model,
            params,
            shape,
            output,
            engine,
        } => {
            let session = open_session(&model, params.as_deref(), engine.options()?)?;
            let shapes = if shape.is_empty() {
                None
            } else {
                Some(inputs::shapes_for(&session, &shape)?)
            };
            let bytes = session.optimized_model_bytes(shapes.as_deref())?;
            std::fs::write(&output, &bytes).map_err(|e| ferrolite::Error::Io {
                path: output.display().to_string(),
                source: e,
            })?;
            let reopened = ferrolite::model::load_path(&output)?;
            let how = match &reopened.optimized {
                Some(o) => format!(
                    "optimized for input shapes {:?} and the {} CPU kernels",
                    o.input_shapes, o.isa
                ),
                None => "not optimized (symbolic input dims; give --shape to fix them)".into(),
            };
            println!(
                "wrote {} ({} bytes, {} nodes): {how}",
                output.display(),
                bytes.len(),
                reopened.graph.nodes.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Info {
            model,
            params,
            shape,
            ops,
        } => {
            let session = open_session(&model, params.as_deref(), SessionOptions::default())?;
            if ops {
                report::op_tags(&session)?;
            } else {
                report::info(&session, &shape)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Dump {
            model,
            params,
            dot,
            optimized,
            shape,
            engine,
        } => {
            let session = open_session(&model, params.as_deref(), engine.options()?)?;
            let text = if optimized {
                let shapes = inputs::shapes_for(&session, &shape)?;
                let prepared = session.prerun(&shapes)?;
                if dot {
                    prepared.graph.to_dot()
                } else {
                    prepared.graph.to_text()
                }
            } else if dot {
                session.graph().to_dot()
            } else {
                session.graph().to_text()
            };
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Explain {
            model,
            params,
            shape,
            json,
            engine,
        } => {
            let session = open_session(&model, params.as_deref(), engine.options()?)?;
            explain::explain(&session, &shape, json)?;
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "serve")]
        Command::Serve {
            model_repository,
            host,
            http_port,
            grpc_port,
            sessions,
            threads,
            queue_size,
            max_body_mb,
            isa,
            log_requests,
            io_threads,
        } => {
            let options = ferrolite_serve::ServeOptions {
                model_repository,
                host,
                http_port,
                grpc_port,
                pool: ferrolite_serve::model::PoolOptions {
                    sessions,
                    threads,
                    queue_size,
                    isa,
                },
                max_body_bytes: max_body_mb.saturating_mul(1 << 20),
                debug_log: log_requests,
                io_threads,
            };
            ferrolite_serve::run(options).map_err(ferrolite::Error::Other)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Passes => {
            println!("{:<2} {:<20} what", "#", "pass");
            println!(
                "{:<2} {:<20} infer every shape and dtype, fold constants (always on)",
                0,
                ferrolite::core::passes::SHAPE_INFERENCE,
            );
            for (i, (name, what)) in ferrolite::pass_names().into_iter().enumerate() {
                println!("{:<2} {:<20} {}", i + 1, name, what);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert!(parse_size("").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("99999999999999G").is_err());
    }
}
