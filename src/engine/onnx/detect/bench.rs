//! Each family's decoding timed without a model (benches/decode.rs): a
//! 640x480 frame's outputs at the family's reference input, with no face
//! (the scan of every candidate) and with five faces of nine candidates each
//! among background, read as the detector reads them (decoded, mapped to
//! the frame, best first, overlaps suppressed).

use super::detector::read;
use super::prep::Prep;
use super::{choose, Decode, Graph, Output};
use crate::engine::onnx::ops::{nms, Layout, Region};

/// One family's layout with a frame's outputs.
pub struct Case {
    pub name: &'static str,
    /// The candidates (places and anchors) one frame's outputs hold.
    pub candidates: usize,
    decode: Box<dyn Decode>,
    /// Background only, and with the five faces.
    empty: Vec<Vec<f32>>,
    faces: Vec<Vec<f32>>,
    prep: Prep,
    threshold: f32,
    nms_iou: f32,
}

impl Case {
    /// The frame's outputs (with its five faces or none) read: the faces
    /// found.
    pub fn run(&self, with_faces: bool) -> usize {
        let frame = Region {
            left: 0.0,
            top: 0.0,
            width: 640.0,
            height: 480.0,
        };
        let (mapping, _) = self.prep.mapping(&frame);
        let outputs = if with_faces { &self.faces } else { &self.empty };
        let found = read(&*self.decode, outputs, &mapping, self.threshold)
            .expect("the outputs fit their layout");
        nms(found, self.nms_iou, |f| &f.bbox).len()
    }
}

/// A layout: its family, input, outputs (shape, background value), and how
/// candidate `k` (of the first feature map) is made a face.
struct Spec {
    name: &'static str,
    family: &'static str,
    size: (usize, usize),
    layout: Layout,
    outputs: Vec<(Vec<usize>, f32)>,
    candidates: usize,
    /// Places a row of the first map (the planted faces' clusters).
    cols: usize,
    anchors: usize,
    plant: fn(&mut [Vec<f32>], usize),
}

/// Every family's layouts, as the cases to time.
pub fn cases() -> Vec<Case> {
    layouts().into_iter().map(case).collect()
}

fn case(l: Spec) -> Case {
    let graph = Graph {
        size: l.size,
        layout: l.layout,
        outputs: (l.outputs.iter().enumerate())
            .map(|(i, (shape, _))| Output {
                name: format!("o{i}"),
                shape: shape.clone(),
            })
            .collect(),
    };
    let family = choose::find(l.family).expect("a family");
    let decode = (family.fit)(&graph).unwrap_or_else(|m| panic!("{}: {}", l.name, m.why));
    let empty: Vec<Vec<f32>> = (l.outputs.iter())
        .map(|(shape, fill)| vec![*fill; shape.iter().product()])
        .collect();
    let mut outputs = empty.clone();
    // Five faces, each a 3x3 block of places of the first map.
    for (cx, cy) in [(6, 6), (14, 8), (22, 12), (8, 20), (20, 24)] {
        let cx = cx * l.cols / 40;
        let cy = cy * l.cols / 40;
        for (dx, dy) in (0..3).flat_map(|dx| (0..3).map(move |dy| (dx, dy))) {
            let place = (cy + dy) * l.cols + cx + dx;
            (l.plant)(&mut outputs, place * l.anchors);
        }
    }
    let reference = decode.reference().unwrap_or(family.reference);
    let prep = Prep {
        size: l.size,
        placement: reference.placement,
        sizing: reference.sizing,
        fill: reference.fill,
        norm: reference.norm,
        layout: l.layout,
    };
    Case {
        name: l.name,
        candidates: l.candidates,
        decode,
        empty,
        faces: outputs,
        prep,
        threshold: reference.threshold,
        nms_iou: reference.nms_iou,
    }
}

fn layouts() -> Vec<Spec> {
    [anchor_grids(), keypoint_maps(), yolo_rows()]
        .into_iter()
        .flatten()
        .collect()
}

