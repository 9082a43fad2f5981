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
use super::onnxruntime::{library_path, CudaSetup, OrtNet};
use super::ops::Layout;
use super::settings::{OnnxSettings, Runtime};
use super::tract::TractNet;
use super::tract_ops::{self, Kernels, OwnKernels};
use crate::error::{Error, Result};
use crate::parts::in_parts;

/// A loaded model in the runtime that runs it.
pub(super) enum Runner {
    Tract(TractNet),
    Ort(Box<OrtNet>),
}

pub(super) struct Net {
    runner: Runner,
    /// Input shape, batch first (1 when free).
    pub(super) shape: Vec<usize>,
    /// Where its input's channels are.
    pub(super) layout: Layout,
    /// Whether the file leaves its input's height and width free (the
    /// size it was loaded at is then the engine's choice).
    pub(super) free_size: bool,
    /// Its outputs' names, in order.
    output_names: Vec<String>,
    /// Whether a run takes several items, and why (for the load log).
    pub(super) batch: BatchDim,
    /// The most items one run takes when it takes several (set by the
    /// engine: max_engine_batch, for the detector at most the frames an
    /// Execute can bring).
    pub(super) most: usize,
    /// What hygiene did to it, for the load log.
    pub(super) cleaned: Report,
    /// On tract, which ops run on the engine's own kernels (tract_ops).
    pub(super) own_kernels: Option<OwnKernels>,
    /// The run sizes it has a session of its own for, ascending (empty:
    /// one session takes any size). Every run is padded with blank items
    /// to the next (`padded`), so each session runs one shape, planned and
    /// warmed at load (onnxruntime.rs `plan`).
    pub(super) planned: Vec<usize>,
    /// Threads a run's items are filled on (set by the engine; 1 on the
    /// CPU, where each batch thread has an engine of its own).
    pub(super) fill_threads: usize,
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

/// What the engine asks of a model's batch dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Batching {
    /// One item a run: a free batch is fixed to 1 (batch_dim.rs).
    OneAtATime,
    /// Runs of several where the file's batch is free.
    AsDeclared,
    /// Runs of several, a fixed batch of 1 freed first (`free_batch`).
    Freed,
}

/// How a loaded model takes a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum BatchDim {
    /// One item a run: fixed in the file, or asked.
    Fixed,
    /// Free in the file.
    Free,
    /// A fixed batch of 1 freed at load.
    Freed,
    /// Free (or freed), but two items run together did not answer as each
    /// alone: run one at a time; why.
    Unfit(String),
}

impl BatchDim {
    pub(super) fn takes_batches(&self) -> bool {
        matches!(self, BatchDim::Free | BatchDim::Freed)
    }
}

/// A model as read: its name in messages, file, cleaned protobuf, and
/// whether its weights lie in external files.
struct Source<'a> {
    what: &'a str,
    path: &'a Path,
    proto: &'a tract_onnx::pb::ModelProto,
    external: bool,
    /// Its bytes kept for planned sessions.
    keep: bool,
}

/// Why a runner could not be made: tract's error (`load_net` says the file
/// is no loadable model) or another.
enum Loading {
    Tract(TractError),
    Other(Error),
}

/// The runtime's runner for `typed` (tract) or the model's bytes
/// (onnxruntime), with tract's own kernels when it runs them.
fn runner(
    m: Source<'_>,
    typed: Option<TypedModel>,
    runtime: &RuntimeChoice,
) -> std::result::Result<(Runner, Option<OwnKernels>), Loading> {
    match (runtime, typed) {
        (RuntimeChoice::Tract(kernels), Some(typed)) => {
            let (net, kernels) = TractNet::load(typed, *kernels).map_err(Loading::Tract)?;
            Ok((Runner::Tract(net), Some(kernels)))
        }
        // onnxruntime reads external data relative to the file, so such a
        // model is loaded from its path; every other one from the cleaned bytes.
        (RuntimeChoice::Tract(_), None) => Err(Loading::Other(Error::internal(
            "tract needs the typed model",
        ))),
        (
            RuntimeChoice::Ort {
                library,
                threads,
                cuda,
            },
            _,
        ) => {
            let bytes = match m.external {
                true => std::fs::read(m.path).map_err(|e| {
                    Loading::Other(Error::unavailable(format!(
                        "{} {}: {e}",
                        m.what,
                        m.path.display()
                    )))
                })?,
                false => m.proto.encode_to_vec(),
            };
            let net = OrtNet::load(m.what, &bytes, library, *threads, cuda.clone(), m.keep);
            Ok((Runner::Ort(Box::new(net.map_err(Loading::Other)?)), None))
        }
    }
}

