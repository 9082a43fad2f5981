//! The ONNX engine: a bring-your-own detector, landmark model and embedder,
//! run by onnxruntime (default) or tract (pure Rust), each model cleaned at
//! load (hygiene.rs). The image work around them (resize, grey crop) is in
//! ops.rs, the alignment warp in `pipeline::warp`. Matching is by cosine:
//! `distance = 1 - cosine`.
//!
//! Detector family understood: UltraFace / RFB ("ultraface"): one input
//! 1x3xHxW, outputs scores [1,N,2] and boxes [1,N,4] (corner form, 0..1).
//! It gives no landmarks, so a 68-point `landmark_model` (grey 64x64 crop of
//! the box, /256, output 136 values relative to the box) provides them.

mod blob;
mod hygiene;
mod net;
pub mod onnxruntime;
mod ops;
mod settings;
#[cfg(test)]
mod test_models;
mod tract;
mod tract_ops;

use std::path::Path;
use std::time::{Duration, Instant};

use super::fpu::FlushDenormals;
use super::Engine;
use crate::error::{Error, Result};
use crate::pipeline::align::{five_from_68, similarity, ARCFACE_112};
use crate::pipeline::warp::warp_affine;
use crate::pipeline::{Analysis, BoxPx, Face, Frame, Metric, Stages, Wanted};
use blob::Blob;
use net::{load_net, model_file, Net, RuntimeChoice};
use ops::{grey_box, l2_normalize, nms, resize, to_input, Rect};

pub use hygiene::Hygiene;
pub use net::{run_model, TractBench};
pub use settings::{Normalize, OnnxSettings, Runtime};
pub use tract_ops::{Kernels, OwnKernels};

