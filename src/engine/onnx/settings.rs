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
    /// The most frames, or faces, one model run takes (a model whose batch
    /// is fixed takes one); 1 runs every item alone; `None`: by where the
    /// models run (`runs_of`).
    pub max_engine_batch: Option<usize>,
    /// The most frames one engine gets from an Execute (max_batch_size over
    /// batch_threads): the detector's runs and warm-up go no further.
    pub max_frames: usize,
    /// Free a fixed batch of 1 at load (batch_dim.rs), so the model can take
    /// runs of several items.
    pub free_batch: bool,
    /// KIND_GPU instances: the CUDA device onnxruntime runs the models on
    /// (set by the instance, not a parameter); `None`: the CPU.
    pub cuda_device: Option<i32>,
}

/// `max_engine_batch`'s default on a GPU: the most the bundle's GPU model
/// (max_batch_size 32) can bring; not measured on a GPU yet (docs/gpu.md "On
/// a GPU" says how the sweep will).
pub const GPU_ENGINE_BATCH: usize = 32;

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
            max_engine_batch: None,
            max_frames: usize::MAX,
            free_batch: false,
            cuda_device: None,
        }
    }
}

impl OnnxSettings {
    /// The most items one model run takes. On the CPU one: batches are
    /// slower there, on both runtimes (docs/benchmarks.md "Batches through
    /// the models": onnxruntime 171 frames/s one at a time, 125 in runs of
    /// 8); tract always. On a GPU `max_engine_batch`, by default
    /// GPU_ENGINE_BATCH. A value set on the CPU is taken as asked.
    pub fn runs_of(&self) -> usize {
        match (self.runtime, self.max_engine_batch, self.cuda_device) {
            (Runtime::Tract, ..) => 1,
            (_, Some(most), _) => most.max(1),
            (_, None, Some(_)) => GPU_ENGINE_BATCH,
            (_, None, None) => 1,
        }
    }

    /// Why `runs_of` is 1, for the load log.
    pub fn why_one_at_a_time(&self) -> &'static str {
        match (self.runtime, self.max_engine_batch) {
            (Runtime::Tract, _) => "tract",
            (_, Some(_)) => "max_engine_batch 1",
            (_, None) => "the CPU's default",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_item_a_run_on_the_cpu_and_on_tract_runs_on_a_gpu() {
        let cpu = OnnxSettings::defaults(Path::new("."));
        let gpu = OnnxSettings {
            cuda_device: Some(0),
            ..cpu.clone()
        };
        assert_eq!(cpu.runs_of(), 1);
        assert_eq!(cpu.why_one_at_a_time(), "the CPU's default");
        assert_eq!(gpu.runs_of(), GPU_ENGINE_BATCH);
        let asked = |s: &OnnxSettings, n| OnnxSettings {
            max_engine_batch: Some(n),
            ..s.clone()
        };
        assert_eq!(asked(&cpu, 8).runs_of(), 8);
        assert_eq!(asked(&gpu, 1).runs_of(), 1);
        let tract = OnnxSettings {
            runtime: Runtime::Tract,
            ..asked(&cpu, 8)
        };
        assert_eq!((tract.runs_of(), tract.why_one_at_a_time()), (1, "tract"));
    }
}
