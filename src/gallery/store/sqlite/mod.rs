//! The SQLite store: one file in the gallery folder, WAL journal with
//! `synchronous = FULL`, so a committed change is on disk when `add` or
//! `forget` returns and survives a kill -9 (or a power cut) at any moment.
//! A change touches only its own rows: its cost does not grow with the
//! gallery.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

mod follow;
pub mod legacy;
mod rows;
pub mod schema;

use super::{
    from_blob, now_ms, photo_from_row, photo_to_row, to_blob, Change, Contents, Expired, Follower,
    Forgot, Identity, Listed, Loaded, Migrated, Named, Operation, Photos, Record, Row, Stamp,
    Store, Stored,
};
use crate::error::{Error, Result};
use rows::{embedder_id, insert, last_change, next_change, record, records};
use schema::{migrate, sql_error};

pub const DB_FILE: &str = "gallery.sqlite3";
/// Another process writing the same file (a second server on the folder)
/// makes a writer wait this long before the change fails as UNAVAILABLE.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    identity: Identity,
    /// This identity's row in `embedders`.
    embedder: i64,
    /// An enrolled.json imported by `open`, reported by the first `load`.
    migrated: Option<Migrated>,
    tag: String,
    uid: String,
    /// How often the follower reads the change counter (`gallery_poll_ms`).
    poll: Duration,
}

impl SqliteStore {
    /// Open (or create) the store in `dir`: schema migrations, then a one-time
    /// import of an old `enrolled.json`.
    pub fn open(dir: &Path, identity: &Identity, poll: Duration) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::unavailable(format!("gallery folder {}: {e}", dir.display())))?;
        let path = dir.join(DB_FILE);
        let mut conn = connect(&path).map_err(|e| e.context(path.display()))?;
        migrate(&mut conn).map_err(|e| e.context(path.display()))?;
        let embedder = embedder_id(&conn, identity)?;
        let migrated = legacy::import(&mut conn, dir, identity)?;
        let uid = conn
            .query_row("SELECT uid FROM store", [], |r| r.get(0))
            .map_err(sql_error)?;
        // What a server killed before its erasure left (after a FORGET's
        // commit, before its checkpoint) goes now; another process reading
        // the file may hold it back until the next FORGET's erasure.
        if let Err(e) = checkpoint(&conn, &path) {
            log::warn!("gallery {}: {}", path.display(), e.message());
        }
        Ok(SqliteStore {
            uid,
            tag: identity.tag(),
            conn,
            path,
            identity: identity.clone(),
            embedder,
            migrated,
            poll,
        })
    }
}

/// A connection with the durability settings every write relies on.
pub(super) fn connect(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path).map_err(sql_error)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql_error)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(sql_error)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::unavailable(format!(
            "the file system refused SQLite's WAL journal (got {mode:?})"
        )));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(sql_error)?;
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(sql_error)?;
    // A deleted row's bytes are overwritten with zeros, in the page and in
    // the free list (biometric data: FORGET must erase, docs/gallery.md).
    conn.pragma_update(None, "secure_delete", true)
        .map_err(sql_error)?;
    Ok(conn)
}

/// Copy the WAL into the database, zero its frames, then truncate it: the
/// journal's older copies of erased pages go (overwritten before the
/// truncation frees their blocks), and the file's pages hold the zeroed
/// ones. TRUNCATE copies whatever was committed since before it truncates.
fn checkpoint(conn: &Connection, db: &Path) -> Result<()> {
    zero_wal(conn, db)?;
    run_checkpoint(conn, "TRUNCATE")
}

/// How often `zero_wal` tries again when another connection wrote between
/// its checkpoint and its lock.
const ZERO_ATTEMPTS: usize = 20;

