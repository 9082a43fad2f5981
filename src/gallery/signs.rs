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
        let (head_words, tail_words) = (self.head_words, self.tail_words);
        if query.len() != self.words() {
            return Err(format!(
                "a query of {} words for codes of {}",
                query.len(),
                self.words()
            ));
        }
        if tail_words == 0 {
            return nearest(&self.head, head_words, query, count, live);
        }
        let (first, rest) = query.split_at(head_words);
        let keep = FIRST_PLANE_KEEPS.max(count);
        let mut found = scored(&self.head, head_words, first, keep, &live)?;
        keep_nearest_of(&mut found, keep);
        Ok(slots_of(
            rescored(found, &self.tail, tail_words, rest),
            count,
        ))
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

/// Scans of more codes than this are split over the cores: a million's
/// first plane is 32 MB (docs/benchmarks.md).
const PARALLEL_FROM: usize = 100_000;
/// At most this many parts (memory bandwidth, not cores, bounds the rest).
const MAX_PARTS: usize = 4;
/// Slots a thread claims at a time in a scan shared between threads: 1 MB
/// of 256-bit codes.
const CHUNK: usize = 1 << 15;
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

/// `nearest`'s codes, each with its distance, in no order.
fn scored(
    codes: &[u64],
    words: usize,
    query: &[u64],
    count: usize,
    live: &(impl Fn(usize) -> bool + Sync),
) -> Result<Vec<(u32, usize)>, String> {
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
    scan.in_parts(live, parts, CHUNK, Kernel::fastest(words))
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
    let found = scan.in_parts(&|_| true, parts, CHUNK, kernel);
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
    /// On this thread and up to `parts - 1` helpers, which claim `chunk`
    /// slots at a time with it (`share.rs`: a helper slow to start leaves
    /// its chunks to this thread instead of holding it up); each part's
    /// nearest, with their distances, in no order.
    fn in_parts(
        &self,
        live: &(impl Fn(usize) -> bool + Sync),
        parts: usize,
        chunk: usize,
        kernel: Kernel,
    ) -> Result<Vec<(u32, usize)>, String> {
        let (words, count) = (self.words, self.count);
        let slots = self.codes.len() / words;
        let chunk = if parts <= 1 { slots } else { chunk }.max(1);
        let next = AtomicUsize::new(0);
        let scan = || {
            let mut kept = Kept::new(count, words);
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
            return Ok(scan());
        }
        let mut found = Vec::with_capacity(count * parts);
        for part in with_helpers(parts - 1, &scan) {
            found.extend(part?);
        }
        Ok(found)
    }
}

/// The slots of the `count` nearest of `found`, nearest first (ties: the
/// first slot).
fn slots_of(mut found: Vec<(u32, usize)>, count: usize) -> Vec<usize> {
    keep_nearest_of(&mut found, count);
    found.sort_unstable();
    found.into_iter().map(|(_, slot)| slot).collect()
}

