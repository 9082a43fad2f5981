//! Matching alone, on a dataset of `benches/matching/data.py`: the gallery's
//! vector index (usearch HNSW) built from `base.f32`, then one query at
//! a time on one thread. Prints one JSON row per setting (the same fields as
//! `benches/matching/faiss_bench.py`, so `make bench` joins them):
//! build and save/load time, memory, p50/p99 per query, recall@1 against
//! exact search and how often the planted row was found, and the strays
//! found at load as the gallery finds them (scanned at every graph search).
//! Rows `gallery` give what the gallery answers with each breadth as its
//! first look (`looks::look`, at the engine's usual threshold or
//! `--threshold`): the planted person named, another person named (a false
//! name), and how many queries took the second, wider look.
//!
//! `cargo run --release --example match_bench -- DATA_DIR [--ef 32,64,128]
//! [--exact-too] [--index FILE] [--wider N]` (`--wider`: the second look
//! walks the graph N wide instead of the gallery's scan of sign bits;
//! `--signs`: the sign scan also where the gallery scans exactly): with `--index FILE` a saved index is loaded
//! when it matches the data and `--m` (else built and saved there).

use std::path::{Path, PathBuf};
use std::time::Instant;

use triton_face::gallery::index::{shape, Hit, ScalarKind, Shape, VectorIndex};
use triton_face::gallery::looks::{look, Breadth, EXACT_RETRY_UP_TO};
use triton_face::metric::Metric;

struct Data {
    n: usize,
    dim: usize,
    kind: String,
    metric: Metric,
    base: Vec<f32>,
    queries: Vec<f32>,
    planted: Vec<i64>,
    exact: Vec<i64>,
    /// The person of each stored row.
    labels: Vec<i64>,
    /// Rows inserted one at a time after the others (`late.i64`, if any).
    late: Vec<i64>,
}

fn floats(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn longs(path: &Path) -> Vec<i64> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect()
}

fn load(dir: &Path) -> Data {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("meta.json")).expect("meta.json"))
            .expect("meta.json is JSON");
    let metric = match meta["metric"].as_str() {
        Some("cosine") => Metric::Cosine,
        Some("euclidean") => Metric::Euclidean,
        other => panic!("metric {other:?}"),
    };
    Data {
        n: meta["n"].as_u64().expect("n") as usize,
        dim: meta["dim"].as_u64().expect("dim") as usize,
        kind: meta["kind"].as_str().unwrap_or("?").to_string(),
        metric,
        base: floats(&dir.join("base.f32")),
        queries: floats(&dir.join("queries.f32")),
        planted: longs(&dir.join("planted.i64")),
        exact: longs(&dir.join("exact.i64")),
        labels: longs(&dir.join("labels.i64")),
        late: match dir.join("late.i64") {
            p if p.exists() => longs(&p),
            _ => Vec::new(),
        },
    }
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// As the gallery builds at load: the store's rows all at once on every
/// core, their strays counted, then the late rows one at a time (as the
/// gallery adds its folder photos, each checked as it goes in).
fn build(d: &Data, shape: Shape) -> VectorIndex {
    let index = VectorIndex::shaped(d.metric, d.dim, shape).expect("index");
    eprintln!("  {shape:?}, kernels: {}", index.acceleration());
    let late: std::collections::HashSet<u64> = d.late.iter().map(|&r| r as u64).collect();
    let row = |k: u64| &d.base[k as usize * d.dim..][..d.dim];
    let (items, keys): (Vec<(u64, &[f32])>, Vec<u64>) = (0..d.n as u64)
        .filter(|k| !late.contains(k))
        .map(|k| ((k, row(k)), k))
        .unzip();
    index.insert_all(&items, &mut |_, _| {}).expect("insert");
    index.find_strays(&keys).expect("strays");
    for &k in &d.late {
        index.insert(k as u64, row(k as u64)).expect("insert late");
    }
    index
}

/// One search breadth, measured over all queries.
struct Measured {
    p50_ms: f64,
    p99_ms: f64,
    /// The first hit is exact search's first.
    recall_at_1: f64,
    /// The first hit is the row the query was planted near.
    planted_found: f64,
    /// The first hit is of the planted row's person (what a name needs).
    person_found: f64,
    /// The largest gap between a first hit's distance and the one from its
    /// f32 vector: what the stored precision moves a reported distance by.
    distance_error: f32,
}

