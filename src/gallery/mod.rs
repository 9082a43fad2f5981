//! Known people: embeddings with names, shared by a model's instances. Two
//! sources: images in the gallery folder (embedded at model load, never
//! written) and run-time enrollments, kept in a `Store` (SQLite in the same
//! folder).
//!
//! Matching searches a vector index (`index/`) and names what it finds
//! (`live.rs`). A change (ENROLL, FORGET) takes the writer lock (the store's
//! mutex: one change at a time), decides against the current entries, writes
//! the store durably, and only then applies it in memory, one insertion at a
//! time: a slow disk never blocks recognition, and nothing is in memory (or
//! acknowledged) that is not on disk. A store other servers share also has a
//! follower thread (`other_servers.rs`) applying their changes.

mod entries;
mod erase;
pub mod folder;
mod huge_pages;
pub mod index;
mod live;
pub mod looks;
pub mod names;
mod other_servers;
mod progress;
mod saved;
mod share;
#[doc(hidden)] // public for benches/sign_scan.rs
pub mod signs;
mod split;
pub mod store;
mod wipe;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLockReadGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::metric::Metric;
use entries::Entries;
use erase::{Eraser, Expiry};
pub use folder::gallery_images;
pub use huge_pages::lock_refused as memory_lock_refused;
use index::VectorIndex;
pub use live::Candidate;
use live::Live;
pub use names::{validate_name, MAX_NAME_CHARS, RESERVED_NAMES};
use other_servers::Following;
pub use saved::index_file_name;
use saved::Saved;
pub use store::{Change, Named, Operation, Record};
use store::{Listed, Migrated, Row, Store, Stored};

/// The sign scan's helper threads stopped and joined: before the server
/// may unload this library (the backend's finalize).
pub use share::{join_helpers, Busy};

/// A re-enrollment this close to an existing embedding of the same name is
/// the same photo again and is not stored twice.
const DUPLICATE_DISTANCE: f32 = 0.01;

/// Requests may ask for at most this many nearest people per face.
pub const MAX_TOP_K: usize = 100;

/// The nearest known people for one embedding.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Match {
    /// The person, when within the threshold.
    pub name: Option<String>,
    /// Distance to the nearest entry; `None` for an empty gallery.
    pub distance: Option<f32>,
    /// The nearest people, one entry each, nearest first (as many as asked).
    pub candidates: Vec<Candidate>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Enrolled {
    pub name: String,
    pub added: bool,
    pub gallery_size: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Forgotten {
    pub name: String,
    pub removed: usize,
    pub gallery_size: usize,
    /// Gallery images of that name, still known (relative to the folder).
    pub folder_files: Vec<String>,
}

/// Where a person's embeddings come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Folder,
    Enrolled,
}

/// One row of LIST: a name, a source, and how many embeddings it has there.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Known {
    pub name: String,
    pub embeddings: usize,
    pub source: Source,
}

/// What opening the gallery found in its store.
#[derive(Debug)]
pub struct Opened {
    pub enrolled: usize,
    /// Rows of other embedders, ignored.
    pub foreign: usize,
    pub migrated: Option<Migrated>,
    pub store: String,
    /// Another server's changes are followed (a shared store).
    pub following: bool,
    pub index: Restored,
}

/// How the vector index was made at open.
#[derive(Debug, Default, PartialEq)]
pub struct Restored {
    /// Loaded from the saved file (else built from the store).
    pub from_file: bool,
    /// That file was first copied from the one published to the store.
    pub fetched: bool,
    /// Why a saved or published file was not used, when there was one.
    pub not_used: Option<String>,
    /// Vectors read from the store and inserted; stale ones removed.
    pub added: usize,
    pub removed: usize,
    /// Of those removed, the last load's gallery images (added again from
    /// the folder).
    pub images: usize,
    /// Of those removed, vectors of rows forgotten since the file was saved
    /// (it is written again at once: their erasure).
    pub forgotten: usize,
    /// Entries no graph search reaches, scanned at every search instead.
    pub strays: usize,
    /// Published to a shared store for servers that join later (its copy
    /// there was missing or out of date): the bytes, or why it was not.
    pub published: Option<std::result::Result<u64, String>>,
    pub took: Took,
}

