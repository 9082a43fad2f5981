//! The detector stage: a model of one family, loaded at the size its input
//! takes, its outputs read by the family's decoder, candidates mapped back
//! to the frame, overlaps suppressed. It also finds the five points of a
//! face at a known box (a tracker's) by running the detector on the region
//! around it: for families with points that is the landmark model.

use std::path::Path;

use super::choose;
use super::prep::{Mapping, Prep};
use super::{Candidate, Decode, Family, Five, Graph};
use crate::engine::onnx::embedder::mean_text;
use crate::engine::onnx::net::Net;
use crate::engine::onnx::ops::{iou, nms, Region};
use crate::engine::onnx::settings::{Normalize, OnnxSettings};
use crate::error::{Error, Result};
use crate::pipeline::align::ARCFACE_112;
use crate::pipeline::{BoxPx, Frame};

/// The size a free-size model is first run at to read its outputs, when
/// neither the parameters nor the family say one.
const PROBE_SIZE: (usize, usize) = (640, 640);

/// The input a free-size model takes a face's region at to find its points:
/// the face about half of it, at 96 pixels wide points are as sure as at
/// the full size and the run costs a tenth of a 640x640 one.
const LOCATOR_SIZE: (usize, usize) = (192, 192);

/// A face's region for its points: this many times its box's longer side.
const REGION_SCALE: f32 = 2.0;

/// One face the detector found, in the frame's pixels.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub bbox: BoxPx,
    pub score: f32,
    pub points: Option<Five>,
}

/// A loaded model with its decoder and input preparation.
pub(in crate::engine::onnx) struct Stage {
    pub net: Net,
    decode: Box<dyn Decode>,
    pub prep: Prep,
}

pub(in crate::engine::onnx) struct Detector {
    family: &'static Family,
    pub full: Stage,
    /// A free-size model loaded again at LOCATOR_SIZE, for faces' regions;
    /// `None`: `full` takes them.
    pub locator: Option<Stage>,
    threshold: f32,
    nms_iou: f32,
}

/// Loads the detector model at a size (used where its input is free).
pub(in crate::engine::onnx) type LoadAt<'a> = dyn Fn((usize, usize)) -> Result<Net> + 'a;

impl Detector {
    pub fn load(settings: &OnnxSettings, load: &LoadAt<'_>) -> Result<Self> {
        let path = settings.detector_model.as_path();
        let named = (settings.detector_family.as_deref())
            .map(choose::find)
            .transpose()?;
        let asked = settings.detector.size;
        let first = asked
            .or(named.and_then(|f| f.reference.size))
            .unwrap_or(PROBE_SIZE);
        let net = load(first)?;
        if let Some((w, h)) = asked.filter(|&s| !net.free_size && s != net.image_size()) {
            let (fw, fh) = net.image_size();
            return Err(Error::invalid(format!(
                "detector_input_size {w}x{h}: detector_model {} takes {fw}x{fh} only (its \
                 input size is fixed in the file)",
                path.display()
            )));
        }
        let graph = graph_of(&net, path)?;
        let (family, decode) = match named {
            Some(family) => (family, choose::fit(family, &graph, path)?),
            None => choose::auto(&graph, path)?,
        };
        let mut full = Stage::new(net, decode, family, &graph, settings);
        // A free-size model read at another size than its family's.
        let reference = family.reference.size;
        if full.net.free_size && asked.is_none() && reference.is_some_and(|s| s != graph.size) {
            full = Stage::load(
                load,
                reference.unwrap_or(PROBE_SIZE),
                family,
                settings,
                path,
            )?;
        }
        let locator = match full.decode.gives_points() && full.net.free_size {
            true => Stage::load(load, LOCATOR_SIZE, family, settings, path).ok(),
            false => None,
        };
        let reference = full.reference(family);
        Ok(Detector {
            family,
            full,
            locator,
            threshold: settings.detector.threshold.unwrap_or(reference.threshold),
            nms_iou: settings.detector.nms_iou.unwrap_or(reference.nms_iou),
        })
    }

