//! User state attached to Triton objects. The only place where ownership
//! crosses the C boundary: `Box::into_raw` when attaching, `Box::from_raw`
//! when detaching. Everything else borrows.

use std::ffi::c_void;

use crate::error::{Error, Result};

/// Attach `value` through `set` (a `...SetState` call). If `set` fails the
/// value is reclaimed and dropped here, so nothing leaks.
pub fn attach<T>(value: T, set: impl FnOnce(*mut c_void) -> Result<()>) -> Result<()> {
    let raw = Box::into_raw(Box::new(value)) as *mut c_void;
    set(raw).inspect_err(|_| {
        // SAFETY: `raw` came from Box::into_raw above and was not attached.
        drop(unsafe { Box::from_raw(raw as *mut T) });
    })
}

/// Borrow attached state.
///
/// # Safety
/// `raw` must be null or a pointer made by `attach::<T>` that has not been
/// detached; the caller chooses a lifetime no longer than the attachment.
pub unsafe fn borrow<'a, T>(raw: *mut c_void) -> Result<&'a T> {
    (raw as *const T)
        .as_ref()
        .ok_or_else(|| Error::internal("backend state is missing"))
}

/// Mutable borrow, for state that only one thread uses at a time (Triton never
/// runs two Executes of one instance at once).
///
/// # Safety
/// As `borrow`, and no other reference to the state may be live.
pub unsafe fn borrow_mut<'a, T>(raw: *mut c_void) -> Result<&'a mut T> {
    (raw as *mut T)
        .as_mut()
        .ok_or_else(|| Error::internal("backend state is missing"))
}

/// Detach and drop attached state (null: nothing to do).
///
/// # Safety
/// `raw` must be null or a pointer made by `attach::<T>`, detached only once.
pub unsafe fn detach<T>(raw: *mut c_void) {
    if !raw.is_null() {
        drop(Box::from_raw(raw as *mut T));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn attach_failure_drops_the_value() {
        let tracker = Rc::new(());
        let r = attach(tracker.clone(), |_| Err(Error::internal("no")));
        assert!(r.is_err());
        assert_eq!(Rc::strong_count(&tracker), 1);
    }

    #[test]
    fn attach_borrow_detach_round_trip() {
        let tracker = Rc::new(5);
        let mut slot = std::ptr::null_mut();
        attach(tracker.clone(), |raw| {
            slot = raw;
            Ok(())
        })
        .unwrap();
        assert_eq!(Rc::strong_count(&tracker), 2);
        assert_eq!(**unsafe { borrow::<Rc<i32>>(slot) }.unwrap(), 5);
        unsafe { detach::<Rc<i32>>(slot) };
        assert_eq!(Rc::strong_count(&tracker), 1);
        assert!(unsafe { borrow::<Rc<i32>>(std::ptr::null_mut()) }.is_err());
    }
}
