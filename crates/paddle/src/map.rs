//! Paddle op → canonical op mapping: one table ([`ENTRIES`]), one function per Paddle op type.
//!
//! A Paddle op may become several canonical nodes (e.g. `elementwise_add` with `axis` is an
//! Unsqueeze of Y and an Add; `matmul` with `alpha` is a MatMul and a Mul). The mapping
//! function reads inputs and attributes through [`Ctx`], adds nodes, and binds the op's output
//! variables to the values that hold them.

use crate::attr::AttrValue;
use crate::model::Builder;
use crate::params::dtype_of;
use crate::proto::{OpDesc, VarDesc};
use ferrolite_core::frontend::{self, group_count, usizes};
use ferrolite_core::ops::elementwise::{
    Binary, BinaryKind, Cast, Clip, Compare, CompareKind, Identity, Logical, LogicalKind, Not,
    Unary, UnaryKind, Variadic, VariadicKind, Where,
};
use ferrolite_core::ops::linalg::conv::Conv;
use ferrolite_core::ops::linalg::conv_geometry::{AutoPad as ConvAutoPad, ConvParams};
use ferrolite_core::ops::linalg::conv_transpose::ConvTranspose;
use ferrolite_core::ops::linalg::matmul::MatMul;
use ferrolite_core::ops::nn::cumsum::CumSum;
use ferrolite_core::ops::nn::geometry::AutoPad;
use ferrolite_core::ops::nn::norm::{BatchNorm, GroupNorm, InstanceNorm, LayerNorm};
use ferrolite_core::ops::nn::pool::{GlobalPool, Pool, PoolKind};
use ferrolite_core::ops::nn::reduce::{ArgReduce, Reduce, ReduceKind};
use ferrolite_core::ops::nn::resize::{CoordMode, NearestMode, Resize, ResizeMode};
use ferrolite_core::ops::nn::softmax::{Softmax, SoftmaxKind};
use ferrolite_core::ops::nn::topk::TopK;
use ferrolite_core::ops::shape::{
    concat::Concat,
    constant_of_shape::ConstantOfShape,
    expand::{Expand, Tile},
    flatten::Flatten,
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
use ferrolite_core::{DType, Op, Tensor, ValueId};
use std::sync::Arc;

pub use ferrolite_core::frontend::MapError;

pub type MapResult = Result<(), MapError>;
pub type MapFn = fn(&mut Ctx) -> MapResult;

/// The mapping function of a Paddle op type.
pub fn lookup(op_type: &str) -> Option<MapFn> {
    frontend::lookup(&[ENTRIES], op_type)
}

/// Every supported op type (plus `feed` and `fetch`), sorted.
pub fn supported_ops() -> Vec<&'static str> {
    let mut v = frontend::op_types(&[ENTRIES]);
    v.extend(["feed", "fetch"]);
    v.sort_unstable();
    v
}

