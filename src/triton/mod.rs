//! A thin, safe layer over the Triton C API. It knows nothing about faces:
//! handles, requests, responses, tensors, logging, statistics, and the one
//! guard every exported entry point runs in.

pub mod error;
pub mod export;
pub mod guard;
pub mod handles;
pub mod log;
pub mod metrics;
pub mod request;
pub mod response;
mod state;
pub mod sys;
pub mod time;

pub use guard::guard;
pub use handles::{BackendHandle, InstanceHandle, InstanceKind, ModelHandle};
pub use request::{Input, Request, Requests};
pub use response::BytesTensor;
