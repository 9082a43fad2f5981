//! dlib engine: HOG (default) or MMOD-CNN detector, 5-point shape predictor,
//! and the ResNet that maps a 150x150 aligned chip (padding 0.25) to a 128-d
//! embedding (99.38% on LFW; same person when the Euclidean distance < 0.6).
//! dlib is reached only through our C++ shim (shim.cpp, via shim.rs), which
//! turns every C++ exception into an error for that image and refuses input
//! that dlib cannot take safely.

pub(crate) mod shim;

use std::path::Path;
use std::time::Instant;

use super::require_file;
use super::Engine;
use crate::error::{Error, Result};
use crate::metric::Metric;
use crate::pipeline::{Analysis, BoxPx, Face, Frame, OwnedFrame, Stages, Wanted};
use shim::{Detector, Encoder, Image, Predictor, Rect, Shape, CHIP_SIDE};
pub use shim::{HOG_WINDOW, MAX_UPSAMPLE};

pub const RESNET_FILE: &str = "dlib_face_recognition_resnet_model_v1.dat";
pub const SHAPE5_FILE: &str = "shape_predictor_5_face_landmarks.dat";
pub const MMOD_FILE: &str = "mmod_human_face_detector.dat";
/// Default of the `cnn_min_side` parameter: images with a smaller side skip
/// the CNN detector (its 40 px window finds no face there). A fast path only:
/// the shim refuses what dlib cannot take, whatever this is set to.
pub const DEFAULT_CNN_MIN_SIDE: u32 = 32;

/// dlib's ResNet encoder (`RESNET_FILE`) written as dlib's `net_to_xml`
/// XML, its layers and weights: what scripts/dlib_onnx.py turns into ONNX.
pub fn encoder_xml(model: &Path, out: &Path) -> Result<()> {
    Encoder::load(model)?.write_xml(out)
}

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

/// How the dlib engine runs (model parameters `detector`, `cnn_min_side`,
/// `upsample`, `blas_threads`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DlibSettings {
    pub detector: DetectorKind,
    /// CNN only: smaller images get no faces without running it (0: never).
    /// Compared with the upsampled size.
    pub cnn_min_side: u32,
    /// Times the image is doubled before detection (finds smaller faces).
    pub upsample: u32,
    /// HOG only: the smallest face width (px) to look for; the image is
    /// resized by HOG_WINDOW / this before the pyramid. 0: as it is.
    pub smallest_face: u32,
    /// OpenBLAS threads, process-wide (see shim::set_blas_threads).
    pub blas_threads: usize,
}

impl Default for DlibSettings {
    fn default() -> Self {
        DlibSettings {
            detector: DetectorKind::Hog,
            cnn_min_side: DEFAULT_CNN_MIN_SIDE,
            upsample: 0,
            smallest_face: 0,
            blas_threads: 1,
        }
    }
}

impl DlibSettings {
    /// What the image is resized by before HOG scans it (`smallest_face`).
    pub fn scale(&self) -> Result<f64> {
        if self.smallest_face == 0 {
            return Ok(1.0);
        }
        if self.detector != DetectorKind::Hog || self.upsample > 0 {
            return Err(Error::invalid(
                "smallest_face is for the HOG detector without upsample (the CNN finds smaller \
                 faces with upsample)",
            ));
        }
        let scale = f64::from(HOG_WINDOW) / f64::from(self.smallest_face);
        match (shim::MIN_SCALE..=shim::MAX_SCALE).contains(&scale) {
            true => Ok(scale),
            false => Err(Error::invalid(format!(
                "smallest_face = {} is outside {} to {} px",
                self.smallest_face,
                (f64::from(HOG_WINDOW) / shim::MAX_SCALE).ceil(),
                (f64::from(HOG_WINDOW) / shim::MIN_SCALE).floor()
            ))),
        }
    }
}

pub struct DlibEngine {
    settings: DlibSettings,
    /// `settings.scale()`, checked once at load.
    scale: f64,
    blas_threads: usize,
    detector: Detector,
    predictor: Predictor,
    encoder: Encoder,
}

// The shim's owners are Send (see shim.rs), so the engine is by construction.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<DlibEngine>()
};

