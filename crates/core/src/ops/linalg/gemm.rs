//! gemm
