//! Searches: an exact scan up to `EXACT_UP_TO`, a graph walk beyond (the
//! strays scanned beside it), the sign scan as the second look; every hit
//! re-ranked by the full distance.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::strays::strays_near;
use super::{failed, split, Graph, Hit, VectorIndex};
use crate::error::Result;
use crate::gallery::looks::WIDER_SEARCH;
use crate::gallery::share::with_helpers;

/// An exact scan of i8 vectors re-ranks this many more than asked for.
const RERANK_MORE: usize = 32;

/// The second look re-ranks this many nearest by sign bits: a face exactly
/// 0.4 from its match ranked at most third by all 512 bits on the four sets
/// at a million (`benches/matching/sign_planes.py`); among a million
/// uniform strangers it falls out of these 32 once in about 10^8 such
/// faces, against once in 10^5 out of the first plane's (signs/).
const SIGN_CANDIDATES: usize = 32;

/// Re-ranks of this many keys or more are shared with a helper thread: each
/// key's vector is fetched under usearch's lock, its cache misses waited for
/// one key after another (257 keys took 0.70 ms on one core in the server,
/// 0.47 shared). A look's 48 to 80 stay on one core: a known face leaves
/// the other core to other requests.
const RERANK_SHARED_FROM: usize = 128;

/// Keys a thread claims at a time in a shared re-rank.
const RERANK_PIECE: usize = 32;

impl VectorIndex {
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

    /// The `count` entries nearest to `query` by a scan of them all.
    pub fn nearest_exact(&self, query: &[f32], count: usize) -> Result<Vec<Hit>> {
        self.search(query, count, 0, Some(true))
    }

    /// The second look at a large gallery: for split vectors, the
    /// `SIGN_CANDIDATES` nearest by a scan of every vector's sign bits
    /// (`signs/`; the strays too, unlike a walk), re-ranked by the full
    /// distance; f16 vectors have no signs and are walked `WIDER_SEARCH`
    /// wide.
    pub fn nearest_by_signs(&self, query: &[f32], count: usize) -> Result<Vec<Hit>> {
        self.check(query)?;
        let index = self.read();
        let Some(fine) = &index.fine else {
            drop(index);
            return self.nearest_wide(query, count, WIDER_SEARCH);
        };
        let (mut coarse, mut bytes) = split::buffers(self.dim);
        split::split(query, &mut coarse, &mut bytes);
        let keys = fine.nearest_by_signs(&coarse, SIGN_CANDIDATES.max(count));
        self.by_signs(&index, keys, query)
    }

    /// `nearest` and, when `again` says its hits do not name the face,
    /// `nearest_by_signs`: with `early` (a core no request uses), the sign
    /// scan begins on a helper thread beside a walk `BESIDE_SCAN_SEARCH`
    /// wide (narrower than `nearest`'s), and stops when the walk names the
    /// face (an unknown face at a million then pays about the longer of the
    /// two, not their sum: docs/gallery.md).
    pub fn nearest_then_signs(
        &self,
        query: &[f32],
        count: usize,
        early: bool,
        again: impl Fn(&[Hit]) -> bool,
    ) -> Result<Vec<Hit>> {
        self.check(query)?;
        let index = self.read();
        let fine = match &index.fine {
            Some(fine) if early && index.size() > self.exact_up_to => fine,
            _ => {
                drop(index);
                let first = self.nearest(query, count)?;
                return match again(&first) {
                    true => Ok(both(first, self.nearest_by_signs(query, count)?)),
                    false => Ok(first),
                };
            }
        };
        let breadth = self.beside_breadth();
        let walk = || {
            let first = self.search_in(&index, query, count, breadth, None);
            let wanted = first.as_ref().is_ok_and(|hits| again(hits));
            (first, wanted)
        };
        let (mut coarse, mut bytes) = split::buffers(self.dim);
        split::split(query, &mut coarse, &mut bytes);
        let candidates = SIGN_CANDIDATES.max(count);
        match fine.nearest_by_signs_beside(&coarse, candidates, walk) {
            (first, None) => first,
            (first, Some(keys)) => Ok(both(first?, self.by_signs(&index, keys, query)?)),
        }
    }

