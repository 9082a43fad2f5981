//! The tract runtime: a typed model optimized (with our own kernels where
//! tract has none, tract_ops) and planned once, then run on Blobs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tract_onnx::prelude::*;

use super::blob::Blob;
use super::tract_ops::{self, Kernels, OwnKernels};
use crate::error::{Error, Result};

pub(super) struct TractNet {
    plan: Arc<TypedRunnableModel>,
}

impl TractNet {
    /// Optimize and plan `typed` with `kernels` of ours; which ops run on
    /// our own kernels.
    pub(super) fn load(typed: TypedModel, kernels: Kernels) -> TractResult<(Self, OwnKernels)> {
        let (optimized, kernels) = tract_ops::optimize(typed, kernels)?;
        let plan = optimized.into_runnable()?;
        Ok((TractNet { plan }, kernels))
    }

    /// One run, timing each node: adds each op's time under its name to
    /// `by_op`; the whole run's time.
    pub(super) fn profile(
        &self,
        input: &Blob,
        by_op: &mut HashMap<String, Duration>,
    ) -> Result<Duration> {
        let fail = |e: TractError| Error::internal(format!("ONNX inference failed: {e:#}"));
        let mut state = tract_onnx::tract_core::plan::SimpleState::new(&self.plan).map_err(fail)?;
        let start = Instant::now();
        state
            .run_plan_with_eval(
                tvec!(into_tract(input)?.into_tvalue()),
                |ctx, op, node, inputs| {
                    let t = Instant::now();
                    let out = tract_onnx::tract_core::plan::eval(ctx, op, node, inputs);
                    *by_op.entry(node.op().name().to_string()).or_default() += t.elapsed();
                    out
                },
            )
            .map_err(fail)?;
        Ok(start.elapsed())
    }

    pub(super) fn run(&self, input: &Blob) -> Result<Vec<Blob>> {
        let outputs = self
            .plan
            .run(tvec!(into_tract(input)?.into_tvalue()))
            .map_err(|e| Error::internal(format!("ONNX inference failed: {e:#}")))?;
        (outputs.iter().enumerate())
            .map(|(i, v)| from_tract(v, i))
            .collect()
    }
}

fn into_tract(blob: &Blob) -> Result<Tensor> {
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
