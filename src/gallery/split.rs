//! Cosine galleries hold each value of a vector in two bytes, split: the
//! graph walks the first (i8, in usearch), and the second, held here,
//! restores the value for the re-rank. The walk reads half the bytes f16
//! did and usearch's i8 inner product is its fastest kernel (about 2x the
//! f16 search at equal recall, docs/benchmarks.md), while the distance of
//! each candidate is computed from the restored vector, off by at most 3e-5
//! per value (f16's own rounding on these values is about 2e-5). The two
//! bytes together take what f16 took: 1 KiB per 512-d person.
//!
//! A value u of the unit vector becomes coarse q = round(127 u) and fine
//! r = round(127 (127 u - q)), and is restored as (q + r / 127) / 127.
//! Only a direction is kept: right for cosine, which is why Euclidean
//! galleries (dlib's, not unit length) stay in f16.

use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom, Write};

const STEP: f32 = 127.0;
/// The fine bytes' section ends the saved index file with this mark.
const MAGIC: &[u8; 8] = b"TFFINE01";
/// Slot of no key (freed).
const FREE: u64 = u64::MAX;

/// `v`'s direction as coarse and fine bytes (all zero for a zero vector).
pub fn split(v: &[f32], coarse: &mut [i8], fine: &mut [i8]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let scale = if norm > 0.0 && norm.is_finite() {
        STEP / norm
    } else {
        0.0
    };
    for ((x, q), r) in v.iter().zip(coarse.iter_mut()).zip(fine.iter_mut()) {
        let scaled = (x * scale).clamp(-STEP, STEP);
        let coarse_value = scaled.round();
        *q = coarse_value as i8;
        *r = ((scaled - coarse_value) * STEP).round() as i8;
    }
}

/// The unit vector `split` took apart, to within 0.5 / 127^2 per value.
pub fn join(coarse: &[i8], fine: &[i8], out: &mut [f32]) {
    for ((q, r), o) in coarse.iter().zip(fine).zip(out.iter_mut()) {
        *o = (f32::from(*q) + f32::from(*r) / STEP) / STEP;
    }
}

/// The fine bytes of every vector, by key, in one block (slots of removed
/// keys are reused).
pub struct Fine {
    dim: usize,
    bytes: Vec<i8>,
    key_of: Vec<u64>,
    slot_of: HashMap<u64, u32>,
    free: Vec<u32>,
}

