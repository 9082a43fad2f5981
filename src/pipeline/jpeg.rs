//! JPEG straight to RGB with libjpeg-turbo's TurboJPEG API (accurate integer
//! IDCT, smooth chroma upsampling: the pixels OpenCV's and Pillow's decoders
//! give), then the photo's EXIF orientation applied. A JPEG TurboJPEG does not
//! turn into RGB cleanly (CMYK, a warning about damaged data) is left to the
//! `image` crate's decoder (image.rs), which reads what can be read.

use std::io::Cursor;

use image::metadata::Orientation;
use image::{DynamicImage, RgbImage};
use turbojpeg::{Decompressor, Image, PixelFormat, Subsamp};

use super::{Frame, OwnedFrame};
use crate::error::{Error, Result};

/// The RGB frame of `bytes`, or None for the `image` crate to decode (or to
/// reject). `check` sees the header's size before the pixels are allocated.
pub(super) fn decode_rgb(
    bytes: &[u8],
    check: impl FnOnce(u64, u64) -> Result<()>,
) -> Option<Result<OwnedFrame>> {
    if !bytes.starts_with(&[0xFF, 0xD8]) {
        return None;
    }
    let mut decompressor = Decompressor::new().ok()?;
    let header = decompressor.read_header(bytes).ok()?;
    let (width, height) = (header.width, header.height);
    if let Err(refused) = check(width as u64, height as u64) {
        return Some(Err(refused));
    }
    let pitch = width.checked_mul(3)?;
    let mut rgb = vec![0u8; pitch.checked_mul(height)?];
    let image = Image {
        pixels: rgb.as_mut_slice(),
        width,
        pitch,
        height,
        format: PixelFormat::RGB,
    };
    // Any error, warnings included, leaves the bytes to the other decoder.
    decompressor.decompress(bytes, image).ok()?;
    let frame = Frame {
        width: u32::try_from(width).ok()?,
        height: u32::try_from(height).ok()?,
        rgb: rgb.into(),
    };
    Some(Ok(match orientation(bytes) {
        Some(turn) if turn != Orientation::NoTransforms => oriented(frame, turn)?,
        _ => frame,
    }))
}

/// The rotation or flip the photo's EXIF asks for, if it has one.
fn orientation(bytes: &[u8]) -> Option<Orientation> {
    let exif = exif::Reader::new()
        .read_from_container(&mut Cursor::new(bytes))
        .ok()?;
    let value = exif
        .get_field(exif::Tag::Orientation, exif::In::PRIMARY)?
        .value
        .get_uint(0)?;
    Orientation::from_exif(u8::try_from(value).ok()?)
}

/// `frame` turned upright as `turn` says (what a viewer shows).
fn oriented(frame: Frame, turn: Orientation) -> Option<OwnedFrame> {
    let mut image = DynamicImage::ImageRgb8(RgbImage::from_raw(
        frame.width,
        frame.height,
        frame.rgb.into_owned(),
    )?);
    image.apply_orientation(turn);
    let rgb = image.into_rgb8();
    Some(Frame {
        width: rgb.width(),
        height: rgb.height(),
        rgb: rgb.into_raw().into(),
    })
}

