//! A known face's first look at a saved large gallery, in process: `nearest`
//! (the graph walk, the strays, the re-rank) for faces about 0.17 (cosine
//! distance) from a stored person, each query timed with the caches emptied
//! before it (512 MB written; on a VM that also pushes the index out
//! beyond the caches, so a read costs more than in a server: see
//! docs/benchmarks.md, "This VM's memory"), in turn alone and with the
//! second look's scan begun beside it (`nearest_then_signs`), and once
//! again at once (warm). Then an unknown face's two
//! looks (`nearest_then_signs`: the walk, then the scan of every sign) for
//! random unit queries, cold, in turn one after the other and with the
//! scan begun beside the walk. Prints the p50s per round and how often the
//! stored person came first.
//!
//! `cargo run --release --example known_walk -- INDEX [--ef N]`, INDEX a
//! cosine 512-d gallery's saved index, e.g. the scale bench's
//! out/gallery-scale/models/face_onnx_big/gallery/gallery.*.index
//! (benches/gallery_scale/run.py makes it).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use triton_face::gallery::index::{Hit, VectorIndex};
use triton_face::metric::Metric;

#[path = "../benches/common/queries.rs"]
mod queries;
use queries::{noise, percentile, unit};

const QUERIES: u64 = 400;
const ROUNDS: usize = 4;
/// Per-value noise added to a stored vector: about 0.17 away.
const NOISE: f32 = 0.1;
const EVICT_BYTES: usize = 512 << 20;

fn p50(mut t: Vec<f64>) -> f64 {
    percentile(&mut t, 0.5)
}

/// Whether the `i`-th search (two per query) begins its scan beside: each
/// query is asked both ways, every other one that way first (a second
/// search of a query finds some of it still cached).
fn beside(i: usize) -> bool {
    (i % 2 == 1) != (i / 2 % 2 == 1)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    const USAGE: &str = "usage: known_walk INDEX [--ef N]";
    let path = PathBuf::from(args.first().filter(|a| !a.starts_with("--")).expect(USAGE));
    let index = VectorIndex::load(&path, Metric::Cosine, 512).expect("load the index");
    if let Some(at) = args.iter().position(|a| a == "--ef") {
        let ef = args.get(at + 1).and_then(|n| n.parse().ok());
        index.set_expansion_search(ef.expect(USAGE));
    }
    // The load moves the index into huge pages on another thread: let it end.
    std::thread::sleep(Duration::from_secs(25));
    let keys = index.len() as u64;
    assert!(
        keys >= 2,
        "{} holds {keys} people: a large gallery wanted",
        path.display()
    );
    let queries: Vec<(u64, Vec<f32>)> = (0..QUERIES)
        .filter_map(|i| {
            let key = 2 + (i * 3331) % (keys - 1);
            let stored = index.vector(key)?;
            let e = noise(i, stored.len());
            Some((
                key,
                stored.iter().zip(&e).map(|(a, b)| a + NOISE * b).collect(),
            ))
        })
        .collect();
    assert!(
        !queries.is_empty(),
        "no stored person under keys 2..={keys}"
    );
    let mut junk = vec![1u8; EVICT_BYTES];
    let far = |hits: &[Hit]| hits.first().is_none_or(|h| h.distance > 0.5);
    for round in 0..ROUNDS {
        let (mut cold, mut warm, mut first) = ([Vec::new(), Vec::new()], Vec::new(), 0);
        for i in 0..2 * queries.len() {
            let (key, q) = &queries[i / 2];
            for b in junk.iter_mut().step_by(64) {
                *b = b.wrapping_add((i + round) as u8);
            }
            let early = beside(i);
            let t = Instant::now();
            let hits = index.nearest_then_signs(q, 16, early, far).expect("search");
            cold[usize::from(early)].push(ms(t));
            first += usize::from(hits.first().map(|h| h.key) == Some(*key));
            if !early {
                let t = Instant::now();
                std::hint::black_box(index.nearest(q, 16).expect("search"));
                warm.push(ms(t));
            }
        }
        let [cold, cold_beside] = cold;
        let mut unknown = [Vec::new(), Vec::new()];
        for i in 0..2 * QUERIES {
            for b in junk.iter_mut().step_by(64) {
                *b = b.wrapping_add((i as usize + round) as u8);
            }
            let q = unit(noise(1_000_000 + i / 2, 512));
            let early = beside(i as usize);
            let t = Instant::now();
            let hits = index.nearest_then_signs(&q, 16, early, far);
            unknown[usize::from(early)].push(ms(t));
            assert!(far(&hits.expect("search")), "a random face named");
        }
        let [after, beside] = unknown;
        println!(
            "round {round}: known cold p50 {:.3} ms, {:.3} ms with a scan begun beside, warm p50 {:.3} ms, \
             stored person first {first}/{}; unknown (both looks) cold p50 {:.3} ms one after the \
             other, {:.3} ms the scan beside the walk",
            p50(cold),
            p50(cold_beside),
            p50(warm),
            2 * queries.len(),
            p50(after),
            p50(beside)
        );
    }
    std::hint::black_box(&junk);
}
