//! The requests of one Execute. `Requests` is the server's array, not yet
//! ours; `accept` creates every response first (as Triton's recommended
//! backend does) and only then takes ownership: if a response cannot be
//! created, the error goes back to Triton with the requests untouched.
//! An accepted `Request` answers exactly once (`respond` consumes it) and is
//! released exactly once (in `Drop`, on every path, panics included); one
//! dropped without an answer gets an INTERNAL error response first, so no
//! client is left waiting.

use std::borrow::Cow;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;

use super::error::{api, call};
use super::response::{self, BytesTensor};
use super::{log, sys};
use crate::error::{Error, Result};
use crate::sequence::CorrelationId;

/// A request parameter as the client sent it (tritonclient's
/// `parameters={...}`: a Python float arrives as `Double`, an int as `Int`).
#[derive(Clone, Debug, PartialEq)]
pub enum ParameterValue {
    Str(String),
    Int(i64),
    Bool(bool),
    Double(f64),
    /// Raw bytes (not read: no parameter of ours takes them).
    Bytes,
}

impl std::fmt::Display for ParameterValue {
    /// As a message shows it: `0.5`, `"0.5" (a string)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParameterValue::Str(s) => write!(f, "{s:?} (a string)"),
            ParameterValue::Int(n) => write!(f, "{n}"),
            ParameterValue::Bool(b) => write!(f, "{b} (a bool)"),
            ParameterValue::Double(x) => write!(f, "{x}"),
            ParameterValue::Bytes => f.write_str("bytes"),
        }
    }
}

/// The requests handed to Execute, still owned by the server.
pub struct Requests {
    raw: Vec<*mut sys::TRITONBACKEND_Request>,
}

impl Requests {
    /// Copy the server's array (it is the server's again after Execute).
    ///
    /// # Safety
    /// `array` holds `count` requests passed to the running Execute (or is
    /// null with `count` 0).
    pub unsafe fn from_raw(array: *mut *mut sys::TRITONBACKEND_Request, count: u32) -> Self {
        let raw = if array.is_null() || count == 0 {
            Vec::new()
        } else {
            // SAFETY: `count` pointers at `array` (caller's contract).
            unsafe { std::slice::from_raw_parts(array, count as usize) }.to_vec()
        };
        Requests { raw }
    }

    /// Create every request's response, then take ownership of the requests.
    /// On `Err` nothing is owned: created responses are deleted and the
    /// requests stay the server's (the Execute must return that error).
    pub fn accept(self) -> Result<Vec<Request>> {
        let api = api()?;
        let mut responses = Vec::with_capacity(self.raw.len());
        for &request in &self.raw {
            let mut response = ptr::null_mut();
            let made = if request.is_null() {
                Err(Error::internal("the server passed a null request"))
            } else {
                call!(api.TRITONBACKEND_ResponseNew(&mut response, request))
            };
            if let Err(e) = made {
                for created in responses {
                    let _ = call!(api.TRITONBACKEND_ResponseDelete(created));
                }
                return Err(e.context("cannot create the responses; the batch is returned"));
            }
            responses.push(response);
        }
        let requests = self.raw.into_iter().zip(responses);
        Ok(requests
            .map(|(raw, response)| Request { raw, response })
            .collect())
    }
}

pub struct Request {
    raw: *mut sys::TRITONBACKEND_Request,
    /// Created at `accept`; null once sent.
    response: *mut sys::TRITONBACKEND_Response,
}

impl Request {
    pub(crate) fn raw(&self) -> *mut sys::TRITONBACKEND_Request {
        self.raw
    }

