//! MatMul (batched, broadcast), Gemm and FullyConnected: one kernel,
//! `Y[b, i, j] = act(alpha * sum_k A[b, i, k] * B[b, k, j] + beta * C[i, j])`, where each
//! operand is read through its own strides (transposes and broadcasts cost nothing). Each
//! invocation computes a 4x4 block of Y; products of fewer than 4 rows (a classifier head) run
//! one invocation per row and 4 columns. Pointwise convolutions reuse the kernel (see `conv`).

use super::{activation_fn, add, f, numel, u, Lowered, Node, Operand, Reason, Registry, Req, Step};
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::fully_connected::{fc_dims, FullyConnected};
use ferrolite_core::ops::linalg::gemm::Gemm;
use ferrolite_core::ops::linalg::matmul::{MatMul, MatMulShapes};
use std::sync::Arc;

pub(crate) fn register(reg: &mut Registry) {
    add::<MatMul>(reg, "matmul", "MatMul", matmul);
    add::<FullyConnected>(reg, "matmul", "FullyConnected", fully_connected);
    add::<Gemm>(reg, "matmul", "Gemm", gemm);
}

/// One product in the kernel's terms.
pub(crate) struct Product {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Row and column strides of A, B and C (C's are 0 where it broadcasts).
    pub a: (usize, usize),
    pub b: (usize, usize),
    pub c: Option<(usize, usize)>,
    pub alpha: f32,
    pub beta: f32,
    /// Per output batch, the offsets of its A and B matrices.
    pub batches: Vec<(usize, usize)>,
    pub activation: Option<UnaryKind>,
    /// Where A, B and C (when present) are read from.
    pub sources: (Operand, Operand, Operand),
}

/// Products with fewer rows run one invocation per row and 4 columns (a 4x4 block would be
/// mostly idle).
const BLOCKED_MIN_ROWS: usize = 4;

/// The shared parameters: `p[1..=11]` are M, N, K, A's, B's and C's strides, alpha, beta.
fn base_params(p: &Product) -> Vec<u32> {
    let (c_rs, c_cs) = p.c.unwrap_or((0, 0));
    let beta = if p.c.is_some() { p.beta } else { 0.0 };
    let mut params: Vec<u32> = [p.m, p.n, p.k, p.a.0, p.a.1, p.b.0, p.b.1, c_rs, c_cs]
        .iter()
        .map(|&v| u(v))
        .collect();
    params.extend([f(p.alpha), f(beta)]);
    params
}

/// The product as one step: 4x4 blocks per invocation when it has rows enough. An epilogue
/// without WGSL refuses it.
pub(crate) fn step(p: Product) -> Result<Step, Reason> {
    let act = activation_fn(p.activation)?;
    Ok(if p.m >= BLOCKED_MIN_ROWS {
        blocked(p, &act)
    } else {
        rows(p, &act)
    })
}

/// 4x4 output blocks per invocation, read straight from the buffers: each A value serves 4
/// columns and each B value 4 rows. (Staging tiles in workgroup memory measured 1.7x slower on
/// lavapipe, the one GPU driver this was measured on.)
fn blocked(p: Product, act: &str) -> Step {
    let (bm, bn) = (p.m.div_ceil(4), p.n.div_ceil(4));
    let mut params = base_params(&p);
    params.extend([u(bm), u(bn)]);
    params.extend(p.batches.iter().flat_map(|&(a, b)| [u(a), u(b)]));
    let body = format!(
        "{act}fn run(i: u32) {{
  let M = p[1]; let N = p[2]; let K = p[3];
  let a_rs = p[4]; let a_cs = p[5]; let b_rs = p[6]; let b_cs = p[7];
  let jb = i % p[13];
  let t = i / p[13];
  let ib = t % p[12];
  let batch = t / p[12];
  let row0 = ib * 4u;
  let col0 = jb * 4u;
  let a0 = p[14u + 2u * batch];
  let b0 = p[15u + 2u * batch];
  // Rows and columns past the ends are clamped for reading and not written.
  let r = min(vec4<u32>(row0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(M - 1u));
  let cc = min(vec4<u32>(col0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(N - 1u));
  let ar = vec4<u32>(a0) + r * a_rs;
  let bc = vec4<u32>(b0) + cc * b_cs;
  var acc: array<vec4<f32>, 4>;
  for (var k = 0u; k < K; k = k + 1u) {{
    let ak = ar + vec4<u32>(k * a_cs);
    let bk = bc + vec4<u32>(k * b_rs);
    let bv = vec4<f32>(in1[bk.x], in1[bk.y], in1[bk.z], in1[bk.w]);
    acc[0] = acc[0] + in0[ak.x] * bv;
    acc[1] = acc[1] + in0[ak.y] * bv;
    acc[2] = acc[2] + in0[ak.z] * bv;
    acc[3] = acc[3] + in0[ak.w] * bv;
  }}
  let alpha = bitcast<f32>(p[10]);
  let beta = bitcast<f32>(p[11]);
  for (var q = 0u; q < 4u; q = q + 1u) {{
    let row = row0 + q;
    for (var j = 0u; j < 4u; j = j + 1u) {{
      let col = col0 + j;
      if (row < M && col < N) {{
        let c = in2[row * p[8] + col * p[9]];
        out[(batch * M + row) * N + col] = act(alpha * acc[q][j] + beta * c);
      }}
    }}
  }}
}}
",
    );
    let threads = p.batches.len() * bm * bn;
    let (a, b, c) = p.sources;
    Step::threads(threads, body, params, vec![a, b, c], Operand::Output(0))
}

/// One invocation per row and 4 adjacent columns (when N allows).
fn rows(p: Product, act: &str) -> Step {
    let block = if p.n.is_multiple_of(4) { 4 } else { 1 };
    let mut params = base_params(&p);
    params.push(u(p.n / block));
    params.extend(p.batches.iter().flat_map(|&(a, b)| [u(a), u(b)]));
    let body = format!(
        "{act}const B: u32 = {block}u;
fn run(i: u32) {{
  let M = p[1]; let N = p[2]; let K = p[3];
  let a_rs = p[4]; let a_cs = p[5]; let b_rs = p[6]; let b_cs = p[7];
  let jb = i % p[12];
  let t = i / p[12];
  let row = t % M;
  let batch = t / M;
  let j0 = jb * B;
  let a0 = p[13u + 2u * batch] + row * a_rs;
  let b0 = p[14u + 2u * batch] + j0 * b_cs;
  var acc: array<f32, {block}>;
  for (var k = 0u; k < K; k = k + 1u) {{
    let av = in0[a0 + k * a_cs];
    let bk = b0 + k * b_rs;
    for (var j = 0u; j < B; j = j + 1u) {{ acc[j] = acc[j] + av * in1[bk + j * b_cs]; }}
  }}
  let alpha = bitcast<f32>(p[10]);
  let beta = bitcast<f32>(p[11]);
  for (var j = 0u; j < B; j = j + 1u) {{
    let c = in2[row * p[8] + (j0 + j) * p[9]];
    out[(batch * M + row) * N + j0 + j] = act(alpha * acc[j] + beta * c);
  }}
}}
",
    );
    let threads = p.batches.len() * p.m * (p.n / block);
    let (a, b, c) = p.sources;
    Step::threads(threads, body, params, vec![a, b, c], Operand::Output(0))
}

/// The node's own A, B and C (or one zero for products without C, read with strides 0 and
/// beta 0).
fn node_sources(has_c: bool) -> (Operand, Operand, Operand) {
    let c = if has_c {
        Operand::Input(2)
    } else {
        Operand::Data(Arc::new(vec![0]))
    };
    (Operand::Input(0), Operand::Input(1), c)
}

/// Strides that broadcast a C of `shape` onto `[m, n]`.
fn c_strides(shape: &[usize], m: usize, n: usize) -> Result<(usize, usize), Reason> {
    let (r, c) = match shape {
        [] => (1, 1),
        [c] => (1, *c),
        [r, c] => (*r, *c),
        _ => {
            return Err(format!(
                "C of shape {shape:?} does not broadcast to [{m}, {n}]"
            ))
        }
    };
    if (r != 1 && r != m) || (c != 1 && c != n) {
        return Err(format!(
            "C of shape {shape:?} does not broadcast to [{m}, {n}]"
        ));
    }
    Ok((if r == 1 { 0 } else { c }, if c == 1 { 0 } else { 1 }))
}

fn matmul(_: &MatMul, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let (a, b) = (node.shape(0)?, node.shape(1)?);
    let s = MatMulShapes::new(a, b).map_err(|e| e.to_string())?;
    let (ai, bi) = s.batch_indices();
    let b_rows = if b.len() == 1 { (1, 0) } else { (s.n, 1) };
    let product = Product {
        m: s.m,
        n: s.n,
        k: s.k,
        a: (s.k, 1),
        b: b_rows,
        c: None,
        alpha: 1.0,
        beta: 0.0,
        batches: ai
            .iter()
            .zip(&bi)
            .map(|(&x, &y)| (x * s.m * s.k, y * s.k * s.n))
            .collect(),
        activation: None,
        sources: node_sources(false),
    };
    lowered(&node, product)
}

fn fully_connected(fc: &FullyConnected, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let bias = if node.has(2) {
        Some(node.shape(2)?)
    } else {
        None
    };
    let (m, k, n, _) = fc_dims(node.shape(0)?, node.shape(1)?, bias).map_err(|e| e.to_string())?;
    let product = Product {
        m,
        n,
        k,
        a: (k, 1),
        b: (n, 1),
        c: bias.map(|_| (0, 1)),
        alpha: 1.0,
        beta: 1.0,
        batches: vec![(0, 0)],
        activation: fc.activation,
        sources: node_sources(bias.is_some()),
    };
    lowered(&node, product)
}

fn gemm(g: &Gemm, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let (a, b) = (node.shape(0)?, node.shape(1)?);
    let (&[a0, a1], &[b0, b1]) = (a, b) else {
        return Err(format!("Gemm of shapes {a:?} and {b:?}"));
    };
    let (m, k) = if g.trans_a { (a1, a0) } else { (a0, a1) };
    let n = if g.trans_b { b0 } else { b1 };
    let c = if node.has(2) {
        Some(c_strides(node.shape(2)?, m, n)?)
    } else {
        None
    };
    let product = Product {
        m,
        n,
        k,
        a: if g.trans_a { (1, m) } else { (k, 1) },
        b: if g.trans_b { (1, k) } else { (n, 1) },
        c,
        alpha: g.alpha,
        beta: g.beta,
        batches: vec![(0, 0)],
        activation: g.activation,
        sources: node_sources(c.is_some()),
    };
    lowered(&node, product)
}

/// The node's product as its one step (none for an empty output, whose epilogue is still
/// checked so the verdict does not depend on the shape).
fn lowered(node: &Node, product: Product) -> Result<Lowered, Reason> {
    let step = step(product)?;
    if numel(node.out_shape(0)?) == 0 {
        return Ok(Lowered::steps(vec![]));
    }
    Ok(Lowered::steps(vec![step]))
}