pub struct OnnxEngine {
    settings: OnnxSettings,
    detector: Net,
    landmarks: Option<Net>,
    embedder: Net,
    embedding_len: usize,
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
        let detector = load_net(
            "detector_model",
            model_file("detector_model", &settings.detector_model)?,
            settings.detector_size,
            &runtime,
            settings.hygiene,
        )?;
        let landmarks = match &settings.landmark_model {
            Some(p) => Some(load_net(
                "landmark_model",
                model_file("landmark_model", p)?,
                None,
                &runtime,
                settings.hygiene,
            )?),
            None => return Err(Error::invalid(
                "the ultraface detector gives no landmarks: set the `landmark_model` parameter \
                     (a 68-point model) so faces can be aligned",
            )),
        };
        let embedder = load_net(
            "embedder_model",
            model_file("embedder_model", &settings.embedder_model)?,
            None,
            &runtime,
            settings.hygiene,
        )?;
        // One dry run tells the embedding length.
        let probe = Blob::zeros(&[1, embedder.shape[1], embedder.shape[2], embedder.shape[3]]);
        let embedding_len = Blob::output(&embedder.run(probe)?, 0)?.len();
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
        })
    }

    fn detect(&self, frame: &Frame) -> Result<Vec<(BoxPx, f32)>> {
        let (w, h) = self
            .settings
            .detector_size
            .unwrap_or((self.detector.shape[3], self.detector.shape[2]));
        let input = to_input(&[resize(frame, w, h)?], self.settings.detector_norm)?;
        let out = self.detector.run(input)?;
        let (scores, boxes) = (Blob::output(&out, 0)?, Blob::output(&out, 1)?);
        let n = scores.len() / 2;
        if boxes.len() != n * 4 {
            return Err(Error::internal(
                "detector outputs do not match (scores [1,N,2], boxes [1,N,4])",
            ));
        }
        let (fw, fh) = (frame.width as f32, frame.height as f32);
        let mut found: Vec<(BoxPx, f32)> = (0..n)
            .filter(|&i| scores[2 * i + 1] >= self.settings.score_threshold)
            .map(|i| {
                let b = &boxes[4 * i..4 * i + 4];
                (
                    BoxPx {
                        left: b[0] * fw,
                        top: b[1] * fh,
                        right: b[2] * fw,
                        bottom: b[3] * fh,
                    },
                    scores[2 * i + 1],
                )
            })
            .collect();
        found.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(nms(found, self.settings.nms_iou))
    }

    /// 68 points for a box, from the landmark model (grey 64x64 crop, /256).
    fn landmarks(&self, net: &Net, frame: &Frame, b: &BoxPx) -> Result<[[f32; 2]; 5]> {
        let (iw, ih) = (frame.width as f32, frame.height as f32);
        let left = b.left.clamp(0.0, iw - 1.0);
        let top = b.top.clamp(0.0, ih - 1.0);
        let right = b.right.clamp(left + 1.0, iw);
        let bottom = b.bottom.clamp(top + 1.0, ih);
        let rect = Rect {
            x: left as u32,
            y: top as u32,
            width: (right - left) as u32,
            height: (bottom - top) as u32,
        };
        let (w, h) = (net.shape[3], net.shape[2]);
        let input = Blob {
            shape: vec![1, 1, h, w],
            data: grey_box(frame, rect, (w, h))?
                .iter()
                .map(|v| *v as f32 / 256.0)
                .collect(),
        };
        let out = net.run(input)?;
        let values = Blob::output(&out, 0)?;
        if values.len() != 136 {
            return Err(Error::internal(format!(
                "landmark model gave {} values, expected 136 (68 points)",
                values.len()
            )));
        }
        let (bw, bh) = (rect.width as f32, rect.height as f32);
        let points: Vec<[f32; 2]> = values
            .chunks_exact(2)
            .map(|p| [p[0] * bw + rect.x as f32, p[1] * bh + rect.y as f32])
            .collect();
        five_from_68(&points)
    }

    /// The aligned chip (embedder input size) of one face.
    fn align(&self, frame: &Frame, five: &[[f32; 2]; 5]) -> Result<Frame> {
        let (w, h) = (self.embedder.shape[3], self.embedder.shape[2]);
        // Reference points are for 112x112; scale them to the embedder's size.
        let (sx, sy) = (w as f32 / 112.0, h as f32 / 112.0);
        let reference: Vec<[f32; 2]> = ARCFACE_112.iter().map(|p| [p[0] * sx, p[1] * sy]).collect();
        warp_affine(frame, &similarity(five, &reference)?, w, h)
    }

    fn embed_chips(&self, chips: &[Frame]) -> Result<Vec<Vec<f32>>> {
        let norm = self.settings.embedder_norm;
        let run = |batch: &[Frame]| -> Result<Vec<Vec<f32>>> {
            let out = self.embedder.run(to_input(batch, norm)?)?;
            let flat = Blob::output(&out, 0)?;
            if flat.len() != batch.len() * self.embedding_len {
                return Err(Error::internal(
                    "embedder output size does not match its batch",
                ));
            }
            Ok(flat
                .chunks_exact(self.embedding_len)
                .map(l2_normalize)
                .collect())
        };
        if self.embedder.batch_free {
            run(chips)
        } else {
            chips
                .chunks(1)
                .map(run)
                .collect::<Result<Vec<_>>>()
                .map(|v| v.concat())
        }
    }

    fn analyze_one(&mut self, frame: &Frame, wanted: Wanted, laps: &mut Laps) -> Result<Analysis> {
        let found = wanted.choose(self.detect(frame)?, |(bbox, _)| *bbox)?;
        laps.lap("detector");
        let net = self.landmarks.as_ref().expect("checked at load");
        let mut faces = Vec::with_capacity(found.len());
        let mut chips = Vec::with_capacity(found.len());
        for (bbox, score) in found {
            let five = self.landmarks(net, frame, &bbox)?;
            laps.lap("landmarks");
            let mut crop = None;
            if wanted.embeddings || wanted.crops {
                let chip = self.align(frame, &five)?;
                if wanted.crops {
                    crop = Some(chip.clone());
                }
                chips.push(chip);
                laps.lap("align");
            }
            faces.push(Face {
                bbox,
                score: Some(score),
                landmarks: five,
                embedding: Vec::new(),
                crop,
            });
        }
        if wanted.embeddings && !chips.is_empty() {
            for (face, embedding) in faces.iter_mut().zip(self.embed_chips(&chips)?) {
                face.embedding = embedding;
            }
            laps.lap("embedder");
        }
        Ok(Analysis {
            faces,
            stages: laps.stages(),
        })
    }

    pub fn analyze_timed(
        &mut self,
        frame: &Frame,
        max_faces: usize,
    ) -> Result<(Vec<Face>, StageTimes)> {
        let _flush = FlushDenormals::new(self.settings.flush_denormals);
        let mut laps = Laps::new();
        let analysis = self.analyze_one(frame, Wanted::all(max_faces), &mut laps)?;
        Ok((analysis.faces, laps.times))
    }
}

