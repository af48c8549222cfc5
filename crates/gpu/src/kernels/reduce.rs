//! ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp over any axes, and Pad in
//! every mode. One invocation per output value; both follow the op's own resolution (the
//! reduced axes; Pad's per-axis source maps, uploaded as tables) so they agree with the
//! reference by construction.

use super::{
    add, numel, strides, u, Elem, Grid, Lowered, Node, Operand, Reason, Registry, Req, Step,
};
use ferrolite_core::ops::nn::reduce::{resolve_axes, Reduce, ReduceKind};
use ferrolite_core::ops::shape::pad::Pad;
use std::sync::Arc;

pub(crate) fn register(reg: &mut Registry) {
    add::<Reduce>(reg, "reduce", "Reduce", reduce);
    add::<Pad>(reg, "pad", "Pad", pad);
}

/// (initial value, accumulation of `v` into `acc`, result from `acc` and the count `n`).
fn reduce_parts(kind: ReduceKind) -> Option<(&'static str, &'static str, &'static str)> {
    Some(match kind {
        ReduceKind::Sum => ("0.0", "acc + v", "acc"),
        ReduceKind::Mean => ("0.0", "acc + v", "acc / n"),
        ReduceKind::Max => ("-3.4028235e38", "max(acc, v)", "acc"),
        ReduceKind::Min => ("3.4028235e38", "min(acc, v)", "acc"),
        ReduceKind::Prod => ("1.0", "acc * v", "acc"),
        ReduceKind::L1 => ("0.0", "acc + abs(v)", "acc"),
        ReduceKind::L2 => ("0.0", "acc + v * v", "sqrt(acc)"),
        ReduceKind::SumSquare => ("0.0", "acc + v * v", "acc"),
        ReduceKind::LogSum => ("0.0", "acc + v", "log(acc)"),
        ReduceKind::LogSumExp => return None,
    })
}

fn reduce(op: &Reduce, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let x = node.shape(0)?;
    let axes_input = if node.has(1) {
        Some(node.constant(1).ok_or("axes (input 1) is not a constant")?)
    } else {
        None
    };
    let Some(axes) = resolve_axes(op, axes_input, x.len()).map_err(|e| e.to_string())? else {
        return Ok(Lowered::Alias);
    };
    let xs = strides(x);
    let (mut kept, mut red) = ((vec![], vec![]), (vec![], vec![]));
    for d in 0..x.len() {
        let side = if axes.contains(&d) {
            &mut red
        } else {
            &mut kept
        };
        side.0.push(u(x[d]));
        side.1.push(u(xs[d]));
    }
    let count: usize = axes.iter().map(|&a| x[a]).product();
    let mut params = vec![u(kept.0.len()), u(red.0.len()), u(count)];
    params.extend(kept.0.iter().chain(&kept.1).chain(&red.0).chain(&red.1));
    // p[4..]: kept shape, kept strides, reduced shape, reduced strides.
    let offset_fns = "fn kept_offset(i: u32) -> u32 {
  let nk = p[1];
  var rem = i;
  var off = 0u;
  for (var d = nk; d > 0u; d = d - 1u) {
    let n = p[3u + d];
    off = off + (rem % n) * p[3u + nk + d];
    rem = rem / n;
  }
  return off;
}
fn reduced_offset(r: u32) -> u32 {
  let nk = p[1]; let nr = p[2];
  let base = 4u + 2u * nk;
  var rem = r;
  var off = 0u;
  for (var d = nr; d > 0u; d = d - 1u) {
    let n = p[base + d - 1u];
    off = off + (rem % n) * p[base + nr + d - 1u];
    rem = rem / n;
  }
  return off;
}
";
    let body = match reduce_parts(op.kind) {
        Some((init, step, finish)) => format!(
            "{offset_fns}fn run(i: u32) {{
  let base = kept_offset(i);
  let n = f32(p[3]);
  var acc = {init};
  for (var r = 0u; r < p[3]; r = r + 1u) {{
    let v = in0[base + reduced_offset(r)];
    acc = {step};
  }}
  out[i] = {finish};
}}
"
        ),
        None => format!(
            "{offset_fns}fn run(i: u32) {{
  let base = kept_offset(i);
  var m = -3.4028235e38;
  for (var r = 0u; r < p[3]; r = r + 1u) {{ m = max(m, in0[base + reduced_offset(r)]); }}
  var s = 0.0;
  for (var r = 0u; r < p[3]; r = r + 1u) {{ s = s + exp(in0[base + reduced_offset(r)] - m); }}
  out[i] = m + log(s);
}}
"
        ),
    };
    Ok(Lowered::steps(vec![Step::threads(
        numel(node.out_shape(0)?),
        body,
        params,
        vec![Operand::Input(0)],
        Operand::Output(0),
    )]))
}

/// Marks a constant-filled position in Pad's source tables.
const FILL: u32 = u32::MAX;

fn pad(p: &Pad, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let x = node.shape(0)?;
    let y = node.out_shape(0)?;
    let ints = |i: usize, what: &str| -> Result<Option<Vec<i64>>, Reason> {
        match (node.has(i), node.constant(i)) {
            (false, _) => Ok(None),
            (true, Some(t)) => Ok(Some(t.to_i64_vec())),
            (true, None) => Err(format!("{what} (input {i}) is not a constant")),
        }
    };
    let pads = p
        .per_axis(x.len(), ints(1, "pads")?, ints(3, "axes")?)
        .map_err(|e| e.to_string())?;
    let fill = if node.has(2) {
        let v = node.constant_f32(2, "constant_value")?;
        *v.first().ok_or("constant_value (input 2) is empty")?
    } else {
        p.value as f32
    };
    // Per axis: where it starts in the table, then each output index's source (or FILL).
    let mut table: Vec<u32> = Vec::new();
    let mut starts = Vec::new();
    for (d, &(begin, _)) in pads.iter().enumerate() {
        starts.push(u(table.len()));
        let map = p.axis_map(x[d], begin, y[d]).map_err(|e| e.to_string())?;
        table.extend(map.iter().map(|s| s.map_or(FILL, u)));
    }
    let rank = x.len();
    let mut params = vec![u(rank), fill.to_bits()];
    params.extend(y.iter().map(|&d| u(d)));
    params.extend(strides(x).iter().map(|&s| u(s)));
    params.extend(starts);
    let body = format!(
        "fn run(i: u32) {{
  let rank = p[1];
  var rem = i;
  var off = 0u;
  var inside = true;
  for (var d = rank; d > 0u; d = d - 1u) {{
    let n = p[2u + d];
    let src = in1[p[2u + 2u * rank + d] + rem % n];
    rem = rem / n;
    if (src == {FILL}u) {{ inside = false; }} else {{ off = off + src * p[2u + rank + d]; }}
  }}
  out[i] = select(bitcast<f32>(p[2]), in0[off], inside);
}}
"
    );
    Ok(Lowered::steps(vec![Step {
        body,
        params,
        reads: vec![
            (Operand::Input(0), Elem::F32),
            (Operand::Data(Arc::new(table)), Elem::U32),
        ],
        write: Operand::Output(0),
        grid: Grid::Threads(numel(y) as u64),
    }]))
}
