//! Every model parameter declared once: name, type, default, meaning and how
//! its value is applied. Parsing (`config.rs`), the load-time log line and
//! the parameter tables of docs/parameters.md all come from `PARAMETERS`.

use std::path::Path;
use std::str::FromStr;

use crate::backend::access::rate::MAX_RATE;
use crate::backend::settings::{EngineKind, Settings};
use crate::engine::dlib::{DetectorKind, MAX_UPSAMPLE};
use crate::engine::onnx::detect::{Placement, FAMILY_NAMES};
use crate::engine::onnx::{ConvSearch, Runtime};
use crate::error::{Error, Result};
use crate::gallery::store::StoreKind;
use crate::pipeline::image::PixelFormat;
use crate::sequence::{Cadence, Limits, TrackBy, MAX_CADENCE};

/// What a value must look like; shown in docs/parameters.md's type column and
/// in the error for a bad value, so both always say the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One of these words, in any case.
    Choice(&'static [&'static str]),
    PositiveInteger,
    /// Positive integers separated by commas.
    PositiveIntegers,
    UnsignedInteger,
    PositiveNumber,
    Number,
    /// One number, or three separated by commas.
    Numbers,
    /// Five points: ten numbers `x,y,...` separated by commas.
    Points,
    Bool,
    /// Relative to a folder named in the meaning, or absolute.
    Path,
    /// `WIDTHxHEIGHT`.
    Size,
    /// `MAJOR.MINOR`.
    Version,
    /// An environment variable's name: letters, digits, `_`.
    EnvName,
    /// Non-empty text, at most 128 characters, no control characters.
    Text,
}

