//! Ops outside the other families: box suppression, set operations, determinants, ...

pub mod det;
pub mod nms;
pub mod reverse_sequence;
pub mod tfidf;
pub mod unique;
