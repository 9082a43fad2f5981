//! The image and vector work around the models: resize (a whole frame as
//! OpenCV's INTER_LINEAR, bit for bit: `pipeline::resize`; a part of one
//! with fast_image_resize's bilinear without antialiasing, within one level
//! of it), a region placed in a filled canvas (the
//! letterbox), grey, a mirror image, pixels to an NCHW or NHWC tensor, L2
//! normalization, non-maximum suppression.

use fast_image_resize::PixelType;

use super::settings::Normalize;
use crate::error::{Error, Result};
use crate::pipeline::resize::{crop_resize, resize_linear};
use crate::pipeline::{BoxPx, Frame, OwnedFrame};

/// A region of a frame (it may reach past the frame's edges), in the
/// frame's pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Region {
    pub left: f32,
    pub top: f32,
    pub width: f32,
    pub height: f32,
}

impl Region {
    pub fn whole(frame: &Frame) -> Self {
        Region {
            left: 0.0,
            top: 0.0,
            width: frame.width as f32,
            height: frame.height as f32,
        }
    }
}

/// Where an image's channels go in a model's input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Channel planes: [N, C, H, W] (PyTorch's exports).
    Nchw,
    /// Interleaved pixels: [N, H, W, C] (TensorFlow's and Keras' exports).
    Nhwc,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Nchw => "NCHW",
            Layout::Nhwc => "NHWC",
        }
    }
}

/// A whole-pixel box of a frame: left, top, width, height.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rect {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// The frame resized to `w`x`h`.
pub(super) fn resize(frame: &Frame, w: usize, h: usize) -> Result<OwnedFrame> {
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
    if w == 0 || h == 0 || frame.width == 0 || frame.height == 0 {
        return Err(Error::internal(format!(
            "resize {}x{} to {w}x{h}",
            frame.width, frame.height
        )));
    }
    let size = (frame.width as usize, frame.height as usize);
    let rgb = resize_linear(&frame.rgb, size, (w, h));
    Ok(Frame {
        width: w as u32,
        height: h as u32,
        rgb: rgb.into(),
    })
}

/// A `size` canvas filled with `fill`, holding `region` of the frame scaled
/// to `scaled` pixels with its corner at `offset` (the parts of the region
/// outside the frame filled too). The whole frame stretched to the canvas
/// is `resize`, bit for bit.
pub(super) fn fill_region(
    frame: &Frame,
    region: &Region,
    scaled: (usize, usize),
    offset: (usize, usize),
    size: (usize, usize),
    fill: u8,
) -> Result<OwnedFrame> {
    let whole = *region == Region::whole(frame);
    if whole && scaled == size {
        return resize(frame, size.0, size.1);
    }
    let mut canvas = vec![fill; 3 * size.0 * size.1];
    let framed = |rgb: Vec<u8>| Frame {
        width: size.0 as u32,
        height: size.1 as u32,
        rgb: rgb.into(),
    };
    // The part of the region inside the frame, and where it goes.
    let (sx, sy) = (
        scaled.0 as f32 / region.width.max(1.0),
        scaled.1 as f32 / region.height.max(1.0),
    );
    let left = region.left.max(0.0);
    let top = region.top.max(0.0);
    let right = (region.left + region.width).min(frame.width as f32);
    let bottom = (region.top + region.height).min(frame.height as f32);
    let to = |v: f32, from: f32, s: f32, o: usize, most: usize| {
        (((v - from) * s).round() as usize + o).min(most)
    };
    let (x0, x1) = (
        to(left, region.left, sx, offset.0, size.0),
        to(right, region.left, sx, offset.0, size.0),
    );
    let (y0, y1) = (
        to(top, region.top, sy, offset.1, size.1),
        to(bottom, region.top, sy, offset.1, size.1),
    );
    if right <= left || bottom <= top || x1 <= x0 || y1 <= y0 {
        return Ok(framed(canvas));
    }
    let part = match whole {
        true => resize(frame, x1 - x0, y1 - y0)?.rgb.into_owned(),
        false => crop_resize(
            (frame.width, frame.height, &frame.rgb),
            PixelType::U8x3,
            [left, top, right - left, bottom - top],
            (x1 - x0, y1 - y0),
        )?,
    };
    let row = 3 * (x1 - x0);
    for (y, src) in (y0..y1).zip(part.chunks_exact(row)) {
        let start = 3 * (y * size.0 + x0);
        canvas[start..start + row].copy_from_slice(src);
    }
    Ok(framed(canvas))
}

/// The frame mirrored left to right.
pub(super) fn mirror(frame: &Frame) -> OwnedFrame {
    let row = 3 * frame.width as usize;
    let mut rgb = Vec::with_capacity(frame.rgb.len());
    for line in frame.rgb.chunks_exact(row.max(1)) {
        rgb.extend(line.chunks_exact(3).rev().flatten());
    }
    Frame {
        rgb: rgb.into(),
        ..*frame
    }
}

/// The frame at half its size, each pixel the rounded mean of a 2x2 block:
/// what OpenCV's INTER_LINEAR does for an exact half (it switches to its
/// INTER_AREA path), so a 640x480 camera frame gives the sample detector the
/// very pixels OpenCV gives, faster than the general resize (0.110 ms,
/// docs/benchmarks.md, Decoding).
fn halve(frame: &Frame) -> OwnedFrame {
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
        rgb: rgb.into(),
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
    image: (u32, u32, &[u8]),
    pixel: PixelType,
    rect: Rect,
    size: (usize, usize),
) -> Result<Vec<u8>> {
    // Whole pixels are exact as f32 (frames are far below 2^24 pixels a side).
    let rect = [rect.x, rect.y, rect.width, rect.height].map(|v| v as f32);
    crop_resize(image, pixel, rect, size)
}

