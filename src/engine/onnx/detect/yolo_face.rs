//! YOLO face detectors, in the layouts their exports write (strides 8, 16,
//! 32; N places over a WxH input):
//! - YOLOv5-face (deepcam-cn, `export.py`): `[1, 3N, 16]` decoded in the
//!   graph, rows `cx, cy, w, h, obj, 5 x (x, y), cls`; score obj x cls.
//! - YOLOv7-face (`--grid`): `[1, 3N, 21]`, rows `cx, cy, w, h, obj, cls,
//!   5 x (x, y, visibility)`; score obj x cls.
//! - YOLOv8-face as Ultralytics exports a pose model: `[1, 20, N]` (or
//!   `[1, N, 20]`), rows `cx, cy, w, h, score, 5 x (x, y, visibility)`; and a
//!   detection-only one, `[1, 5, N]`, without points.
//! - YOLOv8-face as derronqi's exports write it (hpc203's demos): three raw
//!   maps `[1, 80, H/s, W/s]` (64 distribution bins, 4 sides x 16; a score
//!   logit; 5 x (x, y, visibility) raw), decoded here as Ultralytics'
//!   `dist2bbox` and `kpts_decode` do; matched to strides by their size.
//! - NMS in the graph: `[1, K, 21]` or `[K, 21]` rows `x1, y1, x2, y2,
//!   score, class, 5 x (x, y, visibility)` (Ultralytics `nms=True`,
//!   YOLOv7-face `--export-nms`), or `[.., K, 6]` without points (YOLOv10):
//!   any K, rows past the detections scored 0; not suppressed again here
//!   (`nms_iou` 1 unless set).
//!
//! Everything in input pixels. Input: letterboxed in the middle on grey
//! 114, RGB, v / 255, 640x640 where free; threshold 0.5 (the repositories'
//! demos use 0.25 to 0.6), NMS 0.5.

use super::grid::{levels, Level};
use super::{
    at_least, check_lengths, logit, sigmoid, Candidate, Decode, Family, Five, Graph, Misfit, Sizing,
};
use super::{Placement, Reference};
use crate::engine::onnx::settings::Normalize;
use crate::error::{Error, Result};

const STRIDES: [usize; 3] = [8, 16, 32];
/// Distribution bins per side in the raw YOLOv8 maps (Ultralytics' reg_max).
const BINS: usize = 16;
const RAW_CHANNELS: usize = 4 * BINS + 1 + 15;

pub static FAMILY: Family = Family {
    name: "yolo-face",
    reference: Reference {
        size: Some((640, 640)),
        placement: Placement::LetterboxCentre,
        sizing: Sizing::Round,
        fill: 114,
        norm: Normalize {
            rgb: true,
            mean: [0.0; 3],
            scale: 1.0 / 255.0,
        },
        threshold: 0.5,
        nms_iou: 0.5,
    },
    fit,
};

