//! The backend's lifecycle, where Triton and the face pipeline meet:
//! `model` (config, gallery), `instance` (engine), and one Execute:
//! `execute` (responses first, answers, statistics) → `job` (what a request
//! asks for: `tensors`, `controls`) → `access` (who may change the gallery)
//! → `decode` (the batch's ENCODED images, on several threads) → `batch`
//! (engine over the whole batch,
//! `spread` over the batch threads)
//! → `enroll` (one gallery write) → `manage` (FORGET, LIST) → `answer`
//! (names, sequence, JSON).

pub mod access;
pub mod answer;
pub mod batch;
pub mod config;
pub mod controls;
pub mod decode;
pub mod enroll;
pub mod execute;
pub mod instance;
pub mod job;
pub mod manage;
pub mod model;
pub mod parameters;
pub mod settings;
pub mod spread;
pub mod tensors;
pub mod tracked_requests;

use std::path::PathBuf;

use crate::engine::onnx::onnxruntime::{self, Place};
use crate::error::Result;
use crate::triton::handles::check_backend_api_version;
use crate::triton::{log, BackendHandle};

/// TRITONBACKEND_Initialize: refuse servers without the C API this backend
/// calls (the error names the missing symbol) or with an incompatible
/// backend API version; tell the ONNX engine where onnxruntime may be.
pub fn initialize(backend: &BackendHandle) -> Result<()> {
    let (major, minor) = check_backend_api_version()?;
    log::install();
    let name = backend.name()?;
    onnxruntime::look_also_in(onnxruntime_places(backend));
    log::info(&format!(
        "backend '{name}' {} initialized (server backend API {major}.{minor})",
        env!("CARGO_PKG_VERSION")
    ));
    Ok(())
}

/// TRITONBACKEND_Finalize: the threads this library keeps between requests
/// joined, as the server may unload the library next.
pub fn finalize() {
    crate::gallery::join_helpers();
}

/// Beside this library, then in Triton's own onnxruntime backend
/// (`<backend-directory>/onnxruntime/`, in every NGC image). A place Triton
/// cannot tell is left out, logged.
fn onnxruntime_places(backend: &BackendHandle) -> Vec<Place> {
    let mut places = Vec::new();
    match backend.directory() {
        Ok(folder) => places.push(Place {
            folder,
            what: "beside libtriton_face.so".into(),
        }),
        Err(e) => log::warn(&format!("the backend's own folder is unknown: {e}")),
    }
    let config = backend.config_json();
    let backends = config.as_ref().ok().and_then(|c| {
        c.pointer("/cmdline/backend-directory")
            .and_then(|v| v.as_str())
            .map(PathBuf::from)
    });
    match backends {
        Some(dir) => places.push(Place {
            folder: dir.join("onnxruntime"),
            what: "Triton's onnxruntime backend".into(),
        }),
        None => log::warn(&format!(
            "the server's backend directory is unknown (backend configuration: {config:?})"
        )),
    }
    places
}
