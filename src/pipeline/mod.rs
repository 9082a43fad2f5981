//! The face pipeline's data, independent of Triton: frames in, faces out.
//! `image` turns client bytes into frames, `align` computes the similarity
//! transform that puts a face's landmarks where the embedder expects them,
//! `warp` makes the chip by it (for the ONNX engine; dlib warps its own),
//! `resize` scales a whole frame as OpenCV does (the detectors' letterbox); the
//! engines (`crate::engine`) turn frames into faces.

use std::borrow::Cow;

pub mod align;
pub mod image;
mod jpeg;
pub mod resize;
pub mod warp;
mod webp;

/// An image ready for an engine: interleaved 8-bit RGB, row-major. Its
/// pixels are borrowed where a request's raw RGB input serves as they are
/// (no copy: a 640x480 frame's decode stage 0.12 -> 0.00 ms in the streams
/// bench, docs/benchmarks.md "Video"), owned where they were made.
#[derive(Clone, Debug)]
pub struct Frame<'a> {
    pub width: u32,
    pub height: u32,
    pub rgb: Cow<'a, [u8]>,
}

/// A frame whose pixels it owns (decoded, cropped, warped).
pub type OwnedFrame = Frame<'static>;

impl Frame<'_> {
    /// This frame with its pixels its own (copied if borrowed).
    pub fn into_owned(self) -> OwnedFrame {
        Frame {
            width: self.width,
            height: self.height,
            rgb: Cow::Owned(self.rgb.into_owned()),
        }
    }
}

/// Axis-aligned box in pixels of the frame (may extend past its edges).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoxPx {
    pub left: f32,
    pub top: f32,
    pub right: f32,
    pub bottom: f32,
}

impl BoxPx {
    /// The same box moved by `by` (x, y) pixels.
    pub fn shifted(&self, by: [f32; 2]) -> BoxPx {
        BoxPx {
            left: self.left + by[0],
            top: self.top + by[1],
            right: self.right + by[0],
            bottom: self.bottom + by[1],
        }
    }

    /// Its centre (x, y).
    pub fn centre(&self) -> [f32; 2] {
        [
            (self.left + self.right) / 2.0,
            (self.top + self.bottom) / 2.0,
        ]
    }

    /// The shorter side: what `min_face_size` compares.
    pub fn shorter_side(&self) -> f32 {
        (self.right - self.left).min(self.bottom - self.top)
    }

    pub fn area(&self) -> f32 {
        (self.right - self.left).max(0.0) * (self.bottom - self.top).max(0.0)
    }
}

/// One detected face, embedded unless the caller asked for detection only.
#[derive(Clone, Debug)]
pub struct Face {
    pub bbox: BoxPx,
    /// Detector confidence, when the detector provides one.
    pub score: Option<f32>,
    /// Five points (eye corners / centres, nose, mouth corners: engine-specific order).
    pub landmarks: [[f32; 2]; 5],
    /// Empty when not asked for (`Wanted::embeddings`).
    pub embedding: Vec<f32>,
    /// The aligned face the embedder sees, when asked for (`Wanted::crops`).
    pub crop: Option<OwnedFrame>,
}

/// What a caller wants of one frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Wanted {
    /// Embed the faces (false: boxes, scores and landmarks only).
    pub embeddings: bool,
    /// Faces whose box is smaller on its shorter side are dropped before
    /// anything else is done with them.
    pub min_face_size: f32,
    /// Keep the largest this many faces, largest first; `None`: all, in
    /// the detector's order, and more than `limit` is an error.
    pub max_faces: Option<usize>,
    /// Keep each face's aligned crop.
    pub crops: bool,
    /// The model's `max_faces_per_image`.
    pub limit: usize,
}

impl Wanted {
    /// Everything, as a request without options gets.
    pub fn all(limit: usize) -> Self {
        Wanted {
            embeddings: true,
            min_face_size: 0.0,
            max_faces: None,
            crops: false,
            limit,
        }
    }

    /// The detected `found` faces this frame keeps, in order: large enough,
    /// then the largest `max_faces`; more than `limit` without `max_faces`
    /// is an error for the frame.
    pub fn choose<T>(
        &self,
        found: Vec<T>,
        bbox: impl Fn(&T) -> BoxPx,
    ) -> crate::error::Result<Vec<T>> {
        let mut kept: Vec<T> = found
            .into_iter()
            .filter(|f| bbox(f).shorter_side() >= self.min_face_size)
            .collect();
        match self.max_faces {
            None if kept.len() > self.limit => Err(crate::error::Error::invalid(format!(
                "found {} faces, more than max_faces_per_image = {} (the request parameter \
                 max_faces keeps the largest)",
                kept.len(),
                self.limit
            ))),
            None => Ok(kept),
            Some(n) => {
                kept.sort_by(|a, b| bbox(b).area().total_cmp(&bbox(a).area()));
                kept.truncate(n);
                Ok(kept)
            }
        }
    }
}

/// Time one frame spent in each stage of an engine.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stages {
    pub detection: std::time::Duration,
    pub landmarks: std::time::Duration,
    pub embedding: std::time::Duration,
}

/// An engine's answer for one frame.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    pub faces: Vec<Face>,
    pub stages: Stages,
}

impl Analysis {
    /// A face known only by its embedding (no image, no box).
    pub fn of_embedding(embedding: &[f32]) -> Self {
        let nowhere = BoxPx {
            left: 0.0,
            top: 0.0,
            right: 0.0,
            bottom: 0.0,
        };
        Analysis {
            faces: vec![Face {
                bbox: nowhere,
                score: None,
                landmarks: [[0.0; 2]; 5],
                embedding: embedding.to_vec(),
                crop: None,
            }],
            stages: Stages::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn square(left: f32, side: f32) -> BoxPx {
        BoxPx {
            left,
            top: 0.0,
            right: left + side,
            bottom: side,
        }
    }

    #[test]
    fn wanted_keeps_large_enough_faces_then_the_largest() {
        let found = vec![square(0.0, 10.0), square(20.0, 40.0), square(80.0, 25.0)];
        let all = Wanted::all(3);
        assert_eq!(
            all.choose(found.clone(), |b| *b).unwrap(),
            found,
            "detector order"
        );
        let big = Wanted {
            min_face_size: 20.0,
            ..all
        };
        assert_eq!(big.choose(found.clone(), |b| *b).unwrap(), found[1..]);
        let two = Wanted {
            max_faces: Some(2),
            ..Wanted::all(1)
        };
        let kept = two.choose(found.clone(), |b| *b).unwrap();
        assert_eq!(
            kept,
            [found[1], found[2]],
            "largest first, over the limit of 1"
        );
        let e = Wanted::all(2).choose(found.clone(), |b| *b).unwrap_err();
        assert!(
            e.message().contains("max_faces_per_image = 2"),
            "{}",
            e.message()
        );
        let small_dropped_first = Wanted {
            min_face_size: 20.0,
            ..Wanted::all(2)
        };
        assert_eq!(small_dropped_first.choose(found, |b| *b).unwrap().len(), 2);
    }
}
