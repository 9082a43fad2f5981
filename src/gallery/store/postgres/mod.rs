//! The PostgreSQL store: one gallery (by name) in a database that a fleet of
//! servers shares. Matching stays in each server's memory; the database
//! orders the changes and tells every server about them.
//!
//! A change (ENROLL's rows, a FORGET) is one transaction: it locks its
//! gallery's row to take the next change number (so numbers follow commit
//! order), writes its rows, and sends NOTIFY, which PostgreSQL delivers at
//! commit. Every server's follower (`listen.rs`) LISTENs, and reads what
//! changed after the last number it has seen: on a notification, after every
//! reconnect, and every `gallery_poll_ms` in case one was lost.

pub mod allowance;
mod expire;
pub mod listen;
pub mod photos;
pub mod published;
pub mod read;
pub mod schema;
pub mod target;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::time::Duration;

use ::postgres::{Client, Transaction};

use super::{
    to_blob, Change, Expired, Follower, Forgot, Identity, Listed, Loaded, Named, Operation, Photos,
    Record, Stamp, Store, Stored,
};
use crate::error::{Error, Result};
use read::{ReadError, Scope};
use target::{why, Target};

/// The channel every server LISTENs on; the payload is the gallery's id.
pub const CHANNEL: &str = "triton_face";

/// The model parameters of a PostgreSQL gallery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgSettings {
    /// The environment variable holding the DSN.
    pub dsn_env: String,
    /// `None`: the model's name.
    pub gallery_name: Option<String>,
    /// Read changes at least this often, notified or not.
    pub poll: Duration,
}

impl Default for PgSettings {
    fn default() -> Self {
        PgSettings {
            dsn_env: "FACE_GALLERY_DSN".into(),
            gallery_name: None,
            poll: Duration::from_secs(1),
        }
    }
}

pub struct PostgresStore {
    target: Target,
    /// The writing session; `None` after it broke (reconnects at the next call).
    client: Option<Client>,
    scope: Scope,
    name: String,
    tag: String,
    uid: String,
    poll: Duration,
}

impl PostgresStore {
    /// Connect, prepare the schema, and find (or create) the gallery and the
    /// embedder's rows. A database out of reach fails the model load.
    pub fn open(settings: &PgSettings, gallery: &str, identity: &Identity) -> Result<Self> {
        let target = Target::from_env(&settings.dsn_env)?;
        let mut client = target.connect().map_err(|e| {
            Error::unavailable(format!(
                "gallery store postgres {}: cannot connect: {}. The model does not load without \
                 its gallery: start the database (or fix {}), then load the model again",
                target.shown(),
                why(&e),
                settings.dsn_env
            ))
        })?;
        schema::migrate(&mut client).map_err(|e| e.into_error(target.shown()))?;
        let db = |e: ::postgres::Error| db_error(target.shown(), e);
        let gallery_id = row_id(
            &mut client,
            "INSERT INTO triton_face.galleries (name) VALUES ($1) ON CONFLICT (name) DO NOTHING",
            "SELECT id FROM triton_face.galleries WHERE name = $1",
            &[&gallery],
        )
        .map_err(db)?;
        let dim = identity.dim as i32;
        let key: [&(dyn ::postgres::types::ToSql + Sync); 4] = [
            &identity.engine,
            &identity.metric,
            &dim,
            &identity.model_hash,
        ];
        let embedder = row_id(
            &mut client,
            "INSERT INTO triton_face.embedders (engine, metric, dim, model_hash) \
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            "SELECT id FROM triton_face.embedders \
             WHERE engine = $1 AND metric = $2 AND dim = $3 AND model_hash = $4",
            &key,
        )
        .map_err(db)?;
        let uid: String = client
            .query_one(
                "SELECT uid::text FROM triton_face.galleries WHERE id = $1",
                &[&gallery_id],
            )
            .map_err(db)?
            .get(0);
        Ok(PostgresStore {
            uid,
            tag: identity.tag(),
            scope: Scope {
                gallery: gallery_id,
                embedder,
                dim: identity.dim,
            },
            name: gallery.to_string(),
            poll: settings.poll,
            client: Some(client),
            target,
        })
    }

