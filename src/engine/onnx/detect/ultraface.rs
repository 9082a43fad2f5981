//! UltraFace / RFB (Ultra-Light-Fast-Generic-Face-Detector; the sample
//! detector): scores `[1,N,2]` (background, face; softmax in the graph) and
//! boxes `[1,N,4]` (corner form, 0..1 of the input; decoded in the graph).
//! No points: a `landmark_model` gives them. Input stretched to the model's
//! size (320x240 where free), RGB, (v - 127) / 128; threshold 0.7, NMS 0.3.

use super::{
    check_lengths, Candidate, Decode, Family, Graph, Misfit, Placement, Reference, Sizing,
};
use crate::engine::onnx::settings::Normalize;
use crate::error::Result;

pub static FAMILY: Family = Family {
    name: "ultraface",
    reference: Reference {
        size: Some((320, 240)),
        placement: Placement::Stretch,
        sizing: Sizing::Round,
        fill: 0,
        norm: Normalize {
            rgb: true,
            mean: [127.0; 3],
            scale: 1.0 / 128.0,
        },
        threshold: 0.7,
        nms_iou: 0.3,
    },
    fit,
};

fn fit(graph: &Graph) -> std::result::Result<Box<dyn Decode>, Misfit> {
    let [a, b] = graph.outputs.as_slice() else {
        return Err(Misfit::far(format!(
            "ultraface has 2 outputs (scores [1,N,2], boxes [1,N,4]), not {}",
            graph.outputs.len()
        )));
    };
    let (a_shape, b_shape) = (a.item_shape(), b.item_shape());
    let (scores, n) = match (a_shape, b_shape) {
        ([n, 2], [m, 4]) if n == m => (0, *n),
        ([n, 4], [m, 2]) if n == m => (1, *n),
        _ => {
            return Err(Misfit::near(format!(
                "ultraface reads scores [1,N,2] and boxes [1,N,4]; the outputs are {:?} \
                 and {:?}",
                a.shape, b.shape
            )))
        }
    };
    Ok(Box::new(Decoder {
        scores,
        n,
        size: graph.size,
    }))
}

struct Decoder {
    /// Which output holds the scores (the other holds the boxes).
    scores: usize,
    n: usize,
    size: (usize, usize),
}

impl Decode for Decoder {
    fn decode(
        &self,
        outputs: &[Vec<f32>],
        threshold: f32,
        found: &mut Vec<Candidate>,
    ) -> Result<()> {
        let mut want = [2 * self.n, 4 * self.n];
        if self.scores == 1 {
            want.reverse();
        }
        check_lengths(outputs, &want)?;
        let (scores, boxes) = (&outputs[self.scores], &outputs[1 - self.scores]);
        let (w, h) = (self.size.0 as f32, self.size.1 as f32);
        for i in 0..self.n {
            let score = scores[2 * i + 1];
            if score < threshold {
                continue;
            }
            let b = &boxes[4 * i..4 * i + 4];
            found.push(Candidate {
                bbox: [b[0] * w, b[1] * h, b[2] * w, b[3] * h],
                score,
                points: None,
            });
        }
        Ok(())
    }

    fn gives_points(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        format!("{} boxes, no points", self.n)
    }
}
