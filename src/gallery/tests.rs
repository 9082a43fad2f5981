use std::path::Path;

use super::store::{self, Identity};
use super::*;
use crate::error::ErrorKind;

/// A 2-d Euclidean gallery of at most `max` in `dir`, and what its open found.
fn opened(dir: &Path, max: usize) -> (Gallery, Opened) {
    let store = store::open_sqlite(dir, &Identity::for_tests("dlib", 2)).unwrap();
    Gallery::open(dir, store, Metric::Euclidean, 2, 0.6, max).unwrap()
}

/// The saved index and its manifest of `opened`'s galleries.
fn saved_files(dir: &Path) -> [std::path::PathBuf; 2] {
    let (index, manifest) = Saved::files(dir, &Identity::for_tests("dlib", 2).tag());
    [index, manifest]
}

fn gallery(dir: &Path, max: usize) -> Gallery {
    opened(dir, max).0
}

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| s.to_string()).collect()
}

fn one(name: &str, x: f32) -> super::Named {
    super::Named {
        name: name.to_string(),
        embedding: vec![x, x],
    }
}

#[test]
fn a_batch_is_one_write_and_a_bad_request_fails_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let g = gallery(tmp.path(), 3);
    let out = g.enroll_batch(vec![
        (vec![one("a", 0.0), one("b", 1.0)], None),
        (vec![one("c", 2.0), one("unknown", 3.0)], None),
        (vec![one("d", 4.0), one("e", 5.0)], None),
    ]);
    assert_eq!(out[0].as_ref().unwrap().len(), 2);
    assert!(out[1].is_err(), "a reserved name fails its whole request");
    let full = out[2].as_ref().unwrap_err();
    assert_eq!(full.kind(), ErrorKind::Unavailable);
    // Only the first request is stored, and it survives a reload.
    assert_eq!(g.len(), 2);
    assert_eq!(gallery(tmp.path(), 3).len(), 2);
}

#[test]
fn match_enroll_persist_reload() {
    let tmp = tempfile::tempdir().unwrap();
    let g = gallery(tmp.path(), 10);
    let none = Match::default();
    assert_eq!(g.best_match(&[0.0, 0.0], 0.6, 1).unwrap(), none);
    g.add_from_image("biden", vec![5.0, 5.0], &tmp.path().join("biden.jpg"))
        .unwrap();
    let same_photo = g.enroll("biden", vec![5.0, 5.0]).unwrap();
    assert!(!same_photo.added, "a duplicate of a gallery image");
    let r = g.enroll("obama", vec![0.0, 0.0]).unwrap();
    assert!(r.added);
    assert_eq!(r.gallery_size, 2);
    // The same face again is not stored twice.
    assert!(!g.enroll("obama", vec![0.001, 0.0]).unwrap().added);
    let m = g.best_match(&[0.3, 0.0], 0.6, 1).unwrap();
    assert_eq!(m.name.as_deref(), Some("obama"));
    assert!((m.distance.unwrap() - 0.3).abs() < 1e-6);
    assert_eq!(
        g.best_match(&[0.3, 0.0], 0.2, 1).unwrap().name,
        None,
        "a stricter threshold"
    );
    assert_eq!(g.best_match(&[2.0, 2.0], 0.6, 1).unwrap().name, None);
    // An enrollment's answer: the person's own embeddings only, as a search would.
    let own = g.match_person(&[0.001, 0.0], "obama", 0.6).unwrap();
    let searched = g.best_match(&[0.001, 0.0], 0.6, 1).unwrap();
    assert_eq!((own.name, own.distance), (searched.name, searched.distance));
    assert_eq!(
        g.match_person(&[5.0, 5.0], "nobody", 0.6).unwrap().distance,
        None
    );

    // Reload: enrollments survive, image entries are rebuilt by the loader.
    let again = gallery(tmp.path(), 10);
    assert_eq!(again.len(), 1);
    let m = again.best_match(&[0.0, 0.1], 0.6, 1).unwrap();
    assert_eq!(m.name.as_deref(), Some("obama"));
}