fn measure(d: &Data, index: &VectorIndex, exact: bool) -> Measured {
    let mut times = Vec::new();
    let (mut recall, mut planted, mut person) = (0usize, 0usize, 0usize);
    let mut distance_error = 0f32;
    let queries: Vec<&[f32]> = d.queries.chunks_exact(d.dim).collect();
    for q in queries.iter().take(50) {
        let _ = index.nearest(q, 16); // warm up
    }
    for (i, q) in queries.iter().enumerate() {
        let start = Instant::now();
        let hits = if exact {
            index.nearest_exact(q, 16)
        } else {
            index.nearest(q, 16)
        }
        .expect("search");
        times.push(start.elapsed().as_secs_f64() * 1e3);
        if let Some(h) = hits.first() {
            let row = &d.base[h.key as usize * d.dim..][..d.dim];
            distance_error = distance_error.max((d.metric.distance(row, q) - h.distance).abs());
        }
        let first = hits.first().map(|h| h.key as i64);
        recall += usize::from(first == Some(d.exact[i]));
        planted += usize::from(first == Some(d.planted[i]));
        let label = |row: i64| d.labels[row as usize];
        person += usize::from(first.map(label) == Some(label(d.planted[i])));
    }
    let (p50_ms, p99_ms) = p50_p99(times);
    let n = queries.len() as f64;
    Measured {
        p50_ms,
        p99_ms,
        recall_at_1: recall as f64 / n,
        planted_found: planted as f64 / n,
        person_found: person as f64 / n,
        distance_error,
    }
}

/// The median and the 99th percentile of `times`.
fn p50_p99(mut times: Vec<f64>) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    let at = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

/// What the gallery answers (`looks::look`: the first look, then a wider
/// one when no one is within the threshold), measured over all queries.
struct Answered {
    p50_ms: f64,
    p99_ms: f64,
    /// The planted row's person is named.
    named_right: f64,
    /// Another person is named: must stay 0.
    named_wrong: f64,
    /// Queries that took the second, wider look.
    looked_again: f64,
    /// Queries a stray proven the nearest answered, without a walk.
    proven: f64,
    /// Of those, how many were not the exact nearest row: must stay 0.
    proven_not_nearest: usize,
    /// Of the queries whose exact nearest row is within 0.8x the threshold
    /// (the goal's queries), named right; and how many there are.
    named_right_within: f64,
    within: usize,
}

