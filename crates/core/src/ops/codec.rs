//! Ops as bytes: the optimized model format (`ferrolite opt`) stores each node's op as a tag
//! (the Rust type's name) and its attributes in postcard, serde's compact binary form.
//!
//! Every op type is listed once in `ops!` below; an op missing from the list cannot be written,
//! and a tag the list does not know is a typed error when reading. A new op derives
//! `serde::Serialize` and `serde::Deserialize` and joins the list (docs/adding-an-op.md).

use crate::{Error, Op, Result};
use std::sync::Arc;

/// An op type's tag: the name it is stored under, and the name a tailored build lists.
pub trait Tagged {
    const TAG: &'static str;
}

/// The op tags a tailored build keeps: the `FERROLITE_OPS` environment variable at compile time,
/// a list separated by commas, spaces or newlines (`ferrolite info --ops` prints it for given
/// optimized models). Unset, every op is built. An op left out has neither its reference
/// implementation nor its kernels in the binary, and an optimized model that needs it is refused
/// by name (docs/format.md, The light build).
pub const TAILORED_OPS: Option<&str> = option_env!("FERROLITE_OPS");

/// Whether this build holds op `tag`. A `const fn`, so that `if !built(..)` removes the code of
/// the ops left out at compile time.
pub const fn built(tag: &str) -> bool {
    match TAILORED_OPS {
        None => true,
        Some(list) => list_has(list.as_bytes(), tag.as_bytes()),
    }
}

/// Whether `list` (items separated by commas or whitespace) holds the item `item`.
const fn list_has(list: &[u8], item: &[u8]) -> bool {
    let mut start = 0;
    while start < list.len() {
        let mut end = start;
        while end < list.len() && !is_separator(list[end]) {
            end += 1;
        }
        if end > start && end - start == item.len() {
            let mut i = 0;
            while i < item.len() && list[start + i] == item[i] {
                i += 1;
            }
            if i == item.len() {
                return true;
            }
        }
        start = end + 1;
    }
    false
}

const fn is_separator(b: u8) -> bool {
    matches!(b, b',' | b' ' | b'\n' | b'\t' | b'\r')
}

macro_rules! ops {
    ($($tag:ident: $ty:path,)*) => {
        $(
            impl Tagged for $ty {
                const TAG: &'static str = stringify!($tag);
            }
        )*

        /// The op's tag and its attributes as bytes, or an error naming an op that cannot be
        /// written (a device subgraph, say).
        pub fn encode_op(op: &dyn Op) -> Result<(&'static str, Vec<u8>)> {
            let any = op.as_any();
            $(
                if let Some(o) = any.downcast_ref::<$ty>() {
                    let bytes = postcard::to_allocvec(o).map_err(|e| {
                        Error::InvalidModel(format!("op {}: cannot encode: {e}", op.name()))
                    })?;
                    return Ok((stringify!($tag), bytes));
                }
            )*
            Err(Error::InvalidModel(format!(
                "op {} cannot be stored in an optimized model",
                op.name()
            )))
        }

        /// The op a tag and its bytes describe.
        pub fn decode_op(tag: &str, bytes: &[u8]) -> Result<Arc<dyn Op>> {
            let bad = |e: postcard::Error| {
                Error::InvalidModel(format!("op of kind '{tag}': malformed attributes ({e})"))
            };
            match tag {
                $(
                    stringify!($tag) if const { built(stringify!($tag)) } => Ok(Arc::new(
                        postcard::from_bytes::<$ty>(bytes).map_err(bad)?,
                    )),
                )*
                _ if OP_TAGS.contains(&tag) => Err(Error::InvalidModel(format!(
                    "op kind '{tag}' is not in this build of ferrolite, which was tailored to \
                     the ops FERROLITE_OPS listed"
                ))),
                _ => Err(Error::InvalidModel(format!("unknown op kind '{tag}'"))),
            }
        }

        /// Every op tag there is, built into this binary or not.
        pub const OP_TAGS: &[&str] = &[$(stringify!($tag)),*];

        /// The tags of `op`, and of the op it wraps where it is a layout wrapper: what a
        /// tailored build must hold to run it.
        pub fn tags_of(op: &dyn Op) -> Vec<&'static str> {
            let any = op.as_any();
            let inner = op.wrapped().map(|(_, inner)| tags_of(inner)).unwrap_or_default();
            let own = $(
                if any.is::<$ty>() {
                    Some(stringify!($tag))
                } else
            )* { None };
            own.into_iter().chain(inner).collect()
        }
    };
}