/// Every frame of `db`'s WAL copied into the database, then zeroed (the
/// WAL keeps its length until the truncation), under SQLite's own write
/// lock so that no connection (another model on the folder, a load) can
/// commit in between. RESTART copies every frame there is and waits for the
/// readers; once the lock is held, `data_version` (which moves with every
/// other connection's commit) tells whether anything was committed since
/// before the checkpoint: if not, every byte after the header is a copy the
/// database already holds; if so, the checkpoint runs again.
pub(in crate::gallery::store) fn zero_wal(conn: &Connection, db: &Path) -> Result<()> {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let version = |conn: &Connection| -> Result<i64> {
        (conn.query_row("PRAGMA data_version", [], |r| r.get(0))).map_err(sql_error)
    };
    for _ in 0..ZERO_ATTEMPTS {
        let before = version(conn)?;
        run_checkpoint(conn, "RESTART")?;
        conn.execute_batch("BEGIN IMMEDIATE").map_err(sql_error)?;
        let zeroed = match version(conn) {
            Ok(now) if now == before => overwrite_frames(Path::new(&wal)).map(|()| true),
            other => other.map(|_| false),
        };
        // Nothing was written in the transaction: it only held the lock.
        conn.execute_batch("ROLLBACK").map_err(sql_error)?;
        if zeroed? {
            return Ok(());
        }
    }
    Err(Error::unavailable(format!(
        "the SQLite WAL was written again after each of {ZERO_ATTEMPTS} checkpoints: its \
         frames are zeroed at the next erasure pass"
    )))
}

fn overwrite_frames(wal: &Path) -> Result<()> {
    match crate::gallery::wipe::overwrite(wal, WAL_HEADER) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::unavailable(format!(
            "cannot overwrite the SQLite WAL before truncating it: {e}"
        ))),
        _ => Ok(()),
    }
}

/// A WAL's header (its frames follow).
const WAL_HEADER: u64 = 32;

fn run_checkpoint(conn: &Connection, mode: &str) -> Result<()> {
    let (busy, log, copied): (i64, i64, i64) = conn
        .query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .map_err(sql_error)?;
    if busy != 0 || log != copied {
        return Err(Error::unavailable(format!(
            "SQLite checkpoint held back by a reader ({copied} of {log} pages copied)"
        )));
    }
    Ok(())
}

/// Rows of other embedders than `embedder` (kept, never matched).
fn foreign(conn: &Connection, embedder: i64) -> Result<usize> {
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM enrollments WHERE embedder != ?1",
            [embedder],
            |r| r.get(0),
        )
        .map_err(sql_error)?;
    Ok(n as usize)
}

/// One embedder's rows as read: which file, how many floats an embedding has.
#[derive(Clone)]
pub(super) struct Reading {
    pub(super) path: PathBuf,
    embedder: i64,
    dim: usize,
}

impl Reading {
    /// The row `(id, change, name, embedding)` as stored.
    fn stored(&self, r: &rusqlite::Row<'_>) -> Result<Stored> {
        let (id, change, name): (i64, i64, String) = (
            r.get(0).map_err(sql_error)?,
            r.get(1).map_err(sql_error)?,
            r.get(2).map_err(sql_error)?,
        );
        let blob: Vec<u8> = r.get(3).map_err(sql_error)?;
        let embedding = from_blob(&blob, self.dim).ok_or_else(|| {
            Error::unavailable(format!(
                "{}: enrollment {id} ({name:?}) has {} bytes, not {} floats",
                self.path.display(),
                blob.len(),
                self.dim
            ))
        })?;
        Ok(Stored {
            stamp: Stamp { id, change },
            name,
            embedding,
        })
    }

    /// This embedder's rows, all or those `filter` keeps (on `?2`, its
    /// value), oldest first. Ids and change numbers grow together (writers
    /// take turns), so the id orders them: a load reads the table in its
    /// own order.
    pub(super) fn rows(
        &self,
        conn: &Connection,
        filter: Option<(&str, i64)>,
    ) -> Result<Vec<Stored>> {
        let (sql_filter, value) = match filter {
            Some((f, v)) => (format!(" AND {f}"), Some(v)),
            None => (String::new(), None),
        };
        let sql = format!(
            "SELECT id, change, name, embedding FROM enrollments WHERE embedder = ?1{sql_filter} \
             ORDER BY id"
        );
        let mut stmt = conn.prepare_cached(&sql).map_err(sql_error)?;
        let args = std::iter::once(self.embedder).chain(value);
        let mut rows = stmt
            .query(rusqlite::params_from_iter(args))
            .map_err(sql_error)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(sql_error)? {
            out.push(self.stored(r)?);
        }
        Ok(out)
    }
}

impl SqliteStore {
    fn reading(&self) -> Reading {
        Reading {
            path: self.path.clone(),
            embedder: self.embedder,
            dim: self.identity.dim,
        }
    }

