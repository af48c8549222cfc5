//! Ops the partition pass creates (see [`crate::passes::Partition`]): a subgraph placed on a
//! device, and the explicit copies between host and device memory at its borders.

pub mod copy;
pub mod subgraph;
