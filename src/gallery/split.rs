//! Cosine galleries hold each value of a vector in a byte and a half,
//! split: the graph walks the byte (i8, in usearch), and the half byte,
//! held here, restores the value for the re-rank. The walk reads half the
//! bytes f16 did and usearch's i8 inner product is its fastest kernel
//! (about 2x the f16 search at equal recall, docs/benchmarks.md), while the
//! distance of each candidate is computed from the restored vector: off by
//! at most 2.9e-4 per value, which moves a distance by about 1e-4 (two
//! photos of one person differ by 0.2). 768 bytes per 512-d person; a full
//! second byte restored values to 3e-5 but took 244 MiB more at a million.
//!
//! A value u of the unit vector becomes coarse q = round(127 u) and fine
//! r = round(14 (127 u - q)), in -7..=7, and is restored as
//! (q + r / 14) / 127. Only a direction is kept: right for cosine, which is
//! why Euclidean galleries (dlib's, not unit length) stay in f16.

use foldhash::{HashMap, HashMapExt};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::Mutex;

use super::huge_pages::keep_private;
use super::share::with_helpers;
use super::signs::{self, Signs};

const STEP: f32 = 127.0;
/// Fine steps per coarse step: a signed half byte holds -7..=7.
const FINE_STEP: f32 = 14.0;
/// The fine bytes' section ends the saved index file with this mark.
const MAGIC: &[u8; 8] = b"TFFINE02";
/// The section's first form (a byte per value, r = round(127 (127 u - q))),
/// read and converted.
const MAGIC_BYTE_PER_VALUE: &[u8; 8] = b"TFFINE01";
/// Slot of no key (freed).
const FREE: u64 = u64::MAX;

/// Bytes of fine values for a vector of `dim` values (two per byte).
pub fn fine_len(dim: usize) -> usize {
    dim.div_ceil(2)
}

/// Buffers for one `split` of a vector of `dim` values.
pub fn buffers(dim: usize) -> (Vec<i8>, Vec<u8>) {
    (vec![0i8; dim], vec![0u8; fine_len(dim)])
}

/// `v`'s direction as coarse bytes and fine half bytes (`fine_len`), all
/// zero for a zero vector.
pub fn split(v: &[f32], coarse: &mut [i8], fine: &mut [u8]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let scale = if norm > 0.0 && norm.is_finite() {
        STEP / norm
    } else {
        0.0
    };
    let mut rests = [0i8; 2];
    for ((pair, out), byte) in v.chunks(2).zip(coarse.chunks_mut(2)).zip(fine.iter_mut()) {
        for ((x, q), rest) in pair.iter().zip(out.iter_mut()).zip(rests.iter_mut()) {
            let scaled = (x * scale).clamp(-STEP, STEP);
            let coarse_value = scaled.round();
            *q = coarse_value as i8;
            *rest = ((scaled - coarse_value) * FINE_STEP).round() as i8;
        }
        if pair.len() == 1 {
            rests[1] = 0;
        }
        *byte = (rests[0] as u8 & 0x0F) | ((rests[1] as u8) << 4);
    }
}

/// The unit vector `split` took apart, to within 0.5 / (127 * 14) per value.
pub fn join(coarse: &[i8], fine: &[u8], out: &mut [f32]) {
    debug_assert_eq!(coarse.len(), out.len());
    // Multiplied by the steps' inverses: a division per value took a fifth
    // of a re-rank at a million (0.75 -> 0.62 ms for 257 candidates).
    let (fine_step, step) = (1.0 / FINE_STEP, 1.0 / STEP);
    let restore = |q: i8, r: i8| (f32::from(q) + f32::from(r) * fine_step) * step;
    let pairs = coarse
        .chunks_exact(2)
        .zip(fine)
        .zip(out.chunks_exact_mut(2));
    for ((pair, byte), out) in pairs {
        // Sign-extended halves: the low one shifted up first.
        out[0] = restore(pair[0], ((*byte << 4) as i8) >> 4);
        out[1] = restore(pair[1], (*byte as i8) >> 4);
    }
    if let Some(&q) = coarse.chunks_exact(2).remainder().first() {
        let last = coarse.len() - 1;
        if let (Some(&byte), Some(o)) = (fine.get(last / 2), out.get_mut(last)) {
            *o = restore(q, ((byte << 4) as i8) >> 4);
        }
    }
}

