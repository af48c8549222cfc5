//! The canonical op set. Each op (or small family of ops sharing one implementation) has its own
//! module holding its typed attributes, prototype, shape/dtype inference, reference
//! implementation and tests. Frontends map their ops onto these; kernels implement them.

pub mod codec;
pub mod containers;
pub mod control;
pub mod device;
pub mod elementwise;
pub mod extra;
pub mod layout;
pub mod linalg;
pub mod misc;
pub mod nn;
pub mod quant;
pub mod seq;
pub mod shape;
pub mod text;
pub mod util;