/// How long each step of the open took, for its log line.
#[derive(Debug, Default, PartialEq)]
pub struct Took {
    /// The saved file read and checked against its manifest, the store listed.
    pub read: Duration,
    /// The file's keys against the store's rows: stale vectors removed,
    /// missing ones read from the store.
    pub checked: Duration,
    /// The missing vectors inserted, the names' tables filled.
    pub tables: Duration,
    /// The strays taken from the file's manifest, or counted.
    pub strays: Duration,
    pub strays_taken: bool,
}

/// A load that inserts or removes this many vectors saves the index at once.
const SAVE_AT_OPEN: usize = 10_000;
/// `saved_at` of an index never saved.
const NEVER: u64 = u64::MAX;

/// One request's faces to enroll.
pub type Faces = Vec<Named>;

pub struct Gallery {
    dir: PathBuf,
    metric: Metric,
    dim: usize,
    threshold: f32,
    max_size: usize,
    /// Held for a whole change: changes take turns, readers never wait on it.
    /// Shared with the eraser thread.
    store: Arc<Mutex<Box<dyn Store>>>,
    /// Shared with the follower and eraser threads.
    live: Arc<Live>,
    saved: Arc<Saving>,
    /// Stopped first when the gallery is dropped (`Drop`).
    eraser: Option<Eraser>,
    /// Declared last: dropped (stopped and joined) after nothing else needs it.
    _following: Option<Following>,
}

/// The index's file beside the store, and `live.changes()` when it was last
/// saved or loaded.
struct Saving {
    file: Saved,
    at: AtomicU64,
}

impl Saving {
    /// Save `live`'s index, if it changed since it was last saved (or
    /// loaded), or `always`.
    fn save(&self, live: &Live, always: bool) -> Result<bool> {
        let changes = live.changes();
        if !always && self.at.load(Ordering::Relaxed) == changes {
            return Ok(false);
        }
        let (folder_keys_below, folder) = {
            let entries = live.read();
            (entries.folder_keys_below(), entries.folder_digest())
        };
        self.file.save(&live.index, folder_keys_below, folder)?;
        self.at.store(changes, Ordering::Relaxed);
        Ok(true)
    }
}

impl Gallery {
    /// The gallery of `dir` with the enrolled faces of `store` loaded. A
    /// store that cannot be read is an error, never silently dropped.
    pub fn open(
        dir: &Path,
        mut store: Box<dyn Store>,
        metric: Metric,
        dim: usize,
        threshold: f32,
        max_size: usize,
    ) -> Result<(Self, Opened)> {
        // Not the store's path or address: a moved folder keeps its index.
        let owner = format!("{} {dim} store {}", metric.name(), store.uid());
        let saved = Saved::new(dir, owner, store.embedder_tag());
        let mut took = Took::default();
        let mut lap = Lap(Instant::now());
        let (listed, local) = read_and_list(&saved, store.as_mut(), metric, dim, max_size)?;
        took.read = lap.next();
        let follower = store.follower();
        let restored = restore(&saved, local, store.as_mut(), metric, dim, listed.rows)?;
        took.checked = lap.next();
        let indexed = index_rows(
            &saved,
            restored,
            listed.change,
            follower.is_some(),
            &mut took,
        )?;
        let (how, current) = (indexed.how, indexed.current);
        let live = Arc::new(indexed.live);
        let mut opened = Opened {
            enrolled: live.read().len(),
            foreign: listed.foreign,
            migrated: listed.migrated,
            store: store.describe(),
            following: follower.is_some(),
            index: Restored { took, ..how },
        };
        let mut gallery = Gallery {
            dir: dir.to_path_buf(),
            metric,
            dim,
            threshold,
            max_size,
            store: Arc::new(Mutex::new(store)),
            live,
            saved: Arc::new(Saving {
                file: saved,
                // The file holds every row and nothing more (gallery images
                // aside: a load takes them out and adds the folder's): saved
                // as it is. Changes since move `live.changes()` past 0.
                at: AtomicU64::new(if current { 0 } else { NEVER }),
            }),
            eraser: None,
            _following: None,
        };
        // Rows forgotten after the file was saved (a kill -9 before the
        // eraser ran): the file still holds their vectors.
        let how = &opened.index;
        if how.added + how.removed >= SAVE_AT_OPEN || how.forgotten > 0 {
            // Rebuilt or caught up a lot: keep that work even if the server
            // is killed before the model unloads, and share it.
            gallery.save_index()?;
        }
        opened.index.published = gallery.publish_index();
        if let Some(f) = follower {
            let live = gallery.live.clone();
            let following = other_servers::start(f, live, max_size, listed.change);
            gallery._following = Some(following.map_err(|e| {
                Error::unavailable(format!("gallery: cannot start its follower thread: {e}"))
            })?);
        }
        gallery.eraser = Some(gallery.start_eraser()?);
        Ok((gallery, opened))
    }

