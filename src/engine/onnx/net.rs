//! One ONNX model read and cleaned (tract parses it for both runtimes),
//! loaded into its runtime (tract.rs or onnxruntime.rs), and run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tract_onnx::prelude::*;

use prost::Message;

use super::super::fpu::FlushDenormals;
use super::batch_dim;
use super::blob::Blob;
use super::hygiene::{self, Hygiene, PreluForm, Report};
use super::onnxruntime::{library_path, OrtNet};
use super::settings::{OnnxSettings, Runtime};
use super::tract::TractNet;
use super::tract_ops::{self, Kernels, OwnKernels};
use crate::error::{Error, Result};

/// A loaded model in the runtime that runs it.
pub(super) enum Runner {
    Tract(TractNet),
    Ort(OrtNet),
}

pub(super) struct Net {
    runner: Runner,
    /// Input shape, batch first; `batch_free` when the batch dim is symbolic.
    pub(super) shape: Vec<usize>,
    pub(super) batch_free: bool,
    /// What hygiene did to it, for the load log.
    pub(super) cleaned: Report,
    /// On tract, which ops run on the engine's own kernels (tract_ops).
    pub(super) own_kernels: Option<OwnKernels>,
    /// Runs padded with blank items to a power of two (`padded`): on a GPU
    /// each input shape costs cuDNN a search for its convolutions' kernels
    /// the first time, so the card sees a few shapes, each met at load
    /// (`warm_up`), instead of one per run size.
    pub(super) pad_runs: bool,
}

/// The model file a parameter names; a missing one fails the load naming the
/// parameter and the path (relative values are in the version folder).
pub(super) fn model_file<'a>(key: &str, path: &'a Path) -> Result<&'a Path> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::unavailable(format!(
            "model parameter `{key}`: file {} not found (relative paths are resolved against \
             the model's version folder)",
            path.display()
        )))
    }
}

/// Load, clean (hygiene.rs), type, optimize and plan a model once. `size`
/// fixes the input's height and width (for models whose spatial dims are
/// free); `one_at_a_time` fixes a free batch dimension to 1 (batch_dim.rs).
pub(super) fn load_net(
    what: &str,
    path: &Path,
    size: Option<(usize, usize)>,
    runtime: &RuntimeChoice,
    hygiene: Hygiene,
    one_at_a_time: bool,
) -> Result<Net> {
    let fail = |e: TractError| {
        Error::unavailable(format!(
            "{what} {}: not a loadable ONNX model: {e:#}",
            path.display()
        ))
    };
    let kernels = match runtime {
        RuntimeChoice::Tract(kernels) => *kernels,
        // tract only reads the model's input shape for onnxruntime.
        RuntimeChoice::Ort { .. } => Kernels::ALL,
    };
    let onnx = tract_ops::onnx(kernels);
    let mut proto = onnx.proto_model_for_path(path).map_err(fail)?;
    let external = hygiene::has_external_data(&proto);
    let cleaned = if external {
        Report {
            skipped: Some("weights in external data files: model used as is".into()),
            ..Report::default()
        }
    } else {
        hygiene::clean(&mut proto, hygiene, runtime.prelu_form())
    };
    let batch_free = batch_dim::is_free(&proto) && !one_at_a_time;
    if one_at_a_time {
        batch_dim::fix_to_one(&mut proto);
    }
    let dir = path.parent().and_then(Path::to_str);
    let parsed = onnx.parse(&proto, dir).map_err(fail)?;
    let mut model = parsed.model;
    if let Some((w, h)) = size {
        let fact = InferenceFact::dt_shape(f32::datum_type(), tvec![1, 3, h, w]);
        model.set_input_fact(0, fact).map_err(fail)?;
    }
    let typed = model.into_typed().map_err(fail)?;
    let shape = input_shape(what, path, &typed)?;
    let mut own_kernels = None;
    let runner = match runtime {
        RuntimeChoice::Tract(kernels) => {
            let (net, kernels) = TractNet::load(typed, *kernels).map_err(fail)?;
            own_kernels = Some(kernels);
            Runner::Tract(net)
        }
        // onnxruntime reads external data relative to the file, so such a
        // model is loaded from its path; every other one from the cleaned bytes.
        RuntimeChoice::Ort {
            library,
            threads,
            cuda_device,
        } => {
            let bytes = if external {
                std::fs::read(path)
                    .map_err(|e| Error::unavailable(format!("{what} {}: {e}", path.display())))?
            } else {
                proto.encode_to_vec()
            };
            Runner::Ort(OrtNet::load(what, &bytes, library, *threads, *cuda_device)?)
        }
    };
    Ok(Net {
        runner,
        shape,
        batch_free,
        cleaned,
        own_kernels,
        pad_runs: false,
    })
}

