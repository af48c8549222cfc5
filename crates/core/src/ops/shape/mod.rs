//! Ops that move or reinterpret data without arithmetic: shapes, slicing, gathering.

pub mod common;
pub mod compress;
pub mod concat;
pub mod constant_of_shape;
pub mod depth_to_space;
pub mod expand;
pub mod eye_like;
pub mod flatten;
pub mod gather;
pub mod nonzero;
pub mod onehot;
pub mod pad;
pub mod range;
pub mod reshape;
pub mod scatter;
pub mod shape_of;
pub mod slice;
pub mod split;
pub mod squeeze;
pub mod transpose;
pub mod trilu;
