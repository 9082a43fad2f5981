//! The strays of a graph (nodes no walk is sure to reach) and
//! a flat copy of their stored vectors, scanned at every graph search in one
//! SIMD pass of usearch's exact search: a thousand strays (a million people
//! hold about that many) cost tens of microseconds this way, where fetching
//! and restoring each from the graph took 3 ms (docs/benchmarks.md,
//! "Matching").

use std::collections::HashMap;
use std::sync::Mutex;

use usearch::{Index, IndexOptions, VectorType};

use crate::error::{Error, Result};

pub struct Strays {
    keys: Vec<u64>,
    flat: Index,
    /// Concurrent searches it takes (as many as the graph's).
    threads: usize,
    /// How far each stray is from every other entry, at least
    /// (`proof.rs`), measured the first time a query needed it (one exact
    /// scan, 80 ms at a million) and lowered as vectors arrive: a lower
    /// bound stays one when entries go.
    apart: Mutex<HashMap<u64, f32>>,
}

impl Strays {
    /// None yet; vectors as `options` store them (the graph's own), for
    /// up to `threads` searches at once. Only scanned: the graph usearch
    /// builds beside them is kept small.
    pub fn new(options: &IndexOptions, threads: usize) -> Result<Self> {
        let flat = Index::new(&IndexOptions {
            connectivity: 2,
            expansion_add: 2,
            ..options.clone()
        })
        .map_err(|e| failed("create", e))?;
        Ok(Strays {
            keys: Vec::new(),
            flat,
            threads,
            apart: Mutex::new(HashMap::new()),
        })
    }

    pub fn keys(&self) -> &[u64] {
        &self.keys
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn clear(&mut self) -> Result<()> {
        self.keys.clear();
        self.apart_mut().clear();
        self.flat.reset().map_err(|e| failed("clear", e))
    }

    /// Add `key`, stored as `vector` (the graph's stored form).
    pub fn add<T: VectorType>(&mut self, key: u64, vector: &[T]) -> Result<()> {
        if self.flat.contains(key) {
            return Ok(());
        }
        if self.flat.size() + 1 > self.flat.capacity() {
            let grown = (self.flat.capacity() * 2).max(64);
            // Room for as many searches as the graph takes: a search
            // beyond usearch's reserved threads fails.
            self.flat
                .reserve_capacity_and_threads(grown, self.threads)
                .map_err(|e| failed("grow", e))?;
        }
        self.flat.add(key, vector).map_err(|e| failed("add", e))?;
        self.keys.push(key);
        Ok(())
    }

    pub fn remove(&mut self, key: u64) -> Result<()> {
        self.apart_mut().remove(&key);
        if self.flat.contains(key) {
            self.flat.remove(key).map_err(|e| failed("remove", e))?;
            self.keys.retain(|&k| k != key);
        }
        Ok(())
    }

    /// How far `key` is from every other entry, at least, once measured.
    pub fn apart(&self, key: u64) -> Option<f32> {
        self.apart_mut().get(&key).copied()
    }

    /// Whether any stray was measured apart.
    pub fn any_apart(&self) -> bool {
        !self.apart_mut().is_empty()
    }

    pub fn set_apart(&self, key: u64, apart: f32) {
        self.apart_mut().insert(key, apart);
    }

    /// A vector arrived: each measured stray's bound falls to its distance
    /// to it (`distance` of the stray's key; `None`: measure it again).
    pub fn arrived(&self, mut distance: impl FnMut(u64) -> Option<f32>) {
        self.apart_mut().retain(|&key, apart| match distance(key) {
            Some(d) => {
                *apart = apart.min(d);
                true
            }
            None => false,
        });
    }

    /// Many vectors arrived: every bound is measured again when needed.
    pub fn forget_apart(&self) {
        self.apart_mut().clear();
    }

    fn apart_mut(&self) -> std::sync::MutexGuard<'_, HashMap<u64, f32>> {
        self.apart.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `count` strays nearest to `query` (in the stored form), by a scan.
    pub fn nearest<T: VectorType>(&self, query: &[T], count: usize) -> Result<Vec<u64>> {
        if self.keys.is_empty() {
            return Ok(Vec::new());
        }
        let found = self
            .flat
            .exact_search(query, count)
            .map_err(|e| failed("search", e))?;
        Ok(found.keys)
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::unavailable(format!("gallery strays: {what}: {e}"))
}
