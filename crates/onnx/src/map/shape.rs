//! Mapping functions for shape and data-movement ops.
//!
//! Attributes that later opsets turned into inputs (Squeeze/Unsqueeze axes, Split sizes, Slice
//! starts/ends/axes, Pad pads/value) are read whenever present: the canonical ops prefer the
//! input when both exist, and a valid model never has both.

use super::{op, MapError, MapFn, MapResult, NodeCtx};
use ferrolite_core::ops::shape::{
    compress::Compress,
    concat::Concat,
    constant_of_shape::ConstantOfShape,
    depth_to_space::{DepthToSpace, DepthToSpaceMode, SpaceToDepth},
    expand::{Expand, Tile},
    eye_like::EyeLike,
    flatten::Flatten,
    gather::{Gather, GatherElements, GatherND},
    nonzero::NonZero,
    onehot::OneHot,
    pad::{Pad, PadMode},
    range::Range,
    reshape::Reshape,
    scatter::{Reduction, ScatterElements, ScatterND},
    shape_of::{Shape, Size},
    slice::Slice,
    split::Split,
    squeeze::{Squeeze, Unsqueeze},
    transpose::Transpose,
    trilu::Trilu,
};

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("Reshape", reshape),
    ("Shape", shape),
    ("Size", size),
    ("Flatten", flatten),
    ("Transpose", transpose),
    ("Squeeze", squeeze),
    ("Unsqueeze", unsqueeze),
    ("Concat", concat),
    ("Split", split),
    ("Slice", slice),
    ("Gather", gather),
    ("GatherElements", gather_elements),
    ("GatherND", gather_nd),
    ("Scatter", scatter_elements),
    ("ScatterElements", scatter_elements),
    ("ScatterND", scatter_nd),
    ("Expand", expand),
    ("Tile", tile),
    ("Pad", pad),
    ("Range", range),
    ("ConstantOfShape", constant_of_shape),
    ("DepthToSpace", depth_to_space),
    ("SpaceToDepth", space_to_depth),
    ("Trilu", trilu),
    ("OneHot", onehot),
    ("NonZero", nonzero),
    ("Compress", compress),
    ("EyeLike", eye_like),
];

fn required_int(n: &NodeCtx, name: &str) -> Result<i64, MapError> {
    n.int_opt(name)?
        .ok_or_else(|| MapError::Invalid(format!("attribute '{name}' is required")))
}

fn reshape(n: &NodeCtx) -> MapResult {
    if n.opset < 5 {
        return Err(n.unsupported("Reshape before opset 5 (shape attribute)"));
    }
    op(Reshape {
        allowzero: n.int("allowzero", 0)? != 0,
    })
}

fn shape(n: &NodeCtx) -> MapResult {
    op(Shape {
        start: n.int("start", 0)?,
        end: n.int_opt("end")?,
    })
}

fn size(_n: &NodeCtx) -> MapResult {
    op(Size)
}

fn flatten(n: &NodeCtx) -> MapResult {
    op(Flatten {
        axis: n.int("axis", 1)?,
    })
}

fn transpose(n: &NodeCtx) -> MapResult {
    op(Transpose {
        perm: n.ints("perm")?,
    })
}

fn squeeze(n: &NodeCtx) -> MapResult {
    op(Squeeze {
        axes: n.ints("axes")?,
    })
}

fn unsqueeze(n: &NodeCtx) -> MapResult {
    op(Unsqueeze {
        axes: n.ints("axes")?,
    })
}

fn concat(n: &NodeCtx) -> MapResult {
    // Concat-1 defaulted the axis to 1; from opset 4 it is required.
    let axis = if n.opset < 4 {
        n.int("axis", 1)?
    } else {
        required_int(n, "axis")?
    };
    op(Concat { axis })
}

fn split(n: &NodeCtx) -> MapResult {
    let outs = n.n_outputs();
    if let Some(k) = n.int_opt("num_outputs")? {
        if k != outs as i64 {
            return Err(MapError::Invalid(format!(
                "num_outputs is {k}, but the node has {outs} outputs"
            )));
        }
    }
    op(Split {
        axis: n.int("axis", 0)?,
        split: n.ints("split")?,
        num_outputs: outs,
    })
}

fn slice(n: &NodeCtx) -> MapResult {
    op(Slice {
        starts: n.ints("starts")?,
        ends: n.ints("ends")?,
        axes: n.ints("axes")?,
        steps: None,
    })
}

fn gather(n: &NodeCtx) -> MapResult {
    op(Gather {
        axis: n.int("axis", 0)?,
    })
}

fn gather_elements(n: &NodeCtx) -> MapResult {
    op(GatherElements {
        axis: n.int("axis", 0)?,
    })
}

fn gather_nd(n: &NodeCtx) -> MapResult {
    op(GatherND {
        batch_dims: n.int("batch_dims", 0)?,
    })
}

fn reduction(n: &NodeCtx) -> Result<Reduction, MapError> {
    let r = n.string("reduction", "none")?;
    Reduction::parse(&r).ok_or_else(|| n.unsupported(format!("reduction '{r}'")))
}

fn scatter_elements(n: &NodeCtx) -> MapResult {
    op(ScatterElements {
        axis: n.int("axis", 0)?,
        reduction: reduction(n)?,
    })
}

fn scatter_nd(n: &NodeCtx) -> MapResult {
    op(ScatterND {
        reduction: reduction(n)?,
    })
}

fn expand(_n: &NodeCtx) -> MapResult {
    op(Expand)
}

fn tile(n: &NodeCtx) -> MapResult {
    if n.opset < 6 {
        return Err(n.unsupported("Tile before opset 6 (tiles/axis inputs)"));
    }
    op(Tile)
}

