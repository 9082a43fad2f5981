//! The one guard around every exported `TRITONBACKEND_*` function: a panic or
//! an `Err` never crosses the C boundary; both become a `TRITONSERVER_Error`.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use super::{error::to_raw, log, sys};
use crate::error::{panic_text, Error, Result};

/// Run `body` for the entry point `entry`; map `Err` to its Triton code and a
/// panic to INTERNAL. Both are also logged, so the server log names the entry.
pub fn guard<F>(entry: &str, body: F) -> *mut sys::TRITONSERVER_Error
where
    F: FnOnce() -> Result<()>,
{
    let outcome = catch_unwind(AssertUnwindSafe(body))
        .unwrap_or_else(|payload| Err(Error::internal(panic_message(payload.as_ref()))));
    match outcome {
        Ok(()) => ptr::null_mut(),
        Err(err) => {
            let err = err.context(entry);
            log::error(&err.to_string());
            to_raw(&err)
        }
    }
}

/// Run `body` catching panics, for code that owns resources it must settle
/// itself (Execute owns its requests): the panic becomes an `Err`.
pub fn catch<T>(body: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(body))
        .unwrap_or_else(|payload| Err(Error::internal(panic_message(payload.as_ref()))))
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    format!("internal error (panic): {}", panic_text(payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catch_turns_panic_into_internal_error() {
        let r: Result<()> = catch(|| panic!("boom"));
        let e = r.unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Internal);
        assert!(e.message().contains("boom"), "{}", e.message());
    }

    #[test]
    fn catch_passes_values_and_errors_through() {
        assert_eq!(catch(|| Ok(7)).unwrap(), 7);
        let e = catch::<()>(|| Err(Error::invalid("bad"))).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput);
    }
}
