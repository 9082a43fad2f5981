//! The gallery's vectors and the search over them: a `usearch` index (HNSW
//! graph, vectors stored once, contiguously per node, as f16). Small galleries
//! are searched exactly (a scan of the same vectors), large ones through the
//! graph. Whatever the index returns is re-ranked by the full distance of our
//! own `Metric`, so an approximation can miss a candidate but never misreport
//! one's distance.
//!
//! Why f16: 1,000,000 people of 512 values take 1 GiB (f32 would take 2 GiB);
//! a distance computed from f16 values differs from the f32 one by about
//! 1e-4, far below the 3 decimals answers carry and the gaps between people.
//! i8 would clip dlib's vectors, which are not unit length.
//!
//! Strays: a node far from all others can lose every link that leads to it
//! as closer nodes arrive (HNSW prunes links for diversity), and then no
//! search finds it, however wide. Measured: a real face among a million
//! synthetic people (no link led to it). Nodes that few links lead to are
//! taken for strays: counted over the whole graph at load, and for each
//! vector inserted alone. Every graph search scans the strays too (a few
//! hundred vectors at a million: tens of microseconds).
//!
//! Concurrency: searches share a read lock; each insertion or removal takes
//! the write lock for itself alone (usearch lets a search read neighbour lists
//! while an insertion rewrites them, which is a data race), so a change blocks
//! readers for one insertion at most.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use usearch::ScalarKind;
use usearch::{Index, IndexOptions, MetricKind};

use crate::error::{Error, Result};
use crate::pipeline::Metric;

/// Up to this many vectors a query scans them all: exact, and at this size
/// about as fast as the graph (see docs/benchmarks.md, "Gallery at scale").
pub const EXACT_UP_TO: usize = 20_000;
/// HNSW parameters: neighbours per node, and the breadth of the search when
/// inserting and when querying (measured in the matching bench).
const CONNECTIVITY: usize = 16;
const EXPANSION_ADD: usize = 64;
pub const EXPANSION_SEARCH: usize = 128;
/// A node that at most this many base-level links lead to is a stray (the
/// average is 2 x CONNECTIVITY); at most this many strays, fewest links
/// first (scanning them costs about 2 ms at the limit).
const FEW_LINKS_IN: u32 = 4;
/// A node with at most SOME_LINKS_IN links in is a stray too when it is
/// isolated: its nearest neighbour ISOLATED times as far as a typical
/// node's, measured on SAMPLE nodes. A query near it is far from all the
/// others, so no step of a search leads towards it (a loner with 5 or 6
/// links in was missed in the unit test).
const SOME_LINKS_IN: u32 = 8;
const ISOLATED: f32 = 2.0;
const SAMPLE: usize = 1000;
const MAX_STRAYS: usize = 10_000;
/// Search contexts: concurrent queries beyond this many fail (UNAVAILABLE).
const SEARCH_THREADS: usize = 64;
/// The first capacity; it doubles as the gallery grows.
const FIRST_CAPACITY: usize = 1024;

/// One candidate: the entry's key and its full distance to the query.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub key: u64,
    pub distance: f32,
}

pub struct VectorIndex {
    inner: RwLock<Index>,
    /// Keys no graph search can reach (see `find_strays`), scanned at every
    /// search; changed only under `inner`'s write lock.
    strays: RwLock<Vec<u64>>,
    /// A typical node's distance to its nearest neighbour (f32 bits; 0
    /// until `find_strays` measured it).
    typical_nearest: AtomicU32,
    metric: Metric,
    dim: usize,
    exact_up_to: usize,
}

/// The graph's shape: neighbours per node, breadth of an insertion.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub connectivity: usize,
    pub expansion_add: usize,
    pub quantization: ScalarKind,
}

pub const SHAPE: Shape = Shape {
    connectivity: CONNECTIVITY,
    expansion_add: EXPANSION_ADD,
    quantization: ScalarKind::F16,
};