    pub fn family_name(&self) -> &'static str {
        self.family.name
    }

    /// Whether its faces come with five points.
    pub fn gives_points(&self) -> bool {
        self.full.decode.gives_points()
    }

    /// Each frame's faces: best first, overlaps suppressed.
    pub fn detect(&self, frames: &[&Frame]) -> Vec<Result<Vec<Found>>> {
        let items: Vec<(&Frame, Region)> = frames.iter().map(|f| (*f, Region::whole(f))).collect();
        (self.full.find(&items, self.threshold).into_iter())
            .map(|found| Ok(nms(found?, self.nms_iou, |f| &f.bbox)))
            .collect()
    }

    /// The five points of each face at its box: the detector on the region
    /// around the box (at LOCATOR_SIZE where the model's size is free),
    /// the points of the face found there that best covers the box; where
    /// none does, an average face's points in the box.
    pub fn locate(&self, faces: &[(&Frame, BoxPx)]) -> Vec<Result<Five>> {
        let stage = self.locator.as_ref().unwrap_or(&self.full);
        let items: Vec<(&Frame, Region)> = faces.iter().map(|&(f, b)| (f, around(&b))).collect();
        // A face a tracker holds is there: a weaker score still places it.
        let threshold = self.threshold.min(0.3);
        (stage.find(&items, threshold).into_iter().zip(faces))
            .map(|(found, (_, bbox))| Ok(best_points(found?, bbox).unwrap_or(average_face(bbox))))
            .collect()
    }

    /// For the load log: the family, the layout it read, the preparation.
    pub fn describe(&self, file: &str) -> String {
        let prep = &self.full.prep;
        let locator = match &self.locator {
            Some(l) => format!("; a face's points at {}x{}", l.prep.size.0, l.prep.size.1),
            None => String::new(),
        };
        format!(
            "{} detector {file} ({}; {}x{} {} {}{locator})",
            self.family.name,
            self.full.decode.describe(),
            prep.size.0,
            prep.size.1,
            prep.placement.name(),
            prep.layout.name(),
        )
    }

    /// Every setting the detector runs with, as `parameter=value` words (a
    /// config that sets them serves the model the same way).
    pub fn settings_text(&self) -> String {
        let prep = &self.full.prep;
        let mean = mean_text(&prep.norm.mean);
        format!(
            "detector_family={} detector_input_size={}x{} detector_resize={} \
             detector_channels={} detector_mean={mean} detector_scale={} \
             detector_threshold={} nms_iou={}",
            self.family.name,
            prep.size.0,
            prep.size.1,
            prep.placement.name(),
            if prep.norm.rgb { "RGB" } else { "BGR" },
            prep.norm.scale,
            self.threshold,
            self.nms_iou
        )
    }
}

impl Stage {
    fn new(
        net: Net,
        decode: Box<dyn Decode>,
        family: &Family,
        graph: &Graph,
        settings: &OnnxSettings,
    ) -> Self {
        let reference = decode.reference().unwrap_or(family.reference);
        let asked = &settings.detector;
        let prep = Prep {
            size: graph.size,
            placement: asked.placement.unwrap_or(reference.placement),
            sizing: reference.sizing,
            fill: reference.fill,
            norm: Normalize {
                rgb: asked.rgb.unwrap_or(reference.norm.rgb),
                mean: asked.mean.unwrap_or(reference.norm.mean),
                scale: asked.scale.unwrap_or(reference.norm.scale),
            },
            layout: graph.layout,
        };
        Stage { net, decode, prep }
    }

    /// The reference preparation of the layout it reads.
    fn reference(&self, family: &Family) -> super::Reference {
        self.decode.reference().unwrap_or(family.reference)
    }

    /// The model loaded at `size` and read as `family`.
    fn load(
        load: &LoadAt<'_>,
        size: (usize, usize),
        family: &Family,
        settings: &OnnxSettings,
        path: &Path,
    ) -> Result<Self> {
        let net = load(size)?;
        let graph = graph_of(&net, path)?;
        let decode = choose::fit(family, &graph, path)?;
        Ok(Stage::new(net, decode, family, &graph, settings))
    }

    /// Each item's candidates scoring `threshold` or more (a region of a
    /// frame through the model), in the frame's pixels, best first.
    fn find(&self, items: &[(&Frame, Region)], threshold: f32) -> Vec<Result<Vec<Found>>> {
        let mappings: Vec<Mapping> = items.iter().map(|(_, r)| self.prep.mapping(r).0).collect();
        let runs = self.net.run_items(items, |(frame, region), data| {
            self.prep.append(frame, region, data).map(|_| ())
        });
        (runs.into_iter().zip(mappings))
            .map(|(outputs, mapping)| read(&*self.decode, &outputs?, &mapping, threshold))
            .collect()
    }
}

