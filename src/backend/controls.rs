//! A sequence request's controls: START / END / READY / CORRID, from the
//! control tensors the config declares, else from the request's own flags
//! and correlation ID.

use crate::backend::settings::{Control, SequenceConfig, Truth};
use crate::error::{Error, Result};
use crate::sequence::CorrelationId;
use crate::triton::request::first_bytes_element;
use crate::triton::{sys, Request};

/// The sequence controls of one request.
pub struct Step {
    pub ready: bool,
    pub start: bool,
    pub end: bool,
    pub id: CorrelationId,
}

/// START / END / READY / CORRID of a request, from the control tensors the
/// config declares, else from the request's own flags and correlation ID.
pub fn read_step(request: &Request, config: &SequenceConfig) -> Result<Step> {
    let flags = request.flags()?;
    let flag = |control: &Option<Control>, bit: u32, default: bool| -> Result<bool> {
        match control {
            Some(c) => read_control(request, c),
            None if bit != 0 => Ok(flags & bit != 0),
            None => Ok(default),
        }
    };
    let ready = flag(&config.ready, 0, true)?;
    let start = flag(
        &config.start,
        sys::TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        false,
    )?;
    let end = flag(
        &config.end,
        sys::TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
        false,
    )?;
    let id = match &config.corrid {
        Some((name, string)) => read_corrid(request, name, *string)?,
        None => None,
    };
    let id = match id {
        Some(id) => id,
        None => match request.correlation_id()? {
            Some(id) => id,
            None if !ready => CorrelationId::Int(0),
            None => {
                return Err(Error::invalid(
                    "a sequence request needs a correlation ID (sequence_id)",
                ))
            }
        },
    };
    Ok(Step {
        ready,
        start,
        end,
        id,
    })
}

/// The first element of a control tensor, compared with its "true" value.
fn read_control(request: &Request, control: &Control) -> Result<bool> {
    let Some(input) = request.input(&control.name)? else {
        return Ok(false);
    };
    let data = input.host_bytes()?;
    let first4 = || -> Result<[u8; 4]> {
        data.get(..4)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Error::invalid(format!("{}: control tensor is empty", control.name)))
    };
    Ok(match control.truth {
        Truth::Int32(t) => i32::from_le_bytes(first4()?) == t,
        Truth::Fp32(t) => f32::from_le_bytes(first4()?) == t,
        Truth::Bool(t) => data.first().map(|b| *b != 0) == Some(t),
    })
}

/// The CORRID control tensor: a UINT64 (or other integer) or a string.
fn read_corrid(request: &Request, name: &str, string: bool) -> Result<Option<CorrelationId>> {
    let Some(input) = request.input(name)? else {
        return Ok(None);
    };
    let data = input.host_bytes()?;
    if string {
        // Triton hands string CORRIDs over in a fixed-size buffer (length
        // prefix, the id, then padding), so only the first element counts.
        let first = first_bytes_element(&data)?;
        return Ok(first
            .filter(|b| !b.is_empty())
            .map(|b| CorrelationId::Str(String::from_utf8_lossy(b).into_owned())));
    }
    let width = match input.datatype {
        sys::TRITONSERVER_TYPE_UINT64 | sys::TRITONSERVER_TYPE_INT64 => 8,
        sys::TRITONSERVER_TYPE_UINT32 | sys::TRITONSERVER_TYPE_INT32 => 4,
        other => {
            return Err(Error::invalid(format!(
                "{name}: unsupported CORRID type code {other}"
            )))
        }
    };
    let bytes = data
        .get(..width)
        .ok_or_else(|| Error::invalid(format!("{name}: control tensor is empty")))?;
    let mut buf = [0u8; 8];
    buf[..width].copy_from_slice(bytes);
    let id = u64::from_le_bytes(buf);
    Ok((id != 0).then_some(CorrelationId::Int(id)))
}