/// The one table.
pub const ENTRIES: &[(&str, MapFn)] = &[
    // elementwise binary (Paddle `axis` broadcasting)
    ("elementwise_add", elementwise_add),
    ("elementwise_sub", elementwise_sub),
    ("elementwise_mul", elementwise_mul),
    ("elementwise_div", elementwise_div),
    ("elementwise_pow", elementwise_pow),
    ("elementwise_max", elementwise_max),
    ("elementwise_min", elementwise_min),
    ("elementwise_mod", elementwise_mod),
    ("equal", equal),
    ("not_equal", not_equal),
    ("less_than", less_than),
    ("less_equal", less_equal),
    ("greater_than", greater_than),
    ("greater_equal", greater_equal),
    ("logical_and", logical_and),
    ("logical_or", logical_or),
    ("logical_xor", logical_xor),
    ("logical_not", logical_not),
    // activations and other unary ops
    ("relu", relu),
    ("relu6", relu6),
    ("sigmoid", sigmoid),
    ("tanh", tanh),
    ("exp", exp),
    ("log", log),
    ("sqrt", sqrt),
    ("rsqrt", rsqrt),
    ("abs", abs),
    ("floor", floor),
    ("ceil", ceil),
    ("round", round),
    ("sign", sign),
    ("erf", erf),
    ("sin", sin),
    ("cos", cos),
    ("reciprocal", reciprocal),
    ("square", square),
    ("softplus", softplus),
    ("softsign", softsign),
    ("mish", mish),
    ("gelu", gelu),
    ("leaky_relu", leaky_relu),
    ("elu", elu),
    ("selu", selu),
    ("hard_sigmoid", hard_sigmoid),
    ("hard_swish", hard_swish),
    ("swish", swish),
    ("silu", silu),
    ("prelu", prelu),
    ("clip", clip),
    ("pow", pow),
    ("scale", scale),
    ("dropout", dropout),
    ("cast", cast),
    ("assign", assign),
    ("where", where_),
    ("sum", sum),
    // linear algebra
    ("conv2d", conv2d),
    ("depthwise_conv2d", conv2d),
    ("conv2d_transpose", conv2d_transpose),
    ("depthwise_conv2d_transpose", conv2d_transpose),
    ("matmul_v2", matmul_v2),
    ("matmul", matmul),
    ("bmm", bmm),
    ("mul", mul),
    // normalization, pooling, reductions
    ("batch_norm", batch_norm),
    ("layer_norm", layer_norm),
    ("instance_norm", instance_norm),
    ("group_norm", group_norm),
    ("pool2d", pool2d),
    ("nearest_interp_v2", nearest_interp_v2),
    ("nearest_interp", nearest_interp_v2),
    ("bilinear_interp_v2", bilinear_interp_v2),
    ("bilinear_interp", bilinear_interp_v2),
    ("softmax", softmax),
    ("log_softmax", log_softmax),
    ("reduce_sum", reduce_sum),
    ("reduce_mean", reduce_mean),
    ("reduce_max", reduce_max),
    ("reduce_min", reduce_min),
    ("reduce_prod", reduce_prod),
    ("mean", mean),
    ("arg_max", arg_max),
    ("arg_min", arg_min),
    ("top_k_v2", top_k_v2),
    ("cumsum", cumsum),
    // shapes and data movement
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

/// One Paddle op as its mapping function sees it.
pub struct Ctx<'a, 'p> {
    b: &'a mut Builder<'p>,
    pub op: &'p OpDesc,
    /// Base name of the nodes this op becomes.
    pub node: String,
    /// Index of the first node of this op (later nodes and their values are "fresh").
    first_node: usize,
    count: usize,
}

fn invalid(msg: impl Into<String>) -> MapError {
    MapError::Invalid(msg.into())
}

fn unsupported(msg: impl Into<String>) -> MapError {
    MapError::Unsupported(msg.into())
}

impl<'a, 'p> Ctx<'a, 'p> {
    pub(crate) fn new(
        b: &'a mut Builder<'p>,
        op: &'p OpDesc,
        node: String,
        first_node: usize,
    ) -> Self {
        Ctx {
            b,
            op,
            node,
            first_node,
            count: 0,
        }
    }

    // ---- attributes ----

    pub fn attr(&self, name: &str) -> Result<Option<AttrValue>, MapError> {
        match self.op.attrs.iter().find(|a| a.name == name) {
            None => Ok(None),
            Some(a) => AttrValue::decode(a).map(Some).map_err(invalid),
        }
    }

    fn typed<T>(
        &self,
        name: &str,
        what: &str,
        f: impl FnOnce(&AttrValue) -> Option<T>,
    ) -> Result<Option<T>, MapError> {
        match self.attr(name)? {
            None => Ok(None),
            Some(v) => f(&v).map(Some).ok_or_else(|| {
                invalid(format!(
                    "attribute '{name}' has type {}, expected {what}",
                    v.type_name()
                ))
            }),
        }
    }

    pub fn int_opt(&self, name: &str) -> Result<Option<i64>, MapError> {
        self.typed(name, "an integer", AttrValue::as_i64)
    }
    pub fn int(&self, name: &str, default: i64) -> Result<i64, MapError> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }
    pub fn float(&self, name: &str, default: f64) -> Result<f64, MapError> {
        Ok(self
            .typed(name, "a number", AttrValue::as_f64)?
            .unwrap_or(default))
    }
    pub fn bool(&self, name: &str, default: bool) -> Result<bool, MapError> {
        Ok(self
            .typed(name, "a boolean", AttrValue::as_bool)?
            .unwrap_or(default))
    }
    pub fn string(&self, name: &str, default: &str) -> Result<String, MapError> {
        Ok(self
            .typed(name, "a string", |v| v.as_str().map(str::to_string))?
            .unwrap_or_else(|| default.to_string()))
    }
    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, MapError> {
        self.typed(name, "a list of integers", AttrValue::as_i64s)
    }
    pub fn floats(&self, name: &str) -> Result<Option<Vec<f64>>, MapError> {
        self.typed(name, "a list of numbers", AttrValue::as_f64s)
    }

    // ---- inputs and outputs ----

    fn args(list: &'p [crate::proto::OpVar], slot: &str) -> &'p [String] {
        list.iter()
            .find(|v| v.parameter == slot)
            .map_or(&[][..], |v| v.arguments.as_slice())
    }

    pub fn input_names(&self, slot: &str) -> &'p [String] {
        Self::args(&self.op.inputs, slot)
    }

    pub fn output_names(&self, slot: &str) -> &'p [String] {
        Self::args(&self.op.outputs, slot)
    }

    fn value_of(&self, var: &str) -> Result<ValueId, MapError> {
        self.b.names.get(var).copied().ok_or_else(|| {
            invalid(format!(
                "reads '{var}', which no feed, parameter or earlier op defines"
            ))
        })
    }

    /// All the values of an input slot (empty when absent).
    pub fn inputs(&self, slot: &str) -> Result<Vec<ValueId>, MapError> {
        self.input_names(slot)
            .iter()
            .map(|n| self.value_of(n))
            .collect()
    }

    pub fn input_opt(&self, slot: &str) -> Result<Option<ValueId>, MapError> {
        match self.input_names(slot).first() {
            None => Ok(None),
            Some(n) => self.value_of(n).map(Some),
        }
    }

    pub fn input(&self, slot: &str) -> Result<ValueId, MapError> {
        self.input_opt(slot)?
            .ok_or_else(|| invalid(format!("input '{slot}' is required")))
    }

    fn var(&self, name: &str) -> Option<&'p VarDesc> {
        self.b.vars.get(name).copied()
    }

    fn desc_of(&self, var: Option<&String>) -> Option<(DType, Vec<i64>)> {
        let v = self.var(var?)?;
        let t = v.r#type.as_ref()?.lod_tensor.as_ref()?.tensor.as_ref()?;
        Some((dtype_of(t.data_type)?, t.dims.clone()))
    }

    /// Declared dims of the first variable of an input slot (`-1` unknown). A parameter's
    /// actual shape is used when it is a constant.
    pub fn in_dims(&self, slot: &str) -> Option<Vec<i64>> {
        if let Ok(Some(v)) = self.input_opt(slot) {
            if let Some(t) = self.constant(v) {
                return Some(t.shape().iter().map(|&d| d as i64).collect());
            }
        }
        self.desc_of(self.input_names(slot).first()).map(|d| d.1)
    }

    pub fn in_rank(&self, slot: &str) -> Result<usize, MapError> {
        self.in_dims(slot)
            .map(|d| d.len())
            .ok_or_else(|| unsupported(format!("the rank of input '{slot}' is not declared")))
    }

    pub fn in_dtype(&self, slot: &str) -> Option<DType> {
        if let Ok(Some(v)) = self.input_opt(slot) {
            if let Some(t) = self.constant(v) {
                return Some(t.dtype());
            }
        }
        self.desc_of(self.input_names(slot).first()).map(|d| d.0)
    }

    pub fn out_desc(&self, slot: &str) -> Option<(DType, Vec<i64>)> {
        self.desc_of(self.output_names(slot).first())
    }

    pub fn constant(&self, v: ValueId) -> Option<&Tensor> {
        self.b.graph.value(v).constant.as_ref()
    }

    // ---- building ----

    fn next_name(&mut self) -> String {
        let n = if self.count == 0 {
            self.node.clone()
        } else {
            format!("{}/{}", self.node, self.count)
        };
        self.count += 1;
        n
    }

    /// Adds a node with `n` outputs.
    pub fn add_n(
        &mut self,
        op: impl Op,
        inputs: &[Option<ValueId>],
        n: usize,
    ) -> Result<Vec<ValueId>, MapError> {
        let name = self.next_name();
        let outs: Vec<ValueId> = (0..n)
            .map(|i| self.b.fresh_value(format!("{name}:{i}")))
            .collect();
        self.b
            .graph
            .add_node(name, Arc::new(op), inputs.to_vec(), outs.clone())
            .map_err(|e| invalid(e.to_string()))?;
        Ok(outs)
    }

    /// Adds a node with one output.
    pub fn add(&mut self, op: impl Op, inputs: &[ValueId]) -> Result<ValueId, MapError> {
        let ins: Vec<Option<ValueId>> = inputs.iter().map(|&v| Some(v)).collect();
        Ok(self.add_n(op, &ins, 1)?[0])
    }

    pub fn konst(&mut self, t: Tensor) -> ValueId {
        let name = format!("{}/const{}", self.node, self.count);
        self.count += 1;
        self.b.used.insert(name.clone());
        self.b.graph.add_constant(name, t)
    }

    pub fn i64s(&mut self, v: &[i64]) -> Result<ValueId, MapError> {
        let t = Tensor::from_slice(&[v.len()], v).map_err(|e| invalid(e.to_string()))?;
        Ok(self.konst(t))
    }

    /// A scalar constant of `dtype`.
    pub fn scalar(&mut self, dtype: DType, v: f64) -> Result<ValueId, MapError> {
        let t = Tensor::full(dtype, &[], v).map_err(|e| invalid(e.to_string()))?;
        Ok(self.konst(t))
    }

    fn is_fresh(&self, v: ValueId) -> bool {
        self.b
            .graph
            .value(v)
            .producer
            .is_some_and(|p| p.0 >= self.first_node)
    }

    /// Binds output `k` of a slot to a value (absent slots are ignored: optional outputs).
    pub fn set_nth(&mut self, slot: &str, k: usize, v: ValueId) {
        if let Some(var) = self.output_names(slot).get(k) {
            let fresh = self.is_fresh(v);
            self.b.bind(var, v, fresh);
        }
    }

    pub fn set(&mut self, slot: &str, v: ValueId) {
        self.set_nth(slot, 0, v)
    }

    pub fn set_out(&mut self, v: ValueId) -> MapResult {
        self.set("Out", v);
        Ok(())
    }

    /// Reshapes `v` (a constant when it is one) to `shape`.
    pub fn reshape_to(&mut self, v: ValueId, shape: &[i64]) -> Result<ValueId, MapError> {
        if let Some(t) = self.constant(v) {
            if shape.iter().all(|&d| d >= 0) {
                let s: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
                let t = t.reshaped(&s).map_err(|e| invalid(e.to_string()))?;
                return Ok(self.konst(t));
            }
        }
        let s = self.i64s(shape)?;
        self.add(Reshape { allowzero: false }, &[v, s])
    }

    /// `v` as an i64 tensor (shape inputs may be int32 in Paddle).
    pub fn to_i64(&mut self, v: ValueId) -> Result<ValueId, MapError> {
        if let Some(t) = self.constant(v) {
            if t.dtype() == DType::I64 {
                return Ok(v);
            }
        }
        self.add(Cast::new(DType::I64), &[v])
    }

    /// A 1-D i64 tensor from a list slot of 1-element tensors (`ShapeTensor`-style inputs).
    pub fn list_to_i64(&mut self, vs: &[ValueId]) -> Result<ValueId, MapError> {
        let mut parts = Vec::with_capacity(vs.len());
        for &v in vs {
            let c = self.to_i64(v)?;
            parts.push(self.reshape_to(c, &[1])?);
        }
        if parts.len() == 1 {
            return Ok(parts[0]);
        }
        self.add(Concat { axis: 0 }, &parts)
    }
}

