//! The face pipeline's data, independent of Triton: frames in, faces out.
//! `image` turns client bytes into frames (OpenCV), `align` cuts aligned
//! face chips; the engines (`crate::engine`) turn frames into faces.

pub mod align;
pub mod image;

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

/// One detected and embedded face.
#[derive(Clone, Debug)]
pub struct Face {
    pub bbox: BoxPx,
    /// Detector confidence, when the detector provides one.
    pub score: Option<f32>,
    /// Five points (eye corners / centres, nose, mouth corners: engine-specific order).
    pub landmarks: [[f32; 2]; 5],
    pub embedding: Vec<f32>,
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
            Metric::Euclidean => a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y) * (x - y))
                .sum::<f32>()
                .sqrt(),
            Metric::Cosine => {
                let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
                let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
                if na == 0.0 || nb == 0.0 {
                    1.0
                } else {
                    // Rounding can push a face's distance to itself just below 0.
                    (1.0 - dot / (na * nb)).max(0.0)
                }
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::Euclidean => "euclidean",
            Metric::Cosine => "cosine",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics() {
        let a = [1.0, 0.0];
        let b = [0.0, 1.0];
        assert!((Metric::Euclidean.distance(&a, &b) - 2f32.sqrt()).abs() < 1e-6);
        assert!((Metric::Cosine.distance(&a, &b) - 1.0).abs() < 1e-6);
        assert!(Metric::Cosine.distance(&a, &a).abs() < 1e-6);
        assert_eq!(Metric::Cosine.distance(&a, &[0.0, 0.0]), 1.0);
    }
}
