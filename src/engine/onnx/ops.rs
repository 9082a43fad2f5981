//! The image and vector work around the models: resize (fast_image_resize,
//! bilinear without antialiasing: OpenCV's INTER_LINEAR, which the sample
//! models' users preprocess with), grey, pixels to an NCHW tensor, L2
//! normalization, non-maximum suppression.

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

use super::settings::Normalize;
use crate::error::{Error, Result};
use crate::pipeline::{BoxPx, Frame};

/// A whole-pixel box of a frame: left, top, width, height.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rect {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// The frame resized to `w`x`h`.
pub(super) fn resize(frame: &Frame, w: usize, h: usize) -> Result<Frame> {
    if frame.rgb.len() != 3 * frame.width as usize * frame.height as usize {
        return Err(Error::internal(format!(
            "a {}x{} RGB frame of {} bytes",
            frame.width,
            frame.height,
            frame.rgb.len()
        )));
    }
    if (2 * w, 2 * h) == (frame.width as usize, frame.height as usize) {
        return Ok(halve(frame));
    }
    let whole = Rect {
        x: 0,
        y: 0,
        width: frame.width,
        height: frame.height,
    };
    let rgb = resample(
        (frame.width, frame.height, &frame.rgb),
        PixelType::U8x3,
        whole,
        (w, h),
    )?;
    Ok(Frame {
        width: w as u32,
        height: h as u32,
        rgb,
    })
}

/// The frame at half its size, each pixel the rounded mean of a 2x2 block:
/// what OpenCV's INTER_LINEAR does for an exact half (it switches to its
/// INTER_AREA path), so a 640x480 camera frame gives the sample detector the
/// very pixels OpenCV gives; and in half the time fast_image_resize takes
/// (0.11 against 0.21-0.25 ms, docs/benchmarks.md "Decoding and the image
/// work").
fn halve(frame: &Frame) -> Frame {
    let (w, h) = (frame.width as usize / 2, frame.height as usize / 2);
    let row = 3 * frame.width as usize;
    let mut rgb = vec![0u8; 3 * w * h];
    // Each pair of rows summed first (one pass the compiler vectorises),
    // with the rounding's +2 split over the two columns' sums.
    let mut sums = vec![0u16; row];
    for (y, out) in rgb.chunks_exact_mut(3 * w).enumerate() {
        let (top, bottom) = (
            &frame.rgb[2 * y * row..][..row],
            &frame.rgb[(2 * y + 1) * row..][..row],
        );
        for ((sum, &a), &b) in sums.iter_mut().zip(top).zip(bottom) {
            *sum = u16::from(a) + u16::from(b) + 1;
        }
        for (px, pair) in out.chunks_exact_mut(3).zip(sums.chunks_exact(6)) {
            for c in 0..3 {
                px[c] = ((pair[c] + pair[c + 3]) >> 2) as u8;
            }
        }
    }
    Frame {
        width: w as u32,
        height: h as u32,
        rgb,
    }
}

/// The box `rect` of the frame in grey (BT.601, as OpenCV's RGB2GRAY),
/// resized to `w`x`h`. Grey is per pixel, so only the box is greyed.
pub(super) fn grey_box(frame: &Frame, rect: Rect, (w, h): (usize, usize)) -> Result<Vec<u8>> {
    let row = 3 * frame.width as usize;
    let mut grey = Vec::with_capacity((rect.width * rect.height) as usize);
    for y in rect.y..rect.y + rect.height {
        let start = y as usize * row + 3 * rect.x as usize;
        let pixels = &frame.rgb[start..start + 3 * rect.width as usize];
        grey.extend(pixels.chunks_exact(3).map(grey_of));
    }
    let whole = Rect { x: 0, y: 0, ..rect };
    resample(
        (rect.width, rect.height, &grey),
        PixelType::U8,
        whole,
        (w, h),
    )
}

/// OpenCV's fixed-point BT.601 luma (14 fractional bits, rounded).
fn grey_of(px: &[u8]) -> u8 {
    let [r, g, b] = [px[0], px[1], px[2]].map(u32::from);
    ((r * 4899 + g * 9617 + b * 1868 + (1 << 13)) >> 14) as u8
}

/// The `rect` of an image of `pixel` type resized to `w`x`h`.
fn resample(
    (width, height, pixels): (u32, u32, &[u8]),
    pixel: PixelType,
    rect: Rect,
    (w, h): (usize, usize),
) -> Result<Vec<u8>> {
    let fail = |e: &dyn std::fmt::Display| Error::internal(format!("resize: {e}"));
    let src = ImageRef::new(width, height, pixels, pixel).map_err(|e| fail(&e))?;
    let mut dst = Image::new(w as u32, h as u32, pixel);
    let options = ResizeOptions::new()
        .resize_alg(ResizeAlg::Interpolation(FilterType::Bilinear))
        .crop(
            rect.x.into(),
            rect.y.into(),
            rect.width.into(),
            rect.height.into(),
        );
    Resizer::new()
        .resize(&src, &mut dst, &options)
        .map_err(|e| fail(&e))?;
    Ok(dst.into_vec())
}