/// Only the `count` nearest of `found` left, in no order (a selection, not a
/// sort: the first plane's parts hand over thousands).
fn keep_nearest_of(found: &mut Vec<(u32, usize)>, count: usize) {
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
                return unsafe { x86::nearest_256_avx512(kept, codes, q, ahead, live) };
            }
            (Kernel::Avx2, Ok(q)) => {
                // SAFETY: as above.
                return unsafe { x86::nearest_256_avx2(kept, codes, q, ahead, live) };
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

/// The scan of 256-bit codes (a first plane, 4 words) in SIMD registers:
/// each block's distances are summed into one register and compared with
/// the bound at once; only a block with a code below it goes through
/// `Kept::offer`.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{hamming, Kept, HEAD_WORDS as WORDS};
    use std::arch::x86_64::*;

    /// Eight codes a block, two to a register: XOR and VPOPCNTQ, then an
    /// add tree leaves the eight distances in one register.
    #[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
    pub unsafe fn nearest_256_avx512(
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
            let q = _mm512_broadcast_i64x4(_mm256_loadu_si256(query.as_ptr().cast()));
            let blocks = codes.len() / (WORDS * BLOCK);
            for b in 0..blocks {
                let at = codes.as_ptr().add(b * WORDS * BLOCK);
                ask(at, ahead, BLOCK * WORDS * 8);
                let mut v = [_mm512_setzero_si512(); BLOCK / 2];
                for (k, v) in v.iter_mut().enumerate() {
                    let two = _mm512_loadu_si512(at.add(2 * k * WORDS).cast());
                    *v = _mm512_popcnt_epi64(_mm512_xor_si512(two, q));
                }
                // v[k]: codes 2k and 2k+1, a word per lane. Pairs of words
                // summed per 128-bit lane: [c0 lo, c2 lo | c0 hi, c2 hi |
                // c1 lo, c3 lo | c1 hi, c3 hi], then lo + hi.
                let pair = |a, b| {
                    _mm512_add_epi64(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b))
                };
                let (a, c) = (pair(v[0], v[1]), pair(v[2], v[3]));
                let sums = _mm512_add_epi64(
                    _mm512_shuffle_i64x2::<0b10_00_10_00>(a, c),
                    _mm512_shuffle_i64x2::<0b11_01_11_01>(a, c),
                );
                let bound = _mm512_set1_epi64(kept.bound as i64);
                if _mm512_cmplt_epi64_mask(sums, bound) != 0 {
                    let mut d = [0u64; BLOCK];
                    _mm512_storeu_si512(d.as_mut_ptr().cast(), sums);
                    // Lanes hold codes 0, 2, 1, 3, 4, 6, 5, 7: offered in
                    // order, as a tie goes to the first slot.
                    let d = [d[0], d[2], d[1], d[3], d[4], d[6], d[5], d[7]];
                    kept.offer_block(&d, b * BLOCK, live);
                }
            }
            rest(kept, codes, query, blocks * BLOCK, live)
        }
    }

    /// Four codes a block: XOR, bytes counted by a nibble table (PSHUFB),
    /// summed per word by PSADBW, then the four codes' sums side by side.
    #[target_feature(enable = "avx2,popcnt")]
    pub unsafe fn nearest_256_avx2(
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
            let q = _mm256_loadu_si256(query.as_ptr().cast());
            let blocks = codes.len() / (WORDS * BLOCK);
            for b in 0..blocks {
                let at = codes.as_ptr().add(b * WORDS * BLOCK);
                ask(at, ahead, BLOCK * WORDS * 8);
                let mut s = [_mm256_setzero_si256(); BLOCK];
                for (k, s) in s.iter_mut().enumerate() {
                    let x = _mm256_xor_si256(_mm256_loadu_si256(at.add(k * WORDS).cast()), q);
                    *s = _mm256_sad_epu8(bytes(x), _mm256_setzero_si256());
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

    /// Ask the cache for the `bytes` bytes `ahead` bytes past `at`, a line
    /// (64 bytes) at a time (none when `ahead` is 0). A prefetch reads
    /// nothing and cannot fault, so past the end of the codes it is only
    /// wasted.
    #[inline(always)]
    fn ask(at: *const u64, ahead: usize, bytes: usize) {
        if ahead == 0 {
            return;
        }
        let from = at.cast::<i8>().wrapping_add(ahead);
        for line in (0..bytes).step_by(64) {
            // SAFETY: PREFETCHT0 is SSE (in every x86_64); it dereferences
            // nothing.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(from.wrapping_add(line)) };
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

/// The `count` nearest so far (and up to as many more, dropped a batch at a
/// time); `bound`: what a code must beat to get in (one compare per code for
/// all the others). Slots are offered counted from `first` (a chunk's first
/// slot) and kept whole. Distances are small integers, so entries are
/// counted per distance and the farthest dropped by those counts: a heap
/// of the first plane's 4,096 spent more on its pushes than the scan on
/// its reads (`benches/sign_scan.rs`).
struct Kept {
    found: Vec<(u32, usize)>,
    /// Entries of `found` at each distance.
    at: Vec<u32>,
    count: usize,
    bound: u32,
    first: usize,
}

impl Kept {
    /// For codes of `words` words.
    fn new(count: usize, words: usize) -> Self {
        Kept {
            found: Vec::with_capacity(2 * count),
            at: vec![0; 64 * words + 1],
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
        self.found.push((d, slot));
        self.at[d as usize] += 1;
        if self.found.len() >= 2 * self.count {
            self.tighten();
        }
    }

    /// Only the `count` nearest left, the first offered of those tied at
    /// the farthest (a scan offers in slot order), and the bound there.
    fn tighten(&mut self) {
        let (mut nearer, mut far) = (0usize, 0usize);
        while nearer + (self.at[far] as usize) < self.count {
            nearer += self.at[far] as usize;
            far += 1;
        }
        let mut ties = self.count - nearer;
        let far = far as u32;
        self.found.retain(|&(d, _)| {
            let tie = d == far && ties > 0;
            ties -= usize::from(tie);
            d < far || tie
        });
        self.at[far as usize] = (self.count - nearer) as u32;
        self.at[far as usize + 1..].fill(0);
        self.bound = far;
    }

    fn slots(self) -> Vec<(u32, usize)> {
        self.found
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
        let mut kept = Kept::new(count, words);
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

    fn random_words() -> impl FnMut() -> u64 {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
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
                    let found = scan.in_parts(&live, parts, chunk, kernel).unwrap();
                    let found = slots_of(found, count);
                    assert_eq!(found, plain, "{kernel:?}, {count}, {parts} parts");
                }
            }
        }
        println!("kernels here: {:?}", Kernel::available(HEAD_WORDS));
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
                let split = scan(5).in_parts(&live, parts, chunk, kernel).unwrap();
                assert_eq!(slots_of(split, 5), one, "{parts} parts, chunks of {chunk}");
            }
        }
        let last = slots_of(scan(7).in_parts(&live, 3, 100, kernel).unwrap(), 7);
        assert!(last.contains(&999) && !last.contains(&998), "{last:?}");
    }
}
