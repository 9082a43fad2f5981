//! Instance state: the engine this instance runs (one per instance; engines
//! are not shared between threads).

use crate::backend::model::{new_engine, ModelState};
use crate::error::{Error, Result};
use crate::pipeline::Engine;
use crate::triton::{log, InstanceHandle, InstanceKind};

pub struct InstanceState {
    pub name: String,
    pub engine: Box<dyn Engine>,
}

impl InstanceState {
    pub fn load(instance: InstanceHandle, model: &ModelState) -> Result<Self> {
        let name = instance.name()?;
        let kind = instance.kind()?;
        if kind == InstanceKind::Gpu {
            return Err(Error::unsupported(format!(
                "instance '{name}': KIND_GPU instances are not supported by this build of the face \
                 backend yet; use KIND_CPU"
            )));
        }
        let engine = new_engine(&model.settings)?;
        log::info(&format!(
            "instance '{name}' of model '{}': {} engine on CPU ({kind:?})",
            model.name,
            engine.name()
        ));
        Ok(InstanceState { name, engine })
    }
}
