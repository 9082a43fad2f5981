//! The gallery's vectors and the search over them: a `usearch` index (HNSW
//! graph, vectors stored once, contiguously per node). Small galleries are
//! searched exactly (a scan of the same vectors), large ones through the
//! graph. Whatever the index returns is re-ranked by the full distance of our
//! own `Metric`, so an approximation can miss a candidate but never misreport
//! one's distance.
//!
//! Precision: cosine galleries hold a byte and a half per value (`split.rs`),
//! 732 MiB for 1,000,000 people of 512 values (f32 would take 2 GiB): the
//! graph walks i8 (usearch's fastest kernel) and the re-rank restores each
//! candidate to within 2.9e-4 per value (a distance moves by at most about
//! 5e-4). Euclidean galleries (dlib's vectors, not unit length, which i8
//! would turn into directions) hold f16: a distance from f16 values differs
//! from the f32 one by about 1e-4. Both are far below the gaps between
//! people.
//!
//! Strays: a node far from all others can lose every link that leads to it
//! as closer nodes arrive (HNSW prunes links for diversity), and then no
//! search finds it, however wide. And a node whose links all lead far away
//! sits where no walk goes: a query near it is far from everything else, so
//! the walk ends among the many nodes about equally far from it, and none
//! of those needs to link to it. Measured: real faces among a million
//! synthetic people, found or not depending on the build. Nodes that few
//! links lead to, and isolated nodes (most of their links longer than
//! nearly every node's: the gallery's own tail, not a fixed factor, since
//! cosine distances crowd below 1), are taken for strays: found over the
//! whole graph at load, and checked for each vector inserted alone. Every
//! graph search scans the strays too (a few hundred vectors at a million:
//! tens of microseconds).
//!
//! Concurrency: searches share a read lock; each insertion or removal takes
//! the write lock for itself alone (usearch lets a search read neighbour lists
//! while an insertion rewrites them, which is a data race), so a change blocks
//! readers for one insertion at most.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::ops::Deref;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;

pub use usearch::ScalarKind;
use usearch::{Index, IndexOptions, MetricKind};

use super::apart::{self, WINDOW_KEYS};
use super::huge_pages::Deferred;
use super::looks::WIDER_SEARCH;
use super::share::with_helpers;
use super::split::{self, Fine};
use super::strays::Strays;
use crate::error::{Error, Result};
use crate::pipeline::Metric;

/// Up to this many vectors a query scans them all: exact, and at this size
/// about as fast as the graph (see docs/benchmarks.md, "Gallery at scale").
pub const EXACT_UP_TO: usize = 20_000;
/// HNSW parameters: neighbours per node, and the breadth of the search when
/// inserting and when querying (measured in the matching bench). A query's
/// first look is narrow: a face it names no one for is looked for again,
/// wider (`looks.rs`). At a million, 48 wide finds the nearest for 92% at
/// the first look and the second brings it to all 1,000 planted queries;
/// per known face that costs less on average than 32 (more second looks)
/// or 64 (a wider first). 24 neighbours rather than 16: at a million the
/// walk finds the nearest at 0.947 with 64 wide (16: 0.857) for about
/// 64 MB more at a million (docs/benchmarks.md, "Matching"). A saved index
/// keeps the neighbours it was built with (usearch reads them from the
/// file).
const CONNECTIVITY: usize = 24;
const EXPANSION_ADD: usize = 128;
pub const EXPANSION_SEARCH: usize = 48;
/// A node that at most connectivity x this many base-level links lead to
/// is a stray (4 with 16 neighbours, 6 with 24; the average is twice the
/// connectivity); at most MAX_STRAYS strays, fewest links first (scanning
/// them costs about 2 ms at the limit).
const FEW_LINKS_IN_PER_NEIGHBOUR: f32 = 0.25;
/// A node is a stray too when it is isolated, however many links lead to
/// it: the median length of its base-level links is beyond all but
/// ISOLATED_SHARE of the nodes' (measured on SAMPLE nodes). A query near it
/// is far from all the others, so no step of a search leads towards it
/// (real faces among synthetic people were missed so, with links in; and a
/// few photos of one person form a clique whose links out are all long, so
/// the median, not the nearest, tells). The share is the gallery's own
/// tail: cosine distances between strangers crowd at 0.6-1.0 in any large
/// gallery, where a fixed factor over the typical one said nothing.
const ISOLATED_SHARE: f64 = 0.001;
const SAMPLE: usize = 10_000;
const MAX_STRAYS: usize = 10_000;
/// `changed_since_count` before the strays were ever counted.
const NEVER_COUNTED: u64 = u64::MAX;
/// Strays recorded though this many vectors changed since their count (or
/// 1% of the vectors, if more): `strays_to_save`.
const STALE_STRAYS_MIN: u64 = 1_000;
/// Search contexts: concurrent queries beyond this many fail (UNAVAILABLE).
const SEARCH_THREADS: usize = 64;
/// The first capacity; it doubles as the gallery grows.
const FIRST_CAPACITY: usize = 1024;
/// How often a bulk insertion reports its progress.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// An exact scan of i8 vectors re-ranks this many more than asked for.
const RERANK_MORE: usize = 32;
/// The second look re-ranks this many nearest by sign bits: a face within
/// 0.8x the threshold of its match stays among them against a million
/// uniform strangers by more than 6 standard deviations (signs.rs).
const SIGN_CANDIDATES: usize = 256;
/// Re-ranks of this many keys or more are shared with a helper thread: each
/// key's vector is fetched under usearch's lock, its cache misses waited for
/// one key after another (the second look's 257 took 0.70 ms on one core in
/// the server, 0.47 shared). A first look's 48 to 64 stay on one core: a
/// known face leaves the other core to other requests.
const RERANK_SHARED_FROM: usize = 128;
/// Keys a thread claims at a time in a shared re-rank.
const RERANK_PIECE: usize = 32;

/// One candidate: the entry's key and its full distance to the query.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub key: u64,
    pub distance: f32,
}

pub struct VectorIndex {
    inner: RwLock<Graph>,
    /// Keys no graph search can reach (see `find_strays`), scanned at every
    /// search; changed only under `inner`'s write lock.
    strays: RwLock<Strays>,
    /// Beyond this median link length a node is isolated (f32 bits; 0
    /// until `find_strays` measured it).
    isolated_above: AtomicU32,
    /// Vectors inserted or removed since `strays` were counted (each may
    /// cut links that led to other nodes); 0: counted over the graph as it
    /// is; NEVER_COUNTED before the first count.
    changed_since_count: AtomicU64,
    metric: Metric,
    dim: usize,
    exact_up_to: usize,
    /// The thread moving a loaded index into huge pages (`huge_pages.rs`).
    collapsing: Option<JoinHandle<()>>,
}

