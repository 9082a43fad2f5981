//! In-process throughput of the engines on one real 640x480 photo: the
//! baseline that scripts/bench.sh sets next to perf_analyzer's server figures.
//!
//!   FACE_WEIGHTS      dir with the dlib .dat files (default <repo>/assets/dlib)
//!   FACE_ONNX_DIR     dir with fr_detect/fr_landmark/fr_feature.onnx
//!                     (default <repo>/assets/onnx)
//!   FACE_BENCH_PHOTO  the photo (default <repo>/assets/photos/obama_640x480.jpg)
//!   FACE_BENCH_ONLY   `decode`, `jpeg-scale`, `resize`, `engine`, `onnx` or `onnx-batch`: run
//!                     only that group
//!
//! Group "decode": ENCODED bytes to an RGB frame, the bench photo as JPEG
//! and as PNG, WebP (lossy) and BMP (assets/formats/, made by setup.sh from
//! it), and the RGBA PNG `32bit.png` (1 megapixel).
//! Group "jpeg-scale": libjpeg-turbo alone, `obama_640x480.jpg` and `obama3.jpg`
//! (3.3 megapixels) decoded to RGB at 1/1, 1/2, 1/4 and 1/8 of their size
//! (its DCT scaling): what a decode at the detector's scale would save.
//! Group "resize": a whole frame to a detector's letterbox, OpenCV's
//! INTER_LINEAR bit for bit (`pipeline::resize`, what the ONNX engine uses)
//! against fast_image_resize's bilinear interpolation (within one level):
//! `obama.jpg` (910x1137) to 512x640, `obama3.jpg` (1434x2333) to 393x640, and
//! a 1920x1080 frame (the first photo stretched) to 640x360.
//! Group "engine" (dlib, HOG; the `face` model): `decode` (JPEG -> RGB frame),
//! `analyze` (detect + landmarks + embed on the decoded frame) and
//! `decode+analyze` (what the server does for one ENCODED request).
//! Both also time the parts of a followed sequence frame: `faces_at one box`
//! (landmarks at a tracked box) and `embed one face`. Group "tracker" (with
//! "engine"): dlib's correlation tracker on the photo's face: `frame` (the
//! copy it reads), `start`, `update`.
//! Group "onnx" (the ONNX engine with the settings of the `face_onnx` model,
//! read from model_repository/face_onnx/config.pbtxt through the backend's own
//! config parser): `analyze` and `decode+analyze`. Single thread. Then the
//! same with one thing changed, for ratios from one run: "onnx-no-prelu-
//! rewrite", "onnx-no-ftz", "onnx-untouched" (no hygiene, no flush-to-zero:
//! the model as exported), "onnx-tract", "onnx-tract-untouched". Before
//! them, `stage-times:` lines on stderr: each stage's median on both
//! runtimes next to its floor (its GFLOP at this machine's single-core sgemm
//! rate, measured in the same run).
//! Group "onnx-batch" (the `face_onnx` settings on onnxruntime, one
//! thread): 8 and 32 copies of the photo through one `analyze`, as one
//! Execute's frames, at `max_engine_batch` 1 (one item a run), 2, 8 and 32;
//! throughput in frames. (tract always runs one item a run.)

use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use triton_face::engine::dlib::{DlibEngine, DlibSettings};
use triton_face::engine::onnx::{Hygiene, OnnxEngine, OnnxSettings, Runtime};
use triton_face::engine::tracker::{BoxTracker, TrackFrame};
use triton_face::engine::Engine;
use triton_face::pipeline::image::frame_from_encoded;
use triton_face::pipeline::{Frame, OwnedFrame, Wanted};

#[path = "common/face_onnx.rs"]
mod face_onnx;
use face_onnx::{onnx_settings, ONNX_CONFIG};

const MAX_PIXELS: u64 = 40_000_000;
const MAX_FACES: usize = 64;

/// `$var` if set, else `<repo>/<default>`; panics if it does not exist.
fn input_path(var: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(default));
    assert!(
        path.exists(),
        "{} not found (set {var} or run scripts/setup.sh)",
        path.display()
    );
    path
}

/// Whether FACE_BENCH_ONLY (unset: every group) selects `group`.
fn selected(group: &str) -> bool {
    std::env::var("FACE_BENCH_ONLY").map_or(true, |only| only.is_empty() || only == group)
}

fn decode(jpeg: &[u8], max_pixels: u64) -> OwnedFrame {
    frame_from_encoded("bench photo", jpeg, max_pixels).expect("decode the bench photo")
}

