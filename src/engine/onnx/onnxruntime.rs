//! The onnxruntime runtime of the ONNX engine, through the `ort` crate with
//! the library loaded at run time (nothing is downloaded at build or run
//! time). The library is found once per process: the model's
//! `onnxruntime_library`, else `ORT_DYLIB_PATH` (scripts/setup.sh sets it to
//! the PyPI wheel's copy), else beside libtriton_face.so, else in Triton's
//! own onnxruntime backend folder (every NGC image has one), else an error
//! that lists every place tried.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use ort::session::builder::GraphOptimizationLevel;
use ort::session::builder::SessionBuilder;
use ort::session::Session;
use ort::value::TensorRef;

use super::blob::Blob;
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

/// Put the session on CUDA device `device`, or fail the load: a KIND_GPU
/// instance that silently ran on the CPU would be a lie about its capacity.
fn on_cuda(builder: SessionBuilder, device: i32, library: &Path) -> Result<SessionBuilder> {
    let cuda = ort::ep::CUDA::default()
        .with_device_id(device)
        .build()
        .error_on_failure();
    builder.with_execution_providers([cuda]).map_err(|e| {
        Error::unavailable(format!(
            "KIND_GPU: onnxruntime {} cannot run on CUDA device {device}: {e} (a GPU instance \
             needs a CUDA build of onnxruntime, such as the onnxruntime-gpu wheel's or the \
             tritonserver image's backends/onnxruntime/libonnxruntime.so; or use KIND_CPU)",
            library.display()
        ))
    })
}

/// One model as an onnxruntime session: full graph optimization, sequential,
/// `threads` intra-op threads (Triton instances give the parallelism).
pub struct OrtNet {
    // `Session::run` needs `&mut`; the engine runs on one thread at a time.
    session: Mutex<Session>,
}

impl OrtNet {
    pub fn load(
        what: &str,
        model: &[u8],
        library: &Path,
        threads: usize,
        cuda_device: Option<i32>,
    ) -> Result<Self> {
        let env = environment(library)?;
        let fail = |e: String| Error::unavailable(format!("{what}: onnxruntime: {e}"));
        let mut builder = Session::builder(env).map_err(|e| fail(e.to_string()))?;
        if let Some(device) = cuda_device {
            builder = on_cuda(builder, device, library)?;
        }
        let session = builder
            .with_optimization_level(GraphOptimizationLevel::All)
            .map_err(|e| fail(e.to_string()))?
            .with_intra_threads(threads)
            .map_err(|e| fail(e.to_string()))?
            .with_inter_threads(1)
            .map_err(|e| fail(e.to_string()))?
            .with_parallel_execution(false)
            .map_err(|e| fail(e.to_string()))?
            .commit_from_memory(model)
            .map_err(|e| fail(e.to_string()))?;
        Ok(OrtNet {
            session: Mutex::new(session),
        })
    }

    /// Run on one f32 input; onnxruntime reads the input where it lies and
    /// each output is copied out once.
    pub(super) fn run(&self, input: &Blob) -> Result<Vec<Blob>> {
        let fail = |e: ort::Error| Error::internal(format!("onnxruntime inference failed: {e}"));
        let shape: Vec<i64> = input.shape.iter().map(|&d| d as i64).collect();
        let value = TensorRef::from_array_view((shape, input.data.as_slice())).map_err(fail)?;
        let mut session = self.session.lock().unwrap_or_else(|e| e.into_inner());
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
        let err = OrtNet::load("embedder_model", b"not used", &library, 1, Some(0))
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
