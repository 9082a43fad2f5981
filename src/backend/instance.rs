//! Instance state: the engines this instance runs (one per batch thread;
//! engines are not shared between threads) and, for KIND_GPU, its device.

use std::borrow::Cow;

use crate::backend::model::{new_engine, ModelState};
use crate::backend::settings::{EngineKind, Settings};
use crate::engine::onnx::Runtime;
use crate::engine::Engine;
use crate::error::Result;
use crate::gpu::{Gpu, DLIB_USES_CUDA};
use crate::triton::{log, InstanceHandle, InstanceKind};

pub struct InstanceState {
    pub name: String,
    /// `batch_threads` engines, loaded alike: an Execute spreads the images
    /// of its batch over them (spread.rs).
    pub engines: Vec<Box<dyn Engine>>,
    /// KIND_GPU only: the device, bound to the executing thread before the
    /// engine runs. KIND_CPU (and KIND_AUTO resolved to CPU) never loads CUDA.
    pub gpu: Option<Gpu>,
    /// The engine runs on a GPU (dlib with CUDA, or onnxruntime's CUDA
    /// provider, which binds its device itself: `gpu` is then `None`).
    pub on_gpu: bool,
}

impl InstanceState {
    pub fn load(instance: &InstanceHandle, model: &ModelState) -> Result<Self> {
        let name = instance.name()?;
        let kind = instance.kind()?;
        let settings = &model.settings;
        let device = match kind {
            InstanceKind::Gpu => {
                let device = instance.device_id()?;
                let gpu = Gpu::open(&name, device, settings.min_compute_capability)?;
                log::info(&format!("instance '{name}': {}", gpu.info));
                Some((device, gpu))
            }
            InstanceKind::Cpu | InstanceKind::Model | InstanceKind::Auto => None,
        };
        let place = Place::of(settings, device.as_ref().map(|(d, _)| *d));
        // Only dlib needs the device bound on its thread; onnxruntime's CUDA
        // provider manages its own, and the CPU runtimes would only hold GPU
        // memory with it.
        let gpu = device.and_then(|(_, gpu)| matches!(place, Place::DlibGpu(_)).then_some(gpu));
        if let Some(gpu) = &gpu {
            gpu.bind()?;
        }
        let on_gpu = place.on_gpu();
        let engine_settings = match place {
            Place::OnnxCuda(device) => {
                let mut cuda = settings.clone();
                cuda.onnx.cuda_device = Some(device);
                cuda.onnx.fill_threads = settings.decode_threads(true);
                Cow::Owned(cuda)
            }
            _ => Cow::Borrowed(settings),
        };
        // At least one: config.rs clamps batch_threads to 1..=max_batch_size.
        let engines = (0..settings.batch_threads)
            .map(|_| new_engine(&engine_settings))
            .collect::<Result<Vec<_>>>()?;
        if let Some(warning) = place.warning() {
            log::warn(&format!("instance '{name}' is {kind:?}, but {warning}"));
        }
        log::info(&format!(
            "instance '{name}' of model '{}': {} engine on {} ({kind:?}), {} batch thread(s), \
             ENCODED decoded on {} thread(s)",
            model.name,
            engines[0].name(),
            place.describe(),
            engines.len(),
            settings.decode_threads(on_gpu)
        ));
        Ok(InstanceState {
            name,
            engines,
            gpu,
            on_gpu,
        })
    }

    /// Called on the executing thread before any engine call.
    pub fn enter(&self) -> Result<()> {
        enter(self.gpu.as_ref())
    }
}

/// Bind the instance's GPU (if any) to the calling thread: every thread that
/// runs one of its engines does this first.
pub fn enter(gpu: Option<&Gpu>) -> Result<()> {
    match gpu {
        Some(gpu) => gpu.bind(),
        None => Ok(()),
    }
}

