//! What an ONNX model set needs to run: the model files, how pixels become
//! inputs, thresholds, and the runtime.

use std::path::{Path, PathBuf};

use super::hygiene::Hygiene;
use crate::error::{Error, Result};
use crate::pipeline::align::Five;

/// How to turn 8-bit pixels into a network input: channel order, then
/// `(value - mean) * scale`, the mean of each channel in the model's order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Normalize {
    pub rgb: bool,
    pub mean: [f32; 3],
    pub scale: f32,
}

impl Normalize {
    /// The values as they are, in RGB or BGR.
    pub fn plain(rgb: bool) -> Self {
        Normalize {
            rgb,
            mean: [0.0; 3],
            scale: 1.0,
        }
    }
}

/// Where the scaled frame sits in the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Resized to the input's width and height, each on its own scale.
    Stretch,
    /// Scaled whole to fit, at the input's top left; the rest filled.
    LetterboxTopLeft,
    /// Scaled whole to fit, in the middle; the rest filled.
    LetterboxCentre,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::Stretch => "stretch",
            Placement::LetterboxTopLeft => "letterbox",
            Placement::LetterboxCentre => "letterbox-centre",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            Placement::Stretch,
            Placement::LetterboxTopLeft,
            Placement::LetterboxCentre,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(text))
    }
}

/// What the parameters set of the detector's preparation and thresholds;
/// each part left `None` is the family's reference value.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DetectorAsked {
    /// The input's (width, height), for a model whose size is free.
    pub size: Option<(usize, usize)>,
    pub placement: Option<Placement>,
    pub rgb: Option<bool>,
    pub mean: Option<[f32; 3]>,
    pub scale: Option<f32>,
    pub threshold: Option<f32>,
    pub nms_iou: Option<f32>,
}

/// How an aligned face becomes the embedder's input, and its output an
/// embedding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmbedderConventions {
    pub norm: Normalize,
    /// Each face standardised on its own, `(v - mean) / max(std, 1/sqrt(n))`
    /// over its values (FaceNet's prewhitening), instead of `norm`'s mean
    /// and scale (its channel order still holds).
    pub standardize: bool,
    /// The face and its mirror image embedded, the two summed before the
    /// embedding is normalised (insightface's and InsightFace-REST's
    /// flip test).
    pub flip: bool,
    /// Where the five points go in the embedder's input, in its pixels;
    /// `None`: ArcFace's 112x112 template scaled to the input.
    pub template: Option<Five>,
}

impl EmbedderConventions {
    /// What the gallery must tell apart beyond the model files: empty for
    /// the default conventions, so galleries made before they existed keep
    /// their embedder's identity.
    pub fn identity_text(&self) -> String {
        let mut parts = Vec::new();
        if self.standardize {
            parts.push("standardize".into());
        }
        if self.flip {
            parts.push("flip".into());
        }
        if let Some(t) = self.template_text() {
            parts.push(format!("template={t}"));
        }
        parts.join(",")
    }

    /// `embedder_template`'s value, when set.
    pub fn template_text(&self) -> Option<String> {
        let numbers: Vec<String> = self
            .template?
            .iter()
            .flatten()
            .map(|v| v.to_string())
            .collect();
        Some(numbers.join(","))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct OnnxSettings {
    pub detector_model: PathBuf,
    /// The detector's family by name; `None`: read from the model.
    pub detector_family: Option<String>,
    pub landmark_model: Option<PathBuf>,
    pub embedder_model: PathBuf,
    /// `model_precision: int8`: each model's checked int8 copy in its
    /// place where there is one (`take_int8_copies`).
    pub int8: bool,
    pub detector: DetectorAsked,
    pub embedder: EmbedderConventions,
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
    /// Threads a model run's items are filled on (set by the instance: its
    /// `decode_threads` on a GPU, else 1).
    pub fill_threads: usize,
    /// The run sizes each model gets a session of its own for (`planned`);
    /// `None`: by where the models run.
    pub run_sizes: Option<Vec<usize>>,
    /// How onnxruntime's CUDA provider is set up on a GPU.
    pub cuda: CudaOptions,
}

/// cuDNN's choice of each convolution's kernel, onnxruntime's
/// `cudnn_conv_algo_search`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvSearch {
    /// Time every kernel the first time a shape is seen (onnxruntime's default).
    Exhaustive,
    /// cuDNN's heuristics: no timing at load.
    Heuristic,
    /// cuDNN's default kernel.
    Default,
}

/// How onnxruntime's CUDA provider is set up (model parameters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaOptions {
    pub conv_search: ConvSearch,
    /// The device memory arena's limit in bytes; `None`: onnxruntime's (none).
    pub memory_limit: Option<usize>,
    /// The arena grows by what a run asks (true) or in powers of two.
    pub arena_same_as_requested: bool,
    /// `gpu_provider: tensorrt`: TensorRT first (the CUDA provider runs what
    /// it does not), its engines cached in this folder.
    pub tensorrt_cache: Option<PathBuf>,
}

