use std::path::Path;
use std::process::Command;

use super::sqlite::legacy::LEGACY_FILE;
use super::sqlite::{SqliteStore, DB_FILE};
use super::*;
use crate::error::ErrorKind;

fn open_as(dir: &Path, engine: &str) -> SqliteStore {
    SqliteStore::open(
        dir,
        &Identity::for_tests(engine, 2),
        Duration::from_millis(100),
    )
    .unwrap()
}

fn names(store: &mut SqliteStore) -> Vec<String> {
    store
        .load()
        .unwrap()
        .rows
        .into_iter()
        .map(|s| s.name)
        .collect()
}

fn pair(name: &str, x: f32) -> super::Named {
    super::Named {
        name: name.to_string(),
        embedding: vec![x, x],
    }
}

/// enrolled.json exactly as the old store wrote it.
fn old_store(engine: &str, metric: &str, entries: &[(&str, [f32; 2])]) -> String {
    let entries: Vec<_> = entries
        .iter()
        .map(|(n, e)| serde_json::json!({ "name": n, "embedding": e }))
        .collect();
    serde_json::json!({ "version": 1, "engine": engine, "metric": metric, "dim": 2,
                        "entries": entries })
    .to_string()
}

#[test]
fn blobs_round_trip_and_check_their_length() {
    let v = vec![0.5, -1.25, 3.0];
    assert_eq!(from_blob(&to_blob(&v), 3), Some(v));
    assert_eq!(from_blob(&[0; 11], 3), None);
}

#[test]
fn postgres_out_of_reach_fails_the_open_at_once() {
    let var = "FACE_TEST_UNREACHABLE_DSN";
    // Port 1 on loopback: refused at once, no waiting on a timeout.
    std::env::set_var(var, "postgresql://face:s3cret@127.0.0.1:1/face");
    let settings = PgSettings {
        dsn_env: var.into(),
        ..PgSettings::default()
    };
    let location = Location::Postgres {
        settings,
        gallery: "face".into(),
    };
    let e = open(&location, &Identity::for_tests("dlib", 2))
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(e.message().contains("cannot connect"), "{e}");
    assert!(e.message().contains(var), "{e}");
    assert!(!e.message().contains("s3cret"), "{e}");
}

#[test]
fn ids_grow_and_rows_of_another_embedder_are_kept_but_not_loaded() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dlib = open_as(tmp.path(), "dlib");
    let ids: Vec<i64> = dlib
        .add(&[pair("a", 0.0), pair("b", 1.0)], &[])
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    assert!(ids[0] < ids[1]);
    let mut onnx = open_as(tmp.path(), "onnx");
    let loaded = onnx.load().unwrap();
    assert!(loaded.rows.is_empty());
    assert_eq!(loaded.foreign, 2);
    let later = onnx.add(&[pair("c", 2.0)], &[]).unwrap();
    assert!(later[0].id > ids[1], "ids are shared and never go back");
    let loaded = open_as(tmp.path(), "dlib").load().unwrap();
    assert_eq!((loaded.rows.len(), loaded.foreign), (2, 1));
}

#[test]
fn an_add_is_all_or_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = open_as(tmp.path(), "dlib");
    let bad = super::Named {
        name: "b".into(),
        embedding: vec![1.0, 2.0, 3.0],
    };
    assert!(store.add(&[pair("a", 0.0), bad], &[]).is_err());
    assert!(names(&mut store).is_empty());
    assert!(names(&mut open_as(tmp.path(), "dlib")).is_empty());
}

/// A store in `dir` where dlib enrolled a twice and b, and onnx a once
/// (the last row's id): dlib's store.
fn two_embedders(dir: &Path) -> (SqliteStore, i64) {
    let mut dlib = open_as(dir, "dlib");
    dlib.add(&[pair("a", 0.0), pair("a", 1.0), pair("b", 2.0)], &[])
        .unwrap();
    let onnx = open_as(dir, "onnx").add(&[pair("a", 5.0)], &[]).unwrap();
    (dlib, onnx[0].id)
}

