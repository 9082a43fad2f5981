//! `Error` <-> `TRITONSERVER_Error*`, in one place.

use std::ffi::{CStr, CString};
use std::ptr;

use super::sys;
use crate::error::{Error, ErrorKind, Result};

/// The Triton error code for an error kind.
pub fn code_of(kind: ErrorKind) -> sys::TRITONSERVER_Error_Code {
    match kind {
        ErrorKind::InvalidInput => sys::TRITONSERVER_ERROR_INVALID_ARG,
        ErrorKind::Unavailable => sys::TRITONSERVER_ERROR_UNAVAILABLE,
        ErrorKind::Unsupported => sys::TRITONSERVER_ERROR_UNSUPPORTED,
        ErrorKind::NotFound => sys::TRITONSERVER_ERROR_NOT_FOUND,
        ErrorKind::Internal => sys::TRITONSERVER_ERROR_INTERNAL,
    }
}

fn kind_of(code: sys::TRITONSERVER_Error_Code) -> ErrorKind {
    match code {
        sys::TRITONSERVER_ERROR_INVALID_ARG => ErrorKind::InvalidInput,
        sys::TRITONSERVER_ERROR_UNAVAILABLE => ErrorKind::Unavailable,
        sys::TRITONSERVER_ERROR_UNSUPPORTED => ErrorKind::Unsupported,
        sys::TRITONSERVER_ERROR_NOT_FOUND => ErrorKind::NotFound,
        _ => ErrorKind::Internal,
    }
}

/// A new server-owned error object for `err`; ownership passes to the caller
/// (Triton, when returned from an entry point).
pub fn to_raw(err: &Error) -> *mut sys::TRITONSERVER_Error {
    let Ok(api) = sys::api() else {
        return ptr::null_mut();
    };
    // Interior NULs cannot cross as C strings; replace rather than lose the message.
    let msg = CString::new(err.message().replace('\0', " ")).unwrap_or_default();
    // SAFETY: msg is a valid C string; the server copies it.
    unsafe { api.TRITONSERVER_ErrorNew(code_of(err.kind()), msg.as_ptr()) }
}

/// Takes ownership of an error returned by a server call and turns it into
/// a `Result`, deleting the server object.
///
/// # Safety
/// `raw` must be null or an error object returned by the server that no one
/// else will use or delete.
pub unsafe fn check(raw: *mut sys::TRITONSERVER_Error) -> Result<()> {
    if raw.is_null() {
        return Ok(());
    }
    let api = sys::api().map_err(Error::internal)?;
    let code = api.TRITONSERVER_ErrorCode(raw);
    let msg_ptr = api.TRITONSERVER_ErrorMessage(raw);
    let message = if msg_ptr.is_null() {
        String::from("(no message)")
    } else {
        CStr::from_ptr(msg_ptr).to_string_lossy().into_owned()
    };
    api.TRITONSERVER_ErrorDelete(raw);
    Err(Error::new(kind_of(code), message))
}

/// Call a server function and check its error, with the function's name as
/// context: `call!(api.TRITONBACKEND_ModelName(model, &mut name))`.
macro_rules! call {
    ($api:ident . $f:ident ( $($arg:expr),* $(,)? )) => {{
        #[allow(unused_unsafe)]
        let raw = unsafe { $api.$f($($arg),*) };
        // SAFETY: the server returned this error object to us.
        unsafe { $crate::triton::error::check(raw) }
            .map_err(|e| e.context(stringify!($f)))
    }};
}
pub(crate) use call;

/// The server API, or an internal error saying it is missing.
pub fn api() -> Result<&'static sys::TritonApi> {
    sys::api().map_err(Error::internal)
}
