//! Following a face by its five points (`track_by: points`): the box sits
//! around the points as it did at the face's last detection, so the
//! engine's landmarks at the last box place the next one. No correlation
//! filter runs: a frame between detections costs what its landmark runs do
//! (MediaPipe's face tracking follows a face from its landmarks likewise).

use fast_image_resize::PixelType;

use crate::pipeline::resize::crop_resize;
use crate::pipeline::{BoxPx, Frame};

/// A detected box in the frame of its five points: its centre's offset
/// from their centroid and its sides, in units of their spread.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Anchor {
    dx: f32,
    dy: f32,
    width: f32,
    height: f32,
}

/// Points closer together than this (pixels of spread) place no box.
const MIN_SPREAD: f32 = 1.0;

/// Frames in a row a face is detected in before its points carry it: one
/// coming into view, or out from behind someone, may be partial at first.
const YOUNG: u64 = 3;

/// Side of the thumbnail of a carried face's box compared frame to frame
/// (16x16 RGB: 768 bytes a track).
const THUMB: usize = 16;

/// Below this likeness (normalized cross-correlation) of its box's
/// thumbnails a frame apart, a carried box has likely lost its face (a cut,
/// someone walking in front): the points would still be placed on whatever
/// is there, so the frame is detected.
const LIKE: f32 = 0.5;

/// What carries one face between detections by its points.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Points {
    /// How its last detected box sat around its points.
    anchor: Option<Anchor>,
    /// Its box's centre and the frame, at its last detection.
    detected: ([f32; 2], u64),
    /// Pixels a frame its box's centre moved between its last two
    /// detections: the next box is looked for that much further on.
    pub(super) velocity: [f32; 2],
    /// The first frame of its present run of frames in a row.
    since: u64,
    /// Its box's thumbnail in the frame before.
    thumb: Option<Vec<u8>>,
}

impl Points {
    /// A face detected at `bbox` around `points` in frame `n`; `before`:
    /// what carried it, when it was seen in the frame before.
    pub(super) fn detected(
        before: Option<Points>,
        bbox: &BoxPx,
        points: &[[f32; 2]; 5],
        n: u64,
    ) -> Points {
        let centre = bbox.centre();
        let (velocity, since, thumb) = match before {
            Some(b) if n > b.detected.1 => {
                let frames = (n - b.detected.1) as f32;
                let v = [0, 1].map(|i| (centre[i] - b.detected.0[i]) / frames);
                (v, b.since, b.thumb)
            }
            _ => ([0.0; 2], n, None),
        };
        Points {
            anchor: Anchor::of(bbox, points),
            detected: (centre, n),
            velocity,
            since,
            thumb,
        }
    }

    /// Whether its box `bbox` in `frame` still looks as its box did in the
    /// frame before (true the first time); keeps this frame's look.
    pub(super) fn looks_alike(&mut self, frame: &Frame, bbox: &BoxPx) -> bool {
        let thumb = thumbnail(frame, bbox);
        let alike = match (&self.thumb, &thumb) {
            (Some(a), Some(b)) => likeness(a, b) >= LIKE,
            _ => true,
        };
        self.thumb = thumb;
        alike
    }

    /// Whether frame `n` detects the face still: it has not yet been seen
    /// in `YOUNG` frames in a row.
    pub(super) fn young(&self, n: u64) -> bool {
        n.saturating_sub(self.since) < YOUNG
    }

    /// Its box around the `points` found at its last box (`Anchor::place`).
    pub(super) fn place(&self, points: &[[f32; 2]; 5], size: (u32, u32)) -> Option<BoxPx> {
        self.anchor?.place(points, size)
    }
}

/// The points' centroid and spread (root mean square distance from it).
fn frame_of(points: &[[f32; 2]; 5]) -> Option<([f32; 2], f32)> {
    let n = points.len() as f32;
    let c = [
        points.iter().map(|p| p[0]).sum::<f32>() / n,
        points.iter().map(|p| p[1]).sum::<f32>() / n,
    ];
    let spread = (points.iter())
        .map(|p| (p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2))
        .sum::<f32>()
        .sqrt()
        / n.sqrt();
    (spread.is_finite() && spread >= MIN_SPREAD).then_some((c, spread))
}