/// Where an instance's engine really runs, decided from the engine, its
/// runtime, how dlib was built, and the instance's device (KIND_GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Cpu,
    /// dlib built with CUDA on a KIND_GPU instance: on its device.
    DlibGpu(i32),
    /// KIND_GPU, but the linked dlib has no CUDA.
    DlibNoCuda,
    /// KIND_CPU with a CUDA dlib: its networks still use GPU 0.
    DlibCudaAnyway,
    /// onnxruntime's CUDA execution provider on this device.
    OnnxCuda(i32),
    /// KIND_GPU with `runtime: tract`.
    TractOnCpu,
}

impl Place {
    fn of(settings: &Settings, device: Option<i32>) -> Self {
        let dlib = settings.engine == EngineKind::Dlib;
        match device {
            Some(d) if dlib && DLIB_USES_CUDA => Place::DlibGpu(d),
            Some(_) if dlib => Place::DlibNoCuda,
            Some(d) if settings.onnx.runtime == Runtime::OnnxRuntime => Place::OnnxCuda(d),
            Some(_) => Place::TractOnCpu,
            None if dlib && DLIB_USES_CUDA => Place::DlibCudaAnyway,
            None => Place::Cpu,
        }
    }

    fn describe(self) -> String {
        match self {
            Place::Cpu => "CPU".to_string(),
            Place::DlibGpu(d) => format!("GPU {d}"),
            Place::DlibNoCuda => "CPU (dlib without CUDA)".to_string(),
            Place::DlibCudaAnyway => "GPU 0 (dlib built with CUDA)".to_string(),
            Place::OnnxCuda(d) => format!("GPU {d} (onnxruntime CUDA)"),
            Place::TractOnCpu => "CPU (tract has no GPU support)".to_string(),
        }
    }

    fn on_gpu(self) -> bool {
        matches!(self, Place::DlibGpu(_) | Place::OnnxCuda(_))
    }

    /// What the user should know when the place is not what they asked for.
    fn warning(self) -> Option<&'static str> {
        match self {
            Place::DlibNoCuda => Some(
                "the linked dlib was built without CUDA: the engine runs on the CPU \
                 (see Dockerfile.build for a CUDA build)",
            ),
            Place::DlibCudaAnyway => Some(
                "the linked dlib was built with CUDA: its networks run on the thread's \
                 current GPU (device 0) regardless",
            ),
            Place::TractOnCpu => Some(
                "the onnx engine with runtime tract runs on the CPU (runtime onnxruntime \
                 runs on the GPU)",
            ),
            Place::Cpu | Place::DlibGpu(_) | Place::OnnxCuda(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn settings(parameters: &[(&str, &str)]) -> Settings {
        let p: serde_json::Map<String, serde_json::Value> = (parameters.iter())
            .map(|(k, v)| (k.to_string(), json!({ "string_value": v })))
            .collect();
        let config = json!({ "max_batch_size": 8, "parameters": p });
        Settings::from_config(&config, Path::new("/m"), Path::new("/m/1")).unwrap()
    }

    /// onnxruntime's CUDA provider binds its device itself, so such an
    /// instance keeps no `Gpu`; it is on a GPU all the same, and decodes on
    /// the GPU's threads.
    #[test]
    fn an_onnx_instance_on_cuda_is_on_a_gpu() {
        let onnx = settings(&[("engine", "onnx")]);
        let tract = settings(&[("engine", "onnx"), ("runtime", "tract")]);
        assert!(Place::of(&onnx, Some(0)).on_gpu());
        assert!(!Place::of(&onnx, None).on_gpu());
        assert!(!Place::of(&tract, Some(0)).on_gpu());
        assert_eq!(onnx.decode_threads(Place::of(&onnx, Some(0)).on_gpu()), 4);
        assert_eq!(onnx.decode_threads(Place::of(&onnx, None).on_gpu()), 1);
        let dlib = settings(&[]);
        assert_eq!(Place::of(&dlib, Some(0)).on_gpu(), DLIB_USES_CUDA);
    }
}