/// Load, clean (hygiene.rs) and make a model ready to run once (tract
/// types, optimizes and plans it). `size` is the input's (width, height)
/// where the file leaves them free; `batching` says what becomes of its
/// batch dimension; `keep`, whether its bytes are kept for `Net::plan`.
pub(super) fn load_net(
    what: &str,
    path: &Path,
    size: Option<(usize, usize)>,
    runtime: &RuntimeChoice,
    hygiene: Hygiene,
    batching: Batching,
    keep: bool,
) -> Result<Net> {
    let onnx = tract_ops::onnx(runtime.kernels());
    let mut proto = onnx.proto_model_for_path(path).map_err(|e| {
        Error::unavailable(format!(
            "{what} {}: not a loadable ONNX model: {e:#}",
            path.display()
        ))
    })?;
    let (cleaned, external, batch) = prepare(&mut proto, runtime, hygiene, batching);
    let input = Input::declared(what, path, &proto, size)?;
    let source = Source {
        what,
        path,
        proto: &proto,
        external,
        keep,
    };
    let (runner, own_kernels) = load_runner(&onnx, source, runtime, &input)?;
    let output_names = (proto.graph.iter())
        .flat_map(|g| g.output.iter().map(|o| o.name.clone()))
        .collect();
    let mut net = Net {
        runner,
        shape: input.shape,
        layout: input.layout,
        free_size: input.free_size,
        output_names,
        batch,
        most: 1,
        cleaned,
        own_kernels,
        planned: Vec::new(),
        fill_threads: 1,
    };
    if net.batch.takes_batches() {
        if let Err(why) = net.answers_alike_together() {
            net.batch = BatchDim::Unfit(why);
        }
    }
    Ok(net)
}

/// The model cleaned for its runtime and its batch made what `batching`
/// asks: what the cleaning did, whether its weights lie in external files
/// (then it is used as it is), and its batch.
fn prepare(
    proto: &mut tract_onnx::pb::ModelProto,
    runtime: &RuntimeChoice,
    hygiene: Hygiene,
    batching: Batching,
) -> (Report, bool, BatchDim) {
    let external = hygiene::has_external_data(proto);
    let cleaned = match external {
        true => Report {
            skipped: Some("weights in external data files: model used as is".into()),
            ..Report::default()
        },
        false => hygiene::clean(proto, hygiene, runtime.prelu_form()),
    };
    // onnxruntime reads a model with external data from its file: no change
    // made here reaches it, so its batch stays as declared.
    let batching = match external {
        true => Batching::AsDeclared,
        false => batching,
    };
    let batch = batch_of(proto, batching);
    if let RuntimeChoice::Tract(_) = runtime {
        hygiene::spell_out_defaults(proto);
    }
    (cleaned, external, batch)
}