#[test]
fn full_gallery_refuses_and_keeps_state() {
    let tmp = tempfile::tempdir().unwrap();
    let g = gallery(tmp.path(), 1);
    g.enroll("a", vec![0.0, 0.0]).unwrap();
    let e = g.enroll("b", vec![3.0, 3.0]).unwrap_err();
    assert!(e.message().contains("max_gallery_size"));
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert_eq!(g.len(), 1);
}

#[test]
fn a_failed_write_leaves_the_gallery_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let g = gallery(tmp.path(), 10);
    g.enroll("a", vec![0.0, 0.0]).unwrap();
    // Another connection holds the write lock past the busy timeout.
    let other = rusqlite::Connection::open(tmp.path().join(store::sqlite::DB_FILE)).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let out = g.enroll_batch(vec![
        (vec![one("b", 3.0)], None),
        (vec![one("c", 6.0)], None),
    ]);
    assert!(out.iter().all(|r| r.is_err()), "{out:?}");
    assert_eq!(out[0].as_ref().unwrap_err().kind(), ErrorKind::Unavailable);
    assert_eq!(g.len(), 1);
    assert_eq!(g.best_match(&[3.0, 3.0], 0.6, 1).unwrap().name, None);
    other.execute_batch("ROLLBACK").unwrap();
    assert!(g.enroll("b", vec![3.0, 3.0]).unwrap().added);
}

#[test]
fn forget_removes_enrolled_faces_durably() {
    let tmp = tempfile::tempdir().unwrap();
    let g = gallery(tmp.path(), 10);
    g.enroll_batch(vec![(
        vec![one("a", 0.0), one("a", 1.0), one("b", 2.0)],
        None,
    )]);
    let f = g.forget(&names(&["a", "nobody"]), None).unwrap();
    assert_eq!((f[0].removed, f[0].gallery_size), (2, 1));
    assert_eq!(f[1].removed, 0, "an unknown name removes nothing");
    assert_eq!(g.best_match(&[0.0, 0.0], 0.6, 1).unwrap().name, None);
    assert!(
        g.enroll("a", vec![0.0, 0.0]).unwrap().added,
        "still seen as a duplicate"
    );
    g.forget(&names(&["a"]), None).unwrap();
    let again = gallery(tmp.path(), 10);
    assert_eq!(again.len(), 1);
    // The name can be enrolled again afterwards.
    assert!(again.enroll("a", vec![0.0, 0.0]).unwrap().added);
    let e = again.forget(&names(&["a", "unknown"]), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(again.len(), 2, "a request with a bad name forgets nothing");
}

#[test]
fn forget_refuses_a_name_known_only_from_the_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let g = gallery(tmp.path(), 10);
    g.add_from_image("bob", vec![0.0, 0.0], &tmp.path().join("bob/1.jpg"))
        .unwrap();
    g.add_from_image("bob", vec![1.0, 0.0], &tmp.path().join("bob/2.jpg"))
        .unwrap();
    g.enroll("al", vec![9.0, 9.0]).unwrap();
    let e = g.forget(&names(&["al", "bob"]), None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.message().contains("bob/1.jpg, bob/2.jpg"), "{e}");
    assert_eq!(g.len(), 3, "nothing of the request was forgotten");
    // Enrolled too: the enrolled faces go, the files are named as still there.
    g.enroll("bob", vec![5.0, 5.0]).unwrap();
    let f = g.forget(&names(&["bob"]), None).unwrap().remove(0);
    assert_eq!((f.removed, f.gallery_size), (1, 3));
    assert_eq!(f.folder_files, vec!["bob/1.jpg", "bob/2.jpg"]);
}

