//! One onnxruntime session planned for one input shape: it is run at that
//! shape only (cuDNN 9 keeps one execution plan per convolution, so a
//! session that meets a new shape plans every convolution again), and its
//! input and outputs are bound to buffers made once (onnxruntime's IO
//! binding). On a GPU the buffers are pinned host memory: one copy in, one
//! copy out, no pageable staging. On the CPU provider the same code runs on
//! plain host buffers, which is how the tests prove it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ort::memory::{AllocationDevice, Allocator, AllocatorType, MemoryInfo, MemoryType};
use ort::session::{IoBinding, Session};
use ort::value::{Tensor, TensorRef};

use super::blob::Blob;
use crate::error::{Error, Result};

/// A session, its binding and its buffers, used by one thread at a time.
struct Bound {
    session: Session,
    binding: Binding,
    input_name: String,
    input: Tensor<f32>,
    /// Each output's buffer and shape, in the session's output order.
    outputs: Vec<(Tensor<f32>, Vec<usize>)>,
}

/// `IoBinding` holds raw pointers, so it is not `Send`.
struct Binding(IoBinding);

// SAFETY: onnxruntime's IoBinding may be used from any thread, one at a
// time; it lives inside `Planned::bound`'s mutex beside its session, and
// every use takes that lock.
unsafe impl Send for Binding {}

pub(super) struct Planned {
    /// The one input shape this session runs.
    pub(super) shape: Vec<usize>,
    bound: Mutex<Bound>,
    /// Runs made, for the tests and the log.
    runs: AtomicU64,
}

fn fail(what: &str) -> impl Fn(ort::Error) -> Error + '_ {
    move |e| Error::unavailable(format!("{what}: onnxruntime: {e}"))
}

/// Buffers for `device` (a CUDA device: pinned host memory; `None`: the CPU).
fn allocator(session: &Session, device: Option<i32>, kind: MemoryType) -> ort::Result<Allocator> {
    match device {
        Some(id) => Allocator::new(
            session,
            MemoryInfo::new(
                AllocationDevice::CUDA_PINNED,
                id,
                AllocatorType::Device,
                kind,
            )?,
        ),
        None => Ok(Allocator::default()),
    }
}

impl Planned {
    /// `session` planned for `shape`: one plain run to learn the outputs'
    /// shapes, buffers made and bound, one bound run (the warm-up).
    pub(super) fn new(
        what: &str,
        mut session: Session,
        shape: &[usize],
        device: Option<i32>,
    ) -> Result<Self> {
        let fail = fail(what);
        let zeros = vec![0.0f32; shape.iter().product()];
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let value = TensorRef::from_array_view((dims, zeros.as_slice())).map_err(&fail)?;
        let output_shapes = (session.run(ort::inputs![value]).map_err(&fail)?.iter())
            .map(|(_, v)| {
                let (shape, _) = v.try_extract_tensor::<f32>().map_err(&fail)?;
                Ok(shape.iter().map(|&d| d.max(0) as usize).collect())
            })
            .collect::<Result<Vec<Vec<usize>>>>()?;
        let input_alloc = allocator(&session, device, MemoryType::CPUInput).map_err(&fail)?;
        let output_alloc = allocator(&session, device, MemoryType::CPUOutput).map_err(&fail)?;
        let input = Tensor::<f32>::new(&input_alloc, shape.to_vec()).map_err(&fail)?;
        let mut binding = session.create_binding().map_err(&fail)?;
        let mut outputs = Vec::new();
        for (outlet, shape) in session.outputs().iter().zip(output_shapes) {
            let mut buffer = Tensor::<f32>::new(&output_alloc, shape.clone()).map_err(&fail)?;
            binding
                .bind_output(outlet.name(), &mut buffer)
                .map_err(&fail)?;
            outputs.push((buffer, shape));
        }
        let input_name = (session.inputs().first())
            .map(|i| i.name().to_string())
            .ok_or_else(|| Error::unavailable(format!("{what}: the model has no input")))?;
        let planned = Planned {
            shape: shape.to_vec(),
            bound: Mutex::new(Bound {
                session,
                binding: Binding(binding),
                input_name,
                input,
                outputs,
            }),
            runs: AtomicU64::new(0),
        };
        planned.run(&Blob {
            shape: shape.to_vec(),
            data: zeros,
        })?;
        Ok(planned)
    }

    /// One run at the planned shape; any other is refused, never run.
    pub(super) fn run(&self, input: &Blob) -> Result<Vec<Blob>> {
        let values: usize = self.shape.iter().product();
        if input.shape != self.shape || input.data.len() != values {
            return Err(Error::internal(format!(
                "a session planned for input shape {:?} was asked to run {:?}",
                self.shape, input.shape
            )));
        }
        let fail = |e: ort::Error| Error::internal(format!("onnxruntime inference failed: {e}"));
        let mut bound = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        let Bound {
            session,
            binding,
            input_name,
            input: buffer,
            outputs,
        } = &mut *bound;
        host_values_mut(buffer).copy_from_slice(&input.data);
        // Bound again at each run: on a GPU binding is when onnxruntime
        // copies the pinned input to the device.
        binding
            .0
            .bind_input(input_name.as_str(), buffer)
            .map_err(fail)?;
        drop(session.run_binding(&binding.0).map_err(fail)?);
        self.runs.fetch_add(1, Ordering::Relaxed);
        Ok(outputs
            .iter()
            .map(|(tensor, shape)| Blob {
                shape: shape.clone(),
                data: host_values(tensor).to_vec(),
            })
            .collect())
    }

    /// Runs made so far.
    pub(super) fn runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }
}

// Our buffers are read and written through their pointers: ort's own
// accessors refuse CUDA-pinned memory under its api-17 feature (onnxruntime
// 1.23 changed that memory's device type), though it is host memory.

/// A bound buffer's values where they lie in host memory.
fn host_values(tensor: &Tensor<f32>) -> &[f32] {
    let count = tensor.shape().num_elements();
    let ptr = tensor.data_ptr().cast::<f32>();
    if count == 0 || ptr.is_null() {
        return &[];
    }
    // SAFETY: the buffer was made by a CPU or CUDA-pinned allocator (host
    // memory), holds `count` f32 values and lives as long as `tensor`; the
    // run that wrote it has returned, its stream synchronized.
    unsafe { std::slice::from_raw_parts(ptr, count) }
}

/// `host_values`, to write before a run.
fn host_values_mut(tensor: &mut Tensor<f32>) -> &mut [f32] {
    let count = tensor.shape().num_elements();
    let ptr = tensor.data_ptr_mut().cast::<f32>();
    if count == 0 || ptr.is_null() {
        return &mut [];
    }
    // SAFETY: as `host_values`; `&mut` to the tensor makes this the only
    // access, and no run is under way (the caller holds the session's lock).
    unsafe { std::slice::from_raw_parts_mut(ptr, count) }
}
