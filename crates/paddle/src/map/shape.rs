//! Mapping functions for shape and data-movement ops, embeddings, and the ops that make
//! constants (`fill_constant`, `fill_any_like`, `range`).

use super::{invalid, unsupported, Ctx, MapError, MapFn, MapResult};
use crate::params::dtype_of;
use ferrolite_core::frontend::usizes;
use ferrolite_core::ops::elementwise::{Cast, Identity};
use ferrolite_core::ops::shape::{
    concat::Concat,
    constant_of_shape::ConstantOfShape,
    expand::{Expand, Tile},
    gather::{Gather, GatherND},
    pad::{Pad, PadMode},
    range::Range,
    reshape::Reshape,
    shape_of::Shape,
    slice::Slice,
    split::Split,
    squeeze::{Squeeze, Unsqueeze},
    transpose::Transpose,
};
use ferrolite_core::{DType, Tensor, ValueId};

pub(super) const ENTRIES: &[(&str, MapFn)] = &[
    ("reshape2", reshape2),
    ("reshape", reshape2),
    ("flatten_contiguous_range", flatten_contiguous_range),
    ("transpose2", transpose2),
    ("transpose", transpose2),
    ("squeeze2", squeeze2),
    ("squeeze", squeeze2),
    ("unsqueeze2", unsqueeze2),
    ("unsqueeze", unsqueeze2),
    ("concat", concat),
    ("split", split),
    ("slice", slice),
    ("stack", stack),
    ("shape", shape),
    ("fill_constant", fill_constant),
    ("fill_any_like", fill_any_like),
    ("fill_zeros_like", fill_any_like),
    ("range", range),
    ("lookup_table_v2", lookup_table_v2),
    ("lookup_table", lookup_table),
    ("gather", gather),
    ("gather_nd", gather_nd),
    ("expand_v2", expand_v2),
    ("expand_as_v2", expand_as_v2),
    ("tile", tile),
    ("pad3d", pad3d),
];

/// `reshape2`: the target from `ShapeTensor` (list), `Shape` (tensor) or the `shape` attribute;
/// 0 copies the input dim, -1 is inferred (ONNX Reshape with allowzero=0).
fn reshape2(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let list = c.inputs("ShapeTensor")?;
    let s = if !list.is_empty() {
        c.list_to_i64(&list)?
    } else if let Some(s) = c.input_opt("Shape")? {
        c.to_i64(s)?
    } else {
        let shape = c
            .ints("shape")?
            .ok_or_else(|| invalid("reshape needs 'shape' or a shape input"))?;
        c.i64s(&shape)?
    };
    let out = c.add(Reshape { allowzero: false }, &[x, s])?;
    c.set_out(out)
}

fn flatten_contiguous_range(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let rank = c.in_rank("X")? as i64;
    if rank == 0 {
        let out = c.reshape_to(x, &[1])?;
        let out = if c.constant(out).is_some() {
            c.add(Identity, &[out])?
        } else {
            out
        };
        return c.set_out(out);
    }
    let norm = |a: i64| if a < 0 { a + rank } else { a };
    let start = norm(c.int("start_axis", 1)?);
    let stop = norm(c.int("stop_axis", -1)?);
    if !(0..rank).contains(&start) || !(start..rank).contains(&stop) {
        return Err(invalid(format!(
            "start_axis {start} / stop_axis {stop} out of range for rank {rank}"
        )));
    }
    let s = if stop == rank - 1 {
        let mut v = vec![0; start as usize];
        v.push(-1);
        c.i64s(&v)?
    } else {
        let parts = [
            c.add(
                Shape {
                    start: 0,
                    end: Some(start),
                },
                &[x],
            )?,
            c.i64s(&[-1])?,
            c.add(
                Shape {
                    start: stop + 1,
                    end: None,
                },
                &[x],
            )?,
        ];
        c.add(Concat { axis: 0 }, &parts)?
    };
    let out = c.add(Reshape { allowzero: false }, &[x, s])?;
    c.set_out(out)
}

