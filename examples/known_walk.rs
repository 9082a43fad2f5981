//! A known face's first look at a saved large gallery, in process: `nearest`
//! (the graph walk, the strays, the re-rank) for faces about 0.17 (cosine
//! distance) from a stored person, each query timed once with the caches
//! emptied before it (512 MB written, as a server's inference does between
//! two searches) and once again at once (warm). Then an unknown face's two
//! looks (`nearest`, then `nearest_by_signs`: the walk, then the scan of
//! every sign) for random unit queries, cold. Prints the p50s per round (the
//! second look also alone) and
//! how often the stored person came first.
//!
//! `cargo run --release --example known_walk -- INDEX [--ef N]`, INDEX a
//! cosine 512-d gallery's saved index, e.g. the scale bench's
//! out/gallery-scale/models/face_onnx_big/gallery/gallery.index
//! (benches/gallery_scale/run.py makes it).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use triton_face::gallery::index::VectorIndex;
use triton_face::metric::Metric;

const QUERIES: u64 = 400;
const ROUNDS: usize = 4;
/// Per-value noise added to a stored vector: about 0.17 away.
const NOISE: f32 = 0.1;
const EVICT_BYTES: usize = 512 << 20;

/// Uniform noise in -0.5..0.5 (xorshift), `dim` values.
fn noise(seed: u64, dim: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f32 / (1u64 << 53) as f32 - 0.5
    };
    (0..dim).map(|_| next()).collect()
}

fn p50(mut t: Vec<f64>) -> f64 {
    t.sort_by(|a, b| a.total_cmp(b));
    t[t.len() / 2]
}

fn unit(v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
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
    for round in 0..ROUNDS {
        let (mut cold, mut warm, mut first) = (Vec::new(), Vec::new(), 0);
        for (i, (key, q)) in queries.iter().enumerate() {
            for b in junk.iter_mut().step_by(64) {
                *b = b.wrapping_add((i + round) as u8);
            }
            let t = Instant::now();
            let hits = index.nearest(q, 1).expect("search");
            cold.push(ms(t));
            let t = Instant::now();
            std::hint::black_box(index.nearest(q, 1).expect("search"));
            warm.push(ms(t));
            first += usize::from(hits.first().map(|h| h.key) == Some(*key));
        }
        let (mut unknown, mut second) = (Vec::new(), Vec::new());
        for i in 0..QUERIES {
            for b in junk.iter_mut().step_by(64) {
                *b = b.wrapping_add((i as usize + round) as u8);
            }
            let q = unit(noise(1_000_000 + i, 512));
            let t = Instant::now();
            std::hint::black_box(index.nearest(&q, 1).expect("search"));
            let s = Instant::now();
            std::hint::black_box(index.nearest_by_signs(&q, 1).expect("search"));
            second.push(ms(s));
            unknown.push(ms(t));
        }
        println!(
            "round {round}: known cold p50 {:.3} ms, warm p50 {:.3} ms, stored person first {first}/{}; \
             unknown (both looks) cold p50 {:.3} ms, its second look {:.3} ms",
            p50(cold),
            p50(warm),
            queries.len(),
            p50(unknown),
            p50(second)
        );
    }
    std::hint::black_box(&junk);
}
