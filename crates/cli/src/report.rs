//! `run` and `info`: what they print.

use crate::inputs::{collect_inputs, shapes_for};
use ferrolite::{Result, Session, SessionOptions, Tensor};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Min, max, mean and the first values of a tensor, on one line.
pub fn summary(t: &Tensor) -> String {
    let v = t.to_f64_vec();
    if v.is_empty() {
        return "empty".into();
    }
    let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let nan = v.iter().filter(|x| x.is_nan()).count();
    let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mean = finite.iter().sum::<f64>() / finite.len().max(1) as f64;
    let head: Vec<String> = v.iter().take(6).map(|x| format!("{x:.6}")).collect();
    let more = if v.len() > 6 { ", ..." } else { "" };
    let mut s = format!(
        "min {min:.6}  max {max:.6}  mean {mean:.6}  [{}{more}]",
        head.join(", ")
    );
    if nan > 0 {
        s.push_str(&format!("  ({nan} NaN)"));
    }
    s
}

#[allow(clippy::too_many_arguments)]
pub fn run_model(
    model: &Path,
    params: Option<&Path>,
    input_args: &[String],
    shape_args: &[String],
    output_dir: Option<&Path>,
    seed: u64,
    repeat: usize,
    options: &SessionOptions,
) -> Result<ExitCode> {
    let t0 = Instant::now();
    let session = crate::open_session(model, params, options.clone())?;
    let load = t0.elapsed();
    let inputs = collect_inputs(&session, input_args, shape_args, seed)?;
    for (name, t, source) in &inputs {
        println!(
            "input  {name}: {}[{}] from {source}",
            t.dtype(),
            ferrolite::core::tensor::shape_str(t.shape())
        );
    }
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|(_, t, _)| t.shape().to_vec()).collect();
    let t1 = Instant::now();
    session.prerun(&shapes)?;
    let prerun = t1.elapsed();
    let named: Vec<(&str, Tensor)> = inputs
        .iter()
        .map(|(n, t, _)| (n.as_str(), t.clone()))
        .collect();
    let t2 = Instant::now();
    let outputs = session.run(&named)?;
    let first = t2.elapsed();
    let mut times = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        let t = Instant::now();
        session.run(&named)?;
        times.push(t.elapsed());
    }
    for (name, t) in outputs.iter() {
        println!(
            "output {name}: {}[{}]  {}",
            t.dtype(),
            ferrolite::core::tensor::shape_str(t.shape()),
            summary(t)
        );
        if let Some(dir) = output_dir {
            std::fs::create_dir_all(dir).map_err(|e| ferrolite::Error::Io {
                path: dir.display().to_string(),
                source: e,
            })?;
            let file = dir.join(format!("{}.npy", sanitize(name)));
            ferrolite::onnx::npy::write_npy_file(&file, t)?;
            println!("       written to {}", file.display());
        }
    }
    print!(
        "time   load {}  prerun {}  first run {}",
        ms(load),
        ms(prerun),
        ms(first)
    );
    if !times.is_empty() {
        times.sort();
        print!(
            "  median of {} runs {}",
            times.len(),
            ms(times[times.len() / 2])
        );
    }
    println!("  ({} thread(s))", session.threads());
    Ok(ExitCode::SUCCESS)
}

/// A file name from an output name.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `info --ops`: the op kinds (codec tags) an optimized model's nodes need, one per line.
pub fn op_tags(session: &Session) -> Result<()> {
    let model = session.model();
    if model.optimized.is_none() {
        return Err(ferrolite::Error::InvalidModel(format!(
            "--ops lists what an optimized model needs, and this is a {} model: write one with \
             `ferrolite opt` first",
            model.format
        )));
    }
    let tags: std::collections::BTreeSet<&str> = model
        .graph
        .nodes
        .iter()
        .flat_map(|n| ferrolite::core::ops::codec::tags_of(n.op.as_ref()))
        .collect();
    for tag in tags {
        println!("{tag}");
    }
    Ok(())
}

