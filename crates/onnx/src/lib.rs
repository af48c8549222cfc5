//! The ONNX frontend: decodes ModelProto (prost structs written in [`proto`]) and maps each node
//! onto canonical ops through one table ([`map`]).

pub mod external;
pub mod map;
pub mod model;
pub mod npy;
pub mod proto;
pub mod tensor;

pub use model::{
    decode_tensor_bytes, load_model, load_model_file, load_model_partial, read_tensor_file,
    read_value_file, write_tensor_file, OnnxModel, PartialModel,
};
