//! A model's settings: plain data, filled by config.rs from config.pbtxt
//! through the parameter table (parameters.rs), read everywhere else.

use std::path::PathBuf;

use crate::backend::access::rate::KeyRate;
use crate::engine::dlib::DlibSettings;
use crate::engine::onnx::OnnxSettings;
use crate::gallery::store::{PgSettings, StoreKind};
use crate::gpu::Capability;
use crate::pipeline::image::PixelFormat;
use crate::sequence::{Cadence, Limits};

pub use crate::engine::EngineKind;

#[derive(Clone, Debug)]
pub struct Settings {
    pub engine: EngineKind,
    /// The dlib engine's detector, upsampling and BLAS threads.
    pub dlib: DlibSettings,
    /// Absolute: relative values are resolved against the model directory.
    pub weights_dir: PathBuf,
    pub gallery_dir: PathBuf,
    pub gallery_store: StoreKind,
    /// Keys that every request needs, with roles (read at load: access/).
    pub gallery_key_file: Option<PathBuf>,
    /// Requests per second each key label may send (`key_rate`), and at
    /// once (`key_burst`): `key_rate()` puts them together.
    pub key_rate: Option<f64>,
    pub key_burst: Option<u32>,
    /// Decimals of the gallery's distances in answers.
    pub distance_decimals: u32,
    /// Where a `postgres` gallery is.
    pub postgres: PgSettings,
    pub pixel_format: PixelFormat,
    /// `None`: the engine's own default (0.6 for dlib's Euclidean distance, 0.5 for
    /// the onnx engine's 1 - cosine).
    pub match_threshold: Option<f32>,
    pub max_image_pixels: u64,
    pub max_faces_per_image: usize,
    /// Faces smaller than this (shorter side, pixels) are dropped.
    pub min_face_size: u32,
    /// Threads (each with its own engine) an Execute spreads its images over.
    pub batch_threads: usize,
    /// Threads an Execute decodes its ENCODED images on; `None`: by where
    /// the instance runs (`decode_threads`).
    pub decode_threads: Option<usize>,
    pub max_gallery_size: usize,
    /// Enrollments older than this many days expire on their own.
    pub retention_days: Option<f64>,
    pub return_embeddings: bool,
    /// Whether inputs carry a leading batch dimension (max_batch_size > 0).
    pub batched: bool,
    /// config.pbtxt's `response_cache { enable: true }`: Triton answers
    /// repeated inputs from its cache, without the backend.
    pub response_cache: bool,
    /// Present when the model uses Triton's sequence batcher.
    pub sequence: Option<SequenceConfig>,
    /// The ONNX engine's models and pre-processing (used when engine = onnx).
    pub onnx: OnnxSettings,
    /// KIND_GPU instances refuse devices below this.
    pub min_compute_capability: Capability,
    /// The parameters the config sets (trimmed), for `describe_parameters`.
    pub(super) given: Vec<(&'static str, String)>,
}

impl Settings {
    /// `key_rate` with its burst (`key_burst`, else one second's worth).
    pub fn key_rate(&self) -> Option<KeyRate> {
        self.key_rate.map(|per_second| KeyRate {
            per_second,
            burst: (self.key_burst).unwrap_or_else(|| KeyRate::default_burst(per_second)),
        })
    }
}

/// How a stateful model receives its sequence controls, from the config's
/// `sequence_batching { control_input [...] }`, plus the state limits.
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceConfig {
    pub start: Option<Control>,
    pub end: Option<Control>,
    pub ready: Option<Control>,
    /// CORRID tensor name and whether it is TYPE_STRING (else TYPE_UINT64).
    pub corrid: Option<(String, bool)>,
    pub limits: Limits,
    /// The sequences' default detection and re-identification cadence.
    pub cadence: Cadence,
}

/// A boolean control tensor and the value that means true.
#[derive(Clone, Debug, PartialEq)]
pub struct Control {
    pub name: String,
    pub truth: Truth,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Truth {
    Int32(i32),
    Fp32(f32),
    Bool(bool),
}

impl Settings {
    /// Threads an Execute decodes its ENCODED images on: the parameter,
    /// else on a GPU instance 4 (its engine is quick and runs alone:
    /// `batch_threads` 1), else `batch_threads` (the cores its engines are
    /// about to use, idle while the frames decode).
    pub fn decode_threads(&self, on_gpu: bool) -> usize {
        match (self.decode_threads, on_gpu) {
            (Some(n), _) => n,
            (None, true) => GPU_DECODE_THREADS,
            (None, false) => self.batch_threads.max(1),
        }
    }
}

/// `decode_threads` on a GPU instance unless set.
const GPU_DECODE_THREADS: usize = 4;