fn transpose2(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let perm = c.ints("axis")?;
    let out = c.add(Transpose { perm }, &[x])?;
    c.set_out(out)
}

/// Paddle's squeeze skips listed axes whose size is not 1.
fn squeeze2(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let axes = c.ints("axes")?.unwrap_or_default();
    let dims = c.in_dims("X");
    let out = if axes.is_empty() {
        c.add(Squeeze { axes: None }, &[x])?
    } else {
        let kept: Vec<i64> = match &dims {
            Some(d) => {
                let r = d.len() as i64;
                axes.iter()
                    .copied()
                    .filter(|&a| {
                        let i = if a < 0 { a + r } else { a };
                        usize::try_from(i)
                            .ok()
                            .and_then(|i| d.get(i))
                            .is_some_and(|&n| n == 1 || n < 0)
                    })
                    .collect()
            }
            None => axes,
        };
        if kept.is_empty() {
            c.add(Identity, &[x])?
        } else {
            c.add(Squeeze { axes: Some(kept) }, &[x])?
        }
    };
    c.set_out(out)
}

/// Output positions of Paddle's unsqueeze axes, inserted one after another.
pub fn unsqueeze_positions(in_rank: usize, axes: &[i64]) -> Result<Vec<i64>, MapError> {
    let out_rank = in_rank + axes.len();
    let mut marks = vec![false; out_rank];
    for (cur, &a) in (in_rank as i64..).zip(axes) {
        let p = if a < 0 { a + cur + 1 } else { a };
        if p < 0 || p > cur {
            return Err(invalid(format!(
                "unsqueeze axis {a} out of range for rank {cur}"
            )));
        }
        let p = p as usize;
        for i in (p..cur as usize).rev() {
            if marks[i] {
                marks[i + 1] = true;
                marks[i] = false;
            }
        }
        marks[p] = true;
    }
    Ok(marks
        .iter()
        .enumerate()
        .filter(|(_, &m)| m)
        .map(|(i, _)| i as i64)
        .collect())
}

fn unsqueeze2(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    if !c.input_names("AxesTensor").is_empty() || !c.input_names("AxesTensorList").is_empty() {
        return Err(unsupported("unsqueeze with axes from a tensor"));
    }
    let axes = c.ints("axes")?.unwrap_or_default();
    let rank = c.in_rank("X")?;
    let pos = unsqueeze_positions(rank, &axes)?;
    let out = c.add(Unsqueeze { axes: Some(pos) }, &[x])?;
    c.set_out(out)
}

fn const_axis(c: &mut Ctx, slot: &str, attr: &str, default: i64) -> Result<i64, MapError> {
    if let Some(v) = c.input_opt(slot)? {
        return match c.constant(v) {
            Some(t) if t.numel() == 1 => Ok(t.to_i64_vec()[0]),
            _ => Err(unsupported(format!("'{slot}' that is not a constant"))),
        };
    }
    c.int(attr, default)
}

fn concat(c: &mut Ctx) -> MapResult {
    let xs = c.inputs("X")?;
    if xs.is_empty() {
        return Err(invalid("concat needs at least one input"));
    }
    let axis = const_axis(c, "AxisTensor", "axis", 0)?;
    let out = c.add(Concat { axis }, &xs)?;
    c.set_out(out)
}

