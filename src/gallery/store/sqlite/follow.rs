//! Following the other models on one SQLite folder (in this server or in
//! another process): the change counter is read every `gallery_poll_ms`
//! (one row, microseconds), and what came after this model's last change is
//! read from one snapshot, as a PostgreSQL follower does.

use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::rows::last_change;
use super::schema::sql_error;
use super::{connect, Reading};
use crate::error::Result;
use crate::gallery::store::{Changes, Follower, Removal};

pub(super) struct SqliteFollower {
    reading: Reading,
    poll: Duration,
    /// Opened at the first read, again after an error.
    conn: Option<Connection>,
    checked: Option<Instant>,
}

impl SqliteFollower {
    pub fn new(reading: Reading, poll: Duration) -> Self {
        SqliteFollower {
            reading,
            poll,
            conn: None,
            checked: None,
        }
    }

    /// What changed after `since`, if anything, from one snapshot.
    fn read(&mut self, since: i64) -> Result<Option<Changes>> {
        if self.conn.is_none() {
            self.conn = Some(connect(&self.reading.path)?);
        }
        let conn = self.conn.as_ref().expect("connected above");
        let upto = last_change(conn)?;
        if upto <= since {
            return Ok(None);
        }
        let tx = conn.unchecked_transaction().map_err(sql_error)?;
        let upto = last_change(&tx)?;
        let removed = removals(&tx, since)?;
        let enrolled = self.reading.rows(&tx, Some(("change > ?2", since)))?;
        drop(tx); // read only
        Ok(Some(Changes {
            upto,
            enrolled,
            removed,
        }))
    }
}

/// Every removal after change `since`, in order.
fn removals(conn: &Connection, since: i64) -> Result<Vec<Removal>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT name, before_change FROM removals WHERE change > ?1 ORDER BY change",
        )
        .map_err(sql_error)?;
    let rows = stmt
        .query_map([since], |r| {
            Ok(Removal {
                name: r.get(0)?,
                before: r.get(1)?,
            })
        })
        .map_err(sql_error)?;
    rows.collect::<rusqlite::Result<_>>().map_err(sql_error)
}

impl Follower for SqliteFollower {
    fn next(&mut self, since: i64, wait: Duration) -> Result<Option<Changes>> {
        let until = Instant::now() + wait;
        loop {
            let due = match self.checked {
                Some(at) => self.poll.saturating_sub(at.elapsed()),
                None => Duration::ZERO,
            };
            if due.is_zero() {
                self.checked = Some(Instant::now());
                let read = self.read(since);
                if read.is_err() {
                    self.conn = None; // opened again at the next try
                }
                if let Some(changes) = read? {
                    return Ok(Some(changes));
                }
                continue;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            std::thread::sleep(due.min(left));
        }
    }

    fn describe(&self) -> String {
        format!("sqlite {}", self.reading.path.display())
    }
}
