//! `merge-concat-convs`: blocked convolutions that read the same input and whose outputs are
//! only concatenated over channels (SqueezeNet's fire modules: a 1x1 and a 3x3 expand conv)
//! become one convolution writing the concatenation, so the Concat's copy disappears and the
//! input is read once.
//!
//! The merged convolution takes the largest kernel; a smaller kernel's weights sit inside it
//! at the offset its padding implies, zeros around them, so the merged op is an ordinary Conv
//! with the same result. Only blocked convolutions (after `layout-nchwc`) are merged: the
//! blocked kernel skips the taps whose weights are all zero for its output blocks, while the
//! plain GEMM path would multiply them.

use super::rewrite::{constant, info, input, producer, rewrite_all, Arg, Rewrite, Uses};
use super::Pass;
use crate::ops::layout::{plain_shape, Nchwc};
use crate::ops::linalg::conv::{Conv, ConvShapes};
use crate::ops::linalg::conv_geometry::ConvParams;
use crate::ops::nn::geometry::AutoPad;
use crate::ops::shape::concat::Concat;
use crate::{DType, Graph, Result, Tensor, ValueId};
use std::sync::Arc;

pub struct MergeConcatConvs;

/// One convolution of a candidate merge.
struct Part<'a> {
    node: usize,
    conv: &'a Conv,
    shapes: ConvShapes,
    w: &'a Tensor,
    bias: Option<&'a Tensor>,
}

/// The blocked group-1 Conv producing `v`, when only the Concat `cat` reads `v`.
fn part<'a>(g: &'a Graph, uses: &Uses, v: ValueId, cat: usize) -> Option<Part<'a>> {
    let p = producer(g, v)?;
    uses.single(v).filter(|&r| r == cat)?;
    let n = &g.nodes[p];
    let nchwc = n.op.as_any().downcast_ref::<Nchwc>()?;
    let conv = nchwc.inner.as_any().downcast_ref::<Conv>()?;
    if !nchwc.blocked_input || conv.group != 1 {
        return None;
    }
    let x = plain_shape(&info(g, input(n, 0)?)?.shape).ok()?;
    let w = constant(g, input(n, 1)?)?;
    let bias = match input(n, 2) {
        Some(b) => Some(constant(g, b)?),
        None => None,
    };
    if w.dtype() != DType::F32 || bias.is_some_and(|b| b.dtype() != DType::F32) {
        return None;
    }
    let shapes = conv.shapes(&x, w.shape()).ok()?;
    (shapes.geometry.input.len() == 2).then_some(Part {
        node: p,
        conv,
        shapes,
        w,
        bias,
    })
}

/// Where part `p`'s kernel sits inside the kernel of `big` (taps per dimension), when every
/// window of `p` is a sub-window of `big`'s window at the same output.
fn offset(p: &Part, big: &Part) -> Option<[usize; 2]> {
    let (g, b) = (&p.shapes.geometry, &big.shapes.geometry);
    if g.strides != b.strides || g.dilations != b.dilations || g.output != b.output {
        return None;
    }
    let along = |d: usize| {
        // Tap t of the part reads where tap t + o of the merged conv does when
        // pad_begin(part) = pad_begin(merged) - o * dilation.
        let shift = b.pad_begin[d].checked_sub(g.pad_begin[d])?;
        let o = shift / g.dilations[d];
        (shift % g.dilations[d] == 0 && o + g.kernel[d] <= b.kernel[d]).then_some(o)
    };
    Some([along(0)?, along(1)?])
}

fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let cat = &g.nodes[i];
    let c = cat.op.as_any().downcast_ref::<Concat>()?;
    // Blocked tensors are [N, C/8, H, W, 8]: channels are axis 1.
    if crate::op::normalize_axis(c.axis, 5).ok()? != 1 || cat.inputs.len() < 2 {
        return None;
    }
    let parts = cat
        .inputs
        .iter()
        .map(|v| part(g, uses, (*v)?, i))
        .collect::<Option<Vec<_>>>()?;
    let x = input(&g.nodes[parts[0].node], 0)?;
    let distinct = parts
        .iter()
        .enumerate()
        .all(|(k, p)| parts[..k].iter().all(|q| q.node != p.node));
    let same = parts.iter().all(|p| {
        input(&g.nodes[p.node], 0) == Some(x) && p.conv.activation == parts[0].conv.activation
    });
    if !distinct || !same {
        return None;
    }
    // The largest kernel holds the others.
    let big = parts
        .iter()
        .max_by_key(|p| p.shapes.geometry.kernel.iter().product::<usize>())?;
    let offsets = parts
        .iter()
        .map(|p| offset(p, big))
        .collect::<Option<Vec<_>>>()?;
    let (bg, cin) = (&big.shapes.geometry, big.shapes.in_channels);
    let (kh, kw) = (bg.kernel[0], bg.kernel[1]);
    let m: usize = parts.iter().map(|p| p.shapes.out_channels).sum();
    let mut w = vec![0f32; m * cin * kh * kw];
    let mut bias = Vec::with_capacity(m);
    let mut o0 = 0;
    for (p, [dy, dx]) in parts.iter().zip(offsets) {
        let (ph, pw) = (p.shapes.geometry.kernel[0], p.shapes.geometry.kernel[1]);
        let src = p.w.as_slice::<f32>().ok()?;
        for (j, &v) in src.iter().enumerate() {
            let (o, ci) = (j / (cin * ph * pw), j / (ph * pw) % cin);
            let (ty, tx) = (j / pw % ph, j % pw);
            w[(((o0 + o) * cin + ci) * kh + ty + dy) * kw + tx + dx] = v;
        }
        match p.bias {
            Some(b) => bias.extend_from_slice(b.as_slice::<f32>().ok()?),
            None => bias.resize(bias.len() + p.shapes.out_channels, 0.0),
        }
        o0 += p.shapes.out_channels;
    }
    let conv = Conv {
        params: ConvParams {
            kernel_shape: Some(bg.kernel.clone()),
            strides: Some(bg.strides.clone()),
            dilations: Some(bg.dilations.clone()),
            pads: Some([bg.pad_begin.clone(), bg.pad_end.clone()].concat()),
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
        activation: big.conv.activation,
    };
    let op = Nchwc {
        inner: Arc::new(conv),
        blocked_input: true,
    };
    Some(Rewrite {
        target: Some(i),
        op: Some(Arc::new(op)),
        inputs: vec![
            Arg::Value(x),
            Arg::Const("w", Tensor::from_vec(&[m, cin, kh, kw], w).ok()?),
            Arg::Const("b", Tensor::from_vec(&[m], bias).ok()?),
        ],
        // Named after the convolutions it merges, like `Conv.2+Conv.3`.
        name: Some(
            parts
                .iter()
                .map(|p| g.nodes[p.node].name.as_str())
                .collect::<Vec<_>>()
                .join("+"),
        ),
        remove: parts.iter().map(|p| p.node).collect(),
        rewire: None,
    })
}