#[test]
fn people_lists_each_name_and_source() {
    let tmp = tempfile::tempdir().unwrap();
    let g = gallery(tmp.path(), 10);
    g.add_from_image("bob", vec![0.0, 0.0], &tmp.path().join("bob.jpg"))
        .unwrap();
    g.enroll_batch(vec![(
        vec![one("bob", 1.0), one("al", 2.0), one("al", 3.0)],
        None,
    )]);
    let (people, size) = g.people();
    let rows: Vec<_> = people
        .iter()
        .map(|p| (p.name.as_str(), p.embeddings, p.source))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("al", 2, Source::Enrolled),
            ("bob", 1, Source::Folder),
            ("bob", 1, Source::Enrolled)
        ]
    );
    assert_eq!(size, 4);
}

#[test]
fn the_index_is_saved_at_unload_and_reconciled_with_the_store_at_load() {
    let tmp = tempfile::tempdir().unwrap();
    let open = || opened(tmp.path(), 100);
    let (g, opened) = open();
    let Restored {
        from_file,
        added,
        removed,
        not_used,
        ..
    } = opened.index;
    assert!(
        !from_file && (added, removed) == (0, 0) && not_used.is_none(),
        "nothing saved yet"
    );
    g.enroll_batch(vec![(
        vec![one("a", 0.0), one("b", 1.0), one("c", 2.0)],
        None,
    )]);
    g.add_from_image("f", vec![9.0, 9.0], &tmp.path().join("f.jpg"))
        .unwrap();
    drop(g); // unload: saved
    let (g, opened) = open();
    assert!(opened.index.from_file && opened.index.not_used.is_none());
    assert_eq!(
        (
            opened.index.added,
            opened.index.removed,
            opened.index.images
        ),
        (0, 1, 1),
        "the image goes"
    );
    assert_eq!(g.best_match(&[9.0, 9.0], 0.6, 1).unwrap().name, None);
    // Changed, then killed before the unload could save: the file is stale.
    g.forget(&names(&["b"]), None).unwrap();
    g.enroll("d", vec![3.0, 3.0]).unwrap();
    std::mem::forget(g);
    let (g, opened) = open();
    assert!(opened.index.from_file);
    assert_eq!((opened.index.added, opened.index.removed), (1, 2));
    let who = |x: f32| g.best_match(&[x, x], 0.1, 1).unwrap().name;
    assert_eq!(
        [who(0.0), who(1.0), who(2.0), who(3.0)],
        [Some("a".into()), None, Some("c".into()), Some("d".into())]
    );
    drop(g);
    // A damaged file is not used, and says why; the store rebuilds it.
    std::fs::write(&saved_files(tmp.path())[0], b"garbage").unwrap();
    let (g, opened) = open();
    assert!(!opened.index.from_file);
    assert!(opened.index.not_used.unwrap().contains("manifest"));
    assert_eq!(opened.index.added, 3);
    assert_eq!(
        g.best_match(&[3.0, 3.0], 0.1, 1).unwrap().name.as_deref(),
        Some("d")
    );
}

#[test]
fn a_saved_vector_its_manifest_does_not_list_goes_at_load_once_its_row_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let open = || opened(tmp.path(), 100);
    let (g, _) = open();
    g.enroll("a", vec![0.0, 0.0]).unwrap();
    g.enroll("b", vec![4.0, 4.0]).unwrap();
    let (a, b) = (g.read().keys_of("a")[0], g.read().keys_of("b")[0]);
    // A file whose manifest lists a alone (an older build listed what the
    // entries held before the file was written: a save that raced b's
    // insertion). Then b's row goes, and the server is killed before
    // anything saves again.
    g.save_index().unwrap();
    std::mem::forget(g);
    let [_, manifest] = saved_files(tmp.path());
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    m["keys"] = serde_json::json!([[a, a]]);
    std::fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();
    let conn = rusqlite::Connection::open(tmp.path().join(store::sqlite::DB_FILE)).unwrap();
    conn.execute("DELETE FROM enrollments WHERE name = 'b'", [])
        .unwrap();
    let (g, opened) = open();
    assert!(opened.index.from_file, "{:?}", opened.index);
    assert_eq!((opened.index.forgotten, opened.index.removed), (1, 1));
    assert_eq!(g.best_match(&[4.0, 4.0], 0.1, 1).unwrap().name, None);
    let held = g.saved.file.file_keys().unwrap();
    assert!(!held.contains(&b), "written again without b: {held:?}");
    assert_eq!(held.len(), 1);
}

