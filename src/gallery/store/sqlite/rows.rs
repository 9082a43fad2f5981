//! Rows written both by the store and by the legacy import.

use rusqlite::{params, Connection};

use super::schema::sql_error;
use crate::error::{Error, Result};
use crate::gallery::store::{now_ms, Change, Identity, Operation, Record};

/// The id of `identity` in `embedders`, added if new.
pub(super) fn embedder_id(conn: &Connection, identity: &Identity) -> Result<i64> {
    let key = params![
        identity.engine,
        identity.metric,
        identity.dim as i64,
        identity.model_hash
    ];
    conn.execute(
        "INSERT OR IGNORE INTO embedders (engine, metric, dim, model_hash) VALUES (?1, ?2, ?3, ?4)",
        key,
    )
    .map_err(sql_error)?;
    conn.query_row(
        "SELECT id FROM embedders WHERE engine = ?1 AND metric = ?2 AND dim = ?3 AND model_hash = ?4",
        key,
        |row| row.get(0),
    )
    .map_err(sql_error)
}

/// Record `change` (inside the caller's transaction).
pub(super) fn record(conn: &Connection, change: &Change) -> Result<()> {
    conn.execute(
        "INSERT INTO changes (at_ms, operation, name, count, key_label) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            now_ms(),
            change.operation.as_str(),
            change.name,
            change.count as i64,
            change.by
        ],
    )
    .map_err(sql_error)?;
    Ok(())
}

/// The newest `limit` records, newest first.
pub(super) fn records(conn: &Connection, limit: usize) -> Result<Vec<Record>> {
    let mut stmt = conn
        .prepare(
            "SELECT id, at_ms, operation, name, count, key_label FROM changes \
             ORDER BY id DESC LIMIT ?1",
        )
        .map_err(sql_error)?;
    let rows = stmt
        .query_map([limit as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, Option<String>>(5)?,
            ))
        })
        .map_err(sql_error)?;
    let mut out = Vec::new();
    for row in rows {
        let (number, at_ms, operation, name, count, by) = row.map_err(sql_error)?;
        let operation = Operation::parse(&operation).ok_or_else(|| {
            Error::unavailable(format!(
                "gallery store: change {number}: unknown {operation:?}"
            ))
        })?;
        out.push(Record {
            number,
            at_ms,
            change: Change {
                operation,
                name,
                count: count.max(0) as usize,
                by,
            },
        });
    }
    Ok(out)
}

/// The next change number, taken by the caller's write transaction (it
/// holds SQLite's write lock: numbers follow commit order).
pub(super) fn next_change(conn: &Connection) -> Result<i64> {
    conn.query_row(
        "UPDATE last_change SET value = value + 1 RETURNING value",
        [],
        |r| r.get(0),
    )
    .map_err(sql_error)
}

/// The last change number committed (in the caller's snapshot).
pub(super) fn last_change(conn: &Connection) -> Result<i64> {
    conn.query_row("SELECT value FROM last_change", [], |r| r.get(0))
        .map_err(sql_error)
}

/// Insert one enrollment of `change` (inside the caller's transaction); its id.
pub(super) fn insert(
    conn: &Connection,
    embedder: i64,
    name: &str,
    blob: &[u8],
    change: i64,
) -> Result<i64> {
    conn.execute(
        "INSERT INTO enrollments (embedder, name, embedding, enrolled_at_ms, change) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
        params![embedder, name, blob, now_ms(), change],
    )
    .map_err(sql_error)?;
    Ok(conn.last_insert_rowid())
}