fn analyze(engine: &mut dyn Engine, frame: &Frame, max_faces: usize) -> usize {
    analyze_wanted(engine, frame, Wanted::all(max_faces))
}

fn analyze_wanted(engine: &mut dyn Engine, frame: &Frame, wanted: Wanted) -> usize {
    let mut results = engine.analyze(&[(frame, wanted)]);
    results
        .pop()
        .expect("one result per frame")
        .expect("analyze")
        .faces
        .len()
}

/// Load the engine, check it finds a face in the photo, say so on stderr.
fn prepare(engine: &mut dyn Engine, jpeg: &[u8], photo: &Path, max_faces: usize) -> OwnedFrame {
    let frame = decode(jpeg, MAX_PIXELS);
    let faces = analyze(engine, &frame, max_faces);
    assert!(
        faces > 0,
        "{}: no face found in {}",
        engine.name(),
        photo.display()
    );
    eprintln!(
        "bench photo {} ({}x{}, {} bytes): {faces} face(s) with {}",
        photo.display(),
        frame.width,
        frame.height,
        jpeg.len(),
        engine.describe()
    );
    frame
}

/// The file name and bytes of `photo` (relative to the repository).
fn read_photo(photo: &str) -> (String, Vec<u8>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(photo);
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup.sh)", path.display()));
    (
        path.file_name().unwrap().to_string_lossy().into_owned(),
        bytes,
    )
}

/// Each format ENCODED accepts, decoded to an RGB frame.
fn bench_decode(c: &mut Criterion) {
    if !selected("decode") {
        return;
    }
    let photos = [
        "assets/photos/obama_640x480.jpg",
        "assets/formats/obama_640x480.png",
        "assets/formats/obama_640x480.webp",
        "assets/formats/obama_640x480.bmp",
        "assets/photos/32bit.png",
    ];
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(1));
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for photo in photos {
        let (name, bytes) = read_photo(photo);
        group.bench_function(name, |b| b.iter(|| decode(&bytes, MAX_PIXELS)));
    }
    group.finish();
}

/// A whole frame resized to a letterbox's size: ours (OpenCV's pixels)
/// against fast_image_resize (docs/benchmarks.md, the image work).
fn bench_resize(c: &mut Criterion) {
    use fast_image_resize::images::{Image, ImageRef};
    use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
    use triton_face::pipeline::resize::resize_linear;
    if !selected("resize") {
        return;
    }
    let obama = decode(&read_photo("assets/photos/obama.jpg").1, MAX_PIXELS);
    let hd = (1920, 1080);
    let stretched = resize_linear(&obama.rgb, (910, 1137), hd);
    let cases = [
        (
            "obama.jpg to 512x640",
            obama.rgb.to_vec(),
            (910, 1137),
            (512, 640),
        ),
        (
            "obama3.jpg to 393x640",
            decode(&read_photo("assets/photos/obama3.jpg").1, MAX_PIXELS)
                .rgb
                .into_owned(),
            (1434, 2333),
            (393, 640),
        ),
        ("1920x1080 to 640x360", stretched, hd, (640, 360)),
    ];
    let mut group = c.benchmark_group("resize");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(2));
    for (name, rgb, (w, h), (nw, nh)) in &cases {
        assert_eq!(rgb.len(), 3 * w * h, "{name}: the photo's size");
        group.bench_function(format!("opencv-exact {name}"), |b| {
            b.iter(|| resize_linear(rgb, (*w, *h), (*nw, *nh)))
        });
        let src = ImageRef::new(*w as u32, *h as u32, rgb, PixelType::U8x3).expect("source");
        let options =
            ResizeOptions::new().resize_alg(ResizeAlg::Interpolation(FilterType::Bilinear));
        let mut resizer = Resizer::new();
        group.bench_function(format!("fast_image_resize {name}"), |b| {
            b.iter(|| {
                let mut dst = Image::new(*nw as u32, *nh as u32, PixelType::U8x3);
                resizer.resize(&src, &mut dst, &options).expect("resize");
                dst
            })
        });
    }
    group.finish();
}

