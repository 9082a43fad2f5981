//! Face engines behind one trait, `Engine`: dlib and ONNX. They know
//! nothing of Triton.

pub mod dlib;
pub mod fpu;
pub mod onnx;

use std::path::Path;

use crate::error::{Error, Result};
use crate::pipeline::{Analysis, Frame, Metric, Wanted};
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
}
