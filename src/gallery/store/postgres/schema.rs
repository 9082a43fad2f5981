//! The PostgreSQL schema `triton_face`, versioned in its own table: each
//! migration runs once, in the transaction that bumps the version, under an
//! advisory lock so that servers starting together never race. Append new
//! migrations; never edit one that has shipped.

use ::postgres::Client;

use crate::error::{Error, Result};

/// Serializes schema changes across servers ("triton_f" in ASCII).
const MIGRATION_LOCK: i64 = 0x7472_6974_6f6e_5f66;

const MIGRATIONS: &[&str] = &[
    // 1: galleries (with their change counter), embedders, enrollments, removals.
    "CREATE TABLE triton_face.galleries (
         id bigserial PRIMARY KEY,
         name text NOT NULL UNIQUE,
         -- The last change number handed out. A change locks this row to take
         -- the next one, so numbers follow commit order within a gallery.
         last_change bigint NOT NULL DEFAULT 0
     );
     CREATE TABLE triton_face.embedders (
         id bigserial PRIMARY KEY,
         engine text NOT NULL,
         metric text NOT NULL,
         dim integer NOT NULL,
         model_hash text NOT NULL,
         UNIQUE (engine, metric, dim, model_hash)
     );
     CREATE TABLE triton_face.enrollments (
         id bigserial PRIMARY KEY,
         gallery bigint NOT NULL REFERENCES triton_face.galleries (id),
         embedder bigint NOT NULL REFERENCES triton_face.embedders (id),
         name text NOT NULL,
         -- float32 little-endian, as many as the embedder's dim.
         embedding bytea NOT NULL,
         change bigint NOT NULL,
         enrolled_at timestamptz NOT NULL DEFAULT now()
     );
     CREATE INDEX enrollments_by_change ON triton_face.enrollments (gallery, change);
     CREATE INDEX enrollments_by_name ON triton_face.enrollments (gallery, name);
     -- One row per name a FORGET removed: every enrollment of `name` in the
     -- gallery with a smaller change number is gone.
     CREATE TABLE triton_face.removals (
         id bigserial PRIMARY KEY,
         gallery bigint NOT NULL REFERENCES triton_face.galleries (id),
         name text NOT NULL,
         change bigint NOT NULL,
         removed integer NOT NULL,
         removed_at timestamptz NOT NULL DEFAULT now()
     );
     CREATE INDEX removals_by_change ON triton_face.removals (gallery, change);",
    // 2: what each gallery-folder photo gave an embedder, by content (a
    // reload embeds only new or changed photos); each gallery's uid.
    "CREATE TABLE triton_face.folder_photos (
         gallery bigint NOT NULL REFERENCES triton_face.galleries (id),
         embedder bigint NOT NULL REFERENCES triton_face.embedders (id),
         content_key text NOT NULL,
         faces integer NOT NULL,
         -- float32 little-endian, when faces = 1.
         embedding bytea,
         seen_at timestamptz NOT NULL DEFAULT now(),
         PRIMARY KEY (gallery, embedder, content_key)
     );
     -- The gallery's own name (Store::uid), made once per gallery.
     ALTER TABLE triton_face.galleries ADD COLUMN uid uuid NOT NULL DEFAULT gen_random_uuid();",
    // 3: a saved vector index a server published for those that join later
    // (a cache: never trusted over the enrollments), in parts.
    "CREATE TABLE triton_face.published_indexes (
         gallery bigint NOT NULL REFERENCES triton_face.galleries (id),
         embedder bigint NOT NULL REFERENCES triton_face.embedders (id),
         -- The saved index's manifest (JSON): its length, BLAKE3, the rows it holds.
         manifest bytea NOT NULL,
         parts integer NOT NULL,
         published_at timestamptz NOT NULL DEFAULT now(),
         PRIMARY KEY (gallery, embedder)
     );
     CREATE TABLE triton_face.published_index_parts (
         gallery bigint NOT NULL,
         embedder bigint NOT NULL,
         part integer NOT NULL,
         bytes bytea NOT NULL,
         PRIMARY KEY (gallery, embedder, part),
         FOREIGN KEY (gallery, embedder)
             REFERENCES triton_face.published_indexes (gallery, embedder) ON DELETE CASCADE
     );
     -- f16 vectors and neighbour ids do not compress: do not try.
     ALTER TABLE triton_face.published_index_parts ALTER COLUMN bytes SET STORAGE EXTERNAL;",
    // 4: the record of changes: every enroll and forget, per name, with the
    // label of the gallery key that asked (never the key).
    "CREATE TABLE triton_face.changes (
         id bigserial PRIMARY KEY,
         gallery bigint NOT NULL REFERENCES triton_face.galleries (id),
         change bigint NOT NULL,
         at timestamptz NOT NULL DEFAULT now(),
         operation text NOT NULL,
         name text NOT NULL,
         count integer NOT NULL,
         key_label text
     );
     CREATE INDEX changes_by_gallery ON triton_face.changes (gallery, id);",
    // 5: an expiry (retention_days) removes a name's enrollments below a
    // bound, not all before its own change: followers read the bound here
    // (NULL for a FORGET: its own change).
    "ALTER TABLE triton_face.removals ADD COLUMN before_change bigint;",
    // 6: each key label's allowance (key_rate), one for every server of the
    // gallery (by its name): GCRA's theoretical arrival time, in seconds
    // since the epoch by the database's clock.
    "CREATE TABLE triton_face.key_allowances (
         gallery text NOT NULL,
         label text NOT NULL,
         tat double precision NOT NULL,
         PRIMARY KEY (gallery, label)
     );",
];

/// The version this build writes.
pub const VERSION: i32 = MIGRATIONS.len() as i32;

/// Bring the database to `VERSION`; a database of a newer build is refused.
pub fn migrate(client: &mut Client) -> Result<(), MigrateError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS triton_face;
         CREATE TABLE IF NOT EXISTS triton_face.schema_version (version integer NOT NULL);",
    )?;
    let found: Option<i32> = tx
        .query_opt("SELECT version FROM triton_face.schema_version", &[])?
        .map(|row| row.get(0));
    let version = found.unwrap_or(0);
    if version > VERSION {
        return Err(MigrateError::Newer(version));
    }
    for migration in &MIGRATIONS[version as usize..] {
        tx.batch_execute(migration)?;
    }
    match found {
        None => tx.execute(
            "INSERT INTO triton_face.schema_version (version) VALUES ($1)",
            &[&VERSION],
        )?,
        Some(_) => tx.execute(
            "UPDATE triton_face.schema_version SET version = $1",
            &[&VERSION],
        )?,
    };
    tx.commit()?;
    Ok(())
}

pub enum MigrateError {
    Db(::postgres::Error),
    Newer(i32),
}

impl From<::postgres::Error> for MigrateError {
    fn from(e: ::postgres::Error) -> Self {
        MigrateError::Db(e)
    }
}

impl MigrateError {
    pub fn into_error(self, shown: &str) -> Error {
        match self {
            MigrateError::Db(e) => Error::unavailable(format!(
                "gallery store postgres {shown}: preparing schema triton_face: {}",
                super::target::why(&e)
            )),
            MigrateError::Newer(v) => Error::unavailable(format!(
                "gallery store postgres {shown}: schema triton_face is version {v}, newer than \
                 this backend's {VERSION}: use the newer backend"
            )),
        }
    }
}
