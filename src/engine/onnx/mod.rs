//! The ONNX engine: a bring-your-own detector, landmark model and embedder,
//! run by onnxruntime (default) or tract (pure Rust), each model cleaned at
//! load (hygiene.rs). A batch of frames goes through them stage by stage
//! (analyze.rs), each model over all its items in as few runs as its batch
//! dimension allows (stages.rs, net.rs). The image work around them (resize,
//! grey crop) is in ops.rs, the alignment warp in `pipeline::warp`. Matching
//! is by cosine: `distance = 1 - cosine`.
//!
//! Detector family understood: UltraFace / RFB ("ultraface"): one input
//! 1x3xHxW, outputs scores [1,N,2] and boxes [1,N,4] (corner form, 0..1).
//! It gives no landmarks, so a 68-point `landmark_model` (grey 64x64 crop of
//! the box, /256, output 136 values relative to the box) provides them.

mod analyze;
mod batch_dim;
mod blob;
mod hygiene;
mod net;
pub mod onnxruntime;
mod ops;
mod settings;
mod stages;
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
use blob::Blob;
use net::{load_net, model_file, BatchDim, Batching, Net, RuntimeChoice};

pub use analyze::StageTimes;
pub use hygiene::Hygiene;
pub use net::{run_model, TractBench};
pub use settings::{Normalize, OnnxSettings, Runtime};
pub use tract_ops::{Kernels, OwnKernels};

pub struct OnnxEngine {
    settings: OnnxSettings,
    detector: Net,
    landmarks: Net,
    embedder: Net,
    embedding_len: usize,
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
        let load = |what: &str, path: &Path, size| {
            let path = model_file(what, path)?;
            load_net(what, path, size, &runtime, settings.hygiene, batching)
        };
        let mut detector = load(
            "detector_model",
            &settings.detector_model,
            settings.detector_size,
        )?;
        let mut landmarks = match &settings.landmark_model {
            Some(p) => load("landmark_model", p, None)?,
            None => return Err(Error::invalid(
                "the ultraface detector gives no landmarks: set the `landmark_model` parameter \
                     (a 68-point model) so faces can be aligned",
            )),
        };
        let mut embedder = load("embedder_model", &settings.embedder_model, None)?;
        detector.most = max_batch.min(settings.max_frames);
        (landmarks.most, embedder.most) = (max_batch, max_batch);
        if settings.cuda_device.is_some() && max_batch > 1 {
            for net in [&mut detector, &mut landmarks, &mut embedder] {
                net.pad_runs = net.batch.takes_batches();
                net.warm_up()?;
            }
        }
        // One dry run tells the embedding length.
        let probe = Blob::zeros(&[1, embedder.shape[1], embedder.shape[2], embedder.shape[3]]);
        let embedding_len = Blob::output(&embedder.run(&probe)?, 0)?.len();
        if embedding_len == 0 {
            return Err(Error::unavailable(
                "embedder_model: its first output is empty (expected the face embedding)",
            ));
        }
        Ok(OnnxEngine {
            settings: settings.clone(),
            detector,
            landmarks,
            embedder,
            embedding_len,
            max_batch,
        })
    }
}

impl OnnxEngine {
    /// The loaded models, named by role, in pipeline order.
    fn nets(&self) -> Vec<(&'static str, &Net)> {
        vec![
            ("detector", &self.detector),
            ("landmarks", &self.landmarks),
            ("embedder", &self.embedder),
        ]
    }

    /// Whether any model takes runs of several items.
    fn batches(&self) -> bool {
        self.max_batch > 1 && self.nets().iter().any(|(_, n)| n.batch.takes_batches())
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

    fn describe_padding(&self) -> &'static str {
        match self.nets().iter().any(|(_, n)| n.pad_runs) {
            true => " (padded to powers of two, each size run once at load)",
            false => "",
        }
    }

    /// What the load-time cleaning did, model by model.
    fn describe_hygiene(&self) -> String {
        let h = self.settings.hygiene;
        if !h.zero_tiny_weights && !h.rewrite_prelu {
            return "; model hygiene off".to_string();
        }
        let parts: Vec<String> = self
            .nets()
            .iter()
            .map(|(what, net)| format!("{what}: {}", net.cleaned.describe()))
            .collect();
        format!("; model hygiene: {}", parts.join("; "))
    }

    /// On tract, which ops of each model run on the engine's own kernels.
    fn describe_own_kernels(&self) -> String {
        let parts: Vec<String> = self
            .nets()
            .iter()
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
        format!(
            "onnx ({runtime}; ultraface detector {} {}x{}, landmarks {}, embedder {} {}-d{})",
            name(&self.settings.detector_model),
            self.detector.shape[3],
            self.detector.shape[2],
            self.settings
                .landmark_model
                .as_deref()
                .map(name)
                .unwrap_or_default(),
            name(&self.settings.embedder_model),
            self.embedding_len,
            self.describe_batches()
        ) + &self.describe_hygiene()
            + &self.describe_own_kernels()
    }
    fn embedding_len(&self) -> usize {
        self.embedding_len
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
        (shares(sizes, self.landmarks(&boxes)).into_iter().zip(asked))
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
                    .map(|f| self.chip(frame, &f.landmarks))
                    .collect()
            })
            .collect();
        let all: Vec<&Frame> = chips.iter().flatten().flatten().collect();
        let sizes = chips
            .iter()
            .map(|c| c.as_ref().map(Vec::len).map_err(Error::clone));
        shares(sizes, self.embed_chips(&all))
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
fn tracked_face(bbox: BoxPx, landmarks: stages::Five) -> Face {
    Face {
        bbox,
        score: None,
        landmarks,
        embedding: Vec::new(),
        crop: None,
    }
}
