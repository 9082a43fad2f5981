//! One error type for the whole backend. Errors stay values until the C
//! boundary, where `triton::error` turns the kind into a Triton error code.

use std::fmt;

/// What went wrong, as far as the caller is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request (or model configuration) is wrong; the client can fix it.
    InvalidInput,
    /// A resource is exhausted or missing right now (limits, files, devices).
    Unavailable,
    /// Asked for something this backend does not do.
    Unsupported,
    /// Something that should exist does not.
    NotFound,
    /// A bug or an unexpected failure inside the backend.
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    /// Prefix the message with where it happened, keeping the kind.
    pub fn context(self, what: impl fmt::Display) -> Self {
        Error {
            kind: self.kind,
            message: format!("{what}: {}", self.message),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// The text a panic carried (`panic!` gives a `&str` or a `String`).
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("unknown panic payload")
}
