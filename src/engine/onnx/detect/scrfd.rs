//! SCRFD (insightface: buffalo_l's det_10g, buffalo_s's det_500m, 2.5G,
//! 34G), read as insightface's `model_zoo/scrfd.py` reads it. Outputs by
//! count: 6 (strides 8/16/32, two anchors a place, no points), 9 (the same
//! with points), 10 and 15 (strides 8 to 128, one anchor a place); in order
//! every stride's scores, then every stride's boxes, then its points. Each
//! is `[N, C]` or `[1, N, C]` (batched exports), N = (H/s)(W/s)A rows, row
//! `(y * W/s + x) * A + a`; scores already sigmoid; boxes are distances
//! (left, top, right, bottom) from the anchor at (x*s, y*s), points offsets
//! from it, both in strides. Input: letterboxed at the top left on black,
//! RGB, (v - 127.5) / 128, 640x640 where the size is free; threshold 0.5,
//! NMS 0.4. insightface's `model_zoo/retinaface.py` reads the same layout.

use super::grid::{levels, strides_text, Level};
use super::{
    check_lengths, Candidate, Decode, Family, Graph, Misfit, Placement, Reference, Sizing,
};
use crate::engine::onnx::settings::Normalize;
use crate::error::Result;

pub static FAMILY: Family = Family {
    name: "scrfd",
    reference: Reference {
        size: Some((640, 640)),
        placement: Placement::LetterboxTopLeft,
        sizing: Sizing::Insightface,
        fill: 0,
        norm: Normalize {
            rgb: true,
            mean: [127.5; 3],
            scale: 1.0 / 128.0,
        },
        threshold: 0.5,
        nms_iou: 0.4,
    },
    fit,
};

fn fit(graph: &Graph) -> std::result::Result<Box<dyn Decode>, Misfit> {
    Ok(Box::new(PerStride::fit(graph, "scrfd")?))
}

/// insightface's per-stride layout, as read for one input size.
pub(super) struct PerStride {
    levels: Vec<Level>,
    points: bool,
    /// Each output's values, in output order.
    lengths: Vec<usize>,
}

impl PerStride {
    /// The layout of `graph`'s outputs, or why they are not in it.
    pub(super) fn fit(graph: &Graph, family: &str) -> std::result::Result<Self, Misfit> {
        let n = graph.outputs.len();
        let (strides, anchors, points): (&[usize], usize, bool) = match n {
            6 => (&[8, 16, 32], 2, false),
            9 => (&[8, 16, 32], 2, true),
            10 => (&[8, 16, 32, 64, 128], 1, false),
            15 => (&[8, 16, 32, 64, 128], 1, true),
            _ => {
                return Err(Misfit::far(format!(
                    "{family} has 6, 9, 10 or 15 outputs (scores, boxes[, points] per stride), \
                     not {n}"
                )))
            }
        };
        let levels = levels(strides, graph.size, anchors);
        let groups: &[usize] = if points { &[1, 4, 10] } else { &[1, 4] };
        let mut lengths = Vec::with_capacity(n);
        for (g, &width) in groups.iter().enumerate() {
            for (k, level) in levels.iter().enumerate() {
                let output = &graph.outputs[g * levels.len() + k];
                let want = [level.count(), width];
                if output.item_shape() != want {
                    return Err(Misfit::near(format!(
                        "{family}: output {} ({}) is {:?}; at stride {} of a {}x{} input it \
                         would be [{}, {width}] ({}x{} places, {anchors} anchors each)",
                        g * levels.len() + k,
                        output.name,
                        output.shape,
                        level.stride,
                        graph.size.0,
                        graph.size.1,
                        level.count(),
                        level.cols,
                        level.rows,
                    )));
                }
                lengths.push(level.count() * width);
            }
        }
        Ok(PerStride {
            levels,
            points,
            lengths,
        })
    }
}

impl Decode for PerStride {
    fn decode(
        &self,
        outputs: &[Vec<f32>],
        threshold: f32,
        found: &mut Vec<Candidate>,
    ) -> Result<()> {
        check_lengths(outputs, &self.lengths)?;
        let k = self.levels.len();
        for (l, level) in self.levels.iter().enumerate() {
            let (scores, boxes) = (&outputs[l], &outputs[k + l]);
            let s = level.stride as f32;
            for (i, &score) in scores.iter().enumerate() {
                if score < threshold {
                    continue;
                }
                let (x, y) = level.cell(i);
                let (cx, cy) = (x * s, y * s);
                let d = &boxes[4 * i..4 * i + 4];
                let points = self.points.then(|| {
                    let p = &outputs[2 * k + l][10 * i..10 * i + 10];
                    std::array::from_fn(|j| [cx + p[2 * j] * s, cy + p[2 * j + 1] * s])
                });
                found.push(Candidate {
                    bbox: [cx - d[0] * s, cy - d[1] * s, cx + d[2] * s, cy + d[3] * s],
                    score,
                    points,
                });
            }
        }
        Ok(())
    }

    fn gives_points(&self) -> bool {
        self.points
    }

    fn describe(&self) -> String {
        format!(
            "{} outputs, strides {}, {} anchors a place, {}",
            self.lengths.len(),
            strides_text(&self.levels),
            self.levels[0].anchors,
            if self.points {
                "with points"
            } else {
                "no points"
            }
        )
    }
}
