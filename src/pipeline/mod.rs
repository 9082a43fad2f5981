//! The face pipeline's data, independent of Triton: frames in, faces out.
//! `image` turns client bytes into frames, `align` computes the similarity
//! transform that puts a face's landmarks where the embedder expects them,
//! `warp` makes the chip by it (for the ONNX engine; dlib warps its own); the
//! engines (`crate::engine`) turn frames into faces.

pub mod align;
pub mod image;
mod jpeg;
pub mod warp;
mod webp;

/// An image ready for an engine: interleaved 8-bit RGB, row-major.
#[derive(Clone, Debug)]
pub struct Frame {
    pub width: u32,
    pub height: u32,
    pub rgb: Vec<u8>,
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
    pub crop: Option<Frame>,
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

/// How embeddings compare; `distance` is what the JSON reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Plain Euclidean distance (dlib's ResNet; 0.6 separates people).
    Euclidean,
    /// 1 - cosine similarity of the vectors.
    Cosine,
}

impl Metric {
    pub fn distance(self, a: &[f32], b: &[f32]) -> f32 {
        match self {
            // Summed directly: aa - 2ab + bb would cancel for near-equal vectors.
            Metric::Euclidean => lane_sums(a, b, |x, y| [(x - y) * (x - y)])[0].sqrt(),
            Metric::Cosine => {
                let [aa, ab, bb] = lane_sums(a, b, |x, y| [x * x, x * y, y * y]);
                let norms = (aa * bb).sqrt();
                if norms == 0.0 {
                    1.0
                } else {
                    // Rounding can push a face's distance to itself just below 0.
                    (1.0 - ab / norms).max(0.0)
                }
            }
        }
    }

    /// The usual same-person threshold, for a model whose config sets none.
    pub fn usual_threshold(self) -> f32 {
        match self {
            Metric::Euclidean => 0.6,
            // 1 - cosine for ArcFace-style embedders; measured on the sample
            // photos: same person 0.18-0.25, different people >= 0.82.
            Metric::Cosine => 0.5,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::Euclidean => "euclidean",
            Metric::Cosine => "cosine",
        }
    }
}

/// The sums over i of `terms(a[i], b[i])`, in one pass. Matching runs this
/// once per gallery entry: eight independent lanes per sum let the compiler
/// use SIMD (one running sum is a chain of dependent adds, several times
/// slower at 10,000 entries).
#[inline(always)]
fn lane_sums<const N: usize>(
    a: &[f32],
    b: &[f32],
    terms: impl Fn(f32, f32) -> [f32; N],
) -> [f32; N] {
    const LANES: usize = 8;
    let mut lanes = [[0f32; LANES]; N];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            let t = terms(x[i], y[i]);
            for k in 0..N {
                lanes[k][i] += t[k];
            }
        }
    }
    let mut sums = lanes.map(|l| l.iter().sum::<f32>());
    for (x, y) in ra.iter().zip(rb) {
        let t = terms(*x, *y);
        for k in 0..N {
            sums[k] += t[k];
        }
    }
    sums
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

    #[test]
    fn metrics() {
        let a = [1.0, 0.0];
        let b = [0.0, 1.0];
        assert!((Metric::Euclidean.distance(&a, &b) - 2f32.sqrt()).abs() < 1e-6);
        assert!((Metric::Cosine.distance(&a, &b) - 1.0).abs() < 1e-6);
        assert!(Metric::Cosine.distance(&a, &a).abs() < 1e-6);
        assert_eq!(Metric::Cosine.distance(&a, &[0.0, 0.0]), 1.0);
    }

    #[test]
    fn lanes_and_remainder_match_plain_sums() {
        // 517 = 64 chunks of 8 and a remainder of 5.
        let a: Vec<f32> = (0..517)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let b: Vec<f32> = (0..517)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0)
            .collect();
        let (aa, ab, bb, dd) = a
            .iter()
            .zip(&b)
            .fold((0f64, 0f64, 0f64, 0f64), |s, (x, y)| {
                let (x, y) = (*x as f64, *y as f64);
                (
                    s.0 + x * x,
                    s.1 + x * y,
                    s.2 + y * y,
                    s.3 + (x - y) * (x - y),
                )
            });
        let cosine = 1.0 - ab / (aa * bb).sqrt();
        assert!((Metric::Euclidean.distance(&a, &b) as f64 - dd.sqrt()).abs() < 1e-4);
        assert!((Metric::Cosine.distance(&a, &b) as f64 - cosine).abs() < 1e-6);
        assert_eq!(
            Metric::Euclidean.distance(&a, &a),
            0.0,
            "exactly 0 to itself"
        );
    }
}
