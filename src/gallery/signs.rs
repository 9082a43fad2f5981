//! The second look of a cosine gallery: one bit per value, the sign, of
//! every vector, scanned whole by Hamming distance; the nearest few are then
//! re-ranked by the full distance. A graph walk can miss a face whose
//! neighbours are all far away, however wide it looks (uniform random
//! people at a million: 0.64 named with the 256-wide walk); a scan of every
//! vector cannot. Two directions an angle θ apart differ in about θ/π of
//! their signs: a face at 0.4 (cosine distance) from its match differs in
//! about 151 of 512 bits, a stranger in 256 ± 11, so among a million
//! strangers the match stays among the nearest 256 by more than 6 standard
//! deviations (docs/gallery.md, "Matching a large gallery").
//!
//! 64 bytes per 512-d person; 64 MB scanned at a million (docs/benchmarks.md,
//! "Faces unlike the rest" for the time).

use std::collections::BinaryHeap;

/// Words (u64) of sign bits for a vector of `dim` values.
pub fn words(dim: usize) -> usize {
    dim.div_ceil(64)
}

/// The sign bits of `coarse` (a value >= 0 sets its bit) into `out`.
pub fn pack(coarse: &[i8], out: &mut [u64]) {
    out.fill(0);
    for (i, &v) in coarse.iter().enumerate() {
        out[i / 64] |= ((v >= 0) as u64) << (i % 64);
    }
}

/// Scans of more codes than this are split over the cores: a million is
/// 64 MB, and one core reads it at about 7 GB/s.
const PARALLEL_FROM: usize = 100_000;
/// At most this many parts (memory bandwidth, not cores, bounds the rest).
const MAX_PARTS: usize = 4;

/// The slots of the `count` codes nearest to `query` by Hamming distance,
/// nearest first (`codes`: `words` u64 per slot; slots where `live` is
/// false skipped). Large scans run on several cores.
pub fn nearest(
    codes: &[u64],
    words: usize,
    query: &[u64],
    count: usize,
    live: impl Fn(usize) -> bool + Sync,
) -> Result<Vec<usize>, String> {
    if count == 0 || words == 0 {
        return Ok(Vec::new());
    }
    let slots = codes.len() / words;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let parts = if slots >= PARALLEL_FROM {
        cores.min(MAX_PARTS)
    } else {
        1
    };
    nearest_in_parts(codes, words, query, count, &live, parts)
}

/// `nearest` over `parts` parts, each on a thread of its own (on this one
/// when a thread cannot be started).
fn nearest_in_parts(
    codes: &[u64],
    words: usize,
    query: &[u64],
    count: usize,
    live: &(impl Fn(usize) -> bool + Sync),
    parts: usize,
) -> Result<Vec<usize>, String> {
    let slots = codes.len() / words;
    let per = slots.div_ceil(parts.max(1)).max(1);
    let part = |first: usize| {
        let last = (first + per).min(slots);
        let mine = &codes[first * words..last * words];
        let found = nearest_here(mine, words, query, count, |s| live(first + s));
        found
            .into_iter()
            .map(move |(d, s)| (d, first + s))
            .collect::<Vec<_>>()
    };
    if parts <= 1 {
        return Ok(best(part(0), count));
    }
    let found: Vec<(u32, usize)> = std::thread::scope(|scope| {
        let mut all = Vec::with_capacity(count * parts);
        let mut workers = Vec::new();
        for first in (0..slots).step_by(per) {
            match std::thread::Builder::new().spawn_scoped(scope, move || part(first)) {
                Ok(worker) => workers.push(worker),
                Err(_) => all.extend(part(first)),
            }
        }
        for worker in workers {
            all.extend(
                worker
                    .join()
                    .map_err(|_| "a scan thread panicked".to_string())?,
            );
        }
        Ok::<_, String>(all)
    })?;
    Ok(best(found, count))
}

/// The slots of the `count` nearest of `found`, nearest first.
fn best(mut found: Vec<(u32, usize)>, count: usize) -> Vec<usize> {
    found.sort_unstable();
    found.truncate(count);
    found.into_iter().map(|(_, slot)| slot).collect()
}

/// One part's `count` nearest (distance, slot), on this thread.
fn nearest_here(
    codes: &[u64],
    words: usize,
    query: &[u64],
    count: usize,
    live: impl Fn(usize) -> bool,
) -> Vec<(u32, usize)> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: the CPU has POPCNT, checked just above.
        return unsafe { nearest_popcnt(codes, words, query, count, live) };
    }
    scan(codes, words, query, count, live)
}