impl Anchor {
    /// How `bbox` sits around `points` (`None`: points too close together
    /// or not finite).
    fn of(bbox: &BoxPx, points: &[[f32; 2]; 5]) -> Option<Anchor> {
        let (c, s) = frame_of(points)?;
        let centre = bbox.centre();
        Some(Anchor {
            dx: (centre[0] - c[0]) / s,
            dy: (centre[1] - c[1]) / s,
            width: (bbox.right - bbox.left) / s,
            height: (bbox.bottom - bbox.top) / s,
        })
    }

    /// The box around `points` as this anchor sat around its own, within
    /// a frame of `size`; `None` where the points place none.
    fn place(&self, points: &[[f32; 2]; 5], size: (u32, u32)) -> Option<BoxPx> {
        let (c, s) = frame_of(points)?;
        let (cx, cy) = (c[0] + self.dx * s, c[1] + self.dy * s);
        let (w, h) = (self.width * s / 2.0, self.height * s / 2.0);
        let (fw, fh) = (size.0 as f32, size.1 as f32);
        let placed = BoxPx {
            left: (cx - w).clamp(0.0, fw),
            top: (cy - h).clamp(0.0, fh),
            right: (cx + w).clamp(0.0, fw),
            bottom: (cy + h).clamp(0.0, fh),
        };
        (placed.shorter_side() >= 1.0).then_some(placed)
    }
}

/// `bbox`, cut to the frame, resized to THUMB x THUMB (`None`: nothing of
/// it in the frame).
fn thumbnail(frame: &Frame, bbox: &BoxPx) -> Option<Vec<u8>> {
    let (w, h) = (frame.width as f32, frame.height as f32);
    let (left, top) = (bbox.left.max(0.0), bbox.top.max(0.0));
    let (right, bottom) = (bbox.right.min(w), bbox.bottom.min(h));
    if right - left < 1.0 || bottom - top < 1.0 {
        return None;
    }
    let image = (frame.width, frame.height, &*frame.rgb);
    let rect = [left, top, right - left, bottom - top];
    crop_resize(image, PixelType::U8x3, rect, (THUMB, THUMB)).ok()
}

