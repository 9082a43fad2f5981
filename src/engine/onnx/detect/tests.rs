//! Each family's decoder on outputs written by hand in its layout: one face
//! planted at a known place (a stride, a cell, an anchor), read back where
//! the family's reference code puts it. And `auto`'s choice of family.

use std::path::Path;

use super::choose::{auto, find, fit};
use super::{Candidate, Graph, Output};
use crate::engine::onnx::ops::Layout;

/// A graph of a 64x64 NCHW input with outputs of these names and shapes.
fn graph(outputs: &[(&str, &[usize])]) -> Graph {
    graph_at((64, 64), Layout::Nchw, outputs)
}

fn graph_at(size: (usize, usize), layout: Layout, outputs: &[(&str, &[usize])]) -> Graph {
    Graph {
        size,
        layout,
        outputs: (outputs.iter())
            .map(|(name, shape)| Output {
                name: name.to_string(),
                shape: shape.to_vec(),
            })
            .collect(),
    }
}

/// Zeros for every output of `graph`.
fn zeros(graph: &Graph) -> Vec<Vec<f32>> {
    graph
        .outputs
        .iter()
        .map(|o| vec![0.0; o.values()])
        .collect()
}

/// The candidates `family` reads from `outputs` at `threshold`.
fn decode(family: &str, graph: &Graph, outputs: &[Vec<f32>], threshold: f32) -> Vec<Candidate> {
    let decoder = fit(find(family).unwrap(), graph, Path::new("m.onnx")).unwrap();
    let mut found = Vec::new();
    decoder.decode(outputs, threshold, &mut found).unwrap();
    found
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-3, "{got:?} against {want:?}");
    }
}

fn the_one(found: Vec<Candidate>) -> Candidate {
    assert_eq!(found.len(), 1, "{found:?}");
    found.into_iter().next().unwrap()
}

#[test]
fn scrfd_reads_its_strides_anchors_and_points() {
    // 64x64, strides 8/16/32, two anchors a place: 128, 32, 8 rows.
    let shapes: [&[usize]; 9] = [
        &[128, 1],
        &[32, 1],
        &[8, 1],
        &[128, 4],
        &[32, 4],
        &[8, 4],
        &[128, 10],
        &[32, 10],
        &[8, 10],
    ];
    let names = [
        "448", "471", "494", "451", "474", "497", "454", "477", "500",
    ];
    let g = graph(&names.iter().copied().zip(shapes).collect::<Vec<_>>());
    let mut out = zeros(&g);
    // Stride 16, cell x=1 y=2, anchor 1: row (2 * 4 + 1) * 2 + 1 = 19, at (16, 32).
    out[1][19] = 0.9;
    out[4][19 * 4..19 * 4 + 4].copy_from_slice(&[1.0, 1.0, 2.0, 2.0]);
    out[7][19 * 10..19 * 10 + 10].copy_from_slice(&[0.5; 10]);
    let face = the_one(decode("scrfd", &g, &out, 0.5));
    close(&face.bbox, &[0.0, 16.0, 48.0, 64.0]);
    close(&face.points.unwrap().concat(), &[24.0, 40.0].repeat(5));
    assert_eq!(face.score, 0.9);
    // Batched exports read the same; without points, six outputs.
    let batched: Vec<Vec<usize>> = shapes.iter().map(|s| [&[1][..], s].concat()).collect();
    let b = graph(
        &names
            .iter()
            .zip(&batched)
            .map(|(n, s)| (*n, s.as_slice()))
            .collect::<Vec<_>>(),
    );
    assert_eq!(the_one(decode("scrfd", &b, &out, 0.5)).bbox, face.bbox);
    let six = graph(&names[..6].iter().copied().zip(shapes).collect::<Vec<_>>());
    let plain = the_one(decode("scrfd", &six, &out[..6], 0.5));
    assert_eq!((plain.bbox, plain.points), (face.bbox, None));
}

#[test]
fn retinaface_reads_priors_with_variances() {
    // 64x64: 8x8, 4x4, 2x2 places, two prior sizes each: 168 priors.
    let g = graph(&[
        ("output0", &[1, 168, 4]),
        ("conf", &[1, 168, 2]),
        ("landms", &[1, 168, 10]),
    ]);
    let mut out = zeros(&g);
    // Stride 8, cell x=3 y=1, the second size (32): row (1 * 8 + 3) * 2 + 1 = 23,
    // the prior centred at (28, 12).
    out[1][23 * 2 + 1] = 0.95;
    out[0][23 * 4..23 * 4 + 4].copy_from_slice(&[1.0, -1.0, 0.0, 5.0f32.ln() / 1.0]);
    out[2][23 * 10..23 * 10 + 2].copy_from_slice(&[2.5, 0.0]);
    let face = the_one(decode("retinaface", &g, &out, 0.6));
    // Centre (28 + 0.1 * 32, 12 - 0.1 * 32); width 32, height 32 * 5^0.2.
    let h = 32.0 * 5.0f32.powf(0.2);
    close(&face.bbox, &[15.2, 8.8 - h / 2.0, 47.2, 8.8 + h / 2.0]);
    close(&face.points.unwrap()[0], &[36.0, 12.0]);
    // insightface's RetinaFace is SCRFD's layout, with SCRFD's preparation.
    let per_stride = graph(&[
        ("a", &[128, 1]),
        ("b", &[32, 1]),
        ("c", &[8, 1]),
        ("d", &[128, 4]),
        ("e", &[32, 4]),
        ("f", &[8, 4]),
    ]);
    let decoder = fit(find("retinaface").unwrap(), &per_stride, Path::new("m")).unwrap();
    assert!(decoder
        .reference()
        .is_some_and(|r| r.norm.mean == [127.5; 3]));
}

