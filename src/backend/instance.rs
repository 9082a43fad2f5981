//! Instance state: the engine this instance runs (one per instance; engines
//! are not shared between threads) and, for KIND_GPU, its device.

use crate::backend::config::EngineKind;
use crate::backend::model::{new_engine, ModelState};
use crate::engine::Engine;
use crate::error::Result;
use crate::gpu::{Gpu, DLIB_USES_CUDA};
use crate::triton::{log, InstanceHandle, InstanceKind};

pub struct InstanceState {
    pub name: String,
    pub engine: Box<dyn Engine>,
    /// KIND_GPU only: the device, bound to the executing thread before the
    /// engine runs. KIND_CPU (and KIND_AUTO resolved to CPU) never loads CUDA.
    pub gpu: Option<Gpu>,
}

impl InstanceState {
    pub fn load(instance: &InstanceHandle, model: &ModelState) -> Result<Self> {
        let name = instance.name()?;
        let kind = instance.kind()?;
        let engine_kind = model.settings.engine;
        let gpu = match kind {
            InstanceKind::Gpu => {
                let device = instance.device_id()?;
                let gpu = Gpu::open(&name, device, model.settings.min_compute_capability)?;
                log::info(&format!("instance '{name}': {}", gpu.info));
                // tract runs on the CPU: the device passed the rule, but keeping
                // its context would only hold GPU memory.
                (engine_kind == EngineKind::Dlib).then_some(gpu)
            }
            InstanceKind::Cpu | InstanceKind::Model | InstanceKind::Auto => None,
        };
        // The engine's CUDA work (if any) must land on this instance's device.
        if let Some(gpu) = &gpu {
            gpu.bind()?;
        }
        let engine = new_engine(&model.settings)?;
        // Where the engine really runs, and what the user should know about it
        // (`gpu` is kept only for the dlib engine; dlib picks CUDA at build time).
        let (place, warning) = match &gpu {
            Some(gpu) if DLIB_USES_CUDA => (format!("GPU {}", gpu.info.ordinal), None),
            Some(_) => (
                "CPU (dlib without CUDA)".to_string(),
                Some(
                    "the linked dlib was built without CUDA: the engine runs on the CPU \
                     (see Dockerfile.build for a CUDA build)",
                ),
            ),
            None if DLIB_USES_CUDA && engine_kind == EngineKind::Dlib => (
                "GPU 0 (dlib built with CUDA)".to_string(),
                Some(
                    "the linked dlib was built with CUDA: its networks run on the thread's \
                     current GPU (device 0) regardless",
                ),
            ),
            None if kind == InstanceKind::Gpu => (
                "CPU (tract has no GPU support)".to_string(),
                Some("the onnx engine (tract) runs on the CPU"),
            ),
            None => ("CPU".to_string(), None),
        };
        if let Some(warning) = warning {
            log::warn(&format!("instance '{name}' is {kind:?}, but {warning}"));
        }
        log::info(&format!(
            "instance '{name}' of model '{}': {} engine on {place} ({kind:?})",
            model.name,
            engine.name()
        ));
        Ok(InstanceState { name, engine, gpu })
    }

    /// Called on the executing thread before any engine call.
    pub fn enter(&self) -> Result<()> {
        match &self.gpu {
            Some(gpu) => gpu.bind(),
            None => Ok(()),
        }
    }
}
