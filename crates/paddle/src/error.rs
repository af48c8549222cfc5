//! Errors of the Paddle frontend. They convert into [`ferrolite_core::Error`] for the facade.

use ferrolite_core::UnsupportedOp;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// The program (`.pdmodel` / `__model__`) is malformed.
    #[error("invalid Paddle program: {0}")]
    InvalidProgram(String),

    /// A Paddle 3 PIR program (`.json`), which this frontend does not read.
    #[error(
        "{path} is a Paddle 3 PIR program (JSON); ferrolite reads the legacy protobuf form: \
         export the model again with the environment variable FLAGS_enable_pir_api=0 \
         (paddle.jit.save / paddle.static.save_inference_model then write .pdmodel + .pdiparams)"
    )]
    PirProgram { path: String },

    /// No model file could be found where one was expected.
    #[error("no Paddle model found: {0}")]
    NotFound(String),

    /// A parameter's serialized tensor ends before the data it announces.
    #[error("parameters: variable '{var}' is truncated: {what} needs {needed} bytes at offset {offset}, the file has {available} left")]
    Truncated {
        var: String,
        what: &'static str,
        offset: usize,
        needed: u64,
        available: usize,
    },

    /// The parameters file holds more bytes than the program's persistable variables use
    /// (an extra variable, or the wrong program).
    #[error("parameters: {extra} bytes left after the last variable ('{last}'); the params file holds more variables than the program declares")]
    TrailingData { last: String, extra: usize },

    /// A version field that is not 0.
    #[error("parameters: variable '{var}' has {what} version {found}, expected 0")]
    Version {
        var: String,
        what: &'static str,
        found: u32,
    },

    /// The tensor description in the parameters disagrees with the program.
    #[error("parameters: variable '{var}': {message}")]
    Mismatch { var: String, message: String },

    /// A non-combined model lacks the file of a persistable variable.
    #[error("parameters: variable '{var}' has no file {path}")]
    MissingVariable { var: String, path: String },

    /// Ops the frontend cannot map, all of them.
    #[error("{} unsupported Paddle operator(s): {}", .0.len(), list(.0))]
    UnsupportedOps(Vec<UnsupportedOp>),

    #[error(transparent)]
    Core(#[from] ferrolite_core::Error),
}

fn list(ops: &[UnsupportedOp]) -> String {
    ops.iter()
        .map(|o| o.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl From<Error> for ferrolite_core::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Core(c) => c,
            Error::Io { path, source } => ferrolite_core::Error::Io { path, source },
            Error::UnsupportedOps(ops) => ferrolite_core::Error::UnsupportedOps(ops),
            other => ferrolite_core::Error::InvalidModel(other.to_string()),
        }
    }
}