fn split(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let n = c.output_names("Out").len();
    if n == 0 {
        return Err(invalid("split has no outputs"));
    }
    if !c.input_names("SectionsTensorList").is_empty() {
        return Err(unsupported("split with sections from tensors"));
    }
    let axis = const_axis(c, "AxisTensor", "axis", 0)?;
    let mut sections = c.ints("sections")?.unwrap_or_default();
    let split = if sections.is_empty() {
        None
    } else {
        if let Some(i) = sections.iter().position(|&s| s < 0) {
            // One section may be -1: the rest of the axis.
            let dims = c.in_dims("X").unwrap_or_default();
            let r = dims.len() as i64;
            let a = if axis < 0 { axis + r } else { axis };
            let size = usize::try_from(a)
                .ok()
                .and_then(|a| dims.get(a).copied())
                .filter(|&d| d >= 0)
                .ok_or_else(|| unsupported("split section -1 on an axis of unknown size"))?;
            let known: i64 = sections.iter().filter(|&&s| s >= 0).sum();
            sections[i] = size - known;
        }
        Some(sections)
    };
    let outs = c.add_n(
        Split {
            axis,
            split,
            num_outputs: n,
        },
        &[Some(x)],
        n,
    )?;
    for (k, v) in outs.into_iter().enumerate() {
        c.set_nth("Out", k, v);
    }
    Ok(())
}

fn slice(c: &mut Ctx) -> MapResult {
    let x = c.input("Input")?;
    let axes = c.ints("axes")?.unwrap_or_default();
    let mut ins = vec![Some(x)];
    for (list, tensor, attr) in [
        ("StartsTensorList", "StartsTensor", "starts"),
        ("EndsTensorList", "EndsTensor", "ends"),
    ] {
        let l = c.inputs(list)?;
        let v = if !l.is_empty() {
            c.list_to_i64(&l)?
        } else if let Some(t) = c.input_opt(tensor)? {
            c.to_i64(t)?
        } else {
            let v = c
                .ints(attr)?
                .ok_or_else(|| invalid(format!("slice needs '{attr}'")))?;
            c.i64s(&v)?
        };
        ins.push(Some(v));
    }
    let a = c.i64s(&axes)?;
    ins.push(Some(a));
    let mut out = c.add_n(Slice::default(), &ins, 1)?[0];
    let decrease = c.ints("decrease_axis")?.unwrap_or_default();
    if !decrease.is_empty() {
        let in_rank = c.in_rank("Input")?;
        let out_rank = c.out_desc("Out").map(|d| d.1.len());
        let mut axes = decrease.clone();
        // Older Paddle keeps a 1-element tensor when every axis is decreased.
        if axes.len() == in_rank && out_rank == Some(1) {
            axes.pop();
        }
        if !axes.is_empty() {
            out = c.add(Squeeze { axes: Some(axes) }, &[out])?;
        }
    }
    c.set_out(out)
}

fn stack(c: &mut Ctx) -> MapResult {
    let xs = c.inputs("X")?;
    if xs.is_empty() {
        return Err(invalid("stack needs at least one input"));
    }
    let axis = c.int("axis", 0)?;
    let mut parts = Vec::with_capacity(xs.len());
    for x in xs {
        parts.push(c.add(
            Unsqueeze {
                axes: Some(vec![axis]),
            },
            &[x],
        )?);
    }
    let out = c.add(Concat { axis }, &parts)?;
    c.set("Y", out);
    Ok(())
}

/// `shape` gives int32 in Paddle.
fn shape(c: &mut Ctx) -> MapResult {
    let x = c.input("Input")?;
    let s = c.add(
        Shape {
            start: 0,
            end: None,
        },
        &[x],
    )?;
    let to = c.out_desc("Out").map_or(DType::I32, |d| d.0);
    let out = if to == DType::I64 {
        s
    } else {
        c.add(Cast::new(to), &[s])?
    };
    c.set_out(out)
}

fn parse_value(s: &str) -> Option<f64> {
    match s.trim() {
        "inf" | "+inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        t => t.parse().ok(),
    }
}

