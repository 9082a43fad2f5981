//! Following the changes other servers make: a session of its own that
//! LISTENs on the gallery channel, and reads what changed after the last
//! change number seen: on a notification, right after every (re)connect,
//! and at least every `poll`.

use std::time::{Duration, Instant};

use ::postgres::fallible_iterator::FallibleIterator;
use ::postgres::Client;

use super::read::{self, ReadError, Scope};
use super::target::{why, Target};
use super::{db_error, read_error, CHANNEL};
use crate::error::{Error, Result};
use crate::gallery::store::{Changes, Follower};

pub struct PgFollower {
    target: Target,
    /// `None` until connected, and again after the session broke.
    client: Option<Client>,
    scope: Scope,
    poll: Duration,
    last_read: Instant,
    label: String,
}

impl PgFollower {
    pub fn new(target: Target, scope: Scope, poll: Duration, label: String) -> Self {
        PgFollower {
            target,
            client: None,
            scope,
            poll,
            last_read: Instant::now(),
            label,
        }
    }

    fn step(&mut self, since: i64, wait: Duration) -> Result<Option<Changes>> {
        let Some(client) = self.client.as_mut() else {
            let mut client = self.target.connect().map_err(|e| self.db(e))?;
            client
                .batch_execute(&format!("LISTEN {CHANNEL}"))
                .map_err(|e| self.db(e))?;
            // Whatever happened while away was not notified: read it all.
            let changes = self.read(&mut client, since)?;
            self.client = Some(client);
            return Ok(Some(changes));
        };
        let due = self.poll.saturating_sub(self.last_read.elapsed());
        let notified = wait_for(client, self.scope.gallery, wait.min(due))?;
        if client.is_closed() {
            return Err(Error::unavailable(format!(
                "gallery store postgres {}: the listening session closed",
                self.target.shown()
            )));
        }
        if !notified && self.last_read.elapsed() < self.poll {
            return Ok(None);
        }
        let mut client = self.client.take().expect("checked above");
        let changes = self.read(&mut client, since);
        self.client = Some(client);
        let changes = changes?;
        Ok((changes.upto > since).then_some(changes))
    }

    fn read(&mut self, client: &mut Client, since: i64) -> Result<Changes> {
        let scope = self.scope;
        let changes = (|| {
            let mut tx = read::snapshot(client)?;
            let changes = read::changes(&mut tx, scope, since)?;
            tx.commit()?;
            Ok::<_, ReadError>(changes)
        })();
        self.last_read = Instant::now();
        changes.map_err(|e| read_error(self.target.shown(), e))
    }

    fn db(&self, e: ::postgres::Error) -> Error {
        db_error(self.target.shown(), e)
    }
}

/// Wait up to `wait` for a notification about `gallery`; then take every
/// other one already queued. Whether one was for this gallery.
fn wait_for(client: &mut Client, gallery: i64, wait: Duration) -> std::result::Result<bool, Error> {
    let ours = gallery.to_string();
    let mut notifications = client.notifications();
    let mut notified = false;
    let first = notifications.timeout_iter(wait).next();
    let mut queued = notifications.iter();
    let rest = std::iter::from_fn(|| queued.next().transpose());
    for n in first.transpose().into_iter().chain(rest) {
        let n = n.map_err(|e| Error::unavailable(format!("listening: {}", why(&e))))?;
        notified |= n.payload() == ours;
    }
    Ok(notified)
}

impl Follower for PgFollower {
    fn next(&mut self, since: i64, wait: Duration) -> Result<Option<Changes>> {
        let out = self.step(since, wait);
        if out.is_err() {
            self.client = None; // reconnect (and read everything) next time
        }
        out
    }

    fn describe(&self) -> String {
        self.label.clone()
    }
}