// ---------------------------------------------------------------------------------------------
// elementwise

/// Lines `small` (of rank `small_rank`) up with a tensor of rank `big_rank` starting at `axis`
/// (Paddle's broadcasting), by appending trailing unit dims.
fn align(
    c: &mut Ctx,
    v: ValueId,
    small_dims: &[i64],
    big_rank: usize,
    axis: i64,
) -> Result<ValueId, MapError> {
    let mut dims = small_dims.to_vec();
    let axis = if axis < 0 {
        axis + big_rank as i64 - dims.len() as i64 + 1
    } else {
        axis
    };
    // Paddle drops trailing unit dims of Y that would run past X.
    while axis + dims.len() as i64 > big_rank as i64 && dims.last() == Some(&1) {
        dims.pop();
    }
    let trailing = big_rank as i64 - axis - dims.len() as i64;
    if axis < 0 || trailing < 0 {
        return Err(invalid(format!(
            "an input of dims {small_dims:?} cannot be broadcast at axis {axis} onto rank {big_rank}"
        )));
    }
    if trailing == 0 && dims.len() == small_dims.len() {
        return Ok(v);
    }
    let mut shape = dims.clone();
    shape.extend(std::iter::repeat_n(1, trailing as usize));
    if c.constant(v).is_some() || dims.len() != small_dims.len() {
        // A reshape with 0 = copy keeps unknown dims.
        let s: Vec<i64> = shape
            .iter()
            .enumerate()
            .map(|(i, &d)| if d < 0 && i < dims.len() { 0 } else { d })
            .collect();
        return c.reshape_to(v, &s);
    }
    let axes: Vec<i64> = (dims.len() as i64..(dims.len() as i64 + trailing)).collect();
    c.add(Unsqueeze { axes: Some(axes) }, &[v])
}

/// X and Y of an elementwise op, Y (or X, when it is the smaller) aligned at `axis`.
fn broadcast_pair(c: &mut Ctx) -> Result<(ValueId, ValueId), MapError> {
    let x = c.input("X")?;
    let y = c.input("Y")?;
    let axis = c.int("axis", -1)?;
    if axis == -1 {
        return Ok((x, y));
    }
    let xd = c
        .in_dims("X")
        .ok_or_else(|| unsupported("elementwise 'axis' with an undeclared rank of X"))?;
    let yd = c
        .in_dims("Y")
        .ok_or_else(|| unsupported("elementwise 'axis' with an undeclared rank of Y"))?;
    if xd.len() >= yd.len() {
        let y = align(c, y, &yd, xd.len(), axis)?;
        Ok((x, y))
    } else {
        let x = align(c, x, &xd, yd.len(), axis)?;
        Ok((x, y))
    }
}

fn binary(c: &mut Ctx, kind: BinaryKind) -> MapResult {
    let (x, y) = broadcast_pair(c)?;
    let out = c.add(Binary::new(kind), &[x, y])?;
    c.set_out(out)
}