    /// Save the vector index beside the store, if it changed since it was
    /// last saved (or loaded).
    pub fn save_index(&self) -> Result<bool> {
        self.saved.save(&self.live, false)
    }

    /// The thread that erases what removals leave in files (`erase.rs`):
    /// the store's leftovers, then the saved index written again (removed
    /// slots zeroed) and, for a shared store, published again.
    fn start_eraser(&self) -> Result<Eraser> {
        Eraser::start(self.live.clone(), self.erasure_pass(), None).map_err(|e| {
            Error::unavailable(format!("gallery: cannot start its erasure thread: {e}"))
        })
    }

    /// One erasure pass (see `start_eraser`).
    fn erasure_pass(&self) -> impl FnMut() -> Result<()> + Send + 'static {
        let (store, live, saved) = (self.store.clone(), self.live.clone(), self.saved.clone());
        // Written and published without the writer lock: changes go on meanwhile.
        let mut apart = locked(&store).apart();
        move || {
            locked(&store).erase()?;
            if saved.file.exists() {
                saved.save(&live, true)?;
                if let Some(own) = apart.as_mut() {
                    saved.file.publish(own.as_mut())?;
                }
            }
            Ok(())
        }
    }

    /// Forget on their own the enrollments older than `retention`: now (at
    /// load), then on the erasure thread, at least once a minute, each
    /// expiry recorded as a change. What expired now is erased now; a pass
    /// that fails (a reader holding the WAL) is logged and left to the
    /// erasure thread, which tries it again each second. How many expired.
    pub fn keep_for(&mut self, retention: Duration) -> Result<usize> {
        let (store, live) = (self.store.clone(), self.live.clone());
        let run = move || {
            let expired = locked(&store).expire(retention)?;
            live.expire(&expired.ours)?;
            if expired.rows > 0 {
                live.removed(); // another embedder's rows leave bytes too
            }
            Ok(expired.rows)
        };
        let now = run()?;
        if now > 0 {
            if let Err(e) = self.erasure_pass()() {
                log::warn!(
                    "gallery: erasure of the {now} enrollments expired at load not done yet, \
                     tried again each second: {}",
                    e.message()
                );
            }
        }
        let every = (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
        if let Some(eraser) = &self.eraser {
            eraser.expire(Expiry {
                every,
                run: Box::new(run),
            });
        }
        Ok(now)
    }

    /// Publish the saved index to a store other servers share, when its
    /// copy there is out of date: the bytes written, or why not (a cache:
    /// a failure costs a joining server a rebuild, nothing else).
    pub fn publish_index(&self) -> Option<std::result::Result<u64, String>> {
        if self.len() < SAVE_AT_OPEN || !self.saved.file.exists() {
            return None; // rebuilt in seconds: not worth a copy
        }
        let mut store = self.writer();
        match self.saved.file.publish(store.as_mut()) {
            Ok(published) => published.map(Ok),
            Err(e) => Some(Err(e.message().to_string())),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Entries> {
        self.live.read()
    }

    fn writer(&self) -> MutexGuard<'_, Box<dyn Store>> {
        locked(&self.store)
    }

    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// The model's threshold (a request may bring its own).
    /// Length of the embeddings it holds.
    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn threshold(&self) -> f32 {
        self.threshold
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Add a person seen in the gallery image `file` (model load).
    pub fn add_from_image(&self, name: &str, embedding: Vec<f32>, file: &Path) -> Result<()> {
        self.check_dim(&embedding)?;
        if self.len() >= self.max_size {
            return Err(Error::unavailable(format!(
                "gallery is full (max_gallery_size = {})",
                self.max_size
            )));
        }
        self.live.add_file(name, &embedding, file)
    }

    /// The nearest person to `embedding`, named when within `threshold`,
    /// and the `top_k` nearest people.
    pub fn best_match(&self, embedding: &[f32], threshold: f32, top_k: usize) -> Result<Match> {
        let _busy = Busy::enter();
        self.check_dim(embedding)?;
        let wanted = top_k.max(1);
        // A stray proven the nearest needs no walk (`index/strays/proof.rs`): the one
        // nearest is all a top_k of 1 lists.
        let proven = match wanted {
            1 => self
                .live
                .proven_person(embedding, threshold)
                .unwrap_or_else(|e| {
                    // Only a shortcut: the search below answers.
                    log::warn!("gallery: stray proof: {e}");
                    None
                }),
            _ => None,
        };
        if let Some(best) = proven {
            return Ok(Match {
                name: Some(best.name.clone()),
                distance: Some(best.distance),
                candidates: std::iter::once(best).take(top_k).collect(),
            });
        }
        let candidates = looks::look(
            self.len(),
            self.live.approximate(),
            threshold,
            |c: &Candidate| c.distance,
            |breadth| self.live.nearest_people(embedding, wanted, breadth),
        )?;
        let Some(best) = candidates.first() else {
            return Ok(Match::default());
        };
        Ok(Match {
            name: (best.distance <= threshold).then(|| best.name.clone()),
            distance: Some(best.distance),
            candidates: candidates.into_iter().take(top_k).collect(),
        })
    }

    /// `embedding` against `name`'s own embeddings only, exactly: how an
    /// enrollment's answer names the face it has just stored (its nearest
    /// embedding is that one, or a near-identical one of the same name),
    /// without a search of the whole gallery.
    pub fn match_person(&self, embedding: &[f32], name: &str, threshold: f32) -> Result<Match> {
        self.check_dim(embedding)?;
        let keys = self.read().keys_of(name).to_vec();
        let distance = keys
            .iter()
            .filter_map(|&key| self.live.index.vector(key))
            .map(|v| self.metric.distance(&v, embedding))
            .min_by(f32::total_cmp);
        Ok(Match {
            name: distance
                .filter(|&d| d <= threshold)
                .map(|_| name.to_string()),
            distance,
            candidates: Vec::new(),
        })
    }

    /// Enroll `embedding` under `name`, durably. On failure nothing changes.
    pub fn enroll(&self, name: &str, embedding: Vec<f32>) -> Result<Enrolled> {
        let named = Named {
            name: name.to_string(),
            embedding,
        };
        let mut out = self.enroll_batch(vec![(vec![named], None)]);
        out.pop()
            .expect("one result per request")
            .map(|mut e| e.remove(0))
    }

    /// Enroll the faces of several requests with ONE store transaction: each
    /// request's names go in together or not at all (a request that is
    /// invalid or does not fit fails alone), and nothing is acknowledged
    /// before the commit. If it fails, every request that was to be written
    /// fails with it and the gallery is unchanged. Each request comes with
    /// the label of the gallery key that sent it, for the record of changes.
    pub fn enroll_batch(
        &self,
        requests: Vec<(Faces, Option<String>)>,
    ) -> Vec<Result<Vec<Enrolled>>> {
        let mut store = self.writer();
        let mut pending = Vec::new();
        let (requests, labels): (Vec<Faces>, Vec<Option<String>>) = requests.into_iter().unzip();
        let mut results: Vec<Result<Vec<Enrolled>>> = {
            let e = self.read();
            requests
                .into_iter()
                .map(|faces| self.stage(&e, &mut pending, faces))
                .collect()
        };
        if pending.is_empty() {
            return results;
        }
        let changes = enroll_changes(&results, &labels);
        let stamps = match store.add(&pending, &changes) {
            Ok(stamps) => stamps,
            Err(err) => {
                for r in results
                    .iter_mut()
                    .filter(|r| r.as_ref().is_ok_and(|v| v.iter().any(|x| x.added)))
                {
                    *r = Err(err.clone());
                }
                return results;
            }
        };
        let added = pending
            .into_iter()
            .zip(stamps)
            .map(|(Named { name, embedding }, stamp)| Stored {
                stamp,
                name,
                embedding,
            })
            .collect();
        if let Err(err) = self.live.add_own(added) {
            // Stored, so not lost (the next load has it), but not matched yet.
            let err = Error::unavailable(format!(
                "ENROLL: stored, but not yet in this server's index: {}",
                err.message()
            ));
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(err.clone());
            }
        }
        results
    }

    /// Add one request's faces to `pending` (the batch's new entries), all or
    /// none.
    fn stage(&self, e: &Entries, pending: &mut Faces, faces: Faces) -> Result<Vec<Enrolled>> {
        let before = pending.len();
        let mut done = Vec::with_capacity(faces.len());
        for Named { name, embedding } in faces {
            match self.stage_one(e, pending, name, embedding) {
                Ok(enrolled) => done.push(enrolled),
                Err(err) => {
                    pending.truncate(before);
                    return Err(err);
                }
            }
        }
        Ok(done)
    }

    fn stage_one(
        &self,
        e: &Entries,
        pending: &mut Faces,
        name: String,
        embedding: Vec<f32>,
    ) -> Result<Enrolled> {
        validate_name("ENROLL", &name)?;
        self.check_dim(&embedding)?;
        let size = e.len() + pending.len();
        let close = |n: &str, v: &[f32]| {
            n == name && self.metric.distance(v, &embedding) < DUPLICATE_DISTANCE
        };
        let duplicate = e
            .keys_of(&name)
            .iter()
            .filter_map(|&key| self.live.index.vector(key))
            .any(|v| close(&name, &v))
            || pending.iter().any(|p| close(&p.name, &p.embedding));
        if duplicate {
            return Ok(Enrolled {
                name,
                added: false,
                gallery_size: size,
            });
        }
        if size >= self.max_size {
            // Capacity of this server's gallery, not a fault of the request.
            return Err(Error::unavailable(format!(
                "ENROLL: gallery is full (max_gallery_size = {})",
                self.max_size
            )));
        }
        pending.push(Named {
            name: name.clone(),
            embedding,
        });
        Ok(Enrolled {
            name,
            added: true,
            gallery_size: size + 1,
        })
    }

    /// Remove every enrolled embedding of each name, durably, in one store
    /// transaction: all or nothing. A name known only from gallery images
    /// cannot be forgotten here (the images would bring it back at the next
    /// load): that fails the request, naming the files.
    pub fn forget(&self, names: &[String], by: Option<&str>) -> Result<Vec<Forgotten>> {
        for name in names {
            validate_name("FORGET", name)?;
        }
        let mut store = self.writer();
        let files = {
            let e = self.read();
            names
                .iter()
                .map(|name| self.files_to_keep(&e, name))
                .collect::<Result<Vec<_>>>()?
        };
        let forgot = store.forget(names, by)?;
        self.live.forget_own(names, forgot.change)?;
        if forgot.removed.iter().any(|&n| n > 0) {
            self.live.removed(); // another embedder's rows leave bytes too
        }
        let size = self.len();
        let forgotten = names.iter().zip(forgot.removed).zip(files);
        Ok(forgotten
            .map(|((name, removed), folder_files)| Forgotten {
                name: name.clone(),
                removed,
                gallery_size: size,
                folder_files,
            })
            .collect())
    }

    /// The newest `limit` recorded changes, newest first.
    pub fn changes(&self, limit: usize) -> Result<Vec<Record>> {
        self.writer().changes(limit)
    }

    /// The gallery images of `name` that FORGET leaves in place; an error if
    /// the name has nothing else.
    fn files_to_keep(&self, e: &Entries, name: &str) -> Result<Vec<String>> {
        let files = self.files_of(e, name);
        if files.is_empty() || e.has_enrolled(name) {
            return Ok(files);
        }
        Err(Error::invalid(format!(
            "FORGET: {name:?} is known only from the gallery folder {}: delete {} there and \
             reload the model",
            self.dir.display(),
            files.join(", ")
        )))
    }

    /// The gallery images of `name`, relative to the folder.
    fn files_of(&self, e: &Entries, name: &str) -> Vec<String> {
        e.files_of(name)
            .into_iter()
            .map(|f| f.strip_prefix(&self.dir).unwrap_or(f).display().to_string())
            .collect()
    }

    /// A number that grows whenever an entry leaves the gallery (a FORGET
    /// here or on another server of the store, an expiry): whoever keeps
    /// names from it (a sequence's tracks) checks them again when it moved.
    pub fn removals(&self) -> u64 {
        self.live.removals()
    }

    /// Whether `name` has an entry: enrolled, or from a gallery image.
    pub fn knows(&self, name: &str) -> bool {
        !self.read().keys_of(name).is_empty()
    }

    /// Everyone known, one row per (name, source), sorted; and the size.
    pub fn people(&self) -> (Vec<Known>, usize) {
        let e = self.read();
        let mut counts: BTreeMap<(&str, Source), usize> = BTreeMap::new();
        for (name, keys) in e.names() {
            let files = e.files_of(name).len();
            for (source, n) in [
                (Source::Folder, files),
                (Source::Enrolled, keys.len() - files),
            ] {
                if n > 0 {
                    counts.insert((name, source), n);
                }
            }
        }
        let people = counts
            .into_iter()
            .map(|((name, source), embeddings)| Known {
                name: name.to_string(),
                embeddings,
                source,
            })
            .collect();
        (people, e.len())
    }

    fn check_dim(&self, embedding: &[f32]) -> Result<()> {
        index::check_length(embedding, self.dim)
    }
}

impl Drop for Gallery {
    /// Stop following first (nothing changes after), then save the index if
    /// it changed: the next load reads it instead of rebuilding.
    fn drop(&mut self) {
        drop(self._following.take());
        drop(self.eraser.take()); // a pending pass runs first
        if !self.read().has_stored() {
            return; // gallery images alone: rebuilt at every load anyway
        }
        let started = Instant::now();
        match self.save_index() {
            Ok(true) => log::info!(
                "gallery: index saved in {:.1} s",
                started.elapsed().as_secs_f64()
            ),
            Ok(false) => {
                log::info!("gallery: index unchanged since it was saved or loaded: nothing written")
            }
            Err(e) => log::warn!("gallery: index not saved: {e}"),
        }
        if let Some(Err(why)) = self.publish_index() {
            log::warn!("gallery: index not published: {why}");
        }
    }
}

/// The writer lock. A panic inside a store call drops its transaction
/// (rolled back), so a poisoned one is safe too.
fn locked(store: &Mutex<Box<dyn Store>>) -> MutexGuard<'_, Box<dyn Store>> {
    store.lock().unwrap_or_else(|e| e.into_inner())
}