fn options(metric: Metric, dim: usize) -> IndexOptions {
    options_shaped(metric, dim, SHAPE)
}

fn options_shaped(metric: Metric, dim: usize, shape: Shape) -> IndexOptions {
    IndexOptions {
        dimensions: dim,
        metric: metric_kind(metric),
        quantization: shape.quantization,
        connectivity: shape.connectivity,
        expansion_add: shape.expansion_add,
        expansion_search: EXPANSION_SEARCH,
        multi: false,
    }
}

fn metric_kind(metric: Metric) -> MetricKind {
    match metric {
        Metric::Cosine => MetricKind::Cos,
        Metric::Euclidean => MetricKind::L2sq,
    }
}

impl VectorIndex {
    pub fn new(metric: Metric, dim: usize) -> Result<Self> {
        Self::shaped(metric, dim, SHAPE)
    }

    /// An empty index of another shape (the bench compares shapes).
    pub fn shaped(metric: Metric, dim: usize, shape: Shape) -> Result<Self> {
        let opts = options_shaped(metric, dim, shape);
        let index = Index::new(&opts).map_err(|e| failed("create", e))?;
        index
            .reserve_capacity_and_threads(FIRST_CAPACITY, threads())
            .map_err(|e| failed("reserve", e))?;
        Ok(Self::around(index, metric, dim))
    }

    fn around(index: Index, metric: Metric, dim: usize) -> Self {
        VectorIndex {
            inner: RwLock::new(index),
            strays: RwLock::new(Vec::new()),
            typical_nearest: AtomicU32::new(0),
            metric,
            dim,
            exact_up_to: EXACT_UP_TO,
        }
    }

    /// An index saved by `save`; an error when the file is not one of
    /// `metric` and `dim` vectors in f16.
    pub fn load(path: &Path, metric: Metric, dim: usize) -> Result<Self> {
        let shown = path.display();
        let path_str = path
            .to_str()
            .ok_or_else(|| failed("load", "path is not UTF-8"))?;
        let meta =
            Index::metadata(path_str).map_err(|e| failed("load", format!("{shown}: {e}")))?;
        let ours = options(metric, dim);
        if meta.dimensions != dim as u64
            || meta.metric != ours.metric
            || meta.quantization != ours.quantization
            || meta.multi
        {
            return Err(failed(
                "load",
                format!("{shown} holds another kind of index"),
            ));
        }
        let index = Index::new(&ours).map_err(|e| failed("create", e))?;
        index
            .load(path_str)
            .map_err(|e| failed("load", format!("{shown}: {e}")))?;
        let capacity = index.size().max(FIRST_CAPACITY);
        index
            .reserve_capacity_and_threads(capacity, threads())
            .map_err(|e| failed("reserve", e))?;
        Ok(Self::around(index, metric, dim))
    }

    /// Write the index to `path` (searches go on; changes wait).
    pub fn save(&self, path: &Path) -> Result<()> {
        let path_str = path
            .to_str()
            .ok_or_else(|| failed("save", "path is not UTF-8"))?;
        self.read()
            .save(path_str)
            .map_err(|e| failed("save", format!("{}: {e}", path.display())))
    }

    /// The SIMD kernels usearch runs on this CPU.
    pub fn acceleration(&self) -> String {
        self.read().hardware_acceleration()
    }

    /// How broad a graph search is (the bench sweeps it).
    pub fn set_expansion_search(&self, n: usize) {
        self.write().change_expansion_search(n);
    }

    /// Scan up to `n` vectors instead of searching the graph (tests, bench).
    pub fn with_exact_up_to(mut self, n: usize) -> Self {
        self.exact_up_to = n;
        self
    }

    // A panic while a lock was held leaves usearch as consistent as its own
    // calls leave it (each returns or throws whole): poisoned locks are used.
    fn read(&self) -> RwLockReadGuard<'_, Index> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Index> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn len(&self) -> usize {
        self.read().size()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a query walks the graph (and may miss) rather than scanning.
    pub fn approximate(&self) -> bool {
        self.len() > self.exact_up_to
    }

