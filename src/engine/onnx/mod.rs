//! The ONNX engine: a bring-your-own detector (any family of `detect`), an
//! optional landmark model and an embedder, run by onnxruntime (default) or
//! tract (pure Rust), each model cleaned at load (hygiene.rs). A batch of
//! frames goes through them stage by stage (analyze.rs), each model over
//! all its items in as few runs as its batch dimension allows (net.rs). The
//! detector's family gives boxes and, mostly, five points; the 68-point
//! landmark model (landmarks.rs) gives them for a detector without (and for
//! any when it is set); the embedder takes the face aligned at its own
//! input size (embedder.rs). The image work around them (resize, the
//! letterbox, grey crops) is in ops.rs, the alignment warp in
//! `pipeline::warp`. Matching is by cosine: `distance = 1 - cosine`.

mod analyze;
mod batch_dim;
mod blob;
pub mod detect;
mod embedder;
mod hygiene;
mod landmarks;
mod net;
pub mod onnxruntime;
mod ops;
mod planned;
mod settings;
#[cfg(test)]
mod test_models;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod shares_tests {
    use super::*;

    /// A share with a failed item fails whole, and the next share still
    /// starts after it (a frame never takes another frame's embeddings).
    #[test]
    fn each_share_takes_its_own_items_whatever_fails() {
        let results = vec![Ok(1), Err(Error::internal("b")), Ok(3), Ok(4), Ok(5)];
        let sizes = [Ok(3), Err(Error::invalid("no chips")), Ok(1), Ok(2)];
        let got = shares(sizes.into_iter(), results);
        assert_eq!(got[0].as_ref().unwrap_err().message(), "b");
        assert_eq!(got[1].as_ref().unwrap_err().message(), "no chips");
        assert_eq!(got[2].as_ref().unwrap(), &vec![4]);
        assert!(got[3].is_err(), "one item short: {:?}", got[3]);
    }
}
mod tract;
mod tract_ops;

use std::path::Path;

use super::fpu::FlushDenormals;
use super::Engine;
use crate::error::{Error, Result};
use crate::metric::Metric;
use crate::pipeline::{Analysis, BoxPx, Face, Frame, Wanted};
use analyze::Laps;
use detect::{Detector, Five};
use embedder::Embedder;
use landmarks::LandmarkModel;
use net::{load_net, model_file, BatchDim, Batching, Net, RuntimeChoice};

pub use analyze::StageTimes;
pub use hygiene::Hygiene;
pub use net::{cleaned_for_onnxruntime, run_model, TractBench};
pub use settings::{
    ConvSearch, CudaOptions, DetectorAsked, EmbedderConventions, Normalize, OnnxSettings, Runtime,
};
pub use tract_ops::{Kernels, OwnKernels};

pub struct OnnxEngine {
    settings: OnnxSettings,
    detector: Detector,
    /// The 68-point model, when set: the faces' points come from it.
    landmarks: Option<LandmarkModel>,
    embedder: Embedder,
    /// The most items one model run takes (settings::runs_of).
    max_batch: usize,
}

// tract plans are plain Rust data: the compiler proves the engine can move
// to an instance's thread (`Engine: Send`), no `unsafe impl` needed.
const _: fn() = || {
    fn must_be_send<T: Send>() {}
    must_be_send::<OnnxEngine>();
};

impl OnnxEngine {
    pub fn load(settings: &OnnxSettings) -> Result<Self> {
        let runtime = RuntimeChoice::of(settings)?;
        let max_batch = settings.runs_of();
        let batching = match (max_batch, settings.free_batch) {
            (1, _) => Batching::OneAtATime,
            (_, true) => Batching::Freed,
            (_, false) => Batching::AsDeclared,
        };
        let keep = settings.planned(1).is_some();
        let load = |what: &str, path: &Path, size| {
            let path = model_file(what, path)?;
            load_net(what, path, size, &runtime, settings.hygiene, batching, keep)
        };
        let detector = Detector::load(settings, &|size| {
            load("detector_model", &settings.detector_model, Some(size))
        })?;
        let landmarks = match (&settings.landmark_model, detector.gives_points()) {
            (Some(p), _) => Some(LandmarkModel {
                net: load("landmark_model", p, None)?,
            }),
            (None, true) => None,
            (None, false) => {
                return Err(Error::invalid(format!(
                    "the {} detector gives no landmarks: set the `landmark_model` parameter \
                     (a 68-point model) so faces can be aligned",
                    detector.family_name()
                )))
            }
        };
        let net = load("embedder_model", &settings.embedder_model, None)?;
        let embedder = Embedder::new(net, settings.embedder, &settings.embedder_model)?;
        let mut engine = OnnxEngine {
            settings: settings.clone(),
            detector,
            landmarks,
            embedder,
            max_batch,
        };
        engine.detector.full.net.most = max_batch.min(settings.max_frames);
        for net in engine.nets_mut().into_iter().skip(1) {
            net.most = max_batch;
        }
        for net in engine.nets_mut() {
            net.fill_threads = settings.fill_threads;
            if let Some(sizes) = settings.planned(net.most) {
                net.plan(&sizes)?;
            }
        }
        Ok(engine)
    }
}

