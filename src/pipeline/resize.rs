//! A whole frame resized as OpenCV's `cv::resize(..., INTER_LINEAR)` does it
//! for 8-bit pixels, bit for bit: the detector families' reference code
//! (OpenCV's FaceDetectorYN users, insightface's SCRFD) letterbox with it.
//! OpenCV keeps 11-bit weights, sums each row's two taps exactly, then mixes
//! two rows with its SIMD rounding (each row's sum shifted down 4, multiplied
//! by its weight keeping the high 16 bits, the two added, rounded down 2).
//! fast_image_resize's bilinear interpolation rounds once, in float: one
//! level off on about a fifth of the values, enough to move YuNet's points
//! by 0.4 px on a photo scaled by 3.6 (docs/engines.md). A part of a frame
//! (chips, grey boxes, thumbnails) goes through fast_image_resize
//! (`crop_resize`), where sub-pixel crops matter more than that level.

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

use crate::error::{Error, Result};

/// OpenCV's INTER_RESIZE_COEF_SCALE: the weights of a pair sum to it.
const ONE: f32 = 2048.0;

/// `rgb` (`w`x`h`, interleaved 8-bit RGB) resized to `nw`x`nh`.
/// The caller checks that `rgb` holds `3 * w * h` bytes and that no side is 0.
pub fn resize_linear(rgb: &[u8], (w, h): (usize, usize), (nw, nh): (usize, usize)) -> Vec<u8> {
    // Columns: a tap past an edge takes the edge pixel whole (OpenCV clamps
    // the position); rows keep their weights, the row index is clamped.
    let columns: Vec<(usize, usize, [i32; 2])> = taps(w, nw)
        .map(|(s, f)| match s {
            s if s < 0 => (0, 0, weights(0.0)),
            s if s as usize >= w - 1 => (3 * (w - 1), 3 * (w - 1), weights(0.0)),
            s => (3 * s as usize, 3 * s as usize + 3, weights(f)),
        })
        .collect();
    let clamp = |s: i64| s.clamp(0, h as i64 - 1) as usize;
    let width = 3 * nw;
    let mut out = vec![0u8; width * nh];
    // The two source rows of the last output row, summed across.
    let mut upper = (usize::MAX, vec![0i16; width]);
    let mut lower = (usize::MAX, vec![0i16; width]);
    for ((s, f), dst) in taps(h, nh).zip(out.chunks_exact_mut(width)) {
        let (y0, y1) = (clamp(s), clamp(s + 1));
        if upper.0 != y0 {
            if lower.0 == y0 {
                std::mem::swap(&mut upper, &mut lower);
            } else {
                across(&rgb[3 * w * y0..][..3 * w], &columns, &mut upper.1);
                upper.0 = y0;
            }
        }
        if lower.0 != y1 {
            across(&rgb[3 * w * y1..][..3 * w], &columns, &mut lower.1);
            lower.0 = y1;
        }
        down(&upper.1, &lower.1, weights(f), dst);
    }
    out
}

/// The sub-pixel rectangle (left, top, width, height) of an image of
/// `pixel` type resized to `w`x`h`, by fast_image_resize's bilinear
/// interpolation without antialiasing.
pub fn crop_resize(
    (width, height, pixels): (u32, u32, &[u8]),
    pixel: PixelType,
    [left, top, w_in, h_in]: [f32; 4],
    (w, h): (usize, usize),
) -> Result<Vec<u8>> {
    let fail = |e: &dyn std::fmt::Display| Error::internal(format!("resize: {e}"));
    let src = ImageRef::new(width, height, pixels, pixel).map_err(|e| fail(&e))?;
    let mut dst = Image::new(w as u32, h as u32, pixel);
    let options = ResizeOptions::new()
        .resize_alg(ResizeAlg::Interpolation(FilterType::Bilinear))
        .crop(left.into(), top.into(), w_in.into(), h_in.into());
    Resizer::new()
        .resize(&src, &mut dst, &options)
        .map_err(|e| fail(&e))?;
    Ok(dst.into_vec())
}

/// For each output position, the source position before it and the
/// fraction past that one, as OpenCV computes them (the centre mapped back
/// in double, kept in float).
fn taps(src: usize, dst: usize) -> impl Iterator<Item = (i64, f32)> {
    let scale = 1.0 / (dst as f64 / src as f64);
    (0..dst).map(move |d| {
        let f = ((d as f64 + 0.5) * scale - 0.5) as f32;
        let s = f.floor();
        (s as i64, f - s)
    })
}

/// A fraction's two weights, rounded to nearest even as OpenCV's cvRound.
fn weights(f: f32) -> [i32; 2] {
    [(1.0 - f) * ONE, f * ONE].map(|v| v.round_ties_even() as i32)
}

/// One source row summed across into the output's columns, each sum
/// shifted down 4 as OpenCV's vertical pass first does (then it fits 16 bits).
fn across(row: &[u8], columns: &[(usize, usize, [i32; 2])], out: &mut [i16]) {
    for (o, &(l, r, [a0, a1])) in out.chunks_exact_mut(3).zip(columns) {
        let (p, q) = (&row[l..l + 3], &row[r..r + 3]);
        for c in 0..3 {
            o[c] = ((i32::from(p[c]) * a0 + i32::from(q[c]) * a1) >> 4) as i16;
        }
    }
}

