//! Rows written both by the store and by the legacy import.

use rusqlite::{params, Connection};

use super::schema::sql_error;
use crate::error::Result;
use crate::gallery::store::{now_ms, Identity};

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

/// Insert one enrollment (inside the caller's transaction); its id.
pub(super) fn insert(conn: &Connection, embedder: i64, name: &str, blob: &[u8]) -> Result<i64> {
    conn.execute(
        "INSERT INTO enrollments (embedder, name, embedding, enrolled_at_ms) VALUES (?1, ?2, ?3, ?4)",
        params![embedder, name, blob, now_ms()],
    )
    .map_err(sql_error)?;
    Ok(conn.last_insert_rowid())
}
