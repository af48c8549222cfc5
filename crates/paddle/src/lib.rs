//! The PaddlePaddle frontend: decodes the legacy protobuf `ProgramDesc` (`.pdmodel`,
//! `__model__`) and its parameters (combined `.pdiparams` or one file per variable), and maps
//! each Paddle op onto canonical ops through one table ([`map`]).
//!
//! Paddle 3's PIR JSON programs are not read; exporting with `FLAGS_enable_pir_api=0` gives the
//! legacy form.

pub mod attr;
pub mod error;
pub mod map;
pub mod model;
pub mod params;
pub mod proto;

pub use error::{Error, Result};
pub use model::{
    convert_program, decode_program, find_model, load, load_program, ModelFiles, PaddleModel,
    ParamsSource,
};