#[test]
fn a_moved_folder_keeps_its_index_and_another_store_does_not_take_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (first, moved, other) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    let open = |dir: &Path| opened(dir, 100);
    let (g, _) = open(&first);
    g.enroll("a", vec![1.0, 1.0]).unwrap();
    drop(g);
    std::fs::rename(&first, &moved).unwrap();
    let (_, opened) = open(&moved);
    assert!(opened.index.from_file, "{:?}", opened.index);
    // Another store (its own uid) with the same ids, given this index file: rebuilt.
    let (g, _) = open(&other);
    g.enroll("z", vec![5.0, 5.0]).unwrap();
    std::mem::forget(g); // no save of its own
    for (from, to) in saved_files(&moved).iter().zip(saved_files(&other)) {
        std::fs::copy(from, to).unwrap();
    }
    let (g, opened) = open(&other);
    assert!(opened.index.not_used.unwrap().contains("another"));
    assert_eq!(
        g.best_match(&[5.0, 5.0], 0.1, 1).unwrap().name.as_deref(),
        Some("z")
    );
}

/// "Embeds" a photo: its first byte as the face count, its second as the value.
fn fake_faces(calls: &std::cell::Cell<usize>) -> impl FnMut(&[u8]) -> Result<Vec<Vec<f32>>> + '_ {
    move |bytes| {
        calls.set(calls.get() + 1);
        Ok(vec![vec![f32::from(bytes[1]); 2]; usize::from(bytes[0])])
    }
}

#[test]
fn folder_photos_are_embedded_once_and_a_changed_or_removed_one_is_noticed() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |f: &str, b: &[u8]| std::fs::write(tmp.path().join(f), b).unwrap();
    write("alice.jpg", &[1, 3]);
    write("bob.png", &[1, 9]);
    write("group.jpg", &[3, 1]);
    let calls = std::cell::Cell::new(0);
    let load = |setup: &str| {
        let g = gallery(tmp.path(), 10);
        let load = g.load_folder(setup, fake_faces(&calls)).unwrap();
        assert!(load.cache_error.is_none());
        (g, load)
    };
    let (_, first) = load("s1");
    assert_eq!((first.added, first.embedded, first.cached), (2, 3, 0));
    assert!(
        first.skipped[0].1.contains("3 faces"),
        "{:?}",
        first.skipped
    );
    calls.set(0);
    let (g, again) = load("s1");
    assert_eq!(
        (again.added, again.embedded, again.cached, calls.get()),
        (2, 0, 3, 0)
    );
    assert_eq!(
        again.skipped.len(),
        1,
        "a cached face count skips the photo too"
    );
    assert_eq!(
        g.best_match(&[9.0, 9.0], 0.1, 1).unwrap().name.as_deref(),
        Some("bob")
    );
    drop(g);
    // bob's photo changes, the group photo goes: bob is embedded again, and
    // the group photo's row leaves the cache.
    write("bob.png", &[1, 7]);
    std::fs::remove_file(tmp.path().join("group.jpg")).unwrap();
    let (g, changed) = load("s1");
    assert_eq!((changed.embedded, changed.cached), (1, 1));
    assert_eq!(
        g.best_match(&[7.0, 7.0], 0.1, 1).unwrap().name.as_deref(),
        Some("bob")
    );
    let mut store = store::open_sqlite(tmp.path(), &Identity::for_tests("dlib", 2)).unwrap();
    assert_eq!(store.photos().unwrap().len(), 2);
    drop((g, store));
    // Another setup (a detector or its settings changed): everything again.
    let (_, other) = load("s2");
    assert_eq!((other.embedded, other.cached), (2, 0));
}