impl std::default::Default for CudaOptions {
    /// Heuristic kernel choice: the exhaustive search times every kernel of
    /// every convolution at load, for each session (33 s an instance on an
    /// H200). Arena grown by what is asked: each planned session has its own
    /// arena, and a fixed shape asks the same sizes at every run.
    fn default() -> Self {
        CudaOptions {
            conv_search: ConvSearch::Heuristic,
            memory_limit: None,
            arena_same_as_requested: true,
            tensorrt_cache: None,
        }
    }
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
    /// The detector's family read from the model, with its reference
    /// preparation; ArcFace-style embedders.
    pub fn defaults(dir: &Path) -> Self {
        OnnxSettings {
            detector_model: dir.join("detector.onnx"),
            detector_family: None,
            landmark_model: None,
            embedder_model: dir.join("embedder.onnx"),
            int8: false,
            detector: DetectorAsked::default(),
            embedder: EmbedderConventions {
                norm: Normalize {
                    rgb: false,
                    mean: [127.0; 3],
                    scale: 1.0 / 128.0,
                },
                standardize: false,
                flip: false,
                template: None,
            },
            hygiene: Hygiene::default(),
            flush_denormals: true,
            runtime: Runtime::OnnxRuntime,
            onnxruntime_library: None,
            intra_op_threads: 1,
            max_engine_batch: None,
            max_frames: usize::MAX,
            fill_threads: 1,
            free_batch: false,
            cuda_device: None,
            run_sizes: None,
            cuda: CudaOptions::default(),
        }
    }
}

/// An int8 copy's file beside its model's: `X.int8.onnx` for `X.onnx`
/// (scripts/quantize.py writes it only when it passes its check).
pub fn int8_copy(model: &Path) -> PathBuf {
    model.with_extension("int8.onnx")
}