/// libjpeg-turbo's decode at a fraction of the size (TurboJPEG picks the
/// DCT scaling from the size asked): why the backend decodes at full size
/// (it still reads every coefficient: the saving is small against the
/// detector's resize it would replace).
fn bench_jpeg_scale(c: &mut Criterion) {
    if !selected("jpeg-scale") {
        return;
    }
    let mut group = c.benchmark_group("jpeg-scale");
    group.throughput(Throughput::Elements(1));
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for photo in [
        "assets/photos/obama_640x480.jpg",
        "assets/photos/obama3.jpg",
    ] {
        let (name, bytes) = read_photo(photo);
        let header = turbojpeg::read_header(&bytes).expect("the photo's JPEG header");
        for denominator in [1, 2, 4, 8] {
            let (width, height) = (
                header.width.div_ceil(denominator),
                header.height.div_ceil(denominator),
            );
            let mut rgb = vec![0u8; width * height * 3];
            let mut decompressor = turbojpeg::Decompressor::new().expect("a decompressor");
            group.bench_function(format!("{name} 1/{denominator}"), |b| {
                b.iter(|| {
                    let image = turbojpeg::Image {
                        pixels: rgb.as_mut_slice(),
                        width,
                        pitch: width * 3,
                        height,
                        format: turbojpeg::PixelFormat::RGB,
                    };
                    decompressor.decompress(&bytes, image).expect("decoded")
                })
            });
        }
    }
    group.finish();
}

fn bench_dlib(c: &mut Criterion) {
    if !selected("engine") {
        return;
    }
    let weights = input_path("FACE_WEIGHTS", "assets/dlib");
    let photo = input_path("FACE_BENCH_PHOTO", "assets/photos/obama_640x480.jpg");
    let jpeg = std::fs::read(&photo).expect("read the bench photo");
    let mut engine = DlibEngine::load(&weights, DlibSettings::default())
        .unwrap_or_else(|e| panic!("load dlib weights from {}: {e:?}", weights.display()));
    let frame = prepare(&mut engine, &jpeg, &photo, MAX_FACES);

    bench_tracker(c, &mut engine, &frame);
    bench_smallest_face(c, &weights, &frame);
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(1));
    group.warm_up_time(Duration::from_secs(1));
    group.bench_function("decode", |b| b.iter(|| decode(&jpeg, MAX_PIXELS)));
    // dlib HOG on 640x480 takes ~0.1 s: few samples keep the whole run < 1 min.
    engine_benches(
        group,
        &mut engine,
        &jpeg,
        &frame,
        (MAX_PIXELS, MAX_FACES),
        8,
    );
}

/// dlib's HOG and landmarks on the 640x480 photo, the image as it is and
/// resized for `smallest_face` (docs/parameters.md quotes the ratios).
fn bench_smallest_face(c: &mut Criterion, weights: &Path, frame: &Frame) {
    let boxes = Wanted {
        embeddings: false,
        ..Wanted::all(MAX_FACES)
    };
    let mut group = c.benchmark_group("smallest_face");
    group.warm_up_time(Duration::from_secs(1)).sample_size(20);
    for px in [0, 50, 120] {
        let settings = DlibSettings {
            smallest_face: px,
            ..DlibSettings::default()
        };
        let mut engine = DlibEngine::load(weights, settings).expect("load dlib");
        group.bench_function(px.to_string(), |b| {
            b.iter(|| engine.analyze(&[(frame, boxes)]).remove(0).expect("detect"))
        });
    }
    group.finish();
}

/// The tracker that carries a face between detections (engine::tracker),
/// on the photo's face: the frame copied for it, a start, an update.
fn bench_tracker(c: &mut Criterion, engine: &mut dyn Engine, frame: &Frame) {
    let only_boxes = Wanted {
        embeddings: false,
        ..Wanted::all(MAX_FACES)
    };
    let bbox = engine
        .analyze(&[(frame, only_boxes)])
        .remove(0)
        .expect("detect")
        .faces[0]
        .bbox;
    let image = TrackFrame::new(frame).expect("track frame");
    let mut tracker = BoxTracker::start(&image, bbox).expect("start");
    let mut group = c.benchmark_group("tracker");
    group.warm_up_time(Duration::from_secs(1)).sample_size(20);
    group.bench_function("frame", |b| {
        b.iter(|| TrackFrame::new(frame).expect("frame"))
    });
    group.bench_function("start", |b| {
        b.iter(|| BoxTracker::start(&image, bbox).expect("start"))
    });
    group.bench_function("update", |b| {
        b.iter(|| tracker.update(&image).expect("update"))
    });
    group.finish();
}

