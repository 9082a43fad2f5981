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
use std::sync::atomic::{AtomicUsize, Ordering};

use super::share::with_helpers;

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

/// Scans of more codes than this are split over the cores: a million is
/// 64 MB, 3 to 8 ms for one core (docs/benchmarks.md).
const PARALLEL_FROM: usize = 100_000;
/// At most this many parts (memory bandwidth, not cores, bounds the rest).
const MAX_PARTS: usize = 4;
/// Slots a thread claims at a time in a scan shared between threads: 2 MB
/// of 512-bit codes, 0.1 to 0.4 ms.
const CHUNK: usize = 1 << 15;
/// Bytes ahead of the SIMD kernels' reads that they ask the cache for. In a
/// server the codes come from memory, and the CPU's own prefetcher stops at
/// every 4 KiB: asked ahead, a scan of a million from memory took 3.05
/// against 3.69 ms on 2 cores (`benches/sign_scan.rs`, "from memory";
/// docs/benchmarks.md).
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
    let scan = Scan {
        codes,
        words,
        query,
        count,
        ahead: AHEAD,
    };
    scan.in_parts(&live, parts, CHUNK, Kernel::fastest(words))
}

/// How a part is scanned: `nearest` takes the fastest the CPU has
/// (`benches/sign_scan.rs` compares them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// A word at a time, plain Rust.
    Plain,
    /// A word at a time with the POPCNT instruction.
    Popcnt,
    /// 512-bit codes four at a time in AVX2 registers.
    Avx2,
    /// 512-bit codes eight at a time with AVX-512's VPOPCNTQ.
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
            let wide = words == 8 && has!("popcnt");
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
    Some(scan.in_parts(&|_| true, parts, CHUNK, kernel))
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
    /// On this thread and up to `parts - 1` helpers, which claim `chunk`
    /// slots at a time with it (`share.rs`: a helper slow to start leaves
    /// its chunks to this thread instead of holding it up).
    fn in_parts(
        &self,
        live: &(impl Fn(usize) -> bool + Sync),
        parts: usize,
        chunk: usize,
        kernel: Kernel,
    ) -> Result<Vec<usize>, String> {
        let (words, count) = (self.words, self.count);
        let slots = self.codes.len() / words;
        let chunk = if parts <= 1 { slots } else { chunk }.max(1);
        let next = AtomicUsize::new(0);
        let scan = || {
            let mut kept = Kept::new(count);
            loop {
                let first = next.fetch_add(1, Ordering::Relaxed).saturating_mul(chunk);
                if first >= slots {
                    return kept.slots();
                }
                let last = (first + chunk).min(slots);
                kept.first = first;
                let codes = &self.codes[first * words..last * words];
                nearest_here(&mut kept, codes, self, live, kernel);
            }
        };
        if parts <= 1 || slots <= chunk {
            return Ok(best(scan(), count));
        }
        let mut found = Vec::with_capacity(count * parts);
        for part in with_helpers(parts - 1, &scan) {
            found.extend(part?);
        }
        Ok(best(found, count))
    }
}

/// The slots of the `count` nearest of `found`, nearest first.
fn best(mut found: Vec<(u32, usize)>, count: usize) -> Vec<usize> {
    found.sort_unstable();
    found.truncate(count);
    found.into_iter().map(|(_, slot)| slot).collect()
}

/// Offer one chunk's codes to `kept`, on this thread, by `kernel`, or by
/// the plain scan when the CPU cannot run it: 512-bit codes
/// with AVX-512 or AVX2 eight or four codes at a time (AVX-512: 1.5 to 3.4
/// times less core time than a POPCNT per word, docs/benchmarks.md, "Faces
/// unlike the rest").
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
        let wide = <&[u64; 8]>::try_from(query);
        match (kernel, wide) {
            (Kernel::Avx512, Ok(q)) => {
                // SAFETY: the kernel is available (checked just above): the
                // CPU has the features it is compiled for.
                return unsafe { x86::nearest_512_avx512(kept, codes, q, ahead, live) };
            }
            (Kernel::Avx2, Ok(q)) => {
                // SAFETY: as above.
                return unsafe { x86::nearest_512_avx2(kept, codes, q, ahead, live) };
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
        // 512-d and 128-d: the length known, the loop unrolled.
        8 => keep_nearest(kept, codes, 8, live, |c| hamming::<8>(c, query)),
        2 => keep_nearest(kept, codes, 2, live, |c| hamming::<2>(c, query)),
        _ => keep_nearest(kept, codes, words, live, |c| {
            c.iter().zip(query).map(|(a, b)| (a ^ b).count_ones()).sum()
        }),
    }
}

