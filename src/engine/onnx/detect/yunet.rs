//! OpenCV's YuNet (`cv2.FaceDetectorYN`; opencv_zoo's
//! face_detection_yunet_2023mar), read as `modules/objdetect/src/
//! face_detect.cpp` reads it: twelve outputs, `cls_8/16/32` and
//! `obj_8/16/32` (`[1,N,1]`, sigmoid in the graph), `bbox_8/16/32`
//! (`[1,N,4]`) and `kps_8/16/32` (`[1,N,10]`), one anchor a place, place
//! `r * cols + c`. Score = sqrt(cls x obj), each clamped to 0..1; box centre
//! (c + dx, r + dy) x s, size exp(dw, dh) x s; points (c + px, r + py) x s.
//! Outputs are taken by name where they have these names, else in this
//! order. Input: BGR, 0..255 as they are, the image at the top left of an
//! input padded to a multiple of 32 (letterboxed here, 640x640 where free);
//! threshold 0.9, NMS 0.3 (its defaults).

use super::grid::{levels, Level};
use super::{
    at_least, check_lengths, Candidate, Decode, Family, Graph, Misfit, Placement, Reference, Sizing,
};
use crate::engine::onnx::settings::Normalize;
use crate::error::Result;

const STRIDES: [usize; 3] = [8, 16, 32];
/// The four groups of outputs, in order, with their values a place.
const GROUPS: [(&str, usize); 4] = [("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10)];

pub static FAMILY: Family = Family {
    name: "yunet",
    reference: Reference {
        size: Some((640, 640)),
        placement: Placement::LetterboxTopLeft,
        sizing: Sizing::Round,
        fill: 0,
        norm: Normalize {
            rgb: false,
            mean: [0.0; 3],
            scale: 1.0,
        },
        threshold: 0.9,
        nms_iou: 0.3,
    },
    fit,
};

fn fit(graph: &Graph) -> std::result::Result<Box<dyn Decode>, Misfit> {
    let n = graph.outputs.len();
    if n != 12 {
        return Err(Misfit::far(format!(
            "yunet has 12 outputs (cls, obj, bbox, kps at strides 8, 16, 32), not {n}"
        )));
    }
    let levels = levels(&STRIDES, graph.size, 1);
    let by_name = GROUPS.iter().all(|(g, _)| {
        STRIDES
            .iter()
            .all(|s| graph.named(&format!("{g}_{s}")).is_some())
    });
    let mut order = Vec::with_capacity(12);
    for (g, &(group, width)) in GROUPS.iter().enumerate() {
        for (k, level) in levels.iter().enumerate() {
            let index = match by_name {
                true => graph
                    .named(&format!("{group}_{}", level.stride))
                    .unwrap_or(0),
                false => g * 3 + k,
            };
            let output = &graph.outputs[index];
            if output.item_shape() != [level.count(), width] {
                return Err(Misfit::near(format!(
                    "yunet: output {index} ({}, read as {group}_{}) is {:?}; at a {}x{} \
                     input it would be [1,{},{width}]",
                    output.name,
                    level.stride,
                    output.shape,
                    graph.size.0,
                    graph.size.1,
                    level.count()
                )));
            }
            order.push(index);
        }
    }
    let lengths = graph.outputs.iter().map(|o| o.values()).collect();
    Ok(Box::new(Decoder {
        levels,
        order,
        lengths,
        by_name,
    }))
}

struct Decoder {
    levels: Vec<Level>,
    /// The output of each group's each stride: cls 8/16/32, obj, bbox, kps.
    order: Vec<usize>,
    lengths: Vec<usize>,
    by_name: bool,
}

impl Decode for Decoder {
    fn decode(
        &self,
        outputs: &[Vec<f32>],
        threshold: f32,
        found: &mut Vec<Candidate>,
    ) -> Result<()> {
        check_lengths(outputs, &self.lengths)?;
        let k = self.levels.len();
        for (l, level) in self.levels.iter().enumerate() {
            let [cls, obj, bbox, kps] = [0, 1, 2, 3].map(|g| &outputs[self.order[g * k + l]]);
            let s = level.stride as f32;
            // sqrt(cls x obj) >= t exactly when cls x obj >= t^2: the root
            // only for the faces.
            let least = threshold * threshold;
            // obj is at most 1: a place whose cls is below t^2 cannot pass.
            for i in at_least(cls, 0, 1, level.count(), least) {
                let product = cls[i].clamp(0.0, 1.0) * obj[i].clamp(0.0, 1.0);
                if product < least {
                    continue;
                }
                let score = product.sqrt();
                let (c, r) = level.cell(i);
                let b = &bbox[4 * i..4 * i + 4];
                let (cx, cy) = ((c + b[0]) * s, (r + b[1]) * s);
                let (w, h) = (b[2].exp() * s, b[3].exp() * s);
                let p = &kps[10 * i..10 * i + 10];
                found.push(Candidate {
                    bbox: [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0],
                    score,
                    points: Some(std::array::from_fn(|j| {
                        [(c + p[2 * j]) * s, (r + p[2 * j + 1]) * s]
                    })),
                });
            }
        }
        Ok(())
    }

    fn gives_points(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!(
            "12 outputs{}, strides 8/16/32, with points",
            if self.by_name {
                " by name"
            } else {
                " in order"
            }
        )
    }
}