/// The index to start from, and what the store must still give it.
struct Restoring {
    index: VectorIndex,
    /// The strays the saved file's manifest recorded, if any.
    strays: Option<saved::StraysRecord>,
    /// Entries whose vectors the index lacks, read from the store.
    stored: Vec<Stored>,
    rows: Vec<Row>,
    how: Restored,
}

/// The saved index, reconciled with the store's `rows`: vectors of rows no
/// longer there (and of the last load's gallery images) removed, those the
/// file lacks read from the store. Without a usable file, every vector is.
fn restore(
    saved: &Saved,
    local: Result<(VectorIndex, saved::Manifest)>,
    store: &mut dyn Store,
    metric: Metric,
    dim: usize,
    rows: Vec<Row>,
) -> Result<Restoring> {
    let mut how = Restored::default();
    let (mut index, mut manifest) = match load_saved(saved, local, store, metric, dim, &mut how) {
        Some((index, manifest)) => (index, Some(manifest)),
        None => (VectorIndex::new(metric, dim)?, None),
    };
    if manifest.is_some() {
        // What the file holds, read from the file itself: a manifest of an
        // older build may not list a vector whose row is gone since.
        match saved.file_keys() {
            Ok(keys) => {
                let live: foldhash::HashSet<u64> =
                    rows.iter().map(|r| entries::key_of(r.stamp)).collect();
                let (images, stale): (Vec<u64>, Vec<u64>) = keys
                    .into_iter()
                    .filter(|k| !live.contains(k))
                    .partition(|&k| k >= entries::FOLDER_KEYS);
                how.from_file = true;
                how.forgotten = remove_held(&index, stale)?;
                how.images = remove_held(&index, images)?;
                how.removed = how.images + how.forgotten;
            }
            Err(e) => {
                how.not_used = Some(format!("{}: its vectors not listed", e.message()));
                how.forgotten = index.len(); // any may be: written again at once
                (index, manifest) = (VectorIndex::new(metric, dim)?, None);
            }
        }
    }
    let missing: Vec<i64> = rows
        .iter()
        .filter(|r| !index.contains(entries::key_of(r.stamp)))
        .map(|r| r.stamp.id)
        .collect();
    let stored = match missing.len() {
        0 => Vec::new(),
        n if n == rows.len() => store.load()?.rows,
        _ => store.embeddings(&missing)?,
    };
    Ok(Restoring {
        index,
        strays: manifest.and_then(|m| m.strays),
        stored,
        rows,
        how,
    })
}