/// One RGB image appended to a run's f32 input in `layout` (three planes,
/// or interleaved pixels), channels in the order `norm` asks for, each
/// value `(v - mean) * scale` (the mean of that channel).
pub(super) fn append_input(
    image: &Frame,
    norm: Normalize,
    layout: Layout,
    data: &mut Vec<f32>,
) -> Result<()> {
    let (w, h) = (image.width as usize, image.height as usize);
    if image.rgb.len() != 3 * w * h {
        return Err(Error::internal(format!(
            "model input: a {w}x{h} RGB image of {} bytes",
            image.rgb.len()
        )));
    }
    let order = if norm.rgb { [0, 1, 2] } else { [2, 1, 0] };
    // Each byte's value computed once and looked up: about 3x faster than
    // converting every pixel, same bits. Filled plane by plane (or pixel by
    // pixel), one pass, never zeroed first.
    let tables: [[f32; 256]; 3] =
        std::array::from_fn(|k| std::array::from_fn(|v| (v as f32 - norm.mean[k]) * norm.scale));
    data.reserve(3 * w * h);
    match layout {
        Layout::Nchw => {
            for (k, c) in order.into_iter().enumerate() {
                let table = &tables[k];
                data.extend(image.rgb.chunks_exact(3).map(|p| table[usize::from(p[c])]));
            }
        }
        Layout::Nhwc => {
            for p in image.rgb.chunks_exact(3) {
                data.extend((0..3).map(|k| tables[k][usize::from(p[order[k]])]));
            }
        }
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

/// Intersection over union of two boxes (0 when either is empty).
pub(super) fn iou(a: &BoxPx, b: &BoxPx) -> f32 {
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

/// Greedy non-maximum suppression over items sorted by descending score,
/// each with its box.
pub(super) fn nms<T>(sorted: Vec<T>, max_iou: f32, bbox: impl Fn(&T) -> &BoxPx) -> Vec<T> {
    let mut kept: Vec<T> = Vec::new();
    for candidate in sorted {
        if kept
            .iter()
            .all(|k| iou(bbox(k), bbox(&candidate)) <= max_iou)
        {
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
        let kept = nms(boxes, 0.3, |(b, _)| b);
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
            rgb: vec![10u8, 20, 30, 40, 50, 60].into(),
        };
        let norm = Normalize {
            rgb: true,
            mean: [10.0; 3],
            scale: 0.5,
        };
        let mut rgb = vec![-1.0];
        append_input(&image, norm, Layout::Nchw, &mut rgb).unwrap();
        assert_eq!(rgb, vec![-1.0, 0.0, 15.0, 5.0, 20.0, 10.0, 25.0]);
        let mut bgr = Vec::new();
        append_input(
            &image,
            Normalize { rgb: false, ..norm },
            Layout::Nchw,
            &mut bgr,
        )
        .unwrap();
        assert_eq!(bgr, vec![10.0, 25.0, 5.0, 20.0, 0.0, 15.0]);
        // Interleaved, each channel its own mean (in the model's order).
        let mut nhwc = Vec::new();
        let per_channel = Normalize {
            rgb: false,
            mean: [0.0, 10.0, 20.0],
            scale: 1.0,
        };
        append_input(&image, per_channel, Layout::Nhwc, &mut nhwc).unwrap();
        assert_eq!(nhwc, vec![30.0, 10.0, -10.0, 60.0, 40.0, 20.0]);
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
            rgb: rgb.into(),
        };
        let half = resize(&frame, 2, 1).unwrap();
        assert_eq!(half.rgb, vec![3, 13, 102, 52, 62, 72]);
    }

    #[test]
    fn a_region_lands_in_a_filled_canvas() {
        // 4x2, each pixel its column's value: the right half, placed at
        // (1, 1) of a 4x4 canvas at its own size.
        let rgb: Vec<u8> = (0..2)
            .flat_map(|_| (0..4u8).flat_map(|x| [x * 50; 3]))
            .collect();
        let frame = Frame {
            width: 4,
            height: 2,
            rgb: rgb.into(),
        };
        let region = Region {
            left: 2.0,
            top: 0.0,
            width: 4.0,
            height: 2.0,
        };
        let canvas = fill_region(&frame, &region, (4, 2), (1, 1), (4, 4), 9).unwrap();
        let red: Vec<u8> = canvas.rgb.chunks_exact(3).map(|p| p[0]).collect();
        assert_eq!(
            red,
            vec![9, 9, 9, 9, 9, 100, 150, 9, 9, 100, 150, 9, 9, 9, 9, 9]
        );
        // The whole frame stretched is `resize`'s.
        let whole = fill_region(&frame, &Region::whole(&frame), (2, 1), (0, 0), (2, 1), 0).unwrap();
        assert_eq!(whole.rgb, resize(&frame, 2, 1).unwrap().rgb);
        let mirrored = mirror(&frame);
        assert_eq!(&mirrored.rgb[..6], &[150, 150, 150, 100, 100, 100]);
    }

    #[test]
    fn grey_is_bt601_of_the_box_only() {
        let frame = Frame {
            width: 3,
            height: 1,
            rgb: vec![255, 0, 0, 0, 255, 0, 0, 0, 255].into(),
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
