//! The scan of one plane of codes for the nearest by Hamming distance: in
//! chunks shared with helper threads (`share.rs`), each chunk by the fastest
//! kernel the CPU runs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::kept::Kept;
use super::{hamming, HEAD_WORDS};
use crate::gallery::share::beside;

/// Scans of more codes than this are split over the cores: a million's
/// first plane is 32 MB (docs/benchmarks.md).
const PARALLEL_FROM: usize = 100_000;
/// At most this many parts (memory bandwidth, not cores, bounds the rest).
const MAX_PARTS: usize = 4;
/// Slots a thread claims at a time in a scan shared between threads: 256 KB
/// of 256-bit codes, read in about 0.02 ms (a scan begun beside a walk that
/// then names the face stops at the end of its chunk).
const CHUNK: usize = 1 << 13;
/// Bytes ahead of the SIMD kernels' reads that they ask the cache for. In a
/// server the codes come from memory, and the CPU's own prefetcher stops at
/// every 4 KiB: asked ahead, a scan of a million whole 512-bit codes from
/// memory took 3.05 against 3.69 ms on 2 cores (2026-11-28, before the
/// planes).
pub const AHEAD: usize = 4096;

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
    Ok(slots_of(scored(codes, words, query, count, &live)?, count))
}

/// Codes with their distances, in no order, or why a scan failed.
pub(super) type Scored = Result<Vec<(u32, usize)>, String>;

/// What a search that can begin beside other work (`first`) finds with
/// nothing beside it: its `first` wants the scan at once.
pub fn at_once<T>(
    search: impl FnOnce(fn() -> ((), bool)) -> ((), Option<Result<T, String>>),
) -> Result<T, String> {
    let ((), found) = search(|| ((), true));
    found.unwrap_or_else(|| Err("a scan wanted at once was not run".to_string()))
}

/// `nearest`'s codes, each with its distance, in no order.
pub(super) fn scored(
    codes: &[u64],
    words: usize,
    query: &[u64],
    count: usize,
    live: &(impl Fn(usize) -> bool + Sync),
) -> Scored {
    at_once(|now| scored_beside(codes, words, query, count, live, now))
}

/// `scored`, begun on a helper thread while this one runs `first`, which
/// says whether the scan is wanted after all: if so, this thread joins it
/// (None when it is not).
pub(super) fn scored_beside<R>(
    codes: &[u64],
    words: usize,
    query: &[u64],
    count: usize,
    live: &(impl Fn(usize) -> bool + Sync),
    first: impl FnOnce() -> (R, bool),
) -> (R, Option<Scored>) {
    if count == 0 || words == 0 {
        let (first, wanted) = first();
        return (first, wanted.then(|| Ok(Vec::new())));
    }
    let slots = codes.len() / words;
    let cores = crate::gallery::share::cores();
    let parts = if slots >= PARALLEL_FROM {
        cores.min(MAX_PARTS)
    } else {
        1
    };
    let scan = Scan {
        codes,
        words,
        query,
        count,
        ahead: AHEAD,
    };
    scan.beside(live, parts, CHUNK, Kernel::fastest(words), first)
}

/// How a part is scanned: `nearest` takes the fastest the CPU has
/// (`benches/sign_scan.rs` compares them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// A word at a time, plain Rust.
    Plain,
    /// A word at a time with the POPCNT instruction.
    Popcnt,
    /// 256-bit codes four at a time in AVX2 registers.
    Avx2,
    /// 256-bit codes eight at a time with AVX-512's VPOPCNTQ.
    Avx512,
}

impl Kernel {
    const ALL: [Kernel; 4] = [Kernel::Plain, Kernel::Popcnt, Kernel::Avx2, Kernel::Avx512];

