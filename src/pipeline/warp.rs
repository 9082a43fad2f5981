//! The aligned face chip: an RGB frame warped by a 2x3 affine matrix,
//! bilinear, black outside the frame, in OpenCV's `warpAffine` fixed point
//! (positions in 1/32 pixel, weights in 1/32768), so a chip has the very
//! pixels OpenCV gives, the ones the Python deployments of the same models
//! (`cv2.warpAffine`) feed their embedder. Ours because no Rust library warps
//! in that arithmetic (imageproc's warp is floating point and brings
//! nalgebra); 0.10 ms a chip against OpenCV's 0.06 (docs/benchmarks.md,
//! "Decoding and the image work").

use super::align::Affine;
use super::{Frame, OwnedFrame};
use crate::error::{Error, Result};

/// Fractional bits of a sampling position (OpenCV's INTER_BITS).
const POSITION_BITS: u32 = 5;
/// Fractional bits of the matrix products (OpenCV's AB_BITS).
const PRODUCT_BITS: u32 = 10;
/// Fractional bits of the four weights (OpenCV's INTER_REMAP_COEF_BITS).
const WEIGHT_BITS: u32 = 15;

/// `frame` seen through `m` (which maps frame points to chip points) as a
/// `width` x `height` chip.
pub fn warp_affine(frame: &Frame, m: &Affine, width: usize, height: usize) -> Result<OwnedFrame> {
    let inverse = invert(m)
        .ok_or_else(|| Error::invalid("the alignment transform is singular; cannot align"))?;
    let scale = f64::from(1u32 << PRODUCT_BITS);
    // Half a position step, so the shift below rounds.
    let round = 1i64 << (PRODUCT_BITS - POSITION_BITS - 1);
    let fixed = |v: f64| (v * scale).round_ties_even() as i64;
    let column: Vec<(i64, i64)> = (0..width)
        .map(|x| {
            (
                fixed(inverse[0][0] * x as f64),
                fixed(inverse[1][0] * x as f64),
            )
        })
        .collect();
    let mut rgb = vec![0u8; width * height * 3];
    for (y, row) in rgb.chunks_exact_mut(width * 3).enumerate() {
        let x0 = fixed(inverse[0][1] * y as f64 + inverse[0][2]) + round;
        let y0 = fixed(inverse[1][1] * y as f64 + inverse[1][2]) + round;
        for (out, &(dx, dy)) in row.chunks_exact_mut(3).zip(&column) {
            let sx = (x0 + dx) >> (PRODUCT_BITS - POSITION_BITS);
            let sy = (y0 + dy) >> (PRODUCT_BITS - POSITION_BITS);
            out.copy_from_slice(&sample(frame, sx, sy));
        }
    }
    Ok(Frame {
        width: width as u32,
        height: height as u32,
        rgb: rgb.into(),
    })
}

/// The bilinear value at a position in 1/32 pixel; neighbours outside the
/// frame count as black.
#[inline]
fn sample(frame: &Frame, sx: i64, sy: i64) -> [u8; 3] {
    let steps = 1i64 << POSITION_BITS;
    let (ix, iy) = (sx >> POSITION_BITS, sy >> POSITION_BITS);
    let (fx, fy) = ((sx & (steps - 1)) as i32, (sy & (steps - 1)) as i32);
    // (32 - f) * (32 - g) * 32 and so on: exact in 1/32768.
    let unit = 1i32 << (WEIGHT_BITS - 2 * POSITION_BITS);
    let steps = steps as i32;
    let weights = [
        (steps - fx) * (steps - fy) * unit,
        fx * (steps - fy) * unit,
        (steps - fx) * fy * unit,
        fx * fy * unit,
    ];
    let (w, h) = (i64::from(frame.width), i64::from(frame.height));
    let inside = |x: i64, y: i64| (0..w).contains(&x) && (0..h).contains(&y);
    let at = |x: i64, y: i64| (3 * (y * w + x)) as usize;
    let mut sums = [1i32 << (WEIGHT_BITS - 1); 3];
    if ix >= 0 && iy >= 0 && ix + 1 < w && iy + 1 < h {
        // All four inside, the common case: two pixels of two rows.
        let pair = |p: usize| -> [i32; 6] {
            let mut out = [0; 6];
            for (o, v) in out.iter_mut().zip(&frame.rgb[p..p + 6]) {
                *o = i32::from(*v);
            }
            out
        };
        let (top, bottom) = (pair(at(ix, iy)), pair(at(ix, iy + 1)));
        for (c, sum) in sums.iter_mut().enumerate() {
            *sum += weights[0] * top[c]
                + weights[1] * top[3 + c]
                + weights[2] * bottom[c]
                + weights[3] * bottom[3 + c];
        }
    } else {
        let neighbours = [(ix, iy), (ix + 1, iy), (ix, iy + 1), (ix + 1, iy + 1)];
        for ((x, y), weight) in neighbours.into_iter().zip(weights) {
            if inside(x, y) {
                let p = at(x, y);
                for (c, sum) in sums.iter_mut().enumerate() {
                    *sum += weight * i32::from(frame.rgb[p + c]);
                }
            }
        }
    }
    sums.map(|sum| (sum >> WEIGHT_BITS).clamp(0, 255) as u8)
}

/// The inverse of an affine map, as OpenCV computes it; None when singular.
fn invert(m: &Affine) -> Option<Affine> {
    let det = m[0][0] * m[1][1] - m[0][1] * m[1][0];
    if det == 0.0 || !det.is_finite() {
        return None;
    }
    let d = 1.0 / det;
    let (a, b, c, e) = (m[1][1] * d, -m[0][1] * d, -m[1][0] * d, m[0][0] * d);
    Some([
        [a, b, -a * m[0][2] - b * m[1][2]],
        [c, e, -c * m[0][2] - e * m[1][2]],
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(w: u32, h: u32) -> OwnedFrame {
        let rgb = (0..w * h)
            .flat_map(|i| [(i % w * 8) as u8, (i / w * 8) as u8, 200])
            .collect();
        Frame {
            width: w,
            height: h,
            rgb,
        }
    }

    #[test]
    fn the_identity_copies_and_a_shift_moves() {
        let frame = ramp(8, 6);
        let same = warp_affine(&frame, &[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], 8, 6).unwrap();
        assert_eq!(same.rgb, frame.rgb);
        // Two pixels left: the chip's last two columns fall outside, black.
        let moved = warp_affine(&frame, &[[1.0, 0.0, -2.0], [0.0, 1.0, 0.0]], 8, 6).unwrap();
        assert_eq!(&moved.rgb[..3], &frame.rgb[6..9]);
        assert_eq!(&moved.rgb[18..24], &[0; 6]);
    }

    #[test]
    fn half_a_pixel_is_the_mean_of_two() {
        let frame = Frame {
            width: 2,
            height: 1,
            rgb: vec![10, 100, 0, 20, 201, 255].into(),
        };
        // The chip's pixel 0 is at frame x = 0.5.
        let chip = warp_affine(&frame, &[[1.0, 0.0, -0.5], [0.0, 1.0, 0.0]], 1, 1).unwrap();
        // 150.5 and 127.5 round up; OpenCV's fixed point does the same.
        assert_eq!(chip.rgb, vec![15, 151, 128]);
    }

    #[test]
    fn a_singular_transform_is_an_error() {
        let frame = ramp(4, 4);
        assert!(warp_affine(&frame, &[[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]], 2, 2).is_err());
    }
}