    /// The writing session, reconnected if it broke.
    fn session(&mut self) -> Result<&mut Client> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = None;
            let client = self.target.connect().map_err(|e| self.db(e))?;
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    fn db(&self, e: ::postgres::Error) -> Error {
        db_error(self.target.shown(), e)
    }

    /// Run `body` as one change: take the gallery's next change number, run
    /// it, notify, commit. `body` says whether there is anything to commit.
    /// A session that broke before the commit was sent is replaced and the
    /// change tried once more; a failure at the commit itself is reported as
    /// such (it may or may not have been saved: nothing is acknowledged).
    fn change<T>(&mut self, body: &ChangeBody<'_, T>) -> Result<T> {
        let gallery = self.scope.gallery;
        for attempt in 0..2 {
            let client = self.session()?;
            match run_change(client, gallery, body) {
                Ok(v) => return Ok(v),
                Err(Failure::Before(e)) if attempt == 0 && broken(&e) => {
                    self.client = None;
                }
                Err(Failure::Before(e)) => return Err(self.db(e)),
                Err(Failure::AtCommit(e)) => {
                    self.client = None;
                    return Err(Error::unavailable(format!(
                        "gallery store postgres {}: the commit did not complete ({}); the \
                         change may or may not be saved: check with LIST before retrying",
                        self.target.shown(),
                        why(&e)
                    )));
                }
            }
        }
        Err(Error::unavailable(format!(
            "gallery store postgres {}: the session broke twice",
            self.target.shown()
        )))
    }

