//! The embedder as it comes: its input's size and layout read from the
//! model, the face aligned to it (the configured template, or ArcFace's
//! scaled to the input), its values by the configured mean and scale or standardised per
//! face, the output L2-normalised; with `flip` the face and its mirror
//! image summed first.

use std::path::Path;

use super::net::Net;
use super::ops::{append_input, l2_normalize, mirror};
use super::settings::{EmbedderConventions, Normalize};
use crate::error::{Error, Result};
use crate::pipeline::align::{similarity, Five, ARCFACE_112};
use crate::pipeline::warp::warp_affine;
use crate::pipeline::{Frame, OwnedFrame};

pub(super) struct Embedder {
    pub net: Net,
    conventions: EmbedderConventions,
    /// The embedding's length (its first output's, one face a run).
    pub len: usize,
    /// Where the five points go in the input, in its pixels.
    reference: Five,
}

/// Where the five points go in an input of `(w, h)`: the configured
/// template, every point inside it, or ArcFace's scaled from 112x112.
fn reference(template: Option<Five>, (w, h): (usize, usize)) -> Result<Five> {
    let inside =
        |&[x, y]: &[f32; 2]| (0.0..=w as f32).contains(&x) && (0.0..=h as f32).contains(&y);
    match template {
        Some(t) if t.iter().all(inside) => Ok(t),
        Some(_) => Err(Error::unavailable(format!(
            "embedder_template: every point must lie in the embedder's {w}x{h} input"
        ))),
        None => {
            let (sx, sy) = (w as f32 / 112.0, h as f32 / 112.0);
            Ok(ARCFACE_112.map(|[x, y]| [x * sx, y * sy]))
        }
    }
}

impl Embedder {
    /// `net` with `conventions`; one blank run tells the embedding's length.
    pub fn new(net: Net, conventions: EmbedderConventions, path: &Path) -> Result<Self> {
        let len = net.probe()?.first().map_or(0, |(_, values)| values.len());
        if len == 0 {
            return Err(Error::unavailable(format!(
                "embedder_model {}: its first output is empty (expected the face embedding)",
                path.display()
            )));
        }
        let reference = reference(conventions.template, net.image_size())?;
        Ok(Embedder {
            net,
            conventions,
            len,
            reference,
        })
    }

    /// The aligned chip (the embedder's input size) of a face of `frame`.
    pub fn chip(&self, frame: &Frame, five: &Five) -> Result<OwnedFrame> {
        let (w, h) = self.net.image_size();
        warp_affine(frame, &similarity(five, &self.reference)?, w, h)
    }

    /// Each chip's embedding, L2-normalised.
    pub fn embed(&self, chips: &[&Frame]) -> Vec<Result<Vec<f32>>> {
        if !self.conventions.flip {
            return self
                .runs(chips)
                .into_iter()
                .map(|e| e.map(|v| l2_normalize(&v)))
                .collect();
        }
        let mirrors: Vec<Frame> = chips.iter().map(|c| mirror(c)).collect();
        let both: Vec<&Frame> = chips
            .iter()
            .zip(&mirrors)
            .flat_map(|(c, m)| [*c, m])
            .collect();
        let mut runs = self.runs(&both).into_iter();
        (0..chips.len())
            .map(|_| {
                let missing = || Err(Error::internal("a model run lost an item"));
                let face = runs.next().unwrap_or_else(missing);
                let mirrored = runs.next().unwrap_or_else(missing);
                let (face, mirrored) = (face?, mirrored?);
                let sum: Vec<f32> = face.iter().zip(&mirrored).map(|(a, b)| a + b).collect();
                Ok(l2_normalize(&sum))
            })
            .collect()
    }

    /// Each chip through the model: its first output, of the embedding's
    /// length.
    fn runs(&self, chips: &[&Frame]) -> Vec<Result<Vec<f32>>> {
        let runs = self.net.run_items(chips, |chip, data| {
            append_input(chip, self.norm_of(chip), self.net.layout, data)
        });
        runs.into_iter()
            .map(|outputs| match outputs?.into_iter().next() {
                Some(v) if v.len() == self.len => Ok(v),
                other => Err(Error::internal(format!(
                    "the embedder gave {} values for a face, expected {}",
                    other.map_or(0, |v| v.len()),
                    self.len
                ))),
            })
            .collect()
    }

    /// The normalisation of one chip: the configured one, or its own
    /// standardisation.
    fn norm_of(&self, chip: &Frame) -> Normalize {
        let norm = self.conventions.norm;
        if !self.conventions.standardize {
            return norm;
        }
        let n = chip.rgb.len().max(1) as f64;
        let mean = chip.rgb.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = chip
            .rgb
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        let std = var.sqrt().max(1.0 / n.sqrt());
        Normalize {
            rgb: norm.rgb,
            mean: [mean as f32; 3],
            scale: (1.0 / std) as f32,
        }
    }

    /// For the load log.
    pub fn describe(&self, file: &str) -> String {
        let (w, h) = self.net.image_size();
        let c = self.conventions;
        let values = match c.standardize {
            true => "standardised".to_string(),
            false => format!("mean {} scale {}", mean_text(&c.norm.mean), c.norm.scale),
        };
        format!(
            "embedder {file} {}-d ({w}x{h} {} {}, {values}{})",
            self.len,
            self.net.layout.name(),
            if c.norm.rgb { "RGB" } else { "BGR" },
            if c.flip {
                ", with its mirror image"
            } else {
                ""
            }
        )
    }
}

/// A mean as the parameter takes it: one number, or three.
pub(super) fn mean_text(mean: &[f32; 3]) -> String {
    match mean.iter().all(|m| *m == mean[0]) {
        true => mean[0].to_string(),
        false => format!("{},{},{}", mean[0], mean[1], mean[2]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mean_is_one_number_when_the_channels_agree() {
        assert_eq!(mean_text(&[127.5; 3]), "127.5");
        assert_eq!(mean_text(&[104.0, 117.0, 123.0]), "104,117,123");
    }
}
