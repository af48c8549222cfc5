//! Data movement: shape-only ops alias their input's buffer; Transpose, Slice, Split and
//! Concat are strided copies (one kernel: each output index walks the input and the output with
//! its own strides, which may be negative for reversed slices).

use super::elementwise::collapse;
use super::{add, numel, strides, u, Lowered, Node, Operand, Reason, Registry, Req, Step};
use ferrolite_core::op::normalize_axis;
use ferrolite_core::ops::elementwise::cast::Identity;
use ferrolite_core::ops::shape::concat::Concat;
use ferrolite_core::ops::shape::flatten::Flatten;
use ferrolite_core::ops::shape::reshape::Reshape;
use ferrolite_core::ops::shape::slice::{Slice, SliceArgs};
use ferrolite_core::ops::shape::split::Split;
use ferrolite_core::ops::shape::squeeze::{Squeeze, Unsqueeze};
use ferrolite_core::ops::shape::transpose::Transpose;

const STRIDED_COPY: &str = "fn run(i: u32) {
  let rank = p[3];
  var rem = i;
  var src = bitcast<i32>(p[1]);
  var dst = bitcast<i32>(p[2]);
  for (var d = rank; d > 0u; d = d - 1u) {
    let n = p[3u + d];
    let k = i32(rem % n);
    rem = rem / n;
    src = src + k * bitcast<i32>(p[3u + rank + d]);
    dst = dst + k * bitcast<i32>(p[3u + 2u * rank + d]);
  }
  out[u32(dst)] = in0[u32(src)];
}
";

/// A copy of `shape` elements from `input` at `src_base` with `src_strides` to the output
/// `output` at `dst_base` with `dst_strides` (strides in elements, possibly negative).
fn strided_copy(
    input: Operand,
    output: Operand,
    shape: &[usize],
    (src_base, src_strides): (i64, &[i64]),
    (dst_base, dst_strides): (i64, &[i64]),
) -> Step {
    // Collapse over |stride| with the signs kept aside: merging is only valid when signs agree,
    // so dims with negative strides are never merged (they are rare: reversed slices).
    let all_positive = src_strides.iter().chain(dst_strides).all(|&s| s >= 0);
    let (shape, st): (Vec<usize>, Vec<Vec<i64>>) = if all_positive {
        let (sh, st) = collapse(
            shape,
            &[
                src_strides.iter().map(|&s| s as usize).collect(),
                dst_strides.iter().map(|&s| s as usize).collect(),
            ],
        );
        let st = st
            .into_iter()
            .map(|v| v.into_iter().map(|s| s as i64).collect())
            .collect();
        (sh, st)
    } else {
        (
            shape.to_vec(),
            vec![src_strides.to_vec(), dst_strides.to_vec()],
        )
    };
    let rank = shape.len();
    let mut params = vec![src_base as i32 as u32, dst_base as i32 as u32, u(rank)];
    params.extend(shape.iter().map(|&d| u(d)));
    params.extend(st[0].iter().map(|&s| s as i32 as u32));
    params.extend(st[1].iter().map(|&s| s as i32 as u32));
    Step::threads(
        numel(&shape),
        STRIDED_COPY.to_string(),
        params,
        vec![input],
        output,
    )
}

fn signed(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&s| s as i64).collect()
}

fn i64s(node: &Node, i: usize) -> Option<Vec<i64>> {
    node.constant(i).map(|t| t.to_i64_vec())
}

pub(crate) fn register(reg: &mut Registry) {
    add::<Reshape>(reg, "alias", "Reshape", alias);
    add::<Flatten>(reg, "alias", "Flatten", alias);
    add::<Squeeze>(reg, "alias", "Squeeze", alias);
    add::<Unsqueeze>(reg, "alias", "Unsqueeze", alias);
    add::<Identity>(reg, "alias", "Identity", alias);
    add::<Transpose>(reg, "strided_copy", "Transpose", transpose);
    add::<Slice>(reg, "strided_copy", "Slice", slice);
    add::<Split>(reg, "strided_copy", "Split", split);
    add::<Concat>(reg, "strided_copy", "Concat", concat);
}

/// Shape-only ops: the output is the input's buffer (shape inference has checked the sizes).
fn alias<O>(_: &O, _: &Req) -> Result<Lowered, Reason> {
    Ok(Lowered::Alias)
}

fn transpose(t: &Transpose, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let x = node.shape(0)?;
    let perm = t.resolved_perm(x.len()).map_err(|e| e.to_string())?;
    let xs = strides(x);
    let y = node.out_shape(0)?;
    let src: Vec<i64> = perm.iter().map(|&a| xs[a] as i64).collect();
    let step = strided_copy(
        Operand::Input(0),
        Operand::Output(0),
        y,
        (0, &src),
        (0, &signed(&strides(y))),
    );
    Ok(Lowered::steps(vec![step]))
}

fn slice(s: &Slice, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let x = node.shape(0)?;
    let pick = |i: usize, attr: &Option<Vec<i64>>| i64s(&node, i).or_else(|| attr.clone());
    let args = SliceArgs {
        starts: pick(1, &s.starts).ok_or("Slice without constant starts")?,
        ends: pick(2, &s.ends).ok_or("Slice without constant ends")?,
        axes: pick(3, &s.axes),
        steps: pick(4, &s.steps),
    };
    let plan = Slice::plan(x, &args).map_err(|e| e.to_string())?;
    let xs = strides(x);
    let base: i64 = plan
        .start
        .iter()
        .zip(&xs)
        .map(|(&s, &st)| s * st as i64)
        .sum();
    let src: Vec<i64> = plan
        .step
        .iter()
        .zip(&xs)
        .map(|(&s, &st)| s * st as i64)
        .collect();
    let step = strided_copy(
        Operand::Input(0),
        Operand::Output(0),
        &plan.shape,
        (base, &src),
        (0, &signed(&strides(&plan.shape))),
    );
    Ok(Lowered::steps(vec![step]))
}

fn split(s: &Split, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let x = node.shape(0)?;
    let axis = normalize_axis(s.axis, x.len()).map_err(|e| e.to_string())?;
    let given = i64s(&node, 1);
    let sizes = s
        .sizes(x[axis], given.as_deref())
        .map_err(|e| e.to_string())?;
    let xs = signed(&strides(x));
    let mut steps = Vec::new();
    let mut at = 0usize;
    for (k, &len) in sizes.iter().enumerate() {
        let y = node.out_shape(k)?;
        if numel(y) > 0 {
            steps.push(strided_copy(
                Operand::Input(0),
                Operand::Output(k),
                y,
                (at as i64 * xs[axis], &xs),
                (0, &signed(&strides(y))),
            ));
        }
        at += len;
    }
    Ok(Lowered::steps(steps))
}

fn concat(c: &Concat, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let y = node.out_shape(0)?;
    let axis = normalize_axis(c.axis, y.len()).map_err(|e| e.to_string())?;
    if node.req.inputs.len() > 64 {
        return Err(format!("Concat of {} inputs", node.req.inputs.len()));
    }
    let ys = signed(&strides(y));
    let mut steps = Vec::new();
    let mut at = 0usize;
    for i in 0..node.req.inputs.len() {
        let x = node.shape(i)?;
        if numel(x) > 0 {
            steps.push(strided_copy(
                Operand::Input(i),
                Operand::Output(0),
                x,
                (0, &signed(&strides(x))),
                (at as i64 * ys[axis], &ys),
            ));
        }
        at += x[axis];
    }
    Ok(Lowered::steps(steps))
}
