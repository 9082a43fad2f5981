//! The gallery in memory: what matching reads, and how changes apply to it,
//! this server's own and other servers' (read by a follower) alike, in
//! whatever order they arrive. Three rules make the order not matter:
//! an enrollment already present (by id) is not added twice; a removal
//! removes its name's enrollments older than itself and leaves a tombstone,
//! so an older enrollment of that name arriving later is not added; and an
//! enrollment at or below the follower's caught-up change is the follower's
//! to add (it was read, or it is gone).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use super::store::{Changes, Stamp, Stored};

pub(super) struct Entry {
    pub name: String,
    pub embedding: Vec<f32>,
    pub origin: Origin,
}

pub(super) enum Origin {
    /// A gallery image: the file it came from.
    File(PathBuf),
    Store(Stamp),
}

impl Entry {
    pub fn stored(s: Stored) -> Self {
        Entry {
            name: s.name,
            embedding: s.embedding,
            origin: Origin::Store(s.stamp),
        }
    }

    fn stamp(&self) -> Option<Stamp> {
        match self.origin {
            Origin::Store(s) => Some(s),
            Origin::File(_) => None,
        }
    }
}

/// What applying other servers' changes did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub added: usize,
    pub removed: usize,
    /// Enrollments left out: the gallery was at max_gallery_size.
    pub refused: usize,
}

#[derive(Default)]
pub(super) struct Entries {
    pub from_images: Vec<Entry>,
    pub enrolled: Vec<Entry>,
    /// Entries per enrolled name: an ENROLL of a new name checks for
    /// duplicates without a scan, so its cost does not grow with the gallery.
    pub enrolled_names: HashMap<String, usize>,
    ids: HashSet<i64>,
    /// Followed stores: name -> the latest removal applied, until the
    /// follower has caught up past it.
    tombstones: HashMap<String, i64>,
    /// Followed stores: every change up to here has been read.
    caught_up: i64,
    following: bool,
}

impl Entries {
    pub fn new(enrolled: Vec<Stored>, caught_up: i64, following: bool) -> Self {
        let mut e = Entries {
            caught_up,
            following,
            ..Entries::default()
        };
        for s in enrolled {
            e.insert(Entry::stored(s));
        }
        e
    }

    pub fn len(&self) -> usize {
        self.from_images.len() + self.enrolled.len()
    }

    pub fn all(&self) -> impl Iterator<Item = &Entry> {
        self.from_images.iter().chain(self.enrolled.iter())
    }

