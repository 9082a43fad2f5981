//! Face alignment: the least-squares similarity transform (rotation, uniform
//! scale, translation; Umeyama's solution, closed form in 2-D) that maps five
//! detected landmarks onto the standard ArcFace 112x112 reference points.

use crate::error::{Error, Result};

/// ArcFace reference points in a 112x112 chip: eye centres (image left,
/// image right), nose tip, mouth corners (image left, image right).
pub const ARCFACE_112: [[f32; 2]; 5] = [
    [38.2946, 51.6963],
    [73.5318, 51.5014],
    [56.0252, 71.7366],
    [41.5493, 92.3655],
    [70.7299, 92.2041],
];

/// Five points of a face, in ARCFACE_112's order: the eye on the image's
/// left, the one on its right, the nose tip, the mouth corner on the
/// image's left, the one on its right.
pub type Five = [[f32; 2]; 5];

/// A 2x3 affine matrix `[[a, -b, tx], [b, a, ty]]` (row-major).
pub type Affine = [[f64; 3]; 2];

/// The similarity transform minimising the squared distances from the mapped
/// `src` points to `dst`. Degenerate input (points collapsed onto one spot,
/// non-finite values) is an error, never NaN.
pub fn similarity(src: &[[f32; 2]], dst: &[[f32; 2]]) -> Result<Affine> {
    if src.len() != dst.len() || src.len() < 2 {
        return Err(Error::invalid(
            "alignment needs at least two matching landmark pairs",
        ));
    }
    if src.iter().chain(dst).flatten().any(|v| !v.is_finite()) {
        return Err(Error::invalid("landmarks are not finite numbers"));
    }
    let n = src.len() as f64;
    let mean = |p: &[[f32; 2]]| {
        let (sx, sy) = p
            .iter()
            .fold((0.0, 0.0), |(x, y), q| (x + q[0] as f64, y + q[1] as f64));
        (sx / n, sy / n)
    };
    let (mx, my) = mean(src);
    let (nx, ny) = mean(dst);
    let (mut var, mut dot, mut cross) = (0.0, 0.0, 0.0);
    for (s, d) in src.iter().zip(dst) {
        let (x, y) = (s[0] as f64 - mx, s[1] as f64 - my);
        let (u, v) = (d[0] as f64 - nx, d[1] as f64 - ny);
        var += x * x + y * y;
        dot += x * u + y * v;
        cross += x * v - y * u;
    }
    // Landmarks closer together than a hundredth of a pixel carry no geometry.
    if var < 1e-4 * n {
        return Err(Error::invalid(
            "landmarks are degenerate (all at one point); cannot align the face",
        ));
    }
    let (a, b) = (dot / var, cross / var);
    let tx = nx - (a * mx - b * my);
    let ty = ny - (b * mx + a * my);
    Ok([[a, -b, tx], [b, a, ty]])
}

/// Apply an affine matrix to a point.
pub fn apply(m: &Affine, p: [f32; 2]) -> [f32; 2] {
    let (x, y) = (p[0] as f64, p[1] as f64);
    [
        (m[0][0] * x + m[0][1] * y + m[0][2]) as f32,
        (m[1][0] * x + m[1][1] * y + m[1][2]) as f32,
    ]
}

/// 68-point landmarks (iBUG order) reduced to the five ArcFace points.
pub fn five_from_68(p: &[[f32; 2]]) -> Result<[[f32; 2]; 5]> {
    if p.len() != 68 {
        return Err(Error::internal(format!(
            "expected 68 landmarks, got {}",
            p.len()
        )));
    }
    let avg = |idx: &[usize]| {
        let (sx, sy) = idx
            .iter()
            .fold((0.0, 0.0), |(x, y), &i| (x + p[i][0], y + p[i][1]));
        [sx / idx.len() as f32, sy / idx.len() as f32]
    };
    Ok([
        avg(&[37, 38, 40, 41]), // eye on the image left
        avg(&[43, 44, 46, 47]), // eye on the image right
        p[30],                  // nose tip
        avg(&[48, 60]),         // mouth corner, image left
        avg(&[54, 64]),         // mouth corner, image right
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transform(p: [f32; 2], scale: f64, angle: f64, t: (f64, f64)) -> [f32; 2] {
        let (c, s) = (angle.cos() * scale, angle.sin() * scale);
        let (x, y) = (p[0] as f64, p[1] as f64);
        [(c * x - s * y + t.0) as f32, (s * x + c * y + t.1) as f32]
    }

    #[test]
    fn recovers_a_known_similarity() {
        let src = ARCFACE_112;
        for (scale, angle, t) in [
            (1.0, 0.0, (0.0, 0.0)),
            (2.5, 0.4, (30.0, -12.0)),
            (0.3, -2.0, (400.0, 220.0)),
        ] {
            let dst: Vec<_> = src.iter().map(|p| transform(*p, scale, angle, t)).collect();
            let m = similarity(&src, &dst).unwrap();
            assert!((m[0][0] - scale * angle.cos()).abs() < 1e-4, "{m:?}");
            assert!((m[1][0] - scale * angle.sin()).abs() < 1e-4, "{m:?}");
            assert!(
                (m[0][2] - t.0).abs() < 1e-2 && (m[1][2] - t.1).abs() < 1e-2,
                "{m:?}"
            );
            for (s, d) in src.iter().zip(&dst) {
                let q = apply(&m, *s);
                assert!((q[0] - d[0]).abs() < 1e-2 && (q[1] - d[1]).abs() < 1e-2);
            }
        }
    }

    #[test]
    fn least_squares_with_noise_is_close() {
        let dst: Vec<_> = ARCFACE_112
            .iter()
            .map(|p| transform(*p, 1.5, 0.2, (5.0, 7.0)))
            .collect();
        let mut noisy = dst.clone();
        noisy[0][0] += 0.5;
        noisy[3][1] -= 0.5;
        let m = similarity(&ARCFACE_112, &noisy).unwrap();
        assert!((m[0][0].hypot(m[1][0]) - 1.5).abs() < 0.02);
    }

    #[test]
    fn degenerate_landmarks_are_rejected_not_nan() {
        let same = [[10.0, 10.0]; 5];
        assert!(similarity(&same, &ARCFACE_112).is_err());
        let mut nan = ARCFACE_112;
        nan[2][0] = f32::NAN;
        assert!(similarity(&nan, &ARCFACE_112).is_err());
        assert!(similarity(&ARCFACE_112[..1], &ARCFACE_112[..1]).is_err());
    }

    #[test]
    fn five_points_from_68() {
        let pts: Vec<[f32; 2]> = (0..68).map(|i| [i as f32, 2.0 * i as f32]).collect();
        let five = five_from_68(&pts).unwrap();
        assert_eq!(five[0], [39.0, 78.0]);
        assert_eq!(five[2], [30.0, 60.0]);
        assert_eq!(five[4], [59.0, 118.0]);
        assert!(five_from_68(&pts[..5]).is_err());
    }
}