/// Normalized cross-correlation of two thumbnails (-1..1; 0 where either is
/// flat).
fn likeness(a: &[u8], b: &[u8]) -> f32 {
    let n = a.len().min(b.len()) as f32;
    let mean = |x: &[u8]| x.iter().map(|&v| f32::from(v)).sum::<f32>() / n;
    let (ma, mb) = (mean(a), mean(b));
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f32::from(x) - ma, f32::from(y) - mb);
        (ab, aa, bb) = (ab + x * y, aa + x * x, bb + y * y);
    }
    match aa * bb {
        d if d > 0.0 => ab / d.sqrt(),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::OwnedFrame;

    const POINTS: [[f32; 2]; 5] = [
        [120.0, 130.0],
        [160.0, 130.0],
        [140.0, 150.0],
        [125.0, 170.0],
        [155.0, 170.0],
    ];

    fn bbox(l: f32, t: f32, r: f32, b: f32) -> BoxPx {
        BoxPx {
            left: l,
            top: t,
            right: r,
            bottom: b,
        }
    }

    /// Points moved and grown: the box moves and grows with them.
    #[test]
    fn the_box_follows_its_points() {
        let detected = bbox(100.0, 100.0, 180.0, 200.0);
        let anchor = Anchor::of(&detected, &POINTS).unwrap();
        assert_eq!(anchor.place(&POINTS, (640, 480)), Some(detected));
        let moved = POINTS.map(|[x, y]| {
            [
                140.0 + (x - 140.0) * 1.5 + 30.0,
                y - 10.0 + (y - 150.0) * 0.5,
            ]
        });
        let placed = anchor.place(&moved, (640, 480)).unwrap();
        let (cx, cy) = (
            (placed.left + placed.right) / 2.0,
            (placed.top + placed.bottom) / 2.0,
        );
        assert!((cx - 170.0).abs() < 1e-3 && cy < 150.0, "{placed:?}");
        assert!(placed.right - placed.left > 80.0, "{placed:?}");
    }

    /// Points in one place place no box; a box past the frame's edge is
    /// cut at it.
    #[test]
    fn degenerate_points_place_nothing_and_edges_cut() {
        let anchor = Anchor::of(&bbox(100.0, 100.0, 180.0, 200.0), &POINTS).unwrap();
        assert_eq!(
            Anchor::of(&bbox(0.0, 0.0, 9.0, 9.0), &[[5.0, 5.0]; 5]),
            None
        );
        assert_eq!(anchor.place(&[[5.0, 5.0]; 5], (640, 480)), None);
        let nan = [[f32::NAN, 1.0]; 5];
        assert_eq!(anchor.place(&nan, (640, 480)), None);
        let at_edge = POINTS.map(|[x, y]| [x + 480.0, y]);
        let placed = anchor.place(&at_edge, (640, 480)).unwrap();
        assert_eq!(placed.right, 640.0);
    }

    /// The velocity is the move between the last two detections per frame
    /// (not a placed box's jitter); a face is young for its first `YOUNG`
    /// frames in a row, and a gap starts its run and its velocity afresh.
    #[test]
    fn velocity_from_detections_and_young_runs() {
        let at = |x: f32| bbox(x, 100.0, x + 80.0, 200.0);
        let first = Points::detected(None, &at(100.0), &POINTS, 10);
        assert_eq!(first.velocity, [0.0, 0.0]);
        assert!(first.young(11) && first.young(12) && !first.young(13));
        let later = Points::detected(Some(first), &at(130.0), &POINTS, 13);
        assert_eq!(later.velocity, [10.0, 0.0]);
        assert!(!later.young(14), "its run began at frame 10");
        let after_gap = Points::detected(None, &at(400.0), &POINTS, 30);
        assert_eq!(after_gap.velocity, [0.0, 0.0]);
        assert!(after_gap.young(31));
    }

    /// A frame with a bright disc on a ramp, the disc at `x`.
    fn disc_at(x: f32) -> OwnedFrame {
        let (w, h) = (320u32, 240u32);
        let mut rgb = Vec::with_capacity((3 * w * h) as usize);
        for py in 0..h {
            for px in 0..w {
                let d = ((px as f32 - x).powi(2) + (py as f32 - 120.0).powi(2)).sqrt();
                let v = if d < 30.0 { 230 } else { (px / 4) as u8 };
                rgb.extend([v, v / 2, 255 - v]);
            }
        }
        Frame {
            width: w,
            height: h,
            rgb: rgb.into(),
        }
    }

    /// The box that follows its face looks alike a frame later; a box on
    /// something else (a cut: the face gone) does not, nor one wholly out
    /// of the frame.
    #[test]
    fn a_box_that_lost_its_face_looks_unlike() {
        let around = |x: f32| bbox(x - 40.0, 80.0, x + 40.0, 160.0);
        let mut points = Points::detected(None, &around(100.0), &POINTS, 0);
        assert!(
            points.looks_alike(&disc_at(100.0), &around(100.0)),
            "the first look"
        );
        assert!(points.looks_alike(&disc_at(104.0), &around(103.0)));
        assert!(!points.looks_alike(&disc_at(250.0), &around(103.0)));
        assert!(
            points.looks_alike(&disc_at(250.0), &around(103.0)),
            "alike itself"
        );
        assert!(
            points.looks_alike(&disc_at(250.0), &around(500.0)),
            "no thumbnail: no say"
        );
        assert_eq!(likeness(&[7; 768], &[7; 768]), 0.0, "flat");
    }
}
