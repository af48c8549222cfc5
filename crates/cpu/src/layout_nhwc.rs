//! `layout-nhwc-int8`: runs integer convolutions, and the int8 element-wise ops between them,
//! on channels-last tensors (see [`ferrolite_core::ops::layout::Nhwc`]), with a Transpose at
//! each edge of a channels-last region.
//!
//! Channels last is the integer convolution's own layout: a pixel's channels are one GEMM row,
//! gathered per tap without an im2col matrix ([`crate::qconv_nhwc`]), and its output is what
//! the next convolution reads. Walking the nodes in order, a value gets a channels-last twin
//! when its producer runs channels-last:
//! - a 4-D QLinearConv with constant weights and bias that the channels-last kernel takes
//!   (group 1 or depthwise); its input gets a twin by a Transpose when it has none;
//! - int8 MaxPool (2-D, without indices) on a twin;
//! - QLinearConcat over the channel axis of twins (then over their last axis);
//! - QLinearGlobalAveragePool of a twin, as its `channels_last` form: a classifier's last
//!   feature map is not transposed back only to be averaged (its `[N, 1, 1, C]` output is
//!   the plain `[N, C, 1, 1]` in memory);
//! - element-wise ops whose every operand is a twin of the output's shape or a single value:
//!   QLinearAdd, QLinearMul and QdqBinary, and a QDQ model's per-tensor DequantizeLinear,
//!   float Add and QuantizeLinear around its residual connections (element by element, the
//!   layout does not matter).
//!
//! Any other reader of a value that only exists channels-last gets a Transpose back in front;
//! graph outputs keep their plain values.

use crate::layout_pass::rewrite_with_twins;
use crate::{qconv_nhwc, qpool_nhwc};
use ferrolite_core::ops::layout::{Nhwc, FROM_NHWC, TO_NHWC};
use ferrolite_core::ops::nn::pool::Pool;
use ferrolite_core::ops::quant::{QLinearConcat, QLinearConv, QLinearGlobalAveragePool};
use ferrolite_core::ops::shape::transpose::Transpose;
use ferrolite_core::passes::rewrite::{constant, info, input};
use ferrolite_core::passes::Pass;
use ferrolite_core::{DType, Graph, Node, Op, Result, TensorInfo, ValueId};
use std::collections::HashMap;
use std::sync::Arc;

pub struct LayoutNhwcInt8;

/// The fewest channels-last convolutions per Transpose at a region's edge for the pass to
/// keep its rewrite (resnet18, squeezenet1_1 and mobilenet_v2 have 5-26; mobilenet_v3_small
/// and shufflenet_v2 about one, and were 1.3-1.4x slower channels-last).
const MIN_CONVS_PER_EDGE: usize = 4;

/// The Transposes a graph has before the pass.
fn count_in(g: &Graph) -> usize {
    g.nodes
        .iter()
        .filter(|n| n.op.name() == "Transpose")
        .count()
}

impl Pass for LayoutNhwcInt8 {
    fn name(&self) -> &'static str {
        "layout-nhwc-int8"
    }

    fn description(&self) -> &'static str {
        "run QLinearConv, and the int8 MaxPool, QLinearConcat and element-wise ops between them, on channels-last (NHWC) tensors"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        let mut trial = graph.clone();
        let changed = rewrite_with_twins(&mut trial, &mut convert, |g, plain, nhwc| {
            transpose(g, nhwc, plain, &FROM_NHWC)
        })?;
        let count = |name: &str| trial.nodes.iter().filter(|n| n.op.name() == name).count();
        let (convs, edges) = (
            count("NhwcQLinearConv"),
            count("Transpose") - count_in(graph),
        );
        // Channels last pay over long regions; a network whose regions are cut short (a
        // per-channel multiply of squeeze-excitation, a channel shuffle) would spend more on
        // the Transposes at their edges than the convolutions gain.
        if !changed || edges * MIN_CONVS_PER_EDGE > convs {
            return Ok(false);
        }
        *graph = trial;
        Ok(true)
    }
}

/// A Transpose writing `to` from `from` by `perm`.
fn transpose(g: &Graph, from: ValueId, to: ValueId, perm: &[usize; 4]) -> Node {
    let suffix = if *perm == TO_NHWC {
        "to_nhwc"
    } else {
        "from_nhwc"
    };
    Node {
        name: format!("{}/{suffix}", g.value(from).name),
        op: Arc::new(Transpose {
            perm: Some(perm.iter().map(|&a| a as i64).collect()),
        }),
        inputs: vec![Some(from)],
        outputs: vec![to],
    }
}

