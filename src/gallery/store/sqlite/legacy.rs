//! The old store, `enrolled.json` (one JSON file rewritten whole per
//! enrollment), imported into SQLite once: in one transaction that also
//! records the file's hash, then the file is erased (overwritten with zeros,
//! then removed): its embeddings live on in the store alone, where FORGET
//! reaches them. A crash between the two leaves a recorded file, which the
//! next open only erases: it is never imported twice. Older versions renamed
//! the file `enrolled.json.migrated` after the same commit; such files are
//! erased at open too.

use std::fs;
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::Deserialize;

use super::rows::{embedder_id, insert, next_change};
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

/// Import `dir/enrolled.json` if there is one, and erase it and the
/// copies older versions left; what was done.
pub fn import(conn: &mut Connection, dir: &Path, identity: &Identity) -> Result<Option<Migrated>> {
    let path = dir.join(LEGACY_FILE);
    let mut done = match fs::read(&path) {
        Ok(bytes) => {
            let file = parse(&path, &bytes)?;
            let hash = blake3::hash(&bytes).to_hex().to_string();
            let entries =
                store(conn, &file, &hash, identity).map_err(|e| e.context(path.display()))?;
            erase_file(&path)?;
            Some(Migrated {
                from: path,
                entries,
                erased: 1,
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::unavailable(format!("{}: {e}", path.display()))),
    };
    for old in renamed_before(dir)? {
        erase_file(&old)?;
        let m = done.get_or_insert_with(|| Migrated {
            from: old.clone(),
            entries: 0,
            erased: 0,
        });
        m.erased += 1;
    }
    Ok(done)
}

/// `enrolled.json.migrated`, `.migrated.2`, ...: what older versions renamed
/// an imported file to (only after its import committed).
fn renamed_before(dir: &Path) -> Result<Vec<PathBuf>> {
    let prefix = format!("{LEGACY_FILE}.migrated");
    let listed = fs::read_dir(dir)
        .map_err(|e| Error::unavailable(format!("{}: cannot be listed: {e}", dir.display())))?;
    Ok(listed
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect())
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
    let change = next_change(&tx)?;
    for entry in &file.entries {
        insert(
            &tx,
            embedder,
            &entry.name,
            &to_blob(&entry.embedding),
            change,
        )?;
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

/// Overwrite `path` with zeros, durably, then remove it, durably: its
/// bytes do not stay in free blocks of an overwrite-in-place filesystem.
fn erase_file(path: &Path) -> Result<()> {
    crate::gallery::wipe::erase_file(path).map_err(|e| {
        Error::unavailable(format!(
            "cannot erase {} after importing it: {e}",
            path.display()
        ))
    })
}