fn elementwise_add(c: &mut Ctx) -> MapResult {
    binary(c, BinaryKind::Add)
}
fn elementwise_sub(c: &mut Ctx) -> MapResult {
    binary(c, BinaryKind::Sub)
}
fn elementwise_mul(c: &mut Ctx) -> MapResult {
    binary(c, BinaryKind::Mul)
}
fn elementwise_div(c: &mut Ctx) -> MapResult {
    binary(c, BinaryKind::Div)
}
fn elementwise_pow(c: &mut Ctx) -> MapResult {
    binary(c, BinaryKind::Pow)
}
fn elementwise_mod(c: &mut Ctx) -> MapResult {
    // Paddle's mod takes the divisor's sign (Python semantics): ONNX Mod with fmod=0, which
    // the engine defines for integers.
    binary(c, BinaryKind::Mod { fmod: false })
}
fn variadic2(c: &mut Ctx, kind: VariadicKind) -> MapResult {
    let (x, y) = broadcast_pair(c)?;
    let out = c.add(Variadic { kind }, &[x, y])?;
    c.set_out(out)
}
fn elementwise_max(c: &mut Ctx) -> MapResult {
    variadic2(c, VariadicKind::Max)
}
fn elementwise_min(c: &mut Ctx) -> MapResult {
    variadic2(c, VariadicKind::Min)
}

fn compare(c: &mut Ctx, kind: CompareKind, negate: bool) -> MapResult {
    let (x, y) = broadcast_pair(c)?;
    let mut out = c.add(Compare { kind }, &[x, y])?;
    if negate {
        out = c.add(Not, &[out])?;
    }
    c.set_out(out)
}
fn equal(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::Equal, false)
}
fn not_equal(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::Equal, true)
}
fn less_than(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::Less, false)
}
fn less_equal(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::LessOrEqual, false)
}
fn greater_than(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::Greater, false)
}
fn greater_equal(c: &mut Ctx) -> MapResult {
    compare(c, CompareKind::GreaterOrEqual, false)
}
fn logical(c: &mut Ctx, kind: LogicalKind) -> MapResult {
    let (x, y) = broadcast_pair(c)?;
    let out = c.add(Logical { kind }, &[x, y])?;
    c.set_out(out)
}
fn logical_and(c: &mut Ctx) -> MapResult {
    logical(c, LogicalKind::And)
}
fn logical_or(c: &mut Ctx) -> MapResult {
    logical(c, LogicalKind::Or)
}
fn logical_xor(c: &mut Ctx) -> MapResult {
    logical(c, LogicalKind::Xor)
}
fn logical_not(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let out = c.add(Not, &[x])?;
    c.set_out(out)
}

// ---------------------------------------------------------------------------------------------
// unary

fn unary(c: &mut Ctx, kind: UnaryKind) -> MapResult {
    let x = c.input("X")?;
    let out = c.add(Unary { kind }, &[x])?;
    c.set_out(out)
}

ferrolite_core::plain_unary!(
    |c: &mut Ctx, kind| -> MapResult { unary(c, kind) };
    relu => Relu, sigmoid => Sigmoid, tanh => Tanh, exp => Exp, log => Log, sqrt => Sqrt,
    abs => Abs, floor => Floor, ceil => Ceil, round => Round, sign => Sign, erf => Erf,
    sin => Sin, cos => Cos, reciprocal => Reciprocal, softsign => Softsign, mish => Mish,
);

fn rsqrt(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let s = c.add(
        Unary {
            kind: UnaryKind::Sqrt,
        },
        &[x],
    )?;
    let out = c.add(
        Unary {
            kind: UnaryKind::Reciprocal,
        },
        &[s],
    )?;
    c.set_out(out)
}

fn square(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let out = c.add(Binary::new(BinaryKind::Mul), &[x, x])?;
    c.set_out(out)
}

fn softplus(c: &mut Ctx) -> MapResult {
    let beta = c.float("beta", 1.0)?;
    if beta != 1.0 {
        return Err(unsupported(format!("softplus with beta={beta}")));
    }
    unary(c, UnaryKind::Softplus)
}

fn gelu(c: &mut Ctx) -> MapResult {
    let tanh = c.bool("approximate", false)?;
    unary(c, UnaryKind::Gelu { tanh })
}

fn leaky_relu(c: &mut Ctx) -> MapResult {
    let alpha = c.float("alpha", 0.02)? as f32;
    unary(c, UnaryKind::LeakyRelu { alpha })
}

fn elu(c: &mut Ctx) -> MapResult {
    let alpha = c.float("alpha", 1.0)? as f32;
    unary(c, UnaryKind::Elu { alpha })
}

fn selu(c: &mut Ctx) -> MapResult {
    let alpha = c.float("alpha", UnaryKind::SELU_ALPHA as f64)? as f32;
    let gamma = c.float("scale", UnaryKind::SELU_GAMMA as f64)? as f32;
    unary(c, UnaryKind::Selu { alpha, gamma })
}

fn hard_sigmoid(c: &mut Ctx) -> MapResult {
    let alpha = c.float("slope", 0.2)? as f32;
    let beta = c.float("offset", 0.5)? as f32;
    unary(c, UnaryKind::HardSigmoid { alpha, beta })
}

/// `x * min(max(x + offset, 0), threshold) / scale`; the defaults (6, 6, 3) are ONNX HardSwish.
fn hard_swish(c: &mut Ctx) -> MapResult {
    let threshold = c.float("threshold", 6.0)?;
    let scale = c.float("scale", 6.0)?;
    let offset = c.float("offset", 3.0)?;
    if (threshold, scale, offset) == (6.0, 6.0, 3.0) {
        return unary(c, UnaryKind::HardSwish);
    }
    let x = c.input("X")?;
    let dt = c.in_dtype("X").unwrap_or(DType::F32);
    let o = c.scalar(dt, offset)?;
    let t = c.add(Binary::new(BinaryKind::Add), &[x, o])?;
    let t = c.add(
        Clip {
            min: Some(0.0),
            max: Some(threshold as f32),
        },
        &[t],
    )?;
    let t = c.add(Binary::new(BinaryKind::Mul), &[x, t])?;
    let s = c.scalar(dt, scale)?;
    let out = c.add(Binary::new(BinaryKind::Div), &[t, s])?;
    c.set_out(out)
}

/// `x * sigmoid(beta * x)`.
fn swish_with(c: &mut Ctx, beta: f64) -> MapResult {
    let x = c.input("X")?;
    let mut z = x;
    if beta != 1.0 {
        let dt = c.in_dtype("X").unwrap_or(DType::F32);
        let b = c.scalar(dt, beta)?;
        z = c.add(Binary::new(BinaryKind::Mul), &[x, b])?;
    }
    let s = c.add(
        Unary {
            kind: UnaryKind::Sigmoid,
        },
        &[z],
    )?;
    let out = c.add(Binary::new(BinaryKind::Mul), &[x, s])?;
    c.set_out(out)
}
fn swish(c: &mut Ctx) -> MapResult {
    let beta = c.float("beta", 1.0)?;
    swish_with(c, beta)
}
fn silu(c: &mut Ctx) -> MapResult {
    swish_with(c, 1.0)
}

