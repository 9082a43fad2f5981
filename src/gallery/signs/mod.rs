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
//! The scan is bound by memory, not by the cores: 64 bytes per 512-d person,
//! 64 MB at a million. So the codes lie in two planes (`Signs`): the first
//! 256 bits of every person together, scanned whole (32 MB), then the rest
//! of only the `FIRST_PLANE_KEEPS` nearest by those. The match, 75 ± 7 of
//! 256 bits away against a stranger's 128 ± 8, stays among them by more
//! than 4 standard deviations, and by far more on faces that are not
//! uniform noise (docs/benchmarks.md, "Faces unlike the rest").

mod kept;
mod scan;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use scan::{at_once, nearest, nearest_with, Kernel, AHEAD};
use scan::{keep_nearest_of, scored_beside, slots_of};

/// Words (u64) of sign bits for a vector of `dim` values.
pub fn words(dim: usize) -> usize {
    dim.div_ceil(64)
}

/// The sign bits of `coarse` (a value >= 0 sets its bit) into `out`.
pub fn pack(coarse: &[i8], out: &mut [u64]) {
    debug_assert_eq!(out.len(), words(coarse.len()));
    out.fill(0);
    let whole = coarse.chunks_exact(64);
    let (tail, at) = (whole.remainder(), coarse.len() / 64);
    for (word, values) in out.iter_mut().zip(whole) {
        *word = word_of(values);
    }
    if !tail.is_empty() {
        out[at] = word_plain(tail);
    }
}

/// The sign bits of 64 values, 16 at a time: a load makes a million
/// people's (1.0 to 1.2 s on two cores a bit at a time, 0.2 to 0.5 s so).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn word_of(values: &[i8]) -> u64 {
    use std::arch::x86_64::{_mm_loadu_si128, _mm_movemask_epi8};
    debug_assert_eq!(values.len(), 64);
    let mut negative = 0u64;
    for (q, sixteen) in values.chunks_exact(16).enumerate() {
        // SAFETY: SSE2 is enabled (the cfg); the load reads the 16 values
        // of `sixteen`.
        let bits = unsafe { _mm_movemask_epi8(_mm_loadu_si128(sixteen.as_ptr().cast())) };
        negative |= u64::from(bits as u16) << (16 * q);
    }
    !negative
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
fn word_of(values: &[i8]) -> u64 {
    word_plain(values)
}

/// Up to 64 values a bit at a time: a vector's last word, other CPUs' every
/// word, and what the tests hold the SIMD one to.
fn word_plain(values: &[i8]) -> u64 {
    let bit = |(i, &v): (usize, &i8)| ((v >= 0) as u64) << i;
    values.iter().enumerate().map(bit).fold(0, |w, b| w | b)
}

/// Words of a code's first plane: 256 bits. A longer code's other words
/// are its second plane.
pub const HEAD_WORDS: usize = 4;

/// The nearest by the first plane whose second plane is read. A face
/// exactly 0.4 from its match (0.8x the ONNX threshold): the match ranked
/// at most 163rd by the first plane among a million uniform strangers,
/// 260th among clustered people, 17th among real faces
/// (`benches/matching/sign_planes.py`); by the binomial tails, among
/// uniform strangers it falls out of these once in about 50,000 such faces.
pub const FIRST_PLANE_KEEPS: usize = 4096;

/// Candidates of the first plane asked for from memory this many ahead of
/// the one whose second plane is counted (they lie anywhere in it: asked
/// together, their misses overlap).
const RESCORE_AHEAD: usize = 16;

/// Every slot's sign bits (`pack`'s code of `words(dim)` words) in two
/// planes: the first `HEAD_WORDS` words of every slot together, then the
/// rest of every slot. `nearest` scans the first whole and reads the second
/// for its nearest only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signs {
    head_words: usize,
    tail_words: usize,
    head: Vec<u64>,
    tail: Vec<u64>,
}

impl Signs {
    /// No slots yet, for vectors of `dim` values.
    pub fn new(dim: usize) -> Self {
        let words = words(dim);
        let head_words = words.min(HEAD_WORDS);
        Signs {
            head_words,
            tail_words: words - head_words,
            head: Vec::new(),
            tail: Vec::new(),
        }
    }

    /// Words of one slot's code.
    pub fn words(&self) -> usize {
        self.head_words + self.tail_words
    }

    pub fn slots(&self) -> usize {
        self.head.len() / self.head_words.max(1)
    }

    /// Hold `slots` slots, new ones all zero bits.
    pub fn resize(&mut self, slots: usize) {
        self.head.resize(slots * self.head_words, 0);
        self.tail.resize(slots * self.tail_words, 0);
    }

