//! How a frame becomes a detector's input, and how the input's pixels go
//! back to the frame's: stretched to the input, or letterboxed (scaled
//! whole, the rest filled) at the top left or in the middle. The family
//! says which (its reference code's), each part overridable by parameters.

use crate::engine::onnx::ops::{append_input, fill_region, Layout, Region};
use crate::engine::onnx::settings::{Normalize, Placement};
use crate::error::Result;
use crate::pipeline::{BoxPx, Frame};

/// How a letterbox's scaled size and its way back are reckoned: as each
/// family's reference code does, so the model sees the same pixels and the
/// points come back to the same place.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sizing {
    /// Each side rounded to the nearest pixel, each axis mapped back by its
    /// own scale.
    Round,
    /// insightface's `SCRFD.detect`: the side that fills the input whole,
    /// the other truncated (`int()`), one scale (the height's) for both axes.
    Insightface,
}

/// A detector's input preparation, settled at load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prep {
    /// The input's (width, height).
    pub size: (usize, usize),
    pub placement: Placement,
    pub sizing: Sizing,
    /// The byte value the letterbox's border is filled with (each channel).
    pub fill: u8,
    pub norm: Normalize,
    pub layout: Layout,
}

/// Where a region of a frame went in the input: input = (frame - origin) *
/// scale + offset, per axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mapping {
    origin: [f32; 2],
    scale: [f32; 2],
    offset: [f32; 2],
}

impl Mapping {
    /// A point of the input in the frame's pixels.
    pub fn to_frame(&self, [x, y]: [f32; 2]) -> [f32; 2] {
        [
            (x - self.offset[0]) / self.scale[0] + self.origin[0],
            (y - self.offset[1]) / self.scale[1] + self.origin[1],
        ]
    }

    /// A box of the input (left, top, right, bottom) in the frame's pixels.
    pub fn box_to_frame(&self, b: [f32; 4]) -> BoxPx {
        let [left, top] = self.to_frame([b[0], b[1]]);
        let [right, bottom] = self.to_frame([b[2], b[3]]);
        BoxPx {
            left,
            top,
            right,
            bottom,
        }
    }
}

impl Prep {
    /// Where `region` lands in the input, and the size it is scaled to.
    pub fn mapping(&self, region: &Region) -> (Mapping, (usize, usize)) {
        let (w, h) = (self.size.0 as f32, self.size.1 as f32);
        let (rw, rh) = (region.width.max(1.0), region.height.max(1.0));
        let (scaled, offset) = match self.placement {
            Placement::Stretch => ((w, h), (0.0, 0.0)),
            Placement::LetterboxTopLeft | Placement::LetterboxCentre => {
                let scaled = self.letterboxed((w, h), (rw, rh));
                let offset = match self.placement {
                    Placement::LetterboxCentre => (
                        ((w - scaled.0) / 2.0).floor(),
                        ((h - scaled.1) / 2.0).floor(),
                    ),
                    _ => (0.0, 0.0),
                };
                (scaled, offset)
            }
        };
        let scale = match (self.placement, self.sizing) {
            (Placement::Stretch, _) | (_, Sizing::Round) => [scaled.0 / rw, scaled.1 / rh],
            (_, Sizing::Insightface) => [scaled.1 / rh; 2],
        };
        let mapping = Mapping {
            origin: [region.left, region.top],
            scale,
            offset: [offset.0, offset.1],
        };
        (mapping, (scaled.0 as usize, scaled.1 as usize))
    }

    /// The size a `rw`x`rh` region is scaled to, to fit a `w`x`h` input whole.
    fn letterboxed(&self, (w, h): (f32, f32), (rw, rh): (f32, f32)) -> (f32, f32) {
        match self.sizing {
            Sizing::Round => {
                let ratio = (w / rw).min(h / rh);
                (
                    (rw * ratio).round().clamp(1.0, w),
                    (rh * ratio).round().clamp(1.0, h),
                )
            }
            Sizing::Insightface => {
                // In double, as Python computes it.
                let (w, h, rw, rh) = (w as f64, h as f64, rw as f64, rh as f64);
                let image_ratio = rh / rw;
                let (sw, sh) = match image_ratio > h / w {
                    true => ((h / image_ratio).trunc(), h),
                    false => (w, (w * image_ratio).trunc()),
                };
                (sw.clamp(1.0, w) as f32, sh.clamp(1.0, h) as f32)
            }
        }
    }

