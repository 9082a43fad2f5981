//! Erasure: once a person is forgotten (here, or by another server sharing
//! the store) or a gallery image is gone, no file the model writes keeps
//! their embeddings for long. A thread looks every second; when vectors were
//! removed since its last pass, it runs the gallery's erasure pass: the
//! store overwrites what the removed rows left (SQLite: zeroed pages, the
//! WAL checkpointed and truncated), and the saved index is written again
//! with removed slots zeroed (`wipe.rs`). FORGET does not wait for it, so
//! its cost stays a transaction's; a failed pass is tried again each second.
//! A pass waits for a second without removals (at most `AT_MOST` after the
//! first): a burst of FORGETs is erased once, and the WAL, truncated by a
//! pass, does not grow again under every commit of the burst.
//! Stopping runs a pending pass before the thread ends, and a server killed
//! before it ran leaves the next load to do it (`Gallery::open`).
//!
//! With `retention_days`, the same thread expires old enrollments now and
//! then (`Expiry`, handed to the running thread: its mark of what is erased
//! stays); what expires is erased by the next pass. The mark moves only
//! when a pass succeeds.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::live::Live;
use crate::error::Result;

/// How often the thread looks for removals.
const EVERY: Duration = Duration::from_secs(1);
/// The longest a removal waits for its erasure while others keep coming.
const AT_MOST: Duration = Duration::from_secs(20);

/// Old enrollments forgotten on their own: `run` every `every`, the count
/// it removed.
pub struct Expiry {
    pub every: Duration,
    pub run: Box<dyn FnMut() -> Result<usize> + Send>,
}

/// The running thread: dropping it stops it (after a pending pass).
pub struct Eraser {
    /// Expiries for the thread; dropped, it stops the thread.
    stop: Option<mpsc::Sender<Expiry>>,
    thread: Option<JoinHandle<()>>,
}

impl Eraser {
    /// Run `pass` once `live`'s removals paused for a second, and `expiry`
    /// as often as it says.
    pub fn start(
        live: Arc<Live>,
        mut pass: impl FnMut() -> Result<()> + Send + 'static,
        mut expiry: Option<Expiry>,
    ) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<Expiry>();
        // Read now, not in the thread: a removal between the two (an expiry
        // at load) is then the thread's to erase.
        let mut due = Due::new(live.removals());
        let thread = thread::Builder::new()
            .name("gallery-erase".into())
            .spawn(move || {
                let mut next_expiry = Instant::now();
                loop {
                    if let Some(e) = expiry.as_mut().filter(|_| Instant::now() >= next_expiry) {
                        expire(&mut e.run);
                        next_expiry = Instant::now() + e.every;
                    }
                    let last = match stopped.recv_timeout(EVERY) {
                        Ok(e) => {
                            // Its first run was the load's.
                            next_expiry = Instant::now() + e.every;
                            expiry = Some(e);
                            false
                        }
                        Err(RecvTimeoutError::Timeout) => false,
                        Err(RecvTimeoutError::Disconnected) => true,
                    };
                    if let Some(removals) = due.check(live.removals(), last) {
                        due.ran(removals, run(&mut pass), last);
                    }
                    if last {
                        return;
                    }
                }
            })?;
        Ok(Eraser {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Eraser {
    /// Expire with `expiry` from now on (in place of the one it had).
    pub fn expire(&self, expiry: Expiry) {
        if let Some(stop) = &self.stop {
            let _ = stop.send(expiry); // a thread gone has nothing left to expire
        }
    }
}

/// When a pass is due: removals not erased yet, and none for a second (or
/// `AT_MOST` since the first, or the thread stopping).
struct Due {
    erased: u64,
    seen: u64,
    since: Option<Instant>,
    failing: bool,
}

impl Due {
    fn new(removals: u64) -> Self {
        Due {
            erased: removals,
            seen: removals,
            since: None,
            failing: false,
        }
    }

    /// The removals a pass now would erase, if one is due.
    fn check(&mut self, removals: u64, last: bool) -> Option<u64> {
        let quiet = removals == self.seen;
        self.seen = removals;
        if removals == self.erased {
            self.since = None;
            return None;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        (quiet || last || since.elapsed() >= AT_MOST).then_some(removals)
    }

    /// A failed pass is tried again at the next look, and said once.
    fn ran(&mut self, removals: u64, done: std::result::Result<(), String>, last: bool) {
        match done {
            Ok(()) => (self.erased, self.since, self.failing) = (removals, None, false),
            Err(why) if !self.failing || last => {
                log::warn!("gallery: erasure not done yet, tried again each second: {why}");
                self.failing = true;
            }
            Err(_) => {}
        }
    }
}

fn expire(expiry: &mut Box<dyn FnMut() -> Result<usize> + Send>) {
    match run(expiry) {
        Ok(0) => {}
        Ok(n) => log::info!("gallery: {n} enrollments older than retention_days expired"),
        Err(why) => log::warn!("gallery: expiry failed: {why}"),
    }
}

/// One pass or expiry; a panic is an error like any other (the thread goes on).
fn run<T>(work: &mut impl FnMut() -> Result<T>) -> std::result::Result<T, String> {
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.message().to_string()),
        Err(_) => Err("it panicked".into()),
    }
}

impl Drop for Eraser {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Due;

    #[test]
    fn a_pass_waits_for_a_quiet_second_and_retries_until_done() {
        let mut due = Due::new(0);
        assert_eq!(due.check(0, false), None, "nothing removed");
        assert_eq!(due.check(3, false), None, "removals still coming");
        assert_eq!(due.check(5, false), None);
        assert_eq!(due.check(5, false), Some(5), "a quiet second");
        due.ran(5, Err("busy".into()), false);
        assert_eq!(due.check(5, false), Some(5), "tried again");
        due.ran(5, Ok(()), false);
        assert_eq!(due.check(5, false), None, "erased");
        assert_eq!(due.check(6, true), Some(6), "stopping: at once");
    }
}
