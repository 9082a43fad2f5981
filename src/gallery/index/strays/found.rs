//! How the strays are found: over the whole graph at a load (the links
//! that lead to each node, and each node's reach, on every core), and for
//! each vector inserted alone.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use usearch::Index;

use super::{add_stray, FEW_LINKS_IN_PER_NEIGHBOUR, ISOLATED_SHARE, MAX_STRAYS, SAMPLE};
use crate::error::Result;
use crate::gallery::index::{Graph, VectorIndex};
use crate::metric::Metric;

impl VectorIndex {
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

    /// Whether `key`, which `links` base-level links lead to, is a stray.
    pub(in crate::gallery::index) fn is_stray(&self, index: &Graph, key: u64, links: u32) -> bool {
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
    pub(super) fn reach(
        &self,
        index: &Graph,
        keys: &[u64],
        limit: Option<f32>,
    ) -> Vec<Option<f32>> {
        let cores = crate::gallery::share::cores();
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
    let cores = crate::gallery::share::cores();
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
pub(in crate::gallery::index) fn links_back(index: &Index, key: u64) -> u32 {
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
pub(super) struct Quick {
    pub(super) coarse: Vec<i8>,
    norm: f32,
    pub(super) full: Vec<f32>,
}

impl Quick {
    pub(super) fn new(dim: usize) -> Self {
        Quick {
            coarse: vec![0; dim],
            norm: 0.0,
            full: vec![0.0; dim],
        }
    }

    pub(super) fn load(&mut self, graph: &Graph, key: u64) -> bool {
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