/// The runtime's runner for the prepared model: onnxruntime reads the
/// bytes itself (tract need not understand them); tract parses, types and
/// plans it at the input's size.
fn load_runner(
    onnx: &tract_onnx::Onnx,
    m: Source<'_>,
    runtime: &RuntimeChoice,
    input: &Input,
) -> Result<(Runner, Option<OwnKernels>)> {
    // A model tract reads but cannot run (an op or a type it does not
    // handle): onnxruntime may.
    let (what, path) = (m.what, m.path);
    let beyond_tract = |e: TractError| {
        Error::unavailable(format!(
            "{what} {}: tract cannot run this model ({e:#}); `runtime: onnxruntime` runs \
             models tract cannot",
            path.display()
        ))
    };
    let typed = match runtime {
        RuntimeChoice::Ort { .. } => None,
        RuntimeChoice::Tract(_) => {
            let dir = path.parent().and_then(Path::to_str);
            let mut model = onnx.parse(m.proto, dir).map_err(beyond_tract)?.model;
            if input.free_size {
                let fact = InferenceFact::dt_shape(f32::datum_type(), &*input.shape);
                model.set_input_fact(0, fact).map_err(beyond_tract)?;
            }
            Some(model.into_typed().map_err(beyond_tract)?)
        }
    };
    runner(m, typed, runtime).map_err(|e| match e {
        Loading::Tract(e) => beyond_tract(e),
        Loading::Other(e) => e,
    })
}

/// A model's input as its file declares it, sized.
struct Input {
    /// Batch first (1), then C, H, W or H, W, C.
    shape: Vec<usize>,
    layout: Layout,
    free_size: bool,
}

impl Input {
    /// The first input of `proto`: four dimensions, channels (1 or 3)
    /// second (NCHW) or last (NHWC); height and width fixed, or free and
    /// then `size`.
    fn declared(
        what: &str,
        path: &Path,
        proto: &tract_onnx::pb::ModelProto,
        size: Option<(usize, usize)>,
    ) -> Result<Self> {
        let dims = declared_dims(proto);
        let fail = |why: &str| {
            Error::unavailable(format!(
                "{what} {}: expected one image input [N,C,H,W] or [N,H,W,C] with 1 or 3                  channels; {why}",
                path.display()
            ))
        };
        let dims = dims.ok_or_else(|| fail("its input declares no shape"))?;
        let channels = |d: Option<usize>| matches!(d, Some(1) | Some(3));
        let (layout, c, h, w) = match dims.as_slice() {
            [_, c, h, w] if channels(*c) => (Layout::Nchw, *c, *h, *w),
            [_, h, w, c] if channels(*c) => (Layout::Nhwc, *c, *h, *w),
            _ => return Err(fail(&format!("it declares {}", dims_text(&dims)))),
        };
        let free_size = h.is_none() || w.is_none();
        let (w, h) = match (w.zip(h), size) {
            (Some(fixed), _) => fixed,
            (None, Some(size)) => size,
            (None, None) => {
                return Err(fail(&format!(
                    "it declares {}, its height and width free, and no size was set for it",
                    dims_text(&dims)
                )))
            }
        };
        let c = c.unwrap_or(3);
        let shape = match layout {
            Layout::Nchw => vec![1, c, h, w],
            Layout::Nhwc => vec![1, h, w, c],
        };
        Ok(Input {
            shape,
            layout,
            free_size,
        })
    }
}

/// The first input's dimensions as the file declares them (`None`: free).
fn declared_dims(proto: &tract_onnx::pb::ModelProto) -> Option<Vec<Option<usize>>> {
    use tract_onnx::pb::tensor_shape_proto::dimension::Value;
    use tract_onnx::pb::type_proto;
    let graph = proto.graph.as_ref()?;
    let weights: std::collections::HashSet<&str> =
        graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let input = graph
        .input
        .iter()
        .find(|i| !weights.contains(i.name.as_str()))?;
    let Some(type_proto::Value::TensorType(tensor)) = input.r#type.as_ref()?.value.as_ref() else {
        return None;
    };
    Some(
        (tensor.shape.as_ref()?.dim.iter())
            .map(|d| match d.value {
                Some(Value::DimValue(v)) if v > 0 => Some(v as usize),
                _ => None,
            })
            .collect(),
    )
}

/// "[1,3,?,?]" for messages.
fn dims_text(dims: &[Option<usize>]) -> String {
    let dims: Vec<String> = (dims.iter())
        .map(|d| d.map_or("?".to_string(), |v| v.to_string()))
        .collect();
    format!("[{}]", dims.join(","))
}

