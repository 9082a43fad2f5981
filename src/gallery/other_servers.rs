//! The gallery's follower thread: applies the changes other models and
//! servers make to its store, until the gallery is dropped (model unload), which stops
//! and joins it: no thread of ours outlives the model, so the library can be
//! unloaded safely.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::live::Live;
use super::store::Follower;

/// How long one wait for news lasts: what a model unload waits for this
/// thread, unless a connect attempt is under way (then up to its timeout).
const SLICE: Duration = Duration::from_millis(200);
/// Reconnects back off from the first to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));

pub(super) struct Following {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Following {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join(); // a panic inside was caught and logged there
        }
    }
}

struct Loop {
    follower: Box<dyn Follower>,
    live: Arc<Live>,
    max_size: usize,
    seen: i64,
    stop: Arc<AtomicBool>,
    /// Since when the store is out of reach (logged once per outage).
    outage: Option<String>,
}

/// Start following from change `seen`.
pub(super) fn start(
    follower: Box<dyn Follower>,
    live: Arc<Live>,
    max_size: usize,
    seen: i64,
) -> std::io::Result<Following> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut lp = Loop {
        follower,
        live,
        max_size,
        seen,
        stop: stop.clone(),
        outage: None,
    };
    let thread = std::thread::Builder::new()
        .name("face-gallery".into())
        .spawn(move || lp.run())?;
    Ok(Following {
        stop,
        thread: Some(thread),
    })
}

impl Loop {
    fn run(&mut self) {
        let mut backoff = BACKOFF.0;
        while !self.stopped() {
            let step = catch_unwind(AssertUnwindSafe(|| {
                match self.follower.next(self.seen, SLICE)? {
                    Some(changes) => self.apply(changes),
                    None => Ok(()),
                }
            }));
            let failure = match step {
                Ok(Ok(())) => {
                    backoff = BACKOFF.0;
                    continue;
                }
                Ok(Err(e)) => e.message().to_string(),
                Err(_) => "the follower panicked".to_string(),
            };
            self.lost(failure);
            self.sleep(backoff);
            backoff = (backoff * 2).min(BACKOFF.1);
        }
    }

    /// Apply what other servers changed. On an error the same changes are
    /// read again from `seen` later: what was applied is not applied twice.
    fn apply(&mut self, changes: super::store::Changes) -> crate::error::Result<()> {
        let upto = changes.upto;
        let applied = self.live.apply(changes, self.max_size)?;
        self.seen = self.seen.max(upto);
        if let Some(since) = self.outage.take() {
            log::info!(
                "gallery {}: back (out of reach since: {since}); caught up to change {upto}",
                self.follower.describe()
            );
        }
        if applied.refused > 0 {
            log::warn!(
                "gallery {}: {} enrollments by other servers left out: max_gallery_size = {} \
                 reached on this server",
                self.follower.describe(),
                applied.refused,
                self.max_size
            );
        }
        Ok(())
    }

    fn lost(&mut self, why: String) {
        if self.outage.is_none() {
            log::warn!(
                "gallery {}: out of reach, serving from memory and retrying: {why}",
                self.follower.describe()
            );
            self.outage = Some(why);
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleep `d`, waking early when stopped.
    fn sleep(&self, d: Duration) {
        let until = std::time::Instant::now() + d;
        while !self.stopped() {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
}
