//! The gallery's second look at a million 512-d people: a scan of every
//! person's sign bits (64 bytes each, 64 MB) for the 256 nearest by Hamming
//! distance (`src/gallery/signs.rs`). Each kernel this CPU runs, on one
//! core; then the shipped scan (the fastest kernel, shared in chunks by up
//! to 4 cores, `src/gallery/share.rs`) and the earlier kernel (POPCNT per
//! word) shared the same way. The million fits in the L3 of some CPUs (260
//! MB on the Xeon we measure on), where a server's scan reads from memory:
//! this is the kernels' cost, not the scan's in a server. The SIMD kernels
//! ask the cache `AHEAD` bytes ahead, as shipped (docs/benchmarks.md, "Faces
//! unlike the rest", gives the scan from memory with and without).
//!
//! Beside them, the library we would otherwise use: SimSIMD's Hamming
//! distance (the kernels behind usearch), called once per person with the
//! same keep-the-nearest loop.
//!
//! Group "sign_scan": `one core/<kernel>`, `one core/simsimd`,
//! `shipped/fastest`, `before/POPCNT per word`. Random codes: the scan's
//! cost does not depend on what they hold (a code beats the 256th nearest
//! rarely either way).
//!
//! Group "sign_scan from memory": the fastest kernel over six copies of the
//! million, 384 MB, more than this Xeon's 260 MB L3 (each scan reads the
//! next copy), as a server's scan reads them from memory; the cache asked
//! `AHEAD` bytes ahead of the reads (shipped) or not, on one core and on all
//! (up to 4).

use std::collections::BinaryHeap;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use simsimd::BinarySimilarity;
use std::cell::Cell;

use triton_face::gallery::signs::{nearest_with, Kernel, AHEAD};

const PEOPLE: usize = 1_000_000;
const WORDS: usize = 8;
const NEAREST: usize = 256;
/// Copies of the million for the scans from memory: 384 MB.
const COPIES: usize = 6;

fn random_codes(into: &mut [u64]) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for word in into {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *word = x;
    }
}

/// The `NEAREST` nearest codes by SimSIMD's Hamming distance, one call per code.
fn simsimd_nearest(codes: &[u64], query: &[u64]) -> Vec<usize> {
    // SAFETY: u8 has no alignment or validity requirement; the views live
    // no longer than the words they show.
    let bytes = |words: &[u64]| unsafe {
        std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words))
    };
    let (all, query) = (bytes(codes), bytes(query));
    let mut kept = BinaryHeap::with_capacity(NEAREST + 1);
    let mut bound = f64::INFINITY;
    for (slot, code) in all.chunks_exact(WORDS * 8).enumerate() {
        let d = u8::hamming(code, query).unwrap_or(f64::INFINITY);
        if d < bound {
            kept.push((d as u32, slot));
            if kept.len() > NEAREST {
                kept.pop();
            }
            if kept.len() == NEAREST {
                bound = kept
                    .peek()
                    .map_or(f64::INFINITY, |&(far, _)| f64::from(far));
            }
        }
    }
    kept.into_iter().map(|(_, slot)| slot).collect()
}

/// `codes` made random; a query near the first, the cores the shipped scan
/// shares (up to 4) and the fastest kernel here.
fn random_scan(codes: &mut [u64]) -> (Vec<u64>, usize, Kernel) {
    random_codes(codes);
    let query = codes[..WORDS].iter().map(|w| w.rotate_left(7)).collect();
    let cores = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4);
    let fastest = *Kernel::available(WORDS)
        .last()
        .expect("Plain is always there");
    (query, cores, fastest)
}

fn bench_sign_scan(c: &mut Criterion) {
    let mut codes = vec![0u64; PEOPLE * WORDS];
    let (query, cores, fastest) = random_scan(&mut codes);

    let mut group = c.benchmark_group("sign_scan");
    group.sample_size(20);
    let mut runs: Vec<(&str, String, Kernel, usize)> = Kernel::available(WORDS)
        .into_iter()
        .map(|k| ("one core", format!("{k:?}"), k, 1))
        .collect();
    runs.push(("shipped", "fastest".into(), fastest, cores));
    runs.push(("before", "POPCNT per word".into(), Kernel::Popcnt, cores));
    for (name, param, kernel, parts) in runs {
        group.bench_function(BenchmarkId::new(name, param), |b| {
            b.iter(|| nearest_with(kernel, &codes, WORDS, &query, NEAREST, parts, AHEAD))
        });
    }
    group.bench_function(BenchmarkId::new("one core", "simsimd"), |b| {
        b.iter(|| simsimd_nearest(&codes, &query))
    });
    group.finish();
}

fn bench_from_memory(c: &mut Criterion) {
    let mut codes = vec![0u64; COPIES * PEOPLE * WORDS];
    let (query, cores, fastest) = random_scan(&mut codes);
    let copies: Vec<&[u64]> = codes.chunks_exact(PEOPLE * WORDS).collect();
    let next = Cell::new(0usize);
    let mut group = c.benchmark_group("sign_scan from memory");
    group.sample_size(30);
    for parts in [1, cores] {
        for (asked, ahead) in [("asked ahead", AHEAD), ("not asked", 0)] {
            let id = BenchmarkId::new(format!("{parts} cores, {fastest:?}"), asked);
            group.bench_function(id, |b| {
                b.iter(|| {
                    let copy = copies[next.get() % COPIES];
                    next.set(next.get() + 1);
                    nearest_with(fastest, copy, WORDS, &query, NEAREST, parts, ahead)
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_sign_scan, bench_from_memory);
criterion_main!(benches);