/// UltraFace, SCRFD and RetinaFace: scores and boxes per anchor of a grid.
fn anchor_grids() -> Vec<Spec> {
    let nchw = Layout::Nchw;
    vec![
        Spec {
            name: "ultraface 320x240",
            family: "ultraface",
            size: (320, 240),
            layout: nchw,
            outputs: vec![(vec![1, 4420, 2], 0.01), (vec![1, 4420, 4], 0.45)],
            candidates: 4420,
            cols: 40,
            anchors: 2,
            plant: |o, k| {
                o[0][2 * k + 1] = 0.95;
                o[1][4 * k + 2..4 * k + 4].copy_from_slice(&[0.55, 0.6]);
            },
        },
        Spec {
            name: "scrfd 640x640 (9 outputs)",
            family: "scrfd",
            size: (640, 640),
            layout: nchw,
            outputs: [12800, 3200, 800]
                .iter()
                .map(|&n| (vec![n, 1], 0.01))
                .chain([12800, 3200, 800].iter().map(|&n| (vec![n, 4], 2.0)))
                .chain([12800, 3200, 800].iter().map(|&n| (vec![n, 10], 0.5)))
                .collect(),
            candidates: 16800,
            cols: 80,
            anchors: 2,
            plant: |o, k| o[0][k] = 0.9,
        },
        Spec {
            name: "retinaface 640x640 (priors)",
            family: "retinaface",
            size: (640, 640),
            layout: nchw,
            outputs: vec![
                (vec![1, 16800, 4], 0.0),
                (vec![1, 16800, 2], 0.01),
                (vec![1, 16800, 10], 0.0),
            ],
            candidates: 16800,
            cols: 80,
            anchors: 2,
            plant: |o, k| o[1][2 * k + 1] = 0.95,
        },
    ]
}

/// YuNet and BlazeFace: outputs per stride with their points.
fn keypoint_maps() -> Vec<Spec> {
    let nchw = Layout::Nchw;
    vec![
        Spec {
            name: "yunet 640x640",
            family: "yunet",
            size: (640, 640),
            layout: nchw,
            outputs: [
                ("cls", 1, 0.01),
                ("obj", 1, 0.01),
                ("bbox", 4, 1.0),
                ("kps", 10, 0.0),
            ]
            .iter()
            .flat_map(|&(_, width, fill)| [6400, 1600, 400].map(|n| (vec![1, n, width], fill)))
            .collect(),
            candidates: 8400,
            cols: 80,
            anchors: 1,
            plant: |o, k| {
                o[0][k] = 0.95;
                o[3][k] = 0.95;
            },
        },
        Spec {
            name: "blazeface 128x128",
            family: "blazeface",
            size: (128, 128),
            layout: Layout::Nhwc,
            outputs: vec![
                (vec![1, 512, 1], -10.0),
                (vec![1, 384, 1], -10.0),
                (vec![1, 512, 16], 40.0),
                (vec![1, 384, 16], 40.0),
            ],
            candidates: 896,
            cols: 16,
            anchors: 2,
            plant: |o, k| o[0][k] = 5.0,
        },
    ]
}

/// YOLO-face: YOLOv5-face rows, YOLOv8 pose rows, YOLOv8 raw maps.
fn yolo_rows() -> Vec<Spec> {
    let nchw = Layout::Nchw;
    vec![
        Spec {
            name: "yolo-face 640x640 (YOLOv5-face rows)",
            family: "yolo-face",
            size: (640, 640),
            layout: nchw,
            outputs: vec![(vec![1, 25200, 16], 0.01)],
            candidates: 25200,
            cols: 80,
            anchors: 1,
            plant: |o, k| {
                let row = &mut o[0][16 * k..16 * k + 16];
                row[..5].copy_from_slice(&[
                    (k % 80 * 8) as f32,
                    (k / 80 * 8) as f32,
                    40.0,
                    40.0,
                    0.9,
                ]);
                row[15] = 1.0;
            },
        },
        Spec {
            name: "yolo-face 640x640 (YOLOv8 pose rows)",
            family: "yolo-face",
            size: (640, 640),
            layout: nchw,
            outputs: vec![(vec![1, 20, 8400], 0.01)],
            candidates: 8400,
            cols: 80,
            anchors: 1,
            plant: |o, k| {
                for (c, v) in [(k % 80 * 8) as f32, (k / 80 * 8) as f32, 40.0, 40.0, 0.9]
                    .into_iter()
                    .enumerate()
                {
                    o[0][c * 8400 + k] = v;
                }
            },
        },
        Spec {
            name: "yolo-face 640x640 (YOLOv8 raw maps)",
            family: "yolo-face",
            size: (640, 640),
            layout: nchw,
            outputs: [80, 40, 20]
                .iter()
                .map(|&n| (vec![1, 80, n, n], -5.0))
                .collect(),
            candidates: 8400,
            cols: 80,
            anchors: 1,
            plant: |o, k| o[0][64 * 6400 + k] = 3.0,
        },
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_case_finds_its_five_faces() {
        for case in super::cases() {
            let found = case.run(true);
            assert!((1..=45).contains(&found), "{}: {found} faces", case.name);
            assert_eq!(case.run(false), 0, "{}", case.name);
        }
    }
}