/// The input's NCHW shape (batch 1 when free); C, H and W must be fixed.
fn input_shape(what: &str, path: &Path, typed: &TypedModel) -> Result<Vec<usize>> {
    let fact = typed
        .input_fact(0)
        .map_err(|e| Error::unavailable(format!("{what} {}: {e}", path.display())))?;
    let dims: Vec<Option<usize>> = fact
        .shape
        .iter()
        .map(|d| d.to_i64().ok().map(|v| v as usize))
        .collect();
    if dims.len() != 4 || dims[1..].iter().any(Option::is_none) {
        return Err(Error::unavailable(format!(
            "{what} {}: expected one NCHW input with fixed C, H, W; got {:?}",
            path.display(),
            fact.shape
        )));
    }
    Ok(dims.iter().map(|d| d.unwrap_or(1)).collect())
}

/// The runtime a model is loaded into, resolved (library found) once.
pub(super) enum RuntimeChoice {
    /// With these of our kernels (all of them but in the kernels bench).
    Tract(Kernels),
    Ort {
        library: PathBuf,
        threads: usize,
        cuda_device: Option<i32>,
    },
}

impl RuntimeChoice {
    /// onnxruntime on the CPU runs convolutions in its blocked layout, so
    /// PRelu is best rewritten as convolutions there (hygiene.rs); tract
    /// runs PRelu itself on our one-pass kernel (tract_ops).
    fn prelu_form(&self) -> PreluForm {
        match self {
            RuntimeChoice::Ort {
                cuda_device: None, ..
            } => PreluForm::Convolutions,
            RuntimeChoice::Tract(_) => PreluForm::Native,
            _ => PreluForm::Elementwise,
        }
    }

    pub(super) fn of(settings: &OnnxSettings) -> Result<Self> {
        Ok(match settings.runtime {
            Runtime::Tract => RuntimeChoice::Tract(Kernels::ALL),
            Runtime::OnnxRuntime => RuntimeChoice::Ort {
                library: library_path(settings.onnxruntime_library.as_deref())?,
                threads: settings.intra_op_threads,
                cuda_device: settings.cuda_device,
            },
        })
    }
}

/// One item's share of a run: each output's values for it, in output order.
pub(super) type ItemOutputs = Vec<Vec<f32>>;

impl Net {
    pub(super) fn run(&self, input: &Blob) -> Result<Vec<Blob>> {
        match &self.runner {
            Runner::Tract(net) => net.run(input),
            Runner::Ort(net) => net.run(input),
        }
    }

    /// The most items one run takes: `max` when the batch is free, else 1.
    pub(super) fn per_run(&self, max: usize) -> usize {
        if self.batch_free {
            max.max(1)
        } else {
            1
        }
    }

    /// `items` through the model, at most `max` in one run (one at a time
    /// when its batch is fixed). `fill` appends an item's input values
    /// ([C, H, W] of the model's shape) to the run's input. One result per
    /// item, in order: its share of each output, or why it failed. An item
    /// `fill` refuses fails alone; so does one the model fails on, since a
    /// run that fails is run again item by item.
    pub(super) fn run_items<T>(
        &self,
        items: &[T],
        max: usize,
        mut fill: impl FnMut(&T, &mut Vec<f32>) -> Result<()>,
    ) -> Vec<Result<ItemOutputs>> {
        let per_item: usize = self.shape[1..].iter().product();
        let mut results = Vec::with_capacity(items.len());
        let mut input = Blob {
            shape: self.shape.clone(),
            data: Vec::new(),
        };
        for chunk in items.chunks(self.per_run(max)) {
            input.data.clear();
            let filled: Vec<Result<()>> = chunk
                .iter()
                .map(|item| {
                    let start = input.data.len();
                    let done = fill(item, &mut input.data).and_then(|()| {
                        let got = input.data.len() - start;
                        (got == per_item).then_some(()).ok_or_else(|| {
                            Error::internal(format!(
                                "model input: {got} values for an item of shape {:?}",
                                &self.shape[1..]
                            ))
                        })
                    });
                    if done.is_err() {
                        input.data.truncate(start);
                    }
                    done
                })
                .collect();
            let count = filled.iter().filter(|f| f.is_ok()).count();
            input.shape[0] = self.padded(count, max);
            input.data.resize(input.shape[0] * per_item, 0.0);
            let mut outputs = self.run_filled(&input).into_iter().take(count);
            results.extend(filled.into_iter().map(|f| {
                f.and_then(|()| {
                    outputs
                        .next()
                        .unwrap_or_else(|| Err(Error::internal("a model run lost an item")))
                })
            }));
        }
        results
    }

