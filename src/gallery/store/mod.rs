//! Where enrolled faces are kept, behind one trait: SQLite in the gallery
//! folder for one server, PostgreSQL for a fleet sharing one gallery. The
//! gallery (`super`) keeps every entry in memory for matching and calls the
//! store only to load and to change: a store answers a change only once it is
//! durable.
//!
//! Numbering, for a store that others follow: every change (an ENROLL's rows,
//! a FORGET) takes the gallery's next change number, in commit order. A
//! removal covers every enrollment of its name with a smaller number, and its
//! rows are deleted, so a follower that has seen everything up to change C
//! catches up by reading the removals and the still-existing enrollments
//! after C in one snapshot.

pub mod identity;
pub mod postgres;
pub mod sqlite;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use self::postgres::PgSettings;
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

/// Where a model's store is: a file in its gallery folder, or a gallery
/// (by name) in a PostgreSQL database shared with other servers.
#[derive(Clone, Debug)]
pub enum Location {
    Sqlite {
        dir: PathBuf,
        /// How often other models' changes to the folder are read.
        poll: Duration,
    },
    Postgres {
        settings: PgSettings,
        gallery: String,
    },
}

impl Location {
    /// Which store this is, whatever its spelling: a model on it under
    /// another path (relative, through a symlink) or DSN is on the same
    /// store. SQLite: its folder, created and then made canonical.
    /// PostgreSQL: the database's hosts, ports and name, and the gallery.
    pub fn identity(&self) -> Result<String> {
        match self {
            Location::Sqlite { dir, .. } => {
                let bad = |e: std::io::Error| {
                    Error::invalid(format!("gallery_dir {}: {e}", dir.display()))
                };
                std::fs::create_dir_all(dir).map_err(bad)?;
                Ok(format!(
                    "sqlite {}",
                    dir.canonicalize().map_err(bad)?.display()
                ))
            }
            Location::Postgres { settings, gallery } => {
                let target = self::postgres::target::Target::from_env(&settings.dsn_env)?;
                Ok(format!("postgres {} gallery {gallery}", target.database()))
            }
        }
    }
}

/// Where a change sits in a store's history: `id` names the row (unique,
/// never reused); `change` orders it among every change to the gallery, in
/// commit order (the rows of one transaction share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub id: i64,
    pub change: i64,
}

/// One enrolled face as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub stamp: Stamp,
    pub name: String,
    pub embedding: Vec<f32>,
}

/// A FORGET or an expiry: every enrollment of `name` with a change number
/// below `before` is gone (a FORGET's own change number; an expiry's bound).
#[derive(Clone, Debug, PartialEq)]
pub struct Removal {
    pub name: String,
    pub before: i64,
}

/// What a FORGET did: rows removed per name, and its change number (every
/// enrollment of those names below it is gone).
#[derive(Clone, Debug, PartialEq)]
pub struct Forgot {
    pub removed: Vec<usize>,
    pub change: i64,
}

/// What an expiry removed: this embedder's rows, and how many rows of
/// every embedder (each leaves bytes for the erasure pass).
#[derive(Debug, Default)]
pub struct Expired {
    pub ours: Vec<Stamp>,
    pub rows: usize,
}

/// An old `enrolled.json` imported (or found imported) at this open.
#[derive(Clone, Debug, PartialEq)]
pub struct Migrated {
    pub from: PathBuf,
    pub entries: usize,
    /// Files erased (overwritten, then removed): the imported one and any
    /// `enrolled.json.migrated*` an older version renamed it to.
    pub erased: usize,
}

/// What a store holds for this model's embedder: its rows, with their
/// embeddings (`Loaded`) or without (`Listed`).
#[derive(Debug, Default)]
pub struct Contents<T> {
    pub rows: Vec<T>,
    /// Rows of other embedders (another engine or other model files): kept,
    /// never matched.
    pub foreign: usize,
    pub migrated: Option<Migrated>,
    /// The last change the rows include: a follower goes on from here.
    pub change: i64,
}

pub type Loaded = Contents<Stored>;
/// Enough to check a saved index against.
pub type Listed = Contents<Row>;

