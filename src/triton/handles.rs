//! Borrowed handles to the server's backend, model and instance objects.
//! They do not own the objects (Triton does). A handle is made only by
//! `from_raw` (the export macro does it for each entry point) and lives no
//! longer than the call that received the pointer; it is not `Copy`, so
//! state borrowed through it cannot outlive it or its detaching.

use std::any::Any;
use std::ffi::{c_char, CStr};
use std::path::PathBuf;
use std::ptr;

use super::error::{api, call};
use super::request::Request;
use super::time::ExecTimes;
use super::{state, sys};
use crate::error::{Error, Result};

/// Copy a server-owned C string.
fn owned_str(raw: *const c_char) -> String {
    if raw.is_null() {
        return String::new();
    }
    // SAFETY: the server hands out NUL-terminated strings valid for the call.
    unsafe { CStr::from_ptr(raw) }
        .to_string_lossy()
        .into_owned()
}

pub struct BackendHandle(*mut sys::TRITONBACKEND_Backend);

impl BackendHandle {
    /// # Safety
    /// `raw` is the backend Triton passed to the running entry point.
    pub unsafe fn from_raw(raw: *mut sys::TRITONBACKEND_Backend) -> Self {
        BackendHandle(raw)
    }

    pub fn name(&self) -> Result<String> {
        let api = api()?;
        let mut name = ptr::null();
        call!(api.TRITONBACKEND_BackendName(self.0, &mut name))?;
        Ok(owned_str(name))
    }

    /// The folder Triton loaded this library from.
    pub fn directory(&self) -> Result<PathBuf> {
        let api = api()?;
        let mut kind = sys::TRITONBACKEND_ARTIFACT_FILESYSTEM;
        let mut location = ptr::null();
        call!(api.TRITONBACKEND_BackendArtifacts(self.0, &mut kind, &mut location))?;
        filesystem(kind, location)
    }

    /// The backend configuration: `{"cmdline": {"backend-directory": ...}}`.
    pub fn config_json(&self) -> Result<serde_json::Value> {
        let api = api()?;
        let mut message = ptr::null_mut();
        call!(api.TRITONBACKEND_BackendConfig(self.0, &mut message))?;
        // Triton owns this message: read, not deleted.
        json(&serialize(message)?, "backend configuration")
    }
}

/// A message's JSON text, copied out.
fn serialize(message: *mut sys::TRITONSERVER_Message) -> Result<Vec<u8>> {
    let api = api()?;
    let (mut base, mut size) = (ptr::null(), 0usize);
    call!(api.TRITONSERVER_MessageSerializeToJson(message, &mut base, &mut size))?;
    // SAFETY: the server says `base` holds `size` bytes until the message is deleted.
    Ok(unsafe { std::slice::from_raw_parts(base as *const u8, size) }.to_vec())
}

fn json(bytes: &[u8], what: &str) -> Result<serde_json::Value> {
    serde_json::from_slice(bytes).map_err(|e| Error::internal(format!("{what} is not JSON: {e}")))
}

/// An artifact location, which must be a local folder.
fn filesystem(kind: sys::TRITONBACKEND_ArtifactType, location: *const c_char) -> Result<PathBuf> {
    if kind != sys::TRITONBACKEND_ARTIFACT_FILESYSTEM {
        return Err(Error::unsupported(
            "model artifacts must be on a local filesystem",
        ));
    }
    Ok(PathBuf::from(owned_str(location)))
}

/// The server's TRITONBACKEND API version must be compatible with the one this
/// backend was written for: same major, and a minor at least as new.
pub fn check_backend_api_version() -> Result<(u32, u32)> {
    let api = api()?;
    let (mut major, mut minor) = (0u32, 0u32);
    call!(api.TRITONBACKEND_ApiVersion(&mut major, &mut minor))?;
    let ours = (
        sys::TRITONBACKEND_API_VERSION_MAJOR,
        sys::TRITONBACKEND_API_VERSION_MINOR,
    );
    api_version_compatible((major, minor), ours)?;
    Ok((major, minor))
}

