//! The SQLite schema, versioned by `PRAGMA user_version`: migration `i`
//! takes a database from version `i` to `i + 1`, in one transaction with the
//! version bump, so a crash leaves either version, never a mix. Append new
//! migrations; never edit one that has shipped.

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{Error, Result};

const MIGRATIONS: &[&str] = &[
    // 1: embedders, enrollments, the removal log, imported files.
    "CREATE TABLE embedders (
         id INTEGER PRIMARY KEY,
         engine TEXT NOT NULL,
         metric TEXT NOT NULL,
         dim INTEGER NOT NULL,
         model_hash TEXT NOT NULL,
         UNIQUE (engine, metric, dim, model_hash)
     );
     -- AUTOINCREMENT: an id is never reused, even after its row is removed.
     CREATE TABLE enrollments (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         embedder INTEGER NOT NULL REFERENCES embedders (id),
         name TEXT NOT NULL,
         embedding BLOB NOT NULL,
         enrolled_at_ms INTEGER NOT NULL
     );
     CREATE INDEX enrollments_by_name ON enrollments (embedder, name);
     -- One row per FORGET that removed something: every enrollment of `name`
     -- with an id up to `last_enrollment` is gone.
     CREATE TABLE removals (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         embedder INTEGER NOT NULL REFERENCES embedders (id),
         name TEXT NOT NULL,
         last_enrollment INTEGER NOT NULL,
         removed INTEGER NOT NULL,
         removed_at_ms INTEGER NOT NULL
     );
     -- Old enrolled.json files already imported, by content: never twice.
     CREATE TABLE imports (
         content_hash TEXT PRIMARY KEY,
         file TEXT NOT NULL,
         entries INTEGER NOT NULL,
         imported_at_ms INTEGER NOT NULL
     );",
    // 2: what each gallery-folder photo gave an embedder, by content (a
    // reload embeds only new or changed photos); enrollments by name alone;
    // the store's uid.
    "CREATE TABLE folder_photos (
         embedder INTEGER NOT NULL REFERENCES embedders (id),
         content_key TEXT NOT NULL,
         faces INTEGER NOT NULL,
         -- float32 little-endian, when faces = 1.
         embedding BLOB,
         seen_at_ms INTEGER NOT NULL,
         PRIMARY KEY (embedder, content_key)
     );
     -- FORGET finds a name's rows of every embedder: without this it scanned
     -- the whole table (enrollments_by_name leads with the embedder).
     CREATE INDEX enrollments_by_any_name ON enrollments (name);
     -- The store's own name (Store::uid), made once.
     CREATE TABLE store (uid TEXT NOT NULL);
     INSERT INTO store (uid) VALUES (lower(hex(randomblob(16))));",
    // 3: the record of changes: every enroll and forget, per name, with the
    // label of the gallery key that asked (never the key).
    "CREATE TABLE changes (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         at_ms INTEGER NOT NULL,
         operation TEXT NOT NULL,
         name TEXT NOT NULL,
         count INTEGER NOT NULL,
         key_label TEXT
     );",
    // 4: change numbers, as on PostgreSQL, so that models on one folder
    // follow each other: every write transaction takes the next number of
    // `last_change` (writers take turns: numbers follow commit order), its
    // enrollments and removals carry it; a removal covers every enrollment
    // of its name below `before_change`. Rows before this version keep
    // their id as their number, which the counter starts above.
    "ALTER TABLE enrollments ADD COLUMN change INTEGER NOT NULL DEFAULT 0;
     UPDATE enrollments SET change = id;
     ALTER TABLE removals ADD COLUMN change INTEGER NOT NULL DEFAULT 0;
     ALTER TABLE removals ADD COLUMN before_change INTEGER NOT NULL DEFAULT 0;
     UPDATE removals SET before_change = last_enrollment + 1;
     CREATE TABLE last_change (value INTEGER NOT NULL);
     INSERT INTO last_change (value)
         SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'enrollments'), 0);
     CREATE INDEX enrollments_by_change ON enrollments (change);
     CREATE INDEX removals_by_change ON removals (change);",
];

/// The version this build writes.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

/// Bring `conn` to `VERSION`; a database of a newer build is refused.
pub fn migrate(conn: &mut Connection) -> Result<()> {
    migrate_to(conn, VERSION)
}

/// Bring `conn` to `target` (an older version: tests of a migration).
pub fn migrate_to(conn: &mut Connection, target: i64) -> Result<()> {
    let mut version = user_version(conn)?;
    if version > VERSION {
        return Err(Error::unavailable(format!(
            "the gallery database is schema version {version}, newer than this backend's \
             {VERSION}: use the newer backend, or move the file away to start empty"
        )));
    }
    while version < target {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_error)?;
        // Read again inside the lock: another process may have migrated meanwhile.
        version = user_version(&tx)?;
        if version < target {
            tx.execute_batch(MIGRATIONS[version as usize])
                .map_err(sql_error)?;
            version += 1;
            tx.pragma_update(None, "user_version", version)
                .map_err(sql_error)?;
        }
        tx.commit().map_err(sql_error)?;
    }
    Ok(())
}

pub fn user_version(conn: &Connection) -> Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
        .map_err(sql_error)
}

/// SQLite failures are the store's, not the request's: retry later.
pub fn sql_error(e: rusqlite::Error) -> Error {
    Error::unavailable(format!("gallery store: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_once_and_refuses_a_newer_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut conn = Connection::open(&path).unwrap();
        assert_eq!(user_version(&conn).unwrap(), 0);
        migrate(&mut conn).unwrap();
        assert_eq!(user_version(&conn).unwrap(), VERSION);
        migrate(&mut conn).unwrap(); // a second open changes nothing
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN \
                 ('embedders', 'enrollments', 'removals', 'imports', 'folder_photos', 'store', \
                 'changes', 'last_change')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(tables, 8);
        conn.pragma_update(None, "user_version", VERSION + 1)
            .unwrap();
        let e = migrate(&mut conn).unwrap_err();
        assert!(e.message().contains("newer"), "{e}");
    }
}
