//! User state attached to Triton objects. The only place where ownership
//! crosses the C boundary: `Box::into_raw` when attaching, `Box::from_raw`
//! when detaching. Everything else borrows, and every borrow checks the
//! state's type, so a wrong type is an error, never a bad cast.

use std::any::{type_name, Any};
use std::ffi::c_void;

use crate::error::{Error, Result};

/// What the server's `void*` points to: a thin box around the type-erased value.
type Slot = Box<dyn Any>;

/// Attach `value` through `set` (a `...SetState` call). If `set` fails the
/// value is reclaimed and dropped here, so nothing leaks.
pub fn attach<T: Any>(value: T, set: impl FnOnce(*mut c_void) -> Result<()>) -> Result<()> {
    let slot: Slot = Box::new(value);
    let raw = Box::into_raw(Box::new(slot)) as *mut c_void;
    set(raw).inspect_err(|_| {
        // SAFETY: `raw` came from Box::into_raw above and was not attached.
        drop(unsafe { Box::from_raw(raw as *mut Slot) });
    })
}

fn missing<T>() -> Error {
    Error::internal(format!("backend state {} is missing", type_name::<T>()))
}

fn wrong_type<T>() -> Error {
    Error::internal(format!("backend state is not a {}", type_name::<T>()))
}

/// Borrow attached state.
///
/// # Safety
/// `raw` must be null or a pointer made by `attach` that has not been
/// detached; the caller chooses a lifetime no longer than the attachment.
pub unsafe fn borrow<'a, T: Any>(raw: *mut c_void) -> Result<&'a T> {
    // SAFETY: null or a live Slot, by the caller's contract.
    let slot = unsafe { (raw as *const Slot).as_ref() }.ok_or_else(missing::<T>)?;
    slot.downcast_ref::<T>().ok_or_else(wrong_type::<T>)
}

/// Mutable borrow, for state that only one thread uses at a time (Triton never
/// runs two Executes of one instance at once).
///
/// # Safety
/// As `borrow`, and no other reference to the state may be live.
pub unsafe fn borrow_mut<'a, T: Any>(raw: *mut c_void) -> Result<&'a mut T> {
    // SAFETY: null or a live Slot not otherwise borrowed, by the caller's contract.
    let slot = unsafe { (raw as *mut Slot).as_mut() }.ok_or_else(missing::<T>)?;
    slot.downcast_mut::<T>().ok_or_else(wrong_type::<T>)
}

/// Detach and drop attached state (null: nothing to do). The type is checked
/// first: a state of another type is left attached and reported.
///
/// # Safety
/// `raw` must be null or a pointer made by `attach`, detached only once,
/// with no borrow of it live.
pub unsafe fn detach<T: Any>(raw: *mut c_void) -> Result<()> {
    if raw.is_null() {
        return Ok(());
    }
    // SAFETY: a live Slot (caller's contract); checked before it is reclaimed.
    if !unsafe { &*(raw as *const Slot) }.is::<T>() {
        return Err(wrong_type::<T>());
    }
    // SAFETY: made by Box::into_raw in `attach`, reclaimed exactly once.
    drop(unsafe { Box::from_raw(raw as *mut Slot) });
    Ok(())
}

#[cfg(test)]
#[allow(clippy::undocumented_unsafe_blocks)] // tests: pointers made just above
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
        unsafe { detach::<Rc<i32>>(slot) }.unwrap();
        assert_eq!(Rc::strong_count(&tracker), 1);
        assert!(unsafe { borrow::<Rc<i32>>(std::ptr::null_mut()) }.is_err());
    }

    #[test]
    fn a_wrong_type_is_an_error_not_a_cast() {
        let mut slot = std::ptr::null_mut();
        attach(7u32, |raw| {
            slot = raw;
            Ok(())
        })
        .unwrap();
        assert!(unsafe { borrow::<String>(slot) }.is_err());
        assert!(unsafe { borrow_mut::<u64>(slot) }.is_err());
        assert!(unsafe { detach::<String>(slot) }.is_err());
        assert_eq!(*unsafe { borrow::<u32>(slot) }.unwrap(), 7);
        unsafe { detach::<u32>(slot) }.unwrap();
    }
}
