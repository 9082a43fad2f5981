//! The gallery in memory: the vector index and the names behind its keys,
//! shared by the gallery and its follower thread.
//!
//! A change never holds a lock readers need for longer than one insertion:
//! a vector goes into the index first (under the index's own lock, one at a
//! time), then its entry is published under a short write lock of the names.
//! A search finds a key only once its entry is published: a key the index
//! returns without an entry (not yet published, or just forgotten) is passed
//! over. A removal unpublishes the entries first, then takes the vectors out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::entries::{key_of, Applied, Entries, Entry, Verdict};
use super::index::{Hit, VectorIndex};
use super::looks::Breadth;
use super::progress::Progress;
use super::share::spare_core;
use super::store::{Changes, Row, Stamp, Stored};
use crate::error::Result;
#[cfg(test)]
use crate::metric::Metric;

/// A person near a query: the name and the full distance of its nearest
/// entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub name: String,
    pub distance: f32,
}

pub(super) struct Live {
    entries: RwLock<Entries>,
    pub index: VectorIndex,
    /// Insertions and removals so far: a saved index is stale once this
    /// moves past what it was saved at.
    changes: AtomicU64,
    /// Vectors taken out for good (forgotten, here or by another server; a
    /// gallery image gone): the eraser's cue (`erase.rs`).
    removals: AtomicU64,
}

impl Live {
    #[cfg(test)]
    pub fn new(metric: Metric, dim: usize, caught_up: i64, following: bool) -> Result<Self> {
        Ok(Self::around(
            VectorIndex::new(metric, dim)?,
            caught_up,
            following,
        ))
    }

    /// Names to go with `index` (empty, or loaded from a saved file).
    pub fn around(index: VectorIndex, caught_up: i64, following: bool) -> Self {
        Live {
            entries: RwLock::new(Entries::new(caught_up, following)),
            index,
            changes: AtomicU64::new(0),
            removals: AtomicU64::new(0),
        }
    }

    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    pub fn removals(&self) -> u64 {
        self.removals.load(Ordering::Relaxed)
    }

