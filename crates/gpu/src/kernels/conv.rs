//! Conv (plain, depthwise, grouped; 1-D and 2-D) and ConvTranspose, with the bias and the
//! fused epilogue activation.
//!
//! Conv: each invocation computes 4 adjacent output pixels of a row for a block of output
//! channels of one group (4 when the group has a multiple of 4, else 1), so every input value
//! it loads serves the whole block and every weight the 4 pixels. The weights are laid out again
//! at compile so a block's weights for one tap are adjacent: `[M/B][C/group][KH][KW][B]`.

use super::matmul::{self, Product};
use super::{activation_fn, add, numel, u, Lowered, Node, Operand, Reason, Registry, Req, Step};
use ferrolite_core::ops::linalg::conv::Conv;
use ferrolite_core::ops::linalg::conv_transpose::ConvTranspose;
use std::sync::Arc;

pub(crate) fn register(reg: &mut Registry) {
    add::<Conv>(reg, "conv", "Conv", conv);
    add::<ConvTranspose>(reg, "conv_transpose", "ConvTranspose", conv_transpose);
}

/// 2-D view of a 1-D or 2-D spatial shape.
fn spatial2(v: &[usize], one: usize) -> Result<[usize; 2], Reason> {
    match v {
        [w] => Ok([one, *w]),
        [h, w] => Ok([*h, *w]),
        _ => Err(format!(
            "{}-D convolution (the GPU runs 1-D and 2-D)",
            v.len()
        )),
    }
}

/// The sizes both convolution kernels read as `p[1..=17]`: N, C, H, W, M, OH, OW, KH, KW,
/// the strides, dilations and begin pads (H then W), and the channels per group in and out.
fn sizes_params(sizes: [usize; 17]) -> Vec<u32> {
    sizes.iter().map(|&v| u(v)).collect()
}

/// The bias (zeros without one) as data for the kernels.
fn bias_data(node: &Node, m: usize) -> Result<Operand, Reason> {
    let bias = if node.has(2) {
        let b = node.constant_f32(2, "bias")?;
        if b.len() != m {
            return Err(format!("bias has {} values for {m} channels", b.len()));
        }
        b
    } else {
        vec![0.0; m]
    };
    Ok(Operand::Data(Arc::new(
        bias.iter().map(|v| v.to_bits()).collect(),
    )))
}

