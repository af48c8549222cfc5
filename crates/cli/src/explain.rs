//! `ferrolite explain`: where each node runs on the session's device, and why; and for the
//! nodes on the CPU, the kernel its registry picked and why not the others.

use crate::check::json_str;
use crate::inputs::shapes_for;
use ferrolite::core::passes::partition::{GroupInfo, Placement};
use ferrolite::core::registry::Verdict;
use ferrolite::{PartitionReport, Prepared, Result, Session};
use std::fmt::Write as _;

/// The ops whose FLOPs the device placement is judged by.
pub const HEAVY_OPS: [&str; 5] = ["Conv", "ConvTranspose", "MatMul", "Gemm", "FullyConnected"];

fn mflop(f: u64) -> f64 {
    f as f64 / 1e6
}

fn kib(b: u64) -> f64 {
    b as f64 / 1024.0
}

fn share(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        100.0 * part as f64 / total as f64
    }
}

/// Where a node runs and why (empty when it runs on the device).
fn reason(report: &PartitionReport, p: &Placement) -> (String, String) {
    match p {
        Placement::Device(k) => (report.subgraphs[*k].name.clone(), String::new()),
        Placement::Unsupported(why) => ("cpu".into(), why.clone()),
        Placement::Dynamic => ("cpu".into(), "shapes known only at run time".into()),
        Placement::TooSmall(k) => {
            let g = &report.dropped[*k];
            (
                "cpu".into(),
                format!(
                    "subgraph too small: {} node(s), {} op(s) by work, fewer than {}",
                    g.nodes, g.work_ops, report.min_ops
                ),
            )
        }
    }
}

/// FLOPs of the convolution and matmul ops: (on the device, in all).
pub fn heavy_flops(report: &PartitionReport) -> (u64, u64) {
    let heavy = || {
        report
            .nodes
            .iter()
            .filter(|n| HEAVY_OPS.contains(&n.op.as_str()))
    };
    let total = heavy().map(|n| n.flops).sum();
    let placed = heavy()
        .filter(|n| matches!(n.placement, Placement::Device(_)))
        .map(|n| n.flops)
        .sum();
    (placed, total)
}

/// Copies of a subgraph: (count in, bytes in, count out, bytes out).
fn copies(g: &GroupInfo) -> (usize, u64, usize, u64) {
    (
        g.copies_in.len(),
        g.copies_in.iter().map(|c| c.bytes).sum(),
        g.copies_out.len(),
        g.copies_out.iter().map(|c| c.bytes).sum(),
    )
}