    /// What `read` gives, with what the store says about it, all from one
    /// snapshot: the change number goes with exactly these rows.
    fn contents<T>(
        &mut self,
        read: impl FnOnce(&Connection) -> Result<Vec<T>>,
    ) -> Result<Contents<T>> {
        let tx = self.conn.unchecked_transaction().map_err(sql_error)?;
        let change = last_change(&tx)?;
        let rows = read(&tx)?;
        let foreign = foreign(&tx, self.embedder)?;
        drop(tx); // read only: nothing to commit
        Ok(Contents {
            rows,
            foreign,
            migrated: self.migrated.take(),
            change,
        })
    }
}

impl Store for SqliteStore {
    fn load(&mut self) -> Result<Loaded> {
        let reading = self.reading();
        self.contents(|conn| reading.rows(conn, None))
    }

    fn list(&mut self) -> Result<Listed> {
        let embedder = self.embedder;
        self.contents(|conn| {
            let mut stmt = conn
                .prepare("SELECT id, change, name FROM enrollments WHERE embedder = ?1 ORDER BY id")
                .map_err(sql_error)?;
            let rows = stmt
                .query_map([embedder], |r| {
                    Ok(Row {
                        stamp: Stamp {
                            id: r.get(0)?,
                            change: r.get(1)?,
                        },
                        name: r.get(2)?,
                    })
                })
                .map_err(sql_error)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql_error);
            rows
        })
    }

    fn embeddings(&mut self, ids: &[i64]) -> Result<Vec<Stored>> {
        let reading = self.reading();
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            out.extend(reading.rows(&self.conn, Some(("id = ?2", id)))?);
        }
        Ok(out)
    }

    fn add(&mut self, entries: &[Named], changes: &[Change]) -> Result<Vec<Stamp>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error)?;
        let change = next_change(&tx)?;
        let mut ids = Vec::with_capacity(entries.len());
        for Named { name, embedding } in entries {
            if embedding.len() != self.identity.dim {
                // Dropping `tx` rolls back what this call inserted before.
                return Err(Error::internal(format!(
                    "enrolling {name:?}: {} values, the store holds {}",
                    embedding.len(),
                    self.identity.dim
                )));
            }
            let id = insert(&tx, self.embedder, name, &to_blob(embedding), change)?;
            ids.push(Stamp { id, change });
        }
        for change in changes {
            record(&tx, change)?;
        }
        tx.commit().map_err(sql_error)?;
        Ok(ids)
    }

    fn forget(&mut self, names: &[String], by: Option<&str>) -> Result<Forgot> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error)?;
        let change = next_change(&tx)?;
        let removed = names
            .iter()
            .map(|name| forget_one(&tx, self.embedder, name, change))
            .collect::<Result<Vec<_>>>()?;
        for (name, &count) in names.iter().zip(&removed).filter(|(_, &n)| n > 0) {
            let change = Change {
                operation: Operation::Forget,
                name: name.clone(),
                count,
                by: by.map(str::to_string),
            };
            record(&tx, &change)?;
        }
        tx.commit().map_err(sql_error)?;
        Ok(Forgot { removed, change })
    }

    fn changes(&mut self, limit: usize) -> Result<Vec<Record>> {
        records(&self.conn, limit)
    }

    fn photos(&mut self) -> Result<Photos> {
        let mut stmt = self
            .conn
            .prepare("SELECT content_key, faces, embedding FROM folder_photos WHERE embedder = ?1")
            .map_err(sql_error)?;
        let rows = stmt
            .query_map([self.embedder], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Option<Vec<u8>>>(2)?,
                ))
            })
            .map_err(sql_error)?;
        let mut photos = Photos::new();
        for row in rows {
            let (key, faces, blob) = row.map_err(sql_error)?;
            if let Some(p) = photo_from_row(faces, blob.as_deref(), self.identity.dim) {
                photos.insert(key, p);
            }
        }
        Ok(photos)
    }

    fn keep_photos(&mut self, new: &Photos, keep: &HashSet<String>) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error)?;
        let known: Vec<String> = tx
            .prepare("SELECT content_key FROM folder_photos WHERE embedder = ?1")
            .and_then(|mut s| s.query_map([self.embedder], |r| r.get(0))?.collect())
            .map_err(sql_error)?;
        for key in known.iter().filter(|k| !keep.contains(*k)) {
            tx.execute(
                "DELETE FROM folder_photos WHERE embedder = ?1 AND content_key = ?2",
                params![self.embedder, key],
            )
            .map_err(sql_error)?;
        }
        for (key, faces) in new {
            let (count, blob) = photo_to_row(faces);
            tx.execute(
                "INSERT OR REPLACE INTO folder_photos \
                 (embedder, content_key, faces, embedding, seen_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![self.embedder, key, count, blob, now_ms()],
            )
            .map_err(sql_error)?;
        }
        tx.commit().map_err(sql_error)
    }

    fn expire(&mut self, kept: std::time::Duration) -> Result<Expired> {
        let kept_ms = i64::try_from(kept.as_millis()).unwrap_or(i64::MAX);
        let before_ms = now_ms().saturating_sub(kept_ms);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error)?;
        // As on PostgreSQL: every row below the first change still within
        // `kept` goes, so that one bound per name says what went.
        let bound: i64 = tx
            .query_row(
                "SELECT coalesce((SELECT change FROM enrollments WHERE enrolled_at_ms >= ?1 \
                 ORDER BY change LIMIT 1), (SELECT value + 1 FROM last_change))",
                [before_ms],
                |r| r.get(0),
            )
            .map_err(sql_error)?;
        let rows: Vec<(i64, i64, String, i64)> = tx
            .prepare(
                "DELETE FROM enrollments WHERE change < ?1 RETURNING id, embedder, name, change",
            )
            .and_then(|mut s| {
                s.query_map([bound], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect()
            })
            .map_err(sql_error)?;
        let mut per_name: std::collections::BTreeMap<&str, (i64, usize)> = Default::default();
        for (id, _, name, _) in &rows {
            let (last, count) = per_name.entry(name).or_default();
            (*last, *count) = ((*last).max(*id), *count + 1);
        }
        if !per_name.is_empty() {
            let change = next_change(&tx)?;
            for (name, (last, count)) in per_name {
                log_removal(&tx, self.embedder, name, (last, count), (change, bound))?;
                let change = Change {
                    operation: Operation::Expire,
                    name: name.to_string(),
                    count,
                    by: None,
                };
                record(&tx, &change)?;
            }
        }
        tx.commit().map_err(sql_error)?;
        let count = rows.len();
        let ours = rows.into_iter().filter(|(_, e, _, _)| *e == self.embedder);
        Ok(Expired {
            ours: ours
                .map(|(id, _, _, change)| Stamp { id, change })
                .collect(),
            rows: count,
        })
    }

    fn erase(&mut self) -> Result<()> {
        checkpoint(&self.conn, &self.path)
    }

    fn uid(&self) -> &str {
        &self.uid
    }

    fn embedder_tag(&self) -> &str {
        &self.tag
    }

    /// Other models on this folder (in this server or another) write it too.
    fn follower(&self) -> Option<Box<dyn Follower>> {
        Some(Box::new(follow::SqliteFollower::new(
            self.reading(),
            self.poll,
        )))
    }

    fn describe(&self) -> String {
        format!("sqlite {}", self.path.display())
    }
}