#[test]
fn expire_removes_every_embedders_old_rows_and_records_each_name() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut dlib, _) = two_embedders(tmp.path());
    let hour = std::time::Duration::from_secs(3600);
    assert_eq!(dlib.expire(hour).unwrap().rows, 0, "nothing that old");
    std::thread::sleep(std::time::Duration::from_millis(5));
    let expired = dlib.expire(std::time::Duration::ZERO).unwrap();
    assert_eq!(expired.ours.len(), 3, "this embedder's rows: {expired:?}");
    assert_eq!(expired.rows, 4, "every embedder's: {expired:?}");
    assert!(names(&mut open_as(tmp.path(), "onnx")).is_empty());
    let records = dlib.changes(10).unwrap();
    let expiries: Vec<(String, usize)> = records
        .iter()
        .map(|r| (r.change.name.clone(), r.change.count))
        .collect();
    assert!(records
        .iter()
        .all(|r| r.change.operation == super::Operation::Expire));
    assert_eq!(expiries.len(), 2, "{expiries:?}");
    assert!(expiries.contains(&("a".into(), 3)) && expiries.contains(&("b".into(), 1)));
}

#[test]
fn forget_removes_every_embedders_rows_and_logs_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut dlib, last) = two_embedders(tmp.path());
    let names_ = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let forgot = dlib.forget(&names_(&["a", "a", "zed"]), None).unwrap();
    assert_eq!(
        forgot.removed,
        vec![3, 0, 0],
        "a forgotten person is gone for all models"
    );
    assert_eq!(names(&mut open_as(tmp.path(), "dlib")), vec!["b"]);
    assert!(names(&mut open_as(tmp.path(), "onnx")).is_empty());
    let conn = rusqlite::Connection::open(tmp.path().join(DB_FILE)).unwrap();
    let log: Vec<(String, i64, i64)> = conn
        .prepare("SELECT name, last_enrollment, removed FROM removals")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        log,
        vec![("a".to_string(), last, 3)],
        "one removal, no-ops not logged"
    );
}

#[test]
fn the_wals_frames_are_zeroed_before_it_is_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = open_as(tmp.path(), "dlib");
    let x = 1234.5678f32;
    store.add(&[pair("a", x)], &[]).unwrap();
    let (db, wal) = (
        tmp.path().join(DB_FILE),
        tmp.path().join(format!("{DB_FILE}-wal")),
    );
    let holds = |path: &Path| {
        let bytes = std::fs::read(path).unwrap();
        bytes
            .windows(8)
            .any(|w| w[..4] == x.to_le_bytes() && w[4..] == x.to_le_bytes())
    };
    assert!(holds(&wal), "the enrollment's frame is in the WAL");
    store.forget(&["a".to_string()], None).unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    super::sqlite::zero_wal(&conn, &db).unwrap();
    let len = std::fs::metadata(&wal).unwrap().len();
    assert!(
        len > 32 && !holds(&wal),
        "frames still there, zeroed ({len} bytes)"
    );
    assert!(!holds(&db), "secure_delete zeroed the row in the database");
    store.erase().unwrap();
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0, "then truncated");
}

