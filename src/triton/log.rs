//! Logging through the server's log (`TRITONSERVER_LogMessage`), so backend
//! lines appear in tritonserver's output with its format and verbosity.
//! Outside a server (unit tests) lines go to stderr.
//!
//! Below the backend (gallery, engines, sequences) code logs through the
//! `log` crate's macros and knows nothing of Triton: `install` makes this
//! the `log` facade's logger, at the server's levels.

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
    write_at(level, caller.file(), caller.line(), msg)
}

/// The server's level for a `log` record: debug and trace are verbose.
fn level_of(level: log::Level) -> Level {
    match level {
        log::Level::Error => Level::Error,
        log::Level::Warn => Level::Warn,
        log::Level::Info => Level::Info,
        log::Level::Debug | log::Level::Trace => Level::Verbose,
    }
}

/// The `log` facade's logger: every record to the server's log.
struct Logger;

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        // Other crates' chatter (tract's debug lines) stays out below warnings.
        metadata.level() <= log::Level::Warn || metadata.target().starts_with("triton_face")
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let file = record.file().unwrap_or("?");
            let text = record.args().to_string();
            write_at(
                level_of(record.level()),
                file,
                record.line().unwrap_or(0),
                &text,
            );
        }
    }

    fn flush(&self) {}
}

/// Make the server's log the `log` facade's, once per process (a second
/// call, after the library is loaded again, keeps the first). Debug lines
/// only when the server logged verbose ones as the backend loaded: the
/// macros check this level before anything is formatted (tract's debug
/// lines sit in its loops).
pub fn install() {
    static LOGGER: Logger = Logger;
    let _ = log::set_logger(&LOGGER);
    let verbose = enabled(Level::Verbose);
    log::set_max_level(match verbose {
        true => log::LevelFilter::Trace,
        false => log::LevelFilter::Info,
    });
}

/// Whether the server logs `level` now.
fn enabled(level: Level) -> bool {
    let Ok(api) = sys::log_api() else {
        return true;
    };
    // SAFETY: a plain query of the server's log settings.
    unsafe { api.TRITONSERVER_LogIsEnabled(raw(level)) }
}

fn raw(level: Level) -> sys::TRITONSERVER_LogLevel {
    match level {
        Level::Info => sys::TRITONSERVER_LOG_INFO,
        Level::Warn => sys::TRITONSERVER_LOG_WARN,
        Level::Error => sys::TRITONSERVER_LOG_ERROR,
        Level::Verbose => sys::TRITONSERVER_LOG_VERBOSE,
    }
}

fn write_at(level: Level, file: &str, line: u32, msg: &str) {
    let raw_level = raw(level);
    let Ok(api) = sys::log_api() else {
        eprintln!("[face {level:?}] {msg}");
        return;
    };
    let text = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    let file = CString::new(file).unwrap_or_default();
    // SAFETY: valid C strings; the server copies them.
    let err = unsafe {
        if !api.TRITONSERVER_LogIsEnabled(raw_level) {
            return;
        }
        api.TRITONSERVER_LogMessage(raw_level, file.as_ptr(), line as i32, text.as_ptr())
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

#[cfg(test)]
mod tests {
    use super::*;
    use log::Log;

    #[test]
    fn our_lines_at_every_level_others_from_warnings_up() {
        let at = |target: &str, level| {
            Logger.enabled(&log::Metadata::builder().target(target).level(level).build())
        };
        assert!(at("triton_face::gallery::erase", log::Level::Debug));
        assert!(at("tract_core::model", log::Level::Warn));
        assert!(!at("tract_core::model", log::Level::Info));
        assert!(matches!(level_of(log::Level::Trace), Level::Verbose));
        assert!(matches!(level_of(log::Level::Warn), Level::Warn));
    }
}
