//! matmul
