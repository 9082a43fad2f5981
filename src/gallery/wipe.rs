//! Bytes that held vectors overwritten before a file lets them go: a file
//! replaced, truncated or removed frees its blocks as they were on ext4 or
//! XFS, forgotten vectors in them (`overwrite`, `erase_file`: one rule for
//! the saved index, temporary files, the WAL and the legacy import).
//!
//! Removed vectors zeroed in a file usearch saved. usearch's `remove` only
//! marks a slot free (its key becomes the free key) and `save` writes every
//! slot's vector, so a forgotten person's vector would stay in the saved
//! index until its slot is reused. Its API names no slots, so the saved file
//! is read instead: the layout of usearch 2.26 (pinned in Cargo.toml), and a
//! count checked against the file's own count of deleted entries, so that a
//! layout we misread fails the save instead of leaving a copy behind.
//!
//! The layout, all little-endian: rows and bytes per row (two u32), the
//! vectors row by row, a 64-byte head (count of deleted entries at byte 25),
//! then the graph: a 40-byte header (size, connectivity, base connectivity,
//! max level, entry slot: u64 each), a level (i16) per node, then the nodes,
//! each its key (u64), level (i16) and neighbour lists (a u32 count and u32
//! slots: base connectivity at level 0, connectivity at each level above).

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Zeros over the bytes of the file at `path` from `from` to its end,
/// synced. Promised on filesystems that overwrite in place; not on
/// copy-on-write ones (btrfs, ZFS), snapshots, or an SSD's remapped blocks
/// (docs/gallery.md).
pub fn overwrite(path: &Path, from: u64) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).open(path)?;
    let len = file.metadata()?.len();
    file.seek(SeekFrom::Start(from))?;
    io::copy(&mut io::repeat(0).take(len.saturating_sub(from)), &mut file)?;
    file.sync_all()
}

/// `overwrite` the whole file, then remove it, durably (its folder synced).
/// A file already gone is nothing to erase.
pub fn erase_file(path: &Path) -> io::Result<()> {
    match overwrite(path, 0) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        done => done?,
    }
    std::fs::remove_file(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// usearch's key of a free slot.
const FREE_KEY: u64 = u64::MAX;
const DENSE_HEAD: u64 = 64;
const DELETED_AT: usize = 25;
const GRAPH_HEADER: usize = 40;

/// Zero the vector of every free slot of the usearch file at `path` (which
/// may have more bytes after it); the number of slots zeroed.
pub fn zero_free_rows(path: &Path) -> io::Result<u64> {
    let mut file = OpenOptions::new().read(true).write(true).open(path)?;
    let file_len = file.metadata()?.len();
    let mut input = BufReader::with_capacity(1 << 20, &mut file);
    let rows = u64::from(read_u32(&mut input)?);
    let width = u64::from(read_u32(&mut input)?);
    let graph_at = 8 + rows * width + DENSE_HEAD;
    if graph_at > file_len {
        return Err(misread("its vectors run past the end of the file"));
    }
    input.seek(SeekFrom::Start(8 + rows * width))?;
    let mut head = [0u8; DENSE_HEAD as usize];
    input.read_exact(&mut head)?;
    let deleted = u64::from_le_bytes(head[DELETED_AT..DELETED_AT + 8].try_into().unwrap());
    let free: Vec<u64> = (slot_keys(&mut input, rows)?.into_iter().enumerate())
        .filter(|&(_, key)| key == FREE_KEY)
        .map(|(slot, _)| slot as u64)
        .collect();
    if free.len() as u64 != deleted {
        return Err(misread(&format!(
            "{} free slots found, the file counts {deleted}",
            free.len()
        )));
    }
    drop(input);
    let zeros = vec![0u8; width as usize];
    for slot in &free {
        file.seek(SeekFrom::Start(8 + slot * width))?;
        file.write_all(&zeros)?;
    }
    Ok(free.len() as u64)
}

/// The keys of the usearch file at `path` (which may have more bytes after
/// it), free slots left out.
pub fn saved_keys(path: &Path) -> io::Result<Vec<u64>> {
    let mut input = BufReader::with_capacity(1 << 20, File::open(path)?);
    let rows = u64::from(read_u32(&mut input)?);
    let width = u64::from(read_u32(&mut input)?);
    input.seek(SeekFrom::Start(8 + rows * width + DENSE_HEAD))?;
    let keys = slot_keys(&mut input, rows)?;
    Ok(keys.into_iter().filter(|&key| key != FREE_KEY).collect())
}

/// Each slot's key (the free key for a free slot), reading the graph section.
fn slot_keys(input: &mut impl Read, rows: u64) -> io::Result<Vec<u64>> {
    let mut header = [0u8; GRAPH_HEADER];
    input.read_exact(&mut header)?;
    let field = |i: usize| u64::from_le_bytes(header[i * 8..i * 8 + 8].try_into().unwrap());
    let (size, connectivity, base) = (field(0), field(1), field(2));
    if size != rows || connectivity == 0 || base < connectivity {
        return Err(misread("its graph header does not match its vectors"));
    }
    let mut levels = vec![0u8; size as usize * 2];
    input.read_exact(&mut levels)?;
    let base_bytes = 4 + 4 * base;
    let level_bytes = 4 + 4 * connectivity;
    let mut keys = Vec::with_capacity(size as usize);
    let mut node = Vec::new();
    for level in levels.chunks_exact(2) {
        let level = i16::from_le_bytes([level[0], level[1]]);
        if level < 0 {
            return Err(misread("a node has a negative level"));
        }
        node.resize((10 + base_bytes + level_bytes * level as u64) as usize, 0);
        input.read_exact(&mut node)?;
        keys.push(u64::from_le_bytes(node[..8].try_into().unwrap()));
    }
    Ok(keys)
}

fn read_u32(input: &mut impl Read) -> io::Result<u32> {
    let mut bytes = [0u8; 4];
    input.read_exact(&mut bytes)?;
    Ok(u32::from_le_bytes(bytes))
}

fn misread(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not usearch 2.26's layout ({why})"),
    )
}
