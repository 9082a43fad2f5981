//! `Error` <-> `TRITONSERVER_Error*`, in one place.

use std::ffi::{CStr, CString};

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
/// (Triton, when returned from an entry point). Never null: an error must
/// never read as success. A process whose C API cannot even make an error
/// object is not a Triton server; the only closed way out there is to stop.
pub fn to_raw(err: &Error) -> *mut sys::TRITONSERVER_Error {
    let api = match sys::error_api() {
        Ok(api) => api,
        Err(why) => {
            eprintln!("[face] fatal: cannot report an error to the server ({why}): {err}");
            std::process::abort();
        }
    };
    // Interior NULs cannot cross as C strings; replace rather than lose the message.
    let msg = CString::new(err.message().replace('\0', " ")).unwrap_or_default();
    // SAFETY: msg is a valid C string; the server copies it.
    let raw = unsafe { api.TRITONSERVER_ErrorNew(code_of(err.kind()), msg.as_ptr()) };
    if raw.is_null() {
        eprintln!("[face] fatal: the server returned no error object for: {err}");
        std::process::abort();
    }
    raw
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
    // A non-null error is a failure even when we cannot read it.
    let api = sys::error_api().map_err(Error::internal)?;
    // SAFETY: `raw` is a live error object that we own (caller's contract).
    let (code, msg_ptr) = unsafe {
        (
            api.TRITONSERVER_ErrorCode(raw),
            api.TRITONSERVER_ErrorMessage(raw),
        )
    };
    let message = if msg_ptr.is_null() {
        String::from("(no message)")
    } else {
        // SAFETY: the server's message is NUL-terminated and lives until the delete below.
        unsafe { CStr::from_ptr(msg_ptr) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: ours to delete, used no more.
    unsafe { api.TRITONSERVER_ErrorDelete(raw) };
    Err(Error::new(kind_of(code), message))
}

/// Call a server function and check its error, with the function's name as
/// context: `call!(api.TRITONBACKEND_ModelName(model, &mut name))`.
macro_rules! call {
    ($api:ident . $f:ident ( $($arg:expr),* $(,)? )) => {{
        // SAFETY: a server function called with the arguments its C API
        // documents; every call site passes live handles and out-pointers.
        #[allow(unused_unsafe)]
        let raw = unsafe { $api.$f($($arg),*) };
        // SAFETY: the server returned this error object to us.
        unsafe { $crate::triton::error::check(raw) }
            .map_err(|e| e.context(stringify!($f)))
    }};
}
pub(crate) use call;

/// The required server API, or an UNSUPPORTED error naming the missing
/// symbol and the server version this backend needs.
pub fn api() -> Result<&'static sys::TritonApi> {
    sys::api().map_err(Error::unsupported)
}