    /// Bytes the index holds (vectors, graph, lookup tables).
    pub fn memory(&self) -> usize {
        self.read().memory_usage()
    }

    /// Add `vector` under `key`; `false` when the key is there already.
    pub fn insert(&self, key: u64, vector: &[f32]) -> Result<bool> {
        self.check(vector)?;
        let index = self.write();
        if index.contains(key) {
            return Ok(false);
        }
        if index.size() + 1 > index.capacity() {
            let grown = (index.capacity() * 2).max(FIRST_CAPACITY);
            index
                .reserve_capacity_and_threads(grown, threads())
                .map_err(|e| failed("grow", e))?;
        }
        index.add(key, vector).map_err(|e| failed("insert", e))?;
        if index.size() > self.exact_up_to && self.is_stray(&index, key, links_back(&index, key)) {
            let mut strays = self.strays_mut();
            if strays.len() < MAX_STRAYS {
                strays.push(key);
            }
        }
        Ok(true)
    }

    /// Find the strays among `keys` (every key the index holds): the nodes
    /// that at most `FEW_LINKS_IN` base-level links lead to (at a million
    /// clustered people 232 nodes, among them the real face no search
    /// found), fewest first, at most `MAX_STRAYS`. How many. One pass over
    /// the links: about 3 s at a million on 2 cores.
    pub fn find_strays(&self, keys: &[u64]) -> usize {
        let index = self.read();
        let mut strays = self.strays_mut();
        strays.clear();
        if keys.len() <= self.exact_up_to {
            return 0;
        }
        let links_in = links_in(&index, keys);
        let step = keys.len().div_ceil(SAMPLE).max(1);
        let sampled: Vec<u64> = keys.iter().step_by(step).copied().collect();
        let mut sample: Vec<f32> = self
            .nearest_links(&index, &sampled)
            .into_iter()
            .flatten()
            .collect();
        sample.sort_unstable_by(f32::total_cmp);
        let typical = sample.get(sample.len() / 2).copied().unwrap_or(0.0);
        self.typical_nearest
            .store(typical.to_bits(), Ordering::Relaxed);
        // Only nodes with few links in can be strays: their distances, on
        // every core.
        // (links in, key)
        type Linked = Vec<(u32, u64)>;
        let (mut few, some): (Linked, Linked) = keys
            .iter()
            .zip(&links_in)
            .filter(|(_, &n)| n <= SOME_LINKS_IN)
            .map(|(&k, &n)| (n, k))
            .partition(|&(n, _)| n <= FEW_LINKS_IN);
        let some_keys: Vec<u64> = some.iter().map(|&(_, k)| k).collect();
        let isolated = self.nearest_links(&index, &some_keys);
        few.extend(
            some.into_iter()
                .zip(isolated)
                .filter(|(_, d)| typical > 0.0 && d.is_some_and(|d| d > ISOLATED * typical))
                .map(|(nk, _)| nk),
        );
        few.sort_unstable();
        strays.extend(few.iter().take(MAX_STRAYS).map(|&(_, k)| k));
        strays.len()
    }

    /// Whether `key`, which `links` base-level links lead to, is a stray.
    fn is_stray(&self, index: &Index, key: u64, links: u32) -> bool {
        if links <= FEW_LINKS_IN {
            return true;
        }
        let typical = f32::from_bits(self.typical_nearest.load(Ordering::Relaxed));
        links <= SOME_LINKS_IN
            && typical > 0.0
            && self
                .nearest_link(index, key)
                .is_some_and(|d| d > ISOLATED * typical)
    }

    /// The distance from `key` to the nearest of its base-level neighbours.
    fn nearest_link(&self, index: &Index, key: u64) -> Option<f32> {
        self.nearest_links(index, &[key]).pop().flatten()
    }

