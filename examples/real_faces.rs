//! Real faces for the matching bench (`benches/matching/data.py --kind
//! real`): each sample photo's largest face, and the photo changed as
//! another camera or a crop changes it (flipped, cropped to the face,
//! blurred, scaled down), embedded by the ONNX engine with the `face_onnx`
//! model's settings, as the server embeds them. The five people of
//! group5.jpg are cut out first, one photo each. Writes into OUT_DIR:
//! `real.f32` (rows of 512 little-endian f32), `person.i64` (the person of
//! each row) and `rows.json` (photo and change of each row).
//!
//! `cargo run --release --example real_faces -- OUT_DIR`
//! (photos from `FACE_PHOTOS`, default assets/photos; models from
//! `FACE_ONNX_DIR`, default assets/onnx).

#[path = "../benches/common/face_onnx.rs"]
mod face_onnx;

use std::path::{Path, PathBuf};

use image::{imageops, RgbImage};
use triton_face::engine::onnx::OnnxEngine;
use triton_face::engine::Engine;
use triton_face::pipeline::{BoxPx, Face, Frame, Wanted};

/// The people and their photos; group5.jpg's people follow.
const PEOPLE: [(&str, &[&str]); 2] = [
    (
        "obama",
        &[
            "obama.jpg",
            "obama2.jpg",
            "obama3.jpg",
            "obama_partial_face.jpg",
            "obama_partial_face2.jpg",
        ],
    ),
    ("biden", &["biden.jpg"]),
];
const GROUP: &str = "group5.jpg";

type Change = fn(&RgbImage, BoxPx) -> RgbImage;

/// What happens to a photo between enrollment and a camera: each row of
/// the output is one photo with one of these.
const CHANGES: [(&str, Change); 8] = [
    ("as taken", |im, _| im.clone()),
    ("flipped", |im, _| imageops::flip_horizontal(im)),
    ("face and half its size around", |im, b| around(im, b, 0.5)),
    ("face and a quarter around", |im, b| around(im, b, 0.25)),
    ("blurred 1.5 px", |im, _| imageops::blur(im, 1.5)),
    ("blurred 3 px", |im, _| imageops::blur(im, 3.0)),
    ("half size", |im, _| scaled(im, 0.5)),
    ("flipped, blurred 2 px, 0.7 size", |im, _| {
        scaled(&imageops::blur(&imageops::flip_horizontal(im), 2.0), 0.7)
    }),
];

fn scaled(im: &RgbImage, f: f32) -> RgbImage {
    let w = ((im.width() as f32 * f).round() as u32).max(1);
    let h = ((im.height() as f32 * f).round() as u32).max(1);
    imageops::resize(im, w, h, imageops::FilterType::Triangle)
}

/// `b` grown by `margin` of its size on every side, within the image.
fn around(im: &RgbImage, b: BoxPx, margin: f32) -> RgbImage {
    let (w, h) = (b.right - b.left, b.bottom - b.top);
    let left = (b.left - margin * w).max(0.0) as u32;
    let top = (b.top - margin * h).max(0.0) as u32;
    let right = ((b.right + margin * w) as u32).min(im.width());
    let bottom = ((b.bottom + margin * h) as u32).min(im.height());
    imageops::crop_imm(im, left, top, right - left, bottom - top).to_image()
}

fn faces(engine: &mut OnnxEngine, im: &RgbImage, limit: usize) -> Vec<Face> {
    let frame = Frame {
        width: im.width(),
        height: im.height(),
        rgb: im.as_raw().as_slice().into(),
    };
    let mut results = engine.analyze(&[(&frame, Wanted::all(limit))]);
    results
        .pop()
        .and_then(|r| r.ok())
        .map_or_else(Vec::new, |a| a.faces)
}

fn area(b: &BoxPx) -> f32 {
    (b.right - b.left) * (b.bottom - b.top)
}

fn largest(faces: Vec<Face>) -> Option<Face> {
    faces
        .into_iter()
        .max_by(|a, b| area(&a.bbox).total_cmp(&area(&b.bbox)))
}

fn main() {
    let out = PathBuf::from(std::env::args().nth(1).expect("usage: real_faces OUT_DIR"));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let from_env = |var: &str, default: &str| {
        std::env::var_os(var).map_or_else(|| repo.join(default), PathBuf::from)
    };
    let photos = from_env("FACE_PHOTOS", "assets/photos");
    let settings = face_onnx::onnx_settings(&from_env("FACE_ONNX_DIR", "assets/onnx"));
    let limit = settings.max_faces_per_image;
    let mut engine = OnnxEngine::load(&settings.onnx).expect("load the ONNX models");
    let open = |name: &str| {
        image::open(photos.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e} (run scripts/setup.sh)"))
            .to_rgb8()
    };
    // (person, photo name, image)
    let mut taken: Vec<(usize, String, RgbImage)> = Vec::new();
    for (person, (_, names)) in PEOPLE.iter().enumerate() {
        taken.extend(names.iter().map(|n| (person, n.to_string(), open(n))));
    }
    let group = open(GROUP);
    let mut in_group = faces(&mut engine, &group, limit);
    in_group.sort_by(|a, b| a.bbox.left.total_cmp(&b.bbox.left));
    assert_eq!(in_group.len(), 5, "{GROUP}: five people expected");
    for (i, f) in in_group.iter().enumerate() {
        let name = format!("{GROUP} person {}", i + 1);
        taken.push((PEOPLE.len() + i, name, around(&group, f.bbox, 1.0)));
    }
    let (mut values, mut persons, mut rows) = (Vec::new(), Vec::new(), Vec::new());
    for (person, name, im) in &taken {
        let face = largest(faces(&mut engine, im, limit))
            .unwrap_or_else(|| panic!("{name}: no face as taken"));
        for (change, apply) in CHANGES {
            let Some(f) = largest(faces(&mut engine, &apply(im, face.bbox), limit)) else {
                eprintln!("{name}, {change}: no face found (left out)");
                continue;
            };
            values.extend(f.embedding.iter().flat_map(|v| v.to_le_bytes()));
            persons.extend((*person as i64).to_le_bytes());
            rows.push(serde_json::json!({"person": person, "photo": name, "change": change}));
        }
    }
    std::fs::create_dir_all(&out).expect("create OUT_DIR");
    std::fs::write(out.join("real.f32"), values).expect("write real.f32");
    std::fs::write(out.join("person.i64"), persons).expect("write person.i64");
    let listed = serde_json::to_vec_pretty(&rows).expect("rows as JSON");
    std::fs::write(out.join("rows.json"), listed).expect("write rows.json");
    eprintln!(
        "{} real faces of {} people into {}",
        rows.len(),
        PEOPLE.len() + 5,
        out.display()
    );
}
