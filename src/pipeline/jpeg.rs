//! JPEG straight to RGB with libjpeg-turbo's TurboJPEG API. It is the library
//! OpenCV's imdecode uses, with the same decoding (accurate integer IDCT,
//! smooth chroma upsampling), so the pixels are the same; but Debian's OpenCV
//! 4.6 takes about twice as long for the same photo and returns BGR, which
//! costs another pass. A JPEG that OpenCV would treat differently (an EXIF
//! orientation to apply, a colour space TurboJPEG does not turn into RGB, a
//! warning about damaged data) is left to OpenCV, so answers stay as before.

use std::io::Cursor;

use turbojpeg::{Decompressor, Image, PixelFormat};

use super::Frame;
use crate::error::Result;

/// The RGB frame of `bytes`, or None for OpenCV to decode (or to reject).
/// `check` sees the header's size before the pixels are allocated.
pub(super) fn decode_rgb(
    bytes: &[u8],
    check: impl FnOnce(u64, u64) -> Result<()>,
) -> Option<Result<Frame>> {
    if !bytes.starts_with(&[0xFF, 0xD8]) || needs_rotation(bytes) {
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
    // Any error, warnings included, means OpenCV decides what the bytes are.
    decompressor.decompress(bytes, image).ok()?;
    Some(Ok(Frame {
        width: u32::try_from(width).ok()?,
        height: u32::try_from(height).ok()?,
        rgb,
    }))
}

/// True when the photo's EXIF asks for a rotation or flip (orientation other
/// than 1), which OpenCV's imdecode applies.
fn needs_rotation(bytes: &[u8]) -> bool {
    let Ok(exif) = exif::Reader::new().read_from_container(&mut Cursor::new(bytes)) else {
        return false;
    };
    exif.get_field(exif::Tag::Orientation, exif::In::PRIMARY)
        .and_then(|field| field.value.get_uint(0))
        .is_some_and(|orientation| orientation != 1)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::pipeline::image::{encode_jpeg, frame_from_encoded, opencv_decode};

    fn any_size(_: u64, _: u64) -> Result<()> {
        Ok(())
    }

    #[test]
    fn the_test_photos_decode_to_the_pixels_opencv_gives() {
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
                .unwrap_or_else(|| panic!("{} left to OpenCV", path.display()))
                .unwrap();
            let opencv = opencv_decode("photo", &bytes, u64::MAX).unwrap();
            assert_eq!(
                (frame.width, frame.height),
                (opencv.width, opencv.height),
                "{}",
                path.display()
            );
            assert!(
                frame.rgb == opencv.rgb,
                "{}: pixels differ from OpenCV's",
                path.display()
            );
        }
    }

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
    fn a_rotated_photo_is_left_to_opencv_which_rotates_it() {
        let upright = jpeg_with_orientation(64, 48, 1);
        let frame = decode_rgb(&upright, any_size).expect("orientation 1: decoded here");
        let frame = frame.unwrap();
        assert_eq!((frame.width, frame.height), (64, 48));

        let turned = jpeg_with_orientation(64, 48, 6); // 90 degrees clockwise
        assert!(decode_rgb(&turned, any_size).is_none());
        let frame = frame_from_encoded("ENCODED", &turned, 1 << 20).unwrap();
        assert_eq!((frame.width, frame.height), (48, 64));
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
