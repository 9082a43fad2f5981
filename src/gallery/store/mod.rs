//! Where enrolled faces are kept, behind one trait so that another database
//! (PostgreSQL, for several servers sharing one gallery) can take SQLite's
//! place. The gallery (`super`) keeps every entry in memory for matching and
//! calls the store only to load and to change: a store answers a change only
//! once it is durable.
//!
//! Numbering, for a store that others follow: every enrollment gets an id
//! that is never reused and grows with time, and every FORGET appends a
//! removal (its own growing id, the name, and the highest enrollment id it
//! covered). A follower that has seen enrollments up to E and removals up to
//! R catches up by applying the removals after R, then the enrollments after
//! E that still exist.

pub mod identity;
pub mod legacy;
pub mod schema;
pub mod sqlite;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
pub use identity::Identity;

/// The `gallery_store` model parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

impl StoreKind {
    pub fn parse(v: &str) -> Option<Self> {
        match v.to_ascii_lowercase().as_str() {
            "sqlite" => Some(StoreKind::Sqlite),
            "postgres" => Some(StoreKind::Postgres),
            _ => None,
        }
    }
}

/// One enrolled face as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    /// The enrollment's number: unique, never reused, growing.
    pub id: i64,
    pub name: String,
    pub embedding: Vec<f32>,
}

/// An old `enrolled.json` imported at this open.
#[derive(Clone, Debug, PartialEq)]
pub struct Migrated {
    pub from: PathBuf,
    pub renamed_to: PathBuf,
    pub entries: usize,
}

/// What a store holds for this model's embedder.
#[derive(Debug, Default)]
pub struct Loaded {
    pub entries: Vec<Stored>,
    /// Rows of other embedders (another engine or other model files): kept,
    /// never matched.
    pub foreign: usize,
    pub migrated: Option<Migrated>,
}

/// A gallery's durable part. Calls come one at a time (the gallery holds its
/// writer lock around them); every change is one transaction, durable before
/// the call returns.
pub trait Store: Send {
    /// Every live entry of this store's embedder, oldest first.
    fn load(&mut self) -> Result<Loaded>;
    /// Add `entries` (name, embedding) all together or not at all; their ids,
    /// in order.
    fn add(&mut self, entries: &[(String, Vec<f32>)]) -> Result<Vec<i64>>;
    /// Remove every entry of each name (this embedder's) and log each
    /// removal, all in one transaction; how many went, per name (0 logs
    /// nothing).
    fn forget(&mut self, names: &[String]) -> Result<Vec<usize>>;
    /// Where it lives, for logs: "sqlite /models/face/gallery/gallery.sqlite3".
    fn describe(&self) -> String;
}

/// The store `kind` for a gallery folder and an embedder.
pub fn open(kind: StoreKind, dir: &Path, identity: &Identity) -> Result<Box<dyn Store>> {
    match kind {
        StoreKind::Sqlite => Ok(Box::new(sqlite::SqliteStore::open(dir, identity)?)),
        StoreKind::Postgres => Err(Error::unsupported(
            "model parameter `gallery_store` = \"postgres\": the PostgreSQL store is not built \
             yet; use \"sqlite\"",
        )),
    }
}

/// An embedding as stored: its floats, little-endian.
pub fn to_blob(embedding: &[f32]) -> Vec<u8> {
    embedding.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The floats of a stored embedding; `None` unless it holds exactly `dim`.
pub fn from_blob(blob: &[u8], dim: usize) -> Option<Vec<f32>> {
    (blob.len() == dim * 4).then(|| {
        blob.chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    })
}

/// Milliseconds since the epoch, for the rows' timestamps (information only:
/// order comes from the ids).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests;
