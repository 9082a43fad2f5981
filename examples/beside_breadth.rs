//! The first look's breadth when the second look's scan runs beside it:
//! `nearest_then_signs` with a spare core, the walk 48 wide (as it is with
//! no scan beside it) against `BESIDE_SCAN_SEARCH` (16), alternated query by
//! query in one process on a saved large gallery, `EVICT` MiB written before
//! each query (a server's inference empties the caches in part). Random
//! unit queries are unknown faces (both looks); stored people with noise
//! about 0.17 away are known faces (the walk names them, or the scan when
//! the walk missed). Prints p50/p90 per breadth and how often the known
//! face's own entry came first.
//!
//! `cargo run --release --example beside_breadth -- INDEX [EVICT [BREADTHS
//! [NOISE]]]`, INDEX a cosine 512-d gallery's saved index, e.g. the scale
//! bench's out/gallery-scale/models/face_onnx_big/gallery/gallery.*.index;
//! BREADTHS the walks compared, e.g. `48,24,16` (default: those two); NOISE
//! the known faces' noise per value (0.1: about 0.17 away; 0.18: 0.35).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use triton_face::gallery::index::{Hit, VectorIndex, BESIDE_SCAN_SEARCH, EXPANSION_SEARCH};
use triton_face::metric::Metric;

#[path = "../benches/common/queries.rs"]
mod queries;
use queries::{noise, percentile, unit};

/// Queries of each kind per breadth.
const QUERIES: u64 = 1200;
/// Per-value noise added to a stored vector by default: about 0.17 away.
const NOISE: f32 = 0.1;

/// Milliseconds `search` took, and what it found.
fn timed(search: impl FnOnce() -> Vec<Hit>) -> (f64, Vec<Hit>) {
    let t = Instant::now();
    let hits = search();
    (t.elapsed().as_secs_f64() * 1e3, hits)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    const USAGE: &str = "usage: beside_breadth INDEX [EVICT_MIB [BREADTH,... [NOISE]]]";
    let path = PathBuf::from(args.first().expect(USAGE));
    let evict: usize = args.get(1).map_or(64, |a| a.parse().expect(USAGE));
    let index = VectorIndex::load(&path, Metric::Cosine, 512).expect("load the index");
    // The load moves the index into huge pages on another thread: let it end.
    std::thread::sleep(Duration::from_secs(25));
    let keys = index.len() as u64;
    assert!(keys >= 2, "{} holds {keys} people", path.display());
    let mut junk = vec![1u8; (evict << 20).max(64)];
    let mut evict = |seed: u64| {
        for b in junk.iter_mut().step_by(64) {
            *b = b.wrapping_add(seed as u8);
        }
    };
    let far = |hits: &[Hit]| hits.first().is_none_or(|h| h.distance > 0.5);
    let breadths: Vec<usize> = match args.get(2) {
        Some(list) => list.split(',').map(|b| b.parse().expect(USAGE)).collect(),
        None => vec![EXPANSION_SEARCH, BESIDE_SCAN_SEARCH],
    };
    let ways = breadths.len() as u64;
    let noise_per_value: f32 = args.get(3).map_or(NOISE, |n| n.parse().expect(USAGE));
    let (mut unknown, mut known) = (vec![vec![]; breadths.len()], vec![vec![]; breadths.len()]);
    let mut first = vec![0usize; breadths.len()];
    for i in 0..ways * QUERIES {
        // Each query every way in turn, each query beginning one way further
        // than the last (no way always first).
        let way = ((i % ways + i / ways) % ways) as usize;
        index.set_beside_search(breadths[way]);
        evict(i);
        let stranger = unit(noise(1_000_000 + i / ways, 512));
        let (ms, hits) = timed(|| index.nearest_then_signs(&stranger, 16, true, far).unwrap());
        assert!(far(&hits), "a random face named");
        unknown[way].push(ms);
        let key = 2 + (i / ways * 3331) % (keys - 1);
        let Some(stored) = index.vector(key) else {
            continue;
        };
        let e = noise(i / ways, stored.len());
        let face: Vec<f32> = stored
            .iter()
            .zip(&e)
            .map(|(a, b)| a + noise_per_value * b)
            .collect();
        evict(i ^ 0x55);
        let (ms, hits) = timed(|| index.nearest_then_signs(&face, 16, true, far).unwrap());
        known[way].push(ms);
        first[way] += usize::from(hits.first().map(|h| h.key) == Some(key));
    }
    for (w, breadth) in breadths.iter().enumerate() {
        let (u, k) = (&mut unknown[w], &mut known[w]);
        println!(
            "the walk {breadth} wide beside the scan: unknown p50 {:.3} p90 {:.3} ms; known p50 \
             {:.3} p90 {:.3} ms, its own entry first {}/{}",
            percentile(u, 0.5),
            percentile(u, 0.9),
            percentile(k, 0.5),
            percentile(k, 0.9),
            first[w],
            k.len()
        );
    }
}