/// Remove `name`'s enrollments, of every embedder, and log it (inside the
/// caller's transaction; the log row names the embedder that asked).
fn forget_one(conn: &Connection, embedder: i64, name: &str, change: i64) -> Result<usize> {
    let last: Option<i64> = conn
        .query_row(
            "SELECT max(id) FROM enrollments WHERE name = ?1",
            params![name],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql_error)?
        .flatten();
    let Some(last) = last else {
        return Ok(0); // nothing of that name: no change, nothing to log
    };
    let removed = conn
        .execute(
            "DELETE FROM enrollments WHERE name = ?1 AND id <= ?2",
            params![name, last],
        )
        .map_err(sql_error)?;
    log_removal(conn, embedder, name, (last, removed), (change, change))?;
    Ok(removed)
}

/// Log that `name`'s enrollments up to id `last` (`removed` of them) and
/// below change `before` went, at change `change`.
fn log_removal(
    conn: &Connection,
    embedder: i64,
    name: &str,
    (last, removed): (i64, usize),
    (change, before): (i64, i64),
) -> Result<()> {
    conn.execute(
        "INSERT INTO removals (embedder, name, last_enrollment, removed, removed_at_ms, change, \
         before_change) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            embedder,
            name,
            last,
            removed as i64,
            now_ms(),
            change,
            before
        ],
    )
    .map_err(sql_error)?;
    Ok(())
}