/// One item's outputs as faces in the frame's pixels scoring `threshold` or
/// more, best first.
pub(super) fn read(
    decode: &dyn Decode,
    outputs: &[Vec<f32>],
    mapping: &Mapping,
    threshold: f32,
) -> Result<Vec<Found>> {
    let mut candidates = Vec::new();
    decode.decode(outputs, threshold, &mut candidates)?;
    let mut found: Vec<Found> = (candidates.iter())
        .filter_map(|c| in_frame(c, mapping))
        .collect();
    found.sort_by(|a, b| b.score.total_cmp(&a.score));
    Ok(found)
}

/// The model's input and outputs as a run of one blank item shows them; a
/// value that is not a finite number (NaN, infinite) fails the load.
fn graph_of(net: &Net, path: &Path) -> Result<Graph> {
    let outputs = net.probe()?;
    for o in &outputs {
        if let Some(bad) = o.1.iter().find(|v| !v.is_finite()) {
            return Err(Error::unavailable(format!(
                "detector_model {}: output {} gives {bad} on a blank image (a model that \
                 answers with values that are not finite numbers cannot be read)",
                path.display(),
                o.0.name
            )));
        }
    }
    Ok(Graph {
        size: net.image_size(),
        layout: net.layout,
        outputs: outputs.into_iter().map(|(o, _)| o).collect(),
    })
}

/// A candidate in the frame's pixels; none when a value is not finite (a
/// broken model: it would break the crops' arithmetic).
fn in_frame(c: &Candidate, mapping: &Mapping) -> Option<Found> {
    let finite = c
        .bbox
        .iter()
        .chain(c.points.iter().flatten().flatten())
        .all(|v| v.is_finite());
    if !finite || !c.score.is_finite() {
        return None;
    }
    Some(Found {
        bbox: mapping.box_to_frame(c.bbox),
        score: c.score,
        points: c.points.map(|p| p.map(|q| mapping.to_frame(q))),
    })
}

/// The square region around a box, REGION_SCALE times its longer side.
fn around(b: &BoxPx) -> Region {
    let side = ((b.right - b.left).max(b.bottom - b.top) * REGION_SCALE).max(2.0);
    let (cx, cy) = ((b.left + b.right) / 2.0, (b.top + b.bottom) / 2.0);
    Region {
        left: cx - side / 2.0,
        top: cy - side / 2.0,
        width: side,
        height: side,
    }
}

/// The points of the face found that best covers `bbox` (score times
/// overlap), if any overlaps it.
fn best_points(found: Vec<Found>, bbox: &BoxPx) -> Option<Five> {
    (found.into_iter())
        .filter_map(|f| Some((f.score * iou(&f.bbox, bbox), f.points?)))
        .filter(|(fit, _)| *fit > 0.0)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, points)| points)
}

/// An average face's points in a box: the ArcFace template stretched to it.
fn average_face(b: &BoxPx) -> Five {
    let (w, h) = (b.right - b.left, b.bottom - b.top);
    ARCFACE_112.map(|[x, y]| [b.left + x / 112.0 * w, b.top + y / 112.0 * h])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(left: f32, top: f32, right: f32, bottom: f32) -> BoxPx {
        BoxPx {
            left,
            top,
            right,
            bottom,
        }
    }

    #[test]
    fn a_face_takes_the_points_of_what_covers_it_best() {
        let target = b(100.0, 100.0, 200.0, 200.0);
        let at = |bbox: BoxPx, score: f32, x: f32| Found {
            bbox,
            score,
            points: Some([[x, 0.0]; 5]),
        };
        let found = vec![
            at(b(300.0, 300.0, 400.0, 400.0), 0.99, 1.0),
            at(b(110.0, 105.0, 205.0, 200.0), 0.6, 2.0),
            at(b(150.0, 150.0, 250.0, 250.0), 0.9, 3.0),
        ];
        assert_eq!(best_points(found, &target).unwrap()[0][0], 2.0);
        let far = vec![at(b(300.0, 300.0, 400.0, 400.0), 0.99, 1.0)];
        assert_eq!(best_points(far, &target), None);
        let average = average_face(&b(0.0, 0.0, 112.0, 224.0));
        assert_eq!(average[2], [ARCFACE_112[2][0], 2.0 * ARCFACE_112[2][1]]);
    }

    #[test]
    fn the_region_around_a_box_is_square_and_centred() {
        let r = around(&b(100.0, 50.0, 140.0, 110.0));
        assert_eq!(
            (r.left, r.top, r.width, r.height),
            (60.0, 20.0, 120.0, 120.0)
        );
    }
}
