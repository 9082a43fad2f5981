//! RetinaFace. The PyTorch export (biubug6/Pytorch_Retinaface and its
//! forks): three outputs `loc [1,N,4]`, `conf [1,N,2]` (softmax in the
//! graph; column 1 the face) and `landms [1,N,10]`, over priors of sizes
//! 16/32, 64/128, 256/512 at strides 8, 16, 32 (`layers/functions/
//! prior_box.py`: cell by cell, row by row, the two sizes together, centred
//! in the cell), decoded with variances 0.1 and 0.2 (`utils/box_utils.py`);
//! input BGR less (104, 117, 123), unscaled, letterboxed at the top left,
//! 640x640 where free; threshold 0.6 (its `vis_thres`), NMS 0.4.
//! insightface's RetinaFace exports (`model_zoo/retinaface.py`) are in
//! SCRFD's per-stride layout and read as SCRFD reads them.

use super::grid::{levels, Level};
use super::scrfd::{self, PerStride};
use super::{
    at_least, check_lengths, Candidate, Decode, Family, Graph, Misfit, Placement, Reference, Sizing,
};
use crate::engine::onnx::settings::Normalize;
use crate::error::Result;

const STRIDES: [usize; 3] = [8, 16, 32];
/// The prior sizes (input pixels) of each stride, in row order.
const SIZES: [[f32; 2]; 3] = [[16.0, 32.0], [64.0, 128.0], [256.0, 512.0]];
const VARIANCES: [f32; 2] = [0.1, 0.2];

pub static FAMILY: Family = Family {
    name: "retinaface",
    reference: Reference {
        size: Some((640, 640)),
        placement: Placement::LetterboxTopLeft,
        sizing: Sizing::Round,
        fill: 0,
        norm: Normalize {
            rgb: false,
            mean: [104.0, 117.0, 123.0],
            scale: 1.0,
        },
        threshold: 0.6,
        nms_iou: 0.4,
    },
    fit,
};

fn fit(graph: &Graph) -> std::result::Result<Box<dyn Decode>, Misfit> {
    if graph.outputs.len() != 3 {
        // insightface's RetinaFace: SCRFD's layout and preparation.
        return match PerStride::fit(graph, "retinaface") {
            Ok(per_stride) => Ok(Box::new(InsightFace(per_stride))),
            Err(misfit) => Err(Misfit {
                why: format!(
                    "retinaface has 3 outputs (loc [1,N,4], conf [1,N,2], landms \
                     [1,N,10]) or insightface's per-stride layout ({})",
                    misfit.why
                ),
                ..misfit
            }),
        };
    }
    Priors::fit(graph).map(|p| Box::new(p) as Box<dyn Decode>)
}

/// The PyTorch export: which output is which, over the priors of the input.
struct Priors {
    levels: Vec<Level>,
    /// Output index of loc, conf, landms.
    order: [usize; 3],
    n: usize,
}

impl Priors {
    fn fit(graph: &Graph) -> std::result::Result<Self, Misfit> {
        let levels = levels(&STRIDES, graph.size, 2);
        let n: usize = levels.iter().map(Level::count).sum();
        let mut order = [usize::MAX; 3];
        for (i, o) in graph.outputs.iter().enumerate() {
            let role = match o.item_shape() {
                [rows, 4] if *rows == n => 0,
                [rows, 2] if *rows == n => 1,
                [rows, 10] if *rows == n => 2,
                _ => continue,
            };
            order[role] = i;
        }
        if order.contains(&usize::MAX) {
            let shapes: Vec<String> = graph
                .outputs
                .iter()
                .map(|o| format!("{:?}", o.shape))
                .collect();
            return Err(Misfit::near(format!(
                "retinaface reads loc [1,{n},4], conf [1,{n},2] and landms [1,{n},10] for a \
                 {}x{} input ({n} priors); the outputs are {}",
                graph.size.0,
                graph.size.1,
                shapes.join(", ")
            )));
        }
        Ok(Priors { levels, order, n })
    }
}

impl Decode for Priors {
    fn decode(
        &self,
        outputs: &[Vec<f32>],
        threshold: f32,
        found: &mut Vec<Candidate>,
    ) -> Result<()> {
        let mut want = [0; 3];
        for (role, width) in [4, 2, 10].into_iter().enumerate() {
            want[self.order[role]] = self.n * width;
        }
        check_lengths(outputs, &want)?;
        let [loc, conf, landms] = self.order.map(|k| &outputs[k]);
        let mut start = 0;
        for (level, sizes) in self.levels.iter().zip(SIZES) {
            let s = level.stride as f32;
            for i in at_least(conf, 2 * start + 1, 2, level.count(), threshold) {
                let row = start + i;
                let score = conf[2 * row + 1];
                let (x, y) = level.cell(i);
                let (px, py) = ((x + 0.5) * s, (y + 0.5) * s);
                let side = sizes[i % 2];
                let l = &loc[4 * row..4 * row + 4];
                let (cx, cy) = (
                    px + l[0] * VARIANCES[0] * side,
                    py + l[1] * VARIANCES[0] * side,
                );
                let (w, h) = (
                    side * (l[2] * VARIANCES[1]).exp(),
                    side * (l[3] * VARIANCES[1]).exp(),
                );
                let m = &landms[10 * row..10 * row + 10];
                let points = std::array::from_fn(|j| {
                    [
                        px + m[2 * j] * VARIANCES[0] * side,
                        py + m[2 * j + 1] * VARIANCES[0] * side,
                    ]
                });
                found.push(Candidate {
                    bbox: [cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0],
                    score,
                    points: Some(points),
                });
            }
            start += level.count();
        }
        Ok(())
    }

    fn gives_points(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!("loc/conf/landms over {} priors, with points", self.n)
    }
}

/// insightface's RetinaFace: SCRFD's decoder, and SCRFD's preparation.
struct InsightFace(PerStride);

impl Decode for InsightFace {
    fn decode(
        &self,
        outputs: &[Vec<f32>],
        threshold: f32,
        found: &mut Vec<Candidate>,
    ) -> Result<()> {
        self.0.decode(outputs, threshold, found)
    }

    fn gives_points(&self) -> bool {
        self.0.gives_points()
    }

    fn describe(&self) -> String {
        self.0.describe()
    }

    fn reference(&self) -> Option<Reference> {
        Some(scrfd::FAMILY.reference)
    }
}