/// The graph's shape: neighbours per node, breadth of an insertion.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub connectivity: usize,
    pub expansion_add: usize,
    pub quantization: ScalarKind,
}

/// The gallery's shape: i8 split for cosine, f16 for Euclidean (see above).
pub fn shape(metric: Metric) -> Shape {
    Shape {
        connectivity: CONNECTIVITY,
        expansion_add: EXPANSION_ADD,
        quantization: match metric {
            Metric::Cosine => ScalarKind::I8,
            Metric::Euclidean => ScalarKind::F16,
        },
    }
}

fn options_shaped(metric: Metric, dim: usize, shape: Shape) -> Result<IndexOptions> {
    let kind = match (metric, shape.quantization) {
        // Split vectors are unit length: the inner product ranks them.
        (Metric::Cosine, ScalarKind::I8) => MetricKind::IP,
        (Metric::Cosine, _) => MetricKind::Cos,
        (Metric::Euclidean, ScalarKind::I8) => {
            return Err(failed(
                "create",
                "i8 keeps directions only: not for Euclidean",
            ))
        }
        (Metric::Euclidean, _) => MetricKind::L2sq,
    };
    Ok(IndexOptions {
        dimensions: dim,
        metric: kind,
        quantization: shape.quantization,
        connectivity: shape.connectivity,
        expansion_add: shape.expansion_add,
        expansion_search: EXPANSION_SEARCH,
        multi: false,
    })
}

/// usearch's index and, for split vectors, their fine bytes: one lock
/// guards both.
struct Graph {
    index: Index,
    fine: Option<Fine>,
}

impl Deref for Graph {
    type Target = Index;
    fn deref(&self) -> &Index {
        &self.index
    }
}

impl Graph {
    /// Add `vector` under `key` (split first when the index is i8; its fine
    /// bytes are put by the caller, who holds the write lock).
    fn add(&self, key: u64, vector: &[f32], coarse: &mut [i8], fine: &mut [u8]) -> Result<()> {
        let added = match self.fine {
            Some(_) => {
                split::split(vector, coarse, fine);
                self.index.add(key, coarse)
            }
            None => self.index.add(key, vector),
        };
        added.map_err(|e| failed("insert", e))
    }

    /// `key`'s vector as stored (split ones restored); false when absent.
    fn full(&self, key: u64, out: &mut [f32], coarse: &mut [i8]) -> bool {
        match &self.fine {
            None => matches!(self.index.get(key, out), Ok(1)),
            Some(fine) => match (self.index.get(key, coarse), fine.get(key)) {
                (Ok(1), Some(f)) => {
                    split::join(coarse, f, out);
                    true
                }
                _ => false,
            },
        }
    }
}

/// The move into huge pages joined before the index goes (an unload may
/// take this library's code away after it).
impl Drop for VectorIndex {
    fn drop(&mut self) {
        if let Some(thread) = self.collapsing.take() {
            let _ = thread.join();
        }
    }
}

impl VectorIndex {
    pub fn new(metric: Metric, dim: usize) -> Result<Self> {
        Self::shaped(metric, dim, shape(metric))
    }

    /// An empty index of another shape (the bench compares shapes).
    pub fn shaped(metric: Metric, dim: usize, shape: Shape) -> Result<Self> {
        let opts = options_shaped(metric, dim, shape)?;
        let index = Index::new(&opts).map_err(|e| failed("create", e))?;
        index
            .reserve_capacity_and_threads(FIRST_CAPACITY, threads())
            .map_err(|e| failed("reserve", e))?;
        let fine = (shape.quantization == ScalarKind::I8).then(|| Fine::new(dim));
        Self::around(Graph { index, fine }, metric, dim, &opts)
    }

    fn around(graph: Graph, metric: Metric, dim: usize, opts: &IndexOptions) -> Result<Self> {
        Ok(VectorIndex {
            inner: RwLock::new(graph),
            strays: RwLock::new(Strays::new(opts, threads())?),
            isolated_above: AtomicU32::new(0),
            changed_since_count: AtomicU64::new(NEVER_COUNTED),
            metric,
            dim,
            exact_up_to: EXACT_UP_TO,
            collapsing: None,
        })
    }

    /// An index saved by `save`; an error when the file is not one of
    /// `metric` and `dim` vectors in this build's shape.
    pub fn load(path: &Path, metric: Metric, dim: usize) -> Result<Self> {
        let shown = path.display();
        let path_str = path
            .to_str()
            .ok_or_else(|| failed("load", "path is not UTF-8"))?;
        let meta =
            Index::metadata(path_str).map_err(|e| failed("load", format!("{shown}: {e}")))?;
        let ours = options_shaped(metric, dim, shape(metric))?;
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
        // Small pages while reading, huge ones after (`huge_pages.rs`).
        let deferred = Deferred::begin();
        let index = Index::new(&ours).map_err(|e| failed("create", e))?;
        index
            .load(path_str)
            .map_err(|e| failed("load", format!("{shown}: {e}")))?;
        let capacity = index.size().max(FIRST_CAPACITY);
        index
            .reserve_capacity_and_threads(capacity, threads())
            .map_err(|e| failed("reserve", e))?;
        // usearch reads its own bytes and stops: the fine bytes follow them.
        let fine = match ours.quantization {
            ScalarKind::I8 => {
                let fine = File::open(path)
                    .and_then(|mut f| Fine::read_from(&mut f, dim))
                    .map_err(|e| failed("load", format!("{shown}: {e}")))?;
                if fine.len() != index.size() {
                    return Err(failed(
                        "load",
                        format!("{shown}: fine bytes of another index"),
                    ));
                }
                let mut fine = fine;
                fine.make_signs(|key, coarse| matches!(index.get(key, coarse), Ok(1)))
                    .map_err(|e| failed("load", format!("{shown}: sign bits: {e}")))?;
                Some(fine)
            }
            _ => None,
        };
        let mut loaded = Self::around(Graph { index, fine }, metric, dim, &ours)?;
        loaded.collapsing = deferred.collapse();
        Ok(loaded)
    }