pub fn api_version_compatible(server: (u32, u32), ours: (u32, u32)) -> Result<()> {
    if server.0 != ours.0 || server.1 < ours.1 {
        return Err(Error::unsupported(format!(
            "triton backend API version {}.{} does not support this backend, which needs {}.{} \
             or a newer minor version of the same major version",
            server.0, server.1, ours.0, ours.1
        )));
    }
    Ok(())
}

pub struct ModelHandle(*mut sys::TRITONBACKEND_Model);

impl ModelHandle {
    /// # Safety
    /// `raw` is the model Triton passed to the running entry point; while the
    /// handle lives, no other code detaches the model's state.
    pub unsafe fn from_raw(raw: *mut sys::TRITONBACKEND_Model) -> Self {
        ModelHandle(raw)
    }

    pub fn name(&self) -> Result<String> {
        let api = api()?;
        let mut name = ptr::null();
        call!(api.TRITONBACKEND_ModelName(self.0, &mut name))?;
        Ok(owned_str(name))
    }

    pub fn version(&self) -> Result<u64> {
        let api = api()?;
        let mut version = 0;
        call!(api.TRITONBACKEND_ModelVersion(self.0, &mut version))?;
        Ok(version)
    }

    /// The model's directory in the repository (holds config.pbtxt).
    pub fn directory(&self) -> Result<PathBuf> {
        let api = api()?;
        let mut kind = sys::TRITONBACKEND_ARTIFACT_FILESYSTEM;
        let mut location = ptr::null();
        call!(api.TRITONBACKEND_ModelRepository(self.0, &mut kind, &mut location))?;
        filesystem(kind, location)
    }

    /// The model configuration as JSON (config version 1).
    pub fn config_json(&self) -> Result<serde_json::Value> {
        let api = api()?;
        let mut message = ptr::null_mut();
        call!(api.TRITONBACKEND_ModelConfig(self.0, 1, &mut message))?;
        // Ours to delete, read or not.
        let serialized = serialize(message);
        call!(api.TRITONSERVER_MessageDelete(message))?;
        json(&serialized?, "model configuration")
    }

    pub fn attach_state<T: Any + Send + Sync>(&self, value: T) -> Result<()> {
        let api = api()?;
        state::attach(value, |raw| {
            call!(api.TRITONBACKEND_ModelSetState(self.0, raw))
        })
    }

    /// The state attached by `attach_state::<T>` (type-checked).
    pub fn state<T: Any>(&self) -> Result<&T> {
        let raw = model_state_ptr(self.0)?;
        // SAFETY: attached by `attach_state` (or null); the borrow is tied to
        // this handle, which outlives no call and is consumed by `detach_state`.
        unsafe { state::borrow(raw) }
    }

    /// Detach and drop the state (ModelFinalize). Consumes the handle, so no
    /// borrow through it can still be live.
    pub fn detach_state<T: Any>(self) -> Result<()> {
        let api = api()?;
        let raw = model_state_ptr(self.0)?;
        call!(api.TRITONBACKEND_ModelSetState(self.0, ptr::null_mut()))?;
        // SAFETY: attached by `attach_state`, detached once (the slot is now null).
        unsafe { state::detach::<T>(raw) }
    }
}