#[test]
fn changes_are_recorded_with_the_key_label_newest_first() {
    let tmp = tempfile::tempdir().unwrap();
    let g = gallery(tmp.path(), 10);
    let ops = Some("ops".to_string());
    g.enroll_batch(vec![
        (
            vec![one("a", 0.0), one("a", 1.0), one("b", 2.0)],
            ops.clone(),
        ),
        (vec![one("c", 3.0)], None),
    ]);
    g.enroll("a", vec![0.0, 0.0]).unwrap(); // a duplicate adds nothing: no record
    g.forget(&names(&["a", "nobody"]), Some("ci")).unwrap();
    let got: Vec<_> = g
        .changes(10)
        .unwrap()
        .into_iter()
        .map(|r| {
            let c = r.change;
            (c.operation.as_str(), c.name, c.count, c.by)
        })
        .collect();
    let label = |s: &str| Some(s.to_string());
    assert_eq!(
        got,
        vec![
            ("forget", "a".to_string(), 2, label("ci")),
            ("enroll", "c".to_string(), 1, None),
            ("enroll", "b".to_string(), 1, label("ops")),
            ("enroll", "a".to_string(), 2, label("ops")),
        ]
    );
    assert_eq!(g.changes(1).unwrap().len(), 1, "the limit holds");
}

/// `g`'s best match for `at`, once it is `want` (within `within`).
fn named_within(g: &Gallery, at: f32, want: Option<&str>, within: Duration) -> bool {
    let until = Instant::now() + within;
    loop {
        let m = g.best_match(&[at, at], 0.6, 1).unwrap();
        if m.name.as_deref() == want {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn models_on_one_folder_follow_each_others_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, opened) = opened(tmp.path(), 10);
    assert!(opened.following, "a SQLite gallery follows its folder");
    let b = gallery(tmp.path(), 10);
    // Each writes, the other sees it within the poll (100 ms here).
    a.enroll("ann", vec![1.0, 1.0]).unwrap();
    b.enroll("bob", vec![3.0, 3.0]).unwrap();
    let soon = Duration::from_secs(2);
    assert!(
        named_within(&b, 1.0, Some("ann"), soon),
        "b never saw a's ENROLL"
    );
    assert!(
        named_within(&a, 3.0, Some("bob"), soon),
        "a never saw b's ENROLL"
    );
    let removals = a.removals();
    b.forget(&names(&["ann"]), None).unwrap();
    assert!(
        named_within(&a, 1.0, None, soon),
        "a kept naming a person b forgot"
    );
    assert!(
        a.removals() > removals,
        "the eraser and the sequences hear of it"
    );
    // Enrolled again after the FORGET: the removal does not hide it.
    a.enroll("ann", vec![1.0, 1.0]).unwrap();
    assert!(named_within(&b, 1.0, Some("ann"), soon));
    assert!(named_within(&a, 1.0, Some("ann"), soon));
    assert_eq!((a.len(), b.len()), (2, 2));
}

#[test]
fn a_store_of_the_previous_schema_takes_change_numbers_above_its_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(store::sqlite::DB_FILE);
    {
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        // Version 3, the last before change numbers, with two rows.
        store::sqlite::schema::migrate_to(&mut conn, 3).unwrap();
        conn.execute_batch(
            "INSERT INTO embedders (id, engine, metric, dim, model_hash) VALUES (7, 'dlib', \
             'euclidean', 2, 'hash-of-dlib');
             INSERT INTO enrollments (embedder, name, embedding, enrolled_at_ms) VALUES \
             (7, 'old', X'0000803F0000803F', 0), (7, 'older', X'0000404000004040', 0);",
        )
        .unwrap();
    }
    let (g, opened) = opened(tmp.path(), 10);
    assert_eq!(opened.enrolled, 2);
    assert!(named_within(&g, 1.0, Some("old"), Duration::ZERO));
    g.enroll("new", vec![5.0, 5.0]).unwrap();
    g.forget(&names(&["old"]), None).unwrap();
    drop(g);
    let again = gallery(tmp.path(), 10);
    assert!(named_within(&again, 3.0, Some("older"), Duration::ZERO));
    assert!(named_within(&again, 5.0, Some("new"), Duration::ZERO));
    assert!(named_within(&again, 1.0, None, Duration::ZERO));
}
