//! MediaPipe BlazeFace, short range (front, 128x128) and back camera
//! (256x256): 896 anchors in two feature maps, 16x16 cells of 2 anchors and
//! 8x8 cells of 6 (strides 8 and 16 at 128, 16 and 32 at 256), each anchor
//! at its cell's centre with a fixed size (MediaPipe's SsdAnchorsCalculator
//! options for face detection). Outputs: scores `[1,n,1]` (logits) and
//! regressors `[1,n,16]` per map (keijiro's ONNX exports:
//! `Identity:0`..`Identity_3:0`) or both maps together (`[1,896,1]`,
//! `[1,896,16]`, the TFLite model's own). A regressor row: box centre
//! offset and size, then six points (the person's right eye, left eye, nose
//! tip, mouth centre, right and left ear), all in input pixels from the
//! anchor (MediaPipe's x/y/w/h scale is the input size). Score =
//! sigmoid(clip(raw, ±100)). Input: NHWC, RGB, (v - 127.5) / 127.5,
//! letterboxed in the middle on black (MediaPipe's ImageToTensorCalculator,
//! keep_aspect_ratio); threshold 0.75 (keijiro's; 0.65 for the back model, as
//! MediaPipe's back-camera graph), NMS 0.3.
//!
//! Five points: its eyes and nose as they are; the mouth corners placed
//! either side of its mouth centre along the eyes' line, as far apart as
//! the ArcFace template puts them for those eyes.

use super::{
    at_least, check_lengths, logit, sigmoid, Candidate, Decode, Family, Five, Graph, Misfit, Sizing,
};
use super::{Placement, Reference};
use crate::engine::onnx::ops::Layout;
use crate::engine::onnx::settings::Normalize;
use crate::error::Result;
use crate::pipeline::align::ARCFACE_112;

/// The two feature maps: cells per row and anchors a cell.
const MAPS: [(usize, usize); 2] = [(16, 2), (8, 6)];
const ANCHORS: usize = 896;
const SCORE_CLIP: f32 = 100.0;

pub static FAMILY: Family = Family {
    name: "blazeface",
    reference: Reference {
        size: None,
        placement: Placement::LetterboxCentre,
        sizing: Sizing::Round,
        fill: 0,
        norm: Normalize {
            rgb: true,
            mean: [127.5; 3],
            scale: 1.0 / 127.5,
        },
        threshold: 0.75,
        nms_iou: 0.3,
    },
    fit,
};

fn fit(graph: &Graph) -> std::result::Result<Box<dyn Decode>, Misfit> {
    let shapes: Vec<&[usize]> = graph.outputs.iter().map(|o| o.item_shape()).collect();
    let (scores, boxes): (Vec<usize>, Vec<usize>) = match shapes.as_slice() {
        // keijiro's: each map's scores, then each map's regressors.
        [[512, 1], [384, 1], [512, 16], [384, 16]] => (vec![0, 1], vec![2, 3]),
        [[896, 16], [896, 1]] => (vec![1], vec![0]),
        [[896, 1], [896, 16]] => (vec![0], vec![1]),
        _ => {
            let near = graph.layout == Layout::Nhwc || shapes.iter().any(|s| s.last() == Some(&16));
            let why = format!(
                "blazeface reads scores [1,512,1], [1,384,1] and regressors [1,512,16], \
                 [1,384,16] (or [1,896,1] and [1,896,16]); the outputs are {}",
                shapes_text(graph)
            );
            return Err(Misfit { why, near });
        }
    };
    if graph.size.0 != graph.size.1 || !graph.size.0.is_multiple_of(16) {
        return Err(Misfit::near(format!(
            "blazeface takes a square input of 16 cells a row; this one is {}x{}",
            graph.size.0, graph.size.1
        )));
    }
    let lengths = graph.outputs.iter().map(|o| o.values()).collect();
    Ok(Box::new(Decoder {
        scores,
        boxes,
        side: graph.size.0 as f32,
        lengths,
    }))
}

fn shapes_text(graph: &Graph) -> String {
    let shapes: Vec<String> = graph
        .outputs
        .iter()
        .map(|o| format!("{:?}", o.shape))
        .collect();
    shapes.join(", ")
}

