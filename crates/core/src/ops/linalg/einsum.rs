//! einsum