/// The model's batch dimension made what `batching` asks, where it can be.
fn batch_of(proto: &mut tract_onnx::pb::ModelProto, batching: Batching) -> BatchDim {
    match batching {
        Batching::OneAtATime => {
            batch_dim::fix_to_one(proto);
            BatchDim::Fixed
        }
        _ if batch_dim::is_free(proto) => BatchDim::Free,
        Batching::Freed if batch_dim::free(proto) => BatchDim::Freed,
        _ => BatchDim::Fixed,
    }
}

/// The runtime a model is loaded into, resolved (library found) once.
pub(super) enum RuntimeChoice {
    /// With these of our kernels (all of them but in the kernels bench).
    Tract(Kernels),
    Ort {
        library: PathBuf,
        threads: usize,
        cuda: Option<CudaSetup>,
    },
}

impl RuntimeChoice {
    /// onnxruntime on the CPU runs convolutions in its blocked layout, so
    /// PRelu is best rewritten as convolutions there (hygiene.rs); tract
    /// runs PRelu itself on our one-pass kernel (tract_ops).
    fn prelu_form(&self) -> PreluForm {
        match self {
            RuntimeChoice::Ort { cuda: None, .. } => PreluForm::Convolutions,
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
                cuda: settings.cuda_device.map(|device| CudaSetup {
                    device,
                    options: settings.cuda.clone(),
                }),
            },
        })
    }

    /// Which of our kernels tract runs (for onnxruntime tract only reads
    /// the protobuf).
    fn kernels(&self) -> Kernels {
        match self {
            RuntimeChoice::Tract(kernels) => *kernels,
            RuntimeChoice::Ort { .. } => Kernels::ALL,
        }
    }
}

/// One output of the model as a run of one item gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub name: String,
    pub shape: Vec<usize>,
}

impl Output {
    /// Its values (one item's).
    pub fn values(&self) -> usize {
        self.shape.iter().product()
    }

