//! Resize (nearest, linear, cubic; every coordinate mode but tf_crop_and_resize): separable,
//! one pass per resized axis. The taps of each output index (input index and weight) come from
//! the op's own `axis_tables`, worked out at compile, so the GPU samples exactly where the
//! reference does.

use super::{add, numel, u, Elem, Lowered, Node, Operand, Reason, Registry, Req, Step};
use ferrolite_core::ops::nn::resize::Resize;
use std::sync::Arc;

pub(crate) fn register(reg: &mut Registry) {
    add::<Resize>(reg, "resample", "Resize", resize);
}

const RESAMPLE: &str = "fn run(i: u32) {
  let in_len = p[2]; let out_len = p[3]; let inner = p[4]; let nt = p[5];
  let c = i % inner;
  let t = i / inner;
  let o = t % out_len;
  let b = t / out_len;
  var acc = 0.0;
  for (var k = 0u; k < nt; k = k + 1u) {
    let e = (o * nt + k) * 2u;
    acc = acc + bitcast<f32>(in1[e + 1u]) * in0[(b * in_len + in1[e]) * inner + c];
  }
  out[i] = acc;
}
";

fn resize(op: &Resize, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let x = node.shape(0)?;
    let y = node.out_shape(0)?;
    let inputs: Vec<_> = (0..node.req.inputs.len())
        .map(|i| node.constant(i))
        .collect();
    if let Some(i) = (1..inputs.len()).find(|&i| node.has(i) && inputs[i].is_none()) {
        return Err(format!("Resize input {i} is not a constant"));
    }
    let (out, taps) = op.axis_tables(x, &inputs).map_err(|e| e.to_string())?;
    if out != y {
        return Err(format!(
            "Resize output {out:?} differs from the inferred {y:?}"
        ));
    }
    let mut cur = x.to_vec();
    let mut passes: Vec<(usize, Vec<u32>, usize)> = Vec::new();
    for (a, axis_taps) in taps.iter().enumerate() {
        let identity = out[a] == x[a]
            && axis_taps
                .iter()
                .enumerate()
                .all(|(o, t)| matches!(t.as_deref(), Some([(i, w)]) if *i == o && *w == 1.0));
        if identity {
            continue;
        }
        let nt = axis_taps
            .iter()
            .map(|t| t.as_ref().map_or(0, |v| v.len()))
            .max()
            .unwrap_or(0)
            .max(1);
        let mut table = vec![0u32; out[a] * nt * 2];
        for (o, t) in axis_taps.iter().enumerate() {
            let t = t
                .as_ref()
                .ok_or("Resize with extrapolated samples (tf_crop_and_resize)")?;
            for (k, &(i, w)) in t.iter().enumerate() {
                table[(o * nt + k) * 2] = u(i);
                table[(o * nt + k) * 2 + 1] = (w as f32).to_bits();
            }
        }
        passes.push((a, table, nt));
    }
    if passes.is_empty() {
        // Every axis keeps its size and samples itself: the output is the input.
        return Ok(Lowered::Alias);
    }
    let last = passes.len() - 1;
    let mut scratch = Vec::new();
    let mut steps = Vec::new();
    for (k, (a, table, nt)) in passes.into_iter().enumerate() {
        let outer: usize = cur[..a].iter().product();
        let inner: usize = cur[a + 1..].iter().product();
        let in_len = cur[a];
        cur[a] = out[a];
        let write = if k == last {
            Operand::Output(0)
        } else {
            scratch.push(numel(&cur));
            Operand::Scratch(scratch.len() - 1)
        };
        let read = if k == 0 {
            Operand::Input(0)
        } else {
            Operand::Scratch(k - 1)
        };
        steps.push(Step {
            body: RESAMPLE.to_string(),
            params: vec![u(outer), u(in_len), u(out[a]), u(inner), u(nt)],
            reads: vec![
                (read, Elem::F32),
                (Operand::Data(Arc::new(table)), Elem::U32),
            ],
            write,
            grid: super::Grid::Threads((outer * out[a] * inner) as u64),
        });
    }
    Ok(Lowered::Steps { scratch, steps })
}