pub fn info(session: &Session, shape_args: &[String]) -> Result<()> {
    let model = session.model();
    println!("format   {} (producer '{}')", model.format, model.producer);
    if let Some(o) = &model.optimized {
        let packed: usize = o.packed.iter().map(|p| p.tensor.byte_len()).sum();
        println!(
            "opt      for input shapes {:?} and the {} kernels; {} prepacked weights ({:.1} MB)",
            o.input_shapes,
            o.isa,
            o.packed.len(),
            packed as f64 / 1e6
        );
    }
    println!("backend  {}", session.cpu_description());
    let isas: Vec<&str> = ferrolite::Isa::available()
        .iter()
        .map(|i| i.name())
        .collect();
    println!(
        "isas     {} (this CPU; --isa or FERROLITE_ISA picks one)",
        isas.join(", ")
    );
    for (domain, v) in &model.opsets {
        let d = if domain.is_empty() { "ai.onnx" } else { domain };
        println!("opset    {d} {v}");
    }
    for (key, value) in &model.metadata {
        // Values can be long (a recognizer's dictionary): show the start and the size.
        let first: String = value.chars().take(40).collect();
        let shown = if first.len() < value.len() {
            format!("{:?}... ({} bytes)", first, value.len())
        } else {
            format!("{value:?}")
        };
        println!("metadata {key} = {shown}");
    }
    for i in session.inputs() {
        println!("input    {}: {}{}", i.name, i.dtype, shape_text(i));
    }
    for o in session.outputs() {
        println!("output   {}: {}{}", o.name, o.dtype, shape_text(o));
    }
    let graph = session.graph();
    let mut hist: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &graph.nodes {
        *hist.entry(n.op.name()).or_default() += 1;
    }
    println!("nodes    {}", graph.nodes.len());
    for (op, n) in &hist {
        println!("  {op:<24} {n}");
    }
    let (params, bytes) = graph
        .values
        .iter()
        .filter_map(|v| v.constant.as_ref())
        .fold((0usize, 0usize), |(p, b), t| {
            (p + t.numel(), b + t.byte_len())
        });
    println!("params   {params} ({:.2} MB)", bytes as f64 / 1e6);
    let shapes = shapes_for(session, shape_args)?;
    match session.prerun(&shapes) {
        Ok(p) => {
            println!(
                "flops    {:.3} GFLOP for input shapes {:?}",
                p.flops() as f64 / 1e9,
                shapes
            );
            println!(
                "memory   {}",
                crate::bench::memory_text(&p.plan.memory_stats(session.threads()))
            );
            println!("precision {}", precision_text(&p.graph));
        }
        Err(e) => println!("flops    n/a: {e}"),
    }
    Ok(())
}

/// How many optimized nodes compute on 8-bit integers (by op type) and how many in float: a
/// node is integer when its data input or its output is 8-bit (QLinearConv, QGemm, MaxPool
/// kept 8-bit by the quantize pass, ...), not counting the QuantizeLinear/DequantizeLinear
/// conversions themselves.
fn precision_text(g: &ferrolite::Graph) -> String {
    use ferrolite::DType;
    let eight = |d: DType| matches!(d, DType::U8 | DType::I8);
    let dtype = |v: &ferrolite::core::ValueId| g.value(*v).info.as_ref().map(|i| i.dtype);
    let mut integer: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut float, mut conversions) = (0, 0);
    for n in &g.nodes {
        let op = n.op.name();
        if matches!(
            op,
            "QuantizeLinear" | "DequantizeLinear" | "DynamicQuantizeLinear"
        ) {
            conversions += 1;
            continue;
        }
        let data_in = n.inputs.first().copied().flatten().and_then(|v| dtype(&v));
        let out = n.outputs.first().and_then(dtype);
        if data_in.is_some_and(eight) || out.is_some_and(eight) {
            *integer.entry(op).or_default() += 1;
        } else {
            float += 1;
        }
    }
    let list: Vec<String> = integer.iter().map(|(op, n)| format!("{op} {n}")).collect();
    let total: usize = integer.values().sum();
    format!(
        "{total} node(s) on 8-bit integers{}, {float} in float, {conversions} quantize/dequantize",
        if list.is_empty() {
            String::new()
        } else {
            format!(" ({})", list.join(", "))
        }
    )
}

fn shape_text(i: &ferrolite::IoInfo) -> String {
    match &i.shape {
        Some(d) => ferrolite::session::dims_str(d),
        None => "[?]".into(),
    }
}