/// `analyze` and `decode+analyze` of one engine in `group`, then finish it.
fn engine_benches(
    mut group: BenchmarkGroup<'_, WallTime>,
    engine: &mut dyn Engine,
    jpeg: &[u8],
    frame: &Frame,
    (max_pixels, max_faces): (u64, usize),
    seconds: u64,
) {
    group.throughput(Throughput::Elements(1));
    group.warm_up_time(Duration::from_secs(1));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(seconds));
    group.bench_function("analyze", |b| b.iter(|| analyze(engine, frame, max_faces)));
    // The request parameter detect_only: boxes and landmarks, no embedding.
    let detect_only = Wanted {
        embeddings: false,
        ..Wanted::all(max_faces)
    };
    group.bench_function("analyze detect_only", |b| {
        b.iter(|| analyze_wanted(engine, frame, detect_only))
    });
    // The parts of a followed sequence frame (src/sequence/follow.rs): the
    // landmarks at a tracked box, and one face embedded by its landmarks.
    let face = engine
        .analyze(&[(frame, detect_only)])
        .remove(0)
        .expect("detect")
        .faces
        .remove(0);
    group.bench_function("faces_at one box", |b| {
        b.iter(|| engine.faces_at(frame, &[face.bbox]).expect("faces_at"))
    });
    group.bench_function("embed one face", |b| {
        b.iter(|| engine.embed(frame, &[&face]).expect("embed"))
    });
    group.bench_function("decode+analyze", |b| {
        b.iter(|| analyze(engine, &decode(jpeg, max_pixels), max_faces))
    });
    group.finish();
}

fn bench_onnx(c: &mut Criterion) {
    if !selected("onnx") {
        return;
    }
    let onnx_dir = input_path("FACE_ONNX_DIR", "assets/onnx");
    let photo = input_path("FACE_BENCH_PHOTO", "assets/photos/obama_640x480.jpg");
    let jpeg = std::fs::read(&photo).expect("read the bench photo");
    let settings = onnx_settings(&onnx_dir);
    eprintln!("onnx settings ({ONNX_CONFIG}): {:?}", settings.onnx);
    let (max_pixels, max_faces) = (settings.max_image_pixels, settings.max_faces_per_image);
    let mut engine = OnnxEngine::load(&settings.onnx)
        .unwrap_or_else(|e| panic!("load the ONNX models from {}: {e:?}", onnx_dir.display()));
    let frame = prepare(&mut engine, &jpeg, &photo, max_faces);
    drop(engine);

    // The configured engine, then the same models with one setting changed
    // each: the ratios between groups are measured in one run.
    let variants: [(&str, Change); 6] = [
        ("onnx", |_| {}),
        ("onnx-no-prelu-rewrite", |s| s.hygiene.rewrite_prelu = false),
        ("onnx-no-ftz", |s| s.flush_denormals = false),
        ("onnx-untouched", untouched),
        ("onnx-tract", |s| s.runtime = Runtime::Tract),
        ("onnx-tract-untouched", |s| {
            s.runtime = Runtime::Tract;
            untouched(s)
        }),
    ];
    stage_table(&settings.onnx, &frame, max_faces);
    for (name, change) in variants {
        let mut variant = settings.onnx.clone();
        change(&mut variant);
        let mut engine = OnnxEngine::load(&variant)
            .unwrap_or_else(|e| panic!("load the ONNX models for {name}: {e:?}"));
        eprintln!("{name}: {}", engine.describe());
        engine_benches(
            c.benchmark_group(name),
            &mut engine,
            &jpeg,
            &frame,
            (max_pixels, max_faces),
            5,
        );
    }
}

/// The sample models' cost for a one-face frame, in GFLOP (2 x multiply-adds:
/// detector 320x240, landmarks 64x64, embedder 112x112; issue #8).
const SAMPLE_GFLOP: [(&str, f64); 3] = [("detector", 0.2), ("landmarks", 0.03), ("embedder", 0.44)];

/// Per-stage medians of the engine on both runtimes, each next to its floor:
/// the stage's GFLOP at the single-core float32 GEMM rate measured here.
fn stage_table(settings: &OnnxSettings, frame: &Frame, max_faces: usize) {
    let gflops = gemm_gflops();
    eprintln!("stage-times: single-core sgemm (OpenBLAS, 512^3) {gflops:.1} GFLOP/s");
    for runtime in [Runtime::OnnxRuntime, Runtime::Tract] {
        let mut engine = OnnxEngine::load(&OnnxSettings {
            runtime,
            ..settings.clone()
        })
        .expect("load the ONNX models");
        let runs: Vec<Vec<(&str, Duration)>> = (0..35)
            .map(|_| engine.analyze_timed(frame, max_faces).expect("analyze").1)
            .skip(5)
            .collect();
        for (stage, _) in &runs[0] {
            let mut ms: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.iter().find(|(s, _)| s == stage))
                .map(|(_, d)| d.as_secs_f64() * 1e3)
                .collect();
            ms.sort_by(f64::total_cmp);
            let floor = SAMPLE_GFLOP
                .iter()
                .find(|(s, _)| s == stage)
                .map(|(_, g)| {
                    format!(
                        "floor {:.2} ms ({:.1}x)",
                        g / gflops * 1e3,
                        ms[ms.len() / 2] / (g / gflops * 1e3)
                    )
                })
                .unwrap_or_default();
            eprintln!(
                "stage-times: {} {stage:<10} median {:.2} ms {floor}",
                runtime.name(),
                ms[ms.len() / 2]
            );
        }
    }
}