    /// Whether this CPU runs the kernel for codes of `words` words (a cached
    /// feature check: cheap enough for every scan).
    pub fn runs(self, words: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let wide = words == HEAD_WORDS && has!("popcnt");
            match self {
                Kernel::Plain => true,
                Kernel::Popcnt => has!("popcnt"),
                Kernel::Avx2 => wide && has!("avx2"),
                Kernel::Avx512 => wide && has!("avx512f") && has!("avx512vpopcntdq"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = words;
            self == Kernel::Plain
        }
    }

    /// The kernels this CPU runs for codes of `words` words, slowest first.
    pub fn available(words: usize) -> Vec<Kernel> {
        Self::ALL.into_iter().filter(|k| k.runs(words)).collect()
    }

    fn fastest(words: usize) -> Kernel {
        Self::ALL
            .into_iter()
            .rev()
            .find(|k| k.runs(words))
            .unwrap_or(Kernel::Plain)
    }
}

/// `nearest` of every slot with a given kernel, on up to `parts` threads,
/// asking the cache for the bytes `ahead` of its reads (SIMD kernels; 0:
/// not asked), for benches; None when this CPU cannot run the kernel.
pub fn nearest_with(
    kernel: Kernel,
    codes: &[u64],
    words: usize,
    query: &[u64],
    count: usize,
    parts: usize,
    ahead: usize,
) -> Option<Result<Vec<usize>, String>> {
    if words == 0 || query.len() != words || !kernel.runs(words) {
        return None;
    }
    let scan = Scan {
        codes,
        words,
        query,
        count,
        ahead,
    };
    let found = at_once(|now| scan.beside(&|_| true, parts, CHUNK, kernel, now));
    Some(found.map(|found| slots_of(found, count)))
}

/// One scan: the `count` nearest to `query` of `codes`, `words` u64 each;
/// `ahead`: as `AHEAD`.
struct Scan<'a> {
    codes: &'a [u64],
    words: usize,
    query: &'a [u64],
    count: usize,
    ahead: usize,
}

impl Scan<'_> {
    /// On up to `parts - 1` helpers, which claim `chunk` slots at a time,
    /// begun while this thread runs `first`; then, if `first` says the scan
    /// is wanted, on this thread too (`share.rs`: a helper slow to start
    /// leaves its chunks to this thread instead of holding it up), and if
    /// not, stopped at the helpers' next chunk. Each part's nearest, with
    /// their distances, in no order.
    fn beside<R>(
        &self,
        live: &(impl Fn(usize) -> bool + Sync),
        parts: usize,
        chunk: usize,
        kernel: Kernel,
        first: impl FnOnce() -> (R, bool),
    ) -> (R, Option<Scored>) {
        let (words, count) = (self.words, self.count);
        let slots = self.codes.len() / words;
        let chunk = if parts <= 1 { slots } else { chunk }.max(1);
        let (next, stop) = (AtomicUsize::new(0), AtomicBool::new(false));
        let scan = || {
            let mut kept = Kept::new(count, words);
            while !stop.load(Ordering::Relaxed) {
                let first = next.fetch_add(1, Ordering::Relaxed).saturating_mul(chunk);
                if first >= slots {
                    break;
                }
                let last = (first + chunk).min(slots);
                kept.first = first;
                let codes = &self.codes[first * words..last * words];
                nearest_here(&mut kept, codes, self, live, kernel);
            }
            kept.slots()
        };
        let helpers = if slots > chunk { parts - 1 } else { 0 };
        let ((first, mine), theirs) = beside(helpers, &scan, || {
            let (first, wanted) = first();
            stop.store(!wanted, Ordering::Relaxed);
            (first, wanted.then(scan))
        });
        let Some(mut found) = mine else {
            return (first, None);
        };
        for part in theirs {
            match part {
                Ok(part) => found.extend(part),
                Err(e) => return (first, Some(Err(e))),
            }
        }
        (first, Some(Ok(found)))
    }
}

/// The slots of the `count` nearest of `found`, nearest first (ties: the
/// first slot).
pub(super) fn slots_of(mut found: Vec<(u32, usize)>, count: usize) -> Vec<usize> {
    keep_nearest_of(&mut found, count);
    found.sort_unstable();
    found.into_iter().map(|(_, slot)| slot).collect()
}

/// Only the `count` nearest of `found` left, in no order (a selection, not a
/// sort: the first plane's parts hand over thousands).
pub(super) fn keep_nearest_of(found: &mut Vec<(u32, usize)>, count: usize) {
    if found.len() > count {
        if let Some(last) = count.checked_sub(1) {
            found.select_nth_unstable(last);
        }
        found.truncate(count);
    }
}

