//! Ops added for ONNX conformance that fit no other family: attention, losses, newer
//! normalizations and embeddings, sampling grids, image/column rearrangements.

pub mod attention;
pub mod grid;
pub mod loss;
pub mod rms_norm;
pub mod rotary;
pub mod swish;
pub mod tensor_scatter;
