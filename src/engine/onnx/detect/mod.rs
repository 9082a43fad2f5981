//! Detector families behind one small interface. A family (one file here, one
//! row of `FAMILIES`) says how a frame becomes its input (`Reference`: size,
//! placement, normalisation) and reads its model's outputs as candidates:
//! boxes, scores and, where it has them, five points (a family's `fit` checks
//! the outputs are in its layout and returns the `Decode` that reads them).
//! The family is chosen once at load, by name or read from the graph
//! (`choose.rs`); the engine's stages never ask which one runs.
//!
//! Five points are always in the engine's order: the eye on the image's
//! left, the eye on its right, the nose tip, the mouth corner on the image's
//! left, the one on its right (`pipeline::align::ARCFACE_112`).

pub mod bench;
mod blazeface;
mod choose;
mod detector;
mod grid;
pub mod prep;
mod retinaface;
mod scrfd;
mod ultraface;
mod yolo_face;
mod yunet;

pub use choose::FAMILY_NAMES;
pub(super) use detector::{Detector, Found};

pub(super) use super::net::Output;
use super::ops::Layout;
use super::settings::Normalize;
pub use super::settings::Placement;
use crate::error::{Error, Result};
pub use prep::Sizing;

pub(super) use crate::pipeline::align::Five;

/// One face a decoder read: its box (left, top, right, bottom) and points
/// in the input's pixels, and its score.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub bbox: [f32; 4],
    pub score: f32,
    pub points: Option<Five>,
}

/// What the loaded model shows a family: its input and its outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    /// The input's (width, height).
    pub size: (usize, usize),
    pub layout: Layout,
    pub outputs: Vec<Output>,
}

impl Graph {
    /// "input 640x640 NCHW; outputs 448 [1,12800,1], ..." for messages.
    pub fn describe(&self) -> String {
        let outputs: Vec<String> = (self.outputs.iter())
            .map(|o| format!("{} {:?}", o.name, o.shape).replace(", ", ","))
            .collect();
        format!(
            "input {}x{} {}; {} outputs: {}",
            self.size.0,
            self.size.1,
            self.layout.name(),
            self.outputs.len(),
            outputs.join(", ")
        )
    }

    /// The output named `name` (its index), if any.
    pub fn named(&self, name: &str) -> Option<usize> {
        self.outputs.iter().position(|o| o.name == name)
    }
}

/// A family's reference input preparation and thresholds: what its
/// published code uses. Parameters override each part.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reference {
    /// For a model whose input size is free; `None`: a fixed-size family.
    pub size: Option<(usize, usize)>,
    pub placement: Placement,
    /// How a letterbox's size and scale are reckoned.
    pub sizing: Sizing,
    pub fill: u8,
    pub norm: Normalize,
    pub threshold: f32,
    pub nms_iou: f32,
}

/// Why a model's outputs are not in a family's layout; `near` when they
/// are in its general shape (the number and kind of outputs) with a detail
/// off: the families a load error lists as close.
#[derive(Clone, Debug, PartialEq)]
pub struct Misfit {
    pub why: String,
    pub near: bool,
}

impl Misfit {
    pub fn far(why: impl Into<String>) -> Self {
        Misfit {
            why: why.into(),
            near: false,
        }
    }

    pub fn near(why: impl Into<String>) -> Self {
        Misfit {
            why: why.into(),
            near: true,
        }
    }
}

/// A family, one row of `FAMILIES`: its name, its reference preparation,
/// and how it reads a model.
pub struct Family {
    pub name: &'static str,
    pub reference: Reference,
    /// The decoder for a model's outputs, or why they are not this family's.
    pub fit: fn(&Graph) -> std::result::Result<Box<dyn Decode>, Misfit>,
}

/// Reads one item's outputs (each output's values, in the model's output
/// order) as candidates.
pub trait Decode: Send + Sync {
    /// Appends the candidates scoring `threshold` or more to `found`. An
    /// output of another size than the graph showed is an error.
    fn decode(
        &self,
        outputs: &[Vec<f32>],
        threshold: f32,
        found: &mut Vec<Candidate>,
    ) -> Result<()>;
    /// Whether candidates carry five points.
    fn gives_points(&self) -> bool;
    /// The layout it read, for the load log: "9 outputs, strides 8/16/32,
    /// 2 anchors a place, with points".
    fn describe(&self) -> String;
    /// The preparation this layout's models take where it is not the
    /// family's own (a family that reads another family's layout).
    fn reference(&self) -> Option<Reference> {
        None
    }
}

/// Every family, in the order a load error lists them.
pub(super) static FAMILIES: &[&Family] = &[
    &ultraface::FAMILY,
    &scrfd::FAMILY,
    &retinaface::FAMILY,
    &yunet::FAMILY,
    &blazeface::FAMILY,
    &yolo_face::FAMILY,
];

/// The outputs' lengths as `graph` showed them, each checked against
/// `outputs`: an error names the first that differs.
pub(super) fn check_lengths(outputs: &[Vec<f32>], want: &[usize]) -> Result<()> {
    if outputs.len() < want.len() {
        return Err(Error::internal(format!(
            "the detector gave {} outputs, its layout reads {}",
            outputs.len(),
            want.len()
        )));
    }
    for (i, (got, &want)) in outputs.iter().zip(want).enumerate() {
        if got.len() != want {
            return Err(Error::internal(format!(
                "detector output {i} has {} values, its layout reads {want}",
                got.len()
            )));
        }
    }
    Ok(())
}

/// The positions of `values` (every `step`-th from `first`, `count` of
/// them) at `least` or more: the scan each decoder starts with, one compare
/// a candidate (NaN never passes).
pub(super) fn at_least(
    values: &[f32],
    first: usize,
    step: usize,
    count: usize,
    least: f32,
) -> impl Iterator<Item = usize> + '_ {
    let span = match count {
        0 => &[][..],
        _ => &values[first.min(values.len())..(first + (count - 1) * step + 1).min(values.len())],
    };
    (0..count).filter(move |&i| span.get(i * step).is_some_and(|&v| v >= least))
}

/// The logistic function.
pub(super) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The logit of a probability: a sigmoid score is at least `p` exactly when
/// its raw value is at least this (checked before the exp is paid).
pub(super) fn logit(p: f32) -> f32 {
    let p = p.clamp(1e-7, 1.0 - 1e-7);
    (p / (1.0 - p)).ln()
}

#[cfg(test)]
mod tests;