    /// Something was removed for good that files may still hold.
    pub fn removed(&self) {
        self.removals.fetch_add(1, Ordering::Relaxed);
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    // A panic elsewhere while a lock was held cannot leave the names half
    // changed (each change to them is one step), so a poisoned lock is used.
    pub fn read(&self) -> RwLockReadGuard<'_, Entries> {
        self.entries.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, Entries> {
        self.entries.write().unwrap_or_else(|e| e.into_inner())
    }

    /// At open (nobody reads yet): index `stored`, then name every row whose
    /// vector the index holds. How many vectors were added.
    pub fn load(&self, stored: Vec<Stored>, rows: Vec<Row>, alone: bool) -> Result<usize> {
        let items: Vec<(u64, &[f32])> = stored
            .iter()
            .map(|s| (key_of(s.stamp), s.embedding.as_slice()))
            .collect();
        let added = match alone {
            true => self.insert_each(&items)?,
            false => {
                let mut progress =
                    Progress::new(format!("gallery: indexing {} faces", items.len()));
                let say = |line: &str| log::info!("{line}");
                let added = (self.index)
                    .insert_all(&items, &mut |done, total| progress.update(done, total, say))?;
                progress.finish(say);
                added
            }
        };
        let held: Vec<(Stamp, String)> = rows
            .into_iter()
            .filter(|r| self.index.contains(key_of(r.stamp)))
            .map(|r| (r.stamp, r.name))
            .collect();
        self.write().fill_stored(held);
        self.changes.fetch_add(added as u64, Ordering::Relaxed);
        Ok(added)
    }

    /// Each of `items` inserted alone, as a change while serving is (its
    /// stray checked): a load that took the saved strays. How many.
    fn insert_each(&self, items: &[(u64, &[f32])]) -> Result<usize> {
        let mut added = 0;
        for (key, vector) in items {
            added += usize::from(self.index.insert(*key, vector)?);
        }
        Ok(added)
    }

    /// Add a person seen in a gallery image. Not a change to save: a load
    /// takes every image out of the saved index and adds the folder's again
    /// (a photo gone is erased by the pass `removed` asks for).
    pub fn add_file(&self, name: &str, embedding: &[f32], file: &std::path::Path) -> Result<()> {
        let key = self.write().folder_key();
        // A saved index may hold an earlier load's image under this key.
        self.index.remove(key)?;
        self.index.insert(key, embedding)?;
        let mut entries = self.write();
        entries.insert_file(key, name, file);
        entries.add_to_folder_digest(embedding);
        Ok(())
    }

    /// This server's enrollments, just committed.
    pub fn add_own(&self, added: Vec<Stored>) -> Result<()> {
        for s in added {
            self.admit(s, |e, s| e.own_verdict(s.stamp, &s.name))?;
        }
        Ok(())
    }

    /// This server's FORGET, just committed at `change`.
    pub fn forget_own(&self, names: &[String], change: i64) -> Result<()> {
        let gone = self.write().forget_own(names, change);
        self.drop_vectors(gone)
    }

    /// Enrollments this server expired (`retention_days`), just committed.
    pub fn expire(&self, stamps: &[super::store::Stamp]) -> Result<()> {
        let gone = self.write().remove_stored(stamps);
        self.drop_vectors(gone)
    }

    /// Other servers' changes; enrollments beyond `max` entries are refused.
    /// On an error the caller reads the same changes again: what was applied
    /// is recognised by id and not applied twice.
    pub fn apply(&self, changes: Changes, max: usize) -> Result<Applied> {
        let (removed, gone) = self.write().apply_removals(&changes);
        self.drop_vectors(gone)?;
        let mut applied = Applied {
            removed,
            ..Applied::default()
        };
        for s in changes.enrolled {
            match self.admit(s, |e, s| e.followed_verdict(s.stamp, &s.name, max))? {
                Verdict::Admit => applied.added += 1,
                Verdict::Full => applied.refused += 1,
                Verdict::Present | Verdict::Unwanted => {}
            }
        }
        self.write().caught_up_to(changes.upto);
        Ok(applied)
    }

    /// Index `s`'s vector, then publish its entry, if `verdict` admits it
    /// both before and after (the follower and this server's own changes may
    /// race for the same row).
    fn admit(&self, s: Stored, verdict: impl Fn(&Entries, &Stored) -> Verdict) -> Result<Verdict> {
        let first = verdict(&self.read(), &s);
        if first != Verdict::Admit {
            return Ok(first);
        }
        let key = key_of(s.stamp);
        let inserted = self.index.insert(key, &s.embedding)?;
        if inserted {
            self.changed();
        }
        let last = {
            let mut e = self.write();
            let last = verdict(&e, &s);
            if last == Verdict::Admit {
                e.insert_stored(s.stamp, &s.name);
            }
            last
        };
        // Refused meanwhile: take back the vector this call put in (one that
        // was present is another call's, published by it).
        if inserted && matches!(last, Verdict::Unwanted | Verdict::Full) {
            self.index.remove(key)?;
            self.changed();
        }
        Ok(last)
    }

    fn drop_vectors(&self, keys: Vec<u64>) -> Result<()> {
        for key in keys {
            self.index.remove(key)?;
            self.changed();
            self.removed();
        }
        Ok(())
    }

    /// Up to `top_k` people nearest to `query`, nearest first, one entry per
    /// person (its nearest embedding), looked for as wide as `breadth`.
    pub fn nearest_people(
        &self,
        query: &[f32],
        top_k: usize,
        breadth: Breadth,
    ) -> Result<Vec<Candidate>> {
        let total = self.index.len();
        // Several embeddings of one person can fill the first hits: ask for
        // more until `top_k` people are found or the index has no more.
        let mut count = (top_k * 4).max(16);
        loop {
            let hits = match breadth {
                Breadth::Exact => self.index.nearest_exact(query, count.min(total))?,
                Breadth::Graph(wide) => self.index.nearest_wide(query, count.min(total), wide)?,
                Breadth::GraphThenSigns(within) => {
                    self.both_looks(query, count.min(total), within)?
                }
            };
            let people = self.people_in(&hits, top_k);
            if people.len() == top_k || hits.len() < count || count >= total {
                return Ok(people);
            }
            count *= 4;
        }
    }

    /// The first look, then the second when the first named no one within
    /// `within` (`VectorIndex::nearest_then_signs`), its scan begun beside
    /// the walk when a core is spare.
    fn both_looks(&self, query: &[f32], count: usize, within: f32) -> Result<Vec<Hit>> {
        let far = |hits: &[Hit]| hits.first().is_none_or(|h| h.distance > within);
        let hits = self
            .index
            .nearest_then_signs(query, count, spare_core(), far)?;
        // A nearest entry with no person (forgotten meanwhile, or not yet
        // published) names no one: look again, as for any unnamed face.
        let person = self.people_in(&hits, 1);
        if !far(&hits) && person.first().is_none_or(|p| p.distance > within) {
            return self.index.nearest_by_signs(query, count);
        }
        Ok(hits)
    }

    /// The nearest person, when a stray is proven the nearest entry of
    /// all within `within` (`VectorIndex::proven_nearest`); `None`: search.
    pub fn proven_person(&self, query: &[f32], within: f32) -> Result<Option<Candidate>> {
        let Some(hit) = self.index.proven_nearest(query, within)? else {
            return Ok(None);
        };
        Ok(self.people_in(&[hit], 1).pop())
    }

    /// Whether a search may miss (the graph, not a scan).
    pub fn approximate(&self) -> bool {
        self.index.approximate()
    }

    fn people_in(&self, hits: &[Hit], top_k: usize) -> Vec<Candidate> {
        let e = self.read();
        let mut people: Vec<Candidate> = Vec::with_capacity(top_k);
        for hit in hits {
            let Some(Entry { name, .. }) = e.get(hit.key) else {
                continue; // not published yet, or just forgotten
            };
            if people.iter().any(|p| *p.name == **name) {
                continue;
            }
            people.push(Candidate {
                name: name.to_string(),
                distance: hit.distance,
            });
            if people.len() == top_k {
                break;
            }
        }
        people
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gallery::store::{Removal, Stamp};

    fn s(id: i64, change: i64, name: &str) -> Stored {
        Stored {
            stamp: Stamp { id, change },
            name: name.into(),
            embedding: vec![id as f32],
        }
    }

    fn live(caught_up: i64, following: bool) -> Live {
        Live::new(Metric::Euclidean, 1, caught_up, following).unwrap()
    }

    /// (name, id) of every enrolled entry, with the index holding exactly
    /// their vectors.
    fn names(l: &Live) -> Vec<(String, i64)> {
        let e = l.read();
        let mut v: Vec<(String, i64)> = Vec::new();
        for (name, keys) in e.names() {
            for &k in keys {
                v.push((name.to_string(), k as i64));
                assert_eq!(l.index.vector(k), Some(vec![k as f32]), "{name} {k}");
            }
        }
        assert_eq!(l.index.len(), v.len(), "the index holds what is published");
        v.sort();
        v
    }

    fn changes(upto: i64, enrolled: Vec<Stored>, removed: &[(&str, i64)]) -> Changes {
        let removed = removed
            .iter()
            .map(|(n, c)| Removal {
                name: n.to_string(),
                before: *c,
            })
            .collect();
        Changes {
            upto,
            enrolled,
            removed,
        }
    }

    #[test]
    fn own_and_followed_changes_meet_once() {
        let l = live(0, true);
        l.apply(changes(1, vec![s(1, 1, "a")], &[]), 100).unwrap();
        l.add_own(vec![s(2, 2, "b")]).unwrap();
        // The follower reads the same row again: not added twice.
        let got = l.apply(changes(2, vec![s(2, 2, "b")], &[]), 100).unwrap();
        assert_eq!(got.added, 0);
        assert_eq!(names(&l), vec![("a".into(), 1), ("b".into(), 2)]);
        assert_eq!(l.read().keys_of("b"), &[2]);
    }

    #[test]
    fn an_older_enrollment_arriving_after_a_forget_stays_out() {
        // The follower's snapshot (up to 3) was read before this server's
        // FORGET of "a" at 4 committed, and applied after it.
        let l = live(2, true);
        l.forget_own(&["a".to_string()], 4).unwrap();
        let got = l.apply(changes(3, vec![s(3, 3, "a")], &[]), 100).unwrap();
        assert_eq!(got.added, 0);
        assert!(names(&l).is_empty());
        // Once caught up past it, the tombstone goes; newer ones are added.
        l.apply(changes(4, vec![], &[("a", 4)]), 100).unwrap();
        l.apply(changes(5, vec![s(5, 5, "a")], &[]), 100).unwrap();
        assert_eq!(names(&l), vec![("a".into(), 5)]);
    }

    #[test]
    fn an_own_enrollment_the_follower_saw_removed_stays_out() {
        // This server's ENROLL of "a" committed at 5; another server forgot
        // "a" at 6; the follower applied that before this server's own add.
        let l = live(4, true);
        l.apply(changes(6, vec![], &[("a", 6)]), 100).unwrap();
        l.add_own(vec![s(9, 5, "a")]).unwrap();
        assert!(names(&l).is_empty());
    }

    #[test]
    fn a_removal_keeps_newer_enrollments_and_counts() {
        let l = live(0, true);
        let first = vec![s(1, 1, "a"), s(2, 2, "a"), s(3, 4, "a")];
        l.apply(changes(4, first, &[]), 100).unwrap();
        let got = l.apply(changes(5, vec![], &[("a", 3)]), 100).unwrap();
        assert_eq!(got.removed, 2);
        assert_eq!(names(&l), vec![("a".into(), 3)]);
    }

    #[test]
    fn a_full_gallery_refuses_followed_enrollments() {
        let l = live(0, true);
        l.apply(changes(1, vec![s(1, 1, "a")], &[]), 100).unwrap();
        let got = l
            .apply(changes(3, vec![s(2, 2, "b"), s(3, 3, "c")], &[]), 2)
            .unwrap();
        assert_eq!((got.added, got.refused), (1, 1));
        assert_eq!(names(&l).len(), 2);
    }

    #[test]
    fn without_a_follower_no_tombstones_pile_up() {
        let l = live(0, false);
        l.add_own(vec![s(1, 1, "a")]).unwrap();
        l.forget_own(&["a".to_string()], 7).unwrap();
        assert!(names(&l).is_empty());
        l.add_own(vec![s(2, 2, "a")]).unwrap();
        assert_eq!(names(&l), vec![("a".into(), 2)]);
    }

    #[test]
    fn nearest_people_are_one_entry_per_person() {
        let l = live(0, false);
        let rows = [(1, "a"), (2, "a"), (3, "a"), (4, "b"), (10, "c")];
        l.add_own(rows.iter().map(|&(id, n)| s(id, id, n)).collect())
            .unwrap();
        let near = l.nearest_people(&[0.0], 2, Breadth::Graph(0)).unwrap();
        let got: Vec<(&str, f32)> = near.iter().map(|c| (c.name.as_str(), c.distance)).collect();
        assert_eq!(got, vec![("a", 1.0), ("b", 4.0)]);
        assert_eq!(
            l.nearest_people(&[0.0], 100, Breadth::Graph(0))
                .unwrap()
                .len(),
            3
        );
    }
}
