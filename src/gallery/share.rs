//! Work shared with helper threads that may start late. In the server a
//! thread started per scan is slow and unsteady to start (docs/benchmarks.md,
//! "Gallery at scale": the scan's helpers), so the helpers are kept between
//! scans, woken by a channel, and the caller
//! never waits for one to start: the work is claimed piece by piece from a
//! shared counter, and a helper that has not started when the caller runs
//! out of pieces is told not to.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Threads of this process at work on a request now (`Busy`).
static BUSY: AtomicUsize = AtomicUsize::new(0);

/// A thread at work on a request (an image's analysis, a search), counted
/// while held: work that would take another core only to save time waits
/// for `spare_core`.
pub struct Busy(());

impl Busy {
    pub fn enter() -> Busy {
        BUSY.fetch_add(1, Ordering::Relaxed);
        Busy(())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether a core is free of requests: no other thread is `Busy` than the
/// caller (which holds one) and the machine has more than one core. Work
/// begun on a guess (the second look's scan beside the first look) takes
/// only such a core: under load it would take one another request needs.
pub fn spare_core() -> bool {
    cores() > 1 && BUSY.load(Ordering::Relaxed) <= 1
}

/// The cores this process may use, counted once: the standard library
/// reads the cgroup's quota files at every call.
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The helper threads, kept between scans: a kept one woken by a channel
/// starts sooner than a thread started per scan (docs/benchmarks.md).
/// Started as the first calls need them, never more than the most any call
/// asked for; stopped and joined by `join_helpers` (the backend's finalize:
/// their code is this library's, which the server may unload after it).
struct Pool {
    jobs: Sender<Job>,
    queue: Arc<Mutex<Receiver<Job>>>,
    threads: Vec<JoinHandle<()>>,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

fn pool() -> MutexGuard<'static, Option<Pool>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Hand `job` to a helper thread, at least `helpers` of them kept; Err when
/// none could be started. A job waits in the queue while every helper is
/// busy (its caller then does the work itself).
fn submit(job: Job, helpers: usize) -> Result<(), Job> {
    let mut guard = pool();
    let pool = guard.get_or_insert_with(|| {
        let (jobs, queue) = channel::<Job>();
        Pool {
            jobs,
            queue: Arc::new(Mutex::new(queue)),
            threads: Vec::new(),
        }
    });
    while pool.threads.len() < helpers {
        let queue = Arc::clone(&pool.queue);
        match std::thread::Builder::new().spawn(move || serve(&queue)) {
            Ok(thread) => pool.threads.push(thread),
            Err(_) => break,
        }
    }
    if pool.threads.is_empty() {
        return Err(job);
    }
    pool.jobs.send(job).map_err(|e| e.0)
}

/// A helper thread: jobs until the pool is stopped.
fn serve(queue: &Mutex<Receiver<Job>>) {
    loop {
        let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

/// Stop the helper threads and join them (they end within milliseconds:
/// none runs `work` once `with_helpers` has returned); a later call that
/// needs them starts them again.
pub fn join_helpers() {
    let Some(old) = pool().take() else {
        return;
    };
    drop(old.jobs);
    for thread in old.threads {
        let _ = thread.join();
    }
}

/// `work` as a helper holds it: a pointer, made a reference only while the
/// helper's state is Running (a reference kept past the borrow would dangle
/// even unused).
struct Work<T>(*const (dyn Fn() -> T + Sync + 'static));

// SAFETY: the pointee is Sync (callable from any thread); `with_helpers`
// keeps it alive while any helper may call it.
unsafe impl<T: Send> Send for Work<T> {}

impl<T> Work<T> {
    /// SAFETY: only while the pointee is alive (the helper is Running).
    unsafe fn call(&self) -> T {
        // SAFETY: the caller's promise.
        unsafe { (*self.0)() }
    }
}

enum State<T> {
    /// Spawned, not running yet.
    Waiting,
    Running,
    Done(Result<T, String>),
    /// Told not to start, or its result taken.
    Settled,
}

struct Helper<T> {
    state: Mutex<State<T>>,
    changed: Condvar,
}

impl<T> Helper<T> {
    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its result if it ran; None if it had not started (and now never will).
    fn settle(&self) -> Option<Result<T, String>> {
        let mut state = self.state();
        while matches!(*state, State::Running) {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        match std::mem::replace(&mut *state, State::Settled) {
            State::Done(result) => Some(result),
            _ => None,
        }
    }
}

/// Every helper settled before `with_helpers` returns, also when it unwinds.
struct SettleAll<'a, T>(&'a [Arc<Helper<T>>]);

impl<T> Drop for SettleAll<'_, T> {
    fn drop(&mut self) {
        for helper in self.0 {
            helper.settle();
        }
    }
}

/// `work` on this thread and on up to `helpers` helper threads, each
/// call's result in the list (this thread's first). `work` must claim what
/// it does from state it shares (an atomic counter of pieces), so that a
/// call that finds nothing left returns at once: a helper that has not
/// started by the time this thread's call returns never calls it.
pub fn with_helpers<T: Send + 'static>(
    helpers: usize,
    work: &(dyn Fn() -> T + Sync),
) -> Vec<Result<T, String>> {
    let (mine, theirs) = beside(helpers, work, work);
    std::iter::once(Ok(mine)).chain(theirs).collect()
}

/// `work` on up to `helpers` helper threads while this thread runs `here`
/// (which may call `work` too, or tell it through the state they share to
/// stop): `here`'s result, and each helper's that ran. A helper that has
/// not started when `here` returns never calls `work`.
pub fn beside<T: Send + 'static, R>(
    helpers: usize,
    work: &(dyn Fn() -> T + Sync),
    here: impl FnOnce() -> R,
) -> (R, Vec<Result<T, String>>) {
    // SAFETY: only the lifetime changes. A helper calls `work` only after it
    // moved its state from Waiting to Running, and `SettleAll` (on return and
    // on unwinding) moves every state out of Waiting, or waits for Running
    // to end, before this function returns: no call outlives the borrow.
    let shared = unsafe {
        std::mem::transmute::<
            *const (dyn Fn() -> T + Sync + '_),
            *const (dyn Fn() -> T + Sync + 'static),
        >(work)
    };
    let all: Vec<Arc<Helper<T>>> = (0..helpers)
        .map(|_| {
            Arc::new(Helper {
                state: Mutex::new(State::Waiting),
                changed: Condvar::new(),
            })
        })
        .collect();
    let settle_all = SettleAll(&all);
    for helper in &all {
        let (mine, work) = (Arc::clone(helper), Work(shared));
        let started = submit(
            Box::new(move || {
                let work = work;
                {
                    let mut state = mine.state();
                    if !matches!(*state, State::Waiting) {
                        return;
                    }
                    *state = State::Running;
                }
                // SAFETY: Running: `with_helpers` has not returned, and will not
                // before this state changes.
                let result = catch_unwind(AssertUnwindSafe(|| unsafe { work.call() }))
                    .map_err(|_| "a helper thread panicked".to_string());
                *mine.state() = State::Done(result);
                mine.changed.notify_all();
            }),
            helpers,
        );
        if started.is_err() {
            *helper.state() = State::Settled;
        }
    }
    let mine = here();
    let theirs = all.iter().filter_map(|helper| helper.settle()).collect();
    drop(settle_all);
    (mine, theirs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn pieces_are_shared_and_each_done_once() {
        let next = AtomicUsize::new(0);
        let work = || {
            let mut mine = Vec::new();
            loop {
                let piece = next.fetch_add(1, Ordering::Relaxed);
                if piece >= 100 {
                    return mine;
                }
                std::thread::sleep(Duration::from_micros(200));
                mine.push(piece);
            }
        };
        let results = with_helpers(3, &work);
        let mut done: Vec<usize> = results.into_iter().flat_map(|r| r.unwrap()).collect();
        done.sort_unstable();
        assert_eq!(done, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn a_helper_that_panics_is_an_error() {
        let caller = std::thread::current().id();
        let helper_started = AtomicBool::new(false);
        let work = || {
            if std::thread::current().id() != caller {
                helper_started.store(true, Ordering::SeqCst);
                panic!("a helper's work");
            }
            // The caller returns only once the helper runs (or after 10 s,
            // when the asserts below fail).
            let waited = std::time::Instant::now();
            while !helper_started.load(Ordering::SeqCst) && waited.elapsed().as_secs() < 10 {
                std::thread::sleep(Duration::from_millis(1));
            }
            0
        };
        let results = with_helpers(1, &work);
        assert_eq!(results[0], Ok(0));
        assert_eq!(results.len(), 2, "the helper never ran");
        assert!(results[1].is_err());
    }
}
