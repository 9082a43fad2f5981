//! The scan of 256-bit codes (a first plane, 4 words) in SIMD registers:
//! each block's distances are summed into one register and compared with
//! the bound at once; only a block with a code below it goes through
//! `Kept::offer`.

use super::kept::Kept;
use super::{hamming, HEAD_WORDS as WORDS};
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
            let pair =
                |a, b| _mm512_add_epi64(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
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
            let hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16::<4>(x), low));
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
            let pair =
                |a, b| _mm256_add_epi64(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
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
