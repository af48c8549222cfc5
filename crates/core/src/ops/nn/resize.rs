//! resize