    /// The sign scan's `keys` (each once), re-ranked.
    fn by_signs(
        &self,
        index: &Graph,
        keys: std::result::Result<Vec<u64>, String>,
        query: &[f32],
    ) -> Result<Vec<Hit>> {
        let keys = keys.map_err(|e| failed("search", e))?;
        self.rerank(index, &keys, query)
    }

    fn search(
        &self,
        query: &[f32],
        count: usize,
        breadth: usize,
        exact: Option<bool>,
    ) -> Result<Vec<Hit>> {
        self.check(query)?;
        self.search_in(&self.read(), query, count, breadth, exact)
    }

    /// `search` in the graph `index` (this index's, locked for reading).
    fn search_in(
        &self,
        index: &Graph,
        query: &[f32],
        count: usize,
        breadth: usize,
        exact: Option<bool>,
    ) -> Result<Vec<Hit>> {
        if index.size() == 0 || count == 0 {
            return Ok(Vec::new());
        }
        let exact = exact.unwrap_or(index.size() <= self.exact_up_to);
        let set = self.breadth();
        let breadth = if breadth == 0 { set } else { breadth };
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
            // usearch returns as many hits as it was asked to look wide: a
            // walk as set or narrower keeps its `count` nearest, a wider
            // one RERANK_MORE more.
            keys.truncate(count + if breadth > set { RERANK_MORE } else { 0 });
            // The `count` strays nearest by the stored form join the walk's
            // (re-ranking more of them cost 0.1 ms at a million and found
            // no one else: an i8 distance is within about 1e-3).
            let strays = self.strays.read().unwrap_or_else(|e| e.into_inner());
            keys.extend(strays_near(index, &strays, query, &coarse, count)?);
            keys.sort_unstable();
            keys.dedup();
        }
        self.rerank(index, &keys, query)
    }

    /// `keys` by their full distance to `query`, nearest first (ties by
    /// key); many keys on two cores (`RERANK_SHARED_FROM`).
    pub(in crate::gallery::index) fn rerank(
        &self,
        index: &Graph,
        keys: &[u64],
        query: &[f32],
    ) -> Result<Vec<Hit>> {
        let next = AtomicUsize::new(0);
        let work = || {
            let mut stored = vec![0.0f32; RERANK_PIECE * self.dim];
            let mut found = [false; RERANK_PIECE];
            let mut hits = Vec::new();
            loop {
                let first = next.fetch_add(RERANK_PIECE, Ordering::Relaxed);
                if first >= keys.len() {
                    return Ok(hits);
                }
                let piece = &keys[first..(first + RERANK_PIECE).min(keys.len())];
                let (stored, found) = (
                    &mut stored[..piece.len() * self.dim],
                    &mut found[..piece.len()],
                );
                index.full_many(piece, stored, found)?;
                let each = piece.iter().zip(stored.chunks_exact(self.dim)).zip(found);
                for ((&key, stored), _) in each.filter(|(_, found)| **found) {
                    let distance = self.metric.distance(stored, query);
                    hits.push(Hit { key, distance });
                }
            }
        };
        let helpers = usize::from(keys.len() >= RERANK_SHARED_FROM);
        let mut hits = Vec::with_capacity(keys.len());
        for part in with_helpers(helpers, &work) {
            hits.extend(part.map_err(|e| failed("search", e))??);
        }
        hits.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key)));
        Ok(hits)
    }
}

/// Both looks' hits, each key once, nearest first (ties by key): the
/// first's strays and walk may hold a nearer stranger than the scan's few.
fn both(first: Vec<Hit>, mut second: Vec<Hit>) -> Vec<Hit> {
    second.extend(first);
    second.sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.key.cmp(&b.key)));
    second.dedup_by_key(|h| h.key);
    second
}

#[cfg(test)]
mod tests {
    use super::super::test_vectors::{graph_of, near, random_unit, unit};
    use super::*;
    use crate::metric::Metric;

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

