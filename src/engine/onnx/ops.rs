//! The image and vector work around the models: frame to OpenCV, resize,
//! pixels to an NCHW tensor, L2 normalization, non-maximum suppression.

use opencv::boxed_ref::BoxedRef;
use opencv::core::{Mat, Size, ToInputArray, Vec3b};
use opencv::imgproc;
use opencv::prelude::*;

use super::blob::Blob;
use super::settings::Normalize;
use crate::error::{Error, Result};
use crate::pipeline::{BoxPx, Frame};

/// The frame's pixels as an OpenCV RGB image, borrowed: every use reads it.
pub(super) type FrameImage<'a> = BoxedRef<'a, Mat>;

pub(super) fn frame_mat(frame: &Frame) -> Result<FrameImage<'_>> {
    let (rows, cols) = (frame.height as i32, frame.width as i32);
    Ok(Mat::new_rows_cols_with_bytes::<Vec3b>(
        rows, cols, &frame.rgb,
    )?)
}

pub(super) fn resize(image: &impl ToInputArray, w: usize, h: usize) -> Result<Mat> {
    let mut out = Mat::default();
    imgproc::resize(
        image,
        &mut out,
        Size::new(w as i32, h as i32),
        0.0,
        0.0,
        imgproc::INTER_LINEAR,
    )?;
    Ok(out)
}

/// RGB images of one size into an NCHW f32 input, channels in the order
/// `norm` asks for, each value `(v - mean) * scale`.
pub(super) fn to_input(images: &[Mat], norm: Normalize) -> Result<Blob> {
    let first = images
        .first()
        .ok_or_else(|| Error::internal("no image for a model input"))?;
    let (w, h) = (first.cols().max(1), first.rows().max(1));
    for img in images {
        if (img.cols(), img.rows(), img.typ()) != (w, h, opencv::core::CV_8UC3) {
            return Err(Error::internal(format!(
                "model input: expected 8-bit RGB images of {w}x{h}, got {}x{} (type {})",
                img.cols(),
                img.rows(),
                img.typ()
            )));
        }
    }
    let (w, h) = (w as usize, h as usize);
    let order = if norm.rgb { [0, 1, 2] } else { [2, 1, 0] };
    // Each byte's value computed once and looked up: about 3x faster than
    // converting every pixel, same bits. Filled plane by plane, one pass over
    // whole pixels each, never zeroed first.
    let table: [f32; 256] = std::array::from_fn(|v| (v as f32 - norm.mean) * norm.scale);
    let mut data = Vec::with_capacity(images.len() * 3 * w * h);
    for img in images {
        let px = img.data_bytes()?;
        if px.len() != 3 * w * h {
            return Err(Error::internal(
                "model input: an image's pixels are not contiguous",
            ));
        }
        for c in order {
            data.extend(px.chunks_exact(3).map(|p| table[usize::from(p[c])]));
        }
    }
    Ok(Blob {
        shape: vec![images.len(), 3, h, w],
        data,
    })
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
        let flat = Mat::from_slice(&[10u8, 20, 30, 40, 50, 60]).unwrap();
        let image = flat.reshape(3, 1).unwrap().try_clone().unwrap();
        let norm = Normalize {
            rgb: true,
            mean: 10.0,
            scale: 0.5,
        };
        let rgb = to_input(std::slice::from_ref(&image), norm).unwrap();
        assert_eq!(rgb.shape, vec![1, 3, 1, 2]);
        assert_eq!(rgb.data, vec![0.0, 15.0, 5.0, 20.0, 10.0, 25.0]);
        let bgr = to_input(&[image], Normalize { rgb: false, ..norm }).unwrap();
        assert_eq!(bgr.data, vec![10.0, 25.0, 5.0, 20.0, 0.0, 15.0]);
    }

    #[test]
    fn l2_normalized() {
        let v = l2_normalize(&[3.0, 4.0]);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        assert_eq!(l2_normalize(&[0.0, 0.0]), vec![0.0, 0.0]);
    }
}