    /// `nearest_link` of each of `keys`, on every core.
    fn nearest_links(&self, index: &Index, keys: &[u64]) -> Vec<Option<f32>> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = keys.len().div_ceil(cores).max(1);
        std::thread::scope(|scope| {
            let workers: Vec<_> = keys
                .chunks(chunk)
                .map(|part| {
                    let worker = scope.spawn(move || self.nearest_links_of(index, part));
                    (part.len(), worker)
                })
                .collect();
            // A worker that failed gives no distances, in their places.
            workers
                .into_iter()
                .flat_map(|(len, w)| w.join().unwrap_or_else(|_| vec![None; len]))
                .collect()
        })
    }

    fn nearest_links_of(&self, index: &Index, keys: &[u64]) -> Vec<Option<f32>> {
        let (mut own, mut other) = (vec![0.0f32; self.dim], vec![0.0f32; self.dim]);
        let mut links = vec![0u64; 4 * CONNECTIVITY];
        keys.iter()
            .map(|&key| {
                index.get(key, &mut own).ok().filter(|&n| n == 1)?;
                let n = index.neighbors(key, 0).drain_into(&mut links);
                links[..n]
                    .iter()
                    .filter_map(|&k| match index.get(k, &mut other) {
                        Ok(1) => Some(self.metric.distance(&own, &other)),
                        _ => None,
                    })
                    .min_by(f32::total_cmp)
            })
            .collect()
    }

    fn strays_mut(&self) -> RwLockWriteGuard<'_, Vec<u64>> {
        self.strays.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Add many vectors at once, on every core, before anyone searches (a
    /// load): usearch's own concurrent insertion, under one write lock. Keys
    /// present already are passed over. How many were added.
    pub fn insert_all(&self, items: &[(u64, &[f32])]) -> Result<usize> {
        items.iter().try_for_each(|(_, v)| self.check(v))?;
        let index = self.write();
        let wanted = index.size() + items.len();
        if wanted > index.capacity() {
            index
                .reserve_capacity_and_threads(wanted, threads())
                .map_err(|e| failed("grow", e))?;
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = items.len().div_ceil(cores).max(1);
        let index = &*index;
        let added: Result<Vec<usize>> = std::thread::scope(|scope| {
            let workers: Vec<_> = items
                .chunks(chunk)
                .map(|part| scope.spawn(move || insert_part(index, part)))
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err(failed("insert", "a thread panicked")))
                })
                .collect()
        });
        Ok(added?.into_iter().sum())
    }

    pub fn contains(&self, key: u64) -> bool {
        self.read().contains(key)
    }

    /// Remove `key`'s vector (nothing when it is not there).
    pub fn remove(&self, key: u64) -> Result<()> {
        let index = self.write();
        index.remove(key).map_err(|e| failed("remove", e))?;
        self.strays_mut().retain(|&k| k != key);
        Ok(())
    }

    /// The vector stored under `key` (as stored: f16, widened).
    pub fn vector(&self, key: u64) -> Option<Vec<f32>> {
        let mut out = vec![0.0f32; self.dim];
        match self.read().get(key, &mut out) {
            Ok(1) => Some(out),
            _ => None,
        }
    }

    /// About `count` entries nearest to `query`, nearest first, each with
    /// its full distance.
    pub fn nearest(&self, query: &[f32], count: usize) -> Result<Vec<Hit>> {
        self.search(query, count, None)
    }

    /// The `count` entries nearest to `query` by a scan of them all.
    pub fn nearest_exact(&self, query: &[f32], count: usize) -> Result<Vec<Hit>> {
        self.search(query, count, Some(true))
    }

    fn search(&self, query: &[f32], count: usize, exact: Option<bool>) -> Result<Vec<Hit>> {
        self.check(query)?;
        let index = self.read();
        if index.size() == 0 || count == 0 {
            return Ok(Vec::new());
        }
        let exact = exact.unwrap_or(index.size() <= self.exact_up_to);
        let found = if exact {
            index.exact_search(query, count)
        } else {
            index.search(query, count)
        }
        .map_err(|e| failed("search", e))?;
        let mut keys = found.keys;
        if !exact {
            keys.extend(self.strays.read().unwrap_or_else(|e| e.into_inner()).iter());
            keys.sort_unstable();
            keys.dedup();
        }
        let mut stored = vec![0.0f32; self.dim];
        let mut hits = Vec::with_capacity(keys.len());
        for &key in &keys {
            if let Ok(1) = index.get(key, &mut stored) {
                let distance = self.metric.distance(&stored, query);
                hits.push(Hit { key, distance });
            }
        }
        hits.sort_by(|a, b| a.distance.total_cmp(&b.distance));
        Ok(hits)
    }

    fn check(&self, vector: &[f32]) -> Result<()> {
        check_length(vector, self.dim)
    }
}

