//! Decoding the tensors of a request: raw pixels (IMAGE), encoded files
//! (ENCODED), embeddings (EMBEDDING, REFERENCE) and TYPE_STRING elements,
//! each checked against its declared type and shape.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use crate::backend::settings::Settings;
use crate::error::{Error, Result};
use crate::pipeline::image::{frame_from_encoded, frame_from_pixels};
use crate::pipeline::Frame;
use crate::triton::request::decode_bytes_tensor;
use crate::triton::{sys, Input};

pub const IMAGE: &str = "IMAGE";
pub const ENCODED: &str = "ENCODED";
pub const EMBEDDING: &str = "EMBEDDING";
pub const REFERENCE: &str = "REFERENCE";

/// A frame and the time its decoding took.
pub type Decoded<'a> = (Frame<'a>, Duration);

fn timed<'a>(decode: impl FnOnce() -> Result<Frame<'a>>) -> Result<Decoded<'a>> {
    let started = Instant::now();
    decode().map(|frame| (frame, started.elapsed()))
}

fn dims_text(shape: &[i64]) -> String {
    format!("{shape:?}")
}

pub fn read_pixels<'r>(input: &Input<'r>, settings: &Settings) -> Result<Vec<Decoded<'r>>> {
    if input.datatype != sys::TRITONSERVER_TYPE_UINT8 {
        return Err(Error::invalid(format!(
            "{IMAGE}: expected data type UINT8, got type code {}",
            input.datatype
        )));
    }
    let shape = &input.shape;
    let (batch, hwc) = match (settings.batched, shape.len()) {
        (true, 4) => (shape[0], &shape[1..]),
        (false, 3) => (1, &shape[..]),
        _ => {
            return Err(Error::invalid(format!(
                "{IMAGE}: expected shape {}height x width x 3, got {}",
                if settings.batched { "batch x " } else { "" },
                dims_text(shape)
            )))
        }
    };
    if hwc[2] != 3 {
        return Err(Error::invalid(format!(
            "{IMAGE}: expected 3 channels ({:?}), got {} in shape {}",
            settings.pixel_format,
            hwc[2],
            dims_text(shape)
        )));
    }
    if batch <= 0 || hwc[0] < 0 || hwc[1] < 0 {
        return Err(Error::invalid(format!(
            "{IMAGE}: empty image, shape {}",
            dims_text(shape)
        )));
    }
    let (h, w) = (hwc[0] as u64, hwc[1] as u64);
    let data = input.host_bytes()?;
    let per_image = (h * w * 3) as usize;
    if per_image == 0 {
        return Err(Error::invalid(format!("{IMAGE}: empty image ({w}x{h})")));
    }
    if data.len() != per_image * batch as usize {
        return Err(Error::invalid(format!(
            "{IMAGE}: {} bytes do not match shape {}",
            data.len(),
            dims_text(shape)
        )));
    }
    let (format, most) = (settings.pixel_format, settings.max_image_pixels);
    let frame = |pixels| frame_from_pixels(IMAGE, pixels, h, w, format, most);
    // The server's one buffer is read where it lies (the request outlives
    // its frames); pieces gathered into a copy are one image's own, or each
    // image of a batch gets a copy of its part (timed as its decoding).
    match data {
        Cow::Borrowed(all) => (all.chunks_exact(per_image))
            .map(|pixels| timed(|| frame(Cow::Borrowed(pixels))))
            .collect(),
        Cow::Owned(all) if batch == 1 => timed(|| frame(Cow::Owned(all))).map(|f| vec![f]),
        Cow::Owned(all) => (all.chunks_exact(per_image))
            .map(|pixels| timed(|| frame(Cow::Owned(pixels.to_vec()))))
            .collect(),
    }
}

/// ENCODED's files, each as sent: decode.rs decodes them (`decode_encoded`).
pub fn read_encoded(input: &Input) -> Result<Vec<Vec<u8>>> {
    let images = read_strings(input)?;
    if images.is_empty() {
        return Err(Error::invalid(format!(
            "{ENCODED}: no image bytes in the request"
        )));
    }
    Ok(images)
}

/// One ENCODED file decoded (JPEG, PNG, WebP or BMP), timed.
pub fn decode_encoded(bytes: &[u8], max_pixels: u64) -> Result<Decoded<'static>> {
    timed(|| frame_from_encoded(ENCODED, bytes, max_pixels))
}

/// The embeddings of a TYPE_FP32 input (EMBEDDING, REFERENCE): `dim` finite
/// values each, not all zero; one unbatched, `batch x dim` batched.
pub fn read_vectors(input: &Input, settings: &Settings, dim: usize) -> Result<Vec<Vec<f32>>> {
    let name = &input.name;
    if input.datatype != sys::TRITONSERVER_TYPE_FP32 {
        return Err(Error::invalid(format!(
            "{name}: expected data type FP32, got type code {}",
            input.datatype
        )));
    }
    let shape = &input.shape;
    let rows = match (settings.batched, &shape[..]) {
        (true, &[rows, len]) if len == dim as i64 && rows > 0 => rows as usize,
        (false, &[len]) if len == dim as i64 => 1,
        _ => {
            return Err(Error::invalid(format!(
                "{name}: expected shape {}{dim} (this model's embeddings have {dim} values), \
                 got {}",
                if settings.batched { "batch x " } else { "" },
                dims_text(shape)
            )))
        }
    };
    let data = input.host_bytes()?;
    if data.len() != rows * dim * 4 {
        return Err(Error::invalid(format!(
            "{name}: {} bytes do not match shape {}",
            data.len(),
            dims_text(shape)
        )));
    }
    let values: Vec<f32> = data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if let Some((i, x)) = values.iter().enumerate().find(|(_, x)| !x.is_finite()) {
        return Err(Error::invalid(format!(
            "{name}: value {} of embedding {} is {x}: expected {dim} finite numbers",
            i % dim,
            i / dim
        )));
    }
    let rows: Vec<Vec<f32>> = values.chunks_exact(dim).map(<[f32]>::to_vec).collect();
    if let Some(i) = rows.iter().position(|r| r.iter().all(|&x| x == 0.0)) {
        return Err(Error::invalid(format!(
            "{name}: embedding {i} is all zeros"
        )));
    }
    Ok(rows)
}

/// The elements of a TYPE_STRING input, checked against its shape.
pub fn read_strings<'r>(input: &Input<'r>) -> Result<Vec<Vec<u8>>> {
    if input.datatype != sys::TRITONSERVER_TYPE_BYTES {
        return Err(Error::invalid(format!(
            "{}: expected data type BYTES (TYPE_STRING), got type code {}",
            input.name, input.datatype
        )));
    }
    let data = input.host_bytes()?;
    let elements = decode_bytes_tensor(&data).map_err(|e| e.context(&input.name))?;
    let expected: i64 = input.shape.iter().product();
    if expected < 0 || elements.len() as i64 != expected {
        return Err(Error::invalid(format!(
            "{}: shape {} holds {} elements, the data has {}",
            input.name,
            dims_text(&input.shape),
            expected,
            elements.len()
        )));
    }
    Ok(elements.into_iter().map(<[u8]>::to_vec).collect())
}
