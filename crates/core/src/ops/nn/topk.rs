//! topk
