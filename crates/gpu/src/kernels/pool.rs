//! MaxPool and AveragePool (1-D and 2-D windows, padding, dilation, ceil mode, either
//! count_include_pad) and the global pools: one invocation per output value.

use super::{add, numel, u, Lowered, Node, Operand, Reason, Registry, Req, Step};
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};

pub(crate) fn register(reg: &mut Registry) {
    add::<Pool>(reg, "pool", "Pool", pool);
    add::<GlobalPool>(reg, "global_pool", "GlobalPool", global_pool);
}

fn pool(p: &Pool, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    if p.with_indices || node.req.outputs.len() > 1 {
        return Err("MaxPool with the indices output".into());
    }
    let kind = match p.kind {
        PoolKind::Max => 0,
        PoolKind::Average => 1,
        PoolKind::Lp => return Err("LpPool".into()),
    };
    let x = node.shape(0)?;
    let geom = p.geometry(x).map_err(|e| e.to_string())?;
    // A 1-D window is a 2-D one of height 1.
    let (gh, gw) = match geom.as_slice() {
        [w] => (None, w),
        [h, w] => (Some(h), w),
        _ => {
            return Err(format!(
                "{}-D pooling (the GPU runs 1-D and 2-D)",
                geom.len()
            ))
        }
    };
    let (h, kh, sh, dh, ph, phe, oh) = gh.map_or((1, 1, 1, 1, 0, 0, 1), |g| {
        (
            g.input,
            g.kernel,
            g.stride,
            g.dilation,
            g.pad_begin,
            g.pad_end,
            g.output,
        )
    });
    let planes = x[0] * x[1];
    let params = [
        planes,
        h,
        gw.input,
        oh,
        gw.output,
        kh,
        gw.kernel,
        sh,
        gw.stride,
        dh,
        gw.dilation,
        ph,
        gw.pad_begin,
        phe,
        gw.pad_end,
        kind,
        p.count_include_pad as usize,
    ]
    .iter()
    .map(|&v| u(v))
    .collect();
    let body = "fn run(i: u32) {
  let H = i32(p[2]); let W = i32(p[3]); let OH = p[4]; let OW = p[5];
  let ow = i % OW;
  let oh = (i / OW) % OH;
  let plane = i / (OW * OH);
  let xbase = plane * p[2] * p[3];
  let is_max = p[16] == 0u;
  var acc = select(0.0, -3.4028235e38, is_max);
  var any = false;
  var count = 0u;
  for (var ky = 0u; ky < p[6]; ky = ky + 1u) {
    let ih = i32(oh * p[8] + ky * p[10]) - i32(p[12]);
    for (var kx = 0u; kx < p[7]; kx = kx + 1u) {
      let iw = i32(ow * p[9] + kx * p[11]) - i32(p[13]);
      if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
        let v = in0[xbase + u32(ih) * p[3] + u32(iw)];
        if (is_max) {
          if (!any || v > acc) { acc = v; }
        } else {
          acc = acc + v;
        }
        any = true;
        count = count + 1u;
      } else if (p[17] == 1u && ih < H + i32(p[14]) && iw < W + i32(p[15])) {
        count = count + 1u;
      }
    }
  }
  if (is_max) {
    out[i] = select(bitcast<f32>(0xff800000u), acc, any);
  } else {
    out[i] = acc / f32(count);
  }
}
"
    .to_string();
    let n = numel(node.out_shape(0)?);
    Ok(Lowered::steps(vec![Step::threads(
        n,
        body,
        params,
        vec![Operand::Input(0)],
        Operand::Output(0),
    )]))
}

fn global_pool(g: &GlobalPool, r: &Req) -> Result<Lowered, Reason> {
    let node = Node::of(r);
    let x = node.shape(0)?;
    if x.len() < 2 {
        return Err(format!("global pooling of rank {} input", x.len()));
    }
    let plane: usize = x[2..].iter().product();
    let body = match g.kind {
        PoolKind::Max => {
            "fn run(i: u32) {
  var acc = bitcast<f32>(0xff800000u);
  for (var k = 0u; k < p[1]; k = k + 1u) { acc = max(acc, in0[i * p[1] + k]); }
  out[i] = acc;
}
"
        }
        PoolKind::Average => {
            "fn run(i: u32) {
  var acc = 0.0;
  for (var k = 0u; k < p[1]; k = k + 1u) { acc = acc + in0[i * p[1] + k]; }
  out[i] = acc / f32(p[1]);
}
"
        }
        PoolKind::Lp => return Err("GlobalLpPool".into()),
    };
    Ok(Lowered::steps(vec![Step::threads(
        x[0] * x[1],
        body.to_string(),
        vec![u(plane)],
        vec![Operand::Input(0)],
        Operand::Output(0),
    )]))
}
