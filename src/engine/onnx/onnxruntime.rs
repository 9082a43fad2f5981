//! The onnxruntime runtime of the ONNX engine, through the `ort` crate with
//! the library loaded at run time (nothing is downloaded at build or run
//! time). The library is found once per process: the model's
//! `onnxruntime_library`, else `ORT_DYLIB_PATH` (scripts/setup.sh sets it to
//! the PyPI wheel's copy), else beside libtriton_face.so, else in Triton's
//! own onnxruntime backend folder (every NGC image has one), else an error
//! that lists every place tried.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use ort::ep::cuda::ConvAlgorithmSearch;
use ort::ep::ArenaExtendStrategy;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::builder::SessionBuilder;
use ort::session::Session;
use ort::value::TensorRef;

use super::blob::Blob;
use super::planned::Planned;
use super::settings::{ConvSearch, CudaOptions};
use crate::error::{Error, Result};

/// The oldest onnxruntime this build accepts (`ort`'s `api-17` feature).
pub const MIN_VERSION: &str = "1.17";

/// A folder where the library may be, and what that folder is.
#[derive(Clone, Debug)]
pub struct Place {
    pub folder: PathBuf,
    pub what: String,
}

/// The folders searched when neither the model nor ORT_DYLIB_PATH names a
/// library: set once, by the backend as Triton loads it.
static PLACES: OnceLock<Vec<Place>> = OnceLock::new();

/// Search `places`, in order, after the model parameter and ORT_DYLIB_PATH.
pub fn look_also_in(places: Vec<Place>) {
    let _ = PLACES.set(places);
}

/// Where the library comes from, in order of precedence.
pub fn library_path(configured: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = configured {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let places = PLACES.get().map_or(&[][..], Vec::as_slice);
    if let Some(found) = places.iter().find_map(|p| library_in(&p.folder)) {
        return Ok(found);
    }
    let tried: Vec<String> = places
        .iter()
        .map(|p| {
            format!(
                "{} ({})",
                p.folder.join("libonnxruntime.so*").display(),
                p.what
            )
        })
        .collect();
    Err(Error::unavailable(format!(
        "runtime onnxruntime: no library found; tried the model parameter \
         `onnxruntime_library` (not set), the environment variable ORT_DYLIB_PATH (not set){}{}: \
         put a libonnxruntime.so of version {MIN_VERSION} or newer in one of those places \
         (scripts/setup.sh installs one from the PyPI wheel `onnxruntime`), or use \
         `runtime: tract`",
        if tried.is_empty() { "" } else { ", " },
        tried.join(", ")
    )))
}

/// `libonnxruntime.so` in `folder`, else its newest `libonnxruntime.so.*`
/// (the PyPI wheel ships only a versioned name).
fn library_in(folder: &Path) -> Option<PathBuf> {
    let plain = folder.join("libonnxruntime.so");
    if plain.is_file() {
        return Some(plain);
    }
    std::fs::read_dir(folder)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| {
            let name = p.file_name().and_then(OsStr::to_str)?;
            let version = version_key(name.strip_prefix("libonnxruntime.so.")?);
            p.is_file().then_some((version, p))
        })
        .max()
        .map(|(_, p)| p)
}

/// "1.17.1" as numbers, so that 1.17 is newer than 1.9.
fn version_key(text: &str) -> Vec<u64> {
    text.split('.')
        .map(|part| part.parse().unwrap_or(0))
        .collect()
}

/// The library loaded and its build (version, commit), once loaded.
static LOADED: OnceLock<String> = OnceLock::new();

/// Which onnxruntime serves this process, for the load log.
pub fn loaded() -> Option<&'static str> {
    LOADED.get().map(String::as_str)
}

/// The version the library says it is (`OrtGetApiBase()->GetVersionString`).
fn version_of(library: &Path) -> Option<String> {
    use libc::RTLD_NOLOAD;
    use libloading::os::unix::{Library, RTLD_NOW};
    let library = as_ort_opens(library);
    // SAFETY: RTLD_NOLOAD only takes another reference to a library this
    // process already loaded (ort::init_from, which checked it has
    // OrtGetApiBase), never loads another; the symbol's signature is
    // onnxruntime's C API, and the text is copied before the handle drops.
    unsafe {
        let lib = Library::open(Some(library), RTLD_NOLOAD | RTLD_NOW).ok()?;
        let base: libloading::os::unix::Symbol<
            unsafe extern "C" fn() -> *const ort::sys::OrtApiBase,
        > = lib.get(b"OrtGetApiBase").ok()?;
        let base = base();
        if base.is_null() {
            return None;
        }
        let text = ((*base).GetVersionString)();
        (!text.is_null()).then(|| {
            std::ffi::CStr::from_ptr(text)
                .to_string_lossy()
                .into_owned()
        })
    }
}

