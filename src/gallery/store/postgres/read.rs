//! Reading a gallery from one consistent snapshot (REPEATABLE READ): all of
//! it at load, or what changed after a change number when following. Since
//! change numbers follow commit order, the snapshot holds exactly the changes
//! up to its gallery row's `last_change`.

use ::postgres::{Client, IsolationLevel, Row, Transaction};

use super::super::{
    from_blob, Change, Changes, Operation, Record, Removal, Row as StoreRow, Stamp, Stored,
};

/// Which rows: one gallery, one embedder's enrollments.
#[derive(Clone, Copy, Debug)]
pub struct Scope {
    pub gallery: i64,
    pub embedder: i64,
    pub dim: usize,
}

/// A read failed: the database's error, or a row that is not an embedding.
pub enum ReadError {
    Db(::postgres::Error),
    BadRow(String),
}

impl From<::postgres::Error> for ReadError {
    fn from(e: ::postgres::Error) -> Self {
        ReadError::Db(e)
    }
}

pub fn snapshot(client: &mut Client) -> Result<Transaction<'_>, ::postgres::Error> {
    client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
}

/// The gallery's last change number in this snapshot.
pub fn last_change(tx: &mut Transaction<'_>, scope: Scope) -> Result<i64, ReadError> {
    let row = tx.query_one(
        "SELECT last_change FROM triton_face.galleries WHERE id = $1",
        &[&scope.gallery],
    )?;
    Ok(row.get(0))
}

/// This embedder's enrollments with a change number above `after`, oldest
/// first.
pub fn enrollments(
    tx: &mut Transaction<'_>,
    scope: Scope,
    after: i64,
) -> Result<Vec<Stored>, ReadError> {
    tx.query(
        "SELECT id, change, name, embedding FROM triton_face.enrollments \
         WHERE gallery = $1 AND embedder = $2 AND change > $3 ORDER BY change, id",
        &[&scope.gallery, &scope.embedder, &after],
    )?
    .iter()
    .map(|row| stored(row, scope.dim))
    .collect()
}

/// This embedder's enrollments without their embeddings, oldest first.
pub fn rows(tx: &mut Transaction<'_>, scope: Scope) -> Result<Vec<StoreRow>, ReadError> {
    let rows = tx.query(
        "SELECT id, change, name FROM triton_face.enrollments \
         WHERE gallery = $1 AND embedder = $2 ORDER BY change, id",
        &[&scope.gallery, &scope.embedder],
    )?;
    Ok(rows
        .iter()
        .map(|row| StoreRow {
            stamp: Stamp {
                id: row.get(0),
                change: row.get(1),
            },
            name: row.get(2),
        })
        .collect())
}

/// This embedder's enrollments with these ids (those still there).
pub fn by_ids(
    tx: &mut Transaction<'_>,
    scope: Scope,
    ids: &[i64],
) -> Result<Vec<Stored>, ReadError> {
    tx.query(
        "SELECT id, change, name, embedding FROM triton_face.enrollments \
         WHERE gallery = $1 AND embedder = $2 AND id = ANY($3) ORDER BY change, id",
        &[&scope.gallery, &scope.embedder, &ids],
    )?
    .iter()
    .map(|row| stored(row, scope.dim))
    .collect()
}

fn stored(row: &Row, dim: usize) -> Result<Stored, ReadError> {
    let (id, change, name): (i64, i64, String) = (row.get(0), row.get(1), row.get(2));
    let blob: &[u8] = row.get(3);
    let embedding = from_blob(blob, dim).ok_or_else(|| {
        ReadError::BadRow(format!(
            "enrollment {id} ({name:?}) has {} bytes, not {dim} floats",
            blob.len()
        ))
    })?;
    Ok(Stored {
        stamp: Stamp { id, change },
        name,
        embedding,
    })
}

/// Rows of the gallery made by other embedders: kept, never matched.
pub fn foreign(tx: &mut Transaction<'_>, scope: Scope) -> Result<usize, ReadError> {
    let row = tx.query_one(
        "SELECT count(*) FROM triton_face.enrollments WHERE gallery = $1 AND embedder <> $2",
        &[&scope.gallery, &scope.embedder],
    )?;
    Ok(row.get::<_, i64>(0) as usize)
}

/// Everything that changed after `after` (the caller's snapshot).
pub fn changes(tx: &mut Transaction<'_>, scope: Scope, after: i64) -> Result<Changes, ReadError> {
    let upto = last_change(tx, scope)?;
    if upto <= after {
        return Ok(Changes {
            upto: after,
            ..Changes::default()
        });
    }
    let removed = tx
        .query(
            "SELECT name, coalesce(before_change, change) FROM triton_face.removals \
             WHERE gallery = $1 AND change > $2 ORDER BY change",
            &[&scope.gallery, &after],
        )?
        .iter()
        .map(|row| Removal {
            name: row.get(0),
            before: row.get(1),
        })
        .collect();
    Ok(Changes {
        upto,
        enrolled: enrollments(tx, scope, after)?,
        removed,
    })
}

/// The gallery's newest `limit` recorded changes, newest first.
pub fn records(
    tx: &mut Transaction<'_>,
    scope: Scope,
    limit: usize,
) -> Result<Vec<Record>, ReadError> {
    let rows = tx.query(
        "SELECT change, (extract(epoch FROM at) * 1000)::bigint, operation, name, count, \
         key_label FROM triton_face.changes WHERE gallery = $1 ORDER BY id DESC LIMIT $2",
        &[&scope.gallery, &(limit as i64)],
    )?;
    rows.iter()
        .map(|row| {
            let operation: String = row.get(2);
            let operation = Operation::parse(&operation).ok_or_else(|| {
                ReadError::BadRow(format!("a change with the operation {operation:?}"))
            })?;
            Ok(Record {
                number: row.get(0),
                at_ms: row.get(1),
                change: Change {
                    operation,
                    name: row.get(3),
                    count: row.get::<_, i32>(4).max(0) as usize,
                    by: row.get(5),
                },
            })
        })
        .collect()
}