    /// `body` in one snapshot transaction; its error names the database.
    fn read<T>(
        &mut self,
        body: impl FnOnce(&mut Transaction<'_>, Scope) -> std::result::Result<T, ReadError>,
    ) -> Result<T> {
        let scope = self.scope;
        let client = self.session()?;
        let read = (|| {
            let mut tx = read::snapshot(client)?;
            let out = body(&mut tx, scope)?;
            tx.commit()?;
            Ok::<_, ReadError>(out)
        })();
        read.map_err(|e| read_error(self.target.shown(), e))
    }

    /// `body`, other embedders' row count and the last change, all from one
    /// snapshot: a follower goes on from exactly what was read.
    fn counted_read<T>(
        &mut self,
        body: impl FnOnce(&mut Transaction<'_>, Scope) -> std::result::Result<T, ReadError>,
    ) -> Result<(T, usize, i64)> {
        self.read(|tx, scope| {
            let change = read::last_change(tx, scope)?;
            let out = body(tx, scope)?;
            Ok((out, read::foreign(tx, scope)?, change))
        })
    }
}

/// What a change does inside its transaction, given its change number:
/// the answer, and whether there is anything to commit.
type ChangeBody<'a, T> =
    dyn Fn(&mut Transaction<'_>, i64) -> std::result::Result<(T, bool), ::postgres::Error> + 'a;

enum Failure {
    /// Before COMMIT was sent: nothing was saved.
    Before(::postgres::Error),
    /// The COMMIT itself: unknown.
    AtCommit(::postgres::Error),
}

fn run_change<T>(
    client: &mut Client,
    gallery: i64,
    body: &ChangeBody<'_, T>,
) -> std::result::Result<T, Failure> {
    let mut tx = client.transaction().map_err(Failure::Before)?;
    let change: i64 = tx
        .query_one(
            "UPDATE triton_face.galleries SET last_change = last_change + 1 \
             WHERE id = $1 RETURNING last_change",
            &[&gallery],
        )
        .map_err(Failure::Before)?
        .get(0);
    let (out, commit) = body(&mut tx, change).map_err(Failure::Before)?;
    if !commit {
        return Ok(out); // dropping `tx` rolls back: the number is not used
    }
    tx.execute(
        "SELECT pg_notify($1, $2)",
        &[&CHANNEL, &gallery.to_string()],
    )
    .map_err(Failure::Before)?;
    tx.commit().map_err(Failure::AtCommit)?;
    Ok(out)
}

/// The session is gone (killed, server restarting, network): worth one
/// retry on a new session. SQLSTATE classes 08 (connection exception) and
/// 57 (operator intervention: pg_terminate_backend, shutdown).
fn broken(e: &::postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(code) => matches!(&code.code()[..2], "08" | "57"),
    }
}

/// A database error as the answer and the log show it: where, and the server's own words.
pub(super) fn db_error(shown: &str, e: ::postgres::Error) -> Error {
    Error::unavailable(format!("gallery store postgres {shown}: {}", why(&e)))
}

/// The id of a row found by `select`, inserted by `insert` first if missing
/// (both take `params`).
fn row_id(
    client: &mut Client,
    insert: &str,
    select: &str,
    params: &[&(dyn ::postgres::types::ToSql + Sync)],
) -> std::result::Result<i64, ::postgres::Error> {
    client.execute(insert, params)?;
    Ok(client.query_one(select, params)?.get(0))
}

impl Store for PostgresStore {
    fn load(&mut self) -> Result<Loaded> {
        let (rows, foreign, change) =
            self.counted_read(|tx, scope| read::enrollments(tx, scope, 0))?;
        Ok(Loaded {
            rows,
            foreign,
            migrated: None,
            change,
        })
    }

    fn list(&mut self) -> Result<Listed> {
        let (rows, foreign, change) = self.counted_read(read::rows)?;
        Ok(Listed {
            rows,
            foreign,
            migrated: None,
            change,
        })
    }

    fn embeddings(&mut self, ids: &[i64]) -> Result<Vec<Stored>> {
        self.read(|tx, scope| read::by_ids(tx, scope, ids))
    }

    fn add(&mut self, entries: &[Named], changes: &[Change]) -> Result<Vec<Stamp>> {
        let scope = self.scope;
        if let Some(Named { name, embedding: e }) =
            entries.iter().find(|n| n.embedding.len() != scope.dim)
        {
            return Err(Error::internal(format!(
                "enrolling {name:?}: {} values, the store holds {}",
                e.len(),
                scope.dim
            )));
        }
        self.change(&|tx, change| {
            let mut stamps = Vec::with_capacity(entries.len());
            for Named { name, embedding } in entries {
                let id: i64 = tx
                    .query_one(
                        "INSERT INTO triton_face.enrollments \
                         (gallery, embedder, name, embedding, change) \
                         VALUES ($1, $2, $3, $4, $5) RETURNING id",
                        &[
                            &scope.gallery,
                            &scope.embedder,
                            name,
                            &to_blob(embedding),
                            &change,
                        ],
                    )?
                    .get(0);
                stamps.push(Stamp { id, change });
            }
            for record in changes {
                write_record(tx, scope.gallery, change, record)?;
            }
            Ok((stamps, !entries.is_empty()))
        })
    }

    fn forget(&mut self, names: &[String], by: Option<&str>) -> Result<Forgot> {
        let gallery = self.scope.gallery;
        self.change(&|tx, change| {
            let mut removed = Vec::with_capacity(names.len());
            for name in names {
                let count = forget_one(tx, gallery, name, change)?;
                if count > 0 {
                    let record = Change {
                        operation: Operation::Forget,
                        name: name.clone(),
                        count,
                        by: by.map(str::to_string),
                    };
                    write_record(tx, gallery, change, &record)?;
                }
                removed.push(count);
            }
            let any = removed.iter().any(|&n| n > 0);
            let change = if any { change } else { 0 };
            Ok((Forgot { removed, change }, any))
        })
    }

    fn changes(&mut self, limit: usize) -> Result<Vec<Record>> {
        self.read(|tx, scope| read::records(tx, scope, limit))
    }

    fn expire(&mut self, kept: Duration) -> Result<Expired> {
        let scope = self.scope;
        self.change(&|tx, change| expire::expire(tx, scope, kept, change))
    }

    fn photos(&mut self) -> Result<Photos> {
        self.read(photos::read)
    }

    fn keep_photos(&mut self, new: &Photos, keep: &HashSet<String>) -> Result<()> {
        let scope = self.scope;
        let client = self.session()?;
        let write = (|| {
            let mut tx = client.transaction()?;
            photos::keep(&mut tx, scope, new, keep)?;
            tx.commit()
        })();
        write.map_err(|e| self.db(e))
    }

    fn uid(&self) -> &str {
        &self.uid
    }

    fn embedder_tag(&self) -> &str {
        &self.tag
    }

    fn describe(&self) -> String {
        format!(
            "postgres {}, gallery {:?} (id {})",
            self.target.shown(),
            self.name,
            self.scope.gallery
        )
    }

    fn follower(&self) -> Option<Box<dyn Follower>> {
        let label = self.describe();
        Some(Box::new(listen::PgFollower::new(
            self.target.clone(),
            self.scope,
            self.poll,
            label,
        )))
    }

    fn shares_index(&self) -> bool {
        true
    }

    fn apart(&self) -> Option<Box<dyn Store>> {
        Some(Box::new(PostgresStore {
            target: self.target.clone(),
            client: None, // connected at its first call
            scope: self.scope,
            name: self.name.clone(),
            uid: self.uid.clone(),
            tag: self.tag.clone(),
            poll: self.poll,
        }))
    }

    fn published_manifest(&mut self) -> Result<Option<Vec<u8>>> {
        self.read(published::manifest)
    }

    fn fetch_index(&mut self, out: &mut dyn Write) -> Result<Option<Vec<u8>>> {
        self.read(|tx, scope| published::fetch(tx, scope, out))
    }

    fn publish_index(&mut self, manifest: &[u8], file: &mut dyn Read) -> Result<()> {
        let scope = self.scope;
        let client = self.session()?;
        let published = published::publish(client, scope, manifest, file);
        published.map_err(|e| read_error(self.target.shown(), e))
    }
}

/// Record one name's part of change number `change`.
pub(super) fn write_record(
    tx: &mut Transaction<'_>,
    gallery: i64,
    change: i64,
    record: &Change,
) -> std::result::Result<(), ::postgres::Error> {
    tx.execute(
        "INSERT INTO triton_face.changes (gallery, change, operation, name, count, key_label) \
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &gallery,
            &change,
            &record.operation.as_str(),
            &record.name,
            &(record.count as i32),
            &record.by,
        ],
    )?;
    Ok(())
}

/// Delete `name`'s rows (every embedder's) and log the removal; how many.
fn forget_one(
    tx: &mut Transaction<'_>,
    gallery: i64,
    name: &str,
    change: i64,
) -> std::result::Result<usize, ::postgres::Error> {
    let removed = tx.execute(
        "DELETE FROM triton_face.enrollments WHERE gallery = $1 AND name = $2",
        &[&gallery, &name],
    )? as usize;
    if removed > 0 {
        tx.execute(
            "INSERT INTO triton_face.removals (gallery, name, change, removed) \
             VALUES ($1, $2, $3, $4)",
            &[&gallery, &name, &change, &(removed as i32)],
        )?;
    }
    Ok(removed)
}

pub(super) fn read_error(shown: &str, e: ReadError) -> Error {
    match e {
        ReadError::Db(e) => db_error(shown, e),
        ReadError::BadRow(what) => {
            Error::unavailable(format!("gallery store postgres {shown}: {what}"))
        }
    }
}
