//! Softmax, LogSoftmax and LayerNormalization: reductions over rows. A contiguous row is one
//! workgroup (64 lanes stride over it and combine through workgroup memory); Softmax over an
//! inner axis runs one invocation per row.

use super::{add, u, Lowered, Node, Operand, Reason, Registry, Req, Step};
use ferrolite_core::op::normalize_axis;
use ferrolite_core::ops::nn::norm::LayerNorm;
use ferrolite_core::ops::nn::softmax::{Softmax, SoftmaxKind};

pub(crate) fn register(reg: &mut Registry) {
    add::<Softmax>(reg, "softmax", "Softmax", softmax);
    add::<LayerNorm>(reg, "layer_norm", "LayerNormalization", layer_norm);
}

/// Workgroup reductions: every lane passes its partial value and gets the row's total.
const REDUCE: &str = "var<workgroup> red: array<f32, 64>;
fn wg_sum(v: f32, lane: u32) -> f32 {
  red[lane] = v;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s = s >> 1u) {
    if (lane < s) { red[lane] = red[lane] + red[lane + s]; }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}
fn wg_max(v: f32, lane: u32) -> f32 {
  red[lane] = v;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s = s >> 1u) {
    if (lane < s) { red[lane] = max(red[lane], red[lane + s]); }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}
";

fn softmax(s: &Softmax, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let log = match s.kind {
        SoftmaxKind::Softmax => false,
        SoftmaxKind::LogSoftmax => true,
        SoftmaxKind::Hardmax => return Err("Hardmax".into()),
    };
    let x = node.shape(0)?;
    let axis = normalize_axis(s.axis, x.len()).map_err(|e| e.to_string())?;
    let outer: usize = x[..axis].iter().product();
    let (len, inner) = if s.legacy_2d {
        (x[axis..].iter().product(), 1)
    } else {
        (x[axis], x[axis + 1..].iter().product())
    };
    let finish = if log {
        "v - mx - log(total)"
    } else {
        "exp(v - mx) / total"
    };
    if inner == 1 {
        let body = format!(
            "{REDUCE}fn run_group(g: u32, lane: u32) {{
  let len = p[1];
  let base = g * len;
  var m = -3.4028235e38;
  for (var k = lane; k < len; k = k + 64u) {{ m = max(m, in0[base + k]); }}
  let mx = wg_max(m, lane);
  var s = 0.0;
  for (var k = lane; k < len; k = k + 64u) {{ s = s + exp(in0[base + k] - mx); }}
  let total = wg_sum(s, lane);
  for (var k = lane; k < len; k = k + 64u) {{
    let v = in0[base + k];
    out[base + k] = {finish};
  }}
}}
"
        );
        let step = Step::groups(
            outer,
            body,
            vec![u(len)],
            vec![Operand::Input(0)],
            Operand::Output(0),
        );
        return Ok(Lowered::steps(vec![step]));
    }
    let body = format!(
        "fn run(i: u32) {{
  let len = p[1]; let inner = p[2];
  let base = (i / inner) * len * inner + i % inner;
  var mx = -3.4028235e38;
  for (var k = 0u; k < len; k = k + 1u) {{ mx = max(mx, in0[base + k * inner]); }}
  var total = 0.0;
  for (var k = 0u; k < len; k = k + 1u) {{ total = total + exp(in0[base + k * inner] - mx); }}
  for (var k = 0u; k < len; k = k + 1u) {{
    let v = in0[base + k * inner];
    out[base + k * inner] = {finish};
  }}
}}
"
    );
    Ok(Lowered::steps(vec![Step::threads(
        outer * inner,
        body,
        vec![u(len), u(inner)],
        vec![Operand::Input(0)],
        Operand::Output(0),
    )]))
}

/// Whether an operand of shape `t` covers only the normalised axes of `x` (from `axis` on), so
/// it is read at the same offset in every row.
fn per_row(t: &[usize], x: &[usize], axis: usize) -> bool {
    let lead = x.len().saturating_sub(t.len());
    t.len() <= x.len()
        && t.iter().enumerate().all(|(i, &d)| {
            let a = lead + i;
            if a < axis {
                d == 1
            } else {
                d == x[a]
            }
        })
}

fn layer_norm(ln: &LayerNorm, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    if ln.num_outputs > 1 || node.req.outputs.len() > 1 {
        return Err("LayerNormalization with Mean/InvStdDev outputs".into());
    }
    let x = node.shape(0)?;
    let axis = normalize_axis(ln.axis, x.len()).map_err(|e| e.to_string())?;
    let cols: usize = x[axis..].iter().product();
    let rows: usize = x[..axis].iter().product();
    let scale = node.shape(1)?;
    if !per_row(scale, x, axis) {
        return Err(format!(
            "LayerNormalization scale of shape {scale:?} on {x:?}"
        ));
    }
    let has_bias = node.has(2);
    if has_bias && !per_row(node.shape(2)?, x, axis) {
        return Err(format!(
            "LayerNormalization bias of shape {:?} on {x:?}",
            node.shape(2)?
        ));
    }
    let bias = if has_bias { "in2[k]" } else { "0.0" };
    let body = format!(
        "{REDUCE}fn run_group(g: u32, lane: u32) {{
  let len = p[1];
  let base = g * len;
  var s = 0.0;
  for (var k = lane; k < len; k = k + 64u) {{ s = s + in0[base + k]; }}
  let mean = wg_sum(s, lane) / f32(len);
  var q = 0.0;
  for (var k = lane; k < len; k = k + 64u) {{ let d = in0[base + k] - mean; q = q + d * d; }}
  let inv = 1.0 / sqrt(wg_sum(q, lane) / f32(len) + bitcast<f32>(p[2]));
  for (var k = lane; k < len; k = k + 64u) {{
    out[base + k] = (in0[base + k] - mean) * inv * in1[k] + {bias};
  }}
}}
"
    );
    let mut reads = vec![Operand::Input(0), Operand::Input(1)];
    if has_bias {
        reads.push(Operand::Input(2));
    }
    let step = Step::groups(
        rows,
        body,
        vec![u(cols), (ln.epsilon as f32).to_bits()],
        reads,
        Operand::Output(0),
    );
    Ok(Lowered::steps(vec![step]))
}