    /// `region` of `frame` as the input, appended to `data`; where it went.
    pub fn append(&self, frame: &Frame, region: &Region, data: &mut Vec<f32>) -> Result<Mapping> {
        let (mapping, scaled) = self.mapping(region);
        let image = fill_region(
            frame,
            region,
            scaled,
            mapping.offset_px(),
            self.size,
            self.fill,
        )?;
        append_input(&image, self.norm, self.layout, data)?;
        Ok(mapping)
    }
}

impl Mapping {
    /// The offset in whole pixels (letterbox offsets are whole).
    fn offset_px(&self) -> (usize, usize) {
        (self.offset[0] as usize, self.offset[1] as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prep(placement: Placement, size: (usize, usize)) -> Prep {
        Prep {
            size,
            placement,
            sizing: Sizing::Round,
            fill: 0,
            norm: Normalize::plain(true),
            layout: Layout::Nchw,
        }
    }

    #[test]
    fn letterbox_keeps_the_aspect_and_maps_back() {
        let whole = Region {
            left: 0.0,
            top: 0.0,
            width: 1000.0,
            height: 500.0,
        };
        let (m, scaled) = prep(Placement::LetterboxCentre, (640, 640)).mapping(&whole);
        assert_eq!(scaled, (640, 320));
        assert_eq!(m.to_frame([0.0, 160.0]), [0.0, 0.0]);
        assert_eq!(m.to_frame([640.0, 480.0]), [1000.0, 500.0]);
        let (m, _) = prep(Placement::LetterboxTopLeft, (640, 640)).mapping(&whole);
        assert_eq!(m.to_frame([320.0, 160.0]), [500.0, 250.0]);
        let (m, scaled) = prep(Placement::Stretch, (320, 240)).mapping(&whole);
        assert_eq!(scaled, (320, 240));
        assert_eq!(m.to_frame([160.0, 120.0]), [500.0, 250.0]);
    }

    #[test]
    fn a_region_maps_from_its_own_corner() {
        let region = Region {
            left: -50.0,
            top: 100.0,
            width: 200.0,
            height: 200.0,
        };
        let (m, scaled) = prep(Placement::LetterboxCentre, (100, 100)).mapping(&region);
        assert_eq!(scaled, (100, 100));
        assert_eq!(m.to_frame([0.0, 0.0]), [-50.0, 100.0]);
        assert_eq!(m.to_frame([50.0, 50.0]), [50.0, 200.0]);
    }

    /// insightface's SCRFD sizing: biden.jpg (970x2204) is 281 wide where
    /// rounding makes it 282 (640 / 2.2722 = 281.67), and a point comes back
    /// by the height's scale on both axes.
    #[test]
    fn insightface_sizing_truncates_and_keeps_one_scale() {
        let photo = Region {
            left: 0.0,
            top: 0.0,
            width: 970.0,
            height: 2204.0,
        };
        let mut p = prep(Placement::LetterboxTopLeft, (640, 640));
        assert_eq!(p.mapping(&photo).1, (282, 640));
        p.sizing = Sizing::Insightface;
        let (m, scaled) = p.mapping(&photo);
        assert_eq!(scaled, (281, 640));
        let back = 2204.0 / 640.0;
        assert_eq!(m.to_frame([100.0, 100.0]), [100.0 * back, 100.0 * back]);
        let wide = Region {
            width: 1920.0,
            height: 1080.0,
            ..photo
        };
        assert_eq!(p.mapping(&wide).1, (640, 360));
    }
}
