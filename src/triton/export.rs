//! The one way to define a `TRITONBACKEND_*` entry point. Every export is an
//! `unsafe extern "C" fn` generated here, and its body always runs inside
//! `guard`: a panic or an `Err` becomes a `TRITONSERVER_Error`, never null.
//! The raw pointers are wrapped into handles before the body sees them, so
//! the body (in `lib.rs`) is safe code.

use super::sys;

/// A handle made from the raw pointer the server passes to an entry point.
pub trait FromRaw {
    type Raw;
    /// # Safety
    /// `raw` is what the server passed to the running entry point, valid for
    /// the call (the C API's contract).
    unsafe fn from_raw(raw: Self::Raw) -> Self;
}

impl FromRaw for super::BackendHandle {
    type Raw = *mut sys::TRITONBACKEND_Backend;
    unsafe fn from_raw(raw: Self::Raw) -> Self {
        // SAFETY: forwarded contract.
        unsafe { Self::from_raw(raw) }
    }
}

impl FromRaw for super::ModelHandle {
    type Raw = *mut sys::TRITONBACKEND_Model;
    unsafe fn from_raw(raw: Self::Raw) -> Self {
        // SAFETY: forwarded contract.
        unsafe { Self::from_raw(raw) }
    }
}

impl FromRaw for super::InstanceHandle {
    type Raw = *mut sys::TRITONBACKEND_ModelInstance;
    unsafe fn from_raw(raw: Self::Raw) -> Self {
        // SAFETY: forwarded contract.
        unsafe { Self::from_raw(raw) }
    }
}

/// `export! { fn NAME(arg: Handle, ...) -> Result<()> { body } }` defines the
/// C entry point NAME taking each handle's raw pointer. For Execute, whose
/// requests come as a pointer and a count, write `requests: Requests` last.
#[macro_export]
macro_rules! export {
    ($(#[$meta:meta])* fn $name:ident($instance:ident: InstanceHandle, $requests:ident: Requests) $body:block) => {
        $(#[$meta])*
        ///
        /// # Safety
        /// Called by tritonserver only, with the arguments its C API documents.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $instance: *mut $crate::triton::sys::TRITONBACKEND_ModelInstance,
            $requests: *mut *mut $crate::triton::sys::TRITONBACKEND_Request,
            count: u32,
        ) -> *mut $crate::triton::sys::TRITONSERVER_Error {
            $crate::triton::guard::guard(stringify!($name), || {
                // SAFETY: the server passes this Execute's instance and
                // `count` requests (C API contract).
                let ($instance, $requests) = unsafe {(
                    <$crate::triton::InstanceHandle as $crate::triton::export::FromRaw>::from_raw($instance),
                    $crate::triton::Requests::from_raw($requests, count),
                )};
                $body
            })
        }
    };
    ($(#[$meta:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        $(#[$meta])*
        ///
        /// # Safety
        /// Called by tritonserver only, with the arguments its C API documents.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $($arg: <$ty as $crate::triton::export::FromRaw>::Raw),*
        ) -> *mut $crate::triton::sys::TRITONSERVER_Error {
            $crate::triton::guard::guard(stringify!($name), || {
                // SAFETY: the server passes live objects for this call (C API contract).
                $(let $arg = unsafe { <$ty as $crate::triton::export::FromRaw>::from_raw($arg) };)*
                $body
            })
        }
    };
}