fn pad(n: &NodeCtx) -> MapResult {
    let m = n.string("mode", "constant")?;
    let mode = PadMode::parse(&m).ok_or_else(|| n.unsupported(format!("mode '{m}'")))?;
    // Pad-1 called the attribute `paddings`.
    let pads = match n.ints("pads")? {
        Some(p) => Some(p),
        None => n.ints("paddings")?,
    };
    op(Pad {
        mode,
        pads,
        value: n.float("value", 0.0)? as f64,
    })
}

fn range(_n: &NodeCtx) -> MapResult {
    op(Range)
}

fn constant_of_shape(n: &NodeCtx) -> MapResult {
    let mut c = ConstantOfShape::default();
    if let Some(v) = n.tensor("value")? {
        if v.numel() != 1 {
            return Err(MapError::Invalid(format!(
                "attribute 'value' must hold one element, got shape {:?}",
                v.shape()
            )));
        }
        c.value = v;
    }
    op(c)
}

fn depth_to_space(n: &NodeCtx) -> MapResult {
    let m = n.string("mode", "DCR")?;
    let mode = match m.as_str() {
        "DCR" => DepthToSpaceMode::Dcr,
        "CRD" => DepthToSpaceMode::Crd,
        _ => return Err(n.unsupported(format!("mode '{m}'"))),
    };
    op(DepthToSpace {
        blocksize: required_int(n, "blocksize")?,
        mode,
    })
}

fn space_to_depth(n: &NodeCtx) -> MapResult {
    op(SpaceToDepth {
        blocksize: required_int(n, "blocksize")?,
    })
}

fn trilu(n: &NodeCtx) -> MapResult {
    op(Trilu {
        upper: n.int("upper", 1)? != 0,
    })
}

fn onehot(n: &NodeCtx) -> MapResult {
    op(OneHot {
        axis: n.int("axis", -1)?,
    })
}

fn nonzero(_n: &NodeCtx) -> MapResult {
    op(NonZero)
}

fn compress(n: &NodeCtx) -> MapResult {
    op(Compress {
        axis: n.int_opt("axis")?,
    })
}

fn eye_like(n: &NodeCtx) -> MapResult {
    let dtype = match n.int_opt("dtype")? {
        None => None,
        Some(t) => Some(
            crate::tensor::dtype_of(t as i32)
                .filter(|d| d.is_bytes())
                .ok_or_else(|| n.unsupported(format!("dtype {t}")))?,
        ),
    };
    op(EyeLike {
        dtype,
        k: n.int("k", 0)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{attribute_type, AttributeProto, NodeProto};

    fn node(op_type: &str, outputs: usize, attrs: Vec<AttributeProto>) -> NodeProto {
        NodeProto {
            op_type: op_type.into(),
            input: vec!["x".into()],
            output: (0..outputs).map(|i| format!("y{i}")).collect(),
            attribute: attrs,
            ..Default::default()
        }
    }

    fn int(name: &str, v: i64) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: attribute_type::INT,
            i: v,
            ..Default::default()
        }
    }

    fn ints(name: &str, v: &[i64]) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: attribute_type::INTS,
            ints: v.to_vec(),
            ..Default::default()
        }
    }

    fn map(nd: &NodeProto, opset: i64) -> MapResult {
        let f = super::super::lookup(&nd.op_type).expect("op is in the table");
        f(&NodeCtx { node: nd, opset })
    }

    #[test]
    fn every_entry_maps_a_bare_node() {
        // Ops with required attributes get them; the rest map from defaults.
        for (name, _) in ENTRIES {
            let attrs = match *name {
                "Concat" => vec![int("axis", 0)],
                "DepthToSpace" | "SpaceToDepth" => vec![int("blocksize", 2)],
                _ => vec![],
            };
            let o = map(&node(name, 1, attrs), 18).unwrap();
            assert!(!o.name().is_empty());
        }
    }

    #[test]
    fn split_and_concat_attributes() {
        let o = map(&node("Split", 3, vec![int("axis", 1)]), 13).unwrap();
        let s = o.as_any().downcast_ref::<Split>().unwrap();
        assert_eq!((s.axis, s.num_outputs), (1, 3));
        assert!(map(&node("Split", 3, vec![int("num_outputs", 2)]), 18).is_err());
        let o = map(&node("Split", 2, vec![ints("split", &[1, 2])]), 11).unwrap();
        let s = o.as_any().downcast_ref::<Split>().unwrap();
        assert_eq!(s.split, Some(vec![1, 2]));
        assert!(map(&node("Concat", 1, vec![]), 13).is_err());
        let o = map(&node("Concat", 1, vec![]), 1).unwrap();
        assert_eq!(o.as_any().downcast_ref::<Concat>().unwrap().axis, 1);
    }

    #[test]
    fn pad_and_eyelike() {
        let mode = AttributeProto {
            name: "mode".into(),
            r#type: attribute_type::STRING,
            s: b"reflect".to_vec(),
            ..Default::default()
        };
        let o = map(&node("Pad", 1, vec![mode, ints("pads", &[1, 1])]), 2).unwrap();
        let p = o.as_any().downcast_ref::<Pad>().unwrap();
        assert_eq!(p.mode, PadMode::Reflect);
        assert_eq!(p.pads, Some(vec![1, 1]));
        let o = map(&node("EyeLike", 1, vec![int("dtype", 11)]), 9).unwrap();
        let e = o.as_any().downcast_ref::<EyeLike>().unwrap();
        assert_eq!(e.dtype, Some(ferrolite_core::DType::F64));
        assert!(map(&node("EyeLike", 1, vec![int("dtype", 8)]), 9).is_err());
    }
}
