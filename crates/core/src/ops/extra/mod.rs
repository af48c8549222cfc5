//! Ops added for ONNX conformance that fit no other family: attention, losses, newer
//! normalizations and embeddings, sampling grids, image/column rearrangements.

pub mod attention;
pub mod center_crop_pad;
pub mod col2im;
pub mod deform_conv;
pub mod grid;
pub mod loss;
pub mod max_unpool;
pub mod rms_norm;
pub mod roi_align;
pub mod rotary;
pub mod swish;
pub mod tensor_scatter;
