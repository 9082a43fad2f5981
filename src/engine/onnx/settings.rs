//! What an ONNX model set needs to run: the model files, how pixels become
//! inputs, thresholds, and the runtime.

use std::path::{Path, PathBuf};

use super::hygiene::Hygiene;

/// How to turn 8-bit pixels into a network input: channel order, then
/// `(value - mean) * scale`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Normalize {
    pub rgb: bool,
    pub mean: f32,
    pub scale: f32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OnnxSettings {
    pub detector_model: PathBuf,
    pub landmark_model: Option<PathBuf>,
    pub embedder_model: PathBuf,
    /// Detector input (width, height) for models whose size is free; `None`:
    /// the model's own fixed size.
    pub detector_size: Option<(usize, usize)>,
    pub detector_norm: Normalize,
    pub score_threshold: f32,
    pub nms_iou: f32,
    pub embedder_norm: Normalize,
    /// Model cleaning at load (hygiene.rs).
    pub hygiene: Hygiene,
    /// Flush denormals to zero on the thread while the models run (fpu.rs).
    pub flush_denormals: bool,
    pub runtime: Runtime,
    /// `None`: ORT_DYLIB_PATH (see onnxruntime.rs).
    pub onnxruntime_library: Option<PathBuf>,
    pub intra_op_threads: usize,
    /// KIND_GPU instances: the CUDA device onnxruntime runs the models on
    /// (set by the instance, not a parameter); `None`: the CPU.
    pub cuda_device: Option<i32>,
}

/// What runs the models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// onnxruntime through `ort`, the library loaded at run time.
    OnnxRuntime,
    /// tract: pure Rust, no native library.
    Tract,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::OnnxRuntime => "onnxruntime",
            Runtime::Tract => "tract",
        }
    }
}

impl OnnxSettings {
    /// Defaults that fit UltraFace RFB-320 and ArcFace-style embedders.
    pub fn defaults(dir: &Path) -> Self {
        OnnxSettings {
            detector_model: dir.join("detector.onnx"),
            landmark_model: None,
            embedder_model: dir.join("embedder.onnx"),
            detector_size: None,
            detector_norm: Normalize {
                rgb: true,
                mean: 127.0,
                scale: 1.0 / 128.0,
            },
            score_threshold: 0.7,
            nms_iou: 0.3,
            embedder_norm: Normalize {
                rgb: false,
                mean: 127.0,
                scale: 1.0 / 128.0,
            },
            hygiene: Hygiene::default(),
            flush_denormals: true,
            runtime: Runtime::OnnxRuntime,
            onnxruntime_library: None,
            intra_op_threads: 1,
            cuda_device: None,
        }
    }
}
