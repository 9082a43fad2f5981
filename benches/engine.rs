//! In-process throughput of the dlib engine on one real 640x480 photo: the
//! baseline that scripts/bench.sh sets next to perf_analyzer's server figures.
//!
//!   FACE_WEIGHTS      dir with the dlib .dat files (default <repo>/assets/dlib)
//!   FACE_BENCH_PHOTO  the photo (default <repo>/assets/photos/obama_640x480.jpg)
//!
//! Benchmarks (group "engine"): `decode` (JPEG -> RGB frame), `analyze`
//! (detect + landmarks + embed on the decoded frame) and `decode+analyze`
//! (what the server does for one ENCODED request). Single thread.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use triton_face::engine::dlib::{DetectorKind, DlibEngine};
use triton_face::pipeline::image::frame_from_encoded;
use triton_face::pipeline::{Engine, Frame};

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

fn decode(jpeg: &[u8]) -> Frame {
    frame_from_encoded("bench photo", jpeg, MAX_PIXELS).expect("decode the bench photo")
}

fn analyze(engine: &mut DlibEngine, frame: &Frame) -> usize {
    let mut results = engine.analyze(&[frame], MAX_FACES);
    results
        .pop()
        .expect("one result per frame")
        .expect("analyze")
        .len()
}

fn bench_engine(c: &mut Criterion) {
    let weights = input_path("FACE_WEIGHTS", "assets/dlib");
    let photo = input_path("FACE_BENCH_PHOTO", "assets/photos/obama_640x480.jpg");
    let jpeg = std::fs::read(&photo).expect("read the bench photo");
    let mut engine = DlibEngine::load(&weights, DetectorKind::Hog)
        .unwrap_or_else(|e| panic!("load dlib weights from {}: {e:?}", weights.display()));
    let frame = decode(&jpeg);
    let faces = analyze(&mut engine, &frame);
    assert!(faces > 0, "no face found in {}", photo.display());
    eprintln!(
        "bench photo {} ({}x{}, {} bytes): {faces} face(s)",
        photo.display(),
        frame.width,
        frame.height,
        jpeg.len()
    );

    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(1));
    group.warm_up_time(Duration::from_secs(1));
    group.bench_function("decode", |b| b.iter(|| decode(&jpeg)));
    // dlib HOG on 640x480 takes ~0.1 s: few samples keep the whole run < 1 min.
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    group.bench_function("analyze", |b| b.iter(|| analyze(&mut engine, &frame)));
    group.bench_function("decode+analyze", |b| {
        b.iter(|| analyze(&mut engine, &decode(&jpeg)))
    });
    group.finish();
}

criterion_group!(benches, bench_engine);
criterion_main!(benches);