struct Decoder {
    /// Outputs holding the scores and the regressors, map by map (one of
    /// each when both maps share an output).
    scores: Vec<usize>,
    boxes: Vec<usize>,
    side: f32,
    lengths: Vec<usize>,
}

impl Decoder {
    /// Map `m`'s values (its `n` anchors from `first`, `width` each): its own
    /// output, or its share of the one both maps write.
    fn map<'a>(
        &self,
        outputs: &'a [Vec<f32>],
        parts: &[usize],
        m: usize,
        first: usize,
        n: usize,
        width: usize,
    ) -> &'a [f32] {
        match parts {
            [one] => &outputs[*one][first * width..(first + n) * width],
            _ => &outputs[parts[m]],
        }
    }
}

impl Decode for Decoder {
    fn decode(
        &self,
        outputs: &[Vec<f32>],
        threshold: f32,
        found: &mut Vec<Candidate>,
    ) -> Result<()> {
        check_lengths(outputs, &self.lengths)?;
        let raw_threshold = logit(threshold);
        let mut anchor = 0;
        for (m, (cells, per_cell)) in MAPS.into_iter().enumerate() {
            let cell = self.side / cells as f32;
            let n = cells * cells * per_cell;
            let scores = self.map(outputs, &self.scores, m, anchor, n, 1);
            let boxes = self.map(outputs, &self.boxes, m, anchor, n, 16);
            // Clipping at ±100 moves no logit across a threshold in (0, 1).
            for i in at_least(scores, 0, 1, n, raw_threshold) {
                let raw = scores[i];
                let place = i / per_cell;
                let ax = ((place % cells) as f32 + 0.5) * cell;
                let ay = ((place / cells) as f32 + 0.5) * cell;
                let r = &boxes[16 * i..16 * i + 16];
                let (cx, cy, w, h) = (ax + r[0], ay + r[1], r[2], r[3]);
                let point = |j: usize| [ax + r[4 + 2 * j], ay + r[5 + 2 * j]];
                found.push(Candidate {
                    bbox: [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0],
                    score: sigmoid(raw.clamp(-SCORE_CLIP, SCORE_CLIP)),
                    points: Some(five(point(0), point(1), point(2), point(3))),
                });
            }
            anchor += n;
        }
        debug_assert_eq!(anchor, ANCHORS);
        Ok(())
    }

    fn gives_points(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!(
            "{ANCHORS} anchors in {} outputs, with points (mouth corners from its centre)",
            self.lengths.len()
        )
    }

    /// The back-camera model (256x256) is MediaPipe's with threshold 0.65.
    fn reference(&self) -> Option<Reference> {
        (self.side >= 256.0).then_some(Reference {
            threshold: 0.65,
            ..FAMILY.reference
        })
    }
}

/// The five points from the eyes (image left, image right), nose and the
/// mouth's centre.
fn five(left_eye: [f32; 2], right_eye: [f32; 2], nose: [f32; 2], mouth: [f32; 2]) -> Five {
    let t = ARCFACE_112;
    // Mouth corners' distance over the eyes', in the template.
    let ratio = (t[4][0] - t[3][0]) / (t[1][0] - t[0][0]);
    let half = [
        (right_eye[0] - left_eye[0]) * ratio / 2.0,
        (right_eye[1] - left_eye[1]) * ratio / 2.0,
    ];
    [
        left_eye,
        right_eye,
        nose,
        [mouth[0] - half[0], mouth[1] - half[1]],
        [mouth[0] + half[0], mouth[1] + half[1]],
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mouth_corners_lie_along_the_eyes_line() {
        let t = ARCFACE_112;
        let mouth = [(t[3][0] + t[4][0]) / 2.0, (t[3][1] + t[4][1]) / 2.0];
        let got = five(t[0], t[1], t[2], mouth);
        // Level eyes: the template's corners, within its small tilt.
        assert!((got[3][0] - t[3][0]).abs() < 0.01 && (got[4][0] - t[4][0]).abs() < 0.01);
        assert!((got[3][1] - t[3][1]).abs() < 0.2 && (got[4][1] - t[4][1]).abs() < 0.2);
    }
}