/// The path ort opens for `library`: a relative one beside the executable
/// when there is such a file (as `ort::init_from` does), else as given.
fn as_ort_opens(library: &Path) -> PathBuf {
    if library.is_relative() {
        let beside = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join(library)));
        if let Some(path) = beside.filter(|p| p.exists()) {
            return path;
        }
    }
    library.to_path_buf()
}

/// The process-wide onnxruntime environment (ort allows one per process);
/// the first library loaded serves every model.
fn environment(library: &Path) -> Result<&'static ort::environment::Environment> {
    static ENV: OnceLock<std::result::Result<ort::environment::Environment, String>> =
        OnceLock::new();
    ENV.get_or_init(|| {
        let builder = ort::init_from(library).map_err(|e| e.to_string())?;
        let env = builder
            .with_name("triton-face")
            .build()
            .map_err(|e| e.to_string())?;
        let version = version_of(library).unwrap_or_else(|| "version unknown".into());
        let _ = LOADED.set(format!(
            "{version} from {}",
            as_ort_opens(library).display()
        ));
        Ok(env)
    })
    .as_ref()
    .map_err(|why| {
        Error::unavailable(format!(
            "runtime onnxruntime: cannot load {}: {why} (this backend needs onnxruntime \
             {MIN_VERSION} or newer: install it and point `onnxruntime_library` or \
             ORT_DYLIB_PATH at it, or use `runtime: tract`)",
            library.display()
        ))
    })
}

/// A GPU session's CUDA provider: the device and the options set for
/// serving (settings.rs `CudaOptions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaSetup {
    pub device: i32,
    pub options: CudaOptions,
}

/// Put the session on the CUDA device (behind TensorRT where asked), or
/// fail the load: a KIND_GPU instance that silently ran on the CPU would be
/// a lie about its capacity.
fn on_cuda(builder: SessionBuilder, cuda: &CudaSetup, library: &Path) -> Result<SessionBuilder> {
    let device = cuda.device;
    let mut providers = Vec::new();
    if let Some(cache) = &cuda.options.tensorrt_cache {
        std::fs::create_dir_all(cache).map_err(|e| {
            Error::unavailable(format!(
                "gpu_provider tensorrt: cannot make its engine cache {}: {e}",
                cache.display()
            ))
        })?;
        let tensorrt = ort::ep::TensorRT::default()
            .with_device_id(device)
            .with_engine_cache(true)
            .with_engine_cache_path(cache.display())
            .with_timing_cache(true)
            .with_timing_cache_path(cache.display());
        providers.push(tensorrt.build().error_on_failure());
    }
    providers.push(cuda_provider(cuda).build().error_on_failure());
    builder.with_execution_providers(providers).map_err(|e| {
        let wanted = match cuda.options.tensorrt_cache {
            Some(_) => {
                "TensorRT (gpu_provider tensorrt: it needs TensorRT 10's libnvinfer and \
                        the build's libonnxruntime_providers_tensorrt.so; the offline bundle \
                        carries neither, docs/gpu.md) and CUDA"
            }
            None => "CUDA",
        };
        Error::unavailable(format!(
            "KIND_GPU: onnxruntime {} cannot run on {wanted} device {device}: {e} (a GPU \
             instance needs a CUDA build of onnxruntime, such as the onnxruntime-gpu \
             wheel's or the tritonserver image's backends/onnxruntime/libonnxruntime.so; \
             or use KIND_CPU)",
            library.display()
        ))
    })
}