    /// The request's input `name`, or `None` when the client did not send it.
    pub fn input(&self, name: &str) -> Result<Option<Input<'_>>> {
        let api = api()?;
        let mut count = 0u32;
        call!(api.TRITONBACKEND_RequestInputCount(self.raw, &mut count))?;
        let mut present = false;
        for i in 0..count {
            let mut raw_name = ptr::null();
            call!(api.TRITONBACKEND_RequestInputName(self.raw, i, &mut raw_name))?;
            if !raw_name.is_null()
                // SAFETY: NUL-terminated, valid while the request lives.
                && unsafe { CStr::from_ptr(raw_name) }.to_bytes() == name.as_bytes()
            {
                present = true;
                break;
            }
        }
        if !present {
            return Ok(None);
        }
        let c_name = CString::new(name).map_err(|_| Error::invalid("input name contains NUL"))?;
        let mut input = ptr::null_mut();
        call!(api.TRITONBACKEND_RequestInput(self.raw, c_name.as_ptr(), &mut input))?;
        Input::new(input, name).map(Some)
    }

    /// The request parameter `key`, or `None` when the client did not send it.
    pub fn parameter(&self, key: &str) -> Result<Option<ParameterValue>> {
        let api = api()?;
        let mut count = 0u32;
        call!(api.TRITONBACKEND_RequestParameterCount(self.raw, &mut count))?;
        for i in 0..count {
            let (mut raw_key, mut kind, mut value) =
                (ptr::null(), sys::TRITONSERVER_PARAMETER_BYTES, ptr::null());
            call!(api.TRITONBACKEND_RequestParameter(
                self.raw,
                i,
                &mut raw_key,
                &mut kind,
                &mut value
            ))?;
            // SAFETY: NUL-terminated, valid while the request lives.
            if raw_key.is_null() || unsafe { CStr::from_ptr(raw_key) }.to_bytes() != key.as_bytes()
            {
                continue;
            }
            if value.is_null() {
                return Err(Error::internal(format!(
                    "request parameter {key}: null value"
                )));
            }
            // SAFETY: the server says `value` points at a value of type `kind`
            // (see the header), valid while the request lives.
            return Ok(Some(unsafe { parameter_value(kind, value) }));
        }
        Ok(None)
    }

    /// Request flags (sequence start / end bits).
    pub fn flags(&self) -> Result<u32> {
        let api = api()?;
        let mut flags = 0;
        call!(api.TRITONBACKEND_RequestFlags(self.raw, &mut flags))?;
        Ok(flags)
    }

    /// The correlation ID Triton attached (sequence models): an unsigned
    /// integer, or a string when the client sent one. `None` when absent.
    pub fn correlation_id(&self) -> Result<Option<CorrelationId>> {
        let api = api()?;
        let mut id = 0u64;
        if call!(api.TRITONBACKEND_RequestCorrelationId(self.raw, &mut id)).is_ok() {
            return Ok((id != 0).then_some(CorrelationId::Int(id)));
        }
        let mut text = ptr::null();
        call!(api.TRITONBACKEND_RequestCorrelationIdString(self.raw, &mut text))?;
        let text = if text.is_null() {
            String::new()
        } else {
            // SAFETY: NUL-terminated, valid while the request lives.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        Ok((!text.is_empty()).then_some(CorrelationId::Str(text)))
    }

    /// The request's ID as sent by the client ("" when none), for messages.
    pub fn id(&self) -> String {
        let Ok(api) = api() else { return String::new() };
        let mut id = ptr::null();
        if call!(api.TRITONBACKEND_RequestId(self.raw, &mut id)).is_err() || id.is_null() {
            return String::new();
        }
        // SAFETY: NUL-terminated, valid while the request lives.
        unsafe { CStr::from_ptr(id) }.to_string_lossy().into_owned()
    }

    /// Send the one response of this request: outputs on success, the error
    /// otherwise. `after` runs once it is sent and before the request is
    /// released (statistics need a live request). Consumes the request.
    pub fn respond(
        mut self,
        outcome: Result<Vec<BytesTensor>>,
        after: impl FnOnce(&Request, bool),
    ) {
        let success = outcome.is_ok();
        self.send(outcome);
        after(&self, success);
    }

    fn send(&mut self, outcome: Result<Vec<BytesTensor>>) {
        let response = std::mem::replace(&mut self.response, ptr::null_mut());
        if response.is_null() {
            return;
        }
        if let Err(e) = response::send(response, outcome) {
            log::error(&format!("failed to send a response: {e}"));
        }
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        let err = Error::internal("the face backend dropped this request without an answer");
        self.send(Err(err));
        let Ok(api) = api() else { return };
        if let Err(e) =
            call!(api.TRITONBACKEND_RequestRelease(self.raw, sys::TRITONSERVER_REQUEST_RELEASE_ALL))
        {
            log::error(&format!("failed to release a request: {e}"));
        }
    }
}

/// Read a parameter's value.
///
/// # Safety
/// `value` is non-null and points at what `kind` says (TRITONBACKEND_RequestParameter).
unsafe fn parameter_value(
    kind: sys::TRITONSERVER_ParameterType,
    value: *const c_void,
) -> ParameterValue {
    // SAFETY: in each arm the pointee's type is the one `kind` names, and
    // strings are NUL-terminated (caller's contract).
    unsafe {
        match kind {
            sys::TRITONSERVER_PARAMETER_STRING => ParameterValue::Str(
                CStr::from_ptr(value as *const c_char)
                    .to_string_lossy()
                    .into_owned(),
            ),
            sys::TRITONSERVER_PARAMETER_INT => ParameterValue::Int(*(value as *const i64)),
            sys::TRITONSERVER_PARAMETER_BOOL => ParameterValue::Bool(*(value as *const u8) != 0),
            sys::TRITONSERVER_PARAMETER_DOUBLE => ParameterValue::Double(*(value as *const f64)),
            _ => ParameterValue::Bytes,
        }
    }
}

/// One input tensor of a request.
pub struct Input<'r> {
    raw: *mut sys::TRITONBACKEND_Input,
    pub name: String,
    pub datatype: sys::TRITONSERVER_DataType,
    pub shape: Vec<i64>,
    pub byte_size: u64,
    buffer_count: u32,
    _request: std::marker::PhantomData<&'r Request>,
}