/// An RGB frame as a JPEG of `quality` (4:2:0, libjpeg's default).
pub(super) fn encode_rgb(frame: &Frame, quality: i32) -> Result<Vec<u8>> {
    let fail = |e: turbojpeg::Error| Error::internal(format!("JPEG encoding failed: {e}"));
    let width = frame.width as usize;
    let image = Image {
        pixels: &frame.rgb[..],
        width,
        pitch: width * 3,
        height: frame.height as usize,
        format: PixelFormat::RGB,
    };
    Ok(turbojpeg::compress(image, quality, Subsamp::Sub2x2)
        .map_err(fail)?
        .to_vec())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::pipeline::image::{crate_decode, encode_jpeg};

    fn any_size(_: u64, _: u64) -> Result<()> {
        Ok(())
    }

    /// The fallback decoder gives (nearly) the pixels libjpeg-turbo gives, so
    /// a JPEG that goes the other way is answered alike.
    #[test]
    fn the_test_photos_decode_alike_on_both_decoders() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/photos");
        let photos: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}: run scripts/setup.sh first", dir.display()))
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "jpg"))
            .collect();
        assert!(
            photos.len() >= 5,
            "JPEG photos in {}: {photos:?}",
            dir.display()
        );
        for path in photos {
            let bytes = std::fs::read(&path).unwrap();
            let frame = decode_rgb(&bytes, any_size)
                .unwrap_or_else(|| panic!("{} refused by libjpeg-turbo", path.display()))
                .unwrap();
            let other = crate_decode("photo", &bytes, u64::MAX).unwrap();
            assert_eq!(
                (frame.width, frame.height),
                (other.width, other.height),
                "{}",
                path.display()
            );
            let diffs = frame
                .rgb
                .iter()
                .zip(other.rgb.iter())
                .map(|(a, b)| a.abs_diff(*b));
            let (sum, max) = diffs.fold((0u64, 0u8), |(s, m), d| (s + u64::from(d), m.max(d)));
            let mean = sum as f64 / frame.rgb.len() as f64;
            assert!(
                mean < MEAN_DIFF && max <= MAX_DIFF,
                "{}: the decoders differ by {mean:.3} on average, {max} at most",
                path.display()
            );
        }
    }

    /// How far the two decoders' pixels may be apart (0..255). Measured on
    /// the test photos: 0.27 on average and 5 at most.
    const MEAN_DIFF: f64 = 0.5;
    const MAX_DIFF: u8 = 8;

    /// A JPEG of `w`x`h` carrying EXIF orientation `orientation`.
    fn jpeg_with_orientation(w: u32, h: u32, orientation: u8) -> Vec<u8> {
        let rgb = (0..w * h * 3).map(|i| (i % 251) as u8).collect();
        let jpeg = encode_jpeg(&Frame {
            width: w,
            height: h,
            rgb,
        })
        .unwrap();
        // APP1: "Exif\0\0", a big-endian TIFF header, one IFD entry (0x0112, SHORT, 1 value).
        let mut tiff = b"Exif\0\0MM\0\x2a\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0".to_vec();
        tiff.extend([orientation, 0, 0, 0, 0, 0, 0]);
        let len = (tiff.len() + 2) as u16;
        let mut out = vec![0xFF, 0xD8, 0xFF, 0xE1];
        out.extend(len.to_be_bytes());
        out.extend(tiff);
        out.extend(&jpeg[2..]);
        out
    }

    #[test]
    fn a_rotated_photo_is_turned_upright() {
        let (w, h) = (64, 48);
        let upright = decode_rgb(&jpeg_with_orientation(w, h, 1), any_size)
            .expect("a JPEG")
            .unwrap();
        assert_eq!((upright.width, upright.height), (w, h));
        let turned = jpeg_with_orientation(w, h, 6); // 90 degrees clockwise
        let frame = decode_rgb(&turned, any_size).expect("a JPEG").unwrap();
        assert_eq!((frame.width, frame.height), (h, w));
        // Clockwise: the upright picture's bottom-left corner is now top-left.
        let at = |f: &Frame, x: u32, y: u32| {
            let i = 3 * (y * f.width + x) as usize;
            f.rgb[i..i + 3].to_vec()
        };
        for (x, y) in [(0, 0), (h - 1, 0), (0, w - 1), (17, 33)] {
            assert_eq!(at(&frame, x, y), at(&upright, y, h - 1 - x), "({x}, {y})");
        }
        // The other decoder turns it the same way.
        let other = crate_decode("ENCODED", &turned, 1 << 20).unwrap();
        assert_eq!((other.width, other.height), (h, w));
    }

    #[test]
    fn the_size_is_checked_before_the_pixels_exist() {
        let jpeg = jpeg_with_orientation(64, 48, 1);
        let refused = decode_rgb(&jpeg, |w, h| {
            assert_eq!((w, h), (64, 48));
            Err(crate::error::Error::invalid("too big"))
        });
        assert!(refused.expect("a JPEG").is_err());
    }
}