/// The CUDA provider with the options set for serving.
fn cuda_provider(cuda: &CudaSetup) -> ort::ep::CUDA {
    let options = &cuda.options;
    let search = match options.conv_search {
        ConvSearch::Exhaustive => ConvAlgorithmSearch::Exhaustive,
        ConvSearch::Heuristic => ConvAlgorithmSearch::Heuristic,
        ConvSearch::Default => ConvAlgorithmSearch::Default,
    };
    let arena = match options.arena_same_as_requested {
        true => ArenaExtendStrategy::SameAsRequested,
        false => ArenaExtendStrategy::NextPowerOfTwo,
    };
    let ep = ort::ep::CUDA::default()
        .with_device_id(cuda.device)
        .with_conv_algorithm_search(search)
        .with_arena_extend_strategy(arena);
    match options.memory_limit {
        Some(limit) => ep.with_memory_limit(limit),
        None => ep,
    }
}

/// How a model's sessions are made: full graph optimization, sequential,
/// `threads` intra-op threads (Triton instances give the parallelism).
struct Maker {
    what: String,
    library: PathBuf,
    threads: usize,
    cuda: Option<CudaSetup>,
}

impl Maker {
    fn session(&self, model: &[u8]) -> Result<Session> {
        let env = environment(&self.library)?;
        let fail = |e: String| Error::unavailable(format!("{}: onnxruntime: {e}", self.what));
        let mut builder = Session::builder(env).map_err(|e| fail(e.to_string()))?;
        if let Some(cuda) = &self.cuda {
            builder = on_cuda(builder, cuda, &self.library)?;
        }
        builder
            .with_optimization_level(GraphOptimizationLevel::All)
            .map_err(|e| fail(e.to_string()))?
            .with_intra_threads(self.threads)
            .map_err(|e| fail(e.to_string()))?
            .with_inter_threads(1)
            .map_err(|e| fail(e.to_string()))?
            .with_parallel_execution(false)
            .map_err(|e| fail(e.to_string()))?
            .commit_from_memory(model)
            .map_err(|e| fail(e.to_string()))
    }
}

/// One model as onnxruntime sessions: one that takes any shape, or after
/// `plan` one per planned input shape (planned.rs), each run at its own.
pub struct OrtNet {
    maker: Maker,
    /// Kept until `plan` makes the planned sessions from it.
    model: Option<Vec<u8>>,
    /// Takes any shape; `None` once planned. `Session::run` needs `&mut`.
    any: Option<Mutex<Session>>,
    planned: Vec<Planned>,
    /// Runs asked at a shape no session was planned for (refused): a bug
    /// the tests look for, since a refused run of several is retried item
    /// by item and still answers.
    refused: AtomicU64,
}

impl OrtNet {
    /// `keep`: the model's bytes are kept for `plan`.
    pub fn load(
        what: &str,
        model: &[u8],
        library: &Path,
        threads: usize,
        cuda: Option<CudaSetup>,
        keep: bool,
    ) -> Result<Self> {
        let maker = Maker {
            what: what.to_string(),
            library: library.to_path_buf(),
            threads,
            cuda,
        };
        let session = maker.session(model)?;
        Ok(OrtNet {
            maker,
            model: keep.then(|| model.to_vec()),
            any: Some(Mutex::new(session)),
            planned: Vec::new(),
            refused: AtomicU64::new(0),
        })
    }

    /// A session of its own for each of `shapes`, each warmed, in place of
    /// the one that takes any shape: from now on a run at another shape is
    /// refused.
    pub(super) fn plan(&mut self, shapes: &[Vec<usize>]) -> Result<()> {
        let model = (self.model.take())
            .ok_or_else(|| Error::internal("a model planned twice, or loaded without its bytes"))?;
        let device = self.maker.cuda.as_ref().map(|c| c.device);
        self.planned = (shapes.iter())
            .map(|shape| {
                let session = self.maker.session(&model)?;
                Planned::new(&self.maker.what, session, shape, device)
            })
            .collect::<Result<_>>()?;
        self.any = None;
        Ok(())
    }

    /// Each planned shape and the runs made at it (the load's warm-up
    /// among them); the runs refused.
    pub(super) fn planned_runs(&self) -> (Vec<(Vec<usize>, u64)>, u64) {
        let runs = (self.planned.iter())
            .map(|p| (p.shape.clone(), p.runs()))
            .collect();
        (runs, self.refused.load(Ordering::Relaxed))
    }

