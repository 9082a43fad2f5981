//! The three models, each over many items at once: every frame's detector
//! input in one run, every face's landmark crop in one, every face chip in
//! one (runs of at most `max_engine_batch` items; a model whose batch is
//! fixed takes one item a run). Each item keeps its own result, so one that
//! fails fails alone.

use super::net::ItemOutputs;
use super::ops::{append_input, grey_box, l2_normalize, nms, resize, Rect};
use super::OnnxEngine;
use crate::error::{Error, Result};
use crate::pipeline::align::{five_from_68, similarity, ARCFACE_112};
use crate::pipeline::warp::warp_affine;
use crate::pipeline::{BoxPx, Frame};

/// Five landmarks of a face, in frame pixels.
pub(super) type Five = [[f32; 2]; 5];

impl OnnxEngine {
    /// Each frame's faces by the detector: boxes in frame pixels with their
    /// scores, best first, overlaps suppressed.
    pub(super) fn detect(&self, frames: &[&Frame]) -> Vec<Result<Vec<(BoxPx, f32)>>> {
        let (w, h) = self
            .settings
            .detector_size
            .unwrap_or((self.detector.shape[3], self.detector.shape[2]));
        let norm = self.settings.detector_norm;
        let runs = self.detector.run_items(frames, |frame, data| {
            append_input(&resize(frame, w, h)?, norm, data)
        });
        runs.into_iter()
            .zip(frames)
            .map(|(outputs, frame)| self.boxes(&outputs?, frame))
            .collect()
    }

    /// The detector's outputs for one frame (scores [N,2], boxes [N,4] in
    /// corner form, 0..1) as the frame's boxes above the threshold.
    fn boxes(&self, outputs: &ItemOutputs, frame: &Frame) -> Result<Vec<(BoxPx, f32)>> {
        let (scores, boxes) = match outputs.as_slice() {
            [scores, boxes, ..] if boxes.len() == scores.len() * 2 => (scores, boxes),
            _ => {
                return Err(Error::internal(
                    "detector outputs do not match (scores [1,N,2], boxes [1,N,4])",
                ))
            }
        };
        let (fw, fh) = (frame.width as f32, frame.height as f32);
        // A box that is not finite (a broken model) is no face: it would
        // break the crops' arithmetic.
        let finite = |i: usize| boxes[4 * i..4 * i + 4].iter().all(|v| v.is_finite());
        let mut found: Vec<(BoxPx, f32)> = (0..scores.len() / 2)
            .filter(|&i| scores[2 * i + 1] >= self.settings.score_threshold && finite(i))
            .map(|i| {
                let b = &boxes[4 * i..4 * i + 4];
                let bbox = BoxPx {
                    left: b[0] * fw,
                    top: b[1] * fh,
                    right: b[2] * fw,
                    bottom: b[3] * fh,
                };
                (bbox, scores[2 * i + 1])
            })
            .collect();
        found.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(nms(found, self.settings.nms_iou))
    }

    /// The five points of each face (a frame and a box in it), from the
    /// 68-point landmark model (a grey crop of the box at its input size,
    /// /256; out 136 values relative to the box).
    pub(super) fn landmarks(&self, faces: &[(&Frame, BoxPx)]) -> Vec<Result<Five>> {
        let net = &self.landmarks;
        let (w, h) = (net.shape[3], net.shape[2]);
        let crops: Vec<(&Frame, Rect)> = faces.iter().map(|&(f, b)| (f, crop(f, &b))).collect();
        let runs = net.run_items(&crops, |&(frame, rect), data| {
            let grey = grey_box(frame, rect, (w, h))?;
            data.extend(grey.iter().map(|&v| f32::from(v) / 256.0));
            Ok(())
        });
        runs.into_iter()
            .zip(&crops)
            .map(|(outputs, (_, rect))| points(&outputs?, rect))
            .collect()
    }

    /// The aligned chip (the embedder's input size) of a face of `frame`.
    pub(super) fn chip(&self, frame: &Frame, five: &Five) -> Result<Frame> {
        let (w, h) = (self.embedder.shape[3], self.embedder.shape[2]);
        // Reference points are for 112x112; scale them to the embedder's size.
        let (sx, sy) = (w as f32 / 112.0, h as f32 / 112.0);
        let reference: Vec<[f32; 2]> = ARCFACE_112.iter().map(|p| [p[0] * sx, p[1] * sy]).collect();
        warp_affine(frame, &similarity(five, &reference)?, w, h)
    }

    /// Each chip's embedding, L2-normalized.
    pub(super) fn embed_chips(&self, chips: &[&Frame]) -> Vec<Result<Vec<f32>>> {
        let norm = self.settings.embedder_norm;
        let runs = self
            .embedder
            .run_items(chips, |chip, data| append_input(chip, norm, data));
        runs.into_iter()
            .map(|outputs| match outputs?.first() {
                Some(v) if v.len() == self.embedding_len => Ok(l2_normalize(v)),
                other => Err(Error::internal(format!(
                    "the embedder gave {} values for a face, expected {}",
                    other.map_or(0, Vec::len),
                    self.embedding_len
                ))),
            })
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
