//! dlib engine: HOG (default) or MMOD-CNN detector, 5-point shape predictor,
//! and the ResNet that maps a 150x150 aligned chip (padding 0.25) to a 128-d
//! embedding (99.38% on LFW; same person when the Euclidean distance < 0.6).

use std::path::Path;

use dlib_face_recognition::{
    FaceDetector, FaceDetectorCnn, FaceDetectorTrait, FaceEncoderNetwork, FaceEncoderTrait,
    ImageMatrix, LandmarkPredictor, LandmarkPredictorTrait,
};

use super::require_file;
use super::Engine;
use crate::error::{Error, Result};
use crate::pipeline::{BoxPx, Face, Frame, Metric};

pub const RESNET_FILE: &str = "dlib_face_recognition_resnet_model_v1.dat";
pub const SHAPE5_FILE: &str = "shape_predictor_5_face_landmarks.dat";
pub const MMOD_FILE: &str = "mmod_human_face_detector.dat";
/// Smallest image side handed to the CNN detector. Measured: images 9 px wide
/// or 6 px high crash dlib's MMOD network (C++ exception or segfault: the
/// server dies), 10 x 7 does not; 32 keeps a margin.
pub const CNN_MIN_SIDE: u32 = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DetectorKind {
    Hog,
    Cnn,
}

impl DetectorKind {
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "hog" => Some(DetectorKind::Hog),
            "cnn" | "mmod" => Some(DetectorKind::Cnn),
            _ => None,
        }
    }
}

enum Detector {
    Hog(FaceDetector),
    Cnn(Box<FaceDetectorCnn>),
}

pub struct DlibEngine {
    detector: Detector,
    predictor: LandmarkPredictor,
    encoder: FaceEncoderNetwork,
}

// SAFETY: the dlib objects are plain C++ values with no thread affinity; the
// engine is used by one thread at a time (`&mut self`), never shared.
unsafe impl Send for DlibEngine {}

impl DlibEngine {
    /// Load the weights from `dir`; a missing or unreadable file names itself.
    pub fn load(dir: &Path, detector: DetectorKind) -> Result<Self> {
        let open_err = |e: String| Error::unavailable(format!("dlib: {e}"));
        let detector = match detector {
            DetectorKind::Hog => Detector::Hog(FaceDetector::new()),
            DetectorKind::Cnn => Detector::Cnn(Box::new(
                FaceDetectorCnn::open(require_file(dir, MMOD_FILE)?).map_err(open_err)?,
            )),
        };
        let predictor =
            LandmarkPredictor::open(require_file(dir, SHAPE5_FILE)?).map_err(open_err)?;
        let encoder =
            FaceEncoderNetwork::open(require_file(dir, RESNET_FILE)?).map_err(open_err)?;
        Ok(DlibEngine {
            detector,
            predictor,
            encoder,
        })
    }

    fn analyze_one(&mut self, frame: &Frame, max_faces: usize) -> Result<Vec<Face>> {
        if frame.rgb.len() != frame.width as usize * frame.height as usize * 3 {
            return Err(Error::internal("frame buffer does not match its size"));
        }
        // Never hand dlib's MMOD network an image it crashes on; its 40 px
        // detection window finds no face there anyway.
        if matches!(self.detector, Detector::Cnn(_)) && frame.width.min(frame.height) < CNN_MIN_SIDE
        {
            return Ok(Vec::new());
        }
        // SAFETY: the pointer covers width*height*3 bytes, checked above.
        let matrix = unsafe {
            ImageMatrix::new(
                frame.width as usize,
                frame.height as usize,
                frame.rgb.as_ptr(),
            )
        };
        let rects = match &self.detector {
            Detector::Hog(d) => d.face_locations(&matrix),
            Detector::Cnn(d) => d.face_locations(&matrix),
        };
        if rects.len() > max_faces {
            return Err(Error::invalid(format!(
                "found {} faces, more than max_faces_per_image = {max_faces}",
                rects.len()
            )));
        }
        if rects.is_empty() {
            return Ok(Vec::new());
        }
        let shapes: Vec<_> = rects
            .iter()
            .map(|r| self.predictor.face_landmarks(&matrix, r))
            .collect();
        // One network call for all faces of the frame.
        let encodings = self.encoder.get_face_encodings(&matrix, &shapes, 0);
        if encodings.len() != rects.len() {
            return Err(Error::internal(
                "dlib returned a different number of embeddings than faces",
            ));
        }
        Ok(rects
            .iter()
            .zip(shapes.iter())
            .zip(encodings.iter())
            .map(|((r, shape), enc)| {
                let mut landmarks = [[0f32; 2]; 5];
                for (dst, p) in landmarks.iter_mut().zip(shape.iter()) {
                    *dst = [p.x() as f32, p.y() as f32];
                }
                Face {
                    bbox: BoxPx {
                        left: r.left as f32,
                        top: r.top as f32,
                        right: r.right as f32,
                        bottom: r.bottom as f32,
                    },
                    score: None,
                    landmarks,
                    embedding: enc.as_ref().iter().map(|v| *v as f32).collect(),
                }
            })
            .collect())
    }
}

impl Engine for DlibEngine {
    fn name(&self) -> &str {
        "dlib"
    }
    fn metric(&self) -> Metric {
        Metric::Euclidean
    }
    fn describe(&self) -> String {
        let detector = match self.detector {
            Detector::Hog(_) => "HOG",
            Detector::Cnn(_) => "MMOD CNN",
        };
        format!("dlib ({detector} detector, 5-point landmarks, ResNet 128-d embedder)")
    }
    fn embedding_len(&self) -> usize {
        128
    }
    fn analyze(&mut self, frames: &[&Frame], max_faces: usize) -> Vec<Result<Vec<Face>>> {
        // The crate's encoder takes one image per call, so batching stops at
        // the faces of one frame.
        frames
            .iter()
            .map(|f| self.analyze_one(f, max_faces))
            .collect()
    }
}
