//! The 68-point landmark model (`landmark_model`): a grey crop of a face's
//! box at its input size, /256; out 136 values relative to the box, reduced
//! to the five points. The points for a detector without its own (the
//! UltraFace family), or for any when it is set.

use super::detect::Five;
use super::net::{ItemOutputs, Net};
use super::ops::{grey_box, Rect};
use crate::error::{Error, Result};
use crate::pipeline::align::five_from_68;
use crate::pipeline::{BoxPx, Frame};

pub(super) struct LandmarkModel {
    pub net: Net,
}

impl LandmarkModel {
    /// The five points of each face (a frame and a box in it).
    pub fn points(&self, faces: &[(&Frame, BoxPx)]) -> Vec<Result<Five>> {
        let (w, h) = self.net.image_size();
        let crops: Vec<(&Frame, Rect)> = faces.iter().map(|&(f, b)| (f, crop(f, &b))).collect();
        let runs = self.net.run_items(&crops, |&(frame, rect), data| {
            let grey = grey_box(frame, rect, (w, h))?;
            data.extend(grey.iter().map(|&v| f32::from(v) / 256.0));
            Ok(())
        });
        runs.into_iter()
            .zip(&crops)
            .map(|(outputs, (_, rect))| points(&outputs?, rect))
            .collect()
    }
}

/// The whole-pixel box a face's landmarks are read from: inside the frame,
/// at least one pixel each way.
fn crop(frame: &Frame, b: &BoxPx) -> Rect {
    let (iw, ih) = (frame.width as f32, frame.height as f32);
    let left = b.left.clamp(0.0, iw - 1.0);
    let top = b.top.clamp(0.0, ih - 1.0);
    let right = b.right.clamp(left + 1.0, iw);
    let bottom = b.bottom.clamp(top + 1.0, ih);
    Rect {
        x: left as u32,
        y: top as u32,
        width: (right - left) as u32,
        height: (bottom - top) as u32,
    }
}

/// The landmark model's 68 points (relative to `rect`) as five in frame
/// pixels.
fn points(outputs: &ItemOutputs, rect: &Rect) -> Result<Five> {
    let values = outputs.first().map_or(&[][..], Vec::as_slice);
    if values.len() != 136 {
        return Err(Error::internal(format!(
            "landmark model gave {} values, expected 136 (68 points)",
            values.len()
        )));
    }
    let (bw, bh) = (rect.width as f32, rect.height as f32);
    let points: Vec<[f32; 2]> = values
        .chunks_exact(2)
        .map(|p| [p[0] * bw + rect.x as f32, p[1] * bh + rect.y as f32])
        .collect();
    five_from_68(&points)
}