fn relu6(c: &mut Ctx) -> MapResult {
    let threshold = c.float("threshold", 6.0)? as f32;
    let x = c.input("X")?;
    let out = c.add(
        Clip {
            min: Some(0.0),
            max: Some(threshold),
        },
        &[x],
    )?;
    c.set_out(out)
}

fn clip(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let dt = c.in_dtype("X").unwrap_or(DType::F32);
    let min = match c.input_opt("Min")? {
        Some(v) => v,
        None => {
            let v = c.float("min", f32::MIN as f64)?;
            c.scalar(dt, v)?
        }
    };
    let max = match c.input_opt("Max")? {
        Some(v) => v,
        None => {
            let v = c.float("max", f32::MAX as f64)?;
            c.scalar(dt, v)?
        }
    };
    let min = c.reshape_to(min, &[])?;
    let max = c.reshape_to(max, &[])?;
    let out = c.add(Clip::default(), &[x, min, max])?;
    c.set_out(out)
}

/// PReLU; `mode` all / channel / element decides how Alpha lines up with X.
fn prelu(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let alpha = c.input("Alpha")?;
    let mode = c.string("mode", "all")?;
    if c.string("data_format", "NCHW")? != "NCHW" {
        return Err(unsupported("prelu with data_format other than NCHW"));
    }
    let rank = c.in_rank("X")?;
    let alpha = match mode.as_str() {
        "all" => c.reshape_to(alpha, &[1])?,
        "channel" => {
            let mut s = vec![-1];
            s.extend(std::iter::repeat_n(1, rank.saturating_sub(2)));
            c.reshape_to(alpha, &s)?
        }
        "element" => {
            let xd = c.in_dims("X").unwrap_or_default();
            let s: Vec<i64> = xd
                .iter()
                .skip(1)
                .map(|&d| if d < 0 { 0 } else { d })
                .collect();
            c.reshape_to(alpha, &s)?
        }
        m => return Err(unsupported(format!("prelu mode '{m}'"))),
    };
    let out = c.add(Binary::new(BinaryKind::PRelu), &[x, alpha])?;
    c.set_out(out)
}

fn pow(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let e = match c.input_opt("FactorTensor")? {
        Some(v) => v,
        None => {
            let f = c.float("factor", 1.0)?;
            let dt = c.in_dtype("X").unwrap_or(DType::F32);
            c.scalar(dt, f)?
        }
    };
    let out = c.add(Binary::new(BinaryKind::Pow), &[x, e])?;
    c.set_out(out)
}

/// `scale * x + bias`, or `scale * (x + bias)` when `bias_after_scale` is false.
fn scale(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let dt = c.in_dtype("X").unwrap_or(DType::F32);
    let s = c.float("scale", 1.0)?;
    let bias = c.float("bias", 0.0)?;
    let after = c.bool("bias_after_scale", true)?;
    let scale_v = match c.input_opt("ScaleTensor")? {
        Some(v) => Some(v),
        None if s != 1.0 => Some(c.scalar(dt, s)?),
        None => None,
    };
    let mut v = x;
    if !after && bias != 0.0 {
        let b = c.scalar(dt, bias)?;
        v = c.add(Binary::new(BinaryKind::Add), &[v, b])?;
    }
    if let Some(sv) = scale_v {
        v = c.add(Binary::new(BinaryKind::Mul), &[v, sv])?;
    }
    if after && bias != 0.0 {
        let b = c.scalar(dt, bias)?;
        v = c.add(Binary::new(BinaryKind::Add), &[v, b])?;
    }
    if v == x {
        v = c.add(Identity, &[x])?;
    }
    c.set_out(v)
}

/// Inference dropout: identity (`upscale_in_train`) or `x * (1 - p)` (`downgrade_in_infer`).
fn dropout(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let p = c.float("dropout_prob", 0.5)?;
    let imp = c.string("dropout_implementation", "downgrade_in_infer")?;
    let out = match imp.as_str() {
        "upscale_in_train" => c.add(Identity, &[x])?,
        "downgrade_in_infer" => {
            let dt = c.in_dtype("X").unwrap_or(DType::F32);
            let k = c.scalar(dt, 1.0 - p)?;
            c.add(Binary::new(BinaryKind::Mul), &[x, k])?
        }
        other => return Err(invalid(format!("unknown dropout_implementation '{other}'"))),
    };
    c.set_out(out)
}

fn cast(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let t = c.int("out_dtype", -1)?;
    let to = dtype_of(t as i32).ok_or_else(|| {
        unsupported(format!(
            "cast to {}",
            crate::proto::var_type::name(t as i32)
        ))
    })?;
    let out = c.add(Cast::new(to), &[x])?;
    c.set_out(out)
}

fn assign(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let out = c.add(Identity, &[x])?;
    c.set_out(out)
}

fn where_(c: &mut Ctx) -> MapResult {
    let cond = c.input("Condition")?;
    let x = c.input("X")?;
    let y = c.input("Y")?;
    let out = c.add(Where, &[cond, x, y])?;
    c.set_out(out)
}

fn sum(c: &mut Ctx) -> MapResult {
    let xs = c.inputs("X")?;
    if xs.is_empty() {
        return Err(invalid("sum needs at least one input"));
    }
    let out = c.add(
        Variadic {
            kind: VariadicKind::Sum,
        },
        &xs,
    )?;
    c.set_out(out)
}

// ---------------------------------------------------------------------------------------------
// convolution and matmul

/// Paddle paddings `[h, w]` or `[top, bottom, left, right]` as ONNX `[begin..., end...]`.
fn onnx_pads(p: &[i64]) -> Result<Vec<i64>, MapError> {
    match p.len() {
        2 => Ok(vec![p[0], p[1], p[0], p[1]]),
        4 => Ok(vec![p[0], p[2], p[1], p[3]]),
        n => Err(invalid(format!(
            "'paddings' must have 2 or 4 entries, got {n}"
        ))),
    }
}

fn nchw(c: &Ctx) -> MapResult {
    let f = c.string("data_format", "NCHW")?;
    if !matches!(f.as_str(), "NCHW" | "AnyLayout") {
        return Err(unsupported(format!("data_format '{f}'")));
    }
    Ok(())
}