/// Single-thread float32 GEMM rate of this machine (OpenBLAS, which the
/// library links for dlib), best of 5.
fn gemm_gflops() -> f64 {
    use std::ffi::c_int;
    extern "C" {
        fn openblas_set_num_threads(threads: c_int);
        #[allow(clippy::too_many_arguments)]
        fn cblas_sgemm(
            order: c_int,
            ta: c_int,
            tb: c_int,
            m: c_int,
            n: c_int,
            k: c_int,
            alpha: f32,
            a: *const f32,
            lda: c_int,
            b: *const f32,
            ldb: c_int,
            beta: f32,
            c: *mut f32,
            ldc: c_int,
        );
    }
    const N: c_int = 512;
    let (a, b) = (
        vec![1.0f32; (N * N) as usize],
        vec![0.5f32; (N * N) as usize],
    );
    let mut c = vec![0f32; (N * N) as usize];
    // SAFETY: plain call into OpenBLAS; no GEMM is running in this thread.
    unsafe { openblas_set_num_threads(1) };
    let best = (0..5)
        .map(|_| {
            let start = std::time::Instant::now();
            // SAFETY: a, b, c hold N*N floats each, row-major (101), no
            // transposes (111), leading dimensions N.
            unsafe {
                cblas_sgemm(
                    101,
                    111,
                    111,
                    N,
                    N,
                    N,
                    1.0,
                    a.as_ptr(),
                    N,
                    b.as_ptr(),
                    N,
                    0.0,
                    c.as_mut_ptr(),
                    N,
                )
            };
            start.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min);
    2.0 * f64::from(N).powi(3) / best / 1e9
}

/// One setting changed from the configured engine.
type Change = fn(&mut OnnxSettings);

/// The model as exported: no cleaning at load, denormals left alone.
fn untouched(s: &mut OnnxSettings) {
    s.hygiene = Hygiene {
        zero_tiny_weights: false,
        rewrite_prelu: false,
    };
    s.flush_denormals = false;
}

/// One Execute's frames through the ONNX engine at several max_engine_batch.
fn bench_onnx_batch(c: &mut Criterion) {
    if !selected("onnx-batch") {
        return;
    }
    let onnx_dir = input_path("FACE_ONNX_DIR", "assets/onnx");
    let photo = input_path("FACE_BENCH_PHOTO", "assets/photos/obama_640x480.jpg");
    let settings = onnx_settings(&onnx_dir);
    let frame = decode(
        &std::fs::read(&photo).expect("read the bench photo"),
        MAX_PIXELS,
    );
    let mut group = c.benchmark_group("onnx-batch");
    group.warm_up_time(Duration::from_secs(1));
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(4));
    for frames in [8, 32] {
        let batch: Vec<(&Frame, Wanted)> = (0..frames)
            .map(|_| (&frame, Wanted::all(MAX_FACES)))
            .collect();
        group.throughput(Throughput::Elements(frames as u64));
        for max_engine_batch in [1, 2, 8, 32] {
            let mut engine = OnnxEngine::load(&OnnxSettings {
                max_engine_batch: Some(max_engine_batch),
                ..settings.onnx.clone()
            })
            .expect("load the ONNX models");
            let name = format!("{frames} frames, max_engine_batch {max_engine_batch}");
            group.bench_function(name, |b| {
                b.iter(|| {
                    let faces: usize = (engine.analyze(&batch).iter())
                        .map(|r| r.as_ref().expect("analyze").faces.len())
                        .sum();
                    assert_eq!(faces, frames, "one face a frame");
                })
            });
        }
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_decode,
    bench_jpeg_scale,
    bench_resize,
    bench_dlib,
    bench_onnx,
    bench_onnx_batch
);
criterion_main!(benches);