/// One RGB image appended to a run's NCHW f32 input (its three planes),
/// channels in the order `norm` asks for, each value `(v - mean) * scale`.
pub(super) fn append_input(image: &Frame, norm: Normalize, data: &mut Vec<f32>) -> Result<()> {
    let (w, h) = (image.width as usize, image.height as usize);
    if image.rgb.len() != 3 * w * h {
        return Err(Error::internal(format!(
            "model input: a {w}x{h} RGB image of {} bytes",
            image.rgb.len()
        )));
    }
    let order = if norm.rgb { [0, 1, 2] } else { [2, 1, 0] };
    // Each byte's value computed once and looked up: about 3x faster than
    // converting every pixel, same bits. Filled plane by plane, one pass over
    // whole pixels each, never zeroed first.
    let table: [f32; 256] = std::array::from_fn(|v| (v as f32 - norm.mean) * norm.scale);
    data.reserve(3 * w * h);
    for c in order {
        data.extend(image.rgb.chunks_exact(3).map(|p| table[usize::from(p[c])]));
    }
    Ok(())
}

pub(super) fn l2_normalize(v: &[f32]) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter().map(|x| x / norm).collect()
    } else {
        v.to_vec()
    }
}

fn iou(a: &BoxPx, b: &BoxPx) -> f32 {
    let w = (a.right.min(b.right) - a.left.max(b.left)).max(0.0);
    let h = (a.bottom.min(b.bottom) - a.top.max(b.top)).max(0.0);
    let inter = w * h;
    let area = |r: &BoxPx| (r.right - r.left).max(0.0) * (r.bottom - r.top).max(0.0);
    let union = area(a) + area(b) - inter;
    if union > 0.0 {
        inter / union
    } else {
        0.0
    }
}

/// Greedy non-maximum suppression over boxes sorted by descending score.
pub fn nms(sorted: Vec<(BoxPx, f32)>, max_iou: f32) -> Vec<(BoxPx, f32)> {
    let mut kept: Vec<(BoxPx, f32)> = Vec::new();
    for candidate in sorted {
        if kept.iter().all(|k| iou(&k.0, &candidate.0) <= max_iou) {
            kept.push(candidate);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(l: f32, t: f32, r: f32, bo: f32) -> BoxPx {
        BoxPx {
            left: l,
            top: t,
            right: r,
            bottom: bo,
        }
    }

    #[test]
    fn nms_keeps_the_best_of_overlapping_boxes() {
        let boxes = vec![
            (b(0.0, 0.0, 10.0, 10.0), 0.9),
            (b(1.0, 1.0, 11.0, 11.0), 0.8),
            (b(20.0, 20.0, 30.0, 30.0), 0.7),
        ];
        let kept = nms(boxes, 0.3);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].1, 0.9);
        assert_eq!(kept[1].1, 0.7);
        assert_eq!(iou(&b(0.0, 0.0, 1.0, 1.0), &b(5.0, 5.0, 6.0, 6.0)), 0.0);
    }

    #[test]
    fn pixels_become_planes_in_the_order_asked() {
        // One row of two RGB pixels.
        let image = Frame {
            width: 2,
            height: 1,
            rgb: vec![10u8, 20, 30, 40, 50, 60],
        };
        let norm = Normalize {
            rgb: true,
            mean: 10.0,
            scale: 0.5,
        };
        let mut rgb = vec![-1.0];
        append_input(&image, norm, &mut rgb).unwrap();
        assert_eq!(rgb, vec![-1.0, 0.0, 15.0, 5.0, 20.0, 10.0, 25.0]);
        let mut bgr = Vec::new();
        append_input(&image, Normalize { rgb: false, ..norm }, &mut bgr).unwrap();
        assert_eq!(bgr, vec![10.0, 25.0, 5.0, 20.0, 0.0, 15.0]);
    }

    #[test]
    fn halving_averages_each_two_by_two() {
        // 4x2 RGB: each 2x2 block averages to its mean, as OpenCV's
        // INTER_LINEAR gives for an exact half.
        let rgb = [
            [0u8, 10, 100],
            [2, 12, 104],
            [50, 60, 70],
            [54, 60, 74],
            [4, 14, 100],
            [6, 16, 104],
            [50, 64, 70],
            [54, 64, 74],
        ]
        .concat();
        let frame = Frame {
            width: 4,
            height: 2,
            rgb,
        };
        let half = resize(&frame, 2, 1).unwrap();
        assert_eq!(half.rgb, vec![3, 13, 102, 52, 62, 72]);
    }

    #[test]
    fn grey_is_bt601_of_the_box_only() {
        let frame = Frame {
            width: 3,
            height: 1,
            rgb: vec![255, 0, 0, 0, 255, 0, 0, 0, 255],
        };
        let one = |x| Rect {
            x,
            y: 0,
            width: 1,
            height: 1,
        };
        // 0.299, 0.587, 0.114 of 255, rounded.
        assert_eq!(grey_box(&frame, one(0), (1, 1)).unwrap(), vec![76]);
        assert_eq!(grey_box(&frame, one(1), (1, 1)).unwrap(), vec![150]);
        assert_eq!(grey_box(&frame, one(2), (1, 1)).unwrap(), vec![29]);
        assert_eq!(grey_box(&frame, one(1), (2, 2)).unwrap(), vec![150; 4]);
    }

    #[test]
    fn l2_normalized() {
        let v = l2_normalize(&[3.0, 4.0]);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        assert_eq!(l2_normalize(&[0.0, 0.0]), vec![0.0, 0.0]);
    }
}