/// Conv geometry from `strides`, `paddings`, `dilations`, `padding_algorithm`.
fn conv_params(c: &Ctx) -> Result<ConvParams, MapError> {
    nchw(c)?;
    let strides = c.ints("strides")?.unwrap_or_else(|| vec![1, 1]);
    let mut dilations = c.ints("dilations")?.unwrap_or_else(|| vec![1, 1]);
    let pads = onnx_pads(&c.ints("paddings")?.unwrap_or_else(|| vec![0, 0]))?;
    let algo = c.string("padding_algorithm", "EXPLICIT")?;
    let auto_pad = match algo.as_str() {
        "EXPLICIT" | "" => ConvAutoPad::NotSet,
        // Paddle's SAME ignores dilation and puts an odd pixel at the end.
        "SAME" => {
            dilations = vec![1; dilations.len()];
            ConvAutoPad::SameUpper
        }
        "VALID" => ConvAutoPad::Valid,
        other => return Err(invalid(format!("unknown padding_algorithm '{other}'"))),
    };
    Ok(ConvParams {
        kernel_shape: None,
        strides: Some(usizes(&strides, "'strides'")?),
        dilations: Some(usizes(&dilations, "'dilations'")?),
        pads: Some(usizes(&pads, "'paddings'")?),
        auto_pad,
    })
}

fn groups(c: &Ctx) -> Result<usize, MapError> {
    group_count(c.int("groups", 1)?, "groups")
}

fn conv2d(c: &mut Ctx) -> MapResult {
    let x = c.input("Input")?;
    let w = c.input("Filter")?;
    let params = conv_params(c)?;
    let group = groups(c)?;
    let mut ins = vec![x, w];
    if let Some(b) = c.input_opt("Bias")? {
        ins.push(b);
    }
    let out = c.add(
        Conv {
            params,
            group,
            activation: None,
        },
        &ins,
    )?;
    c.set("Output", out);
    Ok(())
}

fn conv2d_transpose(c: &mut Ctx) -> MapResult {
    let x = c.input("Input")?;
    let w = c.input("Filter")?;
    let params = conv_params(c)?;
    let group = groups(c)?;
    let output_padding = match c.ints("output_padding")? {
        Some(v) if !v.is_empty() => Some(usizes(&v, "'output_padding'")?),
        _ => None,
    };
    let output_shape = match c.ints("output_size")? {
        Some(v) if !v.is_empty() => Some(usizes(&v, "'output_size'")?),
        _ => None,
    };
    let out = c.add(
        ConvTranspose {
            params,
            group,
            activation: None,
            output_padding,
            output_shape,
        },
        &[x, w],
    )?;
    c.set("Output", out);
    Ok(())
}

/// Swaps the last two axes of a value of rank `rank` (nothing for rank < 2).
fn transpose_last2(c: &mut Ctx, v: ValueId, rank: usize) -> Result<ValueId, MapError> {
    if rank < 2 {
        return Ok(v);
    }
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(rank - 1, rank - 2);
    c.add(Transpose { perm: Some(perm) }, &[v])
}

fn matmul_with(c: &mut Ctx, tx: bool, ty: bool, alpha: f64) -> MapResult {
    let mut x = c.input("X")?;
    let mut y = c.input("Y")?;
    if tx {
        let r = c.in_rank("X")?;
        x = transpose_last2(c, x, r)?;
    }
    if ty {
        let r = c.in_rank("Y")?;
        y = transpose_last2(c, y, r)?;
    }
    let mut out = c.add(MatMul, &[x, y])?;
    if alpha != 1.0 {
        let dt = c.in_dtype("X").unwrap_or(DType::F32);
        let a = c.scalar(dt, alpha)?;
        out = c.add(Binary::new(BinaryKind::Mul), &[out, a])?;
    }
    c.set_out(out)
}

fn matmul_v2(c: &mut Ctx) -> MapResult {
    let tx = c.bool("trans_x", false)?;
    let ty = c.bool("trans_y", false)?;
    matmul_with(c, tx, ty, 1.0)
}

fn matmul(c: &mut Ctx) -> MapResult {
    let tx = c.bool("transpose_X", false)?;
    let ty = c.bool("transpose_Y", false)?;
    let alpha = c.float("alpha", 1.0)?;
    matmul_with(c, tx, ty, alpha)
}

fn bmm(c: &mut Ctx) -> MapResult {
    matmul_with(c, false, false, 1.0)
}

/// `mul`: X flattened to 2-D at `x_num_col_dims`, Y at `y_num_col_dims`, and the product
/// reshaped to `X.dims[..xn] ++ Y.dims[yn..]`.
fn mul(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let y = c.input("Y")?;
    let xn = c.int("x_num_col_dims", 1)?;
    let yn = c.int("y_num_col_dims", 1)?;
    let xr = c.in_rank("X")? as i64;
    let yr = c.in_rank("Y")? as i64;
    if !(1..xr.max(2)).contains(&xn) || !(1..yr.max(2)).contains(&yn) {
        return Err(invalid(format!(
            "num_col_dims ({xn}, {yn}) out of range for ranks ({xr}, {yr})"
        )));
    }
    let x2 = if xr == 2 && xn == 1 {
        x
    } else {
        c.add(Flatten { axis: xn }, &[x])?
    };
    let y2 = if yr == 2 && yn == 1 {
        y
    } else {
        c.add(Flatten { axis: yn }, &[y])?
    };
    let mut out = c.add(MatMul, &[x2, y2])?;
    if !(xr == 2 && xn == 1 && yr == 2 && yn == 1) {
        let parts = [
            c.add(
                Shape {
                    start: 0,
                    end: Some(xn),
                },
                &[x],
            )?,
            c.add(
                Shape {
                    start: yn,
                    end: None,
                },
                &[y],
            )?,
        ];
        let s = c.add(Concat { axis: 0 }, &parts)?;
        out = c.add(Reshape { allowzero: false }, &[out, s])?;
    }
    c.set_out(out)
}

// ---------------------------------------------------------------------------------------------
// normalization, pooling, reductions

fn batch_norm(c: &mut Ctx) -> MapResult {
    let layout = c.string("data_layout", "NCHW")?;
    if !matches!(layout.as_str(), "NCHW" | "AnyLayout") {
        return Err(unsupported(format!(
            "batch_norm with data_layout '{layout}'"
        )));
    }
    let ins = [
        c.input("X")?,
        c.input("Scale")?,
        c.input("Bias")?,
        c.input("Mean")?,
        c.input("Variance")?,
    ];
    let epsilon = c.float("epsilon", 1e-5)?;
    let out = c.add(BatchNorm { epsilon }, &ins)?;
    c.set("Y", out);
    Ok(())
}

