//! reduce