/// Time since the last lap.
struct Lap(Instant);

impl Lap {
    fn next(&mut self) -> Duration {
        let now = Instant::now();
        std::mem::replace(&mut self.0, now).elapsed()
    }
}

/// The saved index read (`Saved::load`), while the store's rows are listed
/// on a thread of their own (a million people: 0.5 to 0.8 s of a load). Not
/// a pool helper: a slow database would keep it from the scans. A store
/// that cannot be listed, or holds more than `max_size` rows, fails the load
/// after the read.
fn read_and_list(
    saved: &Saved,
    store: &mut dyn Store,
    metric: Metric,
    dim: usize,
    max_size: usize,
) -> Result<(Listed, Result<(VectorIndex, saved::Manifest)>)> {
    let (listed, local) = std::thread::scope(|scope| {
        let lister = std::thread::Builder::new()
            .name("face-gallery-list".into())
            .spawn_scoped(scope, || store.list());
        let local = saved.load(metric, dim);
        let listed = lister.ok().map(|thread| {
            thread
                .join()
                .unwrap_or_else(|_| Err(Error::internal("gallery: listing its store panicked")))
        });
        (listed, local)
    });
    // No thread could start: listed here.
    let listed = listed.unwrap_or_else(|| store.list())?;
    if listed.rows.len() > max_size {
        return Err(Error::unavailable(format!(
            "{}: {} enrolled faces exceed max_gallery_size = {max_size}",
            store.describe(),
            listed.rows.len()
        )));
    }
    Ok((listed, local))
}

