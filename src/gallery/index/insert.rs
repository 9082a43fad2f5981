//! Vectors in and out: one at a time while serving (each checked as a
//! stray), many at once on every core at a load.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::strays::{add_stray, links_back, MAX_STRAYS, NEVER_COUNTED};
use super::{failed, split, threads, Graph, VectorIndex, FIRST_CAPACITY};
use crate::error::Result;

/// How often a bulk insertion reports its progress.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl VectorIndex {
    /// Add `vector` under `key`; `false` when the key is there already.
    pub fn insert(&self, key: u64, vector: &[f32]) -> Result<bool> {
        self.check(vector)?;
        let mut index = self.write();
        if index.contains(key) {
            return Ok(false);
        }
        if index.size() + 1 > index.capacity() {
            let grown = (index.capacity() * 2).max(FIRST_CAPACITY);
            index
                .reserve_capacity_and_threads(grown, threads())
                .map_err(|e| failed("grow", e))?;
        }
        let (mut coarse, mut fine) = split::buffers(self.dim);
        index.add(key, vector, &mut coarse, &mut fine)?;
        self.changed(1);
        if let Some(f) = index.fine.as_mut() {
            f.put(key, &coarse, &fine);
        }
        self.lower_apart(&index, key);
        if index.size() > self.exact_up_to && self.is_stray(&index, key, links_back(&index, key)) {
            let mut strays = self.strays_mut();
            if strays.len() < MAX_STRAYS {
                // The vector is in: a failure here costs a scan, not it.
                if let Err(e) = add_stray(&mut strays, &index, key, self.dim) {
                    log::warn!("{key} not kept as a stray: {e}");
                }
            }
        }
        Ok(true)
    }

    /// Add many vectors at once, on every core, before anyone searches (a
    /// load): usearch's own concurrent insertion, under one write lock. Keys
    /// present already are passed over. `progress(done, total)` is called
    /// from this thread about every PROGRESS_EVERY while the cores work (a
    /// million take half an hour on 2 cores). How many were added.
    pub fn insert_all(
        &self,
        items: &[(u64, &[f32])],
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<usize> {
        items.iter().try_for_each(|(_, v)| self.check(v))?;
        let mut index = self.write();
        let wanted = index.size() + items.len();
        if wanted > index.capacity() {
            index
                .reserve_capacity_and_threads(wanted, threads())
                .map_err(|e| failed("grow", e))?;
        }
        let mut seen = std::collections::HashSet::with_capacity(items.len());
        let fresh: Vec<(u64, &[f32])> = items
            .iter()
            .filter(|(k, _)| !index.contains(*k) && seen.insert(*k))
            .copied()
            .collect();
        let dim = self.dim;
        if let Some(fine) = index.fine.as_mut() {
            let (mut coarse, mut bytes) = split::buffers(dim);
            for (key, vector) in &fresh {
                split::split(vector, &mut coarse, &mut bytes);
                fine.put(*key, &coarse, &bytes);
            }
        }
        self.changed(fresh.len() as u64);
        self.strays
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .forget_apart();
        let cores = crate::gallery::share::cores();
        let chunk = fresh.len().div_ceil(cores).max(1);
        let index = &*index;
        let done = AtomicUsize::new(0);
        let caller = std::thread::current();
        let added: Result<Vec<usize>> = std::thread::scope(|scope| {
            let workers: Vec<_> = fresh
                .chunks(chunk)
                .map(|part| {
                    let (done, caller) = (&done, caller.clone());
                    scope.spawn(move || {
                        let added = insert_part(index, part, dim, done);
                        caller.unpark(); // the last one ends the wait at once
                        added
                    })
                })
                .collect();
            while !workers.iter().all(|w| w.is_finished()) {
                std::thread::park_timeout(PROGRESS_EVERY);
                progress(done.load(Ordering::Relaxed), fresh.len());
            }
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|_| Err(failed("insert", "a thread panicked")))
                })
                .collect()
        });
        Ok(added?.into_iter().sum())
    }

    pub fn contains(&self, key: u64) -> bool {
        self.read().contains(key)
    }

    /// Remove `key`'s vector (nothing when it is not there).
    pub fn remove(&self, key: u64) -> Result<()> {
        let mut index = self.write();
        index.remove(key).map_err(|e| failed("remove", e))?;
        if let Some(fine) = index.fine.as_mut() {
            fine.remove(key);
        }
        // The vector is out: a stray copy left behind is never named (the
        // re-rank reads the graph), only scanned.
        if let Err(e) = self.strays_mut().remove(key) {
            log::warn!("{key} left among the strays: {e}");
        }
        self.changed(1);
        Ok(())
    }

    /// `n` more vectors went in or out since the strays were counted.
    fn changed(&self, n: u64) {
        let add = |c: u64| {
            Some(if c == NEVER_COUNTED {
                c
            } else {
                c.saturating_add(n)
            })
        };
        let _ = self
            .changed_since_count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, add);
    }
}

fn insert_part(
    index: &Graph,
    part: &[(u64, &[f32])],
    dim: usize,
    done: &AtomicUsize,
) -> Result<usize> {
    let (mut coarse, mut fine) = split::buffers(dim);
    for &(key, vector) in part {
        index.add(key, vector, &mut coarse, &mut fine)?;
        done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(part.len())
}