#[test]
fn yunet_reads_its_twelve_outputs_by_name() {
    let mut outputs: Vec<(String, Vec<usize>)> = Vec::new();
    for (group, width) in [("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10)] {
        for (stride, places) in [(8, 64), (16, 16), (32, 4)] {
            outputs.push((format!("{group}_{stride}"), vec![1, places, width]));
        }
    }
    // Shuffled: the names say which is which.
    outputs.reverse();
    let g = graph(
        &outputs
            .iter()
            .map(|(n, s)| (n.as_str(), s.as_slice()))
            .collect::<Vec<_>>(),
    );
    let at = |name: &str| g.named(name).unwrap();
    let mut out = zeros(&g);
    // Stride 16, column 2, row 1: place 6.
    out[at("cls_16")][6] = 0.81;
    out[at("obj_16")][6] = 1.0;
    out[at("bbox_16")][24..28].copy_from_slice(&[0.5, 0.5, 2.0f32.ln(), 2.0f32.ln()]);
    let face = the_one(decode("yunet", &g, &out, 0.85));
    close(&face.bbox, &[24.0, 8.0, 56.0, 40.0]);
    close(&face.points.unwrap()[0], &[32.0, 16.0]);
    close(&[face.score], &[0.9]);
}

#[test]
fn blazeface_reads_anchors_at_cell_centres() {
    let g = graph_at(
        (128, 128),
        Layout::Nhwc,
        &[
            ("Identity:0", &[1, 512, 1]),
            ("Identity_1:0", &[1, 384, 1]),
            ("Identity_2:0", &[1, 512, 16]),
            ("Identity_3:0", &[1, 384, 16]),
        ],
    );
    let mut out = zeros(&g);
    out[0].fill(-10.0);
    out[1].fill(-10.0);
    // The first map (16x16, 2 anchors), cell x=5 y=3, anchor 1: anchor 107 at (44, 28).
    out[0][107] = 5.0;
    let r = [
        2.0, -2.0, 20.0, 20.0, -5.0, -3.0, 5.0, -3.0, 0.0, 0.0, 0.0, 5.0, -9.0, 0.0, 9.0, 0.0,
    ];
    out[2][107 * 16..108 * 16].copy_from_slice(&r);
    let face = the_one(decode("blazeface", &g, &out, 0.75));
    close(&face.bbox, &[36.0, 16.0, 56.0, 36.0]);
    let five = face.points.unwrap();
    close(&five[..3].concat(), &[39.0, 25.0, 49.0, 25.0, 44.0, 28.0]);
    // The mouth corners either side of its centre (44, 33), along the eyes.
    assert!((five[3][0] + five[4][0]) / 2.0 - 44.0 < 1e-4 && five[3][1] == 33.0);
    assert!(five[3][0] < five[4][0]);
    close(&[face.score], &[1.0 / (1.0 + (-5.0f32).exp())]);
    // The second map (8x8, 6 anchors): anchor 512 + (1 * 8 + 2) * 6 = 572 at (40, 24).
    let mut out = zeros(&g);
    out[0].fill(-10.0);
    out[1].fill(-10.0);
    out[1][60] = 3.0;
    out[3][60 * 16 + 2..60 * 16 + 4].copy_from_slice(&[10.0, 10.0]);
    close(
        &the_one(decode("blazeface", &g, &out, 0.75)).bbox,
        &[35.0, 19.0, 45.0, 29.0],
    );
}

#[test]
fn yolo_face_reads_decoded_rows_raw_maps_and_nms_rows() {
    // 64x64: 64 + 16 + 4 places.
    let v5 = graph(&[("output", &[1, 252, 16])]);
    let mut out = zeros(&v5);
    let row: Vec<f32> = [30.0, 20.0, 10.0, 12.0, 0.9]
        .into_iter()
        .chain((0..10).map(|k| k as f32))
        .chain([0.8])
        .collect();
    out[0][16 * 10..16 * 11].copy_from_slice(&row);
    let face = the_one(decode("yolo-face", &v5, &out, 0.5));
    close(&face.bbox, &[25.0, 14.0, 35.0, 26.0]);
    close(&face.points.unwrap()[4], &[8.0, 9.0]);
    close(&[face.score], &[0.72]);

    // Ultralytics' pose rows, channel-major.
    let v8 = graph(&[("output0", &[1, 20, 84])]);
    let mut out = zeros(&v8);
    for (c, v) in [
        (0, 30.0),
        (1, 20.0),
        (2, 10.0),
        (3, 12.0),
        (4, 0.9),
        (5, 1.0),
        (6, 2.0),
        (7, 0.9),
    ] {
        out[0][c * 84 + 7] = v;
    }
    let face = the_one(decode("yolo-face", &v8, &out, 0.5));
    close(&face.bbox, &[25.0, 14.0, 35.0, 26.0]);
    close(&face.points.unwrap()[0], &[1.0, 2.0]);

    // derronqi's raw maps, out of stride order.
    let raw = graph(&[
        ("a", &[1, 80, 4, 4]),
        ("output0", &[1, 80, 8, 8]),
        ("b", &[1, 80, 2, 2]),
    ]);
    let mut out = zeros(&raw);
    out.iter_mut().for_each(|o| o.fill(-30.0));
    // Stride 16 (output 0), cell x=1 y=2: place 9 of 16.
    let map = &mut out[0];
    for (side, d) in [1.5f32, 1.0, 2.0, 0.5].into_iter().enumerate() {
        let (n, f) = (d.floor() as usize, d - d.floor());
        map[(side * 16 + n) * 16 + 9] = (1.0 - f).ln();
        if f > 0.0 {
            map[(side * 16 + n + 1) * 16 + 9] = f.ln();
        }
    }
    map[64 * 16 + 9] = 3.0;
    map[65 * 16 + 9] = 0.25;
    map[66 * 16 + 9] = 0.5;
    let face = the_one(decode("yolo-face", &raw, &out, 0.5));
    close(&face.bbox, &[0.0, 24.0, 56.0, 48.0]);
    close(&face.points.unwrap()[0], &[24.0, 48.0]);

    // NMS in the graph: any number of rows, the rest scored 0.
    let nms = graph(&[("output0", &[1, 3, 21])]);
    let mut out = zeros(&nms);
    out[0][21..27].copy_from_slice(&[1.0, 2.0, 11.0, 12.0, 0.8, 0.0]);
    out[0][27..30].copy_from_slice(&[5.0, 6.0, 0.9]);
    let face = the_one(decode("yolo-face", &nms, &out, 0.5));
    close(&face.bbox, &[1.0, 2.0, 11.0, 12.0]);
    close(&face.points.unwrap()[0], &[5.0, 6.0]);
}

#[test]
fn ultraface_reads_scores_and_corner_boxes_in_either_order() {
    let g = graph(&[("boxes", &[1, 3, 4]), ("scores", &[1, 3, 2])]);
    let mut out = zeros(&g);
    out[1][2 * 2 + 1] = 0.8;
    out[0][8..12].copy_from_slice(&[0.25, 0.5, 0.75, 1.0]);
    let face = the_one(decode("ultraface", &g, &out, 0.7));
    close(&face.bbox, &[16.0, 32.0, 48.0, 64.0]);
    assert_eq!(face.points, None);
}

#[test]
fn auto_names_the_one_family_and_explains_the_rest() {
    let path = Path::new("d.onnx");
    let named = |g: &Graph| auto(g, path).map(|(f, _)| f.name);
    let scrfd = graph(&[
        ("a", &[128, 1]),
        ("b", &[32, 1]),
        ("c", &[8, 1]),
        ("d", &[128, 4]),
        ("e", &[32, 4]),
        ("f", &[8, 4]),
    ]);
    // SCRFD's layout is insightface's RetinaFace's too: the first family names it.
    assert_eq!(named(&scrfd).unwrap(), "scrfd");
    assert_eq!(named(&graph(&[("o", &[1, 252, 16])])).unwrap(), "yolo-face");
    assert_eq!(
        named(&graph(&[("s", &[1, 9, 2]), ("b", &[1, 9, 4])])).unwrap(),
        "ultraface"
    );
    // Six outputs of the wrong sizes: close to SCRFD, said so with what was seen.
    let off = graph(&[
        ("a", &[100, 1]),
        ("b", &[32, 1]),
        ("c", &[8, 1]),
        ("d", &[128, 4]),
        ("e", &[32, 4]),
        ("f", &[8, 4]),
    ]);
    let e = auto(&off, path).err().unwrap().to_string();
    assert!(
        e.contains("no detector family reads") && e.contains("scrfd:"),
        "{e}"
    );
    assert!(e.contains("6 outputs: a [100,1]"), "{e}");
    // A family that does not fit names the one that does.
    let e = fit(find("yunet").unwrap(), &scrfd, path)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("yunet does not fit") && e.contains("layout of scrfd"),
        "{e}"
    );
}