fn model_state_ptr(model: *mut sys::TRITONBACKEND_Model) -> Result<*mut std::ffi::c_void> {
    let api = api()?;
    let mut raw = ptr::null_mut();
    call!(api.TRITONBACKEND_ModelState(model, &mut raw))?;
    Ok(raw)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceKind {
    Cpu,
    Gpu,
    Model,
    Auto,
}

pub struct InstanceHandle(*mut sys::TRITONBACKEND_ModelInstance);

impl InstanceHandle {
    /// # Safety
    /// `raw` is the instance Triton passed to the running entry point; while
    /// the handle lives, no other code borrows or detaches its state.
    pub unsafe fn from_raw(raw: *mut sys::TRITONBACKEND_ModelInstance) -> Self {
        InstanceHandle(raw)
    }

    pub fn name(&self) -> Result<String> {
        let api = api()?;
        let mut name = ptr::null();
        call!(api.TRITONBACKEND_ModelInstanceName(self.0, &mut name))?;
        Ok(owned_str(name))
    }

    pub fn kind(&self) -> Result<InstanceKind> {
        let api = api()?;
        let mut kind = sys::TRITONSERVER_INSTANCEGROUPKIND_AUTO;
        call!(api.TRITONBACKEND_ModelInstanceKind(self.0, &mut kind))?;
        Ok(match kind {
            sys::TRITONSERVER_INSTANCEGROUPKIND_CPU => InstanceKind::Cpu,
            sys::TRITONSERVER_INSTANCEGROUPKIND_GPU => InstanceKind::Gpu,
            sys::TRITONSERVER_INSTANCEGROUPKIND_MODEL => InstanceKind::Model,
            _ => InstanceKind::Auto,
        })
    }

    pub fn device_id(&self) -> Result<i32> {
        let api = api()?;
        let mut id = 0;
        call!(api.TRITONBACKEND_ModelInstanceDeviceId(self.0, &mut id))?;
        Ok(id)
    }

    /// The state of this instance's model (type-checked). Triton finalizes a
    /// model only after its instances, so it outlives this handle.
    pub fn model_state<M: Any>(&self) -> Result<&M> {
        let api = api()?;
        let mut model = ptr::null_mut();
        call!(api.TRITONBACKEND_ModelInstanceModel(self.0, &mut model))?;
        let raw = model_state_ptr(model)?;
        // SAFETY: attached at ModelInitialize, detached only after this
        // instance is finalized; the borrow is tied to this handle.
        unsafe { state::borrow(raw) }
    }

    pub fn attach_state<T: Any + Send>(&self, value: T) -> Result<()> {
        let api = api()?;
        state::attach(value, |raw| {
            call!(api.TRITONBACKEND_ModelInstanceSetState(self.0, raw))
        })
    }

    /// The model's state and this instance's, the latter mutably: Triton runs
    /// at most one Execute per instance at a time, and `&mut self` keeps the
    /// borrow unique on this side.
    pub fn states_mut<M: Any, I: Any>(&mut self) -> Result<(&M, &mut I)> {
        let model = self.model_state::<M>()? as *const M;
        let raw = self.state_ptr()?;
        // SAFETY: attached by `attach_state`; unique through `&mut self`.
        let instance = unsafe { state::borrow_mut::<I>(raw) }?;
        // SAFETY: see `model_state`; a shared borrow of separate memory.
        Ok((unsafe { &*model }, instance))
    }

    /// Detach and drop the state (ModelInstanceFinalize); consumes the handle.
    pub fn detach_state<T: Any>(self) -> Result<()> {
        let api = api()?;
        let raw = self.state_ptr()?;
        call!(api.TRITONBACKEND_ModelInstanceSetState(self.0, ptr::null_mut()))?;
        // SAFETY: attached by `attach_state`, detached once (the slot is now null).
        unsafe { state::detach::<T>(raw) }
    }

    fn state_ptr(&self) -> Result<*mut std::ffi::c_void> {
        let api = api()?;
        let mut raw = ptr::null_mut();
        call!(api.TRITONBACKEND_ModelInstanceState(self.0, &mut raw))?;
        Ok(raw)
    }

    /// Per-request statistics; must come before the request is released.
    pub fn report_request(&self, request: &Request, success: bool, t: &ExecTimes) -> Result<()> {
        let api = api()?;
        call!(api.TRITONBACKEND_ModelInstanceReportStatistics(
            self.0,
            request.raw(),
            success,
            t.exec_start,
            t.compute_start,
            t.compute_end,
            t.exec_end,
        ))
    }

    /// Statistics for one Execute; `batch_size` counts images, not requests.
    pub fn report_batch(&self, batch_size: u64, t: &ExecTimes) -> Result<()> {
        let api = api()?;
        call!(api.TRITONBACKEND_ModelInstanceReportBatchStatistics(
            self.0,
            batch_size,
            t.exec_start,
            t.compute_start,
            t.compute_end,
            t.exec_end,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_rule() {
        assert!(api_version_compatible((1, 19), (1, 19)).is_ok());
        assert!(api_version_compatible((1, 21), (1, 19)).is_ok());
        let e = api_version_compatible((1, 18), (1, 19)).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Unsupported);
        assert!(e.message().contains("1.18"));
        assert!(api_version_compatible((2, 19), (1, 19)).is_err());
    }
}