impl<'r> Input<'r> {
    fn new(raw: *mut sys::TRITONBACKEND_Input, name: &str) -> Result<Self> {
        let api = api()?;
        let (mut dtype, mut shape_ptr, mut dims, mut bytes, mut buffers) = (
            sys::TRITONSERVER_TYPE_INVALID,
            ptr::null(),
            0u32,
            0u64,
            0u32,
        );
        call!(api.TRITONBACKEND_InputProperties(
            raw,
            ptr::null_mut(),
            &mut dtype,
            &mut shape_ptr,
            &mut dims,
            &mut bytes,
            &mut buffers,
        ))?;
        let shape = if shape_ptr.is_null() || dims == 0 {
            Vec::new()
        } else {
            // SAFETY: the server says shape_ptr holds `dims` values while the request lives.
            unsafe { std::slice::from_raw_parts(shape_ptr, dims as usize) }.to_vec()
        };
        Ok(Input {
            raw,
            name: name.to_string(),
            datatype: dtype,
            shape,
            byte_size: bytes,
            buffer_count: buffers,
            _request: std::marker::PhantomData,
        })
    }

    /// The tensor's bytes in host memory: borrowed when the server holds them
    /// in one CPU buffer, gathered into one copy when they span several or sit
    /// in GPU memory (CUDA shared memory reaches the backend as is).
    pub fn host_bytes(&self) -> Result<Cow<'r, [u8]>> {
        let api = api()?;
        let mut parts: Vec<Cow<'r, [u8]>> = Vec::with_capacity(self.buffer_count as usize);
        for index in 0..self.buffer_count {
            let (mut buf, mut len) = (ptr::null(), 0u64);
            // Ask for CPU memory; the server may still answer with GPU memory.
            let (mut mem, mut mem_id) = (sys::TRITONSERVER_MEMORY_CPU, 0i64);
            call!(api.TRITONBACKEND_InputBuffer(
                self.raw,
                index,
                &mut buf,
                &mut len,
                &mut mem,
                &mut mem_id
            ))?;
            if len == 0 {
                continue;
            }
            if buf.is_null() {
                return Err(Error::internal(format!(
                    "{}: server returned a null buffer",
                    self.name
                )));
            }
            parts.push(if mem == sys::TRITONSERVER_MEMORY_GPU {
                let host = crate::gpu::copy_to_host(buf as *const u8, len as usize, mem_id)
                    .map_err(|e| e.context(&self.name))?;
                Cow::Owned(host)
            } else {
                // SAFETY: the server says `buf` holds `len` host bytes while
                // the request lives (CPU or CUDA-pinned memory).
                Cow::Borrowed(unsafe { std::slice::from_raw_parts(buf as *const u8, len as usize) })
            });
        }
        Ok(match parts.len() {
            0 => Cow::Borrowed(&[]),
            1 => parts.pop().expect("one part"),
            _ => Cow::Owned(parts.concat()),
        })
    }
}

/// Split a serialized BYTES (TYPE_STRING) tensor into its elements: each is a
/// 4-byte little-endian length followed by that many bytes.
pub fn decode_bytes_tensor(data: &[u8]) -> Result<Vec<&[u8]>> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let (element, after) = split_element(rest)?;
        out.push(element);
        rest = after;
    }
    Ok(out)
}

/// The first element of a BYTES tensor, ignoring whatever follows it (Triton
/// pads string control tensors to a fixed size).
pub fn first_bytes_element(data: &[u8]) -> Result<Option<&[u8]>> {
    if data.len() < 4 {
        return Ok(None);
    }
    split_element(data).map(|(element, _)| Some(element))
}

/// One length-prefixed element off the front of `data`, and the rest.
fn split_element(data: &[u8]) -> Result<(&[u8], &[u8])> {
    let Some((prefix, rest)) = data.split_first_chunk::<4>() else {
        return Err(Error::invalid(
            "malformed BYTES tensor: truncated length prefix",
        ));
    };
    let len = u32::from_le_bytes(*prefix) as usize;
    if rest.len() < len {
        return Err(Error::invalid(format!(
            "malformed BYTES tensor: element of {len} bytes but only {} left",
            rest.len()
        )));
    }
    Ok(rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::triton::response::encode_bytes_tensor;

    #[test]
    fn first_element_ignores_padding() {
        let mut data = encode_bytes_tensor(&[b"seq-a".as_slice()]);
        data.extend_from_slice(&[0xAB; 120]);
        assert_eq!(first_bytes_element(&data).unwrap(), Some(&b"seq-a"[..]));
        assert_eq!(first_bytes_element(&[]).unwrap(), None);
        assert!(first_bytes_element(&[9, 0, 0, 0, b'x']).is_err());
    }

    #[test]
    fn bytes_round_trip() {
        let elems: Vec<&[u8]> = vec![b"hello", b"", b"\x00\xff"];
        let encoded = encode_bytes_tensor(&elems);
        assert_eq!(&encoded[..4], &5u32.to_le_bytes());
        assert_eq!(decode_bytes_tensor(&encoded).unwrap(), elems);
    }

    #[test]
    fn bytes_rejects_truncation() {
        assert!(decode_bytes_tensor(&[1, 0, 0]).is_err());
        assert!(decode_bytes_tensor(&[5, 0, 0, 0, b'a']).is_err());
        assert!(decode_bytes_tensor(&[]).unwrap().is_empty());
    }
}