impl OnnxSettings {
    /// `model_precision: int8`: each model (detector, landmarks, embedder)
    /// replaced by its int8 copy where there is one; the roles that took
    /// one, and a load error when none has one (a typo would otherwise
    /// serve float unnoticed). A model without a copy stays float: its
    /// quantization did not pass its check, or was slower.
    pub fn take_int8_copies(&mut self) -> Result<Vec<&'static str>> {
        if self.runtime == Runtime::Tract {
            // Measured (docs/engines.md): tract runs the QDQ copies several
            // times slower than float, and the sample detector's wrongly.
            return Err(Error::unsupported(
                "model_precision int8 runs on onnxruntime: tract runs int8 (QDQ) models slower \
                 than their float form, and some wrongly; use `runtime: onnxruntime` or float",
            ));
        }
        let mut taken = Vec::new();
        let mut looked = Vec::new();
        let models = [
            ("detector", Some(&mut self.detector_model)),
            ("landmarks", self.landmark_model.as_mut()),
            ("embedder", Some(&mut self.embedder_model)),
        ];
        for (role, model) in models {
            let Some(model) = model else { continue };
            let copy = int8_copy(model);
            if copy.is_file() {
                *model = copy;
                taken.push(role);
            } else {
                looked.push(copy.display().to_string());
            }
        }
        if taken.is_empty() {
            return Err(Error::invalid(format!(
                "model_precision int8: no int8 copy of any model (looked for {}); make them \
                 with scripts/quantize.py, which writes a copy only when it passes its check \
                 (docs/engines.md)",
                looked.join(", ")
            )));
        }
        Ok(taken)
    }

    /// The most items one model run takes: `max_engine_batch` where set
    /// (tract: always one), else one. One on the CPU because batches are
    /// slower there (docs/benchmarks.md "Batches through the models"); one
    /// on a GPU until a card's figures show the planned batched path ahead
    /// (one H200 answered nothing batched at concurrency 8; docs/gpu.md).
    pub fn runs_of(&self) -> usize {
        match (self.runtime, self.max_engine_batch) {
            (Runtime::Tract, _) => 1,
            (_, Some(most)) => most.max(1),
            (_, None) => 1,
        }
    }

    /// The run sizes each model of at most `most` items a run is planned
    /// for, ascending: a session of its own for each, every run padded to
    /// the next (net.rs). On a GPU always (cuDNN keeps one plan per
    /// convolution, so a session that meets a new shape plans again):
    /// `run_sizes` at most `most`, by default the powers of two up to it
    /// and `most` itself. On the CPU only where `run_sizes` asks: there
    /// one session takes every shape at no cost. `None`: unplanned.
    pub fn planned(&self, most: usize) -> Option<Vec<usize>> {
        let most = most.max(1);
        let mut sizes: Vec<usize> = match (&self.run_sizes, self.cuda_device) {
            _ if self.runtime == Runtime::Tract => return None,
            (Some(asked), _) => asked.iter().map(|&n| n.clamp(1, most)).collect(),
            (None, Some(_)) => (0..usize::BITS)
                .map(|b| 1 << b)
                .take_while(|&n| n < most)
                .chain([most])
                .collect(),
            (None, None) => return None,
        };
        sizes.sort_unstable();
        sizes.dedup();
        Some(sizes)
    }

    /// Why `runs_of` is 1, for the load log.
    pub fn why_one_at_a_time(&self) -> &'static str {
        match (self.runtime, self.max_engine_batch) {
            (Runtime::Tract, _) => "tract",
            (_, Some(_)) => "max_engine_batch 1",
            (_, None) => "the default",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_item_a_run_unless_asked_and_never_on_tract() {
        let cpu = OnnxSettings::defaults(Path::new("."));
        let gpu = OnnxSettings {
            cuda_device: Some(0),
            ..cpu.clone()
        };
        assert_eq!(cpu.runs_of(), 1);
        assert_eq!(cpu.why_one_at_a_time(), "the default");
        assert_eq!(gpu.runs_of(), 1);
        let asked = |s: &OnnxSettings, n| OnnxSettings {
            max_engine_batch: Some(n),
            ..s.clone()
        };
        assert_eq!(asked(&cpu, 8).runs_of(), 8);
        assert_eq!(asked(&gpu, 32).runs_of(), 32);
        let tract = OnnxSettings {
            runtime: Runtime::Tract,
            ..asked(&cpu, 8)
        };
        assert_eq!((tract.runs_of(), tract.why_one_at_a_time()), (1, "tract"));
    }

    #[test]
    fn a_gpu_plans_powers_of_two_the_cpu_only_what_it_is_asked() {
        let cpu = OnnxSettings::defaults(Path::new("."));
        let gpu = OnnxSettings {
            cuda_device: Some(0),
            ..cpu.clone()
        };
        assert_eq!(cpu.planned(32), None);
        assert_eq!(gpu.planned(1), Some(vec![1]));
        assert_eq!(gpu.planned(12), Some(vec![1, 2, 4, 8, 12]));
        let asked = |s: &OnnxSettings| OnnxSettings {
            run_sizes: Some(vec![32, 1, 8, 8]),
            ..s.clone()
        };
        assert_eq!(asked(&cpu).planned(32), Some(vec![1, 8, 32]));
        // Sizes above a model's most become the most.
        assert_eq!(asked(&gpu).planned(4), Some(vec![1, 4]));
        let tract = OnnxSettings {
            runtime: Runtime::Tract,
            ..asked(&gpu)
        };
        assert_eq!(tract.planned(8), None);
    }
}