/// Paddle normalizes over the axes from `begin_norm_axis` on, with Scale and Bias flattened
/// to one dimension: they are reshaped to the normalized dims.
fn layer_norm(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let xd = c
        .in_dims("X")
        .ok_or_else(|| unsupported("layer_norm with an undeclared rank of X"))?;
    let rank = xd.len() as i64;
    let begin = c.int("begin_norm_axis", 1)?;
    let begin = if begin < 0 { begin + rank } else { begin };
    if !((0..rank).contains(&begin) || (rank == 0 && begin == 0)) {
        return Err(invalid(format!(
            "begin_norm_axis {begin} out of range for rank {rank}"
        )));
    }
    let norm_dims: Vec<i64> = xd[begin as usize..].to_vec();
    let epsilon = c.float("epsilon", 1e-5)?;
    let dt = c.in_dtype("X").unwrap_or(DType::F32);
    let fit = |c: &mut Ctx, v: ValueId| -> Result<ValueId, MapError> {
        if norm_dims.len() == 1 {
            return Ok(v);
        }
        if norm_dims.iter().any(|&d| d < 0) {
            return Err(unsupported(
                "layer_norm over several axes with unknown sizes",
            ));
        }
        c.reshape_to(v, &norm_dims)
    };
    let scale = match c.input_opt("Scale")? {
        Some(s) => fit(c, s)?,
        None => {
            let t = Tensor::full(dt, &[1], 1.0).map_err(|e| invalid(e.to_string()))?;
            c.konst(t)
        }
    };
    let mut ins = vec![Some(x), Some(scale)];
    if let Some(b) = c.input_opt("Bias")? {
        ins.push(Some(fit(c, b)?));
    }
    let out = c.add_n(
        LayerNorm {
            axis: begin,
            epsilon,
            stash_type: 1,
            num_outputs: 1,
        },
        &ins,
        1,
    )?[0];
    c.set("Y", out);
    Ok(())
}

fn instance_norm(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let (Some(s), Some(b)) = (c.input_opt("Scale")?, c.input_opt("Bias")?) else {
        return Err(unsupported("instance_norm without Scale and Bias"));
    };
    let epsilon = c.float("epsilon", 1e-5)?;
    let out = c.add(InstanceNorm { epsilon }, &[x, s, b])?;
    c.set("Y", out);
    Ok(())
}

fn group_norm(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let (Some(s), Some(b)) = (c.input_opt("Scale")?, c.input_opt("Bias")?) else {
        return Err(unsupported("group_norm without Scale and Bias"));
    };
    nchw(c).or_else(|_| {
        let l = c.string("data_layout", "NCHW")?;
        if l == "NCHW" {
            Ok(())
        } else {
            Err(unsupported(format!("group_norm with data_layout '{l}'")))
        }
    })?;
    let num_groups = c.int("groups", 1)?;
    let epsilon = c.float("epsilon", 1e-5)?;
    let out = c.add(
        GroupNorm {
            num_groups,
            epsilon,
            per_group_affine: false,
        },
        &[x, s, b],
    )?;
    c.set("Y", out);
    Ok(())
}

fn nearest_interp_v2(c: &mut Ctx) -> MapResult {
    interp(c, ResizeMode::Nearest)
}

fn bilinear_interp_v2(c: &mut Ctx) -> MapResult {
    interp(c, ResizeMode::Linear)
}

/// `*_interp(_v2)` as a Resize. Output size, by priority: the `SizeTensor` list, the `OutSize`
/// tensor, the `out_h`/`out_w` attributes, the `scale` attribute.
fn interp(c: &mut Ctx, mode: ResizeMode) -> MapResult {
    nchw(c)?;
    let x = c.input("X")?;
    let align_corners = c.bool("align_corners", false)?;
    // Paddle's align_mode 0 is half-pixel sampling (bilinear only); 1 is asymmetric.
    let half_pixel = mode == ResizeMode::Linear && c.int("align_mode", 1)? == 0;
    let coordinate_transformation_mode = if align_corners {
        CoordMode::AlignCorners
    } else if half_pixel {
        CoordMode::HalfPixel
    } else {
        CoordMode::Asymmetric
    };
    // Paddle's nearest rounds half up with align_corners and truncates otherwise.
    let nearest_mode = if align_corners {
        NearestMode::RoundPreferCeil
    } else {
        NearestMode::Floor
    };
    let resize = Resize {
        mode,
        coordinate_transformation_mode,
        nearest_mode,
        ..Default::default()
    };
    if c.input_opt("Scale")?.is_some() {
        return Err(unsupported("interpolation with a Scale tensor input"));
    }
    let list = c.inputs("SizeTensor")?;
    let hw = if !list.is_empty() {
        Some(c.list_to_i64(&list)?)
    } else if let Some(s) = c.input_opt("OutSize")? {
        Some(c.to_i64(s)?)
    } else {
        let (h, w) = (c.int("out_h", -1)?, c.int("out_w", -1)?);
        if h > 0 && w > 0 {
            Some(c.i64s(&[h, w])?)
        } else {
            None
        }
    };
    let out = match hw {
        Some(hw) => {
            let nc = c.add(
                Shape {
                    start: 0,
                    end: Some(2),
                },
                &[x],
            )?;
            let sizes = c.add(Concat { axis: 0 }, &[nc, hw])?;
            c.add_n(resize, &[Some(x), None, None, Some(sizes)], 1)?[0]
        }
        None => {
            let scale = c.floats("scale")?.unwrap_or_default();
            let (sh, sw) = match scale.as_slice() {
                [s] => (*s, *s),
                [h, w] => (*h, *w),
                _ => return Err(invalid("interpolation needs an output size or a scale")),
            };
            if sh <= 0.0 || sw <= 0.0 {
                return Err(invalid(format!("scale {scale:?} must be positive")));
            }
            let scales = Tensor::from_vec(&[4], vec![1.0f32, 1.0, sh as f32, sw as f32])
                .map_err(|e| invalid(e.to_string()))?;
            let scales = c.konst(scales);
            c.add_n(resize, &[Some(x), None, Some(scales), None], 1)?[0]
        }
    };
    c.set_out(out)
}

