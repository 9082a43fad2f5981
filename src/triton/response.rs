//! Building and sending one response: a BYTES output, or an error.

use std::ffi::CString;
use std::ptr;

use super::error::{api, call, to_raw};
use super::sys;
use crate::error::{Error, Result};

/// A TYPE_STRING output tensor: `shape` and one byte string per element.
pub struct BytesTensor {
    pub name: &'static str,
    pub shape: Vec<i64>,
    pub elements: Vec<Vec<u8>>,
}

/// Serialize elements the way Triton expects BYTES: u32 LE length + bytes.
pub fn encode_bytes_tensor<T: AsRef<[u8]>>(elements: &[T]) -> Vec<u8> {
    let total: usize = elements.iter().map(|e| 4 + e.as_ref().len()).sum();
    let mut out = Vec::with_capacity(total);
    for e in elements {
        let e = e.as_ref();
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(e);
    }
    out
}

/// Fill a request's response with the outputs (or turn a failure while
/// filling them into the response's error), and send it as final. The
/// response is consumed: sent, or deleted when sending fails.
pub(super) fn send(
    response: *mut sys::TRITONBACKEND_Response,
    outcome: Result<Vec<BytesTensor>>,
) -> Result<()> {
    let api = api()?;
    let outcome = outcome.and_then(|tensors| {
        tensors
            .iter()
            .try_for_each(|t| write_output(api, response, t))
    });
    let err = match &outcome {
        Ok(()) => ptr::null_mut(),
        Err(e) => to_raw(e),
    };
    let sent = call!(api.TRITONBACKEND_ResponseSend(
        response,
        sys::TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        err
    ));
    if !err.is_null() {
        if let Ok(errors) = sys::error_api() {
            // The error object stays ours after sending.
            // SAFETY: created by to_raw above, not used after this.
            unsafe { errors.TRITONSERVER_ErrorDelete(err) };
        }
    }
    if sent.is_err() {
        // Send failed: the response is still ours to delete.
        // SAFETY: the send did not take ownership.
        let _ = call!(api.TRITONBACKEND_ResponseDelete(response));
    }
    sent
}

fn write_output(
    api: &sys::TritonApi,
    response: *mut sys::TRITONBACKEND_Response,
    tensor: &BytesTensor,
) -> Result<()> {
    let name = CString::new(tensor.name).map_err(|_| Error::internal("output name has NUL"))?;
    let mut output = ptr::null_mut();
    call!(api.TRITONBACKEND_ResponseOutput(
        response,
        &mut output,
        name.as_ptr(),
        sys::TRITONSERVER_TYPE_BYTES,
        tensor.shape.as_ptr(),
        tensor.shape.len() as u32,
    ))?;
    let bytes = encode_bytes_tensor(&tensor.elements);
    let (mut buffer, mut mem, mut mem_id) = (ptr::null_mut(), sys::TRITONSERVER_MEMORY_CPU, 0i64);
    call!(api.TRITONBACKEND_OutputBuffer(
        output,
        &mut buffer,
        bytes.len() as u64,
        &mut mem,
        &mut mem_id
    ))?;
    if mem == sys::TRITONSERVER_MEMORY_GPU {
        return Err(Error::unsupported(format!(
            "{}: the server offered a GPU output buffer; this backend writes host memory",
            tensor.name
        )));
    }
    if !bytes.is_empty() {
        if buffer.is_null() {
            return Err(Error::internal(format!(
                "{}: null output buffer",
                tensor.name
            )));
        }
        // SAFETY: the server allocated `bytes.len()` bytes of host memory at `buffer`.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), buffer as *mut u8, bytes.len()) };
    }
    Ok(())
}