/// The CPU's kernel per plan step, with the entries it passed over.
fn cpu_text(prepared: &Prepared, describe: &str, threads: usize) -> String {
    let mut out = String::new();
    let steps = &prepared.plan.steps;
    let w = steps
        .iter()
        .map(|s| s.node.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let scratch = prepared.plan.scratch_need(threads);
    let _ = writeln!(
        out,
        "kernels on {describe}; their scratch {} B at {threads} threads (the neediest step's):",
        scratch.bytes(threads)
    );
    let _ = writeln!(out, "{:<w$}  {:<22} kernel", "node", "op");
    for s in steps {
        let scratch = s.kernel.scratch(threads);
        let scratch = if scratch.is_none() {
            String::new()
        } else {
            format!(
                "  (scratch {} B + {} B per thread)",
                scratch.shared, scratch.per_thread
            )
        };
        let _ = writeln!(
            out,
            "{:<w$}  {:<22} {}{scratch}",
            s.node.name,
            s.node.op.name(),
            s.kernel.name()
        );
        for c in s.considered.iter().filter(|c| c.verdict != Verdict::Picked) {
            let _ = writeln!(out, "{:<w$}    passed over: {c}", "");
        }
    }
    out
}

fn cpu_json(prepared: &Prepared, describe: &str, threads: usize) -> String {
    let nodes: Vec<String> = prepared
        .plan
        .steps
        .iter()
        .map(|s| {
            let considered: Vec<String> = s
                .considered
                .iter()
                .map(|c| {
                    let (verdict, why) = match &c.verdict {
                        Verdict::Picked => ("picked", ""),
                        Verdict::Rejected(why) => ("rejected", why.as_str()),
                        Verdict::NotTried => ("not tried", ""),
                    };
                    format!(
                        "{{\"kernel\":{},\"verdict\":{},\"why\":{}}}",
                        json_str(c.kernel),
                        json_str(verdict),
                        json_str(why)
                    )
                })
                .collect();
            let scratch = s.kernel.scratch(threads);
            format!(
                "{{\"node\":{},\"op\":{},\"kernel\":{},\"scratch_shared_bytes\":{},\"scratch_per_thread_bytes\":{},\"considered\":[{}]}}",
                json_str(&s.node.name),
                json_str(s.node.op.name()),
                json_str(s.kernel.name()),
                scratch.shared,
                scratch.per_thread,
                considered.join(",")
            )
        })
        .collect();
    let scratch = prepared.plan.scratch_need(threads);
    format!(
        "{{\"backend\":{},\"threads\":{threads},\"scratch_bytes\":{},\"nodes\":[{}]}}",
        json_str(describe),
        scratch.bytes(threads),
        nodes.join(",")
    )
}

fn to_json(report: &PartitionReport, total: u64, describe: &str, cpu: &str) -> String {
    let (heavy_placed, heavy_total) = heavy_flops(report);
    let nodes: Vec<String> = report
        .nodes
        .iter()
        .map(|n| {
            let (place, why) = reason(report, &n.placement);
            format!(
                "{{\"node\":{},\"op\":{},\"flops\":{},\"runs_on\":{},\"reason\":{}}}",
                json_str(&n.node),
                json_str(&n.op),
                n.flops,
                json_str(&place),
                json_str(&why)
            )
        })
        .collect();
    let subgraphs: Vec<String> = report
        .subgraphs
        .iter()
        .map(|g| {
            let (ni, bi, no, bo) = copies(g);
            format!(
                "{{\"name\":{},\"nodes\":{},\"flops\":{},\"work_ops\":{},\"copies_in\":{ni},\"bytes_in\":{bi},\"copies_out\":{no},\"bytes_out\":{bo}}}",
                json_str(&g.name),
                g.nodes,
                g.flops,
                g.work_ops
            )
        })
        .collect();
    format!(
        "{{\"device\":{},\"description\":{},\"min_ops\":{},\"flops\":{total},\"heavy_flops\":{heavy_total},\"heavy_flops_on_device\":{heavy_placed},\"nodes\":[{}],\"subgraphs\":[{}],\"cpu\":{cpu}}}\n",
        json_str(&report.device),
        json_str(describe),
        report.min_ops,
        nodes.join(","),
        subgraphs.join(",")
    )
}

fn to_text(report: &PartitionReport, total: u64, describe: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "device {describe}: subgraphs of fewer than {} op(s) counted by work stay on the CPU\n",
        report.min_ops
    );
    let w = report
        .nodes
        .iter()
        .map(|n| n.node.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "{:<w$}  {:<22} {:>10}  {:<16} why",
        "node", "op", "MFLOP", "runs on"
    );
    for n in &report.nodes {
        let (place, why) = reason(report, &n.placement);
        let _ = writeln!(
            out,
            "{:<w$}  {:<22} {:>10.3}  {:<16} {}",
            n.node,
            n.op,
            mflop(n.flops),
            place,
            why
        );
    }
    let _ = writeln!(out, "\nsubgraphs on {}:", report.device);
    if report.subgraphs.is_empty() {
        let _ = writeln!(out, "  none");
    }
    let (mut copies_in, mut copies_out, mut bytes_in, mut bytes_out) = (0, 0, 0, 0);
    for g in &report.subgraphs {
        let (ni, bi, no, bo) = copies(g);
        copies_in += ni;
        copies_out += no;
        bytes_in += bi;
        bytes_out += bo;
        let _ = writeln!(
            out,
            "  {}: {} nodes, {} ops by work, {:.1} MFLOP ({:.1}% of the model); copies in: {ni} ({:.1} KB), out: {no} ({:.1} KB)",
            g.name,
            g.nodes,
            g.work_ops,
            mflop(g.flops),
            share(g.flops, total),
            kib(bi),
            kib(bo)
        );
    }
    for g in &report.dropped {
        let _ = writeln!(
            out,
            "  dropped as too small: {} node(s), {} op(s) by work, {:.3} MFLOP",
            g.nodes,
            g.work_ops,
            mflop(g.flops)
        );
    }
    let _ = writeln!(out, "\ncopies:");
    for s in &report.subgraphs {
        for c in &s.copies_in {
            let _ = writeln!(
                out,
                "  to {}: {} ({} bytes) into {}",
                report.device, c.value, c.bytes, s.name
            );
        }
        for c in &s.copies_out {
            let _ = writeln!(
                out,
                "  to host: {} ({} bytes) from {}",
                c.value, c.bytes, s.name
            );
        }
    }
    let placed: u64 = report.subgraphs.iter().map(|g| g.flops).sum();
    let (heavy_placed, heavy_total) = heavy_flops(report);
    let _ = writeln!(
        out,
        "\non {}: {:.1}% of all FLOPs; {:.1}% of convolution and matmul FLOPs ({:.1} of {:.1} MFLOP)",
        report.device,
        share(placed, total),
        share(heavy_placed, heavy_total),
        mflop(heavy_placed),
        mflop(heavy_total)
    );
    let _ = writeln!(
        out,
        "copies per run: {copies_in} to the device ({:.1} KB), {copies_out} to the host ({:.1} KB)",
        kib(bytes_in),
        kib(bytes_out)
    );
    out
}

pub fn explain(session: &Session, shape_args: &[String], json: bool) -> Result<()> {
    let shapes = shapes_for(session, shape_args)?;
    let prepared = session.prerun(&shapes)?;
    let cpu = session.cpu_description();
    let Some(device) = session.device() else {
        // The CPU alone: every node runs there; say which kernel.
        if json {
            println!(
                "{{\"device\":\"cpu\",\"cpu\":{}}}",
                cpu_json(&prepared, &cpu, session.threads())
            );
        } else {
            print!("{}", cpu_text(&prepared, &cpu, session.threads()));
        }
        return Ok(());
    };
    let report = prepared
        .partition
        .clone()
        .unwrap_or_else(|| PartitionReport {
            device: device.name().to_string(),
            ..Default::default()
        });
    let total: u64 = report.nodes.iter().map(|n| n.flops).sum();
    if json {
        let cpu = cpu_json(&prepared, &cpu, session.threads());
        print!("{}", to_json(&report, total, &device.describe(), &cpu));
    } else {
        print!("{}", to_text(&report, total, &device.describe()));
        print!("\n{}", cpu_text(&prepared, &cpu, session.threads()));
    }
    Ok(())
}
