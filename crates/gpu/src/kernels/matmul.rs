//! MatMul (batched, broadcast), Gemm and FullyConnected: one kernel,
//! `Y[b, i, j] = act(alpha * sum_k A[b, i, k] * B[b, k, j] + beta * C[i, j])`, where each
//! operand is read through its own strides (transposes and broadcasts cost nothing) and each
//! invocation computes 4 adjacent columns of a row when N allows, so it loads A once for four.

use super::{activation_fn, f, numel, u, Lowered, Node, Operand, Reason, Step};
use ferrolite_core::ops::linalg::fully_connected::{fc_dims, FullyConnected};
use ferrolite_core::ops::linalg::gemm::Gemm;
use ferrolite_core::ops::linalg::matmul::{MatMul, MatMulShapes};
use ferrolite_core::ops::nn::activation::Activation;
use std::any::Any;
use std::sync::Arc;

/// One product in the kernel's terms.
struct Product {
    m: usize,
    n: usize,
    k: usize,
    /// Row and column strides of A, B and C (C's are 0 where it broadcasts).
    a: (usize, usize),
    b: (usize, usize),
    c: Option<(usize, usize)>,
    alpha: f32,
    beta: f32,
    /// Per output batch, the offsets of its A and B matrices.
    batches: Vec<(usize, usize)>,
    activation: Option<Activation>,
}

fn step(p: Product) -> Step {
    let block = if p.n.is_multiple_of(4) { 4 } else { 1 };
    let mut params: Vec<u32> = [p.m, p.n, p.k, p.a.0, p.a.1, p.b.0, p.b.1]
        .iter()
        .map(|&v| u(v))
        .collect();
    let (c_rs, c_cs) = p.c.unwrap_or((0, 0));
    params.extend([
        u(c_rs),
        u(c_cs),
        f(p.alpha),
        f(if p.c.is_some() { p.beta } else { 0.0 }),
    ]);
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
        act = activation_fn(p.activation),
    );
    let threads = p.batches.len() * p.m * (p.n / block);
    Step::threads(
        threads,
        body,
        params,
        vec![
            Operand::Input(0),
            Operand::Input(1),
            c_operand(p.c.is_some()),
        ],
        Operand::Output(0),
    )
}

/// C, or one zero for products without it (read with strides 0 and beta 0).
fn c_operand(present: bool) -> Operand {
    if present {
        Operand::Input(2)
    } else {
        Operand::Data(Arc::new(vec![0]))
    }
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

pub(crate) fn lower(node: &Node, op: &dyn Any) -> Result<Option<Lowered>, Reason> {
    let product = if op.is::<MatMul>() {
        let (a, b) = (node.shape(0)?, node.shape(1)?);
        let s = MatMulShapes::new(a, b).map_err(|e| e.to_string())?;
        let (ai, bi) = s.batch_indices();
        let b_rows = if b.len() == 1 { (1, 0) } else { (s.n, 1) };
        Product {
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
        }
    } else if let Some(fc) = op.downcast_ref::<FullyConnected>() {
        let bias = if node.has(2) {
            Some(node.shape(2)?)
        } else {
            None
        };
        let (m, k, n, _) =
            fc_dims(node.shape(0)?, node.shape(1)?, bias).map_err(|e| e.to_string())?;
        Product {
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
        }
    } else if let Some(g) = op.downcast_ref::<Gemm>() {
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
        Product {
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
        }
    } else {
        return Ok(None);
    };
    if numel(node.out_shape(0)?) == 0 {
        return Ok(Some(Lowered::steps(vec![])));
    }
    Ok(Some(Lowered::steps(vec![step(product)])))
}
