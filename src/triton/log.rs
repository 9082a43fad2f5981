//! Logging through the server's log (`TRITONSERVER_LogMessage`), so backend
//! lines appear in tritonserver's output with its format and verbosity.
//! Outside a server (unit tests) lines go to stderr.

use std::ffi::CString;

use super::sys;

#[derive(Clone, Copy, Debug)]
pub enum Level {
    Info,
    Warn,
    Error,
    Verbose,
}

/// Logs with the caller's file and line, like the C++ LOG_MESSAGE macro.
#[track_caller]
pub fn write(level: Level, msg: &str) {
    let caller = std::panic::Location::caller();
    let raw_level = match level {
        Level::Info => sys::TRITONSERVER_LOG_INFO,
        Level::Warn => sys::TRITONSERVER_LOG_WARN,
        Level::Error => sys::TRITONSERVER_LOG_ERROR,
        Level::Verbose => sys::TRITONSERVER_LOG_VERBOSE,
    };
    let Ok(api) = sys::log_api() else {
        eprintln!("[face {level:?}] {msg}");
        return;
    };
    let text = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    let file = CString::new(caller.file()).unwrap_or_default();
    // SAFETY: valid C strings; the server copies them.
    let err = unsafe {
        if !api.TRITONSERVER_LogIsEnabled(raw_level) {
            return;
        }
        api.TRITONSERVER_LogMessage(
            raw_level,
            file.as_ptr(),
            caller.line() as i32,
            text.as_ptr(),
        )
    };
    // A failed log line is dropped; its error object is still ours to delete.
    if let (false, Ok(errors)) = (err.is_null(), sys::error_api()) {
        // SAFETY: returned to us by the call above, used no more.
        unsafe { errors.TRITONSERVER_ErrorDelete(err) };
    }
}

#[track_caller]
pub fn info(msg: &str) {
    write(Level::Info, msg)
}
#[track_caller]
pub fn warn(msg: &str) {
    write(Level::Warn, msg)
}
#[track_caller]
pub fn error(msg: &str) {
    write(Level::Error, msg)
}