/// The index and its names made from what `restore` found, and how.
struct Indexed {
    live: Live,
    how: Restored,
    /// The file holds every row and nothing more (images aside).
    current: bool,
}

/// The rows the restored index lacks inserted, the names' tables filled, the
/// strays taken from the file or counted (`took` their times).
fn index_rows(
    saved: &Saved,
    restored: Restoring,
    change: i64,
    following: bool,
    took: &mut Took,
) -> Result<Indexed> {
    let mut lap = Lap(Instant::now());
    let live = Live::around(restored.index, change, following);
    // The strays saved with the file, while they hold: taken, and the rows
    // the file lacks inserted each alone (its stray checked), as while
    // serving. Else every row at once, and the strays counted.
    let how = restored.how;
    let taken = take_strays(
        &live.index,
        restored.strays.as_ref(),
        &how,
        restored.stored.len(),
    )?;
    let added = live.load(restored.stored, restored.rows, taken.is_some())?;
    took.tables = lap.next();
    // The file as saved, nothing added or removed: its graph.
    let clean = how.from_file && added == 0 && how.removed == 0;
    let strays = match taken {
        Some(_) => live.index.stray_count(),
        None => count_strays(&live, saved, clean)?,
    };
    took.strays = lap.next();
    took.strays_taken = taken.is_some();
    let current = how.from_file && added == 0 && how.removed == how.images;
    let how = Restored {
        added,
        strays,
        ..how
    };
    Ok(Indexed { live, how, current })
}

