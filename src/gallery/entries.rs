//! The gallery's names in memory: which entry (by its key in the vector
//! index) is whose, and how changes apply, this server's own and other
//! servers' (read by a follower) alike, in whatever order they arrive. Three
//! rules make the order not matter: an enrollment already present (by id) is
//! not added twice; a removal removes its name's enrollments older than
//! itself and leaves a tombstone, so an older enrollment of that name
//! arriving later is not added; and an enrollment at or below the follower's
//! caught-up change is the follower's to add (it was read, or it is gone).
//!
//! The vectors live in the index (`super::index`), not here: an entry is a
//! name and an origin: 104 bytes in the two maps' slots, a name's 32 in
//! its `Arc`, about 150 to 250 bytes in all as the maps are from 7/8 to
//! half full (a million: half).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use foldhash::HashMap;
use smallvec::SmallVec;

use super::store::{Changes, Stamp};

/// Keys of gallery images start here, above every store id (an enrollment's
/// key is its row id).
pub(super) const FOLDER_KEYS: u64 = 1 << 62;

pub(super) struct Entry {
    /// Shared with `by_name`'s key: one allocation per person.
    pub name: Arc<str>,
    pub origin: Origin,
}

pub(super) enum Origin {
    /// A gallery image: the file it came from.
    File(PathBuf),
    Store(Stamp),
}

impl Entry {
    fn stamp(&self) -> Option<Stamp> {
        match self.origin {
            Origin::Store(s) => Some(s),
            Origin::File(_) => None,
        }
    }
}

/// The key of a stored enrollment in the vector index.
pub(super) fn key_of(stamp: Stamp) -> u64 {
    stamp.id as u64
}

/// What applying other servers' changes did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub added: usize,
    pub removed: usize,
    /// Enrollments left out: the gallery was at max_gallery_size.
    pub refused: usize,
}

/// Whether an enrollment may join the gallery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Admit,
    /// Present already (by id).
    Present,
    /// Removed by a later FORGET, or the follower's to add.
    Unwanted,
    /// The gallery is at max_gallery_size.
    Full,
}

/// A person's keys: most have one or two, kept inline.
type Keys = SmallVec<[u64; 2]>;

#[derive(Default)]
pub(super) struct Entries {
    by_key: HashMap<u64, Entry>,
    /// Keys per name: ENROLL's duplicate check and FORGET touch only their
    /// name's entries, so their cost does not grow with the gallery.
    by_name: HashMap<Arc<str>, Keys>,
    next_folder_key: u64,
    /// The gallery images' vectors' hashes, summed (`folder_digest`).
    folder_sum: u128,
    /// Followed stores: name -> the highest removal bound applied (every
    /// enrollment below it is gone), until the follower has caught up past it.
    tombstones: HashMap<String, i64>,
    /// Followed stores: every change up to here has been read.
    caught_up: i64,
    following: bool,
}

