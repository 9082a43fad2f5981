//! What one ENROLL costs the gallery (staging, the SQLite transaction with
//! its fsync, applying it in memory) in an empty gallery and in one of
//! 10,000 entries: with a store that writes only the change, the two match.
//! The paired figure times the FORGET of each enrollment too (its erasure,
//! on the gallery's own thread, is not part of it but runs beside it).
//!
//! Group "gallery": `enroll/0` and `enroll/10000`. Each timed enrollment is
//! forgotten again, untimed, so the gallery keeps its size. The store lives
//! under target/ (a real disk: a tmpfs would make fsync free).
//!
//! The fsync dominates and swings with whatever else the disk is doing, and
//! criterion runs the two sizes one after the other; so the bench also prints
//! a paired figure first: enrollments alternating between the two galleries,
//! the median of each.

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use triton_face::gallery::store::{self, Identity};
use triton_face::gallery::{Gallery, Named};
use triton_face::metric::Metric;

const DIM: usize = 128;
const SIZES: [usize; 2] = [0, 10_000];

/// A distinct, deterministic embedding for each `seed`.
fn embedding(seed: u64) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..DIM)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// A gallery in `dir` holding `size` enrolled faces (written in batches).
fn gallery(dir: &Path, size: usize) -> Gallery {
    let identity = Identity {
        engine: "bench".into(),
        metric: Metric::Euclidean.name().into(),
        dim: DIM,
        model_hash: "bench".into(),
    };
    let store = store::open_sqlite(dir, &identity).expect("open the store");
    let (g, _) = Gallery::open(dir, store, Metric::Euclidean, DIM, 0.6, size + 1000)
        .expect("open the gallery");
    for start in (0..size).step_by(1000) {
        let batch = (start..(start + 1000).min(size))
            .map(|i| Named {
                name: format!("person {i}"),
                embedding: embedding(i as u64),
            })
            .collect();
        for r in g.enroll_batch(vec![(batch, None)]) {
            r.expect("fill the gallery");
        }
    }
    assert_eq!(g.len(), size);
    g
}

/// One timed ENROLL in `g`, then its FORGET (the size stays): both times.
fn enroll_and_forget(g: &Gallery, seed: u64) -> [Duration; 2] {
    let face = embedding(seed);
    let start = Instant::now();
    let done = g.enroll("probe", face).expect("enroll");
    let enrolled = Instant::now();
    assert!(done.added);
    g.forget(&["probe".to_string()], None).expect("forget");
    [enrolled - start, enrolled.elapsed()]
}

fn enroll_once(g: &Gallery, seed: u64) -> Duration {
    enroll_and_forget(g, seed)[0]
}

/// Enrollments (and their FORGET) alternating between the galleries;
/// prints each one's medians.
fn paired(galleries: &[(usize, Gallery)], rounds: u64) {
    let mut times: Vec<[Vec<Duration>; 2]> = galleries.iter().map(|_| Default::default()).collect();
    for round in 0..rounds {
        for (k, (_, g)) in galleries.iter().enumerate() {
            let [enroll, forget] = enroll_and_forget(g, 2_000_000 + round);
            times[k][0].push(enroll);
            times[k][1].push(forget);
        }
    }
    let median = |t: &mut Vec<Duration>| {
        t.sort();
        t[t.len() / 2]
    };
    let medians: Vec<Duration> = times.iter_mut().map(|t| median(&mut t[0])).collect();
    for (((size, _), enroll), t) in galleries.iter().zip(&medians).zip(&mut times) {
        let forget = median(&mut t[1]);
        println!(
            "gallery/enroll/{size} paired: median {enroll:?}, its FORGET {forget:?}, over {rounds} enrollments"
        );
    }
    let ratio = medians[1].as_secs_f64() / medians[0].as_secs_f64();
    println!(
        "gallery/enroll paired: {} / {} = {ratio:.2}",
        SIZES[1], SIZES[0]
    );
}

fn bench_enroll(c: &mut Criterion) {
    let dirs: Vec<_> = SIZES
        .iter()
        .map(|_| tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temp folder"))
        .collect();
    let galleries: Vec<(usize, Gallery)> = SIZES
        .iter()
        .zip(&dirs)
        .map(|(&size, dir)| (size, gallery(dir.path(), size)))
        .collect();
    paired(&galleries, 1000);
    let mut group = c.benchmark_group("gallery");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(10));
    for (size, g) in &galleries {
        let mut seed = 1_000_000u64;
        group.bench_function(BenchmarkId::new("enroll", size), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    seed += 1;
                    spent += enroll_once(g, seed);
                }
                spent
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_enroll);
criterion_main!(benches);