/// `wider`: the second look walks the graph this wide instead of the
/// gallery's scan of sign bits (`--wider`, to compare).
/// `signs`: the sign scan even where the gallery scans exactly (`--signs`).
fn answer(
    d: &Data,
    index: &VectorIndex,
    threshold: f32,
    wider: Option<usize>,
    signs: bool,
) -> Answered {
    let label = |row: u64| d.labels[row as usize];
    let (mut times, mut right, mut wrong, mut again) = (Vec::new(), 0, 0, 0);
    let (mut proven_count, mut proven_not_nearest) = (0, 0);
    let (mut within, mut right_within) = (0usize, 0usize);
    for (i, q) in d.queries.chunks_exact(d.dim).enumerate() {
        let mut looks = 0;
        let start = Instant::now();
        // As the gallery asks (mod.rs, best_match): a stray proven the
        // nearest alone, else 16 hits (live.rs, nearest_people).
        let proven = index.proven_nearest(q, threshold).expect("search");
        proven_count += usize::from(proven.is_some());
        proven_not_nearest += usize::from(proven.is_some_and(|h| h.key != d.exact[i] as u64));
        let hits = proven
            .map(|h| Ok(vec![h]))
            .unwrap_or_else(|| {
                look(
                    d.n,
                    index.approximate(),
                    threshold,
                    |h: &Hit| h.distance,
                    |breadth| {
                        looks += 1;
                        match breadth {
                            // The two looks one after the other, counted.
                            Breadth::GraphThenSigns(within) => {
                                let first = index.nearest(q, 16)?;
                                if first.first().is_some_and(|h| h.distance <= within) {
                                    return Ok(first);
                                }
                                looks += 1;
                                match wider {
                                    Some(wide) => index.nearest_wide(q, 16, wide),
                                    None => index.nearest_by_signs(q, 16),
                                }
                            }
                            Breadth::Graph(wide) => index.nearest_wide(q, 16, wide),
                            Breadth::Exact if signs => index.nearest_by_signs(q, 16),
                            Breadth::Exact => index.nearest_exact(q, 16),
                        }
                    },
                )
            })
            .expect("search");
        times.push(start.elapsed().as_secs_f64() * 1e3);
        again += usize::from(looks > 1);
        let exact_row = &d.base[d.exact[i] as usize * d.dim..][..d.dim];
        let close = d.metric.distance(exact_row, q) <= 0.8 * threshold;
        within += usize::from(close);
        let truth = label(d.exact[i] as u64);
        if let Some(h) = hits.first().filter(|h| h.distance <= threshold) {
            let planted = label(d.planted[i] as u64);
            right += usize::from(label(h.key) == planted);
            wrong += usize::from(label(h.key) != planted);
            right_within += usize::from(close && label(h.key) == truth);
        }
    }
    let n = times.len() as f64;
    let (p50_ms, p99_ms) = p50_p99(times);
    Answered {
        p50_ms,
        p99_ms,
        named_right: right as f64 / n,
        named_wrong: wrong as f64 / n,
        looked_again: again as f64 / n,
        proven: proven_count as f64 / n,
        proven_not_nearest,
        named_right_within: right_within as f64 / within.max(1) as f64,
        within,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().expect("usage: match_bench DATA_DIR [--ef ..]"));
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .map(|i| args[i + 1].clone())
    };
    let efs: Vec<usize> = flag("--ef")
        .unwrap_or_else(|| "32,64,96,128".into())
        .split(',')
        .map(|x| x.parse().expect("--ef numbers"))
        .collect();
    let d = load(&dir);
    let ours = shape(d.metric);
    let shape = Shape {
        connectivity: flag("--m").map_or(ours.connectivity, |x| x.parse().expect("--m")),
        expansion_add: flag("--efc").map_or(ours.expansion_add, |x| x.parse().expect("--efc")),
        quantization: match flag("--quant").as_deref() {
            None => ours.quantization,
            Some("f16") => ScalarKind::F16,
            Some("bf16") => ScalarKind::BF16,
            Some("f32") => ScalarKind::F32,
            Some("i8") => ScalarKind::I8,
            Some(q) => panic!("--quant {q}: f16, bf16, f32 or i8"),
        },
    };
    let before = rss_mib();
    let t = Instant::now();
    let saved = flag("--index").map(PathBuf::from);
    let (index, build_s) = match saved
        .as_ref()
        .and_then(|p| VectorIndex::load(p, d.metric, d.dim).ok())
    {
        // usearch keeps a saved graph's own neighbours: another M is rebuilt.
        Some(index) if index.len() == d.n && index.connectivity() == shape.connectivity => {
            (index, f64::NAN)
        }
        _ => {
            let index = build(&d, shape);
            (index, t.elapsed().as_secs_f64())
        }
    };
    let mem = rss_mib() - before;
    let index_mib = index.memory() as f64 / (1024.0 * 1024.0);
    let (mut save_s, mut load_s) = (f64::NAN, f64::NAN);
    if let Some(path) = &saved {
        let t = Instant::now();
        index.save(path).expect("save");
        save_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let again = VectorIndex::load(path, d.metric, d.dim).expect("load");
        load_s = t.elapsed().as_secs_f64();
        assert_eq!(again.len(), index.len());
    }
    // As the gallery does at a load from the file: the strays, scanned at
    // every search, counted over every key (a build counted them itself).
    let t = Instant::now();
    let (strays, strays_s) = match build_s.is_nan() {
        true => {
            let keys: Vec<u64> = (0..d.n as u64).collect();
            let n = index.find_strays(&keys).expect("strays");
            (n, t.elapsed().as_secs_f64())
        }
        false => (index.stray_count(), f64::NAN),
    };
    let row = |name: &str, param: String, m: Measured| {
        println!(
            "{}",
            serde_json::json!({
                "engine": "ours", "index": name, "param": param, "n": d.n, "dim": d.dim,
                "kind": d.kind, "p50_ms": m.p50_ms, "p99_ms": m.p99_ms,
                "recall_at_1": m.recall_at_1, "planted_found": m.planted_found,
                "person_found": m.person_found, "distance_error": m.distance_error, "build_s": build_s, "save_s": save_s, "load_s": load_s,
                "mem_mib": mem, "index_mib": index_mib, "strays": strays, "strays_s": strays_s,
            })
        );
    };
    if args.iter().any(|a| a == "--exact-too") {
        row(
            "usearch-exact",
            format!("{:?} scan", shape.quantization),
            measure(&d, &index, true),
        );
    }
    // The gallery's answers, with each breadth as its first look.
    let threshold = flag("--threshold").map_or(d.metric.usual_threshold(), |x| {
        x.parse().expect("--threshold")
    });
    let wider = flag("--wider").map(|x| x.parse().expect("--wider"));
    // As the gallery looks a second time (looks.rs): an exact scan up to
    // EXACT_RETRY_UP_TO, then the sign bits (or the graph --wider wide).
    let signs = args.iter().any(|a| a == "--signs");
    let second = match wider {
        _ if d.n <= EXACT_RETRY_UP_TO => if signs { "signs" } else { "exact" }.to_string(),
        Some(wide) => format!("{wide} wide"),
        None => "signs".to_string(),
    };
    for &ef in &efs {
        index.set_expansion_search(ef);
        let a = answer(&d, &index, threshold, wider, signs);
        println!(
            "{}",
            serde_json::json!({
                "engine": "ours", "index": "gallery", "param": format!("first ef={ef}, then {second}"),
                "n": d.n, "dim": d.dim, "kind": d.kind, "threshold": threshold,
                "p50_ms": a.p50_ms, "p99_ms": a.p99_ms, "named_right": a.named_right,
                "named_wrong": a.named_wrong, "looked_again": a.looked_again, "proven": a.proven,
                "proven_not_nearest": a.proven_not_nearest,
                "named_right_within_0.8": a.named_right_within, "queries_within_0.8": a.within,
            })
        );
    }
    for ef in efs {
        index.set_expansion_search(ef);
        let name = format!(
            "usearch-hnsw{}-efc{}-{:?}",
            shape.connectivity, shape.expansion_add, shape.quantization
        );
        row(&name, format!("ef={ef}"), measure(&d, &index, false));
    }
}