ops! {
    Binary: crate::ops::elementwise::binary::Binary,
    Cast: crate::ops::elementwise::cast::Cast,
    CastLike: crate::ops::elementwise::cast::CastLike,
    Identity: crate::ops::elementwise::cast::Identity,
    Clip: crate::ops::elementwise::clip::Clip,
    Compare: crate::ops::elementwise::compare::Compare,
    Dropout: crate::ops::elementwise::dropout::Dropout,
    BitwiseNot: crate::ops::elementwise::logical::BitwiseNot,
    IsInf: crate::ops::elementwise::logical::IsInf,
    IsNaN: crate::ops::elementwise::logical::IsNaN,
    Logical: crate::ops::elementwise::logical::Logical,
    Not: crate::ops::elementwise::logical::Not,
    Unary: crate::ops::elementwise::unary::Unary,
    Variadic: crate::ops::elementwise::variadic::Variadic,
    Where: crate::ops::elementwise::where_::Where,
    Attention: crate::ops::extra::attention::Attention,
    CenterCropPad: crate::ops::extra::center_crop_pad::CenterCropPad,
    Col2Im: crate::ops::extra::col2im::Col2Im,
    DeformConv: crate::ops::extra::deform_conv::DeformConv,
    AffineGrid: crate::ops::extra::grid::AffineGrid,
    GridSample: crate::ops::extra::grid::GridSample,
    Loss: crate::ops::extra::loss::Loss,
    MaxUnpool: crate::ops::extra::max_unpool::MaxUnpool,
    RmsNorm: crate::ops::extra::rms_norm::RmsNorm,
    RoiAlign: crate::ops::extra::roi_align::RoiAlign,
    RotaryEmbedding: crate::ops::extra::rotary::RotaryEmbedding,
    Swish: crate::ops::extra::swish::Swish,
    TensorScatter: crate::ops::extra::tensor_scatter::TensorScatter,
    Nchwc: crate::ops::layout::Nchwc,
    Nhwc: crate::ops::layout::Nhwc,
    ReorderNchwc: crate::ops::layout::ReorderNchwc,
    Conv: crate::ops::linalg::conv::Conv,
    ConvInteger: crate::ops::linalg::conv::ConvInteger,
    ConvTranspose: crate::ops::linalg::conv_transpose::ConvTranspose,
    Einsum: crate::ops::linalg::einsum::Einsum,
    FullyConnected: crate::ops::linalg::fully_connected::FullyConnected,
    Gemm: crate::ops::linalg::gemm::Gemm,
    MatMul: crate::ops::linalg::matmul::MatMul,
    MatMulInteger: crate::ops::linalg::matmul::MatMulInteger,
    Det: crate::ops::misc::det::Det,
    NonMaxSuppression: crate::ops::misc::nms::NonMaxSuppression,
    ReverseSequence: crate::ops::misc::reverse_sequence::ReverseSequence,
    TfIdfVectorizer: crate::ops::misc::tfidf::TfIdfVectorizer,
    StringConcat: crate::ops::text::concat::StringConcat,
    StringNormalizer: crate::ops::text::normalizer::StringNormalizer,
    StringSplit: crate::ops::text::split::StringSplit,
    RegexFullMatch: crate::ops::text::regex_full_match::RegexFullMatch,
    SequenceEmpty: crate::ops::containers::sequence::SequenceEmpty,
    SequenceConstruct: crate::ops::containers::sequence::SequenceConstruct,
    SequenceInsert: crate::ops::containers::sequence::SequenceInsert,
    SequenceAt: crate::ops::containers::sequence::SequenceAt,
    SequenceErase: crate::ops::containers::sequence::SequenceErase,
    SequenceLength: crate::ops::containers::sequence::SequenceLength,
    SplitToSequence: crate::ops::containers::split_to_sequence::SplitToSequence,
    ConcatFromSequence: crate::ops::containers::concat_from_sequence::ConcatFromSequence,
    Optional: crate::ops::containers::optional::Optional,
    OptionalHasElement: crate::ops::containers::optional::OptionalHasElement,
    OptionalGetElement: crate::ops::containers::optional::OptionalGetElement,
    Unique: crate::ops::misc::unique::Unique,
    CumSum: crate::ops::nn::cumsum::CumSum,
    BatchNorm: crate::ops::nn::norm::BatchNorm,
    BatchNormPerElement: crate::ops::nn::norm::BatchNormPerElement,
    GroupNorm: crate::ops::nn::norm::GroupNorm,
    InstanceNorm: crate::ops::nn::norm::InstanceNorm,
    LayerNorm: crate::ops::nn::norm::LayerNorm,
    LpNorm: crate::ops::nn::norm::LpNorm,
    Lrn: crate::ops::nn::norm::Lrn,
    MeanVarianceNorm: crate::ops::nn::norm::MeanVarianceNorm,
    GlobalPool: crate::ops::nn::pool::GlobalPool,
    Pool: crate::ops::nn::pool::Pool,
    ArgReduce: crate::ops::nn::reduce::ArgReduce,
    Reduce: crate::ops::nn::reduce::Reduce,
    Resize: crate::ops::nn::resize::Resize,
    Softmax: crate::ops::nn::softmax::Softmax,
    TopK: crate::ops::nn::topk::TopK,
    QLinearAdd: crate::ops::quant::contrib::elementwise::QLinearAdd,
    QLinearConcat: crate::ops::quant::contrib::elementwise::QLinearConcat,
    QLinearLeakyRelu: crate::ops::quant::contrib::elementwise::QLinearLeakyRelu,
    QLinearMul: crate::ops::quant::contrib::elementwise::QLinearMul,
    QLinearSigmoid: crate::ops::quant::contrib::elementwise::QLinearSigmoid,
    DynamicQuantizeMatMul: crate::ops::quant::contrib::matmul::DynamicQuantizeMatMul,
    MatMulIntegerToFloat: crate::ops::quant::contrib::matmul::MatMulIntegerToFloat,
    QGemm: crate::ops::quant::contrib::matmul::QGemm,
    QLinearAveragePool: crate::ops::quant::contrib::pool::QLinearAveragePool,
    QLinearGlobalAveragePool: crate::ops::quant::contrib::pool::QLinearGlobalAveragePool,
    QLinearSoftmax: crate::ops::quant::contrib::pool::QLinearSoftmax,
    DequantizeLinear: crate::ops::quant::linear::DequantizeLinear,
    DynamicQuantizeLinear: crate::ops::quant::linear::DynamicQuantizeLinear,
    QuantizeLinear: crate::ops::quant::linear::QuantizeLinear,
    QLinearLookup: crate::ops::quant::lookup::QLinearLookup,
    QLinearChannelLookup: crate::ops::quant::lookup::QLinearChannelLookup,
    QdqBinary: crate::ops::quant::qdq_binary::QdqBinary,
    QLinearConv: crate::ops::quant::qlinear::QLinearConv,
    QLinearMatMul: crate::ops::quant::qlinear::QLinearMatMul,
    Dft: crate::ops::seq::dft::Dft,
    Stft: crate::ops::seq::dft::Stft,
    Gru: crate::ops::seq::rnn::Gru,
    Lstm: crate::ops::seq::rnn::Lstm,
    Rnn: crate::ops::seq::rnn::Rnn,
    MelWeightMatrix: crate::ops::seq::window::MelWeightMatrix,
    Window: crate::ops::seq::window::Window,
    Compress: crate::ops::shape::compress::Compress,
    Concat: crate::ops::shape::concat::Concat,
    ConstantOfShape: crate::ops::shape::constant_of_shape::ConstantOfShape,
    DepthToSpace: crate::ops::shape::depth_to_space::DepthToSpace,
    SpaceToDepth: crate::ops::shape::depth_to_space::SpaceToDepth,
    Expand: crate::ops::shape::expand::Expand,
    Tile: crate::ops::shape::expand::Tile,
    EyeLike: crate::ops::shape::eye_like::EyeLike,
    Flatten: crate::ops::shape::flatten::Flatten,
    Gather: crate::ops::shape::gather::Gather,
    GatherElements: crate::ops::shape::gather::GatherElements,
    GatherND: crate::ops::shape::gather::GatherND,
    NonZero: crate::ops::shape::nonzero::NonZero,
    OneHot: crate::ops::shape::onehot::OneHot,
    Pad: crate::ops::shape::pad::Pad,
    Range: crate::ops::shape::range::Range,
    Reshape: crate::ops::shape::reshape::Reshape,
    ScatterElements: crate::ops::shape::scatter::ScatterElements,
    ScatterND: crate::ops::shape::scatter::ScatterND,
    Shape: crate::ops::shape::shape_of::Shape,
    Size: crate::ops::shape::shape_of::Size,
    Slice: crate::ops::shape::slice::Slice,
    Split: crate::ops::shape::split::Split,
    Squeeze: crate::ops::shape::squeeze::Squeeze,
    Unsqueeze: crate::ops::shape::squeeze::Unsqueeze,
    Transpose: crate::ops::shape::transpose::Transpose,
    Trilu: crate::ops::shape::trilu::Trilu,
}

