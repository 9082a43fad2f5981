//! Known people: embeddings with names, shared by a model's instances. Two
//! sources: images in the gallery folder (embedded at model load, never
//! written) and run-time enrollments, kept in a `Store` (SQLite in the same
//! folder).
//!
//! Matching reads the in-memory entries under a read lock. A change (ENROLL,
//! FORGET) takes the writer lock (the store's mutex: one change at a time),
//! decides against the current entries, writes the store durably, and only
//! then takes the entries' write lock for the moment it takes to apply: a
//! slow disk never blocks recognition, and nothing is in memory (or
//! acknowledged) that is not on disk. A store other servers share also has a
//! follower thread (`follow.rs`) applying their changes.

mod entries;
pub mod folder;
mod follow;
pub mod names;
pub mod store;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::pipeline::Metric;
use entries::{Entries, Entry, Origin};
pub use folder::gallery_images;
use follow::Following;
pub use names::{validate_name, MAX_NAME_CHARS, RESERVED_NAMES};
use store::{Migrated, Store, Stored};

/// A re-enrollment this close to an existing embedding of the same name is
/// the same photo again and is not stored twice.
const DUPLICATE_DISTANCE: f32 = 0.01;

/// The nearest known person for one embedding.
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    /// The person, when within the threshold.
    pub name: Option<String>,
    /// Distance to the nearest entry; `None` for an empty gallery.
    pub distance: Option<f32>,
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
}

/// One request's faces to enroll.
pub type Faces = Vec<(String, Vec<f32>)>;

pub struct Gallery {
    dir: PathBuf,
    metric: Metric,
    dim: usize,
    threshold: f32,
    max_size: usize,
    /// Held for a whole change: changes take turns, readers never wait on it.
    store: Mutex<Box<dyn Store>>,
    /// Shared with the follower thread, if any.
    entries: Arc<RwLock<Entries>>,
    /// Declared last: dropped (stopped and joined) after nothing else needs it.
    _following: Option<Following>,
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
        let loaded = store.load()?;
        if loaded.entries.len() > max_size {
            return Err(Error::unavailable(format!(
                "{}: {} enrolled faces exceed max_gallery_size = {max_size}",
                store.describe(),
                loaded.entries.len()
            )));
        }
        let follower = store.follower();
        let opened = Opened {
            enrolled: loaded.entries.len(),
            foreign: loaded.foreign,
            migrated: loaded.migrated,
            store: store.describe(),
            following: follower.is_some(),
        };
        let entries = Entries::new(loaded.entries, loaded.change, follower.is_some());
        let entries = Arc::new(RwLock::new(entries));
        let following = match follower {
            None => None,
            Some(f) => Some(
                follow::start(f, entries.clone(), max_size, loaded.change).map_err(|e| {
                    Error::unavailable(format!("gallery: cannot start its follower thread: {e}"))
                })?,
            ),
        };
        let gallery = Gallery {
            dir: dir.to_path_buf(),
            metric,
            dim,
            threshold,
            max_size,
            store: Mutex::new(store),
            entries,
            _following: following,
        };
        Ok((gallery, opened))
    }

    // A panic elsewhere while a lock was held cannot leave the entries half
    // changed (they change only after the store is written, in one step), so
    // a poisoned lock is still safe to use.
    fn read(&self) -> RwLockReadGuard<'_, Entries> {
        self.entries.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Entries> {
        self.entries.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The writer lock. A panic inside a store call drops its transaction
    /// (rolled back), so a poisoned one is safe too.
    fn writer(&self) -> MutexGuard<'_, Box<dyn Store>> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// The model's threshold (a request may bring its own).
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
        let mut e = self.write();
        if e.len() >= self.max_size {
            return Err(Error::unavailable(format!(
                "gallery is full (max_gallery_size = {})",
                self.max_size
            )));
        }
        e.from_images.push(Entry {
            name: name.to_string(),
            embedding,
            origin: Origin::File(file.to_path_buf()),
        });
        Ok(())
    }

    /// The nearest person to `embedding`, named when within `threshold`.
    pub fn best_match(&self, embedding: &[f32], threshold: f32) -> Match {
        let e = self.read();
        let best = e
            .all()
            .map(|entry| (entry, self.metric.distance(&entry.embedding, embedding)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match best {
            None => Match {
                name: None,
                distance: None,
            },
            Some((entry, d)) => Match {
                name: (d <= threshold).then(|| entry.name.clone()),
                distance: Some(d),
            },
        }
    }

    /// Enroll `embedding` under `name`, durably. On failure nothing changes.
    pub fn enroll(&self, name: &str, embedding: Vec<f32>) -> Result<Enrolled> {
        let mut out = self.enroll_batch(vec![vec![(name.to_string(), embedding)]]);
        out.pop()
            .expect("one result per request")
            .map(|mut e| e.remove(0))
    }

    /// Enroll the faces of several requests with ONE store transaction: each
    /// request's names go in together or not at all (a request that is
    /// invalid or does not fit fails alone), and nothing is acknowledged
    /// before the commit. If it fails, every request that was to be written
    /// fails with it and the gallery is unchanged.
    pub fn enroll_batch(&self, requests: Vec<Faces>) -> Vec<Result<Vec<Enrolled>>> {
        let mut store = self.writer();
        let mut pending = Vec::new();
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
        let stamps = match store.add(&pending) {
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
            .map(|((name, embedding), stamp)| Stored {
                stamp,
                name,
                embedding,
            });
        self.write().add_own(added);
        results
    }

    /// Add one request's faces to `pending` (the batch's new entries), all or
    /// none.
    fn stage(&self, e: &Entries, pending: &mut Faces, faces: Faces) -> Result<Vec<Enrolled>> {
        let before = pending.len();
        let mut done = Vec::with_capacity(faces.len());
        for (name, embedding) in faces {
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
        let duplicate = e.named(&name).any(|x| close(&x.name, &x.embedding))
            || pending.iter().any(|(n, v)| close(n, v));
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
        pending.push((name.clone(), embedding));
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
    pub fn forget(&self, names: &[String]) -> Result<Vec<Forgotten>> {
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
        let forgot = store.forget(names)?;
        let mut e = self.write();
        e.forget_own(names, forgot.change);
        let size = e.len();
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

    /// The gallery images of `name` that FORGET leaves in place; an error if
    /// the name has nothing else.
    fn files_to_keep(&self, e: &Entries, name: &str) -> Result<Vec<String>> {
        let files = self.files_of(e, name);
        if files.is_empty() || e.enrolled_names.contains_key(name) {
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
        e.from_images
            .iter()
            .filter(|x| x.name == name)
            .filter_map(|x| match &x.origin {
                Origin::File(f) => Some(f.as_path()),
                Origin::Store(_) => None,
            })
            .map(|f| f.strip_prefix(&self.dir).unwrap_or(f).display().to_string())
            .collect()
    }

    /// Everyone known, one row per (name, source), sorted; and the size.
    pub fn people(&self) -> (Vec<Known>, usize) {
        let e = self.read();
        let mut counts: BTreeMap<(&str, Source), usize> = BTreeMap::new();
        for (entries, source) in [
            (&e.from_images, Source::Folder),
            (&e.enrolled, Source::Enrolled),
        ] {
            for x in entries {
                *counts.entry((x.name.as_str(), source)).or_default() += 1;
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
        if embedding.len() != self.dim {
            return Err(Error::internal(format!(
                "embedding has {} values, the gallery holds {}",
                embedding.len(),
                self.dim
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
