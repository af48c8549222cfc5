//! Mapping functions for the `com.microsoft` domain: the quantized ops onnxruntime's quantizer
//! writes in the QOperator format. Their canonical ops have the same names.

use super::nn::pool;
use super::{op, MapError, MapFn, MapResult, NodeCtx};
use ferrolite_core::ops::nn::pool::PoolKind;
use ferrolite_core::ops::quant::{
    DynamicQuantizeMatMul, MatMulIntegerToFloat, QGemm, QLinearAdd, QLinearAveragePool,
    QLinearConcat, QLinearGlobalAveragePool, QLinearLeakyRelu, QLinearMul, QLinearSigmoid,
    QLinearSoftmax,
};

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("QLinearAdd", qlinear_add),
    ("QLinearMul", qlinear_mul),
    ("QLinearSigmoid", qlinear_sigmoid),
    ("QLinearLeakyRelu", qlinear_leaky_relu),
    ("QLinearConcat", qlinear_concat),
    ("QLinearGlobalAveragePool", qlinear_global_average_pool),
    ("QLinearAveragePool", qlinear_average_pool),
    ("QLinearSoftmax", qlinear_softmax),
    ("QGemm", qgemm),
    ("DynamicQuantizeMatMul", dynamic_quantize_matmul),
    ("MatMulIntegerToFloat", matmul_integer_to_float),
];

fn qlinear_add(_: &NodeCtx) -> MapResult {
    op(QLinearAdd)
}

fn qlinear_mul(_: &NodeCtx) -> MapResult {
    op(QLinearMul)
}

fn qlinear_sigmoid(_: &NodeCtx) -> MapResult {
    op(QLinearSigmoid)
}

fn qlinear_leaky_relu(n: &NodeCtx) -> MapResult {
    op(QLinearLeakyRelu {
        alpha: n.float("alpha", 0.01)?,
    })
}

fn qlinear_concat(n: &NodeCtx) -> MapResult {
    let axis = n
        .int_opt("axis")?
        .ok_or_else(|| MapError::Invalid("attribute 'axis' is required".into()))?;
    op(QLinearConcat { axis })
}

fn channels_last(n: &NodeCtx) -> Result<bool, MapError> {
    Ok(n.int("channels_last", 0)? != 0)
}

fn qlinear_global_average_pool(n: &NodeCtx) -> MapResult {
    op(QLinearGlobalAveragePool {
        channels_last: channels_last(n)?,
    })
}

fn qlinear_average_pool(n: &NodeCtx) -> MapResult {
    op(QLinearAveragePool {
        pool: pool(n, PoolKind::Average)?,
        channels_last: channels_last(n)?,
    })
}

fn qlinear_softmax(n: &NodeCtx) -> MapResult {
    // The `opset` attribute is the opset of the Softmax it replaced: before 13, the input is
    // coerced to 2-D at `axis` (default 1); from 13, the softmax runs along `axis` (default -1).
    let opset = n
        .int_opt("opset")?
        .ok_or_else(|| MapError::Invalid("attribute 'opset' is required".into()))?;
    let legacy_2d = opset < 13;
    op(QLinearSoftmax {
        axis: n.int("axis", if legacy_2d { 1 } else { -1 })?,
        legacy_2d,
    })
}

fn qgemm(n: &NodeCtx) -> MapResult {
    op(QGemm {
        alpha: n.float("alpha", 1.0)?,
        trans_a: n.int("transA", 0)? != 0,
        trans_b: n.int("transB", 0)? != 0,
    })
}

fn dynamic_quantize_matmul(_: &NodeCtx) -> MapResult {
    op(DynamicQuantizeMatMul)
}

fn matmul_integer_to_float(_: &NodeCtx) -> MapResult {
    op(MatMulIntegerToFloat)
}

#[cfg(test)]
mod tests {
    use super::super::{lookup_in, MS_DOMAIN};
    use super::*;
    use crate::proto::{attribute_type, AttributeProto, NodeProto};
    use ferrolite_core::Op;
    use std::sync::Arc;

    fn node(op_type: &str, attrs: Vec<AttributeProto>) -> NodeProto {
        NodeProto {
            op_type: op_type.into(),
            domain: MS_DOMAIN.into(),
            attribute: attrs,
            ..Default::default()
        }
    }

    fn int(name: &str, i: i64) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: attribute_type::INT,
            i,
            ..Default::default()
        }
    }

    fn float(name: &str, f: f32) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: attribute_type::FLOAT,
            f,
            ..Default::default()
        }
    }

    fn map(n: &NodeProto) -> Result<Arc<dyn Op>, MapError> {
        let f = lookup_in(MS_DOMAIN, &n.op_type).expect("mapped");
        f(&NodeCtx { node: n, opset: 1 })
    }

    fn get<T: 'static + Clone>(o: &Arc<dyn Op>) -> T {
        o.as_any().downcast_ref::<T>().expect("op type").clone()
    }

    #[test]
    fn every_entry_maps_to_the_op_of_its_name() {
        for (name, _) in ENTRIES {
            let attrs = match *name {
                "QLinearConcat" => vec![int("axis", 1)],
                "QLinearSoftmax" => vec![int("opset", 13)],
                "QLinearAveragePool" => vec![AttributeProto {
                    name: "kernel_shape".into(),
                    r#type: attribute_type::INTS,
                    ints: vec![2, 2],
                    ..Default::default()
                }],
                _ => vec![],
            };
            assert_eq!(map(&node(name, attrs)).unwrap().name(), *name);
        }
        // Only in their own domain.
        assert!(super::super::lookup("QGemm").is_none());
        assert!(lookup_in(MS_DOMAIN, "Relu").is_none());
        assert!(lookup_in("ai.onnx.ml", "QGemm").is_none());
    }

    #[test]
    fn attributes() {
        let g: QGemm = get(&map(&node(
            "QGemm",
            vec![float("alpha", 0.5), int("transA", 1), int("transB", 1)],
        ))
        .unwrap());
        assert_eq!(
            g,
            QGemm {
                alpha: 0.5,
                trans_a: true,
                trans_b: true
            }
        );
        let s: QLinearSoftmax = get(&map(&node("QLinearSoftmax", vec![int("opset", 12)])).unwrap());
        assert_eq!((s.axis, s.legacy_2d), (1, true));
        let s: QLinearSoftmax = get(&map(&node(
            "QLinearSoftmax",
            vec![int("opset", 13), int("axis", 0)],
        ))
        .unwrap());
        assert_eq!((s.axis, s.legacy_2d), (0, false));
        let l: QLinearLeakyRelu = get(&map(&node("QLinearLeakyRelu", vec![])).unwrap());
        assert_eq!(l.alpha, 0.01);
        let p: QLinearGlobalAveragePool = get(&map(&node(
            "QLinearGlobalAveragePool",
            vec![int("channels_last", 1)],
        ))
        .unwrap());
        assert!(p.channels_last);
        // Required attributes.
        for name in ["QLinearConcat", "QLinearSoftmax", "QLinearAveragePool"] {
            assert!(
                matches!(map(&node(name, vec![])), Err(MapError::Invalid(_))),
                "{name}"
            );
        }
    }
}