impl DlibEngine {
    /// Load the weights from `dir`; a missing or unreadable file names itself.
    pub fn load(dir: &Path, settings: DlibSettings) -> Result<Self> {
        check_cpu()?;
        if settings.upsample > MAX_UPSAMPLE {
            return Err(Error::invalid(format!(
                "upsample = {} is more than {MAX_UPSAMPLE} (each step quadruples the pixels \
                 scanned)",
                settings.upsample
            )));
        }
        let scale = settings.scale()?;
        let detector = match settings.detector {
            DetectorKind::Hog => Detector::hog()?,
            DetectorKind::Cnn => Detector::cnn(&require_file(dir, MMOD_FILE)?)?,
        };
        Ok(DlibEngine {
            settings,
            scale,
            blas_threads: shim::set_blas_threads(settings.blas_threads),
            detector,
            predictor: Predictor::load(&require_file(dir, SHAPE5_FILE)?)?,
            encoder: Encoder::load(&require_file(dir, RESNET_FILE)?)?,
        })
    }

    fn analyze_one(&mut self, frame: &Frame, wanted: Wanted) -> Result<Analysis> {
        let DlibSettings {
            detector,
            cnn_min_side,
            upsample,
            ..
        } = self.settings;
        let side = u64::from(frame.width.min(frame.height)) << upsample;
        if detector == DetectorKind::Cnn && side < u64::from(cnn_min_side) {
            return Ok(Analysis::default());
        }
        let mut stages = Stages::default();
        let started = Instant::now();
        let image = Image::new(&frame.rgb, frame.width as usize, frame.height as usize)?;
        let (rects, found) = self
            .detector
            .detect(&image, upsample, self.scale, MAX_FOUND)?;
        if found > MAX_FOUND {
            return Err(Error::invalid(format!(
                "found {found} faces, more than max_faces_per_image = {}",
                wanted.limit
            )));
        }
        let rects = wanted.choose(rects, rect_box)?;
        stages.detection = started.elapsed();
        if rects.is_empty() {
            return Ok(Analysis {
                faces: Vec::new(),
                stages,
            });
        }
        let started = Instant::now();
        let shapes = rects
            .iter()
            .map(|r| self.predictor.landmarks(&image, r))
            .collect::<Result<Vec<_>>>()?;
        stages.landmarks = started.elapsed();
        let started = Instant::now();
        // One network call for all faces of the frame.
        let mut embeddings = match wanted.embeddings {
            true => self.encoder.encode(&image, &shapes)?,
            false => vec![Vec::new(); shapes.len()],
        }
        .into_iter();
        let mut crops = match wanted.crops {
            true => shim::chips(&image, &shapes)?
                .into_iter()
                .map(chip)
                .collect(),
            false => Vec::new(),
        }
        .into_iter();
        if wanted.embeddings || wanted.crops {
            stages.embedding = started.elapsed();
        }
        let faces = shapes
            .iter()
            .map(|shape| {
                let mut face = face(shape, embeddings.next().unwrap_or_default());
                face.crop = crops.next();
                face
            })
            .collect();
        Ok(Analysis { faces, stages })
    }
}

/// Boxes the detector may return for one frame: more is an error, whatever
/// the request keeps (a guard against pathological images, far above any
/// `max_faces_per_image`).
const MAX_FOUND: usize = 4096;

fn rect_box(r: &Rect) -> BoxPx {
    BoxPx {
        left: r.left as f32,
        top: r.top as f32,
        right: r.right as f32,
        bottom: r.bottom as f32,
    }
}

/// A tracked box as dlib's inclusive pixel box (rounded).
fn box_rect(b: &BoxPx) -> Rect {
    Rect {
        left: b.left.round() as i64,
        top: b.top.round() as i64,
        right: b.right.round() as i64,
        bottom: b.bottom.round() as i64,
    }
}

/// A face back into the shape it came from (dlib's points are whole
/// pixels, so this is exact for faces this engine found).
fn shape(f: &Face) -> Shape {
    let mut s = Shape {
        rect: box_rect(&f.bbox),
        ..Shape::default()
    };
    for (part, [x, y]) in s.parts.iter_mut().zip(f.landmarks) {
        (part.x, part.y) = (x.round() as i64, y.round() as i64);
    }
    s
}