impl Entries {
    pub fn new(caught_up: i64, following: bool) -> Self {
        Entries {
            caught_up,
            following,
            next_folder_key: FOLDER_KEYS,
            ..Entries::default()
        }
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn get(&self, key: u64) -> Option<&Entry> {
        self.by_key.get(&key)
    }

    /// The keys of `name`'s entries.
    pub fn keys_of(&self, name: &str) -> &[u64] {
        self.by_name.get(name).map_or(&[], |k| k.as_slice())
    }

    /// Every name with the keys of its entries.
    pub fn names(&self) -> impl Iterator<Item = (&str, &[u64])> {
        self.by_name.iter().map(|(n, k)| (&**n, k.as_slice()))
    }

    pub fn has_enrolled(&self, name: &str) -> bool {
        self.keys_of(name)
            .iter()
            .any(|k| self.by_key[k].stamp().is_some())
    }

    /// The gallery images of `name`.
    pub fn files_of(&self, name: &str) -> Vec<&Path> {
        self.keys_of(name)
            .iter()
            .filter_map(|k| match &self.by_key[k].origin {
                Origin::File(f) => Some(f.as_path()),
                Origin::Store(_) => None,
            })
            .collect()
    }

    /// Remove these stored enrollments (expired): the keys that were here.
    pub fn remove_stored(&mut self, stamps: &[Stamp]) -> Vec<u64> {
        let mut gone = Vec::new();
        for key in stamps.iter().map(|s| key_of(*s)) {
            let Some(entry) = self.by_key.remove(&key) else {
                continue;
            };
            if let Some(keys) = self.by_name.get_mut(&entry.name) {
                keys.retain(|k| *k != key);
                if keys.is_empty() {
                    self.by_name.remove(&*entry.name);
                }
            }
            gone.push(key);
        }
        gone
    }

    /// Whether any entry comes from the store.
    pub fn has_stored(&self) -> bool {
        self.by_key.values().any(|e| e.stamp().is_some())
    }

    /// The keys of every stored enrollment.
    pub fn store_keys(&self) -> Vec<u64> {
        self.by_key
            .iter()
            .filter(|(_, e)| e.stamp().is_some())
            .map(|(&k, _)| k)
            .collect()
    }

    /// Every gallery-image key given so far is below this one.
    pub fn folder_keys_below(&self) -> u64 {
        self.next_folder_key + 1
    }

    /// What the gallery images' vectors are, whatever order they came in:
    /// a saved index's manifest records it (a published copy of other
    /// images is replaced).
    pub fn folder_digest(&self) -> String {
        format!("{:032x}", self.folder_sum)
    }

    /// A gallery image's vector added (to `folder_digest`).
    pub fn add_to_folder_digest(&mut self, vector: &[f32]) {
        let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
        let hash = blake3::hash(&bytes);
        let low: [u8; 16] = hash.as_bytes()[..16].try_into().unwrap_or_default();
        self.folder_sum = self.folder_sum.wrapping_add(u128::from_le_bytes(low));
    }

    /// A key for a gallery image, never used before.
    pub fn folder_key(&mut self) -> u64 {
        self.next_folder_key += 1;
        self.next_folder_key
    }

    pub fn insert_file(&mut self, key: u64, name: &str, file: &Path) {
        self.insert(key, name, Origin::File(file.to_path_buf()));
    }

    /// This server's enrollment, just committed: wanted, and not the
    /// follower's to add.
    pub fn own_verdict(&self, stamp: Stamp, name: &str) -> Verdict {
        match self.wanted(stamp, name) {
            Verdict::Admit if stamp.change <= self.caught_up => Verdict::Unwanted,
            v => v,
        }
    }

    /// Another server's enrollment, beyond `max` entries refused.
    pub fn followed_verdict(&self, stamp: Stamp, name: &str, max: usize) -> Verdict {
        match self.wanted(stamp, name) {
            Verdict::Admit if self.len() >= max => Verdict::Full,
            v => v,
        }
    }

    pub fn insert_stored(&mut self, stamp: Stamp, name: &str) {
        self.insert(key_of(stamp), name, Origin::Store(stamp));
    }

    /// A load's stored rows, both tables sized once (a million grown a
    /// doubling at a time rehashed them twenty times over); the names' room
    /// is given back when people have many entries each.
    pub fn fill_stored(&mut self, rows: Vec<(Stamp, String)>) {
        self.by_key.reserve(rows.len());
        self.by_name.reserve(rows.len());
        for (stamp, name) in rows {
            self.insert_stored(stamp, &name);
        }
        if self.by_name.len() < self.by_name.capacity() / 4 {
            self.by_name.shrink_to_fit();
        }
    }

    /// This server's FORGET, just committed at `change`: the keys it removed.
    /// (Another server's newer enrollment of the name may already be here: it
    /// stays.)
    pub fn forget_own(&mut self, names: &[String], change: i64) -> Vec<u64> {
        let mut gone = Vec::new();
        for name in names {
            gone.extend(self.remove(name, change));
            self.tombstone(name, change);
        }
        gone
    }

    /// Other servers' removals: how many entries went, and their keys.
    pub fn apply_removals(&mut self, changes: &Changes) -> (usize, Vec<u64>) {
        let mut gone = Vec::new();
        for r in &changes.removed {
            gone.extend(self.remove(&r.name, r.before));
            self.tombstone(&r.name, r.before);
        }
        (gone.len(), gone)
    }

    /// Every change up to `upto` has been read and applied.
    pub fn caught_up_to(&mut self, upto: i64) {
        self.caught_up = self.caught_up.max(upto);
        // Anything still to come is newer than these: they can go.
        let caught_up = self.caught_up;
        self.tombstones.retain(|_, change| *change > caught_up);
    }

    /// Not present yet and not removed by a later FORGET.
    fn wanted(&self, stamp: Stamp, name: &str) -> Verdict {
        if self.by_key.contains_key(&key_of(stamp)) {
            return Verdict::Present;
        }
        let removed = self.tombstones.get(name);
        if removed.is_some_and(|&before| stamp.change < before) {
            return Verdict::Unwanted;
        }
        Verdict::Admit
    }

    fn insert(&mut self, key: u64, name: &str, origin: Origin) {
        if self.by_key.contains_key(&key) {
            return;
        }
        let name = match self.by_name.get_key_value(name) {
            Some((shared, _)) => shared.clone(),
            None => Arc::from(name),
        };
        self.by_name.entry(name.clone()).or_default().push(key);
        self.by_key.insert(key, Entry { name, origin });
    }

    /// Remove `name`'s enrollments older than change `before`: their keys.
    fn remove(&mut self, name: &str, before: i64) -> Vec<u64> {
        let Some(keys) = self.by_name.get_mut(name) else {
            return Vec::new();
        };
        let by_key = &mut self.by_key;
        let mut gone = Vec::new();
        keys.retain(|k| match by_key[k].stamp() {
            Some(s) if s.change < before => {
                by_key.remove(k);
                gone.push(*k);
                false
            }
            _ => true,
        });
        if keys.is_empty() {
            self.by_name.remove(name);
        }
        gone
    }

    fn tombstone(&mut self, name: &str, change: i64) {
        if self.following && change > self.caught_up {
            let t = self.tombstones.entry(name.to_string()).or_default();
            *t = (*t).max(change);
        }
    }
}
