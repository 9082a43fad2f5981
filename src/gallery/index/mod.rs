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
//! Strays, nodes no walk is sure to reach, are found, scanned and proven
//! in `strays/`; the file in `file.rs`, changes in `insert.rs`, searches in
//! `search.rs`.
//!
//! Concurrency: searches share a read lock; each insertion or removal takes
//! the write lock for itself alone (usearch lets a search read neighbour lists
//! while an insertion rewrites them, which is a data race), so a change blocks
//! readers for one insertion at most.

mod file;
mod insert;
mod search;
mod strays;
#[cfg(test)]
mod test_vectors;

use std::ops::Deref;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;

pub use usearch::ScalarKind;
use usearch::{Index, IndexOptions, MetricKind};

use super::signs::prefetch_line;
use super::split::{self, Fine};
use crate::error::{Error, Result};
use crate::metric::Metric;
use strays::{Strays, NEVER_COUNTED};

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
/// The first look's breadth when the second look's scan runs beside it (a
/// spare core): the walk then has only to name the faces it names at once,
/// the scan finds the rest, and every node the walk reads takes memory
/// bandwidth and a core from the scan. At the saved million, alternated
/// query by query in one process (`examples/beside_breadth.rs`), 16 wide
/// against 24: an unknown face's two looks 3% shorter, a known face's look
/// 17-18% at p50 and the same at p90, every known face still named
/// (docs/benchmarks.md, "Gallery at scale"). usearch looks at least as wide
/// as the 16 hits a search asks for, so narrower changes nothing.
pub const BESIDE_SCAN_SEARCH: usize = 16;

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
    /// The first look's breadth (`EXPANSION_SEARCH`), and its breadth with
    /// the scan beside it (`BESIDE_SCAN_SEARCH`); the benches change them.
    breadth: AtomicUsize,
    beside: AtomicUsize,
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
        // usearch looks as wide as the hits it is asked for, at least this:
        // each walk asks for its own breadth's worth (`search.rs`).
        expansion_search: BESIDE_SCAN_SEARCH,
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

    /// Each of `keys`' vectors as stored (split ones restored) into `out`,
    /// `dim` values each; `found`: whether it was there. Fetched in phases,
    /// every key's lines asked of the cache before any is read: fetched one
    /// key after another, each key's misses are waited for in turn (32 keys
    /// 0.24-0.25 against 0.29-0.34 ms, docs/benchmarks.md).
    fn full_many(&self, keys: &[u64], out: &mut [f32], found: &mut [bool]) -> Result<()> {
        let dim = out.len() / keys.len().max(1);
        let Some(fine) = &self.fine else {
            for ((&key, out), found) in keys.iter().zip(out.chunks_exact_mut(dim)).zip(found) {
                *found = matches!(self.index.get(key, out), Ok(1));
            }
            return Ok(());
        };
        let rows: Vec<Option<&[u8]>> = keys.iter().map(|&key| fine.get(key)).collect();
        for row in rows.iter().flatten() {
            row.chunks(64).for_each(|line| prefetch_line(line.as_ptr()));
        }
        let (mut coarse, mut got) = (vec![0i8; keys.len() * dim], vec![0u8; keys.len()]);
        (self.index.get_many_i8(keys, &mut coarse, &mut got)).map_err(|e| failed("fetch", e))?;
        let each = rows.iter().zip(got).zip(coarse.chunks_exact(dim));
        for (((row, got), coarse), (out, found)) in each.zip(out.chunks_exact_mut(dim).zip(found)) {
            *found = match row {
                Some(row) if got == 1 => {
                    split::join(coarse, row, out);
                    true
                }
                _ => false,
            };
        }
        Ok(())
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
            breadth: AtomicUsize::new(EXPANSION_SEARCH),
            beside: AtomicUsize::new(BESIDE_SCAN_SEARCH),
            collapsing: None,
        })
    }

    /// The SIMD kernels usearch runs on this CPU.
    pub fn acceleration(&self) -> String {
        self.read().hardware_acceleration()
    }

    /// How broad the first look's walk is (the bench sweeps it).
    pub fn set_expansion_search(&self, n: usize) {
        self.breadth.store(n, Ordering::Relaxed);
        self.narrowest_to_usearch();
    }

    /// How broad the first look's walk is when the scan runs beside it.
    pub fn set_beside_search(&self, n: usize) {
        self.beside.store(n, Ordering::Relaxed);
        self.narrowest_to_usearch();
    }

    /// usearch looks as wide as the hits it is asked for and at least as
    /// its own breadth: that is the narrowest of ours.
    fn narrowest_to_usearch(&self) {
        let narrowest = self.beside_breadth().max(1);
        self.write().change_expansion_search(narrowest);
    }

    /// The first look's breadth.
    fn breadth(&self) -> usize {
        self.breadth.load(Ordering::Relaxed)
    }

    /// The first look's breadth with the scan beside it.
    fn beside_breadth(&self) -> usize {
        self.breadth().min(self.beside.load(Ordering::Relaxed))
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

fn threads() -> usize {
    let cores = crate::gallery::share::cores();
    SEARCH_THREADS.max(4 * cores)
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::unavailable(format!("gallery index: {what}: {e}"))
}
