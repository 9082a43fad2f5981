//! Strays: nodes no graph walk is sure to reach, scanned at every search.
//!
//! A node far from all others can lose every link that leads to it
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
//! graph search scans the strays too (about a thousand vectors at a
//! million: tens of microseconds).
//!
//! `found.rs` finds them, `flat.rs` holds the copy every search scans,
//! `proof.rs` proves one the nearest of all without a walk.

mod flat;
mod found;
mod proof;
#[cfg(test)]
mod tests;

use std::sync::atomic::Ordering;
use std::sync::RwLockWriteGuard;

pub use flat::Strays;

use super::{Graph, VectorIndex};
use crate::error::Result;
pub(in crate::gallery::index) use found::links_back;
use found::Quick;

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
pub(in crate::gallery::index) const MAX_STRAYS: usize = 10_000;

/// `changed_since_count` before the strays were ever counted.
pub(in crate::gallery::index) const NEVER_COUNTED: u64 = u64::MAX;

/// Strays recorded though this many vectors changed since their count (or
/// 1% of the vectors, if more): `strays_to_save`.
const STALE_STRAYS_MIN: u64 = 1_000;

impl VectorIndex {
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

    pub(in crate::gallery::index) fn strays_mut(&self) -> RwLockWriteGuard<'_, Strays> {
        self.strays.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// Strays counted `changed` vectors ago still hold: none changed, or (with
/// sign bits, whose scan finds whom a missed stray hides) at most 1% of the
/// vectors (`STALE_STRAYS_MIN` at least).
fn strays_hold(graph: &Graph, isolated_above: f32, changed: u64) -> bool {
    let few = changed <= (graph.size() as u64 / 100).max(STALE_STRAYS_MIN);
    changed == 0 || (graph.fine.is_some() && isolated_above > 0.0 && few)
}

/// The `count` strays nearest to `query` by the form `graph` stores
/// (`coarse`: the query split, for split vectors).
pub(in crate::gallery::index) fn strays_near(
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
pub(in crate::gallery::index) fn add_stray(
    strays: &mut Strays,
    graph: &Graph,
    key: u64,
    dim: usize,
) -> Result<()> {
    let mut stored = Quick::new(dim);
    match (stored.load(graph, key), &graph.fine) {
        (false, _) => Ok(()), // not there: nothing to reach
        (true, Some(_)) => strays.add(key, &stored.coarse),
        (true, None) => strays.add(key, &stored.full),
    }
}