fn fill_constant(c: &mut Ctx) -> MapResult {
    let dt = c.int("dtype", crate::proto::var_type::FP32 as i64)?;
    let dtype = dtype_of(dt as i32)
        .ok_or_else(|| unsupported(format!("dtype {}", crate::proto::var_type::name(dt as i32))))?;
    let s = c.string("str_value", "")?;
    let value = if s.is_empty() {
        c.float("value", 0.0)?
    } else {
        parse_value(&s).ok_or_else(|| invalid(format!("str_value '{s}' is not a number")))?
    };
    let one = if dtype == DType::I64 && !s.is_empty() && s.trim().parse::<i64>().is_ok() {
        Tensor::from_slice(&[1], &[s.trim().parse::<i64>().unwrap_or_default()])
    } else {
        Tensor::full(dtype, &[1], value)
    }
    .map_err(|e| invalid(e.to_string()))?;
    if c.input_opt("ValueTensor")?.is_some() {
        return Err(unsupported("fill_constant with a ValueTensor"));
    }
    let list = c.inputs("ShapeTensorList")?;
    let shape_in = if !list.is_empty() {
        Some(c.list_to_i64(&list)?)
    } else if let Some(s) = c.input_opt("ShapeTensor")? {
        Some(c.to_i64(s)?)
    } else {
        None
    };
    let out = match shape_in {
        Some(s) => c.add(ConstantOfShape { value: one }, &[s])?,
        None => {
            let shape = usizes(&c.ints("shape")?.unwrap_or_default(), "'shape'")?;
            let v = one.reshaped(&[]).map_err(|e| invalid(e.to_string()))?;
            // Broadcast the one element to the shape.
            let t = broadcast_scalar(&v, &shape)?;
            c.konst(t)
        }
    };
    c.set_out(out)
}

fn broadcast_scalar(v: &Tensor, shape: &[usize]) -> Result<Tensor, MapError> {
    let n = ferrolite_core::tensor::checked_numel(shape).map_err(|e| invalid(e.to_string()))?;
    let size = v.dtype().size();
    let mut bytes = Vec::with_capacity(n * size);
    for _ in 0..n {
        bytes.extend_from_slice(v.bytes());
    }
    Tensor::from_bytes(v.dtype(), shape, &bytes).map_err(|e| invalid(e.to_string()))
}

fn fill_any_like(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let dt = c.int("dtype", -1)?;
    let dtype = if dt < 0 {
        c.in_dtype("X").unwrap_or(DType::F32)
    } else {
        dtype_of(dt as i32).ok_or_else(|| unsupported(format!("dtype {dt}")))?
    };
    let value = if c.op.r#type == "fill_zeros_like" {
        0.0
    } else {
        c.float("value", 0.0)?
    };
    let one = Tensor::full(dtype, &[1], value).map_err(|e| invalid(e.to_string()))?;
    let s = c.add(
        Shape {
            start: 0,
            end: None,
        },
        &[x],
    )?;
    let out = c.add(ConstantOfShape { value: one }, &[s])?;
    c.set_out(out)
}

fn range(c: &mut Ctx) -> MapResult {
    let ins = [c.input("Start")?, c.input("End")?, c.input("Step")?];
    let out = c.add(Range, &ins)?;
    c.set_out(out)
}

/// Embedding lookup; rows equal to `padding_idx` read as zeros (the row is zeroed in a copy
/// of the constant table).
fn embedding(c: &mut Ctx, ids: ValueId) -> MapResult {
    let mut w = c.input("W")?;
    let pad = c.int("padding_idx", -1)?;
    if pad != -1 {
        let t = c
            .constant(w)
            .ok_or_else(|| unsupported("padding_idx with a table that is not a parameter"))?;
        let rows = t.shape().first().copied().unwrap_or(0) as i64;
        let p = if pad < 0 { pad + rows } else { pad };
        if !(0..rows).contains(&p) {
            return Err(invalid(format!(
                "padding_idx {pad} out of range for {rows} rows"
            )));
        }
        let mut t = t.clone();
        let row = t.byte_len() / rows as usize;
        let p = p as usize;
        t.bytes_mut()[p * row..(p + 1) * row].fill(0);
        w = c.konst(t);
    }
    let out = c.add(Gather { axis: 0 }, &[w, ids])?;
    c.set_out(out)
}

fn lookup_table_v2(c: &mut Ctx) -> MapResult {
    let ids = c.input("Ids")?;
    embedding(c, ids)
}

