//! The visual tracker that carries a face's box from one frame to the next
//! between detections: dlib's correlation tracker (DSST: position and scale
//! by correlation filters over a grey 64x64 window), whichever engine
//! detects and embeds. Timed by `cargo bench --bench engine` (group
//! "tracker"); each holds its filters, 4.8 MB (32 feature channels of 64x64
//! complex values, twice), while its face is followed.

use super::dlib::shim::{DRect, Image, Tracker};
use crate::error::Result;
use crate::pipeline::{BoxPx, Frame};

/// A frame as the trackers read it (copied once for all of its faces).
pub struct TrackFrame(Image);

impl TrackFrame {
    pub fn new(frame: &Frame) -> Result<Self> {
        Image::new(&frame.rgb, frame.width as usize, frame.height as usize).map(TrackFrame)
    }
}

/// One face's box, followed from frame to frame.
pub struct BoxTracker(Tracker);

/// Below this peak-to-sidelobe ratio the tracker has likely lost its face
/// (dlib's documentation of `correlation_tracker::update`).
pub const LOST_BELOW: f32 = 7.0;

impl BoxTracker {
    /// Start on `bbox` of `frame` (a box under 1 px a side is refused).
    pub fn start(frame: &TrackFrame, bbox: BoxPx) -> Result<Self> {
        Tracker::start(&frame.0, &drect(bbox)).map(BoxTracker)
    }

    /// The box in the next frame and how sure the tracker is of it
    /// (peak-to-sidelobe ratio; see `LOST_BELOW`).
    pub fn update(&mut self, frame: &TrackFrame) -> Result<(BoxPx, f32)> {
        let (r, confidence) = self.0.update(&frame.0)?;
        let bbox = BoxPx {
            left: r.left as f32,
            top: r.top as f32,
            right: r.right as f32,
            bottom: r.bottom as f32,
        };
        Ok((bbox, confidence as f32))
    }
}

fn drect(b: BoxPx) -> DRect {
    DRect {
        left: b.left.into(),
        top: b.top.into(),
        right: b.right.into(),
        bottom: b.bottom.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::pipeline::OwnedFrame;

    /// A grey frame with a dark square (a "face") at `x`.
    fn frame_with_square(x: u32) -> OwnedFrame {
        let (w, h) = (320u32, 240u32);
        let mut rgb = vec![200u8; (w * h * 3) as usize];
        for y in 80..140 {
            for dx in 0..60 {
                let v = if (dx / 10 + y / 10) % 2 == 0 { 20 } else { 90 };
                let i = ((y * w + x + dx) * 3) as usize;
                rgb[i..i + 3].fill(v as u8);
            }
        }
        Frame {
            width: w,
            height: h,
            rgb: rgb.into(),
        }
    }

    #[test]
    fn follows_a_moving_square_and_refuses_empty_boxes() {
        let at = |x: f32| BoxPx {
            left: x,
            top: 80.0,
            right: x + 60.0,
            bottom: 140.0,
        };
        let first = TrackFrame::new(&frame_with_square(100)).unwrap();
        let mut t = BoxTracker::start(&first, at(100.0)).unwrap();
        for x in [104, 108, 112, 116] {
            let (b, confidence) = t
                .update(&TrackFrame::new(&frame_with_square(x)).unwrap())
                .unwrap();
            assert!((b.left - x as f32).abs() < 3.0, "{b:?} for {x}");
            assert!(confidence > LOST_BELOW, "{confidence}");
        }
        let empty = BoxPx {
            right: 100.5,
            ..at(100.0)
        };
        let e = BoxTracker::start(&first, empty).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        let nan = BoxPx {
            left: f32::NAN,
            ..at(100.0)
        };
        assert!(BoxTracker::start(&first, nan).is_err());
    }
}
