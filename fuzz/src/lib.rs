//! The fuzz targets' support: [`exercise`], which drives an untrusted model end to end (shared
//! with the hostile-input tests), and the structure-aware ONNX mutator of `onnx_structured`.
//! (How a Paddle model is packed into one input is [`exercise::packed_paddle`].)

pub mod exercise;

use ferrolite::onnx::proto::{
    attribute_type, data_type, tensor_shape_proto, type_proto, ModelProto, NodeProto,
};
use prost::Message;

/// A small deterministic generator (xorshift), seeded by libFuzzer.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// Values that break arithmetic: zero, negatives, huge, and near the type limits.
    fn nasty_i64(&mut self) -> i64 {
        const VALUES: [i64; 12] = [
            0,
            1,
            -1,
            2,
            3,
            7,
            1 << 20,
            1 << 31,
            1 << 40,
            -(1 << 40),
            i64::MAX,
            i64::MIN,
        ];
        VALUES[self.below(VALUES.len())]
    }

    fn nasty_f32(&mut self) -> f32 {
        const VALUES: [f32; 8] = [
            0.0,
            -1.0,
            1e30,
            -1e30,
            f32::NAN,
            f32::INFINITY,
            f32::MIN_POSITIVE,
            0.5,
        ];
        VALUES[self.below(VALUES.len())]
    }
}

/// Op types to swap in: common ones, and ones with value-dependent shapes.
const OPS: [&str; 16] = [
    "Add",
    "Conv",
    "MatMul",
    "Reshape",
    "Expand",
    "Tile",
    "ConstantOfShape",
    "Range",
    "Resize",
    "Pad",
    "Slice",
    "Gather",
    "Concat",
    "Transpose",
    "Softmax",
    "QLinearConv",
];

/// One structural edit of a model, chosen by `seed`; `None` when `data` is not a model with a
/// graph.
pub fn mutate(data: &[u8], seed: u32) -> Option<Vec<u8>> {
    let mut model = ModelProto::decode(data).ok()?;
    let graph = model.graph.as_mut()?;
    let mut rng = Rng(u64::from(seed) * 0x9e37_79b9_7f4a_7c15 | 1);
    match rng.below(9) {
        // An attribute value.
        0 => {
            let node = pick_node(&mut graph.node, &mut rng)?;
            let n = node.attribute.len();
            let a = node.attribute.get_mut(rng.below(n))?;
            match a.r#type {
                t if t == attribute_type::INT => a.i = rng.nasty_i64(),
                t if t == attribute_type::FLOAT => a.f = rng.nasty_f32(),
                t if t == attribute_type::INTS => {
                    if a.ints.is_empty() || rng.below(4) == 0 {
                        a.ints.push(rng.nasty_i64());
                    } else {
                        let k = rng.below(a.ints.len());
                        a.ints[k] = rng.nasty_i64();
                    }
                }
                _ => a.r#type = rng.below(15) as i32,
            }
        }
        // A declared dim of an input or output.
        1 => {
            let n = graph.input.len() + graph.output.len();
            let k = rng.below(n);
            let vi = if k < graph.input.len() {
                graph.input.get_mut(k)?
            } else {
                graph.output.get_mut(k - graph.input.len())?
            };
            if let Some(type_proto::Value::TensorType(t)) =
                vi.r#type.as_mut().and_then(|t| t.value.as_mut())
            {
                if rng.below(3) == 0 {
                    t.elem_type = rng.below(24) as i32;
                } else if let Some(shape) = t.shape.as_mut() {
                    let v = rng.nasty_i64();
                    let dim = tensor_shape_proto::Dimension {
                        value: Some(tensor_shape_proto::dimension::Value::DimValue(v)),
                        ..Default::default()
                    };
                    match shape.dim.len() {
                        0 => shape.dim.push(dim),
                        n => shape.dim[rng.below(n)] = dim,
                    }
                }
            }
        }
        // An initializer's dtype, dims or data size.
        2 | 3 => {
            let n = graph.initializer.len();
            let t = graph.initializer.get_mut(rng.below(n))?;
            match rng.below(4) {
                0 => t.data_type = rng.below(24) as i32,
                1 => match t.dims.len() {
                    0 => t.dims.push(rng.nasty_i64()),
                    n => t.dims[rng.below(n)] = rng.nasty_i64(),
                },
                2 => {
                    let len = t.raw_data.len();
                    t.raw_data.truncate(rng.below(len + 1));
                    let len = t.float_data.len();
                    t.float_data.truncate(rng.below(len + 1));
                }
                _ => {
                    t.data_type = data_type::FLOAT;
                    t.raw_data
                        .extend(std::iter::repeat_n(0xff, 1 + rng.below(64)));
                }
            }
        }
        // Node order.
        4 => {
            let n = graph.node.len();
            if n < 2 {
                return None;
            }
            graph.node.swap(rng.below(n), rng.below(n));
        }
        // A cycle: an early node reads a later node's output.
        5 => {
            let n = graph.node.len();
            if n < 2 {
                return None;
            }
            let a = rng.below(n - 1);
            let later = graph.node[a + 1 + rng.below(n - 1 - a)]
                .output
                .first()?
                .clone();
            let early = &mut graph.node[a];
            match early.input.len() {
                0 => early.input.push(later),
                k => early.input[rng.below(k)] = later,
            }
        }
        // Another op type.
        6 => {
            let node = pick_node(&mut graph.node, &mut rng)?;
            node.op_type = OPS[rng.below(OPS.len())].into();
        }
        // Inputs dropped, added or renamed to nothing.
        7 => {
            let node = pick_node(&mut graph.node, &mut rng)?;
            match rng.below(3) {
                0 => {
                    node.input.pop();
                }
                1 => node.input.push(String::new()),
                _ => {
                    let extra = node.input.first().cloned().unwrap_or_default();
                    node.input.push(extra);
                }
            }
        }
        // Two values with one name.
        _ => {
            let n = graph.node.len();
            if n < 2 {
                return None;
            }
            let name = graph.node[rng.below(n)].output.first()?.clone();
            let k = rng.below(n);
            *graph.node[k].output.first_mut()? = name;
        }
    }
    Some(model.encode_to_vec())
}

fn pick_node<'a>(nodes: &'a mut [NodeProto], rng: &mut Rng) -> Option<&'a mut NodeProto> {
    let n = nodes.len();
    nodes.get_mut(rng.below(n))
}
