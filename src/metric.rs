//! How two embeddings compare: the one distance the engines, the gallery
//! and the sequences share, and the JSON reports.

/// A distance as an answer shows it: to `decimals` (half away from zero).
pub fn rounded(d: f32, decimals: u32) -> f32 {
    let scale = 10f32.powi(decimals as i32);
    (d * scale).round() / scale
}

/// The threshold on exact distances that names a face exactly when its
/// distance, `rounded` to `decimals`, is within `threshold` rounded the same
/// way: a comparison that tells no more of a distance than an answer shows.
pub fn coarse_threshold(threshold: f32, decimals: u32) -> f32 {
    let scale = 10f32.powi(decimals as i32);
    // rounded(d) <= T  <=>  d * scale < T * scale + 0.5
    (((threshold * scale).round() + 0.5) / scale).next_down()
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

    #[test]
    fn a_coarse_threshold_compares_what_answers_show() {
        for t in [0.3, 0.449, 0.45, 0.4549, 0.5, 0.61] {
            for decimals in [0, 1, 2, 3] {
                let coarse = coarse_threshold(t, decimals);
                for i in 0..20_000 {
                    let d = i as f32 * 1e-4 + 3e-5; // never on a rounding boundary
                    assert_eq!(
                        d <= coarse,
                        rounded(d, decimals) <= rounded(t, decimals),
                        "{d} against {t} at {decimals} decimals"
                    );
                }
            }
        }
        assert_eq!(rounded(0.4537, 2), 0.45);
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