pub type StageTimes = Vec<(&'static str, Duration)>;

/// Stage timings, when asked for: each `lap` adds the time since the last
/// one to the stage it names (stages repeated per face add up).
/// Time per stage of one frame, by the bench's finer names.
struct Laps {
    last: Instant,
    times: StageTimes,
}

impl Laps {
    fn new() -> Self {
        Laps {
            last: Instant::now(),
            times: Vec::new(),
        }
    }

    fn lap(&mut self, stage: &'static str) {
        let now = Instant::now();
        let spent = now - self.last;
        self.last = now;
        match self.times.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, total)) => *total += spent,
            None => self.times.push((stage, spent)),
        }
    }

    /// The answer's stages: the alignment counts as embedding (it makes the
    /// embedder's input).
    fn stages(&self) -> Stages {
        let sum = |names: &[&str]| -> Duration {
            self.times
                .iter()
                .filter(|(s, _)| names.contains(s))
                .map(|(_, d)| *d)
                .sum()
        };
        Stages {
            detection: sum(&["detector"]),
            landmarks: sum(&["landmarks"]),
            embedding: sum(&["align", "embedder"]),
        }
    }
}

impl OnnxEngine {
    /// The loaded models, named by role, in pipeline order.
    fn nets(&self) -> Vec<(&'static str, &Net)> {
        let mut nets = vec![("detector", &self.detector)];
        nets.extend(self.landmarks.as_ref().map(|n| ("landmarks", n)));
        nets.push(("embedder", &self.embedder));
        nets
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
            "onnx ({runtime}; ultraface detector {} {}x{}, landmarks {}, embedder {} {}-d, {})",
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
            if self.embedder.batch_free {
                "faces batched"
            } else {
                "one face per run"
            }
        ) + &self.describe_hygiene()
            + &self.describe_own_kernels()
    }
    fn embedding_len(&self) -> usize {
        self.embedding_len
    }
    fn analyze(&mut self, frames: &[(&Frame, Wanted)]) -> Vec<Result<Analysis>> {
        let _flush = FlushDenormals::new(self.settings.flush_denormals);
        frames
            .iter()
            .map(|&(f, wanted)| self.analyze_one(f, wanted, &mut Laps::new()))
            .collect()
    }
    fn faces_at(&mut self, frame: &Frame, boxes: &[BoxPx]) -> Result<Vec<Face>> {
        let _flush = FlushDenormals::new(self.settings.flush_denormals);
        let net = self.landmarks.as_ref().expect("checked at load");
        boxes
            .iter()
            .map(|&bbox| {
                Ok(Face {
                    bbox,
                    score: None,
                    landmarks: self.landmarks(net, frame, &bbox)?,
                    embedding: Vec::new(),
                    crop: None,
                })
            })
            .collect()
    }
    fn embed(&mut self, frame: &Frame, faces: &[&Face]) -> Result<Vec<Vec<f32>>> {
        if faces.is_empty() {
            return Ok(Vec::new());
        }
        let _flush = FlushDenormals::new(self.settings.flush_denormals);
        let chips = faces
            .iter()
            .map(|f| self.align(frame, &f.landmarks))
            .collect::<Result<Vec<_>>>()?;
        self.embed_chips(&chips)
    }
}
