//! cumsum