/// The strays `saved` with the file, set on `index` when they hold for
/// it: the file was used, they were counted by this build's rule, and few
/// vectors changed since (those before the save, those removed at this
/// load, the `to_insert` it lacks). How many, if taken.
fn take_strays(
    index: &VectorIndex,
    saved: Option<&saved::StraysRecord>,
    how: &Restored,
    to_insert: usize,
) -> Result<Option<usize>> {
    let Some(s) = saved.filter(|s| how.from_file && s.current()) else {
        return Ok(None);
    };
    let changed = s.changed + (how.removed + to_insert) as u64;
    if !index.strays_hold(s.isolated_above, changed) {
        return Ok(None);
    }
    let removed_since = s.changed + how.removed as u64;
    index
        .set_strays(&s.keys, s.isolated_above, removed_since)
        .map(Some)
}

/// Count the strays over the graph as loaded; recorded in the manifest when
/// that graph is the file's own (`clean`): the next load takes them.
fn count_strays(live: &Live, saved: &Saved, clean: bool) -> Result<usize> {
    let n = live.index.find_strays(&live.read().store_keys())?;
    if let Some((keys, isolated_above)) = live.index.counted_strays().filter(|_| clean) {
        // Cheap to keep (the manifest only), seconds to count.
        let strays = saved::StraysRecord::new(keys, isolated_above, 0);
        if let Err(e) = saved.record_strays(strays) {
            log::warn!("gallery: strays not recorded: {e}");
        }
    }
    Ok(n)
}

