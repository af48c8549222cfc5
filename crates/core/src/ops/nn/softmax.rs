//! softmax