/// An embedding of another length than the gallery's is a bug upstream.
pub fn check_length(vector: &[f32], dim: usize) -> Result<()> {
    if vector.len() != dim {
        return Err(Error::internal(format!(
            "embedding has {} values, the gallery holds {dim}",
            vector.len()
        )));
    }
    Ok(())
}

/// How many base-level links lead to each of `keys`, counted on every core.
fn links_in(index: &Index, keys: &[u64]) -> Vec<u32> {
    let slot: HashMap<u64, usize> = keys.iter().enumerate().map(|(i, &k)| (k, i)).collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = keys.len().div_ceil(cores).max(1);
    let counts: Vec<Vec<u32>> = std::thread::scope(|scope| {
        let workers: Vec<_> = keys
            .chunks(chunk)
            .map(|part| {
                let slot = &slot;
                scope.spawn(move || {
                    let mut count = vec![0u32; slot.len()];
                    let mut links = vec![0u64; 4 * CONNECTIVITY];
                    for &key in part {
                        let n = index.neighbors(key, 0).drain_into(&mut links);
                        for k in &links[..n] {
                            if let Some(&j) = slot.get(k) {
                                count[j] += 1;
                            }
                        }
                    }
                    count
                })
            })
            .collect();
        workers.into_iter().filter_map(|w| w.join().ok()).collect()
    });
    let mut total = vec![0u32; keys.len()];
    for c in counts {
        total.iter_mut().zip(c).for_each(|(t, n)| *t += n);
    }
    total
}

/// How many of `key`'s own base-level neighbours link back to it: the links
/// that lead to a node just inserted.
fn links_back(index: &Index, key: u64) -> u32 {
    let mut links = vec![0u64; 4 * CONNECTIVITY];
    let n = index.neighbors(key, 0).drain_into(&mut links);
    let mut back = vec![0u64; 4 * CONNECTIVITY];
    links[..n]
        .iter()
        .filter(|&&k| {
            let m = index.neighbors(k, 0).drain_into(&mut back);
            back[..m].contains(&key)
        })
        .count() as u32
}

fn insert_part(index: &Index, part: &[(u64, &[f32])]) -> Result<usize> {
    let mut added = 0;
    for &(key, vector) in part {
        if !index.contains(key) {
            index.add(key, vector).map_err(|e| failed("insert", e))?;
            added += 1;
        }
    }
    Ok(added)
}

