//! Borrowed handles to the server's backend, model and instance objects.
//! They do not own the objects (Triton does); they own nothing but a pointer.

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

#[derive(Clone, Copy)]
pub struct BackendHandle(pub *mut sys::TRITONBACKEND_Backend);

impl BackendHandle {
    pub fn name(&self) -> Result<String> {
        let api = api()?;
        let mut name = ptr::null();
        call!(api.TRITONBACKEND_BackendName(self.0, &mut name))?;
        Ok(owned_str(name))
    }
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

#[derive(Clone, Copy)]
pub struct ModelHandle(pub *mut sys::TRITONBACKEND_Model);

impl ModelHandle {
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
        if kind != sys::TRITONBACKEND_ARTIFACT_FILESYSTEM {
            return Err(Error::unsupported(
                "model artifacts must be on a local filesystem",
            ));
        }
        Ok(PathBuf::from(owned_str(location)))
    }

    /// The model configuration as JSON (config version 1).
    pub fn config_json(&self) -> Result<serde_json::Value> {
        let api = api()?;
        let mut message = ptr::null_mut();
        call!(api.TRITONBACKEND_ModelConfig(self.0, 1, &mut message))?;
        let (mut base, mut size) = (ptr::null(), 0usize);
        let serialized = call!(
            api.TRITONSERVER_MessageSerializeToJson(message, &mut base, &mut size)
        )
        .map(|()| {
            // SAFETY: the server says `base` holds `size` bytes until the message is deleted.
            unsafe { std::slice::from_raw_parts(base as *const u8, size) }.to_vec()
        });
        call!(api.TRITONSERVER_MessageDelete(message))?;
        serde_json::from_slice(&serialized?)
            .map_err(|e| Error::internal(format!("model configuration is not JSON: {e}")))
    }

    pub fn attach_state<T: Send + Sync>(&self, value: T) -> Result<()> {
        let api = api()?;
        state::attach(value, |raw| {
            call!(api.TRITONBACKEND_ModelSetState(self.0, raw))
        })
    }

    /// The state attached by `attach_state::<T>`.
    ///
    /// # Safety
    /// The state must be of type `T` and stay attached while the borrow lives.
    pub unsafe fn state<'a, T>(&self) -> Result<&'a T> {
        let api = api()?;
        let mut raw = ptr::null_mut();
        call!(api.TRITONBACKEND_ModelState(self.0, &mut raw))?;
        state::borrow(raw)
    }

    /// Detach and drop the state.
    ///
    /// # Safety
    /// The state must be of type `T` and no borrow of it may be live.
    pub unsafe fn drop_state<T>(&self) -> Result<()> {
        let api = api()?;
        let mut raw = ptr::null_mut();
        call!(api.TRITONBACKEND_ModelState(self.0, &mut raw))?;
        call!(api.TRITONBACKEND_ModelSetState(self.0, ptr::null_mut()))?;
        state::detach::<T>(raw);
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceKind {
    Cpu,
    Gpu,
    Model,
    Auto,
}

#[derive(Clone, Copy)]
pub struct InstanceHandle(pub *mut sys::TRITONBACKEND_ModelInstance);

impl InstanceHandle {
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

    pub fn model(&self) -> Result<ModelHandle> {
        let api = api()?;
        let mut model = ptr::null_mut();
        call!(api.TRITONBACKEND_ModelInstanceModel(self.0, &mut model))?;
        Ok(ModelHandle(model))
    }

    pub fn attach_state<T: Send>(&self, value: T) -> Result<()> {
        let api = api()?;
        state::attach(value, |raw| {
            call!(api.TRITONBACKEND_ModelInstanceSetState(self.0, raw))
        })
    }

    /// The state attached by `attach_state::<T>`, mutably: Triton runs at most
    /// one Execute per instance at a time.
    ///
    /// # Safety
    /// The state must be of type `T`, stay attached while the borrow lives,
    /// and not be borrowed elsewhere.
    pub unsafe fn state_mut<'a, T>(&self) -> Result<&'a mut T> {
        let api = api()?;
        let mut raw = ptr::null_mut();
        call!(api.TRITONBACKEND_ModelInstanceState(self.0, &mut raw))?;
        state::borrow_mut(raw)
    }

    /// Detach and drop the state.
    ///
    /// # Safety
    /// The state must be of type `T` and no borrow of it may be live.
    pub unsafe fn drop_state<T>(&self) -> Result<()> {
        let api = api()?;
        let mut raw = ptr::null_mut();
        call!(api.TRITONBACKEND_ModelInstanceState(self.0, &mut raw))?;
        call!(api.TRITONBACKEND_ModelInstanceSetState(self.0, ptr::null_mut()))?;
        state::detach::<T>(raw);
        Ok(())
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
