//! `fuse-conv-add-bias`: Conv or ConvTranspose followed by Add of a per-output-channel constant
//! (`[M,1,1]`, `[1,M,1,1]`, a scalar) folds the constant into the bias (summed with an existing
//! constant bias). Paddle and squeezenet exports emit bias-less Conv + Add.

use super::rewrite::{binary, constant, info, input, out, rewrite_all, Arg, Rewrite, Uses};
use super::Pass;
use crate::ops::elementwise::binary::BinaryKind;
use crate::ops::linalg::conv::Conv;
use crate::ops::linalg::conv_transpose::ConvTranspose;
use crate::{DType, Graph, Result, Tensor};

pub struct FuseConvAddBias;

/// Per-channel values of `c` broadcast onto an output of shape `y` (channels on axis 1), or
/// `None` when `c` varies along another axis.
pub(super) fn per_channel(c: &Tensor, y: &[usize]) -> Option<Vec<f32>> {
    let m = *y.get(1)?;
    let cs = c.shape();
    if cs.len() > y.len() || c.dtype() != DType::F32 {
        return None;
    }
    let vals = c.as_slice::<f32>().ok()?;
    if c.numel() == 1 {
        return Some(vec![vals[0]; m]);
    }
    let lead = y.len() - cs.len();
    let channel_only = cs.iter().enumerate().all(|(i, &d)| {
        let axis = lead + i;
        if axis == 1 {
            d == m
        } else {
            d == 1
        }
    });
    (channel_only && lead <= 1).then(|| vals.to_vec())
}

fn matcher(g: &Graph, uses: &Uses, i: usize) -> Option<Rewrite> {
    let conv = &g.nodes[i];
    let any = conv.op.as_any();
    let plain = match (
        any.downcast_ref::<Conv>(),
        any.downcast_ref::<ConvTranspose>(),
    ) {
        (Some(c), _) => c.activation.is_none(),
        (_, Some(c)) => c.activation.is_none(),
        _ => false,
    };
    if !plain {
        return None;
    }
    let y = out(conv)?;
    let add_i = uses.single(y)?;
    let add = &g.nodes[add_i];
    let (kind, a, b) = binary(add)?;
    let other = match (kind, a == y, b == y) {
        (BinaryKind::Add, true, false) => b,
        (BinaryKind::Add, false, true) => a,
        _ => return None,
    };
    let y_shape = &info(g, y)?.shape;
    if info(g, out(add)?)?.shape != *y_shape {
        return None;
    }
    let add_vals = per_channel(constant(g, other)?, y_shape)?;
    let mut bias = match input(conv, 2) {
        Some(b) => {
            let t = constant(g, b)?;
            if t.dtype() != DType::F32 || t.numel() != add_vals.len() {
                return None;
            }
            t.as_slice::<f32>().ok()?.to_vec()
        }
        None => vec![0.0; add_vals.len()],
    };
    for (b, a) in bias.iter_mut().zip(&add_vals) {
        *b += a;
    }
    let bias = Tensor::from_vec(&[add_vals.len()], bias).ok()?;
    Some(Rewrite {
        target: Some(add_i),
        op: Some(conv.op.clone()),
        inputs: vec![
            Arg::Value(input(conv, 0)?),
            Arg::Value(input(conv, 1)?),
            Arg::Const("bias", bias),
        ],
        name: Some(conv.name.clone()),
        remove: vec![i],
        rewire: None,
    })
}

impl Pass for FuseConvAddBias {
    fn name(&self) -> &'static str {
        "fuse-conv-add-bias"
    }

    fn description(&self) -> &'static str {
        "fold Add of a per-channel constant after Conv/ConvTranspose into the bias"
    }

    fn run(&self, graph: &mut Graph) -> Result<bool> {
        rewrite_all(graph, matcher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::binary::Binary;
    use crate::passes::testutil::{check_fusion, data};
    use std::sync::Arc;

    /// x -> Conv(bias?) -> Add(const of `add_shape`, operand order) -> y
    fn graph(with_bias: bool, add_shape: &[usize], add_first: bool, transpose: bool) -> Graph {
        let mut g = Graph::new();
        let x = g.add_value("x");
        g.inputs.push(x);
        let m = 3;
        let (w, op): (_, Arc<dyn crate::Op>) = if transpose {
            (data(&[2, m, 2, 2], 0.5), Arc::new(ConvTranspose::default()))
        } else {
            (data(&[m, 2, 3, 3], 0.5), Arc::new(Conv::default()))
        };
        let w = g.add_constant("w", w);
        let mut ins = vec![Some(x), Some(w)];
        if with_bias {
            ins.push(Some(g.add_constant("b", data(&[m], 0.3))));
        }
        let c = g.add_op("conv", op, ins, 1).unwrap()[0];
        let k = g.add_constant("k", data(add_shape, 1.5));
        let ins = if add_first {
            vec![Some(k), Some(c)]
        } else {
            vec![Some(c), Some(k)]
        };
        let y = g
            .add_op("add", Arc::new(Binary::new(BinaryKind::Add)), ins, 1)
            .unwrap()[0];
        g.outputs.push(y);
        g
    }

    #[test]
    fn per_channel_adds_fold_into_the_bias() {
        let x = data(&[1, 2, 5, 5], 1.0);
        for shape in [&[3, 1, 1][..], &[1, 3, 1, 1], &[], &[1]] {
            for with_bias in [false, true] {
                for add_first in [false, true] {
                    let g = graph(with_bias, shape, add_first, false);
                    let opt = check_fusion(&g, &x, &["Conv"]);
                    assert_eq!(opt.nodes[0].name, "conv");
                    assert_eq!(opt.nodes[0].inputs.len(), 3);
                }
            }
        }
        let g = graph(false, &[1, 3, 1, 1], false, true);
        check_fusion(&g, &x, &["ConvTranspose"]);
    }

    #[test]
    fn other_broadcasts_stay() {
        let x = data(&[1, 2, 5, 5], 1.0);
        // Varies along W, or along batch and channel with a rank above the output's.
        for shape in [&[3, 1, 3][..], &[1, 1, 1, 3], &[3]] {
            let g = graph(false, shape, false, false);
            check_fusion(&g, &x, &["Conv", "Add"]);
        }
    }
}
