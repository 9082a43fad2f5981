//! triton-face: a face detection and recognition backend for NVIDIA Triton
//! Inference Server.
//!
//! Where a request goes: `lib.rs` (the C entry points, nothing else) →
//! `triton/` (safe wrappers, the guard) → `backend/` (model, instance,
//! execute) → `pipeline/` + `engine/` (frames, detection, embeddings) →
//! `gallery.rs` (names) → `result.rs` (JSON).

pub mod backend;
pub mod engine;
pub mod error;
pub mod gallery;
pub mod gpu;
pub mod pipeline;
pub mod result;
pub mod sequence;
pub mod triton;

use backend::instance::InstanceState;
use backend::model::ModelState;
use triton::sys::{TRITONBACKEND_Backend, TRITONBACKEND_Model, TRITONBACKEND_ModelInstance};
use triton::sys::{TRITONBACKEND_Request, TRITONSERVER_Error};
use triton::{guard, BackendHandle, InstanceHandle, ModelHandle};

#[no_mangle]
pub extern "C" fn TRITONBACKEND_Initialize(
    backend: *mut TRITONBACKEND_Backend,
) -> *mut TRITONSERVER_Error {
    guard("TRITONBACKEND_Initialize", || {
        backend::initialize(BackendHandle(backend))
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_Finalize(
    _backend: *mut TRITONBACKEND_Backend,
) -> *mut TRITONSERVER_Error {
    guard("TRITONBACKEND_Finalize", || Ok(()))
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInitialize(
    model: *mut TRITONBACKEND_Model,
) -> *mut TRITONSERVER_Error {
    guard("TRITONBACKEND_ModelInitialize", || {
        let model = ModelHandle(model);
        let state = ModelState::load(model)?;
        model.attach_state(state)
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelFinalize(
    model: *mut TRITONBACKEND_Model,
) -> *mut TRITONSERVER_Error {
    // SAFETY: the state is the ModelState attached at initialize; instances are gone.
    guard("TRITONBACKEND_ModelFinalize", || unsafe {
        ModelHandle(model).drop_state::<ModelState>()
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceInitialize(
    instance: *mut TRITONBACKEND_ModelInstance,
) -> *mut TRITONSERVER_Error {
    guard("TRITONBACKEND_ModelInstanceInitialize", || {
        let instance = InstanceHandle(instance);
        // SAFETY: the model's state outlives its instances.
        let model = unsafe { instance.model()?.state::<ModelState>()? };
        let state = InstanceState::load(instance, model)?;
        instance.attach_state(state)
    })
}

#[no_mangle]
pub extern "C" fn TRITONBACKEND_ModelInstanceFinalize(
    instance: *mut TRITONBACKEND_ModelInstance,
) -> *mut TRITONSERVER_Error {
    // SAFETY: the state is the InstanceState attached at initialize; no Execute runs.
    guard("TRITONBACKEND_ModelInstanceFinalize", || unsafe {
        InstanceHandle(instance).drop_state::<InstanceState>()
    })
}

/// Ownership of the requests passes to the backend on entry, so this always
/// returns success: every request is answered and released inside, even
/// when something fails or panics (see `backend::execute`).
///
/// # Safety
/// Called by Triton with `request_count` valid requests.
#[no_mangle]
pub unsafe extern "C" fn TRITONBACKEND_ModelInstanceExecute(
    instance: *mut TRITONBACKEND_ModelInstance,
    requests: *mut *mut TRITONBACKEND_Request,
    request_count: u32,
) -> *mut TRITONSERVER_Error {
    let raw = if requests.is_null() {
        &[][..]
    } else {
        std::slice::from_raw_parts(requests, request_count as usize)
    };
    // A panic escaping execute has already settled every request (their
    // Drop answers and releases them while unwinding); log it, return success.
    if let Err(e) = triton::guard::catch(|| {
        backend::execute::execute(InstanceHandle(instance), raw);
        Ok(())
    }) {
        triton::log::error(&format!("TRITONBACKEND_ModelInstanceExecute: {e}"));
    }
    std::ptr::null_mut()
}