/// Offer one chunk's codes to `kept`, on this thread, by `kernel`, or by
/// the plain scan when the CPU cannot run it: 256-bit codes (a first plane)
/// with AVX-512 or AVX2 eight or four codes at a time (docs/benchmarks.md,
/// "Faces unlike the rest").
fn nearest_here(
    kept: &mut Kept,
    codes: &[u64],
    of: &Scan,
    live: &impl Fn(usize) -> bool,
    kernel: Kernel,
) {
    let (words, query, ahead) = (of.words, of.query, of.ahead);
    #[cfg(target_arch = "x86_64")]
    if kernel.runs(words) {
        let wide = <&[u64; HEAD_WORDS]>::try_from(query);
        match (kernel, wide) {
            (Kernel::Avx512, Ok(q)) => {
                // SAFETY: the kernel is available (checked just above): the
                // CPU has the features it is compiled for.
                return unsafe { super::x86::nearest_256_avx512(kept, codes, q, ahead, live) };
            }
            (Kernel::Avx2, Ok(q)) => {
                // SAFETY: as above.
                return unsafe { super::x86::nearest_256_avx2(kept, codes, q, ahead, live) };
            }
            (Kernel::Plain, _) => {}
            // SAFETY: as above (every kernel but Plain needs POPCNT).
            _ => return unsafe { nearest_popcnt(kept, codes, words, query, live) },
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (kernel, ahead); // only the plain scan there
    scan(kept, codes, words, query, live)
}

/// `scan` compiled with the POPCNT instruction (the default target lacks it,
/// and `count_ones` without it is a dozen instructions).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
unsafe fn nearest_popcnt(
    kept: &mut Kept,
    codes: &[u64],
    words: usize,
    query: &[u64],
    live: &impl Fn(usize) -> bool,
) {
    scan(kept, codes, words, query, live)
}

#[inline(always)]
fn scan(
    kept: &mut Kept,
    codes: &[u64],
    words: usize,
    query: &[u64],
    live: &impl Fn(usize) -> bool,
) {
    match words {
        // A first plane, 512-d and 128-d: the length known, the loop
        // unrolled.
        4 => keep_nearest(kept, codes, 4, live, |c| hamming::<4>(c, query)),
        8 => keep_nearest(kept, codes, 8, live, |c| hamming::<8>(c, query)),
        2 => keep_nearest(kept, codes, 2, live, |c| hamming::<2>(c, query)),
        _ => keep_nearest(kept, codes, words, live, |c| {
            c.iter().zip(query).map(|(a, b)| (a ^ b).count_ones()).sum()
        }),
    }
}

/// Offer every code to `kept` by `distance`.
#[inline(always)]
fn keep_nearest(
    kept: &mut Kept,
    codes: &[u64],
    words: usize,
    live: &impl Fn(usize) -> bool,
    distance: impl Fn(&[u64]) -> u32,
) {
    for (slot, code) in codes.chunks_exact(words).enumerate() {
        kept.offer(distance(code), slot, live);
    }
}

#[cfg(test)]
pub(super) fn random_words() -> impl FnMut() -> u64 {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scan` on `parts` threads, no first look beside it.
    fn in_parts(
        scan: &Scan,
        live: &(impl Fn(usize) -> bool + Sync),
        parts: usize,
        chunk: usize,
        kernel: Kernel,
    ) -> Vec<(u32, usize)> {
        at_once(|now| scan.beside(live, parts, chunk, kernel, now)).expect("no helper failed")
    }

    /// The plain scan's (distance, slot) of the `count` nearest.
    fn plain(
        codes: &[u64],
        words: usize,
        query: &[u64],
        count: usize,
        live: impl Fn(usize) -> bool,
    ) -> Vec<(u32, usize)> {
        let mut kept = Kept::new(count, words);
        scan(&mut kept, codes, words, query, &live);
        kept.slots()
    }

    #[test]
    fn the_simd_scans_find_what_the_plain_scan_finds() {
        // Random 256-bit codes, a tail after the last whole block, the
        // query itself (0) and its complement (256), some slots not live,
        // ties among the random ones.
        let mut random = random_words();
        let query: [u64; HEAD_WORDS] = std::array::from_fn(|_| random());
        let slots = 1003;
        let mut codes: Vec<u64> = (0..slots * HEAD_WORDS).map(|_| random()).collect();
        codes[40 * HEAD_WORDS..41 * HEAD_WORDS].copy_from_slice(&query);
        for (w, q) in query.iter().enumerate() {
            codes[1001 * HEAD_WORDS + w] = !q;
        }
        let live = |s: usize| s % 17 != 3;
        for count in [1, 5, 64, slots + 10] {
            let plain = slots_of(plain(&codes, HEAD_WORDS, &query, count, live), count);
            assert_eq!(plain[0], 40);
            if count > slots {
                assert_eq!(plain.last(), Some(&1001));
            }
            for kernel in Kernel::available(HEAD_WORDS) {
                // Asked ahead or not, past the end too: the same.
                let ways = [
                    (1, CHUNK, AHEAD),
                    (3, CHUNK, 0),
                    (2, 100, 64),
                    (3, 7, AHEAD),
                ];
                for (parts, chunk, ahead) in ways {
                    let scan = Scan {
                        codes: &codes,
                        words: HEAD_WORDS,
                        query: &query,
                        count,
                        ahead,
                    };
                    let found = in_parts(&scan, &live, parts, chunk, kernel);
                    let found = slots_of(found, count);
                    assert_eq!(found, plain, "{kernel:?}, {count}, {parts} parts");
                }
            }
        }
        println!("kernels here: {:?}", Kernel::available(HEAD_WORDS));
    }

    #[test]
    fn a_scan_split_in_parts_finds_what_one_pass_finds() {
        // The nearest codes sit at the chunks' edges and in the last one,
        // some of them not live, two of them tied for the fifth place (the
        // first slot wins, however the chunks were shared out).
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
        let one = slots_of(plain(&codes, 1, &query, 5, live), 5);
        assert_eq!(one, vec![0, 332, 334, 666, 667]);
        let kernel = Kernel::fastest(1);
        let scan = |count| Scan {
            codes: &codes,
            words: 1,
            query: &query,
            count,
            ahead: AHEAD,
        };
        for parts in 1..=4 {
            for chunk in [1, 7, 333, 334, CHUNK] {
                let split = in_parts(&scan(5), &live, parts, chunk, kernel);
                assert_eq!(slots_of(split, 5), one, "{parts} parts, chunks of {chunk}");
            }
        }
        let last = slots_of(in_parts(&scan(7), &live, 3, 100, kernel), 7);
        assert!(last.contains(&999) && !last.contains(&998), "{last:?}");
    }

    #[test]
    fn a_scan_begun_beside_a_first_look_is_joined_or_stopped() {
        let mut random = random_words();
        let slots = 20_000;
        let codes: Vec<u64> = (0..slots * HEAD_WORDS).map(|_| random()).collect();
        let query: Vec<u64> = codes[777 * HEAD_WORDS..778 * HEAD_WORDS].to_vec();
        let live = |_: usize| true;
        let plain = slots_of(plain(&codes, HEAD_WORDS, &query, 50, live), 50);
        assert_eq!(plain[0], 777);
        let scan = Scan {
            codes: &codes,
            words: HEAD_WORDS,
            query: &query,
            count: 50,
            ahead: AHEAD,
        };
        let kernel = Kernel::fastest(HEAD_WORDS);
        // A first look slow enough for the helper to scan most of it, one
        // that wants the scan at once, one that does not want it.
        for wait_ms in [0, 5, 30] {
            let first = || {
                std::thread::sleep(std::time::Duration::from_millis(wait_ms));
                ("walked", true)
            };
            let (walked, found) = scan.beside(&live, 2, 64, kernel, first);
            assert_eq!(walked, "walked");
            let found = found.expect("wanted").expect("no helper failed");
            assert_eq!(slots_of(found, 50), plain, "after {wait_ms} ms");
        }
        let (named, found) = scan.beside(&live, 2, 64, kernel, || ("named", false));
        assert_eq!((named, found), ("named", None));
    }
}
