//! Ops added for ONNX conformance that fit no other family: attention, losses, newer
//! normalizations and embeddings, sampling grids, image/column rearrangements.

pub mod attention;
