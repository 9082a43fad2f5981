//! Face engines behind one trait, `Engine`: dlib and ONNX. They know
//! nothing of Triton.

pub mod dlib;
pub mod fpu;
pub mod onnx;
pub mod tracker;

use std::path::Path;

use crate::error::{Error, Result};
use crate::metric::Metric;
use crate::pipeline::{Analysis, BoxPx, Face, Frame, Wanted};
use dlib::{DlibEngine, DlibSettings};
use onnx::{OnnxEngine, OnnxSettings};

/// Which engine a model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    Dlib,
    Onnx,
}

/// The factory: the engine `kind` with its weights loaded (the dlib engine
/// from `weights_dir`, the ONNX engine from `onnx`'s model paths).
pub fn load(
    kind: EngineKind,
    weights_dir: &Path,
    dlib: DlibSettings,
    onnx: &OnnxSettings,
) -> Result<Box<dyn Engine>> {
    Ok(match kind {
        EngineKind::Onnx => Box::new(OnnxEngine::load(onnx)?),
        EngineKind::Dlib => Box::new(DlibEngine::load(weights_dir, dlib)?),
    })
}

/// A weights file that must exist; the error names it and how to get it.
pub(crate) fn require_file(dir: &Path, file: &str) -> Result<std::path::PathBuf> {
    let path = dir.join(file);
    if !path.is_file() {
        return Err(Error::unavailable(format!(
            "model file {} not found (scripts/setup.sh installs the sample weights; \
             set the `weights_dir` parameter to the folder holding them)",
            path.display()
        )));
    }
    Ok(path)
}

/// `assets/<rel>` (installed by scripts/setup.sh), which must exist: the
/// engines' tests run on the real weights and photos.
#[cfg(test)]
pub(crate) fn test_assets(rel: &str) -> std::path::PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets")
        .join(rel);
    assert!(
        path.exists(),
        "{} missing: run scripts/setup.sh",
        path.display()
    );
    path
}

/// A face engine. One instance per Triton model instance; never shared
/// between threads at once (`&mut self`).
pub trait Engine: Send {
    /// Short name for logs and the gallery store ("dlib", "onnx").
    fn name(&self) -> &str;
    fn metric(&self) -> Metric;
    /// One line for the logs: the engine and what it loaded.
    fn describe(&self) -> String;
    /// Length of the embeddings it produces.
    fn embedding_len(&self) -> usize;
    /// Detect (and embed, as each frame's `Wanted` says) the faces of every
    /// frame, batching work across frames where the engine allows. One
    /// result per frame: a frame with more faces than `Wanted::choose`
    /// allows is an error for that frame alone.
    fn analyze(&mut self, frames: &[(&Frame, Wanted)]) -> Vec<Result<Analysis>>;
    /// The faces at `boxes` of `frame` (a tracker's boxes, not detected):
    /// their landmarks, no score, no embedding.
    fn faces_at(&mut self, frame: &Frame, boxes: &[BoxPx]) -> Result<Vec<Face>>;
    /// The embeddings of `faces` of `frame` (from `analyze` without
    /// embeddings, or `faces_at`), by their landmarks: what `analyze` would
    /// have computed for them.
    fn embed(&mut self, frame: &Frame, faces: &[&Face]) -> Result<Vec<Vec<f32>>>;
    /// `faces_at` for several frames (the sequences of one Execute): one
    /// result per frame. An engine that batches takes them together.
    fn faces_at_many(&mut self, asked: &[(&Frame, Vec<BoxPx>)]) -> Vec<Result<Vec<Face>>> {
        (asked.iter())
            .map(|(frame, boxes)| self.faces_at(frame, boxes))
            .collect()
    }
    /// `embed` for several frames: one result per frame.
    fn embed_many(&mut self, asked: &[(&Frame, Vec<&Face>)]) -> Vec<Result<Vec<Vec<f32>>>> {
        (asked.iter())
            .map(|(frame, faces)| self.embed(frame, faces))
            .collect()
    }
}