    /// Slot `slot`'s code (`words()` words), the slots grown to hold it.
    pub fn put(&mut self, slot: usize, code: &[u64]) {
        if slot >= self.slots() {
            self.resize(slot + 1);
        }
        let mut part = SignsPart {
            head_words: self.head_words,
            tail_words: self.tail_words,
            head: &mut self.head,
            tail: &mut self.tail,
        };
        part.put(slot, code);
    }

    /// Slot `slot`'s bits all zero (nothing when it has none).
    pub fn clear(&mut self, slot: usize) {
        if slot < self.slots() {
            self.put(slot, &vec![0; self.words()]);
        }
    }

    /// The slots in parts of `per` (the last one shorter), each written on
    /// its own (by another thread, say).
    pub fn parts_mut(&mut self, per: usize) -> impl Iterator<Item = SignsPart<'_>> {
        let (head_words, tail_words) = (self.head_words, self.tail_words);
        let per = per.max(1);
        let tails = self.tail.chunks_mut((per * tail_words).max(1));
        let mut tails = tails.chain(std::iter::repeat_with(|| &mut [][..]));
        self.head
            .chunks_mut((per * head_words).max(1))
            .map(move |head| SignsPart {
                head_words,
                tail_words,
                head,
                tail: tails.next().unwrap_or_default(),
            })
    }

    /// The slots of the `count` nearest to `query` (a code of `words()`
    /// words), nearest first, slots where `live` is false skipped: the
    /// `FIRST_PLANE_KEEPS` nearest by the first plane (on several cores
    /// when many), then those by their whole code.
    pub fn nearest(
        &self,
        query: &[u64],
        count: usize,
        live: impl Fn(usize) -> bool + Sync,
    ) -> Result<Vec<usize>, String> {
        at_once(|now| self.nearest_beside(query, count, live, now))
    }

    /// `nearest`, its scan begun on a helper thread while this one runs
    /// `first`, which says whether it is wanted after all (None when not).
    pub fn nearest_beside<R>(
        &self,
        query: &[u64],
        count: usize,
        live: impl Fn(usize) -> bool + Sync,
        first: impl FnOnce() -> (R, bool),
    ) -> (R, Option<Result<Vec<usize>, String>>) {
        let (head_words, tail_words) = (self.head_words, self.tail_words);
        if query.len() != self.words() {
            let (first, wanted) = first();
            let why = format!(
                "a query of {} words for codes of {}",
                query.len(),
                self.words()
            );
            return (first, wanted.then_some(Err(why)));
        }
        let (head, rest) = query.split_at(head_words);
        let keep = match tail_words {
            0 => count,
            _ => FIRST_PLANE_KEEPS.max(count),
        };
        let (first, found) = scored_beside(&self.head, head_words, head, keep, &live, first);
        let found = found.map(|found| {
            let mut found = found?;
            if tail_words > 0 {
                keep_nearest_of(&mut found, keep);
                found = rescored(found, &self.tail, tail_words, rest);
            }
            Ok(slots_of(found, count))
        });
        (first, found)
    }

    /// Bytes held.
    pub fn memory(&self) -> usize {
        (self.head.capacity() + self.tail.capacity()) * 8
    }
}

/// Some slots of `Signs`, from its first.
pub struct SignsPart<'a> {
    head_words: usize,
    tail_words: usize,
    head: &'a mut [u64],
    tail: &'a mut [u64],
}

impl SignsPart<'_> {
    /// The part's `at`-th slot's code (`words` words).
    pub fn put(&mut self, at: usize, code: &[u64]) {
        let (h, t) = (self.head_words, self.tail_words);
        debug_assert_eq!(code.len(), h + t);
        let (first, rest) = code.split_at(h.min(code.len()));
        self.head[at * h..(at + 1) * h].copy_from_slice(first);
        self.tail[at * t..(at + 1) * t].copy_from_slice(rest);
    }

    /// Slots in this part.
    pub fn slots(&self) -> usize {
        self.head.len() / self.head_words.max(1)
    }
}