/// The old lookup_table: Ids end with a unit dim that the output drops.
fn lookup_table(c: &mut Ctx) -> MapResult {
    let ids = c.input("Ids")?;
    let ids = c.add(
        Squeeze {
            axes: Some(vec![-1]),
        },
        &[ids],
    )?;
    embedding(c, ids)
}

fn gather(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let idx = c.input("Index")?;
    let axis = const_axis(c, "Axis", "axis", 0)?;
    let out = c.add(Gather { axis }, &[x, idx])?;
    c.set_out(out)
}

fn gather_nd(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let idx = c.input("Index")?;
    let idx = c.to_i64(idx)?;
    let out = c.add(GatherND { batch_dims: 0 }, &[x, idx])?;
    c.set_out(out)
}

/// `expand_v2`: -1 keeps the input dim, which broadcasting from 1 does too.
fn expand_v2(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let list = c.inputs("expand_shapes_tensor")?;
    let s = if !list.is_empty() {
        return Err(unsupported("expand_v2 with expand_shapes_tensor"));
    } else if let Some(s) = c.input_opt("Shape")? {
        c.to_i64(s)?
    } else {
        let shape: Vec<i64> = c
            .ints("shape")?
            .unwrap_or_default()
            .into_iter()
            .map(|d| if d == -1 { 1 } else { d })
            .collect();
        c.i64s(&shape)?
    };
    let out = c.add(Expand, &[x, s])?;
    c.set_out(out)
}

fn expand_as_v2(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let s = match c.input_opt("Y")? {
        Some(y) => c.add(
            Shape {
                start: 0,
                end: None,
            },
            &[y],
        )?,
        None => {
            let t = c.ints("target_shape")?.unwrap_or_default();
            c.i64s(&t)?
        }
    };
    let out = c.add(Expand, &[x, s])?;
    c.set_out(out)
}

fn tile(c: &mut Ctx) -> MapResult {
    let mut x = c.input("X")?;
    if c.input_opt("RepeatTimes")?.is_some() || !c.input_names("repeat_times_tensor").is_empty() {
        return Err(unsupported("tile with repeats from a tensor"));
    }
    let mut reps = c.ints("repeat_times")?.unwrap_or_default();
    let rank = c.in_rank("X")?;
    if reps.len() < rank {
        let mut r = vec![1; rank - reps.len()];
        r.extend(reps);
        reps = r;
    } else if reps.len() > rank {
        let axes: Vec<i64> = (0..(reps.len() - rank) as i64).collect();
        x = c.add(Unsqueeze { axes: Some(axes) }, &[x])?;
    }
    let r = c.i64s(&reps)?;
    let out = c.add(Tile, &[x, r])?;
    c.set_out(out)
}

/// `pad3d` on NCDHW: paddings `[left, right, top, bottom, front, back]`.
fn pad3d(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    if c.string("data_format", "NCDHW")? != "NCDHW" {
        return Err(unsupported("pad3d with data_format other than NCDHW"));
    }
    if c.input_opt("Paddings")?.is_some() {
        return Err(unsupported("pad3d with paddings from a tensor"));
    }
    let p = c.ints("paddings")?.unwrap_or_else(|| vec![0; 6]);
    if p.len() != 6 {
        return Err(invalid(format!("pad3d needs 6 paddings, got {}", p.len())));
    }
    let mode = match c.string("mode", "constant")?.as_str() {
        "constant" => PadMode::Constant,
        "reflect" => PadMode::Reflect,
        "replicate" => PadMode::Edge,
        "circular" => PadMode::Wrap,
        m => return Err(unsupported(format!("pad3d mode '{m}'"))),
    };
    let pads = vec![0, 0, p[4], p[2], p[0], 0, 0, p[5], p[3], p[1]];
    let out = c.add(
        Pad {
            mode,
            pads: Some(pads),
            value: c.float("value", 0.0)?,
        },
        &[x],
    )?;
    c.set_out(out)
}