impl Fine {
    pub fn new(dim: usize) -> Self {
        Fine {
            dim,
            bytes: Vec::new(),
            key_of: Vec::new(),
            slot_of: HashMap::new(),
            free: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    /// Set `key`'s fine bytes (a new slot, or its own again).
    pub fn put(&mut self, key: u64, fine: &[i8]) {
        let slot = match self.slot_of.get(&key) {
            Some(&slot) => slot as usize,
            None => {
                let slot = match self.free.pop() {
                    Some(slot) => slot as usize,
                    None => {
                        self.key_of.push(FREE);
                        self.bytes.resize(self.key_of.len() * self.dim, 0);
                        self.key_of.len() - 1
                    }
                };
                self.key_of[slot] = key;
                self.slot_of.insert(key, slot as u32);
                slot
            }
        };
        self.bytes[slot * self.dim..(slot + 1) * self.dim].copy_from_slice(fine);
    }

    pub fn get(&self, key: u64) -> Option<&[i8]> {
        let slot = *self.slot_of.get(&key)? as usize;
        Some(&self.bytes[slot * self.dim..(slot + 1) * self.dim])
    }

    pub fn remove(&mut self, key: u64) {
        if let Some(slot) = self.slot_of.remove(&key) {
            self.key_of[slot as usize] = FREE;
            self.free.push(slot);
        }
    }

    /// Bytes held (the block, the keys, the lookup table).
    pub fn memory(&self) -> usize {
        self.bytes.capacity() + self.key_of.capacity() * 8 + self.slot_of.capacity() * 16
    }

    /// Append the section: the block, each slot's key, then the counts and
    /// the mark (read from the end by `read_from`).
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        // In pieces: a million people's block is half a gigabyte.
        for piece in self.bytes.chunks(1 << 16) {
            let bytes: Vec<u8> = piece.iter().map(|&b| b as u8).collect();
            out.write_all(&bytes)?;
        }
        for piece in self.key_of.chunks(1 << 13) {
            let keys: Vec<u8> = piece.iter().flat_map(|k| k.to_le_bytes()).collect();
            out.write_all(&keys)?;
        }
        out.write_all(&(self.key_of.len() as u64).to_le_bytes())?;
        out.write_all(&(self.dim as u64).to_le_bytes())?;
        out.write_all(MAGIC)
    }

    /// The section `write_to` appended to `file`; an error when the file
    /// does not end with one of `dim` values.
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
        if &tail[16..] != MAGIC || number(8) != dim as u64 {
            return Err(bad("no fine bytes of this length at its end"));
        }
        let slots = number(0);
        let section = slots
            .checked_mul(dim as u64 + 8)
            .filter(|&s| s <= len - 24)
            .ok_or_else(|| bad("fine bytes longer than the file"))?;
        file.seek(SeekFrom::Start(len - 24 - section))?;
        let slots = slots as usize;
        let mut bytes = vec![0u8; slots * dim];
        file.read_exact(&mut bytes)?;
        let mut keys = vec![0u8; slots * 8];
        file.read_exact(&mut keys)?;
        let key_of: Vec<u64> = keys
            .chunks_exact(8)
            .map(|k| u64::from_le_bytes(k.try_into().unwrap_or([0; 8])))
            .collect();
        let mut fine = Fine {
            dim,
            bytes: bytes.into_iter().map(|b| b as i8).collect(),
            slot_of: HashMap::with_capacity(slots),
            free: Vec::new(),
            key_of,
        };
        for (slot, &key) in fine.key_of.iter().enumerate() {
            if key == FREE || fine.slot_of.insert(key, slot as u32).is_some() {
                fine.free.push(slot as u32);
            }
        }
        Ok(fine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(seed: u32, dim: usize) -> Vec<f32> {
        let v: Vec<f32> = (0..dim)
            .map(|i| ((seed as f32 * 12.9898 + i as f32 * 78.233).sin() * 43758.547).fract())
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn a_split_vector_is_restored_to_within_half_a_fine_step() {
        let (mut q, mut r, mut back) = ([0i8; 512], [0i8; 512], [0f32; 512]);
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
            assert!(worst <= 0.5 / (127.0 * 127.0) + 1e-7, "{worst}");
            let w = unit(seed + 100, 512);
            let dot = |a: &[f32]| a.iter().zip(&w).map(|(x, y)| x * y).sum::<f32>();
            assert!((dot(&v) - dot(&back)).abs() < 1e-4);
        }
        split(&[0.0; 512], &mut q, &mut r);
        assert!(q.iter().chain(&r).all(|&x| x == 0));
    }

    #[test]
    fn slots_are_reused_and_the_section_reads_back() {
        let mut fine = Fine::new(3);
        fine.put(10, &[1, 2, 3]);
        fine.put(11, &[4, 5, 6]);
        fine.put(12, &[7, 8, 9]);
        fine.remove(11);
        fine.put(13, &[-1, -2, -3]);
        fine.put(10, &[0, 0, 1]);
        assert_eq!(fine.len(), 3);
        assert_eq!(fine.key_of.len(), 3, "the freed slot was taken");
        let mut file = io::Cursor::new(b"usearch's own bytes".to_vec());
        file.seek(SeekFrom::End(0)).unwrap();
        fine.write_to(&mut file).unwrap();
        let back = Fine::read_from(&mut file, 3).unwrap();
        assert_eq!(back.get(10), Some(&[0, 0, 1][..]));
        assert_eq!(back.get(11), None);
        assert_eq!(back.get(13), Some(&[-1, -2, -3][..]));
        assert_eq!(back.len(), 3);
        assert!(Fine::read_from(&mut file, 4).is_err(), "another length");
        let mut cut = io::Cursor::new(file.get_ref()[..file.get_ref().len() - 1].to_vec());
        assert!(Fine::read_from(&mut cut, 3).is_err(), "truncated");
    }
}
