//! Paddle's legacy `framework.proto` (package `paddle.framework.proto`) as prost-derived structs,
//! written by hand: the `ProgramDesc` of `.pdmodel` / `__model__` files and the `TensorDesc`
//! of parameter files.
//!
//! Field numbers follow Paddle's framework.proto. The file is proto2: `required` fields are
//! plain values here (absent reads as the default), and repeated scalars are accepted both
//! packed and unpacked by prost. Unknown fields are skipped.

#![allow(missing_docs)]

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProgramDesc {
    #[prost(message, repeated, tag = "1")]
    pub blocks: Vec<BlockDesc>,
    #[prost(message, optional, tag = "4")]
    pub version: Option<Version>,
    #[prost(message, optional, tag = "5")]
    pub op_version_map: Option<OpVersionMap>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Version {
    #[prost(int64, tag = "1")]
    pub version: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OpVersionMap {
    #[prost(message, repeated, tag = "1")]
    pub pair: Vec<OpVersionPair>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OpVersionPair {
    #[prost(string, tag = "1")]
    pub op_name: String,
    #[prost(message, optional, tag = "2")]
    pub op_version: Option<OpVersion>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OpVersion {
    #[prost(int32, tag = "1")]
    pub version: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BlockDesc {
    #[prost(int32, tag = "1")]
    pub idx: i32,
    #[prost(int32, tag = "2")]
    pub parent_idx: i32,
    #[prost(message, repeated, tag = "3")]
    pub vars: Vec<VarDesc>,
    #[prost(message, repeated, tag = "4")]
    pub ops: Vec<OpDesc>,
    #[prost(int32, optional, tag = "5")]
    pub forward_block_idx: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct VarDesc {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<VarType>,
    #[prost(bool, tag = "3")]
    pub persistable: bool,
    #[prost(bool, tag = "4")]
    pub need_check_feed: bool,
    #[prost(bool, tag = "5")]
    pub is_parameter: bool,
    #[prost(bool, tag = "6")]
    pub stop_gradient: bool,
    #[prost(message, repeated, tag = "7")]
    pub attrs: Vec<VarAttr>,
}

/// `VarDesc.Attr`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VarAttr {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(int32, tag = "2")]
    pub r#type: i32,
    #[prost(int32, tag = "3")]
    pub i: i32,
    #[prost(string, tag = "4")]
    pub s: String,
    #[prost(int32, repeated, tag = "5")]
    pub ints: Vec<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct VarType {
    /// A [`var_type`] constant.
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(message, optional, tag = "2")]
    pub selected_rows: Option<TensorDesc>,
    /// `lod_tensor` in older versions, `dense_tensor` in Paddle 3: the same field.
    #[prost(message, optional, tag = "3")]
    pub lod_tensor: Option<LoDTensorDesc>,
    #[prost(message, optional, tag = "4")]
    pub tensor_array: Option<LoDTensorDesc>,
    #[prost(message, optional, tag = "5")]
    pub reader: Option<ReaderDesc>,
    #[prost(message, optional, tag = "7")]
    pub tuple: Option<Tuple>,
    #[prost(message, optional, tag = "8")]
    pub string: Option<TensorDesc>,
    #[prost(message, optional, tag = "9")]
    pub strings: Option<TensorDesc>,
    #[prost(message, optional, tag = "10")]
    pub vocab: Option<TensorDesc>,
    #[prost(message, optional, tag = "11")]
    pub sparse_coo: Option<TensorDesc>,
    #[prost(message, optional, tag = "12")]
    pub sparse_csr: Option<TensorDesc>,
}

/// `VarType.TensorDesc`: element type and dims (`-1` for unknown).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorDesc {
    /// A [`var_type`] POD constant.
    #[prost(int32, tag = "1")]
    pub data_type: i32,
    #[prost(int64, repeated, tag = "2")]
    pub dims: Vec<i64>,
}

/// `VarType.LoDTensorDesc` (`DenseTensorDesc` in Paddle 3).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LoDTensorDesc {
    #[prost(message, optional, tag = "1")]
    pub tensor: Option<TensorDesc>,
    #[prost(int32, tag = "2")]
    pub lod_level: i32,
}

/// `DenseTensorDesc` is the Paddle 3 name of the same message.
pub type DenseTensorDesc = LoDTensorDesc;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ReaderDesc {
    #[prost(message, repeated, tag = "1")]
    pub lod_tensor: Vec<LoDTensorDesc>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Tuple {
    #[prost(int32, repeated, tag = "1")]
    pub element_type: Vec<i32>,
}

/// `VarType.Type` values.
pub mod var_type {
    pub const BOOL: i32 = 0;
    pub const INT16: i32 = 1;
    pub const INT32: i32 = 2;
    pub const INT64: i32 = 3;
    pub const FP16: i32 = 4;
    pub const FP32: i32 = 5;
    pub const FP64: i32 = 6;
    pub const LOD_TENSOR: i32 = 7;
    pub const SELECTED_ROWS: i32 = 8;
    pub const FEED_MINIBATCH: i32 = 9;
    pub const FETCH_LIST: i32 = 10;
    pub const STEP_SCOPES: i32 = 11;
    pub const LOD_RANK_TABLE: i32 = 12;
    pub const LOD_TENSOR_ARRAY: i32 = 13;
    pub const PLACE_LIST: i32 = 14;
    pub const READER: i32 = 15;
    pub const RAW: i32 = 17;
    pub const TUPLE: i32 = 18;
    pub const SIZE_T: i32 = 19;
    pub const UINT8: i32 = 20;
    pub const INT8: i32 = 21;
    pub const BF16: i32 = 22;
    pub const COMPLEX64: i32 = 23;
    pub const COMPLEX128: i32 = 24;
    pub const STRING: i32 = 25;
    pub const STRINGS: i32 = 26;
    pub const VOCAB: i32 = 27;
    pub const FEED_LIST: i32 = 28;
    pub const PSTRING: i32 = 29;
    pub const SPARSE_COO: i32 = 30;
    pub const SPARSE_CSR: i32 = 31;
    pub const FP8_E4M3FN: i32 = 32;
    pub const FP8_E5M2: i32 = 33;
    pub const UINT32: i32 = 37;
    pub const UINT64: i32 = 38;

    /// A readable name for messages.
    pub fn name(t: i32) -> String {
        let s = match t {
            BOOL => "BOOL",
            INT16 => "INT16",
            INT32 => "INT32",
            INT64 => "INT64",
            FP16 => "FP16",
            FP32 => "FP32",
            FP64 => "FP64",
            LOD_TENSOR => "LOD_TENSOR",
            SELECTED_ROWS => "SELECTED_ROWS",
            FEED_MINIBATCH => "FEED_MINIBATCH",
            FETCH_LIST => "FETCH_LIST",
            LOD_TENSOR_ARRAY => "LOD_TENSOR_ARRAY",
            SIZE_T => "SIZE_T",
            UINT8 => "UINT8",
            INT8 => "INT8",
            BF16 => "BF16",
            COMPLEX64 => "COMPLEX64",
            COMPLEX128 => "COMPLEX128",
            STRING => "STRING",
            FP8_E4M3FN => "FP8_E4M3FN",
            FP8_E5M2 => "FP8_E5M2",
            UINT32 => "UINT32",
            UINT64 => "UINT64",
            _ => return format!("type {t}"),
        };
        s.to_string()
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct OpDesc {
    #[prost(string, tag = "3")]
    pub r#type: String,
    #[prost(message, repeated, tag = "1")]
    pub inputs: Vec<OpVar>,
    #[prost(message, repeated, tag = "2")]
    pub outputs: Vec<OpVar>,
    #[prost(message, repeated, tag = "4")]
    pub attrs: Vec<Attr>,
    #[prost(bool, tag = "5")]
    pub is_target: bool,
}

/// `OpDesc.Var`: one input or output slot and the variables bound to it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OpVar {
    #[prost(string, tag = "1")]
    pub parameter: String,
    #[prost(string, repeated, tag = "2")]
    pub arguments: Vec<String>,
}

/// `OpDesc.Attr`: a typed attribute; `type` says which field holds the value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Attr {
    #[prost(string, tag = "1")]
    pub name: String,
    /// An [`attr_type`] constant.
    #[prost(int32, tag = "2")]
    pub r#type: i32,
    #[prost(int32, tag = "3")]
    pub i: i32,
    #[prost(float, tag = "4")]
    pub f: f32,
    #[prost(string, tag = "5")]
    pub s: String,
    #[prost(int32, repeated, tag = "6")]
    pub ints: Vec<i32>,
    #[prost(float, repeated, tag = "7")]
    pub floats: Vec<f32>,
    #[prost(string, repeated, tag = "8")]
    pub strings: Vec<String>,
    #[prost(bool, tag = "10")]
    pub b: bool,
    #[prost(bool, repeated, tag = "11")]
    pub bools: Vec<bool>,
    #[prost(int32, tag = "12")]
    pub block_idx: i32,
    #[prost(int64, tag = "13")]
    pub l: i64,
    #[prost(int32, repeated, tag = "14")]
    pub blocks_idx: Vec<i32>,
    #[prost(int64, repeated, tag = "15")]
    pub longs: Vec<i64>,
    #[prost(double, repeated, tag = "16")]
    pub float64s: Vec<f64>,
    #[prost(string, tag = "17")]
    pub var_name: String,
    #[prost(string, repeated, tag = "18")]
    pub vars_name: Vec<String>,
    #[prost(double, tag = "19")]
    pub float64: f64,
    #[prost(message, optional, tag = "20")]
    pub scalar: Option<Scalar>,
    #[prost(message, repeated, tag = "21")]
    pub scalars: Vec<Scalar>,
}

/// `OpDesc.Attr.type` values (`AttrType`).
pub mod attr_type {
    pub const INT: i32 = 0;
    pub const FLOAT: i32 = 1;
    pub const STRING: i32 = 2;
    pub const INTS: i32 = 3;
    pub const FLOATS: i32 = 4;
    pub const STRINGS: i32 = 5;
    pub const BOOLEAN: i32 = 6;
    pub const BOOLEANS: i32 = 7;
    pub const BLOCK: i32 = 8;
    pub const LONG: i32 = 9;
    pub const BLOCKS: i32 = 10;
    pub const LONGS: i32 = 11;
    pub const FLOAT64S: i32 = 12;
    pub const VAR: i32 = 13;
    pub const VARS: i32 = 14;
    pub const FLOAT64: i32 = 15;
    pub const SCALAR: i32 = 16;
    pub const SCALARS: i32 = 17;
}

/// A typed scalar (`Scalar`); `type` is one of the [`scalar_type`] constants.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Scalar {
    #[prost(int32, tag = "1")]
    pub r#type: i32,
    #[prost(bool, tag = "2")]
    pub b: bool,
    #[prost(int64, tag = "3")]
    pub i: i64,
    #[prost(double, tag = "4")]
    pub r: f64,
    #[prost(message, optional, tag = "5")]
    pub c: Option<Complex>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Complex {
    #[prost(double, tag = "1")]
    pub r: f64,
    #[prost(double, tag = "2")]
    pub i: f64,
}

pub mod scalar_type {
    pub const BOOLEAN: i32 = 1;
    pub const LONG: i32 = 2;
    pub const FLOAT64: i32 = 3;
    pub const COMPLEX128: i32 = 4;
}
