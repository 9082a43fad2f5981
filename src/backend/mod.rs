//! The backend's lifecycle, where Triton and the face pipeline meet:
//! `model` (config, gallery), `instance` (engine), `execute` (requests in,
//! JSON out).

pub mod config;
pub mod execute;
pub mod instance;
pub mod model;
pub mod parameters;

use crate::error::Result;
use crate::triton::handles::check_backend_api_version;
use crate::triton::{log, BackendHandle};

/// TRITONBACKEND_Initialize: refuse servers whose backend API is incompatible.
pub fn initialize(backend: BackendHandle) -> Result<()> {
    let name = backend.name()?;
    let (major, minor) = check_backend_api_version()?;
    log::info(&format!(
        "backend '{name}' {} initialized (server backend API {major}.{minor})",
        env!("CARGO_PKG_VERSION")
    ));
    Ok(())
}
