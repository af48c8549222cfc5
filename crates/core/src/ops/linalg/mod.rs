//! linalg ops.
