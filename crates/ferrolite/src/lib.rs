//! ferrolite: a neural-network inference engine for edge devices.
//!
//! Load a model into a [`Session`], then run it with named inputs:
//!
//! ```
//! use ferrolite::{Session, SessionOptions, Tensor};
//! # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/ppocr_cls/model.onnx");
//! let session = Session::from_path(path, SessionOptions::default().with_threads(2))?;
//! for input in session.inputs() {
//!     println!("input {} {} {:?}", input.name, input.dtype, input.shape);
//! }
//! let x = Tensor::zeros(ferrolite::DType::F32, &[1, 3, 48, 192])?;
//! let outputs = session.run(&[("x", x)])?;
//! for (name, t) in outputs.iter() {
//!     println!("{name}: {:?}", t.shape());
//! }
//! # Ok::<(), ferrolite::Error>(())
//! ```
//!
//! A [`Session`] is `Send + Sync`; runs from several threads at once share the weights and use
//! their own buffers:
//!
//! ```
//! use ferrolite::{DType, Session, SessionOptions, Tensor};
//! # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/ppocr_cls/model.onnx");
//! let session = Session::from_path(path, SessionOptions::default().with_threads(1))?;
//! std::thread::scope(|s| {
//!     for k in 0..4 {
//!         let session = &session;
//!         s.spawn(move || {
//!             let x = Tensor::full(DType::F32, &[1, 3, 48, 192], k as f64 / 4.0).unwrap();
//!             session.run(&[("x", x)]).unwrap()
//!         });
//!     }
//! });
//! # Ok::<(), ferrolite::Error>(())
//! ```

pub mod device;
pub mod model;
pub mod session;

pub use device::{DeviceOption, GPU_AVAILABLE};
pub use ferrolite_core::passes::{PartitionOptions, PartitionReport};
pub use ferrolite_core::{DType, Dim, Error, Graph, Result, Tensor, TensorInfo};
pub use ferrolite_cpu::{Isa, Precision};
pub use model::{is_paddle, load_model, load_model_as, load_paddle, load_path, Format, Model};
#[cfg(feature = "paddle")]
pub use model::{load_paddle_bytes, load_paddle_separate};
pub use session::{pass_names, IoInfo, Outputs, Prepared, Session, SessionOptions, TensorView};

/// Lower-level pieces for tools: the core crate and the ONNX frontend.
pub use ferrolite_core as core;
#[cfg(feature = "onnx")]
pub use ferrolite_onnx as onnx;
#[cfg(feature = "paddle")]
pub use ferrolite_paddle as paddle;