fn pool2d(c: &mut Ctx) -> MapResult {
    nchw(c)?;
    let x = c.input("X")?;
    let kind = match c.string("pooling_type", "max")?.as_str() {
        "max" => PoolKind::Max,
        "avg" => PoolKind::Average,
        t => return Err(unsupported(format!("pooling_type '{t}'"))),
    };
    let mut ksize = c
        .ints("ksize")?
        .ok_or_else(|| invalid("attribute 'ksize' is required"))?;
    let mut strides = c.ints("strides")?.unwrap_or_else(|| vec![1, 1]);
    let mut pads = onnx_pads(&c.ints("paddings")?.unwrap_or_else(|| vec![0, 0]))?;
    let global = c.bool("global_pooling", false)?;
    let adaptive = c.bool("adaptive", false)?;
    if global || (adaptive && ksize.iter().all(|&k| k == 1)) {
        let out = c.add(GlobalPool { kind, p: 2.0 }, &[x])?;
        return c.set_out(out);
    }
    if adaptive {
        // Adaptive pooling with output sizes dividing the input is a plain pooling.
        let xd = c.in_dims("X").unwrap_or_default();
        if xd.len() != 4 || xd[2] <= 0 || xd[3] <= 0 {
            return Err(unsupported("adaptive pool2d with unknown input size"));
        }
        let mut k = Vec::new();
        for (i, &o) in ksize.iter().enumerate() {
            let n = xd[2 + i];
            if o <= 0 || n % o != 0 {
                return Err(unsupported(format!(
                    "adaptive pool2d from {n} to {o} (not a divisor)"
                )));
            }
            k.push(n / o);
        }
        strides = k.clone();
        ksize = k;
        pads = vec![0; 4];
    }
    let auto_pad = match c.string("padding_algorithm", "EXPLICIT")?.as_str() {
        "EXPLICIT" | "" => AutoPad::NotSet,
        "SAME" => AutoPad::SameUpper,
        "VALID" => AutoPad::Valid,
        other => return Err(invalid(format!("unknown padding_algorithm '{other}'"))),
    };
    let out = c.add(
        Pool {
            kind,
            kernel_shape: ksize,
            strides,
            pads,
            dilations: Vec::new(),
            auto_pad,
            ceil_mode: c.bool("ceil_mode", false)?,
            count_include_pad: !c.bool("exclusive", true)?,
            storage_order: 0,
            p: 2.0,
            with_indices: false,
        },
        &[x],
    )?;
    c.set_out(out)
}

fn softmax_kind(c: &mut Ctx, kind: SoftmaxKind) -> MapResult {
    let x = c.input("X")?;
    let axis = c.int("axis", -1)?;
    let out = c.add(
        Softmax {
            kind,
            axis,
            legacy_2d: false,
        },
        &[x],
    )?;
    c.set_out(out)
}
fn softmax(c: &mut Ctx) -> MapResult {
    softmax_kind(c, SoftmaxKind::Softmax)
}
fn log_softmax(c: &mut Ctx) -> MapResult {
    softmax_kind(c, SoftmaxKind::LogSoftmax)
}

fn reduce(c: &mut Ctx, kind: ReduceKind) -> MapResult {
    let x = c.input("X")?;
    let all = c.bool("reduce_all", false)?;
    let dims = c.ints("dim")?.unwrap_or_default();
    let axes = if all || dims.is_empty() {
        None
    } else {
        Some(dims)
    };
    let out = c.add(
        Reduce {
            kind,
            axes,
            keepdims: c.bool("keep_dim", false)?,
            noop_with_empty_axes: false,
        },
        &[x],
    )?;
    c.set_out(out)
}
fn reduce_sum(c: &mut Ctx) -> MapResult {
    reduce(c, ReduceKind::Sum)
}
fn reduce_mean(c: &mut Ctx) -> MapResult {
    reduce(c, ReduceKind::Mean)
}
fn reduce_max(c: &mut Ctx) -> MapResult {
    reduce(c, ReduceKind::Max)
}
fn reduce_min(c: &mut Ctx) -> MapResult {
    reduce(c, ReduceKind::Min)
}
fn reduce_prod(c: &mut Ctx) -> MapResult {
    reduce(c, ReduceKind::Prod)
}
fn mean(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let out = c.add(
        Reduce {
            kind: ReduceKind::Mean,
            axes: None,
            keepdims: false,
            noop_with_empty_axes: false,
        },
        &[x],
    )?;
    c.set_out(out)
}

fn arg(c: &mut Ctx, max: bool) -> MapResult {
    let mut x = c.input("X")?;
    let mut axis = c.int("axis", -1)?;
    if c.bool("flatten", false)? {
        x = c.reshape_to(x, &[-1])?;
        axis = 0;
    }
    let mut out = c.add(
        ArgReduce {
            max,
            axis,
            keepdims: c.bool("keepdims", false)?,
            select_last_index: false,
        },
        &[x],
    )?;
    let dt = c.int("dtype", crate::proto::var_type::INT64 as i64)?;
    if dt as i32 == crate::proto::var_type::INT32 {
        out = c.add(Cast::new(DType::I32), &[out])?;
    }
    c.set_out(out)
}
fn arg_max(c: &mut Ctx) -> MapResult {
    arg(c, true)
}
fn arg_min(c: &mut Ctx) -> MapResult {
    arg(c, false)
}

fn top_k_v2(c: &mut Ctx) -> MapResult {
    let x = c.input("X")?;
    let k = match c.input_opt("K")? {
        Some(k) => {
            let k = c.to_i64(k)?;
            c.reshape_to(k, &[1])?
        }
        None => {
            let k = c.int("k", 1)?;
            c.i64s(&[k])?
        }
    };
    let outs = c.add_n(
        TopK {
            axis: c.int("axis", -1)?,
            largest: c.bool("largest", true)?,
            sorted: c.bool("sorted", true)?,
            k: None,
        },
        &[Some(x), Some(k)],
        2,
    )?;
    c.set("Out", outs[0]);
    c.set("Indices", outs[1]);
    Ok(())
}

fn cumsum(c: &mut Ctx) -> MapResult {
    let mut x = c.input("X")?;
    let mut axis = c.int("axis", -1)?;
    if c.bool("flatten", false)? {
        x = c.reshape_to(x, &[-1])?;
        axis = 0;
    }
    let a = c.konst(Tensor::scalar(axis));
    let out = c.add(
        CumSum {
            exclusive: c.bool("exclusive", false)?,
            reverse: c.bool("reverse", false)?,
        },
        &[x, a],
    )?;
    c.set_out(out)
}

// ---------------------------------------------------------------------------------------------
// shapes

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
