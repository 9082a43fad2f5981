//! The tract runtime: a typed model optimized (with our own kernels where
//! tract has none, tract_ops) and planned once, then run on Blobs.

use std::sync::Arc;

use tract_onnx::prelude::*;

use super::blob::Blob;
use super::tract_ops::{self, OwnKernels};
use crate::error::{Error, Result};

pub(super) struct TractNet {
    plan: Arc<TypedRunnableModel>,
}

impl TractNet {
    /// Optimize and plan `typed`; which ops run on our own kernels.
    pub(super) fn load(typed: TypedModel) -> TractResult<(Self, OwnKernels)> {
        let (optimized, kernels) = tract_ops::optimize(typed)?;
        let plan = optimized.into_runnable()?;
        Ok((TractNet { plan }, kernels))
    }

    pub(super) fn run(&self, input: Blob) -> Result<Vec<Blob>> {
        let outputs = self
            .plan
            .run(tvec!(into_tract(input)?.into_tvalue()))
            .map_err(|e| Error::internal(format!("ONNX inference failed: {e:#}")))?;
        (outputs.iter().enumerate())
            .map(|(i, v)| from_tract(v, i))
            .collect()
    }
}

fn into_tract(blob: Blob) -> Result<Tensor> {
    Tensor::from_shape(&blob.shape, &blob.data)
        .map_err(|e| Error::internal(format!("input tensor: {e}")))
}

fn from_tract(value: &TValue, index: usize) -> Result<Blob> {
    let view = value
        .to_plain_array_view::<f32>()
        .map_err(|e| Error::internal(format!("output {index} is not f32: {e}")))?;
    Ok(Blob {
        shape: view.shape().to_vec(),
        data: match view.as_slice() {
            Some(values) => values.to_vec(),
            None => view.iter().copied().collect(),
        },
    })
}
