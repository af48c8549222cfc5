//! ferrolite: a neural-network inference engine for edge devices.
//!
//! Load a model into a [`Session`], then run it with named inputs:
//!
//! ```no_run
//! use ferrolite::{Session, SessionOptions, Tensor};
//! let session = Session::from_path("model.onnx", SessionOptions::default())?;
//! let x = Tensor::zeros(ferrolite::DType::F32, &[1, 3, 224, 224])?;
//! let outputs = session.run(&[("x", x)])?;
//! for (name, t) in outputs.iter() {
//!     println!("{name}: {:?}", t.shape());
//! }
//! # Ok::<(), ferrolite::Error>(())
//! ```

pub mod model;
pub mod session;

pub use ferrolite_core::{DType, Dim, Error, Graph, Result, Tensor, TensorInfo};
pub use model::{is_paddle, load_model, load_paddle, load_path, Format, Model};
pub use session::{pass_names, IoInfo, Outputs, Prepared, Session, SessionOptions};

/// Lower-level pieces for tools: the core crate and the ONNX frontend.
pub use ferrolite_core as core;
pub use ferrolite_onnx as onnx;
pub use ferrolite_paddle as paddle;