fn threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    SEARCH_THREADS.max(4 * cores)
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::unavailable(format!("gallery index: {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(seed: u64, dim: usize) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let v: Vec<f32> = (0..dim)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect();
        let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        v.into_iter().map(|a| a / n).collect()
    }

    #[test]
    fn finds_each_vector_at_its_full_distance() {
        for exact_up_to in [usize::MAX, 0] {
            found_exactly_or_through_the_graph(exact_up_to);
        }
    }

    fn found_exactly_or_through_the_graph(exact_up_to: usize) {
        let index = VectorIndex::new(Metric::Cosine, 64)
            .unwrap()
            .with_exact_up_to(exact_up_to);
        for k in 0..3000u64 {
            assert!(index.insert(k, &unit(k, 64)).unwrap());
        }
        assert!(
            !index.insert(7, &unit(7, 64)).unwrap(),
            "a key goes in once"
        );
        assert_eq!(index.len(), 3000);
        for k in [0u64, 1234, 2999] {
            let hits = index.nearest(&unit(k, 64), 4).unwrap();
            assert_eq!(hits[0].key, k);
            assert!(hits[0].distance < 1e-3, "{hits:?}");
            let full = Metric::Cosine.distance(&unit(k, 64), &unit(hits[1].key, 64));
            assert!((hits[1].distance - full).abs() < 2e-3, "{hits:?} {full}");
            assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
        }
        index.remove(1234).unwrap();
        assert_ne!(index.nearest(&unit(1234, 64), 4).unwrap()[0].key, 1234);
        assert_eq!(index.vector(1234), None);
        assert_eq!(index.len(), 2999);
    }

    /// A random unit vector, each value hashed on its own (splitmix64):
    /// `unit`'s values of nearby seeds are alike.
    fn random_unit(seed: u64, dim: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dim as u64)
            .map(|i| {
                let mut z = (seed << 20 ^ i).wrapping_add(0x9E37_79B9_7F4A_7C15);
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect();
        let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        v.into_iter().map(|a| a / n).collect()
    }

    /// A vector close to `centre`: most of it is the centre.
    fn near(centre: &[f32], seed: u64) -> Vec<f32> {
        let noise = random_unit(seed, centre.len());
        let v: Vec<f32> = centre
            .iter()
            .zip(&noise)
            .map(|(c, n)| c + 0.3 * n)
            .collect();
        let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
        v.into_iter().map(|a| a / n).collect()
    }

    #[test]
    fn a_vector_far_from_all_others_is_still_found() {
        // The loner goes in first: the crowd that follows prunes the links
        // to it (the case measured with a real face among a million).
        let dim = 64;
        let centre = unit(1, dim);
        let loner: Vec<f32> = centre.iter().map(|c| -c).collect();
        let index = VectorIndex::new(Metric::Cosine, dim)
            .unwrap()
            .with_exact_up_to(100);
        index.insert(0, &loner).unwrap();
        let crowd: Vec<(u64, Vec<f32>)> = (1..5000u64).map(|k| (k, near(&centre, k))).collect();
        let items: Vec<(u64, &[f32])> = crowd.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        index.insert_all(&items).unwrap();
        let keys: Vec<u64> = (0..5000).collect();
        let strays = index.find_strays(&keys);
        assert!(strays < 50, "{strays} strays in a well-linked crowd");
        let hits = index.nearest(&near(&loner, 9), 4).unwrap();
        assert_eq!(hits[0].key, 0, "{hits:?}, {strays} strays");
        // Inserted one at a time after the crowd: checked as it goes in.
        let other: Vec<f32> = near(&loner, 10).iter().map(|x| -x * 0.5 + 0.1).collect();
        index.insert(9999, &other).unwrap();
        assert_eq!(index.nearest(&other, 1).unwrap()[0].key, 9999);
        index.remove(0).unwrap();
        assert_ne!(index.nearest(&loner, 1).unwrap()[0].key, 0);
    }

    #[test]
    fn euclidean_distances_are_plain() {
        let index = VectorIndex::new(Metric::Euclidean, 2).unwrap();
        index.insert(1, &[0.0, 0.0]).unwrap();
        index.insert(2, &[3.0, 4.0]).unwrap();
        let hits = index.nearest(&[3.0, 0.0], 2).unwrap();
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].key, 1);
        assert!((hits[0].distance - 3.0).abs() < 1e-3);
        assert!((hits[1].distance - 4.0).abs() < 1e-3);
        assert!(
            index.nearest(&[1.0], 1).is_err(),
            "a wrong length is refused"
        );
    }
}