/// The scan of 512-bit codes (8 words) in SIMD registers: each block's
/// distances are summed into one register and compared with the bound at
/// once; only a block with a code below it goes through `Kept::offer`.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{hamming, Kept};
    use std::arch::x86_64::*;

    const WORDS: usize = 8;

    /// Eight codes a block: XOR and VPOPCNTQ per code, then an add tree
    /// leaves code k's distance in lane k.
    #[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
    pub unsafe fn nearest_512_avx512(
        kept: &mut Kept,
        codes: &[u64],
        query: &[u64; WORDS],
        ahead: usize,
        live: &impl Fn(usize) -> bool,
    ) {
        // SAFETY: every load and store is of whole codes inside `codes`
        // (blocks * WORDS * BLOCK <= codes.len()), of `query` (WORDS words)
        // or of a local array of the register's size; `ask` reads nothing.
        unsafe {
            const BLOCK: usize = 8;
            let q = _mm512_loadu_si512(query.as_ptr().cast());
            let blocks = codes.len() / (WORDS * BLOCK);
            for b in 0..blocks {
                let at = codes.as_ptr().add(b * WORDS * BLOCK);
                ask(at, ahead, BLOCK);
                let mut v = [_mm512_setzero_si512(); BLOCK];
                for (k, v) in v.iter_mut().enumerate() {
                    let code = _mm512_loadu_si512(at.add(k * WORDS).cast());
                    *v = _mm512_popcnt_epi64(_mm512_xor_si512(code, q));
                }
                // Lanes of 128 bits: pairs of words summed per code, then
                // halves, then the whole: [d0, d1, ..., d7].
                let pair = |a, b| {
                    _mm512_add_epi64(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b))
                };
                let (a0, a1, a2, a3) = (
                    pair(v[0], v[1]),
                    pair(v[2], v[3]),
                    pair(v[4], v[5]),
                    pair(v[6], v[7]),
                );
                let half = |a, b| {
                    _mm512_add_epi64(
                        _mm512_shuffle_i64x2::<0b10_00_10_00>(a, b),
                        _mm512_shuffle_i64x2::<0b11_01_11_01>(a, b),
                    )
                };
                let sums = half(half(a0, a1), half(a2, a3));
                let bound = _mm512_set1_epi64(kept.bound as i64);
                if _mm512_cmplt_epi64_mask(sums, bound) != 0 {
                    let mut d = [0u64; BLOCK];
                    _mm512_storeu_si512(d.as_mut_ptr().cast(), sums);
                    kept.offer_block(&d, b * BLOCK, live);
                }
            }
            rest(kept, codes, query, blocks * BLOCK, live)
        }
    }

    /// Four codes a block: XOR, bytes counted by a nibble table (PSHUFB),
    /// summed by PSADBW, then the four codes' sums side by side.
    #[target_feature(enable = "avx2,popcnt")]
    pub unsafe fn nearest_512_avx2(
        kept: &mut Kept,
        codes: &[u64],
        query: &[u64; WORDS],
        ahead: usize,
        live: &impl Fn(usize) -> bool,
    ) {
        // SAFETY: every load and store is of whole codes inside `codes`
        // (blocks * WORDS * BLOCK <= codes.len()), of `query` (WORDS words)
        // or of a local array of the register's size; `ask` reads nothing.
        unsafe {
            const BLOCK: usize = 4;
            #[rustfmt::skip]
            let table = _mm256_setr_epi8(
                0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
                0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
            );
            let low = _mm256_set1_epi8(0x0f);
            let bytes = |x| {
                let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(x, low));
                let hi =
                    _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16::<4>(x), low));
                _mm256_add_epi8(lo, hi)
            };
            let q0 = _mm256_loadu_si256(query.as_ptr().cast());
            let q1 = _mm256_loadu_si256(query.as_ptr().add(4).cast());
            let blocks = codes.len() / (WORDS * BLOCK);
            for b in 0..blocks {
                let at = codes.as_ptr().add(b * WORDS * BLOCK);
                ask(at, ahead, BLOCK);
                let mut s = [_mm256_setzero_si256(); BLOCK];
                for (k, s) in s.iter_mut().enumerate() {
                    let x0 = _mm256_xor_si256(_mm256_loadu_si256(at.add(k * WORDS).cast()), q0);
                    let x1 = _mm256_xor_si256(_mm256_loadu_si256(at.add(k * WORDS + 4).cast()), q1);
                    // At most 16 per byte: no overflow before the sum.
                    *s = _mm256_sad_epu8(
                        _mm256_add_epi8(bytes(x0), bytes(x1)),
                        _mm256_setzero_si256(),
                    );
                }
                let pair = |a, b| {
                    _mm256_add_epi64(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b))
                };
                let (t0, t1) = (pair(s[0], s[1]), pair(s[2], s[3]));
                let sums = _mm256_add_epi64(
                    _mm256_permute2x128_si256::<0x20>(t0, t1),
                    _mm256_permute2x128_si256::<0x31>(t0, t1),
                );
                let bound = _mm256_set1_epi64x(kept.bound as i64);
                if _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(bound, sums))) != 0 {
                    let mut d = [0u64; BLOCK];
                    _mm256_storeu_si256(d.as_mut_ptr().cast(), sums);
                    kept.offer_block(&d, b * BLOCK, live);
                }
            }
            rest(kept, codes, query, blocks * BLOCK, live)
        }
    }

    /// Ask the cache for the `codes` codes (of 64 bytes) `ahead` bytes past
    /// `at` (none when `ahead` is 0). A prefetch reads nothing and cannot
    /// fault, so past the end of the codes it is only wasted.
    #[inline(always)]
    fn ask(at: *const u64, ahead: usize, codes: usize) {
        if ahead == 0 {
            return;
        }
        let from = at.cast::<i8>().wrapping_add(ahead);
        for k in 0..codes {
            // SAFETY: PREFETCHT0 is SSE (in every x86_64); it dereferences
            // nothing.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(from.wrapping_add(k * WORDS * 8)) };
        }
    }

    /// The codes after the last whole block, one at a time.
    #[target_feature(enable = "popcnt")]
    fn rest(
        kept: &mut Kept,
        codes: &[u64],
        query: &[u64; WORDS],
        from: usize,
        live: &impl Fn(usize) -> bool,
    ) {
        let slots = codes.len() / WORDS;
        for slot in from..slots {
            let d = hamming::<WORDS>(&codes[slot * WORDS..(slot + 1) * WORDS], query);
            kept.offer(d, slot, live);
        }
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

/// The `count` nearest so far, farthest on top; `bound`: what a code must
/// beat to get in (one compare per code for all the others). Slots are
/// offered counted from `first` (a chunk's first slot) and kept whole.
struct Kept {
    heap: BinaryHeap<(u32, usize)>,
    count: usize,
    bound: u32,
    first: usize,
}

impl Kept {
    fn new(count: usize) -> Self {
        Kept {
            heap: BinaryHeap::with_capacity(count + 1),
            count,
            bound: u32::MAX,
            first: 0,
        }
    }

    /// Keep `first + slot` at distance `d` if it is among the nearest so far
    /// and live.
    #[inline(always)]
    fn offer(&mut self, d: u32, slot: usize, live: &impl Fn(usize) -> bool) {
        let slot = self.first + slot;
        if d < self.bound && live(slot) {
            self.push(d, slot);
        }
    }

    /// `offer` each of a block's distances, the first one's slot `first`.
    #[inline(always)]
    fn offer_block(&mut self, d: &[u64], first: usize, live: &impl Fn(usize) -> bool) {
        for (k, &d) in d.iter().enumerate() {
            self.offer(d as u32, first + k, live);
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

    /// The plain scan's (distance, slot) of the `count` nearest.
    fn plain(
        codes: &[u64],
        words: usize,
        query: &[u64],
        count: usize,
        live: impl Fn(usize) -> bool,
    ) -> Vec<(u32, usize)> {
        let mut kept = Kept::new(count);
        scan(&mut kept, codes, words, query, &live);
        kept.slots()
    }

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
    fn the_simd_scans_find_what_the_plain_scan_finds() {
        // Random 512-bit codes, a tail after the last whole block, the
        // query itself (0) and its complement (512), some slots not live.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut random = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let query: [u64; 8] = std::array::from_fn(|_| random());
        let slots = 1003;
        let mut codes: Vec<u64> = (0..slots * 8).map(|_| random()).collect();
        codes[40 * 8..41 * 8].copy_from_slice(&query);
        for (w, q) in query.iter().enumerate() {
            codes[1001 * 8 + w] = !q;
        }
        let live = |s: usize| s % 17 != 3;
        let sorted = |mut found: Vec<(u32, usize)>| {
            found.sort_unstable();
            found
        };
        for count in [1, 5, 64, slots + 10] {
            let plain = sorted(plain(&codes, 8, &query, count, live));
            assert_eq!(plain[0], (0, 40));
            if count > slots {
                assert!(plain.contains(&(512, 1001)));
            }
            let plain: Vec<usize> = plain.into_iter().map(|(_, s)| s).collect();
            for kernel in Kernel::available(8) {
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
                        words: 8,
                        query: &query,
                        count,
                        ahead,
                    };
                    let found = scan.in_parts(&live, parts, chunk, kernel);
                    assert_eq!(found.unwrap(), plain, "{kernel:?}, {count}, {parts} parts");
                }
            }
        }
        println!("kernels here: {:?}", Kernel::available(8));
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
        let mut one: Vec<(u32, usize)> = plain(&codes, 1, &query, 5, live);
        one.sort_unstable();
        let one: Vec<usize> = one.into_iter().map(|(_, s)| s).collect();
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
                let split = scan(5).in_parts(&live, parts, chunk, kernel).unwrap();
                assert_eq!(split, one, "{parts} parts, chunks of {chunk}");
            }
        }
        let last = scan(7).in_parts(&live, 3, 100, kernel).unwrap();
        assert!(last.contains(&999) && !last.contains(&998), "{last:?}");
    }
}