    /// The entries called `name`: the gallery images (few, always scanned)
    /// and the enrolled ones, scanned only when the name is enrolled.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Entry> {
        let enrolled = if self.enrolled_names.contains_key(name) {
            &self.enrolled[..]
        } else {
            &[]
        };
        self.from_images
            .iter()
            .chain(enrolled)
            .filter(move |x| x.name == name)
    }

    /// This server's enrollments, just committed.
    pub fn add_own(&mut self, added: impl IntoIterator<Item = Stored>) {
        for s in added {
            if self.wanted(s.stamp, &s.name) && s.stamp.change > self.caught_up {
                self.insert(Entry::stored(s));
            }
        }
    }

    /// This server's FORGET, just committed at `change`. (Another server's
    /// newer enrollment of the name may already be here: it stays.)
    pub fn forget_own(&mut self, names: &[String], change: i64) {
        for name in names {
            self.remove(name, change);
            self.tombstone(name, change);
        }
    }

    /// Other servers' changes; enrollments beyond `max` entries are refused.
    pub fn apply(&mut self, changes: Changes, max: usize) -> Applied {
        let mut applied = Applied::default();
        for r in &changes.removed {
            applied.removed += self.remove(&r.name, r.change);
            self.tombstone(&r.name, r.change);
        }
        for s in changes.enrolled {
            if !self.wanted(s.stamp, &s.name) {
                continue;
            }
            if self.len() >= max {
                applied.refused += 1;
                continue;
            }
            self.insert(Entry::stored(s));
            applied.added += 1;
        }
        self.caught_up = self.caught_up.max(changes.upto);
        // Anything still to come is newer than these: they can go.
        let caught_up = self.caught_up;
        self.tombstones.retain(|_, change| *change > caught_up);
        applied
    }

    /// Not present yet and not removed by a later FORGET.
    fn wanted(&self, stamp: Stamp, name: &str) -> bool {
        !self.ids.contains(&stamp.id)
            && self
                .tombstones
                .get(name)
                .is_none_or(|&removed| removed < stamp.change)
    }

    fn insert(&mut self, entry: Entry) {
        if let Some(stamp) = entry.stamp() {
            self.ids.insert(stamp.id);
        }
        *self.enrolled_names.entry(entry.name.clone()).or_default() += 1;
        self.enrolled.push(entry);
    }

    /// Remove `name`'s enrollments older than change `before`; how many.
    fn remove(&mut self, name: &str, before: i64) -> usize {
        if !self.enrolled_names.contains_key(name) {
            return 0;
        }
        let (ids, names) = (&mut self.ids, &mut self.enrolled_names);
        let before_len = self.enrolled.len();
        self.enrolled.retain(|x| match x.stamp() {
            Some(s) if x.name == name && s.change < before => {
                ids.remove(&s.id);
                if let Some(n) = names.get_mut(name) {
                    *n -= 1;
                }
                false
            }
            _ => true,
        });
        if names.get(name) == Some(&0) {
            names.remove(name);
        }
        before_len - self.enrolled.len()
    }

    fn tombstone(&mut self, name: &str, change: i64) {
        if self.following && change > self.caught_up {
            let t = self.tombstones.entry(name.to_string()).or_default();
            *t = (*t).max(change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gallery::store::Removal;

    fn s(id: i64, change: i64, name: &str) -> Stored {
        Stored {
            stamp: Stamp { id, change },
            name: name.into(),
            embedding: vec![id as f32],
        }
    }

    fn names(e: &Entries) -> Vec<(String, i64)> {
        let mut v: Vec<_> = e
            .enrolled
            .iter()
            .map(|x| (x.name.clone(), x.stamp().unwrap().id))
            .collect();
        v.sort();
        v
    }

    fn changes(upto: i64, enrolled: Vec<Stored>, removed: &[(&str, i64)]) -> Changes {
        let removed = removed
            .iter()
            .map(|(n, c)| Removal {
                name: n.to_string(),
                change: *c,
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
        let mut e = Entries::new(vec![s(1, 1, "a")], 1, true);
        e.add_own(vec![s(2, 2, "b")]);
        // The follower reads the same row again: not added twice.
        let got = e.apply(changes(2, vec![s(2, 2, "b")], &[]), 100);
        assert_eq!(got.added, 0);
        assert_eq!(names(&e), vec![("a".into(), 1), ("b".into(), 2)]);
        assert_eq!(e.enrolled_names.get("b"), Some(&1));
    }

    #[test]
    fn an_older_enrollment_arriving_after_a_forget_stays_out() {
        // The follower's snapshot (up to 3) was read before this server's
        // FORGET of "a" at 4 committed, and applied after it.
        let mut e = Entries::new(vec![], 2, true);
        e.forget_own(&["a".to_string()], 4);
        let got = e.apply(changes(3, vec![s(3, 3, "a")], &[]), 100);
        assert_eq!(got.added, 0);
        assert!(names(&e).is_empty());
        // Once caught up past it, the tombstone goes; newer ones are added.
        e.apply(changes(4, vec![], &[("a", 4)]), 100);
        assert!(e.tombstones.is_empty());
        e.apply(changes(5, vec![s(5, 5, "a")], &[]), 100);
        assert_eq!(names(&e), vec![("a".into(), 5)]);
    }

    #[test]
    fn an_own_enrollment_the_follower_saw_removed_stays_out() {
        // This server's ENROLL of "a" committed at 5; another server forgot
        // "a" at 6; the follower applied that before this server's own add.
        let mut e = Entries::new(vec![], 4, true);
        e.apply(changes(6, vec![], &[("a", 6)]), 100);
        e.add_own(vec![s(9, 5, "a")]);
        assert!(names(&e).is_empty());
    }

    #[test]
    fn a_removal_keeps_newer_enrollments_and_counts() {
        let mut e = Entries::new(vec![s(1, 1, "a"), s(2, 2, "a"), s(3, 4, "a")], 4, true);
        let got = e.apply(changes(5, vec![], &[("a", 3)]), 100);
        assert_eq!(got.removed, 2);
        assert_eq!(names(&e), vec![("a".into(), 3)]);
        assert_eq!(e.enrolled_names.get("a"), Some(&1));
    }

    #[test]
    fn a_full_gallery_refuses_followed_enrollments() {
        let mut e = Entries::new(vec![s(1, 1, "a")], 1, true);
        let got = e.apply(changes(3, vec![s(2, 2, "b"), s(3, 3, "c")], &[]), 2);
        assert_eq!((got.added, got.refused), (1, 1));
        assert_eq!(e.len(), 2);
    }

    #[test]
    fn without_a_follower_no_tombstones_pile_up() {
        let mut e = Entries::new(vec![s(1, 1, "a")], 0, false);
        e.forget_own(&["a".to_string()], 7);
        assert!(e.tombstones.is_empty() && e.enrolled.is_empty());
        e.add_own(vec![s(2, 2, "a")]);
        assert_eq!(names(&e), vec![("a".into(), 2)]);
    }
}