fn fit(graph: &Graph) -> std::result::Result<Box<dyn Decode>, Misfit> {
    let levels = levels(&STRIDES, graph.size, 1);
    let places: usize = levels.iter().map(Level::count).sum();
    if graph.outputs.len() == 3 {
        return Raw::fit(graph, levels).map(|d| Box::new(d) as Box<dyn Decode>);
    }
    let [output] = graph.outputs.as_slice() else {
        return Err(Misfit::far(format!(
            "yolo-face has one output (or three raw YOLOv8 maps), not {}",
            graph.outputs.len()
        )));
    };
    let shape = output.item_shape();
    let rows = |kind, n, width, across| {
        Ok(Box::new(Rows {
            kind,
            n,
            width,
            across,
        }) as Box<dyn Decode>)
    };
    match *shape {
        [n, 16] if n == 3 * places => rows(Kind::V5, n, 16, false),
        [n, 21] if n == 3 * places => rows(Kind::V7, n, 21, false),
        [20, n] if n == places => rows(Kind::V8, n, 20, true),
        [n, 20] if n == places => rows(Kind::V8, n, 20, false),
        [5, n] if n == places => rows(Kind::V8Boxes, n, 5, true),
        [n, 5] if n == places => rows(Kind::V8Boxes, n, 5, false),
        [_, 21] => rows(Kind::Suppressed, 0, 21, false),
        [_, 6] => rows(Kind::Suppressed, 0, 6, false),
        _ => Err(Misfit {
            why: format!(
                "yolo-face reads [1,{},16] (YOLOv5-face), [1,{},21] (YOLOv7-face), \
                 [1,20,{places}] or [1,5,{places}] (YOLOv8), or [1,K,21] / [1,K,6] (NMS in \
                 the graph) at {}x{}; the output is {:?}",
                3 * places,
                3 * places,
                graph.size.0,
                graph.size.1,
                output.shape
            ),
            near: shape.len() == 2,
        }),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    V5,
    V7,
    V8,
    V8Boxes,
    Suppressed,
}

/// One output of decoded rows (or columns, `across`).
struct Rows {
    kind: Kind,
    /// Rows; 0: any number (NMS in the graph).
    n: usize,
    width: usize,
    /// Values of a row lie `n` apart (channel-major `[width, n]`).
    across: bool,
}

impl Decode for Rows {
    fn decode(
        &self,
        outputs: &[Vec<f32>],
        threshold: f32,
        found: &mut Vec<Candidate>,
    ) -> Result<()> {
        let data = outputs.first().map_or(&[][..], Vec::as_slice);
        let n = match self.n {
            0 if data.len().is_multiple_of(self.width) => data.len() / self.width,
            0 => {
                return Err(Error::internal(format!(
                    "detector output of {} values is not rows of {}",
                    data.len(),
                    self.width
                )))
            }
            n => {
                check_lengths(outputs, &[n * self.width])?;
                n
            }
        };
        let value = |i: usize, c: usize| match self.across {
            true => data[c * n + i],
            false => data[i * self.width + c],
        };
        // Column 4 is the score, or the objectness it is a product of (the
        // class probability is at most 1): a row below the threshold there
        // cannot pass.
        let (first, step) = match self.across {
            true => (4 * n, 1),
            false => (4, self.width),
        };
        for i in at_least(data, first, step, n, threshold) {
            let score = match self.kind {
                Kind::V5 => value(i, 4) * value(i, 15),
                Kind::V7 => value(i, 4) * value(i, 5),
                Kind::V8 | Kind::V8Boxes | Kind::Suppressed => value(i, 4),
            };
            if score < threshold {
                continue;
            }
            let bbox = match self.kind {
                Kind::Suppressed => [value(i, 0), value(i, 1), value(i, 2), value(i, 3)],
                _ => {
                    let (cx, cy, w, h) = (value(i, 0), value(i, 1), value(i, 2), value(i, 3));
                    [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0]
                }
            };
            // Where the points start, and values per point.
            let points = match (self.kind, self.width) {
                (Kind::V5, _) => Some((5, 2)),
                (Kind::V7, _) | (Kind::Suppressed, 21) => Some((6, 3)),
                (Kind::V8, _) => Some((5, 3)),
                _ => None,
            };
            let points = points.map(|(start, step)| -> Five {
                std::array::from_fn(|j| {
                    [value(i, start + step * j), value(i, start + step * j + 1)]
                })
            });
            found.push(Candidate {
                bbox,
                score,
                points,
            });
        }
        Ok(())
    }

    fn gives_points(&self) -> bool {
        matches!(self.kind, Kind::V5 | Kind::V7 | Kind::V8)
            || (self.kind == Kind::Suppressed && self.width == 21)
    }

    /// Rows the graph already suppressed are not suppressed again (the
    /// graph's own overlap, 0.7 in Ultralytics' exports, holds).
    fn reference(&self) -> Option<Reference> {
        (self.kind == Kind::Suppressed).then_some(Reference {
            nms_iou: 1.0,
            ..FAMILY.reference
        })
    }

    fn describe(&self) -> String {
        let what = match self.kind {
            Kind::V5 => "YOLOv5-face rows",
            Kind::V7 => "YOLOv7-face rows",
            Kind::V8 => "YOLOv8 pose rows",
            Kind::V8Boxes => "YOLOv8 detection rows",
            Kind::Suppressed => "rows after NMS in the graph",
        };
        let points = if self.gives_points() {
            "with points"
        } else {
            "no points"
        };
        match self.n {
            0 => format!("{what} of {}, {points}", self.width),
            n => format!("{n} {what} of {}, {points}", self.width),
        }
    }
}

/// derronqi's raw YOLOv8 maps: which output is which stride.
struct Raw {
    levels: Vec<Level>,
    /// The output of each level.
    order: Vec<usize>,
    lengths: Vec<usize>,
}

impl Raw {
    fn fit(graph: &Graph, levels: Vec<Level>) -> std::result::Result<Self, Misfit> {
        let mut order = Vec::with_capacity(levels.len());
        for level in &levels {
            let want = [RAW_CHANNELS, level.rows, level.cols];
            match graph.outputs.iter().position(|o| o.item_shape() == want) {
                Some(k) => order.push(k),
                None => {
                    let shapes: Vec<String> = graph
                        .outputs
                        .iter()
                        .map(|o| format!("{:?}", o.shape))
                        .collect();
                    return Err(Misfit::near(format!(
                        "yolo-face's three raw YOLOv8 maps are [1,{RAW_CHANNELS},H/s,W/s] at \
                         strides 8, 16, 32; no output is {want:?} (stride {}): {}",
                        level.stride,
                        shapes.join(", ")
                    )));
                }
            }
        }
        let lengths = graph.outputs.iter().map(|o| o.values()).collect();
        Ok(Raw {
            levels,
            order,
            lengths,
        })
    }
}

impl Decode for Raw {
    fn decode(
        &self,
        outputs: &[Vec<f32>],
        threshold: f32,
        found: &mut Vec<Candidate>,
    ) -> Result<()> {
        check_lengths(outputs, &self.lengths)?;
        let raw_threshold = logit(threshold);
        for (level, &k) in self.levels.iter().zip(&self.order) {
            let map = &outputs[k];
            let cells = level.count();
            let s = level.stride as f32;
            let at = |c: usize, i: usize| map[c * cells + i];
            for i in at_least(map, 4 * BINS * cells, 1, cells, raw_threshold) {
                let raw = at(4 * BINS, i);
                let (gx, gy) = level.cell(i);
                let side = |k: usize| expected_bin((0..BINS).map(|b| at(k * BINS + b, i)));
                let (ax, ay) = (gx + 0.5, gy + 0.5);
                let bbox = [
                    (ax - side(0)) * s,
                    (ay - side(1)) * s,
                    (ax + side(2)) * s,
                    (ay + side(3)) * s,
                ];
                let base = 4 * BINS + 1;
                let points: Five = std::array::from_fn(|j| {
                    [
                        (at(base + 3 * j, i) * 2.0 + gx) * s,
                        (at(base + 3 * j + 1, i) * 2.0 + gy) * s,
                    ]
                });
                found.push(Candidate {
                    bbox,
                    score: sigmoid(raw),
                    points: Some(points),
                });
            }
        }
        Ok(())
    }

    fn gives_points(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        "three raw YOLOv8 maps (distribution boxes), with points".into()
    }
}

/// The expected bin of a softmax over `logits`: a side's distance in cells.
fn expected_bin(logits: impl Iterator<Item = f32> + Clone) -> f32 {
    let most = logits.clone().fold(f32::NEG_INFINITY, f32::max);
    let (mut sum, mut weighted) = (0.0, 0.0);
    for (b, v) in logits.enumerate() {
        let e = (v - most).exp();
        sum += e;
        weighted += e * b as f32;
    }
    weighted / sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_bin_of_two_neighbours() {
        let mut logits = [-30.0f32; BINS];
        logits[3] = 0.75f32.ln();
        logits[4] = 0.25f32.ln();
        assert!((expected_bin(logits.iter().copied()) - 3.25).abs() < 1e-5);
    }
}