/// A fine value of the first form (a step of 1/127) as a half byte's.
fn from_byte_per_value(r: u8) -> i8 {
    (f32::from(r as i8) * FINE_STEP / STEP)
        .round()
        .clamp(-7.0, 7.0) as i8
}

/// `Fine::make_signs` shares its work in parts of at least this many keys
/// (a small gallery on a host of many cores starts few threads).
const SIGNS_PART: usize = 1 << 14;
/// A part of `make_signs`: its keys and their sign bits, until a thread
/// takes it.
type SignsPart<'a> = Mutex<Option<(&'a [u64], signs::SignsPart<'a>)>>;

/// The fine bytes of every vector, by key, in one block (slots of removed
/// keys are reused); beside them, in the same slots, its sign bits
/// (`signs/`: the second look's scan).
pub struct Fine {
    dim: usize,
    /// Bytes per vector: `fine_len(dim)`.
    width: usize,
    bytes: Vec<u8>,
    /// Made from the coarse bytes, never saved.
    signs: Signs,
    key_of: Vec<u64>,
    slot_of: HashMap<u64, u32>,
    free: Vec<u32>,
}

impl Fine {
    pub fn new(dim: usize) -> Self {
        Fine {
            dim,
            width: fine_len(dim),
            bytes: Vec::new(),
            signs: Signs::new(dim),
            key_of: Vec::new(),
            slot_of: HashMap::new(),
            free: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    /// Set `key`'s fine bytes and, from its `coarse` ones, its sign bits (a
    /// new slot, or its own again).
    pub fn put(&mut self, key: u64, coarse: &[i8], fine: &[u8]) {
        let slot = match self.slot_of.get(&key) {
            Some(&slot) => slot as usize,
            None => {
                let slot = match self.free.pop() {
                    Some(slot) => slot as usize,
                    None => {
                        self.key_of.push(FREE);
                        let held = self.bytes.capacity();
                        self.bytes.resize(self.key_of.len() * self.width, 0);
                        if self.bytes.capacity() != held {
                            keep_private(&self.bytes);
                        }
                        self.key_of.len() - 1
                    }
                };
                self.key_of[slot] = key;
                self.slot_of.insert(key, slot as u32);
                slot
            }
        };
        self.bytes[slot * self.width..(slot + 1) * self.width].copy_from_slice(fine);
        self.put_signs(slot, coarse);
    }

    /// The sign bits of slot `slot` from its vector's `coarse` bytes.
    fn put_signs(&mut self, slot: usize, coarse: &[i8]) {
        let mut code = vec![0u64; self.signs.words()];
        signs::pack(coarse, &mut code);
        self.signs.resize(self.key_of.len());
        self.signs.put(slot, &code);
    }

    /// Make every key's sign bits from its coarse bytes, which `coarse_of`
    /// writes (false: the key has none, its bits stay 0). After `read_from`;
    /// on every core (a million people: 0.2 to 0.5 s of a load on two), in parts
    /// of at least SIGNS_PART keys, each made by whichever thread takes it
    /// first (`share.rs`: this one takes what no helper started for).
    pub fn make_signs(
        &mut self,
        coarse_of: impl Fn(u64, &mut [i8]) -> bool + Sync,
    ) -> Result<(), String> {
        let (dim, words) = (self.dim, self.signs.words());
        self.signs.resize(self.key_of.len());
        let cores = crate::gallery::share::cores();
        let per = self.key_of.len().div_ceil(cores).max(SIGNS_PART);
        let parts: Vec<SignsPart> = self
            .key_of
            .chunks(per)
            .zip(self.signs.parts_mut(per))
            .map(|part| Mutex::new(Some(part)))
            .collect();
        let make = |part: &SignsPart| {
            let taken = part.lock().unwrap_or_else(|e| e.into_inner()).take();
            let Some((keys, mut bits)) = taken else {
                return;
            };
            let (mut coarse, mut code) = (vec![0i8; dim], vec![0u64; words]);
            for (at, &key) in keys.iter().enumerate() {
                if key != FREE && coarse_of(key, &mut coarse) {
                    signs::pack(&coarse, &mut code);
                    bits.put(at, &code);
                }
            }
        };
        let work = || parts.iter().for_each(make);
        with_helpers(parts.len().saturating_sub(1), &work)
            .into_iter()
            .collect()
    }

    /// The keys of the `count` vectors whose signs are nearest to those of
    /// `coarse` (the query's coarse bytes), nearest first.
    pub fn nearest_by_signs(&self, coarse: &[i8], count: usize) -> Result<Vec<u64>, String> {
        signs::at_once(|now| self.nearest_by_signs_beside(coarse, count, now))
    }

    /// `nearest_by_signs`, its scan begun on a helper thread while this one
    /// runs `first`, which says whether it is wanted after all (None when
    /// not: `Signs::nearest_beside`).
    pub fn nearest_by_signs_beside<R>(
        &self,
        coarse: &[i8],
        count: usize,
        first: impl FnOnce() -> (R, bool),
    ) -> (R, Option<Result<Vec<u64>, String>>) {
        let mut query = vec![0u64; self.signs.words()];
        signs::pack(coarse, &mut query);
        let live = |slot: usize| self.key_of.get(slot).is_some_and(|&key| key != FREE);
        let (first, found) = self.signs.nearest_beside(&query, count, live, first);
        let keys = |slots: Vec<usize>| slots.into_iter().map(|slot| self.key_of[slot]).collect();
        (first, found.map(|found| found.map(keys)))
    }

    pub fn get(&self, key: u64) -> Option<&[u8]> {
        let slot = *self.slot_of.get(&key)? as usize;
        Some(&self.bytes[slot * self.width..(slot + 1) * self.width])
    }

    pub fn remove(&mut self, key: u64) {
        if let Some(slot) = self.slot_of.remove(&key) {
            let slot = slot as usize;
            self.key_of[slot] = FREE;
            // Zeroed, not only freed: the block is saved whole, and a
            // forgotten person's bytes must not be (`wipe.rs`).
            self.bytes[slot * self.width..(slot + 1) * self.width].fill(0);
            self.signs.clear(slot);
            self.free.push(slot as u32);
        }
    }

    /// Bytes held (the block, the signs, the keys, the lookup table).
    pub fn memory(&self) -> usize {
        self.bytes.capacity()
            + self.signs.memory()
            + self.key_of.capacity() * 8
            + self.slot_of.capacity() * 16
    }

    /// Append the section: the block, each slot's key, then the counts and
    /// the mark (read from the end by `read_from`).
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        // In pieces: a million people's block is half a gigabyte.
        out.write_all(&self.bytes)?;
        for piece in self.key_of.chunks(1 << 13) {
            let keys: Vec<u8> = piece.iter().flat_map(|k| k.to_le_bytes()).collect();
            out.write_all(&keys)?;
        }
        out.write_all(&(self.key_of.len() as u64).to_le_bytes())?;
        out.write_all(&(self.dim as u64).to_le_bytes())?;
        out.write_all(MAGIC)
    }

    /// The section `write_to` appended to `file` (or one of the first
    /// form, converted); an error when the file does not end with one of
    /// `dim` values.
    pub fn read_from(file: &mut (impl Read + Seek), dim: usize) -> io::Result<Self> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        let len = file.seek(SeekFrom::End(0))?;
        let mut tail = [0u8; 24];
        if len < 24 {
            return Err(bad("no fine bytes at its end"));
        }
        file.seek(SeekFrom::Start(len - 24))?;
        file.read_exact(&mut tail)?;
        let number = |at: usize| u64::from_le_bytes(tail[at..at + 8].try_into().unwrap_or([0; 8]));
        let first_form = &tail[16..] == MAGIC_BYTE_PER_VALUE;
        if !(first_form || &tail[16..] == MAGIC) || number(8) != dim as u64 {
            return Err(bad("no fine bytes of this length at its end"));
        }
        let width = if first_form { dim } else { fine_len(dim) };
        let slots = number(0);
        let section = slots
            .checked_mul(width as u64 + 8)
            .filter(|&s| s <= len - 24)
            .ok_or_else(|| bad("fine bytes longer than the file"))?;
        file.seek(SeekFrom::Start(len - 24 - section))?;
        let slots = slots as usize;
        let mut bytes = vec![0u8; slots * width];
        file.read_exact(&mut bytes)?;
        if first_form {
            bytes = halve(&bytes, dim);
        }
        let mut keys = vec![0u8; slots * 8];
        file.read_exact(&mut keys)?;
        let key_of: Vec<u64> = keys
            .chunks_exact(8)
            .map(|k| u64::from_le_bytes(k.try_into().unwrap_or([0; 8])))
            .collect();
        let mut fine = Fine {
            dim,
            width: fine_len(dim),
            bytes,
            signs: Signs::new(dim),
            slot_of: HashMap::with_capacity(slots),
            free: Vec::new(),
            key_of,
        };
        keep_private(&fine.bytes);
        for slot in 0..fine.key_of.len() {
            let key = fine.key_of[slot];
            if key == FREE || fine.slot_of.contains_key(&key) {
                // Free, or a second slot of one key (a damaged file): never
                // scanned, reused first; zeroed (a file of an older build
                // kept a removed vector's bytes).
                fine.key_of[slot] = FREE;
                fine.bytes[slot * fine.width..(slot + 1) * fine.width].fill(0);
                fine.free.push(slot as u32);
            } else {
                fine.slot_of.insert(key, slot as u32);
            }
        }
        Ok(fine)
    }
}