    /// For the log as the model unloads: how its runs fell on the planned
    /// sizes, which is what `run_sizes` is tuned by.
    fn describe_runs(&self) -> String {
        let (runs, refused) = self.planned_runs();
        let sizes: Vec<String> = (runs.iter())
            .map(|(shape, n)| format!("{}: {n}", shape.first().copied().unwrap_or(0)))
            .collect();
        let refused = match refused {
            0 => String::new(),
            n => format!(", {n} refused at a shape not planned"),
        };
        sizes.join(", ") + &refused
    }

    /// Run on one f32 input: at its planned session, else on the session
    /// that takes any shape (onnxruntime reads the input where it lies and
    /// each output is copied out once).
    pub(super) fn run(&self, input: &Blob) -> Result<Vec<Blob>> {
        let Some(any) = &self.any else {
            return match self.planned.iter().find(|p| p.shape == input.shape) {
                Some(planned) => planned.run(input),
                None => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    Err(Error::internal(format!(
                        "{}: no session planned for input shape {:?} (planned: {:?})",
                        self.maker.what,
                        input.shape,
                        self.planned.iter().map(|p| &p.shape).collect::<Vec<_>>()
                    )))
                }
            };
        };
        let fail = |e: ort::Error| Error::internal(format!("onnxruntime inference failed: {e}"));
        let shape: Vec<i64> = input.shape.iter().map(|&d| d as i64).collect();
        let value = TensorRef::from_array_view((shape, input.data.as_slice())).map_err(fail)?;
        let mut session = any.lock().unwrap_or_else(|e| e.into_inner());
        let outputs = session.run(ort::inputs![value]).map_err(fail)?;
        outputs
            .iter()
            .map(|(_, value)| {
                let (shape, data) = value.try_extract_tensor::<f32>().map_err(fail)?;
                Ok(Blob {
                    shape: shape.iter().map(|&d| d.max(0) as usize).collect(),
                    data: data.to_vec(),
                })
            })
            .collect()
    }
}

impl Drop for OrtNet {
    fn drop(&mut self) {
        if !self.planned.is_empty() {
            log::info!(
                "{}: runs per planned run size (each with one at load): {}",
                self.maker.what,
                self.describe_runs()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library scripts/setup.sh installs (the PyPI wheel's, CPU only).
    fn library() -> PathBuf {
        library_path(None).unwrap_or_else(|e| {
            panic!("{e}: run the tests through scripts/test.sh, which sources assets/env.sh")
        })
    }

    #[test]
    fn a_gpu_session_without_cuda_fails_clearly() {
        let library = library();
        let cuda = CudaSetup {
            device: 0,
            options: CudaOptions::default(),
        };
        let err = OrtNet::load(
            "embedder_model",
            b"not used",
            &library,
            1,
            Some(cuda),
            false,
        )
        .err()
        .expect("the CPU build of onnxruntime has no CUDA provider");
        let text = err.to_string();
        assert!(
            text.contains("KIND_GPU") && text.contains("CUDA device 0"),
            "{text}"
        );
        assert!(text.contains(&library.display().to_string()), "{text}");
    }

    #[test]
    fn tensorrt_without_its_libraries_fails_clearly() {
        let library = library();
        let cache = tempfile::tempdir().unwrap();
        let cuda = CudaSetup {
            device: 0,
            options: CudaOptions {
                tensorrt_cache: Some(cache.path().join("engines")),
                ..CudaOptions::default()
            },
        };
        let err = OrtNet::load(
            "detector_model",
            b"not used",
            &library,
            1,
            Some(cuda),
            false,
        )
        .err()
        .expect("the CPU build of onnxruntime has no TensorRT provider");
        let text = err.to_string();
        assert!(
            text.contains("KIND_GPU") && text.contains("TensorRT"),
            "{text}"
        );
        assert!(text.contains("gpu_provider tensorrt"), "{text}");
    }

    #[test]
    fn a_folder_gives_its_plain_name_else_its_newest_version() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(library_in(dir.path()), None);
        for name in [
            "libonnxruntime.so.1.9.0",
            "libonnxruntime.so.1.17.1",
            "other.so",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let newest = library_in(dir.path()).unwrap();
        assert_eq!(newest, dir.path().join("libonnxruntime.so.1.17.1"));
        std::fs::write(dir.path().join("libonnxruntime.so"), b"").unwrap();
        let plain = library_in(dir.path()).unwrap();
        assert_eq!(plain, dir.path().join("libonnxruntime.so"));
    }
}