/// A new channels-last value for the 4-D plain `v`.
fn add_twin(g: &mut Graph, v: ValueId) -> Option<ValueId> {
    let i = g.value(v).info.clone()?;
    if i.shape.len() != 4 {
        return None;
    }
    let shape: Vec<usize> = TO_NHWC.iter().map(|&a| i.shape[a]).collect();
    let name = format!("{}/nhwc", g.value(v).name);
    let t = g.add_value(name);
    g.value_mut(t).info = Some(TensorInfo::new(i.dtype, shape));
    Some(t)
}

/// The element-wise ops that run on channels-last twins unchanged, when every operand is a
/// twin of the output's shape or a single value (a per-tensor scale or zero point).
const ELEMENTWISE: [&str; 12] = [
    "QLinearLookup",
    "QdqBinary",
    "QLinearAdd",
    "QLinearMul",
    "DequantizeLinear",
    "QuantizeLinear",
    "Add",
    "Mul",
    "Sub",
    "Relu",
    "Clip",
    "Sigmoid",
];

/// Whether `v` is a 4-D 8-bit tensor.
fn int8_4d(g: &Graph, v: ValueId) -> Option<&TensorInfo> {
    let i = info(g, v)?;
    (i.shape.len() == 4 && matches!(i.dtype, DType::U8 | DType::I8)).then_some(i)
}