    /// The items a run of `count` is made of: `count`, or with `pad_runs`
    /// the next power of two (at most the run's limit).
    pub(super) fn padded(&self, count: usize, max: usize) -> usize {
        match self.pad_runs && count > 0 {
            true => count.next_power_of_two().min(self.per_run(max)).max(count),
            false => count,
        }
    }

    /// With `pad_runs`, one run of blank items at each size a run can
    /// have, so that no request pays for the first run of a shape.
    pub(super) fn warm_up(&self, max: usize) -> Result<()> {
        if !self.pad_runs {
            return Ok(());
        }
        let mut sizes: Vec<usize> = (0..usize::BITS)
            .map(|b| 1 << b)
            .take_while(|&n| n < self.per_run(max))
            .collect();
        sizes.push(self.per_run(max));
        for n in sizes {
            let mut shape = self.shape.clone();
            shape[0] = n;
            self.run(&Blob::zeros(&shape))?;
        }
        Ok(())
    }

    /// One run over `input`'s items (its first dimension), each item's
    /// share; after a failed run of several, each item alone.
    fn run_filled(&self, input: &Blob) -> Vec<Result<ItemOutputs>> {
        let n = input.shape[0];
        if n == 0 {
            return Vec::new();
        }
        match self.run(input).and_then(|outputs| split(outputs, n)) {
            Ok(items) => items.into_iter().map(Ok).collect(),
            Err(e) if n == 1 => vec![Err(e)],
            Err(_) => input
                .data
                .chunks_exact((input.data.len() / n).max(1))
                .flat_map(|one| {
                    let mut shape = input.shape.clone();
                    shape[0] = 1;
                    self.run_filled(&Blob {
                        shape,
                        data: one.to_vec(),
                    })
                })
                .collect(),
        }
    }
}

/// A run's outputs cut into `n` items' shares along their first dimension
/// (a run of one item takes each output whole, whatever its shape).
fn split(outputs: Vec<Blob>, n: usize) -> Result<Vec<ItemOutputs>> {
    if n == 1 {
        return Ok(vec![outputs.into_iter().map(|b| b.data).collect()]);
    }
    let mut items = vec![Vec::with_capacity(outputs.len()); n];
    for (k, output) in outputs.iter().enumerate() {
        if output.shape.first() != Some(&n) {
            return Err(Error::internal(format!(
                "model output {k} has shape {:?} for a run of {n} items",
                output.shape
            )));
        }
        let share = output.data.len() / n;
        for (i, item) in items.iter_mut().enumerate() {
            item.push(output.data[i * share..(i + 1) * share].to_vec());
        }
    }
    Ok(items)
}

/// Run one model on one raw f32 input (as the engine loads it: cleaned,
/// typed, optimized, planned by tract): every output's shape and values. For tools and the
/// parity test against onnxruntime.
pub fn run_model(
    path: &Path,
    input: &[f32],
    shape: &[usize],
) -> Result<Vec<(Vec<usize>, Vec<f32>)>> {
    let net = load_net(
        "model",
        path,
        None,
        &RuntimeChoice::Tract(Kernels::ALL),
        Hygiene::default(),
        false,
    )?;
    if input.len() != shape.iter().product::<usize>() {
        return Err(Error::invalid(format!(
            "{} values do not fill shape {shape:?}",
            input.len()
        )));
    }
    let input = Blob {
        shape: shape.to_vec(),
        data: input.to_vec(),
    };
    Ok(net
        .run(&input)?
        .into_iter()
        .map(|b| (b.shape, b.data))
        .collect())
}

/// One model on tract with a choice of our kernels, timed node by node: the
/// kernels bench (examples/tract_kernels.rs) measures each of our ops
/// against tract's own path for the same stage.
pub struct TractBench {
    net: TractNet,
    shape: Vec<usize>,
    /// Which ops run on our kernels.
    pub own: OwnKernels,
}

impl TractBench {
    pub fn load(path: &Path, kernels: Kernels) -> Result<Self> {
        let net = load_net(
            "model",
            path,
            None,
            &RuntimeChoice::Tract(kernels),
            Hygiene::default(),
            true,
        )?;
        match net.runner {
            Runner::Tract(tract) => Ok(TractBench {
                net: tract,
                shape: net.shape,
                own: net.own_kernels.unwrap_or_default(),
            }),
            Runner::Ort(_) => Err(Error::internal("loaded on onnxruntime, not tract")),
        }
    }

    /// The input's shape, batch 1.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// One run on `input` with denormals flushed (as the engine runs): its
    /// time, and each op's time added under its name to `by_op`.
    pub fn run(&self, input: &[f32], by_op: &mut HashMap<String, Duration>) -> Result<Duration> {
        let _flush = FlushDenormals::new(true);
        let input = Blob {
            shape: self.shape.clone(),
            data: input.to_vec(),
        };
        self.net.profile(&input, by_op)
    }
}