/// `found` (distances by the first plane) with the rest of each code
/// counted (`rest`: the second plane, `words` per slot; `query`: its part
/// of the query's code).
fn rescored(
    mut found: Vec<(u32, usize)>,
    rest: &[u64],
    words: usize,
    query: &[u64],
) -> Vec<(u32, usize)> {
    let code = |slot: usize| &rest[slot * words..(slot + 1) * words];
    for k in 0..found.len() {
        if let Some(&(_, ahead)) = found.get(k + RESCORE_AHEAD) {
            prefetch(code(ahead).as_ptr());
        }
        let (d, slot) = &mut found[k];
        *d += code(*slot)
            .iter()
            .zip(query)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum::<u32>();
    }
    found
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

/// `prefetch` for a line of bytes.
#[inline(always)]
pub fn prefetch_line(at: *const u8) {
    prefetch(at.cast());
}

/// Ask the cache for the line at `at` (it reads nothing and cannot fault).
#[inline(always)]
fn prefetch(at: *const u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is SSE (in every x86_64); it dereferences nothing.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
mod tests {
    use super::scan::random_words;
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
    fn packs_every_value_sign_by_sign() {
        // 512 values (whole words) and 130 (a tail of two), each value's
        // bit against the value itself; -128, -1, 0 and 127 among them.
        for dim in [512usize, 130] {
            let coarse: Vec<i8> = (0..dim).map(|i| (i * 37 % 256) as u8 as i8).collect();
            let mut bits = vec![0u64; words(dim)];
            pack(&coarse, &mut bits);
            for (i, &v) in coarse.iter().enumerate() {
                assert_eq!(
                    bits[i / 64] >> (i % 64) & 1 == 1,
                    v >= 0,
                    "value {i} ({v}) of {dim}"
                );
            }
            if dim % 64 != 0 {
                assert_eq!(
                    bits[dim / 64] >> (dim % 64),
                    0,
                    "bits past the values of {dim}"
                );
            }
            for (word, values) in bits.iter().zip(coarse.chunks_exact(64)) {
                assert_eq!(*word, word_plain(values), "a bit at a time, of {dim}");
            }
        }
    }

    #[test]
    fn two_planes_find_the_nearest_by_the_whole_code() {
        // 512-bit codes: the nearest by the whole code, planted near the
        // query in both planes, among random ones; the first plane alone
        // ranks a decoy first (its first plane is the query's, its second
        // the complement).
        let mut random = random_words();
        let query: Vec<u64> = (0..8).map(|_| random()).collect();
        let slots = 3000;
        let mut signs = Signs::new(512);
        assert_eq!((signs.words(), signs.slots()), (8, 0));
        let mut near = query.clone();
        near[0] ^= 0b111;
        near[6] ^= 0b1;
        let mut decoy = query.clone();
        for w in &mut decoy[4..] {
            *w = !*w;
        }
        for slot in 0..slots {
            let code: Vec<u64> = match slot {
                2500 => near.clone(),
                17 => decoy.clone(),
                _ => (0..8).map(|_| random()).collect(),
            };
            signs.put(slot, &code);
        }
        assert_eq!(signs.slots(), slots);
        let nearest = |signs: &Signs, count, live: &(dyn Fn(usize) -> bool + Sync)| {
            signs.nearest(&query, count, live).unwrap()
        };
        let found = nearest(&signs, 5, &|_| true);
        assert_eq!(found[0], 2500);
        assert!(!found.contains(&17), "{found:?}");
        assert_ne!(nearest(&signs, 1, &|s| s != 2500)[0], 2500);
        // The first FIRST_PLANE_KEEPS by the first plane hold all 3,000:
        // ranked by the whole code, as a scan of whole codes ranks them.
        let mut whole = vec![0u64; slots * 8];
        for slot in 0..slots {
            let (h, t) = (&signs.head[slot * 4..][..4], &signs.tail[slot * 4..][..4]);
            whole[slot * 8..][..4].copy_from_slice(h);
            whole[slot * 8 + 4..][..4].copy_from_slice(t);
        }
        let by_whole = nearest_with(Kernel::Plain, &whole, 8, &query, 64, 1, 0).unwrap();
        assert_eq!(nearest(&signs, 64, &|_| true), by_whole.unwrap());
        signs.clear(2500);
        assert_ne!(nearest(&signs, 1, &|_| true)[0], 2500);
        assert!(
            signs.nearest(&query[..4], 1, |_| true).is_err(),
            "half a query"
        );
    }

    #[test]
    fn signs_are_written_in_parts_and_short_codes_keep_one_plane() {
        let mut signs = Signs::new(512);
        signs.resize(10);
        for (p, mut part) in signs.parts_mut(4).enumerate() {
            assert_eq!(part.slots(), if p == 2 { 2 } else { 4 });
            for at in 0..part.slots() {
                let slot = (p * 4 + at) as u64;
                part.put(at, &[slot, 0, 0, 0, slot, slot, 0, 0]);
            }
        }
        for slot in 0..10u64 {
            let query = [slot, 0, 0, 0, slot, slot, 0, 0];
            assert_eq!(
                signs.nearest(&query, 1, |_| true).unwrap(),
                vec![slot as usize]
            );
        }
        // 128-d: two words, one plane.
        let mut short = Signs::new(128);
        short.put(3, &[1, 1]);
        short.put(1, &[u64::MAX, 0]);
        assert_eq!(short.slots(), 4);
        assert_eq!(short.nearest(&[1, 1], 2, |_| true).unwrap(), vec![3, 0]);
        assert!(short.memory() >= 4 * 2 * 8);
    }
}