/// The channels-last form of `node` (writing `y`'s new twin), or `None` when it stays plain.
/// May emit a Transpose for a convolution's input.
fn convert(
    g: &mut Graph,
    nodes: &mut Vec<Node>,
    twin: &mut HashMap<ValueId, ValueId>,
    node: &Node,
    y: ValueId,
) -> Option<Node> {
    let op = node.op.as_any();
    let mut inputs = node.inputs.clone();
    if ELEMENTWISE.contains(&node.op.name()) {
        let y_shape = info(g, y)?.shape.clone();
        if y_shape.len() != 4 {
            return None;
        }
        let mut any = false;
        for (slot, v) in node.inputs.iter().enumerate() {
            let Some(v) = *v else { continue };
            let i = info(g, v)?;
            if i.shape.iter().product::<usize>() == 1 {
                continue;
            }
            if i.shape != y_shape {
                return None;
            }
            inputs[slot] = Some(*twin.get(&v)?);
            any = true;
        }
        if !any {
            return None;
        }
        let yt = add_twin(g, y)?;
        twin.insert(y, yt);
        return Some(Node {
            name: node.name.clone(),
            op: node.op.clone(),
            inputs,
            outputs: vec![yt],
        });
    }
    int8_4d(g, y)?;
    let new_op: Arc<dyn Op> = if let Some(conv) = op.downcast_ref::<QLinearConv>() {
        let x = input(node, 0)?;
        let x_shape = int8_4d(g, x)?.shape.clone();
        let w = constant(g, input(node, 3)?)?;
        if let Some(Some(b)) = node.inputs.get(8) {
            constant(g, *b)?;
        }
        if qconv_nhwc::unsupported(conv, &x_shape, w.shape()).is_some() {
            return None;
        }
        let xt = match twin.get(&x) {
            Some(&t) => t,
            None => {
                let t = add_twin(g, x)?;
                nodes.push(transpose(g, x, t, &TO_NHWC));
                twin.insert(x, t);
                t
            }
        };
        inputs[0] = Some(xt);
        Arc::new(Nhwc {
            inner: node.op.clone(),
            nhwc_inputs: vec![0],
        })
    } else if let Some(pool) = op.downcast_ref::<Pool>() {
        let x = input(node, 0)?;
        if !qpool_nhwc::supported(pool, &int8_4d(g, x)?.shape) {
            return None;
        }
        inputs[0] = Some(*twin.get(&x)?);
        Arc::new(Nhwc {
            inner: node.op.clone(),
            nhwc_inputs: vec![0],
        })
    } else if let Some(c) = op.downcast_ref::<QLinearConcat>() {
        if ferrolite_core::op::normalize_axis(c.axis, 4).ok()? != 1 {
            return None;
        }
        // Inputs 2, 5, 8, ... are the tensors.
        for slot in (2..inputs.len()).step_by(3) {
            inputs[slot] = Some(*twin.get(&input(node, slot)?)?);
        }
        Arc::new(QLinearConcat { axis: 3 })
    } else if let Some(p) = op.downcast_ref::<QLinearGlobalAveragePool>() {
        if p.channels_last {
            return None;
        }
        inputs[0] = Some(*twin.get(&input(node, 0)?)?);
        Arc::new(QLinearGlobalAveragePool {
            channels_last: true,
        })
    } else {
        return None;
    };
    let yt = add_twin(g, y)?;
    twin.insert(y, yt);
    Some(Node {
        name: node.name.clone(),
        op: new_op,
        inputs,
        outputs: vec![yt],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CpuBackend;
    use ferrolite_core::ops::elementwise::{Binary, BinaryKind};
    use ferrolite_core::ops::linalg::conv_geometry::{AutoPad, ConvParams};
    use ferrolite_core::ops::nn::pool::PoolKind;
    use ferrolite_core::ops::quant::{DequantizeLinear, QLinearAdd, QuantizeLinear};
    use ferrolite_core::passes::{optimize, session_pipeline};
    use ferrolite_core::plan::{Backend, Plan};
    use ferrolite_core::Tensor;

    /// A u8 constant of `shape` with values spread over the whole range.
    fn u8s(g: &mut Graph, name: &str, shape: &[usize], seed: usize) -> ValueId {
        let n: usize = shape.iter().product();
        let v: Vec<u8> = (0..n).map(|i| ((i * 37 + seed * 11) % 256) as u8).collect();
        g.add_constant(name, Tensor::from_bytes(DType::U8, shape, &v).unwrap())
    }

    fn qconv(g: &mut Graph, name: &str, x: ValueId, cin: usize, cout: usize, k: usize) -> ValueId {
        let pad = k / 2;
        let scale = |g: &mut Graph, n: &str, s: f32| g.add_constant(n, Tensor::scalar(s));
        let xs = scale(g, &format!("{name}.xs"), 0.05);
        let xz = g.add_constant(format!("{name}.xz"), Tensor::scalar(128u8));
        let w = u8s(g, &format!("{name}.w"), &[cout, cin, k, k], cout + k);
        let ws = scale(g, &format!("{name}.ws"), 0.01);
        let wz = g.add_constant(format!("{name}.wz"), Tensor::scalar(128u8));
        let ys = scale(g, &format!("{name}.ys"), 0.05 * (cin * k * k) as f32 / 8.0);
        let yz = g.add_constant(format!("{name}.yz"), Tensor::scalar(128u8));
        let op = QLinearConv {
            params: ConvParams {
                kernel_shape: None,
                strides: None,
                dilations: None,
                pads: Some(vec![pad; 4]),
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
        };
        let inputs = [x, xs, xz, w, ws, wz, ys, yz].map(Some).to_vec();
        g.add_op(name, Arc::new(op), inputs, 1).unwrap()[0]
    }

    /// `convs` QLinearConvs on a `[1, 8, 10, 10]` u8 input, with a skip over the second and
    /// third (a QLinearAdd, or with `qdq` a QDQ model's DequantizeLinear -> float Add ->
    /// QuantizeLinear) and an int8 MaxPool after the fourth.
    fn net(convs: usize, qdq: bool) -> Graph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let mut y = qconv(&mut g, "c0", x, 8, 16, 3);
        let mut skip = y;
        for i in 1..convs {
            y = qconv(&mut g, &format!("c{i}"), y, 16, 16, [3, 1][i % 2]);
            if i == 2 {
                let s = g.add_constant("add.s", Tensor::scalar(0.1f32));
                let z = g.add_constant("add.z", Tensor::scalar(128u8));
                if qdq {
                    let dq = |g: &mut Graph, name: &str, v| {
                        let op = Arc::new(DequantizeLinear::default());
                        g.add_op(name, op, vec![Some(v), Some(s), Some(z)], 1)
                            .unwrap()[0]
                    };
                    let (a, b) = (dq(&mut g, "dq.y", y), dq(&mut g, "dq.skip", skip));
                    let add = Arc::new(Binary::new(BinaryKind::Add));
                    let sum = g.add_op("add", add, vec![Some(a), Some(b)], 1).unwrap()[0];
                    let q = Arc::new(QuantizeLinear::default());
                    let inputs = vec![Some(sum), Some(s), Some(z)];
                    y = g.add_op("q", q, inputs, 1).unwrap()[0];
                } else {
                    let inputs = [y, s, z, skip, s, z, s, z].map(Some).to_vec();
                    y = g.add_op("add", Arc::new(QLinearAdd), inputs, 1).unwrap()[0];
                }
                skip = y;
            }
            if i == 3 {
                let pool = Pool {
                    kind: PoolKind::Max,
                    kernel_shape: vec![2, 2],
                    strides: vec![2, 2],
                    ..Pool::default()
                };
                y = g.add_op("pool", Arc::new(pool), vec![Some(y)], 1).unwrap()[0];
            }
        }
        g.outputs.push(y);
        g
    }

    /// The graph's op names after the CPU pipeline (less `disabled`), and its output.
    fn optimized(g: &Graph, disabled: &[&str]) -> (Vec<String>, Tensor) {
        let backend = CpuBackend::default();
        let mut g = g.clone();
        let x: Vec<u8> = (0..800).map(|i| (i * 7 % 256) as u8).collect();
        let x = Tensor::from_bytes(DType::U8, &[1, 8, 10, 10], &x).unwrap();
        let disabled: Vec<String> = disabled.iter().map(|d| d.to_string()).collect();
        let pipeline = session_pipeline(None, backend.passes());
        let dynamic = optimize(&mut g, &[TensorInfo::of(&x)], &pipeline, &disabled).unwrap();
        let plan = Plan::build(&g, &dynamic, Some(&backend)).unwrap();
        let y = plan.run(&[&x]).unwrap().remove(0);
        (g.nodes.iter().map(|n| n.op.name().to_string()).collect(), y)
    }

    #[test]
    fn runs_long_int8_regions_channels_last() {
        for qdq in [false, true] {
            let g = net(8, qdq);
            let (ops, got) = optimized(&g, &[]);
            // The residual add (either form) stays inside the region: one Transpose at each
            // end only.
            assert_eq!(
                ops.iter().filter(|o| *o == "Transpose").count(),
                2,
                "{ops:?}"
            );
            let first_last = (ops.first().unwrap().as_str(), ops.last().unwrap().as_str());
            assert_eq!(first_last, ("Transpose", "Transpose"), "{ops:?}");
            assert_eq!(ops.iter().filter(|o| *o == "NhwcQLinearConv").count(), 8);
            assert!(ops.iter().any(|o| o == "NhwcMaxPool"), "{ops:?}");
            // The QDQ form's DequantizeLinear -> Add -> QuantizeLinear is one QdqBinary.
            let add = if qdq { "QdqBinary" } else { "QLinearAdd" };
            assert!(ops.iter().any(|o| o == add), "{ops:?}");
            same_as_plain(&g, got);
        }
    }

    #[test]
    fn averages_a_region_channels_last() {
        let mut g = net(8, false);
        let y = g.outputs.pop().unwrap();
        let q = |g: &mut Graph, name: &str, s: f32, z: u8| {
            let s = g.add_constant(format!("{name}.s"), Tensor::scalar(s));
            let z = g.add_constant(format!("{name}.z"), Tensor::scalar(z));
            [Some(s), Some(z)]
        };
        let mut inputs = vec![Some(y)];
        inputs.extend(q(&mut g, "gap.x", 0.1, 128));
        inputs.extend(q(&mut g, "gap.y", 0.01, 100));
        let op = Arc::new(QLinearGlobalAveragePool::default());
        let avg = g.add_op("gap", op, inputs, 1).unwrap()[0];
        g.outputs.push(avg);
        let (ops, got) = optimized(&g, &[]);
        // The last Transpose moves the `[1, 1, 1, 16]` average, not the feature map.
        let gap = ops.iter().position(|o| o == "QLinearGlobalAveragePool");
        assert_eq!(gap, Some(ops.len() - 2), "{ops:?}");
        assert_eq!(ops.iter().filter(|o| *o == "Transpose").count(), 2);
        same_as_plain(&g, got);
    }

    /// `got` equals the graph's output without the pass.
    fn same_as_plain(g: &Graph, got: Tensor) {
        let (plain_ops, want) = optimized(g, &["layout-nhwc-int8"]);
        assert!(plain_ops.iter().all(|o| !o.starts_with("Nhwc")));
        assert_eq!(got.shape(), want.shape());
        let (a, b) = (got.to_i64_vec(), want.to_i64_vec());
        // Both layouts sum the same integers and requantize alike.
        assert_eq!(a, b);
        assert!(
            b.iter().any(|&v| v != b[0]),
            "a constant output tests nothing"
        );
    }

    #[test]
    fn leaves_short_regions_plain() {
        // Three convolutions between two Transposes would not pay for them.
        let (ops, _) = optimized(&net(3, false), &[]);
        assert!(ops.iter().all(|o| !o.starts_with("Nhwc")), "{ops:?}");
        assert!(ops.iter().all(|o| o != "Transpose"), "{ops:?}");
    }
}
