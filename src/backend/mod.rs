//! The backend's lifecycle, where Triton and the face pipeline meet:
//! `model` (config, gallery), `instance` (engine), and one Execute:
//! `execute` (responses first, answers, statistics) → `job` (what a request
//! asks for: `tensors`, `controls`) → `batch` (engine over the whole batch,
//! `spread` over the batch threads)
//! → `enroll` (one gallery write) → `manage` (FORGET, LIST) → `answer`
//! (names, sequence, JSON).

pub mod answer;
pub mod batch;
pub mod config;
pub mod controls;
pub mod enroll;
pub mod execute;
pub mod instance;
pub mod job;
pub mod manage;
pub mod model;
pub mod parameters;
pub mod spread;
pub mod tensors;

use crate::error::Result;
use crate::triton::handles::check_backend_api_version;
use crate::triton::{log, BackendHandle};

/// TRITONBACKEND_Initialize: refuse servers without the C API this backend
/// calls (the error names the missing symbol) or with an incompatible
/// backend API version.
pub fn initialize(backend: &BackendHandle) -> Result<()> {
    let (major, minor) = check_backend_api_version()?;
    let name = backend.name()?;
    log::info(&format!(
        "backend '{name}' {} initialized (server backend API {major}.{minor})",
        env!("CARGO_PKG_VERSION")
    ));
    Ok(())
}
