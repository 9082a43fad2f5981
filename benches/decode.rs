//! What reading a detector's outputs costs, family by family: one 640x480
//! frame's outputs at the family's reference input, decoded, mapped to the
//! frame, sorted and suppressed, as the ONNX engine does after every
//! detector run: with no face (the scan over every candidate: its cost per
//! candidate) and with five faces of nine candidates each (a frame's cost).
//! UltraFace's (the sample detector, the engine's only family before) is the
//! anchor: each family's figures are printed against it.
//!
//! `cargo bench --bench decode` (in `make bench`); group "decode", one
//! benchmark per layout.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use triton_face::engine::onnx::detect::bench::cases;

/// Each layout's median times, interleaved rounds so that all meet the same
/// machine, against UltraFace's.
fn table() {
    let cases = cases();
    let mut times: Vec<[Vec<Duration>; 2]> = vec![[Vec::new(), Vec::new()]; cases.len()];
    for _ in 0..2000 {
        for (case, times) in cases.iter().zip(&mut times) {
            for (k, with_faces) in [false, true].into_iter().enumerate() {
                let start = Instant::now();
                std::hint::black_box(case.run(with_faces));
                times[k].push(start.elapsed());
            }
        }
    }
    let median = |t: &mut Vec<Duration>| {
        t.sort();
        t[t.len() / 2].as_secs_f64()
    };
    let rows: Vec<(f64, f64)> = (cases.iter().zip(&mut times))
        .map(|(c, [empty, faces])| {
            (
                median(empty) * 1e9 / c.candidates as f64,
                median(faces) * 1e6,
            )
        })
        .collect();
    eprintln!(
        "decode: layout | candidates | ns a candidate, no face | x UltraFace's | us a frame, \
         five faces | x UltraFace's"
    );
    for (case, (ns, us)) in cases.iter().zip(&rows) {
        eprintln!(
            "decode: {} | {} | {ns:.2} | {:.2} | {us:.1} | {:.2}",
            case.name,
            case.candidates,
            ns / rows[0].0,
            us / rows[0].1
        );
    }
}

fn decode(c: &mut Criterion) {
    table();
    let mut group = c.benchmark_group("decode");
    for case in cases() {
        group.bench_function(case.name, |b| b.iter(|| case.run(true)));
    }
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
