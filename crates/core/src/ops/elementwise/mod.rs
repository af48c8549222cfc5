//! elementwise ops.