    /// Write the index to `path` (searches go on; changes wait).
    pub fn save(&self, path: &Path) -> Result<()> {
        let shown = path.display();
        let path_str = path
            .to_str()
            .ok_or_else(|| failed("save", "path is not UTF-8"))?;
        let graph = self.read();
        graph
            .save(path_str)
            .map_err(|e| failed("save", format!("{shown}: {e}")))?;
        super::wipe::zero_free_rows(path)
            .map_err(|e| failed("save", format!("{shown}: {e}: removed vectors not zeroed")))?;
        if let Some(fine) = &graph.fine {
            let appended = OpenOptions::new().append(true).open(path).and_then(|f| {
                let mut out = BufWriter::new(f);
                fine.write_to(&mut out)?;
                out.into_inner().map_err(|e| e.into_error())?.sync_all()
            });
            appended.map_err(|e| failed("save", format!("{shown}: {e}")))?;
        }
        Ok(())
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
    fn read(&self) -> RwLockReadGuard<'_, Graph> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Graph> {
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

    /// Neighbours per node of this graph (a loaded one's own).
    pub fn connectivity(&self) -> usize {
        self.read().connectivity()
    }

    /// Bytes the index holds (vectors, graph, lookup tables).
    pub fn memory(&self) -> usize {
        let graph = self.read();
        graph.memory_usage() + graph.fine.as_ref().map_or(0, Fine::memory)
    }

    /// Add `vector` under `key`; `false` when the key is there already.
    pub fn insert(&self, key: u64, vector: &[f32]) -> Result<bool> {
        self.check(vector)?;
        let mut index = self.write();
        if index.contains(key) {
            return Ok(false);
        }
        if index.size() + 1 > index.capacity() {
            let grown = (index.capacity() * 2).max(FIRST_CAPACITY);
            index
                .reserve_capacity_and_threads(grown, threads())
                .map_err(|e| failed("grow", e))?;
        }
        let (mut coarse, mut fine) = split::buffers(self.dim);
        index.add(key, vector, &mut coarse, &mut fine)?;
        self.changed(1);
        if let Some(f) = index.fine.as_mut() {
            f.put(key, &coarse, &fine);
        }
        self.lower_apart(&index, key);
        if index.size() > self.exact_up_to && self.is_stray(&index, key, links_back(&index, key)) {
            let mut strays = self.strays_mut();
            if strays.len() < MAX_STRAYS {
                // The vector is in: a failure here costs a scan, not it.
                if let Err(e) = add_stray(&mut strays, &index, key, self.dim) {
                    log::warn!("{key} not kept as a stray: {e}");
                }
            }
        }
        Ok(true)
    }

    /// Find the strays among `keys` (every key the index holds): the nodes
    /// that at most `few_links_in` base-level links lead to and the isolated
    /// ones, fewest links first, at most `MAX_STRAYS`. How many. Two passes
    /// over the links, on every core.
    pub fn find_strays(&self, keys: &[u64]) -> Result<usize> {
        let index = self.read();
        let mut strays = self.strays_mut();
        strays.clear()?;
        if keys.len() <= self.exact_up_to {
            return Ok(0);
        }
        let links_in = links_in(&index, keys);
        let few = few_links_in(&index);
        let step = keys.len().div_ceil(SAMPLE).max(1);
        let sampled: Vec<u64> = keys.iter().step_by(step).copied().collect();
        let mut sample: Vec<f32> = self
            .reach(&index, &sampled, None)
            .into_iter()
            .flatten()
            .collect();
        sample.sort_unstable_by(f32::total_cmp);
        let tail = (sample.len() as f64 * (1.0 - ISOLATED_SHARE)) as usize;
        let limit = sample.get(tail.min(sample.len().saturating_sub(1)));
        let limit = limit.copied().unwrap_or(0.0);
        self.isolated_above
            .store(limit.to_bits(), Ordering::Relaxed);
        // Each node stops as soon as more than half its links are shorter
        // than the limit (or longer): a few distances per node.
        let reach = match limit > 0.0 {
            true => self.reach(&index, keys, Some(limit)),
            false => vec![None; keys.len()],
        };
        // (links in, key), fewest links first
        let mut found: Vec<(u32, u64)> = keys
            .iter()
            .zip(&links_in)
            .zip(&reach)
            .filter(|((_, &n), r)| n <= few || r.is_some_and(|r| r > limit))
            .map(|((&k, &n), _)| (n, k))
            .collect();
        found.sort_unstable();
        for &(_, key) in found.iter().take(MAX_STRAYS) {
            add_stray(&mut strays, &index, key, self.dim)?;
        }
        self.changed_since_count.store(0, Ordering::Relaxed);
        Ok(strays.len())
    }

    /// How many strays every graph search scans.
    pub fn stray_count(&self) -> usize {
        self.strays.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The strays and the link length beyond which a node is isolated,
    /// when they were counted over the graph as it is (to save with it).
    pub fn counted_strays(&self) -> Option<(Vec<u64>, f32)> {
        let _graph = self.read(); // no change between the two reads
        let strays = self.strays.read().unwrap_or_else(|e| e.into_inner());
        (self.changed_since_count.load(Ordering::Relaxed) == 0).then(|| {
            let limit = f32::from_bits(self.isolated_above.load(Ordering::Relaxed));
            (strays.keys().to_vec(), limit)
        })
    }

    /// The strays to record with a save and how many vectors went in or
    /// out since they were counted: counted over the graph as it is; or, for
    /// vectors with sign bits, the last count and each vector inserted alone
    /// since, while at most 1% of the vectors changed since the count. A
    /// change can cut the links that led to another node, which then goes
    /// unrecorded until the next count; when the first look names no one,
    /// the second, a scan of every sign, still finds that person. Without
    /// sign bits (the second look is a wider walk) only a count over this
    /// graph is recorded. Counting takes 17 s at a million: a restart after
    /// an `ENROLL` need not pay it.
    pub fn strays_to_save(&self) -> Option<(Vec<u64>, f32, u64)> {
        let graph = self.read(); // no change between the reads
        let strays = self.strays.read().unwrap_or_else(|e| e.into_inner());
        let limit = f32::from_bits(self.isolated_above.load(Ordering::Relaxed));
        let changed = self.changed_since_count.load(Ordering::Relaxed);
        let recorded = strays_hold(&graph, limit, changed);
        recorded.then(|| (strays.keys().to_vec(), limit, changed))
    }

    /// Whether strays counted `changed` vectors ago (beyond `isolated_above`)
    /// hold for this graph: the rule they are saved by (`strays_to_save`),
    /// so a load takes them instead of counting again.
    pub fn strays_hold(&self, isolated_above: f32, changed: u64) -> bool {
        strays_hold(&self.read(), isolated_above, changed)
    }

    /// Take strays counted over this graph before, `changed` vectors ago
    /// (saved with it),
    /// instead of counting them again: those the index holds. How many.
    pub fn set_strays(&self, keys: &[u64], isolated_above: f32, changed: u64) -> Result<usize> {
        let graph = self.read();
        let mut strays = self.strays_mut();
        strays.clear()?;
        for &key in keys.iter().filter(|&&k| graph.contains(k)) {
            add_stray(&mut strays, &graph, key, self.dim)?;
        }
        self.isolated_above
            .store(isolated_above.to_bits(), Ordering::Relaxed);
        self.changed_since_count.store(changed, Ordering::Relaxed);
        Ok(strays.len())
    }

    /// Whether `key`, which `links` base-level links lead to, is a stray.
    fn is_stray(&self, index: &Graph, key: u64, links: u32) -> bool {
        if links <= few_links_in(index) {
            return true;
        }
        let limit = f32::from_bits(self.isolated_above.load(Ordering::Relaxed));
        limit > 0.0
            && self
                .reach_of(index, &[key], Some(limit))
                .pop()
                .flatten()
                .is_some_and(|d| d > limit)
    }

    /// For each of `keys`, the median length of its base-level links
    /// (`None`: not there, or no links); given a `limit`, only which side of
    /// it the median is on is wanted, and a node stops measuring once more
    /// than half its links are on one side. On every core.
    fn reach(&self, index: &Graph, keys: &[u64], limit: Option<f32>) -> Vec<Option<f32>> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = keys.len().div_ceil(cores).max(1);
        std::thread::scope(|scope| {
            let workers: Vec<_> = keys
                .chunks(chunk)
                .map(|part| {
                    let worker = scope.spawn(move || self.reach_of(index, part, limit));
                    (part.len(), worker)
                })
                .collect();
            // A worker that failed gives no lengths, in their places.
            workers
                .into_iter()
                .flat_map(|(len, w)| w.join().unwrap_or_else(|_| vec![None; len]))
                .collect()
        })
    }

    fn reach_of(&self, index: &Graph, keys: &[u64], limit: Option<f32>) -> Vec<Option<f32>> {
        let (mut own, mut other) = (Quick::new(self.dim), Quick::new(self.dim));
        let mut links = links_buffer(index);
        let mut lengths = Vec::with_capacity(links.len());
        keys.iter()
            .map(|&key| {
                if !own.load(index, key) {
                    return None;
                }
                let n = index.neighbors(key, 0).drain_into(&mut links);
                let half = n / 2 + 1; // more than half of them
                lengths.clear();
                let (mut near, mut far) = (0, 0);
                for &k in &links[..n] {
                    if !other.load(index, k) {
                        continue;
                    }
                    let d = own.distance(&other, self.metric);
                    lengths.push(d);
                    match limit {
                        Some(l) if d <= l => near += 1,
                        Some(_) => far += 1,
                        None => {}
                    }
                    if near >= half || far >= half {
                        // Which side the median is on: all that is asked.
                        return limit.map(|l| if far >= half { f32::INFINITY } else { l });
                    }
                }
                lengths.sort_unstable_by(f32::total_cmp);
                lengths.get(lengths.len() / 2).copied()
            })
            .collect()
    }

    fn strays_mut(&self) -> RwLockWriteGuard<'_, Strays> {
        self.strays.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Add many vectors at once, on every core, before anyone searches (a
    /// load): usearch's own concurrent insertion, under one write lock. Keys
    /// present already are passed over. `progress(done, total)` is called
    /// from this thread about every PROGRESS_EVERY while the cores work (a
    /// million take half an hour on 2 cores). How many were added.
    pub fn insert_all(
        &self,
        items: &[(u64, &[f32])],
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<usize> {
        items.iter().try_for_each(|(_, v)| self.check(v))?;
        let mut index = self.write();
        let wanted = index.size() + items.len();
        if wanted > index.capacity() {
            index
                .reserve_capacity_and_threads(wanted, threads())
                .map_err(|e| failed("grow", e))?;
        }
        let mut seen = std::collections::HashSet::with_capacity(items.len());
        let fresh: Vec<(u64, &[f32])> = items
            .iter()
            .filter(|(k, _)| !index.contains(*k) && seen.insert(*k))
            .copied()
            .collect();
        let dim = self.dim;
        if let Some(fine) = index.fine.as_mut() {
            let (mut coarse, mut bytes) = split::buffers(dim);
            for (key, vector) in &fresh {
                split::split(vector, &mut coarse, &mut bytes);
                fine.put(*key, &coarse, &bytes);
            }
        }
        self.changed(fresh.len() as u64);
        self.strays
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .forget_apart();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = fresh.len().div_ceil(cores).max(1);
        let index = &*index;
        let done = AtomicUsize::new(0);
        let caller = std::thread::current();
        let added: Result<Vec<usize>> = std::thread::scope(|scope| {
            let workers: Vec<_> = fresh
                .chunks(chunk)
                .map(|part| {
                    let (done, caller) = (&done, caller.clone());
                    scope.spawn(move || {
                        let added = insert_part(index, part, dim, done);
                        caller.unpark(); // the last one ends the wait at once
                        added
                    })
                })
                .collect();
            while !workers.iter().all(|w| w.is_finished()) {
                std::thread::park_timeout(PROGRESS_EVERY);
                progress(done.load(Ordering::Relaxed), fresh.len());
            }
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
        let mut index = self.write();
        index.remove(key).map_err(|e| failed("remove", e))?;
        if let Some(fine) = index.fine.as_mut() {
            fine.remove(key);
        }
        // The vector is out: a stray copy left behind is never named (the
        // re-rank reads the graph), only scanned.
        if let Err(e) = self.strays_mut().remove(key) {
            log::warn!("{key} left among the strays: {e}");
        }
        self.changed(1);
        Ok(())
    }

    /// `key` went in: each stray measured apart is at most its distance
    /// to it away from every other entry (a distance per stray measured:
    /// at most MAX_STRAYS, under the write lock).
    fn lower_apart(&self, index: &Graph, key: u64) {
        let (mut arrived, mut stray, mut coarse) = (
            vec![0.0f32; self.dim],
            vec![0.0f32; self.dim],
            vec![0i8; self.dim],
        );
        let strays = self.strays.read().unwrap_or_else(|e| e.into_inner());
        if !strays.any_apart() {
            return;
        }
        if !index.full(key, &mut arrived, &mut coarse) {
            return strays.forget_apart();
        }
        // A stray's own key again (its copy was left among the strays when
        // it went): its bound was another vector's.
        strays.arrived(|s| {
            (s != key && index.full(s, &mut stray, &mut coarse))
                .then(|| self.metric.distance(&stray, &arrived))
        });
    }

    /// `n` more vectors went in or out since the strays were counted.
    fn changed(&self, n: u64) {
        let add = |c: u64| {
            Some(if c == NEVER_COUNTED {
                c
            } else {
                c.saturating_add(n)
            })
        };
        let _ = self
            .changed_since_count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, add);
    }

    /// The vector stored under `key` (as stored: f16 widened, or a split
    /// one restored to unit length).
    pub fn vector(&self, key: u64) -> Option<Vec<f32>> {
        let mut out = vec![0.0f32; self.dim];
        let mut coarse = vec![0i8; self.dim];
        self.read().full(key, &mut out, &mut coarse).then_some(out)
    }

    /// About `count` entries nearest to `query`, nearest first, each with
    /// its full distance.
    pub fn nearest(&self, query: &[f32], count: usize) -> Result<Vec<Hit>> {
        self.search(query, count, 0, None)
    }

    /// `nearest`, the graph walked at least `breadth` hits wide. Only the
    /// walk's first `count` (and RERANK_MORE) are re-ranked: a wider look
    /// costs the walk, not a re-rank of all it saw.
    pub fn nearest_wide(&self, query: &[f32], count: usize, breadth: usize) -> Result<Vec<Hit>> {
        self.search(query, count, breadth, None)
    }

    /// The nearest entry of all, when it is a stray within `within` of
    /// `query` that is proven the nearest (`apart.rs`): no walk needed.
    /// `None`: search (the strays scanned again with the walk: 0.03 ms at
    /// a million's 1,135). The first time a stray is asked for, how far it
    /// is from the others is measured: an exact scan, 80 ms at a million,
    /// under the read lock (an insertion, and the searches after it, wait).
    pub fn proven_nearest(&self, query: &[f32], within: f32) -> Result<Option<Hit>> {
        self.check(query)?;
        let index = self.read();
        if index.size() <= self.exact_up_to {
            return Ok(None);
        }
        let (mut coarse, mut fine) = split::buffers(self.dim);
        if index.fine.is_some() {
            split::split(query, &mut coarse, &mut fine);
        }
        let strays = self.strays.read().unwrap_or_else(|e| e.into_inner());
        let nearest = strays_near(&index, &strays, query, &coarse, 1)?;
        let Some(&key) = nearest.first() else {
            return Ok(None);
        };
        let Some(hit) = self.rerank(&index, &[key], query)?.pop() else {
            return Ok(None);
        };
        if hit.distance > within {
            return Ok(None);
        }
        let apart = match strays.apart(key) {
            Some(apart) => apart,
            None if !apart::may_prove(self.metric, hit.distance) => return Ok(None),
            None => {
                let apart = self.measure_apart(&index, key)?;
                strays.set_apart(key, apart);
                apart
            }
        };
        Ok(apart::proves_nearest(self.metric, hit.distance, apart).then_some(hit))
    }

    /// How far `key` is from every other entry, at least: the exact scan's
    /// nearest `WINDOW_KEYS` by the stored form, re-ranked (`apart.rs`).
    fn measure_apart(&self, index: &Graph, key: u64) -> Result<f32> {
        let (mut own, mut coarse) = (vec![0.0f32; self.dim], vec![0i8; self.dim]);
        if !index.full(key, &mut own, &mut coarse) {
            return Ok(0.0); // gone: proves nothing
        }
        let (found, error) = match index.fine {
            Some(_) => (
                index.exact_search(&coarse, WINDOW_KEYS + 1),
                apart::ranking_error(&coarse, &own),
            ),
            None => (
                index.exact_search(&own, WINDOW_KEYS + 1),
                apart::F16_RANKING_ERROR,
            ),
        };
        let found = found.map_err(|e| failed("search", e))?;
        let others: Vec<u64> = found.keys.iter().copied().filter(|&k| k != key).collect();
        let window = self.rerank(index, &others, &own)?;
        // Whoever the scan put after its last is at least that far, less
        // the ranking's error for both (the stray itself last: nothing).
        let beyond = (index.size() > found.keys.len()).then(|| {
            let last = found.keys.last();
            let last = last.and_then(|&k| window.iter().find(|h| h.key == k));
            last.map_or(0.0, |h| h.distance - 2.0 * error)
        });
        let distances: Vec<f32> = window.iter().map(|h| h.distance).collect();
        Ok(apart::apart_from(&distances, beyond))
    }

    /// The `count` entries nearest to `query` by a scan of them all.
    pub fn nearest_exact(&self, query: &[f32], count: usize) -> Result<Vec<Hit>> {
        self.search(query, count, 0, Some(true))
    }

    /// The second look at a large gallery: for split vectors, the
    /// `SIGN_CANDIDATES` nearest by a scan of every vector's sign bits
    /// (`signs.rs`) and the nearest strays, re-ranked by the full distance;
    /// f16 vectors have no signs and are walked `WIDER_SEARCH` wide.
    pub fn nearest_by_signs(&self, query: &[f32], count: usize) -> Result<Vec<Hit>> {
        self.check(query)?;
        let index = self.read();
        let Some(fine) = &index.fine else {
            drop(index);
            return self.nearest_wide(query, count, WIDER_SEARCH);
        };
        let (mut coarse, mut bytes) = split::buffers(self.dim);
        split::split(query, &mut coarse, &mut bytes);
        let mut keys = fine
            .nearest_by_signs(&coarse, SIGN_CANDIDATES.max(count))
            .map_err(|e| failed("search", e))?;
        let strays = self.strays.read().unwrap_or_else(|e| e.into_inner());
        keys.extend(strays.nearest(&coarse, count)?);
        keys.sort_unstable();
        keys.dedup();
        self.rerank(&index, &keys, query)
    }

    fn search(
        &self,
        query: &[f32],
        count: usize,
        breadth: usize,
        exact: Option<bool>,
    ) -> Result<Vec<Hit>> {
        self.check(query)?;
        let index = self.read();
        if index.size() == 0 || count == 0 {
            return Ok(Vec::new());
        }
        let exact = exact.unwrap_or(index.size() <= self.exact_up_to);
        let (mut coarse, mut fine) = split::buffers(self.dim);
        let found = match (&index.fine, exact) {
            // The i8 ranking may order near ties wrongly: the re-rank below
            // sees RERANK_MORE more of them.
            (Some(_), true) => {
                split::split(query, &mut coarse, &mut fine);
                index.exact_search(&coarse, count + RERANK_MORE)
            }
            (Some(_), false) => {
                split::split(query, &mut coarse, &mut fine);
                index.search(&coarse, count.max(breadth))
            }
            (None, true) => index.exact_search(query, count),
            (None, false) => index.search(query, count.max(breadth)),
        }
        .map_err(|e| failed("search", e))?;
        let mut keys = found.keys;
        if !exact {
            // The `count` strays nearest by the stored form join the walk's
            // (re-ranking more of them cost 0.1 ms at a million and found
            // no one else: an i8 distance is within about 1e-3).
            keys.truncate(count + RERANK_MORE);
            let strays = self.strays.read().unwrap_or_else(|e| e.into_inner());
            keys.extend(strays_near(&index, &strays, query, &coarse, count)?);
            keys.sort_unstable();
            keys.dedup();
        }
        self.rerank(&index, &keys, query)
    }

    /// `keys` by their full distance to `query`, nearest first (ties by
    /// key); many keys on two cores (`RERANK_SHARED_FROM`).
    fn rerank(&self, index: &Graph, keys: &[u64], query: &[f32]) -> Result<Vec<Hit>> {
        let next = AtomicUsize::new(0);
        let work = || {
            let (mut stored, mut coarse) = (vec![0.0f32; self.dim], vec![0i8; self.dim]);
            let mut hits = Vec::new();
            loop {
                let first = next.fetch_add(RERANK_PIECE, Ordering::Relaxed);
                if first >= keys.len() {
                    return hits;
                }
                for &key in &keys[first..(first + RERANK_PIECE).min(keys.len())] {
                    if index.full(key, &mut stored, &mut coarse) {
                        let distance = self.metric.distance(&stored, query);
                        hits.push(Hit { key, distance });
                    }
                }
            }
        };
        let helpers = usize::from(keys.len() >= RERANK_SHARED_FROM);
        let mut hits = Vec::with_capacity(keys.len());
        for part in with_helpers(helpers, &work) {
            hits.extend(part.map_err(|e| failed("search", e))?);
        }
        hits.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key)));
        Ok(hits)
    }

    fn check(&self, vector: &[f32]) -> Result<()> {
        check_length(vector, self.dim)
    }
}

/// An embedding of another length than the gallery's is a bug upstream.
/// Strays counted `changed` vectors ago still hold: none changed, or (with
/// sign bits, whose scan finds whom a missed stray hides) at most 1% of the
/// vectors (`STALE_STRAYS_MIN` at least).
fn strays_hold(graph: &Graph, isolated_above: f32, changed: u64) -> bool {
    let few = changed <= (graph.size() as u64 / 100).max(STALE_STRAYS_MIN);
    changed == 0 || (graph.fine.is_some() && isolated_above > 0.0 && few)
}

pub fn check_length(vector: &[f32], dim: usize) -> Result<()> {
    if vector.len() != dim {
        return Err(Error::internal(format!(
            "embedding has {} values, the gallery holds {dim}",
            vector.len()
        )));
    }
    Ok(())
}

/// At most this many base-level links lead to a stray of this graph (its
/// own connectivity: a saved index keeps the one it was built with).
fn few_links_in(index: &Index) -> u32 {
    (index.connectivity() as f32 * FEW_LINKS_IN_PER_NEIGHBOUR) as u32
}

/// Room for one node's base-level links: they are at most twice the
/// connectivity; the buffer holds twice that, so no link is ever cut off.
fn links_buffer(index: &Index) -> Vec<u64> {
    vec![0u64; 4 * index.connectivity()]
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
                    let mut links = links_buffer(index);
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
    let mut links = links_buffer(index);
    let n = index.neighbors(key, 0).drain_into(&mut links);
    let mut back = links_buffer(index);
    links[..n]
        .iter()
        .filter(|&&k| {
            let m = index.neighbors(k, 0).drain_into(&mut back);
            back[..m].contains(&key)
        })
        .count() as u32
}

/// A vector read to judge link lengths (`reach_of`), a million times over:
/// a split one's coarse bytes alone (their cosine is within about 1e-3 of
/// the full one; restoring the fine half bytes costs a hash lookup each and
/// made the count 4 times slower), an f16 one widened.
struct Quick {
    coarse: Vec<i8>,
    norm: f32,
    full: Vec<f32>,
}

impl Quick {
    fn new(dim: usize) -> Self {
        Quick {
            coarse: vec![0; dim],
            norm: 0.0,
            full: vec![0.0; dim],
        }
    }