    #[test]
    fn a_walk_keeps_its_count_and_a_wider_look_more() {
        // usearch returns as many hits as it looks wide: a walk as set, or
        // narrower, re-ranks its `count` nearest; a wider one RERANK_MORE
        // more. No strays (none join the walk's hits).
        let index = VectorIndex::new(Metric::Cosine, 64)
            .unwrap()
            .with_exact_up_to(0);
        for k in 0..3000u64 {
            index.insert(k, &unit(k, 64)).unwrap();
        }
        assert_eq!(index.set_strays(&[], 0.0, 0).unwrap(), 0);
        let query = unit(1234, 64);
        for breadth in [super::super::EXPANSION_SEARCH, 8, 100, 300] {
            index.set_expansion_search(breadth);
            let hits = index.nearest(&query, 4).unwrap();
            assert_eq!((hits.len(), hits[0].key), (4, 1234), "{breadth} wide");
            let wide = index.nearest_wide(&query, 4, WIDER_SEARCH).unwrap();
            let more = if breadth < WIDER_SEARCH {
                RERANK_MORE
            } else {
                0
            };
            assert_eq!(
                (wide.len(), wide[0].key),
                (4 + more, 1234),
                "{breadth} wide"
            );
        }
    }

    #[test]
    fn keys_fetched_together_are_what_each_fetched_alone_is() {
        // Present, absent, removed and repeated keys, more than one piece of
        // the patched usearch's batch (64), both kinds of storage.
        for metric in [Metric::Cosine, Metric::Euclidean] {
            let index = VectorIndex::new(metric, 64).unwrap();
            for k in 0..200u64 {
                index.insert(k, &random_unit(k, 64)).unwrap();
            }
            index.remove(17).unwrap();
            let keys: Vec<u64> = (0..150u64).map(|i| (i * 7) % 260).chain([3, 3]).collect();
            let graph = index.read();
            let mut out = vec![0.0f32; keys.len() * 64];
            let mut found = vec![false; keys.len()];
            graph.full_many(&keys, &mut out, &mut found).unwrap();
            let (mut alone, mut coarse) = (vec![0.0f32; 64], vec![0i8; 64]);
            for ((&key, out), &found) in keys.iter().zip(out.chunks_exact(64)).zip(&found) {
                let there = graph.full(key, &mut alone, &mut coarse);
                assert_eq!(found, there, "{metric:?} key {key}");
                assert_eq!(there, key < 200 && key != 17, "{metric:?} key {key}");
                if there {
                    assert_eq!(out, &alone[..], "{metric:?} key {key}");
                }
            }
        }
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
    fn both_looks_name_a_known_face_at_once_and_scan_for_an_unknown_one() {
        let dim = 512;
        let crowd: Vec<(u64, Vec<f32>)> = (1..3000u64).map(|k| (k, random_unit(k, dim))).collect();
        let index = graph_of(dim, &[], &crowd);
        let far = |hits: &[Hit]| hits.first().is_none_or(|h| h.distance > 0.5);
        for early in [false, true] {
            // The walk as wide as the first look walks (narrower beside
            // the scan).
            let breadth = if early { index.beside_breadth() } else { 0 };
            // A known face that walk names: over uniform strangers a walk
            // misses a few, and which ones varies with the threads that
            // built the graph.
            let (key, known) = (0..16u64)
                .map(|i| 42 + 97 * i)
                .map(|k| (k, near(&crowd[k as usize - 1].1, 10_000 + k)))
                .find(|(_, q)| !far(&index.search(q, 4, breadth, None).unwrap()))
                .expect("the walk names one of 16 known faces");
            let hits = index.nearest_then_signs(&known, 4, early, far).unwrap();
            assert_eq!(hits[0].key, key);
            assert!(hits.len() < SIGN_CANDIDATES, "the first look alone");
            let stranger = random_unit(99_999, dim);
            let hits = index.nearest_then_signs(&stranger, 4, early, far).unwrap();
            assert!(hits.len() >= SIGN_CANDIDATES, "the second look too");
            let walked = index.search(&stranger, 4, breadth, None).unwrap();
            assert!(
                walked.iter().all(|w| hits.contains(w)),
                "the first look's kept"
            );
            let order = |h: &Hit| (h.distance, h.key);
            assert!(
                hits.windows(2).all(|w| order(&w[0]) < order(&w[1])),
                "each key once"
            );
            let exact = index.nearest_exact(&stranger, 1).unwrap();
            assert_eq!(
                (hits[0].key, hits[0].distance),
                (exact[0].key, exact[0].distance)
            );
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