impl OnnxEngine {
    /// The loaded models, named by role, in pipeline order.
    fn nets(&self) -> Vec<(&'static str, &Net)> {
        let mut nets = vec![("detector", &self.detector.full.net)];
        if let Some(locator) = &self.detector.locator {
            nets.push(("detector at a face", &locator.net));
        }
        if let Some(landmarks) = &self.landmarks {
            nets.push(("landmarks", &landmarks.net));
        }
        nets.push(("embedder", &self.embedder.net));
        nets
    }

    /// `nets`, to change: the detector first.
    fn nets_mut(&mut self) -> Vec<&mut Net> {
        let mut nets = vec![&mut self.detector.full.net];
        nets.extend(self.detector.locator.as_mut().map(|l| &mut l.net));
        nets.extend(self.landmarks.as_mut().map(|l| &mut l.net));
        nets.push(&mut self.embedder.net);
        nets
    }

    /// Whether any model takes runs of several items.
    fn batches(&self) -> bool {
        self.max_batch > 1 && self.nets().iter().any(|(_, n)| n.batch.takes_batches())
    }

    /// Five points for each face at its box: the landmark model's, or the
    /// detector's on the region around it.
    fn points_at(&self, faces: &[(&Frame, BoxPx)]) -> Vec<Result<Five>> {
        match &self.landmarks {
            Some(model) => model.points(faces),
            None => self.detector.locate(faces),
        }
    }

    /// Which models take a batch, and why the others do not, for the load
    /// log.
    fn describe_batches(&self) -> String {
        if self.max_batch == 1 {
            return format!("; one item a run ({})", self.settings.why_one_at_a_time());
        }
        let (mut batched, mut alone) = (Vec::new(), Vec::new());
        for (what, net) in self.nets() {
            match &net.batch {
                BatchDim::Free => batched.push(what.to_string()),
                BatchDim::Freed => batched.push(format!("{what} (its batch of 1 freed at load)")),
                BatchDim::Fixed => alone.push(format!("{what} (its batch fixed in the file)")),
                BatchDim::Unfit(why) => alone.push(format!("{what} ({why})")),
            }
        }
        let mut text = String::new();
        if !batched.is_empty() {
            text += &format!(
                "; batched, up to {} items a run{}: {}",
                self.max_batch,
                self.describe_padding(),
                batched.join(", ")
            );
        }
        if !alone.is_empty() {
            text += &format!("; one item a run: {}", alone.join(", "));
        }
        text
    }

    fn describe_padding(&self) -> String {
        let planned: Vec<String> = (self.nets().iter())
            .filter(|(_, n)| n.batch.takes_batches() && !n.planned.is_empty())
            .map(|(what, n)| format!("{what} {:?}", n.planned))
            .collect();
        match planned.is_empty() {
            true => String::new(),
            false => format!(
                " (padded to the next planned size, a session each: {})",
                planned.join(", ")
            ),
        }
    }

    /// What the load-time cleaning did, model by model.
    fn describe_hygiene(&self) -> String {
        let h = self.settings.hygiene;
        if !h.zero_tiny_weights && !h.rewrite_prelu {
            return "; model hygiene off".to_string();
        }
        let parts: Vec<String> = (self.nets().iter())
            .filter(|(what, _)| !what.contains(' '))
            .map(|(what, net)| format!("{what}: {}", net.cleaned.describe()))
            .collect();
        format!("; model hygiene: {}", parts.join("; "))
    }

    /// On tract, which ops of each model run on the engine's own kernels.
    fn describe_own_kernels(&self) -> String {
        let parts: Vec<String> = (self.nets().iter())
            .filter(|(what, _)| !what.contains(' '))
            .filter_map(|(what, net)| Some(format!("{what}: {}", net.own_kernels?.describe())))
            .collect();
        if parts.is_empty() {
            return String::new();
        }
        format!(
            "; on the engine's own kernels in tract: {}",
            parts.join("; ")
        )
    }

    /// Every setting the models run with, as `parameter=value` words: a
    /// config that sets them serves the same models the same way
    /// (scripts/model_check.py prints one).
    pub fn settings_text(&self) -> String {
        let e = self.settings.embedder;
        format!(
            "{} embedder_channels={} embedder_mean={} embedder_scale={} \
             embedder_normalize={} embedder_flip={}{}",
            self.detector.settings_text(),
            if e.norm.rgb { "RGB" } else { "BGR" },
            embedder::mean_text(&e.norm.mean),
            e.norm.scale,
            if e.standardize {
                "standardize"
            } else {
                "scale"
            },
            e.flip,
            e.template_text()
                .map_or(String::new(), |t| format!(" embedder_template={t}"))
        )
    }
}