    fn load(&mut self, graph: &Graph, key: u64) -> bool {
        match graph.fine {
            Some(_) => {
                let got = matches!(graph.index.get(key, &mut self.coarse), Ok(1));
                self.norm = (dot_i8(&self.coarse, &self.coarse) as f32).sqrt();
                got
            }
            None => matches!(graph.index.get(key, &mut self.full), Ok(1)),
        }
    }

    fn distance(&self, other: &Quick, metric: Metric) -> f32 {
        match self.norm > 0.0 && other.norm > 0.0 {
            true => 1.0 - dot_i8(&self.coarse, &other.coarse) as f32 / (self.norm * other.norm),
            false => metric.distance(&self.full, &other.full),
        }
    }
}

fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// The `count` strays nearest to `query` by the form `graph` stores
/// (`coarse`: the query split, for split vectors).
fn strays_near(
    graph: &Graph,
    strays: &Strays,
    query: &[f32],
    coarse: &[i8],
    count: usize,
) -> Result<Vec<u64>> {
    match graph.fine {
        Some(_) => strays.nearest(coarse, count),
        None => strays.nearest(query, count),
    }
}

/// Put `key` among `strays`, in the form `graph` stores it.
fn add_stray(strays: &mut Strays, graph: &Graph, key: u64, dim: usize) -> Result<()> {
    let mut stored = Quick::new(dim);
    match (stored.load(graph, key), &graph.fine) {
        (false, _) => Ok(()), // not there: nothing to reach
        (true, Some(_)) => strays.add(key, &stored.coarse),
        (true, None) => strays.add(key, &stored.full),
    }
}

fn insert_part(
    index: &Graph,
    part: &[(u64, &[f32])],
    dim: usize,
    done: &AtomicUsize,
) -> Result<usize> {
    let (mut coarse, mut fine) = split::buffers(dim);
    for &(key, vector) in part {
        index.add(key, vector, &mut coarse, &mut fine)?;
        done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(part.len())
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

    /// A graph (searched through the graph beyond 100 vectors) of `first`,
    /// inserted alone, then `crowd`, all at once.
    fn graph_of(dim: usize, first: &[(u64, Vec<f32>)], crowd: &[(u64, Vec<f32>)]) -> VectorIndex {
        let index = VectorIndex::new(Metric::Cosine, dim)
            .unwrap()
            .with_exact_up_to(100);
        for (k, v) in first {
            index.insert(*k, v).unwrap();
        }
        let items: Vec<(u64, &[f32])> = crowd.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        index.insert_all(&items, &mut |_, _| {}).unwrap();
        index
    }

    /// A crowd of 4,999 around a centre, 64 values each, and a loner
    /// (key 0) opposite, gone in first: the crowd that follows prunes the
    /// links to it (the case measured with a real face among a million).
    fn loner_and_crowd() -> (Vec<f32>, Vec<f32>, VectorIndex) {
        let centre = unit(1, 64);
        let loner: Vec<f32> = centre.iter().map(|c| -c).collect();
        let crowd: Vec<(u64, Vec<f32>)> = (1..5000u64).map(|k| (k, near(&centre, k))).collect();
        let index = graph_of(64, &[(0, loner.clone())], &crowd);
        (centre, loner, index)
    }

    #[test]
    fn a_vector_far_from_all_others_is_still_found() {
        let (centre, loner, index) = loner_and_crowd();
        let keys: Vec<u64> = (0..5000).collect();
        let strays = index.find_strays(&keys).unwrap();
        assert!(strays < 50, "{strays} strays in a well-linked crowd");
        let hits = index.nearest(&near(&loner, 9), 4).unwrap();
        assert_eq!(hits[0].key, 0, "{hits:?}, {strays} strays");
        // Counted over this graph: saved with it, taken back instead of counting.
        let (counted, limit) = index.counted_strays().expect("just counted");
        assert!(counted.contains(&0) && limit > 0.0);
        assert_eq!(
            index.set_strays(&[0, 123_456], limit, 0).unwrap(),
            1,
            "only keys it holds"
        );
        // Inserted one at a time after the crowd: checked as it goes in.
        let other: Vec<f32> = near(&loner, 10).iter().map(|x| -x * 0.5 + 0.1).collect();
        index.insert(9999, &other).unwrap();
        assert_eq!(index.nearest(&other, 1).unwrap()[0].key, 9999);
        assert_eq!(index.counted_strays(), None, "an insertion may cut links");
        // Saved all the same (the sign scan finds what the record lacks),
        // with how many vectors changed since the count.
        let (kept, kept_limit, changed) = index.strays_to_save().expect("sign bits");
        assert!(
            kept.contains(&0) && kept_limit == limit && changed == 1,
            "{kept:?}"
        );
        index.remove(0).unwrap();
        assert_ne!(index.nearest(&loner, 1).unwrap()[0].key, 0);
        let (kept, _, changed) = index.strays_to_save().unwrap();
        assert!(
            !kept.contains(&0) && changed == 2,
            "a removed vector is not recorded"
        );
        // Taken back from a manifest with its changes: too many, and they
        // are no longer recorded (the next load counts them again).
        index.set_strays(&kept, limit, STALE_STRAYS_MIN).unwrap();
        assert_eq!(index.strays_to_save().map(|s| s.2), Some(STALE_STRAYS_MIN));
        index.insert(10_000, &near(&centre, 10_000)).unwrap();
        assert_eq!(
            index.strays_to_save(),
            None,
            "more than 1,000 and 1% changed"
        );
    }

    /// Whatever `index` proves the nearest of `q` is what a scan of all
    /// finds first; whether it proved one.
    fn proven_right(index: &VectorIndex, q: &[f32]) -> bool {
        let proven = index.proven_nearest(q, 2.0).unwrap();
        if let Some(hit) = proven {
            assert_eq!(hit, index.nearest_exact(q, 1).unwrap()[0]);
        }
        proven.is_some()
    }

    /// `a` turned `t` of the way towards `b`, unit length.
    fn between(a: &[f32], b: &[f32], t: f32) -> Vec<f32> {
        let v: Vec<f32> = a
            .iter()
            .zip(b)
            .map(|(x, y)| (1.0 - t) * x + t * y)
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    #[test]
    fn a_stray_proven_nearest_is_the_exact_nearest() {
        let (centre, loner, index) = loner_and_crowd();
        index.find_strays(&(0..5000).collect::<Vec<u64>>()).unwrap();
        let query = near(&loner, 9);
        let exact = index.nearest_exact(&query, 1).unwrap()[0];
        assert_eq!(index.proven_nearest(&query, 0.5).unwrap(), Some(exact));
        assert_eq!(exact.key, 0);
        let closer = exact.distance / 2.0;
        assert_eq!(index.proven_nearest(&query, closer).unwrap(), None);
        for seed in 0..200u64 {
            let around = if seed % 2 == 0 { &centre } else { &loner };
            proven_right(&index, &near(around, 20_000 + seed));
        }
        // Another arrives near the loner, alone: the loner's bound falls
        // (kept, it would prove the loner for faces nearer the newcomer).
        let newcomer = near(&loner, 30);
        index.insert(7000, &newcomer).unwrap();
        let sweep = |index: &VectorIndex| {
            (0..=10)
                .filter(|&t| proven_right(index, &between(&loner, &newcomer, t as f32 / 10.0)))
                .count()
        };
        assert!(sweep(&index) > 0, "the ends are proven");
        // A stray removed is not proven; its bound goes with it.
        index.remove(0).unwrap();
        assert_ne!(
            index.proven_nearest(&loner, 0.5).unwrap().map(|h| h.key),
            Some(0)
        );
        sweep(&index);
        // A twin: neither of the two is proven the nearest.
        index.insert(7777, &newcomer).unwrap();
        assert_eq!(index.proven_nearest(&newcomer, 0.5).unwrap(), None);
        index
            .insert_all(&[(7778, loner.as_slice())], &mut |_, _| {})
            .unwrap();
        sweep(&index);
        assert_eq!(index.proven_nearest(&newcomer, 0.5).unwrap(), None);
    }

    #[test]
    fn the_sign_scan_finds_a_match_among_uniform_strangers() {
        // Uniform random people: a walk has nothing to follow (at a million
        // it named 0.64 of such matches); a scan of every sign cannot miss.
        let dim = 512;
        let crowd: Vec<(u64, Vec<f32>)> = (1..3000u64).map(|k| (k, random_unit(k, dim))).collect();
        let index = graph_of(dim, &[], &crowd);
        for k in [7u64, 1500, 2999] {
            let query = near(&crowd[k as usize - 1].1, 10_000 + k);
            let hits = index.nearest_by_signs(&query, 4).unwrap();
            assert_eq!(hits[0].key, k, "{hits:?}");
            // Re-ranked piece by piece, shared with a helper if one starts
            // in time: every candidate once, in order (ties by key).
            let mut keys: Vec<u64> = hits.iter().map(|h| h.key).collect();
            keys.sort_unstable();
            keys.dedup();
            assert!(keys.len() == hits.len() && hits.len() >= SIGN_CANDIDATES);
            let order = |h: &Hit| (h.distance, h.key);
            assert!(hits.windows(2).all(|w| order(&w[0]) <= order(&w[1])));
            let exact = index.nearest_exact(&query, 1).unwrap();
            assert_eq!(
                hits[0].distance, exact[0].distance,
                "re-ranked by the full distance"
            );
        }
        index.remove(1500).unwrap();
        let query = near(&crowd[1499].1, 11_500);
        assert_ne!(
            index.nearest_by_signs(&query, 1).unwrap()[0].key,
            1500,
            "removed"
        );
        // Saved and loaded: the signs are made again from the stored bytes.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        index.save(&path).unwrap();
        let back = VectorIndex::load(&path, Metric::Cosine, dim).unwrap();
        let query = near(&crowd[6].1, 10_007);
        assert_eq!(back.nearest_by_signs(&query, 1).unwrap()[0].key, 7);
    }

    #[test]
    fn photos_of_one_person_far_from_the_crowd_are_strays() {
        // Four photos of one person, each other's nearest, all far from a
        // crowd of another kind of face: their links out are long, so no
        // walk from the crowd needs to reach them. Their nearest neighbour
        // is close, and links from the others lead to each: their reach
        // tells.
        let dim = 64;
        let centre = unit(1, dim);
        let person: Vec<f32> = centre.iter().map(|c| -c).collect();
        let mut vectors: Vec<(u64, Vec<f32>)> =
            (0..6000u64).map(|k| (k, near(&centre, k))).collect();
        for k in 0..4u64 {
            let photo: Vec<f32> = near(&person, 100 + k).iter().map(|x| x * 0.2).collect();
            vectors.push((10_000 + k, near(&photo_mix(&person, &photo), 200 + k)));
        }
        let index = graph_of(dim, &[], &vectors);
        let keys: Vec<u64> = vectors.iter().map(|(k, _)| *k).collect();
        let strays = index.find_strays(&keys).unwrap();
        let (counted, limit) = index.counted_strays().unwrap();
        for k in 10_000..10_004 {
            assert!(counted.contains(&k), "{k} not among the {strays} strays");
        }
        // Whatever else marks them (few links may lead to some), each one's
        // links are longer than nearly every node's.
        let photos: Vec<u64> = (10_000..10_004).collect();
        let reach = index.reach(&index.read(), &photos, Some(limit));
        assert!(
            reach.iter().all(|r| r.is_some_and(|r| r > limit)),
            "{reach:?} {limit}"
        );
        assert!(strays <= 6000 / 100, "{strays} strays");
        assert_eq!(
            index.nearest(&near(&person, 300), 1).unwrap()[0].key / 10_000,
            1
        );
    }

    #[test]
    fn more_searches_at_once_than_cores_all_scan_the_strays() {
        let dim = 32;
        let loner: Vec<f32> = unit(1, dim).iter().map(|c| -c).collect();
        let crowd: Vec<(u64, Vec<f32>)> =
            (1..3000u64).map(|k| (k, near(&unit(1, dim), k))).collect();
        let index = graph_of(dim, &[(0, loner.clone())], &crowd);
        let keys: Vec<u64> = (0..3000).collect();
        assert!(index.find_strays(&keys).unwrap() > 0);
        std::thread::scope(|scope| {
            for t in 0..16u64 {
                let (index, loner) = (&index, &loner);
                scope.spawn(move || {
                    for i in 0..50 {
                        let hits = index.nearest(&near(loner, t * 100 + i), 4).unwrap();
                        assert_eq!(hits[0].key, 0);
                    }
                });
            }
        });
    }

    /// Most of `person`, a little of `photo`: one photo of that person.
    fn photo_mix(person: &[f32], photo: &[f32]) -> Vec<f32> {
        person.iter().zip(photo).map(|(p, f)| p + f).collect()
    }

    #[test]
    fn a_split_index_saves_and_loads_whole_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("tf-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("index");
        let index = VectorIndex::new(Metric::Cosine, 64).unwrap();
        for k in 0..500u64 {
            index.insert(k, &random_unit(k, 64)).unwrap();
        }
        index.remove(7).unwrap();
        index.save(&path).unwrap();
        let back = VectorIndex::load(&path, Metric::Cosine, 64).unwrap();
        assert_eq!(back.len(), 499);
        let v = random_unit(42, 64);
        let hit = back.nearest(&v, 1).unwrap()[0];
        assert_eq!(hit.key, 42);
        assert!(hit.distance < 1e-4, "{hit:?}");
        assert_eq!(back.vector(7), None);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(VectorIndex::load(&path, Metric::Cosine, 64).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A removed vector leaves no copy in the saved file, in any of its
    /// forms (i8 and fine half bytes of a split index, f16 of a Euclidean
    /// one), and what stays is found as before.
    #[test]
    fn a_saved_index_holds_no_removed_vector() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        for metric in [Metric::Cosine, Metric::Euclidean] {
            let index = VectorIndex::new(metric, 64).unwrap();
            for k in 0..300u64 {
                index.insert(k, &random_unit(k, 64)).unwrap();
            }
            let stored: Vec<Vec<f32>> = (0..300).map(|k| index.vector(k).unwrap()).collect();
            let forms = |k: u64| -> Vec<Vec<u8>> {
                let v = random_unit(k, 64);
                let (mut coarse, mut fine) = super::super::split::buffers(64);
                super::super::split::split(&v, &mut coarse, &mut fine);
                let f16: Vec<u8> = stored[k as usize]
                    .iter()
                    .flat_map(|x| f16_bits(*x).to_le_bytes())
                    .collect();
                let coarse: Vec<u8> = coarse.iter().map(|q| *q as u8).collect();
                match metric {
                    Metric::Cosine => vec![coarse[..32].to_vec(), fine],
                    Metric::Euclidean => vec![f16[..64].to_vec()],
                }
            };
            let within = |bytes: &[u8], form: &[u8]| bytes.windows(form.len()).any(|w| w == form);
            for k in [3, 150, 299] {
                index.remove(k).unwrap();
            }
            index.save(&path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            for k in [3, 150, 299] {
                assert!(
                    !forms(k).iter().any(|f| within(&bytes, f)),
                    "{metric:?} {k}"
                );
            }
            assert!(
                forms(4).iter().all(|f| within(&bytes, f)),
                "{metric:?}: a kept one"
            );
            let back = VectorIndex::load(&path, metric, 64).unwrap();
            assert_eq!(back.len(), 297);
            assert_eq!(back.nearest(&random_unit(4, 64), 1).unwrap()[0].key, 4);
        }
    }

    /// The f16 bits of `x`, a value an f16 holds exactly.
    fn f16_bits(x: f32) -> u16 {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let exponent = ((bits >> 23) & 0xff) as i32 - 127 + 15;
        match x {
            0.0 => sign,
            _ if exponent <= 0 => sign | (x.abs() * 2f32.powi(24)).round() as u16,
            _ => sign | ((exponent as u16) << 10) | ((bits >> 13) & 0x3ff) as u16,
        }
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