fn conv(c: &Conv, r: &Req) -> Result<Lowered, Reason> {
    let node = &Node::of(r);
    let (x, w) = (node.shape(0)?, node.shape(1)?);
    let s = c.shapes(x, w).map_err(|e| e.to_string())?;
    let g = &s.geometry;
    let [h, wd] = spatial2(&g.input, 1)?;
    let [kh, kw] = spatial2(&g.kernel, 1)?;
    let [sh, sw] = spatial2(&g.strides, 1)?;
    let [dh, dw] = spatial2(&g.dilations, 1)?;
    let [ph, pw] = spatial2(&g.pad_begin, 0)?;
    let [oh, ow] = spatial2(&g.output, 1)?;
    let (n, ch, m, group) = (s.batch, s.in_channels, s.out_channels, s.group);
    let (cg, mg) = (ch / group, m / group);
    if group == 1 && kh * kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 {
        return pointwise_product(node, c, (n, ch, m, oh * ow));
    }
    // Before the weights are laid out: an epilogue without WGSL refuses the node.
    let act = activation_fn(c.activation)?;
    let block = if mg.is_multiple_of(4) { 4 } else { 1 };
    let weights = node.constant_f32(1, "W")?;
    let taps = kh * kw;
    // [M/B][Cg][taps][B]
    let mut relaid = vec![0u32; weights.len()];
    for oc in 0..m {
        let (mb, j) = (oc / block, oc % block);
        for c in 0..cg {
            for t in 0..taps {
                let from = (oc * cg + c) * taps + t;
                let to = ((mb * cg + c) * taps + t) * block + j;
                relaid[to] = weights[from].to_bits();
            }
        }
    }
    let bias = bias_data(node, m)?;
    let mut params = sizes_params([
        n, ch, h, wd, m, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, cg, mg,
    ]);
    params.push(u(m / block));
    // Pixels per invocation along the row: 4 (a vec4 of accumulators per output channel).
    let row_blocks = ow.div_ceil(4);
    params.push(u(row_blocks));
    let body = format!(
        "{act}const B: u32 = {block}u;
fn run(i: u32) {{
  let H = p[3]; let W = p[4]; let M = p[5]; let OH = p[6]; let OW = p[7];
  let KH = p[8]; let KW = p[9]; let Cg = p[16]; let Mg = p[17];
  let SW = i32(p[11]);
  let owb = i % p[19];
  var t = i / p[19];
  let oh = t % OH;
  t = t / OH;
  let mb = t % p[18];
  let n = t / p[18];
  let m0 = mb * B;
  let g = m0 / Mg;
  let ow0 = owb * 4u;
  // Pixels past the row's end compute on zeros and are not written.
  let live = vec4<bool>(ow0 < OW, ow0 + 1u < OW, ow0 + 2u < OW, ow0 + 3u < OW);
  var acc: array<vec4<f32>, {block}>;
  for (var j = 0u; j < B; j = j + 1u) {{ acc[j] = vec4<f32>(in2[m0 + j]); }}
  let ih0 = i32(oh * p[10]) - i32(p[14]);
  let iw0 = i32(ow0 * p[11]) - i32(p[15]);
  for (var c = 0u; c < Cg; c = c + 1u) {{
    let xplane = ((n * p[2] + g * Cg + c) * H) * W;
    let wbase = ((mb * Cg + c) * KH * KW) * B;
    for (var ky = 0u; ky < KH; ky = ky + 1u) {{
      let ih = ih0 + i32(ky * p[12]);
      if (ih < 0 || ih >= i32(H)) {{ continue; }}
      let xrow = i32(xplane + u32(ih) * W);
      for (var kx = 0u; kx < KW; kx = kx + 1u) {{
        let iw = vec4<i32>(iw0 + i32(kx * p[13])) + vec4<i32>(0, SW, 2 * SW, 3 * SW);
        let ok = (iw >= vec4<i32>(0)) & (iw < vec4<i32>(i32(W))) & live;
        // Clamped addresses keep every load in bounds; masked lanes read as 0.
        let at = vec4<u32>(clamp(iw, vec4<i32>(0), vec4<i32>(i32(W) - 1)) + xrow);
        let xv = select(vec4<f32>(0.0), vec4<f32>(in0[at.x], in0[at.y], in0[at.z], in0[at.w]), ok);
        let wi = wbase + (ky * KW + kx) * B;
        for (var j = 0u; j < B; j = j + 1u) {{ acc[j] = acc[j] + xv * in1[wi + j]; }}
      }}
    }}
  }}
  for (var j = 0u; j < B; j = j + 1u) {{
    let o = ((n * M + m0 + j) * OH + oh) * OW + ow0;
    let a = acc[j];
    out[o] = act(a.x);
    if (live.y) {{ out[o + 1u] = act(a.y); }}
    if (live.z) {{ out[o + 2u] = act(a.z); }}
    if (live.w) {{ out[o + 3u] = act(a.w); }}
  }}
}}
",
    );
    let threads = n * (m / block) * oh * row_blocks;
    let step = Step::threads(
        threads,
        body,
        params,
        vec![Operand::Input(0), Operand::Data(Arc::new(relaid)), bias],
        Operand::Output(0),
    );
    Ok(Lowered::steps(vec![step]))
}