/// Remove those of `keys` the index holds: how many.
fn remove_held(index: &VectorIndex, keys: Vec<u64>) -> Result<usize> {
    let mut removed = 0;
    for key in keys.into_iter().filter(|&k| index.contains(k)) {
        index.remove(key)?;
        removed += 1;
    }
    Ok(removed)
}

/// The saved index (`local`, as read), else the one published to a shared
/// store (copied here first); `None` when neither can be used, and `how`
/// says why.
fn load_saved(
    saved: &Saved,
    local: Result<(VectorIndex, saved::Manifest)>,
    store: &mut dyn Store,
    metric: Metric,
    dim: usize,
    how: &mut Restored,
) -> Option<(VectorIndex, saved::Manifest)> {
    if local.is_ok() || !store.shares_index() {
        if let Err(why) = &local {
            how.not_used = saved.exists().then(|| why.message().to_string());
        }
        return local.ok();
    }
    let why_local = saved
        .exists()
        .then(|| local.err().map(|e| e.message().to_string()));
    let published = match saved.fetch(store) {
        Ok(false) => None,
        Ok(true) => Some(saved.load(metric, dim)),
        Err(e) => Some(Err(e)),
    };
    let why_published = match published {
        Some(Ok(loaded)) => {
            how.fetched = true;
            return Some(loaded);
        }
        Some(Err(e)) => {
            saved.published_bad();
            Some(format!("the copy published to the store: {}", e.message()))
        }
        None => None,
    };
    let why: Vec<String> = why_local
        .flatten()
        .into_iter()
        .chain(why_published)
        .collect();
    how.not_used = (!why.is_empty()).then(|| why.join("; "));
    None
}

/// The record of an enroll batch: per request that adds anything, per name,
/// how many embeddings it adds, with that request's key label.
fn enroll_changes(results: &[Result<Vec<Enrolled>>], labels: &[Option<String>]) -> Vec<Change> {
    let mut changes: Vec<Change> = Vec::new();
    for (enrolled, by) in results.iter().zip(labels) {
        let Ok(enrolled) = enrolled else { continue };
        let first = changes.len();
        for e in enrolled.iter().filter(|e| e.added) {
            match changes[first..].iter_mut().find(|c| c.name == e.name) {
                Some(c) => c.count += 1,
                None => changes.push(Change {
                    operation: Operation::Enroll,
                    name: e.name.clone(),
                    count: 1,
                    by: by.clone(),
                }),
            }
        }
    }
    changes
}

#[cfg(test)]
mod tests;