/// Two summed rows mixed into one output row, rounded as OpenCV's SIMD code:
/// 16-bit multiplies keeping the high half, added, rounded down 2, packed.
fn down(upper: &[i16], lower: &[i16], [b0, b1]: [i32; 2], out: &mut [u8]) {
    let (b0, b1) = (b0 as i16, b1 as i16);
    let done = down_simd(upper, lower, (b0, b1), out);
    let high = |v: i16, b: i16| ((i32::from(v) * i32::from(b)) >> 16) as i16;
    for ((o, &p), &q) in out[done..]
        .iter_mut()
        .zip(&upper[done..])
        .zip(&lower[done..])
    {
        *o = ((high(p, b0) + high(q, b1) + 2) >> 2).clamp(0, 255) as u8;
    }
}

/// `down` eight values at a time with SSE2 (every x86-64 has it): OpenCV's
/// own instructions, which the compiler does not find for the plain loop
/// (it widens to 32 bits: 2.5x slower). Returns how many it did.
#[cfg(target_arch = "x86_64")]
fn down_simd(upper: &[i16], lower: &[i16], (b0, b1): (i16, i16), out: &mut [u8]) -> usize {
    use std::arch::x86_64::*;
    let n = out.len().min(upper.len()).min(lower.len()) / 8 * 8;
    // SAFETY: SSE2 is part of x86-64; i + 8 <= n, within all three slices
    // (unaligned 16-byte loads, an 8-byte store).
    unsafe {
        let (vb0, vb1, two) = (_mm_set1_epi16(b0), _mm_set1_epi16(b1), _mm_set1_epi16(2));
        for i in (0..n).step_by(8) {
            let p = _mm_loadu_si128(upper.as_ptr().add(i).cast());
            let q = _mm_loadu_si128(lower.as_ptr().add(i).cast());
            let sum = _mm_add_epi16(_mm_mulhi_epi16(p, vb0), _mm_mulhi_epi16(q, vb1));
            let v = _mm_srai_epi16::<2>(_mm_add_epi16(sum, two));
            _mm_storel_epi64(out.as_mut_ptr().add(i).cast(), _mm_packus_epi16(v, v));
        }
    }
    n
}

#[cfg(not(target_arch = "x86_64"))]
fn down_simd(_: &[i16], _: &[i16], _: (i16, i16), _: &mut [u8]) -> usize {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A constant image stays constant, whatever the sizes (the weights of
    /// each pair sum to one, the rounding keeps the level).
    #[test]
    fn a_constant_image_stays_constant() {
        for (w, h, nw, nh) in [(7, 5, 640, 457), (910, 1137, 512, 640), (3, 1, 1, 1)] {
            for level in [0u8, 1, 127, 254, 255] {
                let out = resize_linear(&vec![level; 3 * w * h], (w, h), (nw, nh));
                assert!(
                    out.iter().all(|&v| v == level),
                    "{w}x{h} -> {nw}x{nh} at {level}"
                );
            }
        }
    }

    /// What OpenCV 4.11's cv2.resize gives (INTER_LINEAR, computed there):
    /// a ramp narrowed and widened, a column shortened and lengthened, and
    /// two RGB pixels to 5x3, whose middle row mixes the one source row with
    /// itself at half weights and so rounds differently from the others.
    #[test]
    fn small_cases_are_opencvs() {
        let grey = |values: &[u8]| values.iter().flat_map(|&v| [v; 3]).collect::<Vec<u8>>();
        let firsts = |out: Vec<u8>| out.chunks_exact(3).map(|p| p[0]).collect::<Vec<_>>();
        let ramp = grey(&[0, 100, 200, 250]);
        assert_eq!(firsts(resize_linear(&ramp, (4, 1), (3, 1))), [17, 150, 242]);
        let wide = firsts(resize_linear(&ramp, (4, 1), (6, 1)));
        assert_eq!(wide, [0, 50, 117, 183, 225, 250]);
        let column = grey(&[10, 20, 200]);
        assert_eq!(firsts(resize_linear(&column, (1, 3), (1, 2))), [13, 155]);
        let tall = firsts(resize_linear(&column, (1, 3), (1, 7)));
        assert_eq!(tall, [10, 11, 16, 20, 97, 174, 200]);
        let two = [0, 100, 200, 250, 3, 77];
        let row = |middle: bool| -> Vec<u8> {
            let (a, b) = if middle { (52, 139) } else { (51, 138) };
            vec![
                0,
                100,
                200,
                25,
                90,
                188,
                125,
                a,
                b,
                225,
                12 + u8::from(middle),
                89,
                250,
                3,
                77,
            ]
        };
        let expected = [row(false), row(true), row(false)].concat();
        assert_eq!(resize_linear(&two, (2, 1), (5, 3)), expected);
    }

    /// A busy 37x23 image up, down and both at once: the sum and a
    /// position-weighted checksum of every value are cv2.resize's
    /// (OpenCV 4.11, computed there; the image is value i = 37 i mod 251).
    #[test]
    fn busy_images_are_opencvs_value_for_value() {
        let (w, h) = (37, 23);
        let rgb: Vec<u8> = (0..3 * w * h).map(|i| (i * 37 % 251) as u8).collect();
        for (size, sum, checksum) in [
            ((16, 41), 246867, 34075),
            ((101, 7), 265707, 289571),
            ((13, 9), 44096, 616782),
        ] {
            let out = resize_linear(&rgb, (w, h), size);
            let got: u64 = out.iter().map(|&v| u64::from(v)).sum();
            let weighted = out
                .iter()
                .enumerate()
                .map(|(i, &v)| i as u64 * u64::from(v));
            let got_checksum = weighted.sum::<u64>() % 1_000_003;
            assert_eq!((got, got_checksum), (sum, checksum), "{size:?}");
        }
    }
}
