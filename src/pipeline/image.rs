//! From what a client sends to a `Frame`: encoded bytes decoded (JPEG by
//! libjpeg-turbo directly, see jpeg.rs; the rest by OpenCV), or raw pixels
//! checked and converted to RGB. Limits are enforced before any
//! large allocation: an encoded image's size is read from its header first.

use opencv::core::{Mat, Vector};
use opencv::prelude::*;
use opencv::{imgcodecs, imgproc};

use super::Frame;
use crate::error::{Error, Result};

/// Channel order of raw pixels sent in IMAGE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelFormat {
    Rgb,
    Bgr,
}

impl PixelFormat {
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_uppercase().as_str() {
            "RGB" => Some(PixelFormat::Rgb),
            "BGR" => Some(PixelFormat::Bgr),
            _ => None,
        }
    }
}

fn check_pixels(what: &str, width: u64, height: u64, max_pixels: u64) -> Result<()> {
    if width == 0 || height == 0 {
        return Err(Error::invalid(format!(
            "{what}: empty image ({width}x{height})"
        )));
    }
    let pixels = width.saturating_mul(height);
    if pixels > max_pixels {
        return Err(Error::invalid(format!(
            "{what}: image of {width}x{height} = {pixels} pixels exceeds max_image_pixels = {max_pixels}"
        )));
    }
    Ok(())
}

/// Raw HWC pixels (3 channels) into an RGB frame.
pub fn frame_from_pixels(
    what: &str,
    data: &[u8],
    height: u64,
    width: u64,
    format: PixelFormat,
    max_pixels: u64,
) -> Result<Frame> {
    check_pixels(what, width, height, max_pixels)?;
    let expected = width * height * 3;
    if data.len() as u64 != expected {
        return Err(Error::invalid(format!(
            "{what}: expected {expected} bytes for {height}x{width}x3, got {}",
            data.len()
        )));
    }
    let mut rgb = data.to_vec();
    if format == PixelFormat::Bgr {
        rgb.chunks_exact_mut(3).for_each(|px| px.swap(0, 2));
    }
    Ok(Frame {
        width: width as u32,
        height: height as u32,
        rgb,
    })
}

/// JPEG / PNG / WebP / BMP bytes into an RGB frame (alpha dropped, grey expanded).
pub fn frame_from_encoded(what: &str, bytes: &[u8], max_pixels: u64) -> Result<Frame> {
    if bytes.is_empty() {
        return Err(Error::invalid(format!("{what}: empty encoded image")));
    }
    // Refuse oversized images before decoding allocates them.
    if let Ok(size) = imagesize::blob_size(bytes) {
        check_pixels(what, size.width as u64, size.height as u64, max_pixels)?;
    }
    if let Some(frame) = super::jpeg::decode_rgb(bytes, |w, h| check_pixels(what, w, h, max_pixels))
    {
        return frame;
    }
    opencv_decode(what, bytes, max_pixels)
}

/// What OpenCV's imdecode makes of `bytes` (EXIF orientation applied), as RGB.
pub(super) fn opencv_decode(what: &str, bytes: &[u8], max_pixels: u64) -> Result<Frame> {
    let buf = Vector::<u8>::from_slice(bytes);
    let bgr = imgcodecs::imdecode(&buf, imgcodecs::IMREAD_COLOR)
        .map_err(|e| Error::invalid(format!("{what}: cannot decode image: {}", e.message)))?;
    if bgr.empty() {
        return Err(Error::invalid(format!(
            "{what}: not a decodable image ({} bytes; expected JPEG, PNG, WebP or BMP)",
            bytes.len()
        )));
    }
    let (width, height) = (bgr.cols() as u64, bgr.rows() as u64);
    check_pixels(what, width, height, max_pixels)?;
    let mut rgb = Mat::default();
    imgproc::cvt_color(&bgr, &mut rgb, imgproc::COLOR_BGR2RGB, 0)?;
    let data = rgb.data_bytes()?.to_vec();
    if data.len() as u64 != width * height * 3 {
        return Err(Error::internal(format!(
            "{what}: decoder returned an unexpected layout"
        )));
    }
    Ok(Frame {
        width: width as u32,
        height: height as u32,
        rgb: data,
    })
}

/// Encode an RGB frame as JPEG (tests, benches, tools).
pub fn encode_jpeg(frame: &Frame) -> Result<Vec<u8>> {
    encode(frame, ".jpg")
}

/// Encode an RGB frame as PNG (lossless: the crops of `return_crops`).
pub fn encode_png(frame: &Frame) -> Result<Vec<u8>> {
    encode(frame, ".png")
}

fn encode(frame: &Frame, extension: &str) -> Result<Vec<u8>> {
    let rgb =
        Mat::new_rows_cols_with_data(frame.height as i32, frame.width as i32 * 3, &frame.rgb)?;
    let rgb = rgb.reshape(3, frame.height as i32)?;
    let mut bgr = Mat::default();
    imgproc::cvt_color(&rgb, &mut bgr, imgproc::COLOR_RGB2BGR, 0)?;
    let mut out = Vector::<u8>::new();
    imgcodecs::imencode(extension, &bgr, &mut out, &Vector::new())?;
    Ok(out.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(w: u32, h: u32) -> Frame {
        let mut rgb = Vec::with_capacity((w * h * 3) as usize);
        for y in 0..h {
            for x in 0..w {
                rgb.extend_from_slice(&[(x * 255 / w) as u8, (y * 255 / h) as u8, 128]);
            }
        }
        Frame {
            width: w,
            height: h,
            rgb,
        }
    }

    #[test]
    fn pixels_checked_and_swapped() {
        let f =
            frame_from_pixels("IMAGE", &[1, 2, 3, 4, 5, 6], 1, 2, PixelFormat::Bgr, 10).unwrap();
        assert_eq!(f.rgb, vec![3, 2, 1, 6, 5, 4]);
        assert!(frame_from_pixels("IMAGE", &[1, 2, 3], 1, 2, PixelFormat::Rgb, 10).is_err());
        let e = frame_from_pixels("IMAGE", &[], 0, 0, PixelFormat::Rgb, 10).unwrap_err();
        assert!(e.message().contains("empty"));
        let e = frame_from_pixels("IMAGE", &[0; 12], 2, 2, PixelFormat::Rgb, 3).unwrap_err();
        assert!(e.message().contains("max_image_pixels"));
    }

    #[test]
    fn jpeg_round_trip_and_limits() {
        let f = gradient(64, 48);
        let jpeg = encode_jpeg(&f).unwrap();
        let back = frame_from_encoded("ENCODED", &jpeg, 1 << 20).unwrap();
        assert_eq!((back.width, back.height), (64, 48));
        // JPEG is lossy; the gradient survives roughly.
        let diff: u64 = back
            .rgb
            .iter()
            .zip(&f.rgb)
            .map(|(a, b)| (*a as i64 - *b as i64).unsigned_abs())
            .sum();
        assert!(diff / (back.rgb.len() as u64) < 8);
        let e = frame_from_encoded("ENCODED", &jpeg, 1000).unwrap_err();
        assert!(e.message().contains("max_image_pixels"), "{e}");
    }

    #[test]
    fn garbage_is_invalid_input() {
        for bad in [&b"not an image"[..], &[0xff, 0xd8, 0xff][..], &[][..]] {
            let e = frame_from_encoded("ENCODED", bad, 1 << 20).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput, "{e}");
        }
    }
}
