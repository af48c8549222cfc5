//! One error type for both protocols: what went wrong, and which status it answers with.

use axum::http::StatusCode;

/// How an error is answered: an HTTP status and a gRPC code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or does not fit the model (400, INVALID_ARGUMENT).
    BadRequest,
    /// No such model or version (404, NOT_FOUND).
    NotFound,
    /// The body is over the server's limit (413, RESOURCE_EXHAUSTED).
    TooLarge,
    /// The model's queue is full, or the server is shutting down (503, UNAVAILABLE).
    Unavailable,
    /// The engine failed on a request it accepted (500, INTERNAL).
    Internal,
}

/// An error answered as the protocol's `{"error": message}` (HTTP) or a gRPC status.
#[derive(Clone, Debug)]
pub struct ServeError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ServeError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ServeError {
        ServeError {
            kind,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ServeError {
        ServeError::new(ErrorKind::BadRequest, message)
    }

    pub fn not_found(message: impl Into<String>) -> ServeError {
        ServeError::new(ErrorKind::NotFound, message)
    }

    /// The engine's error for a run: a problem with the inputs is the client's (400); anything
    /// else is the server's (500).
    pub fn from_engine(model: &str, e: ferrolite::Error) -> ServeError {
        let kind = match e {
            ferrolite::Error::Input { .. }
            | ferrolite::Error::Tensor(_)
            | ferrolite::Error::MemoryLimit { .. } => ErrorKind::BadRequest,
            _ => ErrorKind::Internal,
        };
        ServeError::new(kind, format!("model '{model}': {e}"))
    }

    pub fn http_status(&self) -> StatusCode {
        match self.kind {
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn grpc_status(&self) -> tonic::Status {
        let code = match self.kind {
            ErrorKind::BadRequest => tonic::Code::InvalidArgument,
            ErrorKind::NotFound => tonic::Code::NotFound,
            ErrorKind::TooLarge => tonic::Code::ResourceExhausted,
            ErrorKind::Unavailable => tonic::Code::Unavailable,
            ErrorKind::Internal => tonic::Code::Internal,
        };
        tonic::Status::new(code, self.message.clone())
    }
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServeError {}