/// Another connection committing while the WAL is zeroed again and again
/// (a second model on the folder, a load's checkpoint): every committed row
/// is still there afterwards.
#[test]
fn zeroing_the_wal_never_costs_another_connections_commit() {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let store = open_as(tmp.path(), "dlib");
    let db = tmp.path().join(DB_FILE);
    let open = |db: &Path| {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .unwrap();
        // The interleaving is under test, not durability: without an fsync
        // per commit the counts below take seconds, not a loaded disk's minute.
        conn.pragma_update(None, "synchronous", "OFF").unwrap();
        conn
    };
    let (stop, committed) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicI64::new(0)),
    );
    let writer = {
        let (stop, committed, conn) = (stop.clone(), committed.clone(), open(&db));
        std::thread::spawn(move || {
            conn.execute_batch("CREATE TABLE other (n INTEGER)")
                .unwrap();
            let mut n = 0i64;
            while !stop.load(Ordering::Relaxed) {
                match conn.execute("INSERT INTO other (n) VALUES (?1)", [n]) {
                    Ok(_) => {
                        n += 1;
                        committed.store(n, Ordering::Relaxed);
                        // Both sides pause as real ones do: SQLite's busy
                        // handler polls, so a side that never lets go
                        // starves the other on a loaded machine.
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                    // SQLite may answer BUSY at once (not through the busy
                    // handler) while a RESTART checkpoint resets the WAL:
                    // nothing was committed, so the row is tried again.
                    Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            n
        })
    };
    let conn = open(&db);
    let (mut passes, mut failed, started) = (0, None, std::time::Instant::now());
    // Until enough of both, the writer failed (a commit lost to the zeroing
    // leaves the database malformed for it), or a minute passed.
    while (passes < 100 || committed.load(Ordering::Relaxed) < 2000)
        && !writer.is_finished()
        && started.elapsed() < std::time::Duration::from_secs(60)
    {
        match super::sqlite::zero_wal(&conn, &db) {
            Ok(()) => passes += 1,
            // A reader held the checkpoint back, or writes kept coming: the
            // next pass does it; what matters is that nothing is lost.
            Err(e) => failed = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer
        .join()
        .expect("the writer failed beside the zeroings");
    drop(store);
    let count: i64 = open(&db)
        .query_row("SELECT count(*) FROM other", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, written, "rows lost to {passes} zeroings");
    assert!(written >= 2000, "{written} rows");
    assert!(
        passes >= 100,
        "{passes} zeroings; the last error: {failed:?}"
    );
}

#[test]
fn an_acknowledged_add_survives_an_abort() {
    const VAR: &str = "FACE_STORE_ABORT_DIR";
    if let Some(dir) = std::env::var_os(VAR) {
        // The child: add, then die at once (no destructor, no checkpoint).
        open_as(Path::new(&dir), "dlib")
            .add(&[pair("kept", 1.0)], &[])
            .unwrap();
        std::process::abort();
    }
    let tmp = tempfile::tempdir().unwrap();
    let module = module_path!().split_once("::").unwrap().1;
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            &format!("{module}::an_acknowledged_add_survives_an_abort"),
            "--exact",
        ])
        .env(VAR, tmp.path())
        .output()
        .unwrap()
        .status;
    assert!(!status.success(), "the child was to abort after its add");
    assert_eq!(names(&mut open_as(tmp.path(), "dlib")), vec!["kept"]);
}

#[test]
fn an_old_enrolled_json_is_imported_once() {
    let tmp = tempfile::tempdir().unwrap();
    let json = old_store(
        "dlib",
        "euclidean",
        &[("obama", [0.0, 0.0]), ("joe", [1.0, 1.0])],
    );
    std::fs::write(tmp.path().join(LEGACY_FILE), &json).unwrap();
    let mut store = open_as(tmp.path(), "dlib");
    let loaded = store.load().unwrap();
    let migrated = loaded.migrated.unwrap();
    assert_eq!((migrated.entries, migrated.erased), (2, 1));
    assert!(!tmp.path().join(LEGACY_FILE).exists());
    assert_eq!(
        leftovers(tmp.path()),
        Vec::<String>::new(),
        "erased, not renamed"
    );
    assert_eq!(loaded.rows[1].embedding, vec![1.0, 1.0]);
    assert!(open_as(tmp.path(), "dlib")
        .load()
        .unwrap()
        .migrated
        .is_none());
    // A crash after the commit, before the erasure: the file is back.
    std::fs::write(tmp.path().join(LEGACY_FILE), &json).unwrap();
    // ... with what an older version left: the file renamed after its import.
    std::fs::write(tmp.path().join("enrolled.json.migrated.2"), &json).unwrap();
    let loaded = open_as(tmp.path(), "dlib").load().unwrap();
    assert_eq!(loaded.rows.len(), 2, "imported twice");
    let migrated = loaded.migrated.unwrap();
    assert_eq!((migrated.entries, migrated.erased), (0, 2));
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// Files of the old store left in `dir`.
fn leftovers(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(LEGACY_FILE))
        .collect()
}

#[test]
fn an_old_store_of_another_engine_is_kept_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let json = old_store("onnx", "cosine", &[("obama", [0.6, 0.8])]);
    std::fs::write(tmp.path().join(LEGACY_FILE), json).unwrap();
    let loaded = open_as(tmp.path(), "dlib").load().unwrap();
    assert!(loaded.rows.is_empty());
    assert_eq!(loaded.foreign, 1);
}

#[test]
fn a_corrupt_old_store_stops_the_load() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(LEGACY_FILE), b"{ half").unwrap();
    let e = SqliteStore::open(
        tmp.path(),
        &Identity::for_tests("dlib", 2),
        Duration::from_millis(100),
    )
    .err()
    .unwrap();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(e.message().contains("not a valid gallery store"), "{e}");
    assert!(tmp.path().join(LEGACY_FILE).exists(), "left in place");
}
