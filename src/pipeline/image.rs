//! From what a client sends to a `Frame`: encoded bytes decoded (JPEG by
//! libjpeg-turbo, jpeg.rs; WebP by libwebp, webp.rs; PNG, BMP and what those
//! two refuse by the `image` crate: no codec library travels with the backend
//! but libjpeg-turbo), or raw pixels checked and converted to RGB. Limits are
//! enforced before any large allocation: an encoded image's size is read from
//! its header first.

use std::borrow::Cow;
use std::io::Cursor;

use image::{DynamicImage, ImageDecoder, ImageEncoder, ImageFormat, ImageReader, Limits};

use super::{Frame, OwnedFrame};
use crate::error::{Error, Result};

/// The formats ENCODED accepts; the `image` crate is built with these alone.
const FORMATS: [ImageFormat; 4] = [
    ImageFormat::Jpeg,
    ImageFormat::Png,
    ImageFormat::WebP,
    ImageFormat::Bmp,
];

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

/// Raw HWC pixels (3 channels) into an RGB frame: RGB kept as it came
/// (borrowed or owned), BGR with its channels swapped.
pub fn frame_from_pixels<'a>(
    what: &str,
    data: Cow<'a, [u8]>,
    height: u64,
    width: u64,
    format: PixelFormat,
    max_pixels: u64,
) -> Result<Frame<'a>> {
    check_pixels(what, width, height, max_pixels)?;
    let expected = width * height * 3;
    if data.len() as u64 != expected {
        return Err(Error::invalid(format!(
            "{what}: expected {expected} bytes for {height}x{width}x3, got {}",
            data.len()
        )));
    }
    // BGR is swapped in a copy of borrowed pixels, in place in owned ones.
    let rgb = match format {
        PixelFormat::Rgb => data,
        PixelFormat::Bgr => {
            let mut rgb = data.into_owned();
            rgb.chunks_exact_mut(3).for_each(|px| px.swap(0, 2));
            Cow::Owned(rgb)
        }
    };
    Ok(Frame {
        width: width as u32,
        height: height as u32,
        rgb,
    })
}

/// JPEG / PNG / WebP / BMP bytes into an RGB frame (alpha dropped, grey
/// expanded, a JPEG's EXIF orientation applied).
pub fn frame_from_encoded(what: &str, bytes: &[u8], max_pixels: u64) -> Result<OwnedFrame> {
    if bytes.is_empty() {
        return Err(Error::invalid(format!("{what}: empty encoded image")));
    }
    // Refuse oversized images before decoding allocates them.
    if let Ok(size) = imagesize::blob_size(bytes) {
        check_pixels(what, size.width as u64, size.height as u64, max_pixels)?;
    }
    let check = |w, h| check_pixels(what, w, h, max_pixels);
    if let Some(frame) = super::jpeg::decode_rgb(bytes, check) {
        return frame;
    }
    if let Some(frame) = super::webp::decode_rgb(bytes, check) {
        return frame;
    }
    crate_decode(what, bytes, max_pixels)
}

/// What the `image` crate makes of `bytes` (EXIF orientation applied), as RGB.
pub(super) fn crate_decode(what: &str, bytes: &[u8], max_pixels: u64) -> Result<OwnedFrame> {
    let not_an_image = || {
        Error::invalid(format!(
            "{what}: not a decodable image ({} bytes; expected JPEG, PNG, WebP or BMP)",
            bytes.len()
        ))
    };
    let format = image::guess_format(bytes).map_err(|_| not_an_image())?;
    if !FORMATS.contains(&format) {
        return Err(not_an_image());
    }
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = Limits::default();
    // A 16-bit RGBA image is 8 bytes a pixel; the headroom is the decoder's own.
    limits.max_alloc = Some(max_pixels.saturating_mul(8).saturating_add(64 << 20));
    reader.limits(limits);
    let cannot = |e: image::ImageError| Error::invalid(format!("{what}: cannot decode image: {e}"));
    let mut decoder = reader.into_decoder().map_err(cannot)?;
    let (width, height) = decoder.dimensions();
    check_pixels(what, width as u64, height as u64, max_pixels)?;
    let orientation = decoder.orientation().map_err(cannot)?;
    let mut image = DynamicImage::from_decoder(decoder).map_err(cannot)?;
    image.apply_orientation(orientation);
    let rgb = image.into_rgb8();
    Ok(Frame {
        width: rgb.width(),
        height: rgb.height(),
        rgb: rgb.into_raw().into(),
    })
}

/// Encode an RGB frame as JPEG, quality 95 (tests, benches, tools).
pub fn encode_jpeg(frame: &Frame) -> Result<Vec<u8>> {
    super::jpeg::encode_rgb(frame, 95)
}