fn chip(rgb: Vec<u8>) -> OwnedFrame {
    Frame {
        width: CHIP_SIDE as u32,
        height: CHIP_SIDE as u32,
        rgb: rgb.into(),
    }
}

/// The shim's instruction set (build.rs, `FACE_SIMD`) against this CPU:
/// refuse to load rather than die of an illegal instruction.
fn check_cpu() -> Result<()> {
    #[cfg(face_dlib_avx2)]
    if !(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"))
    {
        return Err(Error::unsupported(
            "this build's dlib engine uses AVX2 and FMA, which this CPU lacks: rebuild with \
             FACE_SIMD=baseline (see docs/engines.md)",
        ));
    }
    Ok(())
}

/// The shim's instruction set, for the load log.
const SIMD: &str = if cfg!(face_dlib_avx2) {
    "AVX2+FMA"
} else {
    "baseline x86-64"
};

fn face(shape: &Shape, embedding: Vec<f32>) -> Face {
    Face {
        bbox: rect_box(&shape.rect),
        score: None,
        landmarks: shape.parts.map(|p| [p.x as f32, p.y as f32]),
        embedding,
        crop: None,
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
        let detector = match self.settings.detector {
            DetectorKind::Hog => "HOG",
            DetectorKind::Cnn => "MMOD CNN",
        };
        format!(
            "dlib ({detector} detector, {}, 5-point landmarks, ResNet 128-d embedder; \
             shim {SIMD}, OpenBLAS threads {})",
            match self.settings.smallest_face {
                0 => format!("upsample {}", self.settings.upsample),
                px => format!("faces from {px} px"),
            },
            self.blas_threads
        )
    }
    fn embedding_len(&self) -> usize {
        128
    }
    fn analyze(&mut self, frames: &[(&Frame, Wanted)]) -> Vec<Result<Analysis>> {
        // The encoder takes the faces of one image per call (dlib's chips come
        // from one image), so batching stops at the faces of one frame.
        frames
            .iter()
            .map(|&(f, wanted)| self.analyze_one(f, wanted))
            .collect()
    }
    fn faces_at(&mut self, frame: &Frame, boxes: &[BoxPx]) -> Result<Vec<Face>> {
        let image = Image::new(&frame.rgb, frame.width as usize, frame.height as usize)?;
        boxes
            .iter()
            .map(|b| {
                let shape = self.predictor.landmarks(&image, &box_rect(b))?;
                Ok(face(&shape, Vec::new()))
            })
            .collect()
    }
    fn embed(&mut self, frame: &Frame, faces: &[&Face]) -> Result<Vec<Vec<f32>>> {
        if faces.is_empty() {
            return Ok(Vec::new());
        }
        let image = Image::new(&frame.rgb, frame.width as usize, frame.height as usize)?;
        let shapes: Vec<Shape> = faces.iter().map(|f| shape(f)).collect();
        self.encoder.encode(&image, &shapes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::pipeline::image::frame_from_encoded;

    pub(super) use crate::engine::test_assets as assets;

    fn grey(width: u32, height: u32) -> OwnedFrame {
        let rgb = vec![128; (width * height * 3) as usize];
        Frame {
            width,
            height,
            rgb: rgb.into(),
        }
    }

    #[test]
    fn one_face_on_a_real_photo() {
        let bytes = std::fs::read(assets("photos").join("obama_640x480.jpg")).unwrap();
        let frame = frame_from_encoded("photo", &bytes, 40_000_000).unwrap();
        let mut engine = DlibEngine::load(&assets("dlib"), DlibSettings::default()).unwrap();
        let faces = engine
            .analyze(&[(&frame, Wanted::all(4))])
            .remove(0)
            .unwrap()
            .faces;
        assert_eq!(faces.len(), 1);
        let face = &faces[0];
        assert_eq!(face.embedding.len(), engine.embedding_len());
        let b = face.bbox;
        for [x, y] in face.landmarks {
            assert!(
                x > b.left && x < b.right && y > b.top && y < b.bottom,
                "{x},{y} {b:?}"
            );
        }
        let e = engine
            .analyze(&[(&frame, Wanted::all(0))])
            .remove(0)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }

    /// A face of `side` px: the 640x480 photo's face (180 px) shrunk onto
    /// a grey canvas of the same size.
    fn small_face(side: u32) -> OwnedFrame {
        let bytes = std::fs::read(assets("photos").join("obama_640x480.jpg")).unwrap();
        let photo = image::load_from_memory(&bytes).unwrap().to_rgb8();
        // The face box dlib finds there, with the photo's margin around it.
        let (x, y, w) = (254 - 60, 94 - 60, 180 + 120);
        let head = image::imageops::crop_imm(&photo, x, y, w, w).to_image();
        let head = image::imageops::resize(
            &head,
            side * w / 180,
            side * w / 180,
            image::imageops::FilterType::Triangle,
        );
        let mut canvas = image::RgbImage::from_pixel(640, 480, image::Rgb([110, 110, 120]));
        image::imageops::overlay(&mut canvas, &head, 203, 157);
        Frame {
            width: 640,
            height: 480,
            rgb: canvas.into_raw().into(),
        }
    }

    #[test]
    fn smallest_face_finds_what_the_window_misses_with_boxes_in_the_image() {
        let dir = assets("dlib");
        let frame = small_face(48);
        let boxes = Wanted {
            embeddings: false,
            ..Wanted::all(4)
        };
        let mut plain = DlibEngine::load(&dir, DlibSettings::default()).unwrap();
        let found = plain.analyze(&[(&frame, boxes)]).remove(0).unwrap();
        assert!(
            found.faces.is_empty(),
            "a 48 px face under the 80 px window"
        );
        let small = DlibSettings {
            smallest_face: 50,
            ..DlibSettings::default()
        };
        let mut engine = DlibEngine::load(&dir, small).unwrap();
        let faces = engine.analyze(&[(&frame, boxes)]).remove(0).unwrap().faces;
        assert_eq!(faces.len(), 1);
        let b = faces[0].bbox;
        // The face's centre, in the frame's own pixels (the head sits at 203,157).
        let (cx, cy) = ((b.left + b.right) / 2.0, (b.top + b.bottom) / 2.0);
        let head = 48.0 * 300.0 / 180.0;
        assert!((cx - (203.0 + head / 2.0)).abs() < 12.0, "{b:?}");
        assert!((cy - (157.0 + head / 2.0)).abs() < 12.0, "{b:?}");
        assert!((b.right - b.left - 48.0).abs() < 12.0, "{b:?}");
    }

    #[test]
    fn smallest_face_is_for_hog_without_upsample_within_its_range() {
        let hog = |px, upsample| DlibSettings {
            smallest_face: px,
            upsample,
            ..DlibSettings::default()
        };
        assert_eq!(hog(0, 1).scale().unwrap(), 1.0);
        assert_eq!(hog(50, 0).scale().unwrap(), 1.6);
        assert_eq!(hog(160, 0).scale().unwrap(), 0.5);
        for bad in [
            hog(50, 1),
            hog(19, 0),
            hog(801, 0),
            DlibSettings {
                smallest_face: 50,
                ..cnn(0)
            },
        ] {
            let e = DlibEngine::load(&assets("dlib"), bad).err().unwrap();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
            assert!(e.message().contains("smallest_face"), "{e}");
        }
    }

    fn cnn(cnn_min_side: u32) -> DlibSettings {
        DlibSettings {
            detector: DetectorKind::Cnn,
            cnn_min_side,
            ..DlibSettings::default()
        }
    }

    #[test]
    fn cnn_min_side_is_a_fast_path_not_the_fence() {
        let dir = assets("dlib");
        let tiny = grey(10, 6);
        let mut fast = DlibEngine::load(&dir, cnn(DEFAULT_CNN_MIN_SIDE)).unwrap();
        let results = fast.analyze(&[(&tiny, Wanted::all(4))]);
        assert!(results[0].as_ref().unwrap().faces.is_empty());
        let mut all = DlibEngine::load(&dir, cnn(0)).unwrap();
        let other = grey(10, 7);
        let results = all.analyze(&[(&tiny, Wanted::all(4)), (&other, Wanted::all(4))]);
        assert_eq!(
            results[0].as_ref().unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        assert!(results[1].as_ref().unwrap().faces.is_empty());
    }
}
