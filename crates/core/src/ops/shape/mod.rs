//! Ops that move or reinterpret data without arithmetic: shapes, slicing, gathering.

pub mod reshape;