/// `scan` compiled with the POPCNT instruction (the default target lacks it,
/// and `count_ones` without it is a dozen instructions).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn nearest_popcnt(
    codes: &[u64],
    words: usize,
    query: &[u64],
    count: usize,
    live: impl Fn(usize) -> bool,
) -> Vec<(u32, usize)> {
    scan(codes, words, query, count, live)
}

#[inline(always)]
fn scan(
    codes: &[u64],
    words: usize,
    query: &[u64],
    count: usize,
    live: impl Fn(usize) -> bool,
) -> Vec<(u32, usize)> {
    match words {
        // 512-d and 128-d: the length known, the loop unrolled.
        8 => keep_nearest(codes, 8, count, live, |c| hamming::<8>(c, query)),
        2 => keep_nearest(codes, 2, count, live, |c| hamming::<2>(c, query)),
        _ => keep_nearest(codes, words, count, live, |c| {
            c.iter().zip(query).map(|(a, b)| (a ^ b).count_ones()).sum()
        }),
    }
}

/// Bits that differ between `code` and `query`, `W` words each.
#[inline(always)]
fn hamming<const W: usize>(code: &[u64], query: &[u64]) -> u32 {
    let mut d = 0u32;
    for w in 0..W {
        d += (code[w] ^ query[w]).count_ones();
    }
    d
}

/// The `count` live slots nearest by `distance`, as (distance, slot).
#[inline(always)]
fn keep_nearest(
    codes: &[u64],
    words: usize,
    count: usize,
    live: impl Fn(usize) -> bool,
    distance: impl Fn(&[u64]) -> u32,
) -> Vec<(u32, usize)> {
    let mut kept = Kept::new(count);
    for (slot, code) in codes.chunks_exact(words).enumerate() {
        let d = distance(code);
        if d < kept.bound && live(slot) {
            kept.push(d, slot);
        }
    }
    kept.slots()
}

/// The `count` nearest so far, farthest on top; `bound`: what a code must
/// beat to get in (one compare per code for all the others).
struct Kept {
    heap: BinaryHeap<(u32, usize)>,
    count: usize,
    bound: u32,
}

impl Kept {
    fn new(count: usize) -> Self {
        Kept {
            heap: BinaryHeap::with_capacity(count + 1),
            count,
            bound: u32::MAX,
        }
    }

    fn push(&mut self, d: u32, slot: usize) {
        self.heap.push((d, slot));
        if self.heap.len() > self.count {
            self.heap.pop();
        }
        if self.heap.len() == self.count {
            self.bound = self.heap.peek().map_or(u32::MAX, |&(far, _)| far);
        }
    }

    fn slots(self) -> Vec<(u32, usize)> {
        self.heap.into_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_signs_and_finds_the_nearest_codes() {
        let mut a = [0u64; 2];
        pack(&[1, -1, 0, -5], &mut a);
        assert_eq!(a, [0b0101, 0]);
        let codes = [0b0000u64, 0b1111, 0b0111, 0b0101];
        let query = [0b0101u64];
        let near = |count, live: &(dyn Fn(usize) -> bool + Sync)| {
            nearest(&codes, 1, &query, count, live).unwrap()
        };
        assert_eq!(near(2, &|_| true), vec![3, 2]);
        assert_eq!(near(2, &|s| s != 3), vec![2, 0]);
        assert_eq!(near(10, &|_| true).len(), 4);
    }

    #[test]
    fn a_scan_split_in_parts_finds_what_one_pass_finds() {
        // The nearest codes sit at the parts' edges and in the last part;
        // some of them are not live.
        let slots = 1000;
        let near = [0usize, 332, 333, 334, 666, 667, 999, 998];
        let codes: Vec<u64> = (0..slots)
            .map(|s| {
                if near.contains(&s) {
                    s as u64 & 1
                } else {
                    u64::MAX >> (s % 7)
                }
            })
            .collect();
        let query = [0u64];
        let live = |s: usize| s != 333 && s != 998;
        let mut one: Vec<(u32, usize)> = scan(&codes, 1, &query, 5, live);
        one.sort_unstable();
        let one: Vec<usize> = one.into_iter().map(|(_, s)| s).collect();
        assert_eq!(one, vec![0, 332, 334, 666, 667]);
        for parts in 1..=4 {
            let split = nearest_in_parts(&codes, 1, &query, 5, &live, parts).unwrap();
            assert_eq!(split, one, "{parts} parts");
        }
        let last = nearest_in_parts(&codes, 1, &query, 7, &live, 3).unwrap();
        assert!(last.contains(&999) && !last.contains(&998), "{last:?}");
    }
}
