//! triton-face: a face detection and recognition backend for NVIDIA Triton
//! Inference Server.
//!
//! Where a request goes: `lib.rs` (the C entry points, nothing else) →
//! `triton/` (safe wrappers, the guard) → `backend/` (model, instance,
//! execute) → `pipeline/` + `engine/` (frames, detection, embeddings) →
//! `gallery/` (names) → `result.rs` (JSON).
//!
//! Each entry point is made by `export!` (src/triton/export.rs): an
//! `unsafe extern "C" fn` whose body always runs inside the guard, with the
//! server's pointers already wrapped in handles.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod backend;
pub mod engine;
pub mod error;
pub mod gallery;
pub mod gpu;
pub mod metric;
pub mod parts;
pub mod pipeline;
pub mod result;
pub mod sequence;
pub mod triton;

/// Every Rust allocation of the backend (tract's tensors above all) comes
/// from mimalloc, which keeps freed pages for the next run; glibc's malloc
/// handed the large ones back to the kernel, so each run paid about 1,400
/// page faults. The server's own allocations keep their allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use backend::instance::InstanceState;
use backend::model::ModelState;
use triton::{BackendHandle, InstanceHandle, ModelHandle};

export! {
    /// Refuse servers whose C API or backend API version is not the one this
    /// backend needs.
    fn TRITONBACKEND_Initialize(backend: BackendHandle) {
        backend::initialize(&backend)
    }
}

export! {
    fn TRITONBACKEND_Finalize(_backend: BackendHandle) {
        backend::finalize();
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_ModelInitialize(model: ModelHandle) {
        let state = ModelState::load(&model)?;
        model.attach_state(state)
    }
}

export! {
    fn TRITONBACKEND_ModelFinalize(model: ModelHandle) {
        model.detach_state::<ModelState>()?;
        // What the model's load, instances and threads freed (onnxruntime's
        // and dlib's allocations go through glibc, one heap per thread that
        // ran them) goes back to the system: without it every arena kept its
        // high-water mark, and reloads grew the server (issue 84).
        // SAFETY: malloc_trim only returns free memory; nothing is in use.
        unsafe { libc::malloc_trim(0) };
        Ok(())
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceInitialize(instance: InstanceHandle) {
        let state = InstanceState::load(&instance, instance.model_state::<ModelState>()?)?;
        instance.attach_state(state)
    }
}

export! {
    fn TRITONBACKEND_ModelInstanceFinalize(instance: InstanceHandle) {
        instance.detach_state::<InstanceState>()
    }
}

export! {
    /// `Err` only while the requests are still the server's (their responses
    /// could not be created); once accepted, every request is answered and
    /// released inside, even when something fails or panics.
    fn TRITONBACKEND_ModelInstanceExecute(instance: InstanceHandle, requests: Requests) {
        backend::execute::execute(instance, requests)
    }
}
