//! TEMPORARY: compares the shim-based DlibEngine with the dlib-face-recognition
//! crate (the engine it replaces) on photos: boxes, landmarks, embeddings.
//!
//!     dlib_parity WEIGHTS_DIR hog|cnn PHOTO...
use std::path::Path;

use dlib_face_recognition::{
    FaceDetector, FaceDetectorCnn, FaceDetectorTrait, FaceEncoderNetwork, FaceEncoderTrait,
    ImageMatrix, LandmarkPredictor, LandmarkPredictorTrait,
};
use triton_face::engine::dlib::{DetectorKind, DlibEngine};
use triton_face::pipeline::image::frame_from_encoded;
use triton_face::pipeline::{Engine, Frame};

type Old = (Vec<[i64; 4]>, Vec<Vec<[i64; 2]>>, Vec<Vec<f64>>);

fn old_engine(dir: &Path, cnn: bool, frame: &Frame) -> Old {
    let m = unsafe {
        ImageMatrix::new(
            frame.width as usize,
            frame.height as usize,
            frame.rgb.as_ptr(),
        )
    };
    let rects = if cnn {
        FaceDetectorCnn::open(dir.join("mmod_human_face_detector.dat"))
            .unwrap()
            .face_locations(&m)
    } else {
        FaceDetector::new().face_locations(&m)
    };
    let pred = LandmarkPredictor::open(dir.join("shape_predictor_5_face_landmarks.dat")).unwrap();
    let enc =
        FaceEncoderNetwork::open(dir.join("dlib_face_recognition_resnet_model_v1.dat")).unwrap();
    let shapes: Vec<_> = rects.iter().map(|r| pred.face_landmarks(&m, r)).collect();
    let encs = enc.get_face_encodings(&m, &shapes, 0);
    (
        rects
            .iter()
            .map(|r| [r.left, r.top, r.right, r.bottom])
            .collect(),
        shapes
            .iter()
            .map(|s| s.iter().map(|p| [p.x(), p.y()]).collect())
            .collect(),
        encs.iter().map(|e| e.as_ref().to_vec()).collect(),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = Path::new(&args[1]);
    let cnn = args[2] == "cnn";
    let kind = if cnn {
        DetectorKind::Cnn
    } else {
        DetectorKind::Hog
    };
    let mut engine = DlibEngine::load(dir, kind, 0).unwrap();
    let mut worst = 0f64;
    for photo in &args[3..] {
        let frame =
            frame_from_encoded("photo", &std::fs::read(photo).unwrap(), 40_000_000).unwrap();
        let new = engine.analyze(&[&frame], 64).remove(0).unwrap();
        let (rects, shapes, encs) = old_engine(dir, cnn, &frame);
        assert_eq!(new.len(), rects.len(), "{photo}: face count");
        for (i, f) in new.iter().enumerate() {
            let b = [f.bbox.left, f.bbox.top, f.bbox.right, f.bbox.bottom].map(|v| v as i64);
            assert_eq!(b, rects[i], "{photo}: box {i}");
            let l: Vec<[i64; 2]> = f
                .landmarks
                .iter()
                .map(|p| [p[0] as i64, p[1] as i64])
                .collect();
            assert_eq!(l, shapes[i], "{photo}: landmarks {i}");
            let d = f
                .embedding
                .iter()
                .zip(&encs[i])
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0f64, f64::max);
            worst = worst.max(d);
            println!("{photo}: face {i} box {b:?} landmarks equal, max |embedding diff| {d:e}");
        }
        if new.is_empty() {
            println!("{photo}: no faces in either");
        }
    }
    println!("{} detector: worst max |embedding diff| {worst:e}", args[2]);
}
