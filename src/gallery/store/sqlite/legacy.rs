//! The old store, `enrolled.json` (one JSON file rewritten whole per
//! enrollment), imported into SQLite once: in one transaction that also
//! records the file's hash, then the file is renamed `enrolled.json.migrated`.
//! A crash between the two leaves a recorded file, which the next open only
//! renames: it is never imported twice.

use std::fs;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::Deserialize;

use super::rows::{embedder_id, insert};
use super::schema::sql_error;
use crate::error::{Error, Result};
use crate::gallery::store::{now_ms, to_blob, Identity, Migrated};

pub const LEGACY_FILE: &str = "enrolled.json";
const LEGACY_VERSION: u32 = 1;

#[derive(Deserialize)]
struct LegacyFile {
    version: u32,
    engine: String,
    metric: String,
    dim: usize,
    entries: Vec<LegacyEntry>,
}

#[derive(Deserialize)]
struct LegacyEntry {
    name: String,
    embedding: Vec<f32>,
}

/// Import `dir/enrolled.json` if there is one; what was done.
pub fn import(conn: &mut Connection, dir: &Path, identity: &Identity) -> Result<Option<Migrated>> {
    let path = dir.join(LEGACY_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::unavailable(format!("{}: {e}", path.display()))),
    };
    let file = parse(&path, &bytes)?;
    let hash = blake3::hash(&bytes).to_hex().to_string();
    let entries = store(conn, &file, &hash, identity).map_err(|e| e.context(path.display()))?;
    let renamed_to = rename_aside(&path)?;
    Ok(Some(Migrated {
        from: path,
        renamed_to,
        entries,
    }))
}

/// The file's contents, checked; a file that cannot be read as the old store
/// stops the load (nothing is dropped silently).
fn parse(path: &Path, bytes: &[u8]) -> Result<LegacyFile> {
    let bad = |why: String| {
        Error::unavailable(format!(
            "{}: not a valid gallery store ({why}); move it away to start without it",
            path.display()
        ))
    };
    let file: LegacyFile = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    if file.version != LEGACY_VERSION {
        return Err(bad(format!("version {}", file.version)));
    }
    if let Some(e) = file.entries.iter().find(|e| e.embedding.len() != file.dim) {
        let what = format!(
            "{:?} has {} values, not {}",
            e.name,
            e.embedding.len(),
            file.dim
        );
        return Err(bad(what));
    }
    Ok(file)
}

/// Rows for the file's entries plus the import record, in one transaction;
/// how many rows (0 when this content was imported before).
fn store(
    conn: &mut Connection,
    file: &LegacyFile,
    hash: &str,
    identity: &Identity,
) -> Result<usize> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql_error)?;
    let seen: Option<i64> = tx
        .query_row(
            "SELECT 1 FROM imports WHERE content_hash = ?1",
            [hash],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql_error)?;
    if seen.is_some() {
        return Ok(0);
    }
    let embedder = embedder_id(&tx, &owner(file, identity))?;
    for entry in &file.entries {
        insert(&tx, embedder, &entry.name, &to_blob(&entry.embedding))?;
    }
    tx.execute(
        "INSERT INTO imports (content_hash, file, entries, imported_at_ms) VALUES (?1, ?2, ?3, ?4)",
        params![hash, LEGACY_FILE, file.entries.len() as i64, now_ms()],
    )
    .map_err(sql_error)?;
    tx.commit().map_err(sql_error)?;
    Ok(file.entries.len())
}

/// Who made the file's embeddings. The old store recorded no model files:
/// a file of this engine, metric and length is taken as this model's; any
/// other is kept under its own (never matching) identity.
fn owner(file: &LegacyFile, identity: &Identity) -> Identity {
    let same = file.engine == identity.engine
        && file.metric == identity.metric
        && file.dim == identity.dim;
    if same {
        return identity.clone();
    }
    Identity {
        engine: file.engine.clone(),
        metric: file.metric.clone(),
        dim: file.dim,
        model_hash: format!("unknown ({LEGACY_FILE})"),
    }
}

/// Rename `path` to `path.migrated` (`.migrated.2`, ... if taken), durably.
fn rename_aside(path: &Path) -> Result<PathBuf> {
    let failed = |e: std::io::Error| {
        Error::unavailable(format!(
            "cannot rename {} after importing it: {e}",
            path.display()
        ))
    };
    let mut target = PathBuf::from(format!("{}.migrated", path.display()));
    let mut n = 1;
    while target.exists() {
        n += 1;
        target = PathBuf::from(format!("{}.migrated.{n}", path.display()));
    }
    fs::rename(path, &target).map_err(failed)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(failed)?;
    Ok(target)
}