/// serde for an op held inside another op (the layout wrappers'): its tag, then its bytes.
pub mod arc_op {
    use super::*;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(
        op: &Arc<dyn Op>,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        let (tag, bytes) = encode_op(op.as_ref()).map_err(serde::ser::Error::custom)?;
        (tag, bytes).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Arc<dyn Op>, D::Error> {
        let (tag, bytes) = <(String, Vec<u8>)>::deserialize(d)?;
        decode_op(&tag, &bytes).map_err(serde::de::Error::custom)
    }
}

/// serde for a 256-entry lookup table (serde's arrays stop at 32).
pub mod table256 {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::sync::Arc;

    pub fn serialize<S: Serializer>(t: &Arc<[u8; 256]>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&t[..])
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<[u8; 256]>, D::Error> {
        let v = <Vec<u8>>::deserialize(d)?;
        let t: [u8; 256] = v
            .try_into()
            .map_err(|v: Vec<u8>| serde::de::Error::invalid_length(v.len(), &"256 bytes"))?;
        Ok(Arc::new(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tailored_list_is_read_by_whole_names() {
        let list = b"Conv, Binary\nPool\tSoftmax,,";
        for tag in ["Conv", "Binary", "Pool", "Softmax"] {
            assert!(list_has(list, tag.as_bytes()), "{tag}");
        }
        for tag in ["Con", "Convv", "Bin", "", "oftmax", "Reduce"] {
            assert!(!list_has(list, tag.as_bytes()), "{tag}");
        }
        assert!(!list_has(b"", b"Conv"));
    }

    #[test]
    fn every_op_type_has_its_tag_and_the_tags_are_distinct() {
        let mut seen = std::collections::BTreeSet::new();
        assert!(OP_TAGS.iter().all(|t| seen.insert(*t)));
        assert_eq!(<crate::ops::linalg::conv::Conv as Tagged>::TAG, "Conv");
    }

    #[test]
    fn the_tags_of_a_layout_wrapper_include_the_op_it_wraps() {
        use crate::ops::layout::Nchwc;
        let conv = crate::ops::linalg::conv::Conv::default();
        let w = Nchwc {
            inner: Arc::new(conv.clone()),
            blocked_input: false,
            block: 8,
        };
        assert_eq!(tags_of(&conv), ["Conv"]);
        assert_eq!(tags_of(&w), ["Nchwc", "Conv"]);
    }
}