/// One enrolled face without its embedding.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub stamp: Stamp,
    pub name: String,
}

/// A name and an embedding to enroll under it.
#[derive(Clone, Debug, PartialEq)]
pub struct Named {
    pub name: String,
    pub embedding: Vec<f32>,
}

/// What a change did, as the record of changes keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Enroll,
    Forget,
    /// Removed by `retention_days`.
    Expire,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Enroll => "enroll",
            Operation::Forget => "forget",
            Operation::Expire => "expire",
        }
    }

    pub fn parse(s: &str) -> Option<Operation> {
        [Operation::Enroll, Operation::Forget, Operation::Expire]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// One name's part of a change, recorded in the same transaction: how many
/// embeddings it added or removed, and the label of the gallery key that
/// asked (never the key; `None` where the model has no keys).
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub operation: Operation,
    pub name: String,
    pub count: usize,
    pub by: Option<String>,
}

/// A change as recorded: its number (in the order of commits), when.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub number: i64,
    pub at_ms: i64,
    pub change: Change,
}

/// What a gallery-folder photo gave the embedder: its one face, or how many
/// it has when that is not one (the photo is skipped).
#[derive(Clone, Debug, PartialEq)]
pub enum PhotoFaces {
    One(Vec<f32>),
    Count(usize),
}

/// The folder photos a store remembers, by content key (`gallery::folder`):
/// a reload embeds only new or changed photos.
pub type Photos = HashMap<String, PhotoFaces>;

/// Changes other servers made, read by a `Follower`: everything after one
/// change number up to `upto`, from one consistent snapshot.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    pub upto: i64,
    pub enrolled: Vec<Stored>,
    pub removed: Vec<Removal>,
}

/// A gallery's durable part. Calls come one at a time (the gallery holds its
/// writer lock around them); every change is one transaction, durable before
/// the call returns.
pub trait Store: Send {
    /// Every live entry of this store's embedder, oldest first.
    fn load(&mut self) -> Result<Loaded>;
    /// Every live entry of this store's embedder without its embedding,
    /// oldest first. (This default reads the embeddings too.)
    fn list(&mut self) -> Result<Listed> {
        let loaded = self.load()?;
        Ok(Listed {
            rows: loaded
                .rows
                .into_iter()
                .map(|s| Row {
                    stamp: s.stamp,
                    name: s.name,
                })
                .collect(),
            foreign: loaded.foreign,
            migrated: loaded.migrated,
            change: loaded.change,
        })
    }
    /// The entries with these ids (those still there). (This default reads
    /// them all.)
    fn embeddings(&mut self, ids: &[i64]) -> Result<Vec<Stored>> {
        let wanted: HashSet<i64> = ids.iter().copied().collect();
        let mut entries = self.load()?.rows;
        entries.retain(|s| wanted.contains(&s.stamp.id));
        Ok(entries)
    }
    /// Add `entries` (name, embedding) all together or not at all, with
    /// `changes` recorded in the same transaction; their stamps, in order.
    fn add(&mut self, entries: &[Named], changes: &[Change]) -> Result<Vec<Stamp>>;
    /// Remove every entry of each name (of every embedder: a forgotten
    /// person is forgotten by all models sharing the gallery) and log each
    /// removal, all in one transaction; how many went, per name (0 logs
    /// nothing). Each name that lost entries is recorded as a change `by`
    /// that key label.
    fn forget(&mut self, names: &[String], by: Option<&str>) -> Result<Forgot>;
    /// The newest `limit` recorded changes, newest first.
    fn changes(&mut self, limit: usize) -> Result<Vec<Record>>;
    /// The folder photos this embedder has seen (`keep_photos`).
    fn photos(&mut self) -> Result<Photos>;
    /// Remember what `new` photos gave and forget every photo of this
    /// embedder whose key is not in `keep`, in one transaction.
    fn keep_photos(&mut self, new: &Photos, keep: &HashSet<String>) -> Result<()>;
    /// Remove every enrollment (of every embedder) older than `kept`, by
    /// the store's own clock (a fleet's servers may disagree), recording
    /// each name's expiry as a change, in one transaction.
    fn expire(&mut self, kept: std::time::Duration) -> Result<Expired>;
    /// Overwrite what removed rows left in the store's files (free pages,
    /// journal), so that a forgotten person's embeddings are gone from disk,
    /// not only from the tables. An error when something holds it back
    /// (a reader of an older snapshot): the caller tries again.
    fn erase(&mut self) -> Result<()> {
        Ok(())
    }
    /// This store's own name, made when it was created: the same wherever
    /// its folder is mounted or its database reached from, and different in
    /// another store. Files kept beside it (the saved index) name it.
    fn uid(&self) -> &str;
    /// This store's embedder (`Identity::tag`): its saved index is its own.
    fn embedder_tag(&self) -> &str;
    /// Where it lives, for logs: "sqlite /models/face/gallery/gallery.sqlite3".
    fn describe(&self) -> String;
    /// For a store other servers write too: what reads their changes.
    fn follower(&self) -> Option<Box<dyn Follower>> {
        None
    }
    /// Whether servers share this store, so that a saved index published to
    /// it spares a server that joins later the rebuild (minutes at a
    /// million people). The four calls below do nothing otherwise.
    fn shares_index(&self) -> bool {
        false
    }
    /// The same store on a session of its own, for work that must not hold
    /// the writer lock for long (publishing a gigabyte of index); `None`
    /// where nothing is shared.
    fn apart(&self) -> Option<Box<dyn Store>> {
        None
    }
    /// The manifest of the published index, if any.
    fn published_manifest(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }
    /// The published index: its manifest, its file written to `out`.
    fn fetch_index(&mut self, _out: &mut dyn Write) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }
    /// Publish a saved index (its manifest, its file read from `file`) in
    /// place of the last one.
    fn publish_index(&mut self, _manifest: &[u8], _file: &mut dyn Read) -> Result<()> {
        Ok(())
    }
}