impl Kind {
    /// `quote` wraps the words of a choice: "`" for docs/parameters.md, "\"" for errors.
    pub fn describe(&self, quote: &str) -> String {
        match self {
            Kind::Choice(words) => {
                let words: Vec<_> = words.iter().map(|w| format!("{quote}{w}{quote}")).collect();
                words.join(" or ")
            }
            Kind::PositiveInteger => "positive integer".into(),
            Kind::PositiveIntegers => "positive integers separated by commas".into(),
            Kind::UnsignedInteger => "unsigned integer".into(),
            Kind::PositiveNumber => "positive number".into(),
            Kind::Number => "number".into(),
            Kind::Numbers => "number, or three separated by commas".into(),
            Kind::Points => "ten numbers separated by commas".into(),
            Kind::Bool => format!("{quote}true{quote} or {quote}false{quote}"),
            Kind::Path => "path".into(),
            Kind::Size => "WIDTHxHEIGHT".into(),
            Kind::Version => "MAJOR.MINOR".into(),
            Kind::EnvName => "environment variable name".into(),
            Kind::Text => "text".into(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Default {
    /// Applied at every load, exactly like a configured value.
    Value(&'static str),
    /// Nothing is applied; the text (markdown) says what holds instead.
    Unset(&'static str),
}

/// docs/parameters.md has one table for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    General,
    Onnx,
}

/// Settings under construction, and what relative paths are relative to.
pub(crate) struct Draft<'a> {
    pub settings: Settings,
    pub limits: Limits,
    pub cadence: Cadence,
    pub model_dir: &'a Path,
    pub version_dir: &'a Path,
}

/// Stores a trimmed value; `None` when it is not of the parameter's kind.
type Apply = fn(&mut Draft<'_>, &str) -> Option<()>;

pub struct Parameter {
    pub name: &'static str,
    pub kind: Kind,
    pub default: Default,
    /// One sentence (markdown), docs/parameters.md's meaning column.
    pub meaning: &'static str,
    pub section: Section,
    apply: Apply,
}

impl Parameter {
    /// Apply `value` (from the config or the default), or fail naming the parameter.
    pub(crate) fn apply(&self, draft: &mut Draft<'_>, value: &str) -> Result<()> {
        (self.apply)(draft, value.trim()).ok_or_else(|| {
            Error::invalid(format!(
                "model parameter `{}` = {value:?} is invalid: expected {}",
                self.name,
                self.kind.describe("\"")
            ))
        })
    }
}

/// The parameter called `name`, or an error listing the known ones.
pub fn find(name: &str) -> Result<&'static Parameter> {
    PARAMETERS.iter().find(|p| p.name == name).ok_or_else(|| {
        let known: Vec<_> = PARAMETERS.iter().map(|p| p.name).collect();
        Error::invalid(format!(
            "unknown model parameter `{name}`; known parameters: {}",
            known.join(", ")
        ))
    })
}

fn positive<T: FromStr + PartialOrd + std::default::Default>(v: &str) -> Option<T> {
    v.parse().ok().filter(|n| *n > T::default())
}

/// `max_engine_batch`'s largest value: the runs' inputs (a 320x240 detector
/// input is 0.9 MB) and, on a GPU, the warm-up at load stay bounded.
const MAX_ENGINE_BATCH: usize = 1024;

/// `decode_threads`' largest value (threads started per Execute).
const MAX_DECODE_THREADS: usize = 64;

/// `distance_decimals`' largest value: an f32 distance holds about 7 digits.
const MAX_DECIMALS: u32 = 6;

/// `detect_every`, `reidentify_every`: 1 to `MAX_CADENCE`.
fn cadence(v: &str) -> Option<u32> {
    positive(v).filter(|n| *n <= MAX_CADENCE)
}

fn unsigned<T: FromStr>(v: &str) -> Option<T> {
    // FromStr of unsigned types accepts "+5" and refuses "-5".
    v.parse().ok()
}

fn number(v: &str) -> Option<f32> {
    v.parse::<f32>().ok().filter(|n| n.is_finite())
}

fn flag(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

/// A non-empty path, joined to `dir` (an absolute path replaces it).
fn path(dir: &Path, v: &str) -> Option<std::path::PathBuf> {
    (!v.is_empty()).then(|| dir.join(v))
}

/// `FACE_GALLERY_DSN`: what a shell would accept as a variable name.
fn env_name(v: &str) -> Option<String> {
    let mut chars = v.chars();
    let first = chars.next()?;
    let ok = (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then(|| v.to_string())
}

fn text(v: &str) -> Option<String> {
    let ok = !v.is_empty() && v.chars().count() <= 128 && !v.chars().any(char::is_control);
    ok.then(|| v.to_string())
}

/// "127.5" -> [127.5; 3], "104,117,123" -> [104, 117, 123].
fn means(v: &str) -> Option<[f32; 3]> {
    let values: Vec<f32> = v
        .split(',')
        .map(|p| number(p.trim()))
        .collect::<Option<_>>()?;
    match values.as_slice() {
        [one] => Some([*one; 3]),
        [a, b, c] => Some([*a, *b, *c]),
        _ => None,
    }
}

/// "x1,y1,...,x5,y5" -> five points.
fn points(v: &str) -> Option<[[f32; 2]; 5]> {
    let values: Vec<f32> = v
        .split(',')
        .map(|p| number(p.trim()))
        .collect::<Option<_>>()?;
    let mut out = [[0.0; 2]; 5];
    (values.len() == 10).then(|| {
        for (point, xy) in out.iter_mut().zip(values.chunks(2)) {
            *point = [xy[0], xy[1]];
        }
        out
    })
}

/// "320x240" -> (320, 240).
fn size(v: &str) -> Option<(usize, usize)> {
    let (w, h) = v.split_once(['x', 'X'])?;
    Some((positive(w)?, positive(h)?))
}

fn runtime(v: &str) -> Option<Runtime> {
    match v.to_ascii_lowercase().as_str() {
        "onnxruntime" => Some(Runtime::OnnxRuntime),
        "tract" => Some(Runtime::Tract),
        _ => None,
    }
}

fn engine(v: &str) -> Option<EngineKind> {
    match v.to_ascii_lowercase().as_str() {
        "dlib" => Some(EngineKind::Dlib),
        "onnx" => Some(EngineKind::Onnx),
        _ => None,
    }
}

/// "RGB" -> true, "BGR" -> false.
fn rgb(v: &str) -> Option<bool> {
    PixelFormat::parse(v).map(|f| f == PixelFormat::Rgb)
}

const RGB_BGR: Kind = Kind::Choice(&["RGB", "BGR"]);

/// In docs/parameters.md's order. Defaults are applied through `apply` at
/// every load, so each is stated here only.
pub static PARAMETERS: &[Parameter] = &[
    Parameter {
        name: "engine",
        kind: Kind::Choice(&["dlib", "onnx"]),
        default: Default::Value("dlib"),
        meaning: "face engine (see [ONNX engine](#onnx-engine))",
        section: Section::General,
        apply: |d, v| engine(v).map(|e| d.settings.engine = e),
    },
    Parameter {
        name: "detector",
        kind: Kind::Choice(&["hog", "cnn"]),
        default: Default::Value("hog"),
        meaning:
            "dlib detector: `hog` (fast, frontal) or `cnn` (dlib MMOD, slower on CPU, more poses)",
        section: Section::General,
        apply: |d, v| DetectorKind::parse(v).map(|k| d.settings.dlib.detector = k),
    },
    Parameter {
        name: "cnn_min_side",
        kind: Kind::UnsignedInteger,
        default: Default::Value("32"),
        meaning: "dlib CNN detector: an image with a side shorter than this gets no faces without \
                  running the network; `0` runs it on every image",
        section: Section::General,
        apply: |d, v| unsigned(v).map(|n| d.settings.dlib.cnn_min_side = n),
    },
    Parameter {
        name: "upsample",
        kind: Kind::UnsignedInteger,
        default: Default::Value("0"),
        meaning: "dlib detector (HOG and CNN): double the image this many times before \
                  detection, 0 to 3: finds faces down to half, a quarter... the size; each step \
                  quadruples the detector's work",
        section: Section::General,
        apply: |d, v| {
            unsigned(v)
                .filter(|n| *n <= MAX_UPSAMPLE)
                .map(|n| d.settings.dlib.upsample = n)
        },
    },
    Parameter {
        name: "smallest_face",
        kind: Kind::UnsignedInteger,
        default: Default::Value("0"),
        meaning: "dlib HOG detector: the smallest face width (pixels, 20 to 800) it looks for; \
                  the image is resized by 80 / this before detection (HOG's window is 80 px): \
                  on a 640x480 frame 50 takes 2.4x the time of the image as it is, 120 0.5x \
                  (benches/engine.rs); `0`: the image as it is; not with `upsample` or the CNN",
        section: Section::General,
        apply: |d, v| unsigned(v).map(|n| d.settings.dlib.smallest_face = n),
    },
    Parameter {
        name: "blas_threads",
        kind: Kind::PositiveInteger,
        default: Default::Value("1"),
        meaning: "dlib engine: OpenBLAS threads for the CPU networks, for the whole process (the \
                  first dlib model loaded sets it); Triton instances give the parallelism",
        section: Section::General,
        apply: |d, v| positive(v).map(|n| d.settings.dlib.blas_threads = n),
    },
    Parameter {
        name: "weights_dir",
        kind: Kind::Path,
        default: Default::Value("weights"),
        meaning: "folder with the dlib `.dat` files, relative to the model folder",
        section: Section::General,
        apply: |d, v| path(d.model_dir, v).map(|p| d.settings.weights_dir = p),
    },
    Parameter {
        name: "gallery_dir",
        kind: Kind::Path,
        default: Default::Value("gallery"),
        meaning: "gallery folder, relative to the model folder",
        section: Section::General,
        apply: |d, v| path(d.model_dir, v).map(|p| d.settings.gallery_dir = p),
    },
    Parameter {
        name: "gallery_key_file",
        kind: Kind::Path,
        default: Default::Unset(
            "none: any client may recognize, search, `ENROLL`, `FORGET` and `LIST` (the load \
             logs a warning)",
        ),
        meaning: "file of keys, one per line (`label:roles:key`, roles from `recognize`, \
                  `search`, `manage`; `label:key` holds every role), relative to the model \
                  folder, mode 600 or 400: every request then needs the request parameter \
                  `gallery_key` with a key that holds the roles it uses (docs/gallery.md)",
        section: Section::General,
        apply: |d, v| path(d.model_dir, v).map(|p| d.settings.gallery_key_file = Some(p)),
    },
    Parameter {
        name: "key_rate",
        kind: Kind::PositiveNumber,
        default: Default::Unset("none: no limit"),
        meaning: "with `gallery_key_file`: tokens per second each key label may spend, over \
                  all the models on the store (`0.5`: one every 2 s); a request costs one per \
                  image, frame or `EMBEDDING` row, times its `top_k`; more are refused \
                  `UNAVAILABLE` with when to retry (docs/gallery.md)",
        section: Section::General,
        apply: |d, v| {
            let rate = positive::<f64>(v).filter(|r| *r <= MAX_RATE && *r >= 1e-6)?;
            d.settings.key_rate = Some(rate);
            Some(())
        },
    },
    Parameter {
        name: "key_burst",
        kind: Kind::PositiveInteger,
        default: Default::Unset("one second's worth: `key_rate` rounded up"),
        meaning: "with `key_rate`: tokens a key label may spend at once before its rate holds; \
                  a request that costs more is refused",
        section: Section::General,
        apply: |d, v| {
            let burst = positive::<u32>(v).filter(|b| f64::from(*b) <= MAX_RATE)?;
            d.settings.key_burst = Some(burst);
            Some(())
        },
    },
    Parameter {
        name: "distance_decimals",
        kind: Kind::UnsignedInteger,
        default: Default::Value("2"),
        meaning: "decimals of every distance in answers (names, `top_k` candidates, \
                  verification, sequence summaries), at most 6, and of a `recognize` key's \
                  `match_threshold`; it blurs what an answer tells of a stored face, but does \
                  not stop a `search` key from rebuilding one (docs/gallery.md)",
        section: Section::General,
        apply: |d, v| {
            let decimals = unsigned::<u32>(v).filter(|n| *n <= MAX_DECIMALS)?;
            d.settings.distance_decimals = decimals;
            Some(())
        },
    },
    Parameter {
        name: "gallery_store",
        kind: Kind::Choice(&["sqlite", "postgres"]),
        default: Default::Value("sqlite"),
        meaning: "where enrolled faces are kept: `sqlite` (`gallery.sqlite3` in the gallery \
                  folder) or `postgres` (a database several servers share)",
        section: Section::General,
        apply: |d, v| StoreKind::parse(v).map(|k| d.settings.gallery_store = k),
    },
    Parameter {
        name: "gallery_dsn_env",
        kind: Kind::EnvName,
        default: Default::Value("FACE_GALLERY_DSN"),
        meaning: "`postgres`: the environment variable holding the database's DSN \
                  (`postgresql://user:password@host:5432/db`); never the DSN itself",
        section: Section::General,
        apply: |d, v| env_name(v).map(|n| d.settings.postgres.dsn_env = n),
    },
    Parameter {
        name: "gallery_name",
        kind: Kind::Text,
        default: Default::Unset("the model's name"),
        meaning: "`postgres`: models with the same gallery name share their people",
        section: Section::General,
        apply: |d, v| text(v).map(|n| d.settings.postgres.gallery_name = Some(n)),
    },
    Parameter {
        name: "gallery_poll_ms",
        kind: Kind::PositiveInteger,
        default: Default::Value("1000"),
        meaning: "read the changes other models on the store (and, on `postgres`, other \
                  servers) make at least this often (`postgres`: even without a notification)",
        section: Section::General,
        apply: |d, v| {
            positive(v).map(|ms| d.settings.postgres.poll = std::time::Duration::from_millis(ms))
        },
    },
    Parameter {
        name: "pixel_format",
        kind: RGB_BGR,
        default: Default::Value("RGB"),
        meaning: "channel order of `IMAGE`",
        section: Section::General,
        apply: |d, v| PixelFormat::parse(v).map(|f| d.settings.pixel_format = f),
    },
    Parameter {
        name: "match_threshold",
        kind: Kind::PositiveNumber,
        default: Default::Unset("the engine's: `0.6` (dlib), `0.5` (onnx)"),
        meaning: "same-person distance: Euclidean (dlib), 1 − cosine (onnx)",
        section: Section::General,
        apply: |d, v| positive(v).map(|t| d.settings.match_threshold = Some(t)),
    },
    Parameter {
        name: "max_image_pixels",
        kind: Kind::PositiveInteger,
        default: Default::Value("40000000"),
        meaning: "larger images are refused (checked from the header before decoding)",
        section: Section::General,
        apply: |d, v| positive(v).map(|n| d.settings.max_image_pixels = n),
    },
    Parameter {
        name: "max_faces_per_image",
        kind: Kind::PositiveInteger,
        default: Default::Value("64"),
        meaning: "more faces in one image is an error for that request",
        section: Section::General,
        apply: |d, v| positive(v).map(|n| d.settings.max_faces_per_image = n),
    },
    Parameter {
        name: "min_face_size",
        kind: Kind::UnsignedInteger,
        default: Default::Value("0"),
        meaning: "faces whose box is smaller on its shorter side (pixels) are dropped before \
                  they are embedded; the request parameter of the same name overrides it",
        section: Section::General,
        apply: |d, v| unsigned::<u32>(v).map(|n| d.settings.min_face_size = n),
    },
    Parameter {
        name: "batch_threads",
        kind: Kind::PositiveInteger,
        default: Default::Value("1"),
        meaning: "threads one Execute spreads the images of its batch over, each with its own \
                  copy of the engine (memory: one engine per thread per instance; an instance \
                  group of count N runs N x batch_threads of them); at most max_batch_size \
                  (more would never get work)",
        section: Section::General,
        apply: |d, v| positive(v).map(|n| d.settings.batch_threads = n),
    },
    Parameter {
        name: "decode_threads",
        kind: Kind::PositiveInteger,
        default: Default::Unset(
            "`batch_threads` on `KIND_CPU` (the cores its engines are about to use); `4` on \
             `KIND_GPU`",
        ),
        meaning: "threads one Execute decodes its `ENCODED` images on, together, before the \
                  engines run; on a GPU also the threads a model run's items are resized and \
                  normalised on (at most 64)",
        section: Section::General,
        apply: |d, v| {
            let n = positive(v).filter(|n| *n <= MAX_DECODE_THREADS);
            n.map(|n| d.settings.decode_threads = Some(n))
        },
    },
    Parameter {
        name: "max_gallery_size",
        kind: Kind::PositiveInteger,
        default: Default::Value("1000000"),
        meaning: "enrollments beyond it are refused (memory per person: about 1.35 KiB \
                  with a 512-d embedder, 0.9 KiB with dlib's 128-d; see docs/gallery.md)",
        section: Section::General,
        apply: |d, v| positive(v).map(|n| d.settings.max_gallery_size = n),
    },
    Parameter {
        name: "retention_days",
        kind: Kind::PositiveNumber,
        default: Default::Unset("kept until `FORGET`"),
        meaning: "enrollments older than this many days (a decimal number) are forgotten on \
                  their own: at load and at least once a minute, erased like a `FORGET` and \
                  recorded as `expire` changes (docs/gallery.md)",
        section: Section::General,
        apply: |d, v| {
            positive::<f64>(v)
                .filter(|days| days.is_finite())
                .map(|days| d.settings.retention_days = Some(days))
        },
    },
    Parameter {
        name: "return_embeddings",
        kind: Kind::Bool,
        default: Default::Value("false"),
        meaning: "add each face's embedding to the JSON",
        section: Section::General,
        apply: |d, v| flag(v).map(|b| d.settings.return_embeddings = b),
    },
    Parameter {
        name: "max_sequences",
        kind: Kind::PositiveInteger,
        default: Default::Value("1024"),
        meaning: "sequence models: live sequences; a START beyond it is `UNAVAILABLE`",
        section: Section::General,
        apply: |d, v| positive(v).map(|n| d.limits.max_sequences = n),
    },
    Parameter {
        name: "max_frames_per_sequence",
        kind: Kind::PositiveInteger,
        default: Default::Value("1000"),
        meaning: "sequence models: frames a summary keeps",
        section: Section::General,
        apply: |d, v| positive(v).map(|n| d.limits.max_frames = n),
    },
    Parameter {
        name: "track_retire_frames",
        kind: Kind::PositiveInteger,
        default: Default::Value("300"),
        meaning: "sequence models: a track not seen for this many frames is retired (30 s at \
                  10 fps): no face is compared with it again, its summary entry is kept; a face \
                  back after longer starts a new track, named by the gallery again",
        section: Section::General,
        apply: |d, v| positive(v).map(|n| d.limits.retire_after = n),
    },
    Parameter {
        name: "max_tracks_per_summary",
        kind: Kind::PositiveInteger,
        default: Default::Value("1000"),
        meaning: "sequence models: tracks a summary lists, live and retired, in track order; \
                  the rest are counted (`people_not_listed`)",
        section: Section::General,
        apply: |d, v| positive(v).map(|n| d.limits.max_tracks = n),
    },
    Parameter {
        name: "track_shadow_rounds",
        kind: Kind::UnsignedInteger,
        default: Default::Value("2"),
        meaning: "sequence models with `detect_every` above 1 and `track_by: correlation`: \
                  detection rounds in a row the detector may miss a face its tracker still holds \
                  (sure, inside the frame) before the track ends; meanwhile the face is answered from the tracker \
                  (`source` `tracked`) with its track's name; `0`: a missed face ends its track",
        section: Section::General,
        apply: |d, v| unsigned(v).map(|n| d.limits.shadow_rounds = n),
    },
    Parameter {
        name: "detect_every",
        kind: Kind::PositiveInteger,
        default: Default::Value("1"),
        meaning: "sequence models: the detector runs on every this many frames of a sequence; \
                  a tracker carries each face between (at most 1000; the request parameter of \
                  the same name sets it for one sequence)",
        section: Section::General,
        apply: |d, v| cadence(v).map(|n| d.cadence.detect_every = n),
    },
    Parameter {
        name: "track_by",
        kind: Kind::Choice(&["correlation", "points"]),
        default: Default::Value("correlation"),
        meaning: "sequence models with `detect_every` above 1: what carries a face between \
                  detections: dlib's `correlation` tracker, or `points`: the engine's five \
                  points at the face's last box place its next box as the box sat around them \
                  at its last detection (a landmark run a face, no correlation filter), the \
                  detector running out of turn where a face may be partial or gone; both \
                  shipped sequence models ask `points` \
                  ([sequences](sequences.md#following-faces-between-detections))",
        section: Section::General,
        apply: |d, v| {
            d.cadence.track_by = match v.to_ascii_lowercase().as_str() {
                "correlation" => TrackBy::Correlation,
                "points" => TrackBy::Points,
                _ => return None,
            };
            Some(())
        },
    },
    Parameter {
        name: "reidentify_every",
        kind: Kind::PositiveInteger,
        default: Default::Value("1"),
        meaning: "sequence models: a followed face is embedded and matched again at least \
                  every this many frames (sooner when new, unsettled, resized or touching \
                  another; at most 1000; also a request parameter)",
        section: Section::General,
        apply: |d, v| cadence(v).map(|n| d.cadence.reidentify_every = n),
    },
    Parameter {
        name: "min_compute_capability",
        kind: Kind::Version,
        default: Default::Value("6.0"),
        meaning: "`KIND_GPU` instances refuse devices below it",
        section: Section::General,
        apply: |d, v| {
            v.parse()
                .ok()
                .map(|c| d.settings.min_compute_capability = c)
        },
    },
    Parameter {
        name: "detector_model",
        kind: Kind::Path,
        default: Default::Value("detector.onnx"),
        meaning: "face detector, relative to the version folder (`1/`)",
        section: Section::Onnx,
        apply: |d, v| path(d.version_dir, v).map(|p| d.settings.onnx.detector_model = p),
    },
    Parameter {
        name: "detector_family",
        kind: Kind::Choice(FAMILY_NAMES),
        default: Default::Value("auto"),
        meaning: "how the detector's outputs are read: `auto` (the family whose layout \
                  they are in; a load error lists what it saw otherwise), `ultraface`, \
                  `scrfd`, `retinaface`, `yunet`, `blazeface` or `yolo-face` \
                  ([the families](engines.md#detector-families)); each family brings its \
                  reference input size, resize, channels, mean, scale, threshold and NMS, \
                  which the parameters below override",
        section: Section::Onnx,
        apply: |d, v| {
            let v = v.to_ascii_lowercase();
            FAMILY_NAMES.contains(&v.as_str()).then(|| {
                d.settings.onnx.detector_family = (v != "auto").then_some(v);
            })
        },
    },
    Parameter {
        name: "detector_input_size",
        kind: Kind::Size,
        default: Default::Unset("the model's; where free, the family's (640x640, UltraFace 320x240)"),
        meaning: "detector input, for detectors with a free input size",
        section: Section::Onnx,
        apply: |d, v| size(v).map(|s| d.settings.onnx.detector.size = Some(s)),
    },
    Parameter {
        name: "detector_resize",
        kind: Kind::Choice(&["stretch", "letterbox", "letterbox-centre"]),
        default: Default::Unset("the family's"),
        meaning: "how a frame becomes the detector's input: `stretch` to it, or scaled whole \
                  and placed at its top left (`letterbox`) or in its middle \
                  (`letterbox-centre`), the rest filled; boxes and points come back in the \
                  frame's own pixels either way",
        section: Section::Onnx,
        apply: |d, v| Placement::parse(v).map(|p| d.settings.onnx.detector.placement = Some(p)),
    },
    Parameter {
        name: "detector_mean",
        kind: Kind::Numbers,
        default: Default::Unset("the family's"),
        meaning: "detector input = (pixel − mean) × scale; one mean, or three in the order of \
                  `detector_channels`",
        section: Section::Onnx,
        apply: |d, v| means(v).map(|m| d.settings.onnx.detector.mean = Some(m)),
    },
    Parameter {
        name: "detector_scale",
        kind: Kind::Number,
        default: Default::Unset("the family's"),
        meaning: "see `detector_mean`",
        section: Section::Onnx,
        apply: |d, v| number(v).map(|n| d.settings.onnx.detector.scale = Some(n)),
    },
    Parameter {
        name: "detector_channels",
        kind: RGB_BGR,
        default: Default::Unset("the family's"),
        meaning: "channel order the detector expects",
        section: Section::Onnx,
        apply: |d, v| rgb(v).map(|b| d.settings.onnx.detector.rgb = Some(b)),
    },
    Parameter {
        name: "detector_threshold",
        kind: Kind::PositiveNumber,
        default: Default::Unset("the family's"),
        meaning: "minimum face score",
        section: Section::Onnx,
        apply: |d, v| positive(v).map(|n| d.settings.onnx.detector.threshold = Some(n)),
    },
    Parameter {
        name: "nms_iou",
        kind: Kind::PositiveNumber,
        default: Default::Unset("the family's"),
        meaning: "non-maximum suppression overlap",
        section: Section::Onnx,
        apply: |d, v| positive(v).map(|n| d.settings.onnx.detector.nms_iou = Some(n)),
    },
    Parameter {
        name: "landmark_model",
        kind: Kind::Path,
        default: Default::Unset("none"),
        meaning: "68-point model (grey 64×64 crop of the box, /256): the faces' five points; \
                  required with `ultraface`, which gives none (the other families give their \
                  own)",
        section: Section::Onnx,
        apply: |d, v| path(d.version_dir, v).map(|p| d.settings.onnx.landmark_model = Some(p)),
    },
    Parameter {
        name: "embedder_model",
        kind: Kind::Path,
        default: Default::Value("embedder.onnx"),
        meaning: "face embedder: its input's size (112×112, 128×128, 160×160, ...) and layout \
                  (NCHW or NHWC) are read from the model, the face aligned to it; any N-d \
                  output",
        section: Section::Onnx,
        apply: |d, v| path(d.version_dir, v).map(|p| d.settings.onnx.embedder_model = p),
    },
    Parameter {
        name: "model_precision",
        kind: Kind::Choice(&["float", "int8"]),
        default: Default::Value("float"),
        meaning: "`int8`: each model file `X.onnx` replaced by its int8 copy `X.int8.onnx` \
                  beside it where there is one (scripts/quantize.py writes a copy only when it \
                  passes its check; at least one must exist); an int8 embedder or landmark model \
                  is another embedder to the gallery; onnxruntime only (docs/engines.md)",
        section: Section::Onnx,
        apply: |d, v| {
            d.settings.onnx.int8 = match v.to_ascii_lowercase().as_str() {
                "float" => false,
                "int8" => true,
                _ => return None,
            };
            Some(())
        },
    },
    Parameter {
        name: "embedder_normalize",
        kind: Kind::Choice(&["scale", "standardize"]),
        default: Default::Value("scale"),
        meaning: "`scale`: embedder input = (pixel − `embedder_mean`) × `embedder_scale`; \
                  `standardize`: each face by its own mean and standard deviation (FaceNet's \
                  prewhitening)",
        section: Section::Onnx,
        apply: |d, v| {
            let standardize = match v.to_ascii_lowercase().as_str() {
                "scale" => false,
                "standardize" => true,
                _ => return None,
            };
            d.settings.onnx.embedder.standardize = standardize;
            Some(())
        },
    },
    Parameter {
        name: "embedder_mean",
        kind: Kind::Numbers,
        default: Default::Value("127"),
        meaning: "as `detector_mean`, for the embedder",
        section: Section::Onnx,
        apply: |d, v| means(v).map(|m| d.settings.onnx.embedder.norm.mean = m),
    },
    Parameter {
        name: "embedder_scale",
        kind: Kind::Number,
        default: Default::Value("0.0078125"),
        meaning: "as `detector_scale`, for the embedder",
        section: Section::Onnx,
        apply: |d, v| number(v).map(|n| d.settings.onnx.embedder.norm.scale = n),
    },
    Parameter {
        name: "embedder_channels",
        kind: RGB_BGR,
        default: Default::Value("BGR"),
        meaning: "channel order the embedder expects",
        section: Section::Onnx,
        apply: |d, v| rgb(v).map(|b| d.settings.onnx.embedder.norm.rgb = b),
    },
    Parameter {
        name: "embedder_template",
        kind: Kind::Points,
        default: Default::Unset("ArcFace's"),
        meaning: "where the face's five points (eye on the image's left, eye on its right, \
                  nose tip, mouth corners left and right) go in the embedder's input, in its \
                  pixels: `x1,y1,...,x5,y5`; unset: ArcFace's 112×112 template scaled to the \
                  input. dlib's ResNet (scripts/dlib_onnx.py) needs its own; faces enrolled \
                  with another template are another embedder's to the gallery",
        section: Section::Onnx,
        apply: |d, v| points(v).map(|p| d.settings.onnx.embedder.template = Some(p)),
    },
    Parameter {
        name: "embedder_flip",
        kind: Kind::Bool,
        default: Default::Value("false"),
        meaning: "embed each face and its mirror image and sum the two before normalising \
                  (insightface's flip test: a little more accurate, twice the embedder's \
                  work); faces enrolled without it are another embedder's to the gallery",
        section: Section::Onnx,
        apply: |d, v| flag(v).map(|b| d.settings.onnx.embedder.flip = b),
    },
    Parameter {
        name: "zero_tiny_weights",
        kind: Kind::Bool,
        default: Default::Value("true"),
        meaning: "at load, set float weights smaller than 1e-10 in magnitude to 0 (same outputs; denormal \
                  weights make every multiply by them slow); `false` runs the model untouched",
        section: Section::Onnx,
        apply: |d, v| flag(v).map(|b| d.settings.onnx.hygiene.zero_tiny_weights = b),
    },
    Parameter {
        name: "rewrite_prelu",
        kind: Kind::Bool,
        default: Default::Value("true"),
        meaning: "onnxruntime: at load, compute each PRelu as `Relu(x) + Min(x, 0) * slope` \
                  (exact), or on the CPU after a convolution as two depthwise 1x1 convolutions \
                  (within one rounding per layer: embeddings within 1e-6; faster); `false` \
                  keeps the model's PRelu nodes. tract keeps them either way and runs them on \
                  the engine's own one-pass kernel",
        section: Section::Onnx,
        apply: |d, v| flag(v).map(|b| d.settings.onnx.hygiene.rewrite_prelu = b),
    },
    Parameter {
        name: "flush_denormals",
        kind: Kind::Bool,
        default: Default::Value("true"),
        meaning: "flush denormal floats to zero on the executing thread while the models run \
                  (same results here, several times faster on models with tiny weights); \
                  `false` leaves the thread's floating-point mode alone",
        section: Section::Onnx,
        apply: |d, v| flag(v).map(|b| d.settings.onnx.flush_denormals = b),
    },
    Parameter {
        name: "runtime",
        kind: Kind::Choice(&["onnxruntime", "tract"]),
        default: Default::Value("onnxruntime"),
        meaning: "what runs the models: `onnxruntime` (native library, loaded at run time) or \
                  `tract` (pure Rust, no native library)",
        section: Section::Onnx,
        apply: |d, v| runtime(v).map(|r| d.settings.onnx.runtime = r),
    },
    Parameter {
        name: "onnxruntime_library",
        kind: Kind::Path,
        default: Default::Unset(
            "the environment variable `ORT_DYLIB_PATH` (set by scripts/setup.sh), else \
             `libonnxruntime.so*` beside `libtriton_face.so`, else in Triton's \
             `<backend-directory>/onnxruntime/`",
        ),
        meaning: "`libonnxruntime.so` (1.17 or newer), relative to the version folder",
        section: Section::Onnx,
        apply: |d, v| path(d.version_dir, v).map(|p| d.settings.onnx.onnxruntime_library = Some(p)),
    },
    Parameter {
        name: "intra_op_threads",
        kind: Kind::PositiveInteger,
        default: Default::Value("1"),
        meaning: "onnxruntime threads per model instance (Triton instances give the parallelism)",
        section: Section::Onnx,
        apply: |d, v| positive(v).map(|n| d.settings.onnx.intra_op_threads = n),
    },
    Parameter {
        name: "max_engine_batch",
        kind: Kind::PositiveInteger,
        default: Default::Unset(
            "`1` (batches are slower on the CPU, and were seen failing on a GPU: docs/gpu.md); \
             always `1` with `runtime: tract`",
        ),
        meaning: "the most frames (detector) or faces (landmarks, embedder) one model run takes: \
                  an Execute's frames go through each model together, in runs of at most this \
                  many (at most 1024); a model whose batch dimension is fixed runs one at a time, \
                  and the load log says which batch",
        section: Section::Onnx,
        apply: |d, v| {
            let most = positive(v).filter(|n| *n <= MAX_ENGINE_BATCH);
            most.map(|n| d.settings.onnx.max_engine_batch = Some(n))
        },
    },
    Parameter {
        name: "free_batch",
        kind: Kind::Bool,
        default: Default::Value("false"),
        meaning: "a model exported with a fixed batch of 1 has it made free at load, in memory \
                  (its input's and outputs' first dimension, a constant `Reshape` to `[1, ...]` \
                  made `[0, ...]`), so that it can take runs of several items; any model that \
                  takes runs is first checked to answer two inputs run together as each alone, \
                  else it runs one at a time, and the load log says so",
        section: Section::Onnx,
        apply: |d, v| flag(v).map(|b| d.settings.onnx.free_batch = b),
    },
    Parameter {
        name: "run_sizes",
        kind: Kind::PositiveIntegers,
        default: Default::Unset(
            "on a GPU the powers of two up to `max_engine_batch`, and `max_engine_batch` \
             itself; on the CPU none (one session takes every run)",
        ),
        meaning: "the run sizes each model gets an onnxruntime session of its own for (sizes \
                  above a model's most are its most): every run is padded with blank items to \
                  the next, so each session only ever runs the one input shape it planned at \
                  load (cuDNN keeps one plan per convolution), its input and outputs bound to \
                  buffers made once; `8` alone pads every run to 8",
        section: Section::Onnx,
        apply: |d, v| sizes(v).map(|s| d.settings.onnx.run_sizes = Some(s)),
    },
    Parameter {
        name: "cudnn_conv_algo_search",
        kind: Kind::Choice(&["heuristic", "exhaustive", "default"]),
        default: Default::Value("heuristic"),
        meaning: "on a GPU, how cuDNN picks each convolution's kernel (onnxruntime's CUDA \
                  option of that name): `exhaustive` times every kernel at load, for every \
                  session, `heuristic` asks cuDNN's heuristics, `default` takes its default kernel",
        section: Section::Onnx,
        apply: |d, v| conv_search(v).map(|c| d.settings.onnx.cuda.conv_search = c),
    },
    Parameter {
        name: "gpu_provider",
        kind: Kind::Choice(&["cuda", "tensorrt"]),
        default: Default::Value("cuda"),
        meaning: "on a GPU, what runs the ONNX models: onnxruntime's `cuda` provider, or \
                  `tensorrt` first (the CUDA provider runs what it does not), its engines \
                  built for each planned run size at the first load and cached in the model's \
                  `tensorrt_cache/` folder; a machine without TensorRT 10 fails the load saying so",
        section: Section::Onnx,
        apply: |d, v| {
            let cache = match v.to_ascii_lowercase().as_str() {
                "cuda" => None,
                "tensorrt" => Some(d.model_dir.join("tensorrt_cache")),
                _ => return None,
            };
            d.settings.onnx.cuda.tensorrt_cache = cache;
            Some(())
        },
    },
    Parameter {
        name: "gpu_mem_limit",
        kind: Kind::PositiveInteger,
        default: Default::Unset("no limit (onnxruntime's)"),
        meaning: "on a GPU, the most bytes each onnxruntime session's device memory arena \
                  takes (onnxruntime's CUDA option of that name)",
        section: Section::Onnx,
        apply: |d, v| positive(v).map(|n| d.settings.onnx.cuda.memory_limit = Some(n)),
    },
    Parameter {
        name: "arena_extend_strategy",
        kind: Kind::Choice(&["kSameAsRequested", "kNextPowerOfTwo"]),
        default: Default::Value("kSameAsRequested"),
        meaning: "on a GPU, how each session's device memory arena grows (onnxruntime's CUDA \
                  option of that name): by what a run asks (a planned session asks the same at \
                  every run), or in powers of two",
        section: Section::Onnx,
        apply: |d, v| {
            let same = match v.to_ascii_lowercase().as_str() {
                "ksameasrequested" => Some(true),
                "knextpoweroftwo" => Some(false),
                _ => None,
            };
            same.map(|b| d.settings.onnx.cuda.arena_same_as_requested = b)
        },
    },
];

/// `run_sizes`: positive integers (at most `MAX_ENGINE_BATCH`) separated by commas.
fn sizes(v: &str) -> Option<Vec<usize>> {
    (v.split(','))
        .map(|n| positive(n.trim()).filter(|n| *n <= MAX_ENGINE_BATCH))
        .collect()
}

fn conv_search(v: &str) -> Option<ConvSearch> {
    match v.to_ascii_lowercase().as_str() {
        "heuristic" => Some(ConvSearch::Heuristic),
        "exhaustive" => Some(ConvSearch::Exhaustive),
        "default" => Some(ConvSearch::Default),
        _ => None,
    }
}

/// docs/parameters.md's table of one section: `| key | type | default | meaning |`.
pub fn markdown_table(section: Section) -> String {
    let mut out = String::from("| key | type | default | meaning |\n|---|---|---|---|\n");
    for p in PARAMETERS.iter().filter(|p| p.section == section) {
        let default = match p.default {
            Default::Value(v) => format!("`{v}`"),
            Default::Unset(text) => text.to_string(),
        };
        out += &format!(
            "| `{}` | {} | {default} | {} |\n",
            p.name,
            p.kind.describe("`"),
            p.meaning
        );
    }
    out
}

const SECTIONS: [(Section, &str); 2] = [(Section::General, "general"), (Section::Onnx, "onnx")];

/// `readme` with the text between each section's markers
/// (`<!-- parameters:general:begin -->` ... `<!-- parameters:general:end -->`)
/// replaced by that section's table; an error when a marker is missing.
pub fn readme_with_tables(readme: &str) -> Result<String, String> {
    let mut out = readme.to_string();
    for (section, tag) in SECTIONS {
        let begin = format!("<!-- parameters:{tag}:begin -->\n");
        let end = format!("<!-- parameters:{tag}:end -->");
        let start = out
            .find(&begin)
            .ok_or_else(|| format!("no line {begin:?}"))?
            + begin.len();
        let stop = start
            + out[start..]
                .find(&end)
                .ok_or_else(|| format!("no {end:?} after {begin:?}"))?;
        out.replace_range(start..stop, &markdown_table(section));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_meanings_fit_a_table_cell() {
        for (i, p) in PARAMETERS.iter().enumerate() {
            assert!(
                PARAMETERS[..i].iter().all(|q| q.name != p.name),
                "{} twice",
                p.name
            );
            // A `|` or a line break would split README's row.
            for text in [p.meaning, p.kind.describe("`").as_str()] {
                assert!(!text.contains(['|', '\n']), "{}: {text:?}", p.name);
            }
        }
    }

    #[test]
    fn readme_tables_match_the_parameters() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/parameters.md");
        let readme = std::fs::read_to_string(&path).unwrap();
        let expected =
            readme_with_tables(&readme).unwrap_or_else(|e| panic!("docs/parameters.md: {e}"));
        assert!(
            readme == expected,
            "docs/parameters.md's parameter tables differ from PARAMETERS in \
             src/backend/parameters.rs; regenerate them with \
             `cargo run --release --example parameter_table`.\n\
             Expected:\n{}\n{}",
            markdown_table(Section::General),
            markdown_table(Section::Onnx)
        );
    }

    #[test]
    fn readme_markers_are_required() {
        let e = readme_with_tables("# no tables\n").unwrap_err();
        assert!(e.contains("parameters:general:begin"), "{e}");
        let once = readme_with_tables(
            "a\n<!-- parameters:general:begin -->\nSTALE\n<!-- parameters:general:end -->\nb\n\
             <!-- parameters:onnx:begin -->\n<!-- parameters:onnx:end -->\n",
        )
        .unwrap();
        assert!(!once.contains("STALE") && once.contains("| `engine` |"));
        assert!(once.contains("| `embedder_model` |"));
        assert_eq!(readme_with_tables(&once).unwrap(), once);
    }
}