/// A pointwise convolution (1x1, stride 1, no padding, no groups) is a matrix product per
/// image, `W[M, C] x X[C, H*W]`, and runs on the matmul kernel (measured 1.7x faster than the
/// direct kernel on lavapipe). Unfolding other kernels into a product (im2col) measured
/// slower than the direct kernel, so they stay direct.
fn pointwise_product(
    node: &Node,
    c: &Conv,
    (n, ch, m, pixels): (usize, usize, usize, usize),
) -> Result<Lowered, Reason> {
    let bias = bias_data(node, m)?;
    let product = Product {
        m,
        n: pixels,
        k: ch,
        a: (ch, 1),
        b: (pixels, 1),
        c: Some((1, 0)),
        alpha: 1.0,
        beta: 1.0,
        batches: (0..n).map(|i| (0, i * ch * pixels)).collect(),
        activation: c.activation,
        sources: (Operand::Input(1), Operand::Input(0), bias),
    };
    Ok(Lowered::steps(vec![matmul::step(product)?]))
}

fn conv_transpose(c: &ConvTranspose, r: &Req) -> Result<Lowered, Reason> {
    let node = &Node::of(r);
    let (x, w) = (node.shape(0)?, node.shape(1)?);
    let s = c.shapes(x, w).map_err(|e| e.to_string())?;
    let [h, wd] = spatial2(&s.input, 1)?;
    let [kh, kw] = spatial2(&s.kernel, 1)?;
    let [sh, sw] = spatial2(&s.strides, 1)?;
    let [dh, dw] = spatial2(&s.dilations, 1)?;
    let pads: Vec<usize> = s
        .pad_begin
        .iter()
        .map(|&p| p as i32 as u32 as usize)
        .collect();
    let [ph, pw] = spatial2(&pads, 0)?;
    let [oh, ow] = spatial2(&s.output, 1)?;
    let (n, ch, m, group) = (s.batch, s.in_channels, s.out_channels, s.group);
    let bias = bias_data(node, m)?;
    let act = activation_fn(c.activation)?;
    let params = sizes_params([
        n,
        ch,
        h,
        wd,
        m,
        oh,
        ow,
        kh,
        kw,
        sh,
        sw,
        dh,
        dw,
        ph,
        pw,
        ch / group,
        m / group,
    ]);
    let body = format!(
        "{act}fn run(i: u32) {{
  let H = p[3]; let W = p[4]; let M = p[5]; let OH = p[6]; let OW = p[7];
  let KH = p[8]; let KW = p[9]; let Cg = p[16]; let Mg = p[17];
  let SH = i32(p[10]); let SW = i32(p[11]);
  let ow = i % OW;
  var t = i / OW;
  let oh = t % OH;
  t = t / OH;
  let m = t % M;
  let n = t / M;
  let g = m / Mg;
  let mm = m % Mg;
  var acc = in2[m];
  for (var c = 0u; c < Cg; c = c + 1u) {{
    let ic = g * Cg + c;
    let xplane = (n * p[2] + ic) * H * W;
    let wplane = (ic * Mg + mm) * KH * KW;
    for (var ky = 0u; ky < KH; ky = ky + 1u) {{
      let th = i32(oh) + bitcast<i32>(p[14]) - i32(ky * p[12]);
      if (th < 0 || th % SH != 0) {{ continue; }}
      let ih = th / SH;
      if (ih >= i32(H)) {{ continue; }}
      for (var kx = 0u; kx < KW; kx = kx + 1u) {{
        let tw = i32(ow) + bitcast<i32>(p[15]) - i32(kx * p[13]);
        if (tw < 0 || tw % SW != 0) {{ continue; }}
        let iw = tw / SW;
        if (iw >= i32(W)) {{ continue; }}
        acc = acc + in0[xplane + u32(ih) * W + u32(iw)] * in1[wplane + ky * KW + kx];
      }}
    }}
  }}
  out[i] = act(acc);
}}
",
    );
    let step = Step::threads(
        numel(&s.output_shape()),
        body,
        params,
        vec![Operand::Input(0), Operand::Input(1), bias],
        Operand::Output(0),
    );
    Ok(Lowered::steps(vec![step]))
}