impl Pass for MergeConcatConvs {
    fn name(&self) -> &'static str {
        "merge-concat-convs"
    }

    fn description(&self) -> &'static str {
        "merge blocked Convs on one input whose outputs are concatenated into one Conv"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        rewrite_all(graph, matcher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::activation::Activation;
    use crate::passes::testutil::{check_passes, data};

    /// A conv of a merge test: kernel, pads, activation, dilation.
    type Spec = (usize, [usize; 4], Option<Activation>, usize);

    /// `x [1, 16, 7, 6]` -> a 1x1 Conv -> Convs of `convs`, each 8 more channels than the
    /// last -> Concat -> y.
    fn fire(g: &mut Graph, convs: &[Spec]) {
        let x = g.add_value("x");
        g.inputs.push(x);
        let w = g.add_constant("sq.w", data(&[16, 16, 1, 1], 0.3));
        let sq = g
            .add_op("sq", Arc::new(Conv::default()), vec![Some(x), Some(w)], 1)
            .unwrap()[0];
        let mut outs = Vec::new();
        for (i, &(k, pads, act, d)) in convs.iter().enumerate() {
            let w = g.add_constant(format!("e{i}.w"), data(&[8 * (i + 1), 16, k, k], 0.3));
            let b = g.add_constant(format!("e{i}.b"), data(&[8 * (i + 1)], 0.1));
            let mut op = Conv {
                activation: act,
                ..Conv::default()
            };
            op.params.pads = Some(pads.to_vec());
            op.params.dilations = Some(vec![d, d]);
            let ins = vec![Some(sq), Some(w), Some(b)];
            outs.push(g.add_op(format!("e{i}"), Arc::new(op), ins, 1).unwrap()[0]);
        }
        let cat = Arc::new(Concat { axis: 1 });
        let y = g.add_op("cat", cat, outs.into_iter().map(Some).collect(), 1);
        g.outputs.push(y.unwrap()[0]);
    }

    const RELU: Option<Activation> = Some(Activation::Relu);

    #[test]
    fn merges_a_fire_module() {
        // 1x1 and 3x3 (SqueezeNet), and three kernels with uneven pads.
        let cases: [Vec<Spec>; 2] = [
            vec![(1, [0; 4], RELU, 1), (3, [1; 4], RELU, 1)],
            vec![
                (3, [1, 0, 1, 2], None, 1),
                (1, [0; 4], None, 1),
                (5, [2, 1, 2, 3], None, 1),
            ],
        ];
        for convs in cases {
            let mut g = Graph::new();
            fire(&mut g, &convs);
            let x = data(&[1, 16, 7, 6], 1.0);
            let ops = ["ToNchwc", "NchwcConv", "NchwcConv", "FromNchwc"];
            let opt = check_passes(&g, &x, &ops, &[]);
            let merged = opt.nodes[2].inputs[1].unwrap();
            let m = 8 * convs.len() * (convs.len() + 1) / 2;
            assert_eq!(opt.value(merged).info.as_ref().unwrap().shape[0], m);
            // Disabled, the Concat stays.
            let ops: Vec<&str> = ["ToNchwc", "NchwcConv"]
                .into_iter()
                .chain(vec!["NchwcConv"; convs.len()])
                .chain(["Concat", "FromNchwc"])
                .collect();
            check_passes(&g, &x, &ops, &["merge-concat-convs"]);
        }
    }

    #[test]
    fn leaves_convs_that_do_not_line_up() {
        // Different activations; different dilations; a 3x3 kernel dilated by 2 whose pad
        // puts the 1x1 window between its taps.
        let cases: [Vec<Spec>; 3] = [
            vec![(1, [0; 4], RELU, 1), (3, [1; 4], None, 1)],
            vec![(3, [2; 4], None, 2), (3, [1; 4], None, 1)],
            vec![(1, [0; 4], None, 2), (3, [1, 1, 3, 3], None, 2)],
        ];
        for convs in cases {
            let mut g = Graph::new();
            fire(&mut g, &convs);
            let x = data(&[1, 16, 7, 6], 1.0);
            let ops = [
                "ToNchwc",
                "NchwcConv",
                "NchwcConv",
                "NchwcConv",
                "Concat",
                "FromNchwc",
            ];
            check_passes(&g, &x, &ops, &[]);
        }
    }
}