/// Reads the changes other servers make to a shared store; runs on the
/// gallery's own thread.
pub trait Follower: Send {
    /// Wait at most `wait` for news, then read what changed after `since`.
    /// `None`: nothing new. After a reconnect it always reads (notifications
    /// sent while away are lost). An error means the store is out of reach;
    /// the caller waits a little and calls again.
    fn next(&mut self, since: i64, wait: Duration) -> Result<Option<Changes>>;
    fn describe(&self) -> String;
}

/// The store at `location`, for `identity`'s embeddings.
pub fn open(location: &Location, identity: &Identity) -> Result<Box<dyn Store>> {
    match location {
        Location::Sqlite { dir, poll } => {
            Ok(Box::new(sqlite::SqliteStore::open(dir, identity, *poll)?))
        }
        Location::Postgres { settings, gallery } => Ok(Box::new(
            self::postgres::PostgresStore::open(settings, gallery, identity)?,
        )),
    }
}

/// The SQLite store in `dir` (tests and benches).
pub fn open_sqlite(dir: &Path, identity: &Identity) -> Result<Box<dyn Store>> {
    open(
        &Location::Sqlite {
            dir: dir.to_path_buf(),
            poll: Duration::from_millis(100),
        },
        identity,
    )
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

/// A cached photo as stored: its face count, and the embedding of its one face.
pub fn photo_to_row(faces: &PhotoFaces) -> (i64, Option<Vec<u8>>) {
    match faces {
        PhotoFaces::One(e) => (1, Some(to_blob(e))),
        PhotoFaces::Count(n) => (*n as i64, None),
    }
}

/// A cached photo from its row; `None` for a row that does not make sense
/// (a cache: the photo is embedded again and the row replaced).
pub fn photo_from_row(faces: i64, blob: Option<&[u8]>, dim: usize) -> Option<PhotoFaces> {
    match (faces, blob) {
        (1, Some(b)) => from_blob(b, dim).map(PhotoFaces::One),
        (n, None) if n >= 0 && n != 1 => Some(PhotoFaces::Count(n as usize)),
        _ => None,
    }
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