/// Fine values of the first form, a byte each (`dim` per vector), as half
/// bytes.
fn halve(bytes: &[u8], dim: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() / dim.max(1) * fine_len(dim));
    for vector in bytes.chunks_exact(dim.max(1)) {
        out.extend(vector.chunks(2).map(|pair| {
            let low = from_byte_per_value(pair[0]) as u8 & 0x0F;
            let high = pair.get(1).map_or(0, |&r| from_byte_per_value(r) as u8);
            low | (high << 4)
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's flags (`VmFlags` of /proc/self/smaps) of the mapping
    /// that holds `addr`.
    fn vm_flags(addr: usize) -> Vec<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a <= addr && addr < b;
                    continue;
                }
            }
            if let (true, Some(flags)) = (inside, line.strip_prefix("VmFlags:")) {
                return flags.split_whitespace().map(str::to_string).collect();
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    #[test]
    fn the_fine_bytes_stay_out_of_core_dumps_and_swap() {
        let mut fine = Fine::new(512);
        let (coarse, bytes) = (vec![1i8; 512], vec![7u8; fine_len(512)]);
        for key in 0..20_000 {
            fine.put(key, &coarse, &bytes);
        }
        let page = 4096;
        let inside = (fine.bytes.as_ptr() as usize).div_ceil(page) * page + page;
        let flags = vm_flags(inside);
        assert!(
            flags.iter().any(|f| f == "dd"),
            "not kept out of core dumps: {flags:?}"
        );
        match crate::gallery::memory_lock_refused() {
            None => assert!(flags.iter().any(|f| f == "lo"), "not locked: {flags:?}"),
            Some(why) => eprintln!("mlock refused here ({why}): the log says so at load"),
        }
    }

    #[test]
    fn signs_made_in_parts_are_each_keys_own() {
        // 300 values: 5 words, the fifth in the second plane.
        let (dim, n) = (300, 3 * SIGNS_PART + 5);
        let coarse_of = |key: u64, out: &mut [i8]| {
            for (i, c) in out.iter_mut().enumerate() {
                *c = if (key as usize * 31 + i * 7) % 5 < 2 {
                    -3
                } else {
                    4
                };
            }
            key % 1000 != 17 // some keys have none
        };
        let mut fine = Fine::new(dim);
        let mut coarse = vec![0i8; dim];
        for key in 0..n as u64 {
            coarse_of(key, &mut coarse);
            fine.put(key * 3, &coarse, &vec![0u8; fine_len(dim)]);
        }
        let made = |fine: &mut Fine| {
            fine.make_signs(|key, out| coarse_of(key / 3, out)).unwrap();
            fine.signs.clone()
        };
        let mut expected = fine.signs.clone();
        for key in (0..n).filter(|k| k % 1000 == 17) {
            expected.clear(key);
        }
        fine.signs = Signs::new(dim);
        assert_eq!(made(&mut fine), expected);
    }

    fn unit(seed: u32, dim: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dim)
            .map(|i| ((seed as f32 * 12.9898 + i as f32 * 78.233).sin() * 43758.547).fract())
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn a_split_vector_is_restored_to_within_half_a_fine_step() {
        let (mut q, mut r, mut back) = ([0i8; 512], [0u8; 256], [0f32; 512]);
        let mut worst_dot = 0f32;
        for seed in 0..50 {
            let v = unit(seed, 512);
            // Any length: only the direction is kept.
            let long: Vec<f32> = v.iter().map(|x| 3.5 * x).collect();
            split(&long, &mut q, &mut r);
            join(&q, &r, &mut back);
            let worst = v
                .iter()
                .zip(&back)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(worst <= 0.5 / (127.0 * 14.0) + 1e-7, "{worst}");
            let w = unit(seed + 100, 512);
            let dot = |a: &[f32]| a.iter().zip(&w).map(|(x, y)| x * y).sum::<f32>();
            worst_dot = worst_dot.max((dot(&v) - dot(&back)).abs());
        }
        // What a distance moves by (module docs: about 1e-4; the worst of
        // these 50 is 4.6e-4).
        assert!(worst_dot < 1e-3, "{worst_dot}");
        split(&[0.0; 512], &mut q, &mut r);
        assert!(q.iter().all(|&x| x == 0) && r.iter().all(|&x| x == 0));
        // An odd length: the last half byte stands alone.
        let (mut q3, mut r3, mut back3) = ([0i8; 3], [0u8; 2], [0f32; 3]);
        let v3 = unit(7, 3);
        split(&v3, &mut q3, &mut r3);
        join(&q3, &r3, &mut back3);
        assert!(v3
            .iter()
            .zip(&back3)
            .all(|(a, b)| (a - b).abs() <= 0.5 / (127.0 * 14.0) + 1e-7));
    }

    #[test]
    fn slots_are_reused_and_the_section_reads_back() {
        let mut fine = Fine::new(3);
        fine.put(10, &[1, 1, 1], &[1, 2]);
        fine.put(11, &[-1, -1, -1], &[4, 5]);
        fine.put(12, &[1, -1, 1], &[7, 8]);
        fine.remove(11);
        fine.put(13, &[-1, -1, 1], &[0xF1, 0x0E]);
        fine.put(10, &[-1, 1, -1], &[0, 1]);
        assert_eq!(fine.len(), 3);
        assert_eq!(fine.key_of.len(), 3, "the freed slot was taken");
        // Signs follow the slots: 13 took 11's, 10 changed its own.
        assert_eq!(fine.nearest_by_signs(&[-1, -1, 1], 1).unwrap(), vec![13]);
        assert_eq!(
            fine.nearest_by_signs(&[-1, 1, -1], 3).unwrap(),
            vec![10, 13, 12]
        );
        let mut file = io::Cursor::new(b"usearch's own bytes".to_vec());
        file.seek(SeekFrom::End(0)).unwrap();
        fine.write_to(&mut file).unwrap();
        let back = Fine::read_from(&mut file, 3).unwrap();
        assert_eq!(back.get(10), Some(&[0, 1][..]));
        assert_eq!(back.get(11), None);
        assert_eq!(back.get(13), Some(&[0xF1, 0x0E][..]));
        assert_eq!(back.len(), 3);
        let mut back = back;
        back.make_signs(|key, out| {
            out.copy_from_slice(if key == 12 {
                &[1, -1, 1]
            } else {
                &[-1, -1, -1]
            });
            true
        })
        .unwrap();
        assert_eq!(back.nearest_by_signs(&[1, -1, 1], 1).unwrap(), vec![12]);
        assert!(Fine::read_from(&mut file, 4).is_err(), "another length");
        let mut cut = io::Cursor::new(file.get_ref()[..file.get_ref().len() - 1].to_vec());
        assert!(Fine::read_from(&mut cut, 3).is_err(), "truncated");
    }

    #[test]
    fn a_section_of_the_first_form_is_read_as_half_bytes() {
        // One vector of 3 values, a byte each (fine steps of 1/127), as the
        // files of the first form hold them.
        let v = unit(3, 3);
        let (mut q, mut r, mut back) = ([0i8; 3], [0u8; 2], [0f32; 3]);
        split(&v, &mut q, &mut r);
        let scaled: Vec<f32> = v.iter().map(|x| x * 127.0).collect();
        let old: Vec<u8> = scaled
            .iter()
            .map(|x| (((x - x.round()) * 127.0).round() as i8) as u8)
            .collect();
        let mut file = io::Cursor::new(b"usearch".to_vec());
        file.seek(SeekFrom::End(0)).unwrap();
        for part in [
            &old[..],
            &7u64.to_le_bytes(),
            &1u64.to_le_bytes(),
            &3u64.to_le_bytes(),
        ] {
            file.write_all(part).unwrap();
        }
        file.write_all(MAGIC_BYTE_PER_VALUE).unwrap();
        let read = Fine::read_from(&mut file, 3).unwrap();
        join(&q, read.get(7).unwrap(), &mut back);
        assert!(v
            .iter()
            .zip(&back)
            .all(|(a, b)| (a - b).abs() <= 0.6 / (127.0 * 14.0)));
        assert_eq!(read.get(7), Some(&r[..]), "as a split of today's form");
    }
}
