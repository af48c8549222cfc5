//! The ONNX frontend: decodes ModelProto (prost structs written in [`proto`]) and maps each node
//! onto canonical ops through one table ([`map`]).

pub mod external;
pub mod map;
pub mod proto;
pub mod tensor;
