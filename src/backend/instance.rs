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
        let engine_settings = match place {
            Place::OnnxCuda(device) => {
                let mut on_gpu = settings.clone();
                on_gpu.onnx.cuda_device = Some(device);
                Cow::Owned(on_gpu)
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
            "instance '{name}' of model '{}': {} engine on {} ({kind:?}), {} batch thread(s)",
            model.name,
            engines[0].name(),
            place.describe(),
            engines.len()
        ));
        Ok(InstanceState { name, engines, gpu })
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