    /// The shape without a leading 1 (a batch dimension, or none).
    pub fn item_shape(&self) -> &[usize] {
        match self.shape.first() {
            Some(1) if self.shape.len() > 1 => &self.shape[1..],
            _ => &self.shape,
        }
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

    /// The input's (width, height).
    pub(super) fn image_size(&self) -> (usize, usize) {
        match self.layout {
            Layout::Nchw => (self.shape[3], self.shape[2]),
            Layout::Nhwc => (self.shape[2], self.shape[1]),
        }
    }

    /// One run of a blank item: each output's name, shape and values.
    pub(super) fn probe(&self) -> Result<Vec<(Output, Vec<f32>)>> {
        let outputs = self.run(&Blob::zeros(&self.shape))?;
        Ok((outputs.into_iter().enumerate())
            .map(|(i, blob)| {
                let name =
                    (self.output_names.get(i).cloned()).unwrap_or_else(|| format!("output {i}"));
                let output = Output {
                    name,
                    shape: blob.shape,
                };
                (output, blob.data)
            })
            .collect())
    }

    /// The most items one run takes: the largest planned size, else `most`
    /// when it takes batches, else 1.
    pub(super) fn per_run(&self) -> usize {
        match (self.planned.last(), self.batch.takes_batches()) {
            (Some(&largest), _) => largest,
            (None, true) => self.most.max(1),
            (None, false) => 1,
        }
    }

    /// Two different items run together answer as each run alone (within
    /// 1e-3 of each value's size: a GPU's kernels may differ by run size);
    /// else why not. A model whose file declares a free batch that its
    /// graph mixes or pins would otherwise answer wrong, or fail every run.
    fn answers_alike_together(&self) -> std::result::Result<(), String> {
        let per_item: usize = self.shape[1..].iter().product();
        // Two inputs of values in [-1, 1), different in every position.
        let item = |seed: usize| -> Vec<f32> {
            (0..per_item)
                .map(|v| ((v * 7919 + seed * 104_729) % 1000) as f32 / 500.0 - 1.0)
                .collect()
        };
        let run = |data: Vec<f32>, n: usize| {
            let mut shape = self.shape.clone();
            shape[0] = n;
            self.run(&Blob { shape, data })
                .and_then(|out| split(out, n))
        };
        let (a, b) = (item(1), item(2));
        let alone = [run(a.clone(), 1), run(b.clone(), 1)];
        let together = run([a, b].concat(), 2).map_err(|e| format!("a run of two failed: {e}"))?;
        for (i, (got, want)) in together.iter().zip(alone).enumerate() {
            let want = want.map_err(|e| format!("a run of one failed: {e}"))?;
            let want = want.into_iter().next().unwrap_or_default();
            let same = (got.iter().zip(&want))
                .all(|(g, w)| g.len() == w.len() && g.iter().zip(w).all(|(x, y)| close(*x, *y)));
            if !same || got.len() != want.len() {
                return Err(format!(
                    "item {i} of a run of two differs from its run alone"
                ));
            }
        }
        Ok(())
    }

    /// `items` through the model, at most `per_run` in one run. `fill`
    /// appends an item's input values ([C, H, W] of the model's shape) to
    /// the run's input, on up to `fill_threads` threads. One result per
    /// item, in order: its share of each output, or why it failed. An item
    /// `fill` refuses fails alone; so does one the model fails on, since a
    /// run that fails is run again item by item.
    pub(super) fn run_items<T: Sync>(
        &self,
        items: &[T],
        fill: impl Fn(&T, &mut Vec<f32>) -> Result<()> + Sync,
    ) -> Vec<Result<ItemOutputs>> {
        let per_item: usize = self.shape[1..].iter().product();
        let mut results = Vec::with_capacity(items.len());
        let mut input = Blob {
            shape: self.shape.clone(),
            data: Vec::new(),
        };
        for chunk in items.chunks(self.per_run()) {
            input.data.clear();
            let filled = fill_run(
                chunk,
                &self.shape[1..],
                self.fill_threads,
                &fill,
                &mut input.data,
            );
            let count = filled.iter().filter(|f| f.is_ok()).count();
            input.shape[0] = self.padded(count);
            input.data.resize(input.shape[0] * per_item, 0.0);
            let mut outputs = self.run_filled(&input, count).into_iter();
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

    /// The items a run of `count` is made of: `count`, or the smallest
    /// planned size that holds it.
    pub(super) fn padded(&self, count: usize) -> usize {
        match count {
            0 => 0,
            _ => (self.planned.iter().copied())
                .find(|&n| n >= count)
                .unwrap_or(count),
        }
    }

    /// Sessions of their own for runs of each of `sizes` items (only 1
    /// where the model takes no batches), in place of the one that takes
    /// any; on tract, which plans one shape at load, nothing changes.
    pub(super) fn plan(&mut self, sizes: &[usize]) -> Result<()> {
        let sizes = match self.batch.takes_batches() {
            true => sizes.to_vec(),
            false => vec![1],
        };
        if let Runner::Ort(net) = &mut self.runner {
            let shapes: Vec<Vec<usize>> = (sizes.iter())
                .map(|&n| [&[n][..], &self.shape[1..]].concat())
                .collect();
            net.plan(&shapes)?;
            self.planned = sizes;
        }
        Ok(())
    }

    /// Each planned run size and the runs made at it (none: unplanned),
    /// and the runs refused for want of a session planned for their shape.
    #[cfg(test)]
    pub(super) fn planned_runs(&self) -> (Vec<(usize, u64)>, u64) {
        match &self.runner {
            Runner::Ort(net) => {
                let (runs, refused) = net.planned_runs();
                let sizes = runs.into_iter().map(|(shape, n)| (shape[0], n));
                (sizes.collect(), refused)
            }
            Runner::Tract(_) => (Vec::new(), 0),
        }
    }

    /// One run over `input`'s items (its first dimension), the shares of
    /// its first `count` (the rest are padding); after a failed run of
    /// several, each of those alone.
    fn run_filled(&self, input: &Blob, count: usize) -> Vec<Result<ItemOutputs>> {
        let n = input.shape[0];
        if count == 0 {
            return Vec::new();
        }
        match self.run(input).and_then(|outputs| split(outputs, n)) {
            Ok(items) => items.into_iter().take(count).map(Ok).collect(),
            Err(e) if n == 1 => vec![Err(e)],
            Err(_) => input
                .data
                .chunks_exact((input.data.len() / n).max(1))
                .take(count)
                .flat_map(|one| {
                    let mut shape = input.shape.clone();
                    shape[0] = 1;
                    let data = one.to_vec();
                    self.run_filled(&Blob { shape, data }, 1)
                })
                .collect(),
        }
    }
}

/// A run's items appended to `data` by `fill`, in order: on the calling
/// thread, or in contiguous parts on up to `threads` (a GPU's run of many
/// frames would otherwise wait for one core to resize and normalise them
/// all). One result per item; a part whose thread cannot start or panics
/// fails its items alone.
fn fill_run<T: Sync>(
    items: &[T],
    item_shape: &[usize],
    threads: usize,
    fill: &(impl Fn(&T, &mut Vec<f32>) -> Result<()> + Sync),
    data: &mut Vec<f32>,
) -> Vec<Result<()>> {
    let one = |item: &T, data: &mut Vec<f32>| fill_one(item, item_shape, fill, data);
    if threads.min(items.len()) <= 1 {
        return items.iter().map(|item| one(item, data)).collect();
    }
    let per_item: usize = item_shape.iter().product();
    let parts = in_parts(items, threads, "face-fill", |part| {
        let mut mine = Vec::with_capacity(part.len() * per_item);
        let done: Vec<Result<()>> = part.iter().map(|i| one(i, &mut mine)).collect();
        (done, mine)
    });
    let mut results = Vec::with_capacity(items.len());
    for (len, part) in parts {
        match part {
            Ok((done, mine)) => {
                data.extend_from_slice(&mine);
                results.extend(done);
            }
            Err(why) => results.extend((0..len).map(|_| {
                Err(Error::internal(format!(
                    "a thread filling a model's input {why}"
                )))
            })),
        }
    }
    results
}

/// One item's values appended to `data` by `fill`: all of them (the
/// item's shape), or none and why.
fn fill_one<T>(
    item: &T,
    item_shape: &[usize],
    fill: &impl Fn(&T, &mut Vec<f32>) -> Result<()>,
    data: &mut Vec<f32>,
) -> Result<()> {
    let start = data.len();
    let per_item: usize = item_shape.iter().product();
    let done = fill(item, data).and_then(|()| match data.len() - start {
        got if got == per_item => Ok(()),
        got => Err(Error::internal(format!(
            "model input: {got} values for an item of shape {item_shape:?}"
        ))),
    });
    if done.is_err() {
        data.truncate(start);
    }
    done
}

/// Within 1e-3 of `want`'s size.
fn close(got: f32, want: f32) -> bool {
    (got - want).abs() <= 1e-3 * (1.0 + want.abs())
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
        Batching::AsDeclared,
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

/// The model file at `path` as the engine hands it to onnxruntime on the
/// CPU (hygiene.rs: tiny weights zeroed, PRelu as depthwise convolutions),
/// serialized, with what the cleaning did. For tools: the int8 copies are
/// quantized from this form (scripts/quantize.py).
pub fn cleaned_for_onnxruntime(path: &Path) -> Result<(Vec<u8>, String)> {
    let fail = |e: TractError| Error::invalid(format!("{}: {e:#}", path.display()));
    let mut proto = tract_ops::onnx(Kernels::ALL)
        .proto_model_for_path(path)
        .map_err(fail)?;
    if hygiene::has_external_data(&proto) {
        return Err(Error::invalid(format!(
            "{}: weights in external data files are not cleaned",
            path.display()
        )));
    }
    let report = hygiene::clean(&mut proto, Hygiene::default(), PreluForm::Convolutions);
    Ok((proto.encode_to_vec(), report.describe()))
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
            Batching::OneAtATime,
            false,
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