/// Encode an RGB frame as PNG (lossless: the crops of `return_crops`).
pub fn encode_png(frame: &Frame) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(
            &frame.rgb,
            frame.width,
            frame.height,
            image::ExtendedColorType::Rgb8,
        )
        .map_err(|e| Error::internal(format!("PNG encoding failed: {e}")))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(w: u32, h: u32) -> OwnedFrame {
        let mut rgb = Vec::with_capacity((w * h * 3) as usize);
        for y in 0..h {
            for x in 0..w {
                rgb.extend_from_slice(&[(x * 255 / w) as u8, (y * 255 / h) as u8, 128]);
            }
        }
        Frame {
            width: w,
            height: h,
            rgb: rgb.into(),
        }
    }

    #[test]
    fn pixels_checked_and_swapped() {
        let pixels = |p: &'static [u8]| Cow::Borrowed(p);
        let f = frame_from_pixels(
            "IMAGE",
            pixels(&[1, 2, 3, 4, 5, 6]),
            1,
            2,
            PixelFormat::Bgr,
            10,
        )
        .unwrap();
        assert_eq!(f.rgb, vec![3, 2, 1, 6, 5, 4]);
        let short = frame_from_pixels("IMAGE", pixels(&[1, 2, 3]), 1, 2, PixelFormat::Rgb, 10);
        assert!(short.is_err());
        let e = frame_from_pixels("IMAGE", pixels(&[]), 0, 0, PixelFormat::Rgb, 10).unwrap_err();
        assert!(e.message().contains("empty"));
        let e =
            frame_from_pixels("IMAGE", pixels(&[0; 12]), 2, 2, PixelFormat::Rgb, 3).unwrap_err();
        assert!(e.message().contains("max_image_pixels"));
    }

    #[test]
    fn rgb_pixels_are_read_where_they_lie() {
        let sent = [1u8, 2, 3, 4, 5, 6];
        let rgb = PixelFormat::Rgb;
        let f = frame_from_pixels("IMAGE", Cow::Borrowed(&sent[..]), 1, 2, rgb, 10).unwrap();
        assert!(matches!(&f.rgb, Cow::Borrowed(p) if p.as_ptr() == sent.as_ptr()));
        let owned = f.into_owned();
        assert!(matches!(&owned.rgb, Cow::Owned(p) if p[..] == sent));
        let bgr = PixelFormat::Bgr;
        let f = frame_from_pixels("IMAGE", Cow::Borrowed(&sent[..]), 1, 2, bgr, 10).unwrap();
        assert!(matches!(f.rgb, Cow::Owned(_)));
        // Owned pixels (a gathered copy) become the frame's own, BGR swapped
        // where they lie: no second copy.
        let gathered = sent.to_vec();
        let at = gathered.as_ptr();
        let f = frame_from_pixels("IMAGE", Cow::Owned(gathered), 1, 2, bgr, 10).unwrap();
        assert!(matches!(&f.rgb, Cow::Owned(p) if p.as_ptr() == at && p[..] == [3, 2, 1, 6, 5, 4]));
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
            .zip(f.rgb.iter())
            .map(|(a, b)| (*a as i64 - *b as i64).unsigned_abs())
            .sum();
        assert!(diff / (back.rgb.len() as u64) < 8);
        let e = frame_from_encoded("ENCODED", &jpeg, 1000).unwrap_err();
        assert!(e.message().contains("max_image_pixels"), "{e}");
    }

    /// `frame` in `format`, by the `image` crate's encoders (lossless ones).
    fn encoded(frame: &Frame, format: ImageFormat) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        image::RgbImage::from_raw(frame.width, frame.height, frame.rgb.to_vec())
            .unwrap()
            .write_to(&mut out, format)
            .unwrap();
        out.into_inner()
    }

    #[test]
    fn png_bmp_and_lossless_webp_decode_to_their_pixels() {
        let f = gradient(64, 48);
        for format in [ImageFormat::Png, ImageFormat::Bmp, ImageFormat::WebP] {
            let back = frame_from_encoded("ENCODED", &encoded(&f, format), 1 << 20).unwrap();
            assert_eq!((back.width, back.height), (64, 48), "{format:?}");
            assert!(back.rgb == f.rgb, "{format:?}: pixels changed");
        }
        let png = encode_png(&f).unwrap();
        assert!(frame_from_encoded("ENCODED", &png, 1 << 20).unwrap().rgb == f.rgb);
    }

    #[test]
    fn alpha_is_dropped_not_blended() {
        let rgba = image::RgbaImage::from_fn(4, 2, |x, _| image::Rgba([x as u8 * 60, 7, 9, 0]));
        let mut png = Cursor::new(Vec::new());
        rgba.write_to(&mut png, ImageFormat::Png).unwrap();
        let frame = frame_from_encoded("ENCODED", png.get_ref(), 1 << 20).unwrap();
        assert_eq!(&frame.rgb[..6], &[0, 7, 9, 60, 7, 9]);
    }

    #[test]
    fn other_formats_are_refused_by_name() {
        // A GIF's header: a real format, not one ENCODED takes.
        let gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;";
        let e = frame_from_encoded("ENCODED", gif, 1 << 20).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput, "{e}");
        assert!(
            e.message().contains("expected JPEG, PNG, WebP or BMP"),
            "{e}"
        );
    }

    #[test]
    fn garbage_is_invalid_input() {
        for bad in [&b"not an image"[..], &[0xff, 0xd8, 0xff][..], &[][..]] {
            let e = frame_from_encoded("ENCODED", bad, 1 << 20).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput, "{e}");
        }
    }
}
