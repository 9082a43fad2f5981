//! `retention_days` on PostgreSQL: one change that removes every enrollment
//! (of every embedder) below a change-number bound, so that followers apply
//! it as they apply a FORGET (`removals.before_change`).
//!
//! The bound is the oldest change still inside the retention, not a time:
//! followers know rows by change number, and change numbers follow commit
//! order while `enrolled_at` is each transaction's start. A row whose
//! transaction started before an older-stamped one committed waits for the
//! next pass (milliseconds late, never early).

use std::collections::BTreeMap;
use std::time::Duration;

use ::postgres::Transaction;

use super::read::Scope;
use super::write_record;
use crate::gallery::store::{Change, Expired, Operation, Stamp};

/// Inside change number `change`: expire what was enrolled longer than
/// `kept` ago, by the database's clock (the one `enrolled_at` was stamped
/// with). What went, and whether anything did.
pub fn expire(
    tx: &mut Transaction<'_>,
    scope: Scope,
    kept: Duration,
    change: i64,
) -> Result<(Expired, bool), ::postgres::Error> {
    let bound: i64 = tx
        .query_one(
            "SELECT coalesce((SELECT change FROM triton_face.enrollments WHERE gallery = $1 \
             AND enrolled_at >= now() - make_interval(secs => $2) ORDER BY change LIMIT 1), $3)",
            &[&scope.gallery, &kept.as_secs_f64(), &change],
        )?
        .get(0);
    let rows = tx.query(
        "DELETE FROM triton_face.enrollments WHERE gallery = $1 AND change < $2 \
         RETURNING id, embedder, name, change",
        &[&scope.gallery, &bound],
    )?;
    let mut per_name: BTreeMap<String, usize> = BTreeMap::new();
    for row in &rows {
        *per_name.entry(row.get(2)).or_default() += 1;
    }
    for (name, count) in per_name {
        tx.execute(
            "INSERT INTO triton_face.removals (gallery, name, change, removed, before_change) \
             VALUES ($1, $2, $3, $4, $5)",
            &[&scope.gallery, &name, &change, &(count as i32), &bound],
        )?;
        let record = Change {
            operation: Operation::Expire,
            name,
            count,
            by: None,
        };
        write_record(tx, scope.gallery, change, &record)?;
    }
    let ours = rows
        .iter()
        .filter(|row| row.get::<_, i64>(1) == scope.embedder)
        .map(|row| Stamp {
            id: row.get(0),
            change: row.get(3),
        })
        .collect();
    let expired = Expired {
        ours,
        rows: rows.len(),
    };
    Ok((expired, !rows.is_empty()))
}