impl Engine for OnnxEngine {
    fn name(&self) -> &str {
        "onnx"
    }
    fn metric(&self) -> Metric {
        Metric::Cosine
    }
    fn describe(&self) -> String {
        let name = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let runtime = match (self.settings.runtime, onnxruntime::loaded()) {
            (Runtime::OnnxRuntime, Some(library)) => format!("onnxruntime {library}"),
            (runtime, _) => runtime.name().to_string(),
        };
        let points = match &self.settings.landmark_model {
            Some(p) => format!("landmarks {}", name(p)),
            None => "five points from the detector".to_string(),
        };
        format!(
            "onnx ({runtime}; {}, {points}, {}{})",
            self.detector.describe(&name(&self.settings.detector_model)),
            self.embedder.describe(&name(&self.settings.embedder_model)),
            self.describe_batches()
        ) + &self.describe_hygiene()
            + &self.describe_own_kernels()
            + &format!("; settings: {}", self.settings_text())
    }
    fn embedding_len(&self) -> usize {
        self.embedder.len
    }
    fn analyze(&mut self, frames: &[(&Frame, Wanted)]) -> Vec<Result<Analysis>> {
        let _flush = FlushDenormals::new(self.settings.flush_denormals);
        if self.batches() {
            return self.analyze_frames(frames, &mut Laps::new());
        }
        // One item a run: each frame through all stages before the next,
        // with its own stage times.
        (frames.iter())
            .flat_map(|frame| self.analyze_frames(std::slice::from_ref(frame), &mut Laps::new()))
            .collect()
    }
    fn faces_at(&mut self, frame: &Frame, boxes: &[BoxPx]) -> Result<Vec<Face>> {
        self.faces_at_many(&[(frame, boxes.to_vec())])
            .pop()
            .unwrap_or_else(|| Err(Error::internal("one result per frame")))
    }
    fn embed(&mut self, frame: &Frame, faces: &[&Face]) -> Result<Vec<Vec<f32>>> {
        self.embed_many(&[(frame, faces.to_vec())])
            .pop()
            .unwrap_or_else(|| Err(Error::internal("one result per frame")))
    }
    fn faces_at_many(&mut self, asked: &[(&Frame, Vec<BoxPx>)]) -> Vec<Result<Vec<Face>>> {
        let _flush = FlushDenormals::new(self.settings.flush_denormals);
        let boxes: Vec<(&Frame, BoxPx)> = (asked.iter())
            .flat_map(|(frame, boxes)| boxes.iter().map(move |&b| (*frame, b)))
            .collect();
        let sizes = asked.iter().map(|(_, boxes)| Ok(boxes.len()));
        (shares(sizes, self.points_at(&boxes)).into_iter().zip(asked))
            .map(|(points, (_, boxes))| {
                let faces = boxes.iter().zip(points?);
                Ok(faces
                    .map(|(&bbox, five)| tracked_face(bbox, five))
                    .collect())
            })
            .collect()
    }
    fn embed_many(&mut self, asked: &[(&Frame, Vec<&Face>)]) -> Vec<Result<Vec<Vec<f32>>>> {
        let _flush = FlushDenormals::new(self.settings.flush_denormals);
        // Each frame's chips, or why its faces cannot be aligned.
        let chips: Vec<Result<Vec<Frame>>> = (asked.iter())
            .map(|(frame, faces)| {
                faces
                    .iter()
                    .map(|f| self.embedder.chip(frame, &f.landmarks))
                    .collect()
            })
            .collect();
        let all: Vec<&Frame> = chips.iter().flatten().flatten().collect();
        let sizes = chips
            .iter()
            .map(|c| c.as_ref().map(Vec::len).map_err(Error::clone));
        shares(sizes, self.embedder.embed(&all))
    }
}

/// `results`, one per item, cut into consecutive shares of `sizes` (a share
/// that is an error takes no item): each share whole, as its items or its
/// first item's error, the next share starting after it.
fn shares<T>(
    sizes: impl Iterator<Item = Result<usize>>,
    results: Vec<Result<T>>,
) -> Vec<Result<Vec<T>>> {
    let mut results = results.into_iter();
    sizes
        .map(|size| {
            let size = size?;
            let mine: Vec<Result<T>> = results.by_ref().take(size).collect();
            if mine.len() != size {
                return Err(Error::internal("a stage lost a result"));
            }
            mine.into_iter().collect()
        })
        .collect()
}

/// A face at a tracker's box: its landmarks, no score, no embedding.
fn tracked_face(bbox: BoxPx, landmarks: Five) -> Face {
    Face {
        bbox,
        score: None,
        landmarks,
        embedding: Vec::new(),
        crop: None,
    }
}
