//! The gallery's second look at a million 512-d people: a scan of every
//! person's sign bits for the 256 nearest by Hamming distance
//! (`src/gallery/signs/`): the first plane (256 bits each, 32 MB) scanned
//! whole for its 4,096 nearest, then their second plane. Each kernel this
//! CPU runs over the first plane, on one core; then the shipped scan of both
//! planes (the fastest kernel, shared in chunks by up to 4 cores,
//! `src/gallery/share.rs`) and one plane of whole 512-bit codes scanned a
//! POPCNT per word, shared the same way. The million fits in the L3 of some
//! CPUs (260 MB on the Xeon we measure on), where a server's scan reads from
//! memory: this is the kernels' cost, not the scan's in a server. The SIMD
//! kernels ask the cache `AHEAD` bytes ahead, as shipped.
//!
//! Beside them, the library we would otherwise use: SimSIMD's Hamming
//! distance (the kernels behind usearch), called once per person with the
//! same keep-the-nearest loop.
//!
//! Group "sign_scan": `one core/<kernel>`, `one core/simsimd`,
//! `shipped/two planes`, `one plane/POPCNT per word`. Random codes: the
//! scan's cost does not depend on what they hold (a code beats the 4,096th
//! nearest rarely either way).
//!
//! Group "sign_scan from memory": the shipped scan of both planes over six
//! copies of the million, 384 MB, more than this Xeon's 260 MB L3 (each scan
//! reads the next copy), as a server's scan reads them from memory, on one
//! core and on all (up to 4); beside it the same codes whole, in one plane,
//! scanned a POPCNT per word on one core and on all.

use std::collections::BinaryHeap;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use simsimd::BinarySimilarity;
use std::cell::Cell;

use triton_face::gallery::signs::{nearest_with, Kernel, Signs, AHEAD, HEAD_WORDS};

const PEOPLE: usize = 1_000_000;
/// A 512-d person's code.
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

/// The `NEAREST` nearest codes (each as long as `query`) by SimSIMD's
/// Hamming distance, one call per code.
fn simsimd_nearest(codes: &[u64], query: &[u64]) -> Vec<usize> {
    // SAFETY: u8 has no alignment or validity requirement; the views live
    // no longer than the words they show.
    let bytes = |words: &[u64]| unsafe {
        std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words))
    };
    let (all, query) = (bytes(codes), bytes(query));
    let mut kept = BinaryHeap::with_capacity(NEAREST + 1);
    let mut bound = f64::INFINITY;
    for (slot, code) in all.chunks_exact(query.len()).enumerate() {
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

/// The cores the shipped scan shares (up to 4) and the fastest kernel here.
fn cores_and_fastest() -> (usize, Kernel) {
    let cores = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4);
    let fastest = *Kernel::available(HEAD_WORDS)
        .last()
        .expect("Plain is always there");
    (cores, fastest)
}

/// `people` random 512-bit codes in two planes and as whole codes, and a
/// query near the first.
fn random_signs(people: usize) -> (Signs, Vec<u64>, Vec<u64>) {
    let mut whole = vec![0u64; people * WORDS];
    random_codes(&mut whole);
    let mut signs = Signs::new(WORDS * 64);
    signs.resize(people);
    for (slot, code) in whole.chunks_exact(WORDS).enumerate() {
        signs.put(slot, code);
    }
    let query = whole[..WORDS].iter().map(|w| w.rotate_left(7)).collect();
    (signs, whole, query)
}

fn bench_sign_scan(c: &mut Criterion) {
    let (signs, whole, query) = random_signs(PEOPLE);
    let first: Vec<u64> = whole
        .chunks_exact(WORDS)
        .flat_map(|code| code[..HEAD_WORDS].to_vec())
        .collect();
    let (cores, _) = cores_and_fastest();

    let mut group = c.benchmark_group("sign_scan");
    group.sample_size(20);
    for kernel in Kernel::available(HEAD_WORDS) {
        group.bench_function(BenchmarkId::new("one core", format!("{kernel:?}")), |b| {
            let q = &query[..HEAD_WORDS];
            b.iter(|| nearest_with(kernel, &first, HEAD_WORDS, q, NEAREST, 1, AHEAD))
        });
    }
    group.bench_function(BenchmarkId::new("one core", "simsimd"), |b| {
        b.iter(|| simsimd_nearest(&first, &query[..HEAD_WORDS]))
    });
    group.bench_function(BenchmarkId::new("shipped", "two planes"), |b| {
        b.iter(|| signs.nearest(&query, NEAREST, |_| true))
    });
    group.bench_function(BenchmarkId::new("one plane", "POPCNT per word"), |b| {
        b.iter(|| nearest_with(Kernel::Popcnt, &whole, WORDS, &query, NEAREST, cores, AHEAD))
    });
    group.finish();
}

fn bench_from_memory(c: &mut Criterion) {
    let copies: Vec<(Signs, Vec<u64>, Vec<u64>)> =
        (0..COPIES).map(|_| random_signs(PEOPLE)).collect();
    let (cores, _) = cores_and_fastest();
    let next = Cell::new(0usize);
    let mut group = c.benchmark_group("sign_scan from memory");
    group.sample_size(30);
    group.bench_function(BenchmarkId::new("shipped", "two planes"), |b| {
        b.iter(|| {
            let (signs, _, query) = &copies[next.get() % COPIES];
            next.set(next.get() + 1);
            signs.nearest(query, NEAREST, |_| true)
        })
    });
    for parts in [1, cores] {
        let id = BenchmarkId::new("one plane", format!("{parts} cores, POPCNT per word"));
        group.bench_function(id, |b| {
            b.iter(|| {
                let (_, whole, query) = &copies[next.get() % COPIES];
                next.set(next.get() + 1);
                nearest_with(Kernel::Popcnt, whole, WORDS, query, NEAREST, parts, AHEAD)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_sign_scan, bench_from_memory);
criterion_main!(benches);
