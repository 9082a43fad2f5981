//! The vector index saved beside the store, so that a large gallery starts
//! in seconds instead of rebuilding its graph (minutes for a million people).
//!
//! The file is a cache, never trusted over the store: the index is written
//! whole to a temporary file and renamed, then a manifest is written the same
//! way, last, with the index file's length and BLAKE3 hash, the embedder and
//! store it belongs to, and the keys (store rows) it holds. At load a file
//! whose manifest is missing or does not match (another embedder, a torn
//! write, a truncated or garbage file) is not used, and what is used is
//! reconciled with the store's rows (`super::Gallery::open`): a kill -9 at any
//! moment costs at most a rebuild.
//!
//! A store that servers share (PostgreSQL) also keeps a published copy of
//! both files: a server joining with an empty folder copies it here and
//! catches up from the store, instead of rebuilding the graph.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::entries::FOLDER_KEYS;
use super::index::VectorIndex;
use super::store::Store;
use super::wipe::{erase_file, overwrite};
use crate::error::{Error, Result};
use crate::metric::Metric;

/// Where the files of earlier builds were, one pair per folder: the first
/// load of their embedder takes them (`Saved::adopt`).
const LEGACY: &str = "gallery";
const INDEX: &str = "index";
const MANIFEST: &str = "index.json";
const LOCK: &str = "index.lock";
/// The digest of the gallery images this server last published.
const PUBLISHED: &str = "index.published";
const FORMAT: u32 = 1;
/// A published copy is replaced once it differs from the one saved here in
/// this many store rows: a joining server catches up at most about this
/// many insertions (seconds), and a gigabyte is not written for a handful.
pub const PUBLISH_AFTER: usize = 1_000;

/// What a saved index holds: checked before the file is used.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
pub struct Manifest {
    pub format: u32,
    /// The embedder and store the vectors came from.
    pub owner: String,
    pub bytes: u64,
    pub blake3: String,
    /// Store keys (row ids) held, as inclusive runs: ids come mostly in order.
    pub keys: Vec<(u64, u64)>,
    /// Keys of gallery images, all below this one, also held (replaced at
    /// every load).
    pub folder_keys_below: u64,
    /// What the gallery images' vectors are (`Entries::folder_digest`):
    /// a published copy of another is replaced, or a photo taken out of
    /// the folder would stay in it (absent in older manifests: replaced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    /// The strays counted over this graph, or a few changes ago (absent:
    /// count them at load).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strays: Option<StraysRecord>,
}

/// The record of a graph's strays in its manifest (the set itself:
/// `strays::Strays`), the link length beyond which a node was judged
/// isolated (`VectorIndex::find_strays`), and how many vectors went in or
/// out since they were counted (`VectorIndex::strays_to_save`): counting
/// them takes seconds at a million. Manifests of an older rule lack the
/// length (0): counted again.
#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
pub struct StraysRecord {
    pub keys: Vec<u64>,
    #[serde(default)]
    pub isolated_above: f32,
    /// The earlier rule's field, written as 0 so that a server of an older
    /// build (a rollback, or a fleet mid-upgrade reading the published
    /// copy) still reads the manifest instead of rebuilding the graph.
    #[serde(default)]
    typical: f32,
    /// Absent in manifests before 2026-11-28, whose strays were counted
    /// over the graph as saved.
    #[serde(default)]
    pub changed: u64,
}

impl StraysRecord {
    pub fn new(keys: Vec<u64>, isolated_above: f32, changed: u64) -> Self {
        StraysRecord {
            keys,
            isolated_above,
            typical: 0.0,
            changed,
        }
    }

    /// Counted by this build's rule.
    pub fn current(&self) -> bool {
        self.isolated_above > 0.0
    }
}

impl Manifest {
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.keys.iter().flat_map(|&(a, b)| a..=b)
    }
}

/// Inclusive runs of sorted keys.
pub fn runs(mut keys: Vec<u64>) -> Vec<(u64, u64)> {
    keys.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for k in keys {
        match out.last_mut() {
            Some((_, end)) if *end + 1 == k => *end = k,
            _ => out.push((k, k)),
        }
    }
    out
}

/// The name of `tag`'s saved index file (`Identity::tag`).
pub fn index_file_name(tag: &str) -> String {
    format!("{LEGACY}.{tag}.{INDEX}")
}

/// One embedder's saved index in a folder: `gallery.<tag>.index`, its
/// manifest `gallery.<tag>.index.json`. Models of one embedder on one folder
/// (a photo model and its camera twin) share them, taking turns through
/// `gallery.<tag>.index.lock`: every write, and every read of the files,
/// holds it, so no load or publish reads a file while another writes it.
pub struct Saved {
    dir: PathBuf,
    owner: String,
    /// `gallery.<tag>`.
    stem: String,
    /// The published copy was found unusable: replace it at the next publish.
    published_bad: AtomicBool,
}

impl Saved {
    pub fn new(dir: &Path, owner: String, tag: &str) -> Self {
        let saved = Saved {
            dir: dir.to_path_buf(),
            owner,
            stem: format!("{LEGACY}.{tag}"),
            published_bad: AtomicBool::new(false),
        };
        saved.adopt();
        saved
    }

    /// `gallery.<tag>.<part>` (`index`, `index.json`, `index.lock`).
    fn path(&self, part: &str) -> PathBuf {
        self.dir.join(format!("{}.{part}", self.stem))
    }

    /// The saved index file and its manifest, in a folder, for `tag`'s embedder.
    #[cfg(test)]
    pub fn files(dir: &Path, tag: &str) -> (PathBuf, PathBuf) {
        let stem = format!("{LEGACY}.{tag}");
        (
            dir.join(format!("{stem}.{INDEX}")),
            dir.join(format!("{stem}.{MANIFEST}")),
        )
    }

    /// Whether a saved index (or its manifest) is there at all.
    pub fn exists(&self) -> bool {
        self.path(INDEX).exists() || self.path(MANIFEST).exists()
    }

    /// Every key the saved index file holds, listed in its manifest or not.
    pub fn file_keys(&self) -> Result<Vec<u64>> {
        let _turn = self.turn();
        let path = self.path(INDEX);
        super::wipe::saved_keys(&path).map_err(|e| io(&path, e))
    }

    /// This embedder's turn with the files, until dropped: `None` where the
    /// folder has no lock to give (read-only: nothing is written there).
    fn turn(&self) -> Option<File> {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.path(LOCK))
            .ok()?;
        file.lock().ok()?;
        Some(file)
    }

    /// The pair an earlier build saved as `gallery.index` (one per folder),
    /// taken as this embedder's when its manifest names this owner and this
    /// embedder has none yet: a million people's graph is not built again
    /// after an upgrade. Another owner's pair is left for its own model.
    fn adopt(&self) {
        let (index, manifest) = (
            self.dir.join(format!("{LEGACY}.{INDEX}")),
            self.dir.join(format!("{LEGACY}.{MANIFEST}")),
        );
        let _turn = self.turn();
        let ours = fs::read(&manifest)
            .ok()
            .is_some_and(|text| self.parse(&text, "").is_ok());
        if !ours || self.exists() {
            return;
        }
        // The index first: a stop in between leaves a manifest-less file,
        // not used (built again), never a manifest over another file.
        let moved = fs::rename(&index, self.path(INDEX))
            .and_then(|()| fs::rename(&manifest, self.path(MANIFEST)));
        if let Err(e) = moved {
            log::warn!(
                "gallery: the index saved by an earlier version ({}) not taken: {e}",
                index.display()
            );
        }
    }

    /// The saved index and its manifest, when both are there and sound;
    /// `Err` says why the file is not used (for the log).
    pub fn load(&self, metric: Metric, dim: usize) -> Result<(VectorIndex, Manifest)> {
        // A killed writer's file goes now, even when nothing is saved: it
        // may be a gigabyte, and hold vectors since forgotten.
        let turn = self.turn();
        self.remove_orphans(turn.is_some());
        let manifest = self.manifest()?;
        let path = self.path(INDEX);
        let (bytes, hash) = hash_file(&path)?;
        if bytes != manifest.bytes || hash != manifest.blake3 {
            return Err(Error::unavailable(format!(
                "{} is not the file its manifest describes (torn write or damage)",
                path.display()
            )));
        }
        Ok((VectorIndex::load(&path, metric, dim)?, manifest))
    }

    fn manifest(&self) -> Result<Manifest> {
        let path = self.path(MANIFEST);
        let text = fs::read(&path).map_err(|e| io(&path, e))?;
        self.parse(&text, &path.display().to_string())
    }

    /// A manifest of this owner, from `text` (`what` names it in the error).
    fn parse(&self, text: &[u8], what: &str) -> Result<Manifest> {
        let m: Manifest =
            serde_json::from_slice(text).map_err(|e| Error::unavailable(format!("{what}: {e}")))?;
        if m.format != FORMAT || m.owner != self.owner {
            return Err(Error::unavailable(format!(
                "{what} belongs to another embedder or store ({})",
                m.owner
            )));
        }
        Ok(m)
    }

    /// A temporary file for `name`, named per process and per save: two
    /// servers on one folder, or two galleries of one folder in one server
    /// (a model reloaded while the old one saves as it unloads), never
    /// write the same file.
    fn tmp(&self, part: &str) -> PathBuf {
        static SAVES: AtomicU64 = AtomicU64::new(0);
        let n = SAVES.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!(
            "{}.{part}.{}.{n}.tmp",
            self.stem,
            std::process::id()
        ))
    }

    /// Write `index` (its gallery-image keys below `folder_keys_below`, their
    /// vectors' digest `folder`):
    /// the index first, the manifest last. The manifest lists the store
    /// rows the written file holds, read back from it: changes go on while
    /// it is written, and a vector the manifest did not list would outlive
    /// its row's FORGET in this file and in a published copy.
    pub fn save(&self, index: &VectorIndex, folder_keys_below: u64, folder: String) -> Result<()> {
        let turn = self.turn();
        self.remove_orphans(turn.is_some());
        let path = self.path(INDEX);
        let tmp = Temporary(self.tmp(INDEX));
        index.save(&tmp.0)?;
        sync(&tmp.0)?;
        let keys = super::wipe::saved_keys(&tmp.0).map_err(|e| io(&tmp.0, e))?;
        let keys = keys.into_iter().filter(|&k| k < FOLDER_KEYS).collect();
        let (bytes, blake3) = hash_file(&tmp.0)?;
        tmp.replace(&path)?;
        let strays = index
            .strays_to_save()
            .map(|(keys, isolated_above, changed)| {
                StraysRecord::new(keys, isolated_above, changed)
            });
        let manifest = Manifest {
            format: FORMAT,
            owner: self.owner.clone(),
            bytes,
            blake3,
            keys: runs(keys),
            folder_keys_below,
            folder: Some(folder),
            strays,
        };
        let text = serde_json::to_vec(&manifest).map_err(|e| Error::internal(e.to_string()))?;
        self.put_manifest(&text)
    }

    /// Record the strays counted at load in the manifest of the file they
    /// were counted on (the next load takes them instead of counting).
    pub fn record_strays(&self, strays: StraysRecord) -> Result<()> {
        let _turn = self.turn();
        let mut manifest = self.manifest()?;
        manifest.strays = Some(strays);
        let text = serde_json::to_vec(&manifest).map_err(|e| Error::internal(e.to_string()))?;
        self.put_manifest(&text)
    }

    /// Write the manifest (after its index file), durably (in the caller's
    /// turn).
    fn put_manifest(&self, text: &[u8]) -> Result<()> {
        let path = self.path(MANIFEST);
        let tmp = Temporary(self.tmp(MANIFEST));
        write_synced(&tmp.0, text)?;
        tmp.rename(&path)?;
        sync(&self.dir)
    }

    /// Copy the index published to `store` here, as the saved files (`load`
    /// then checks it like any other: if it fails, call `published_bad`).
    /// Whether there was one of this owner.
    pub fn fetch(&self, store: &mut dyn Store) -> Result<bool> {
        if !store.shares_index() {
            return Ok(false);
        }
        let turn = self.turn();
        self.remove_orphans(turn.is_some());
        let tmp = Temporary(self.tmp(INDEX));
        let mut out = BufWriter::new(File::create(&tmp.0).map_err(|e| io(&tmp.0, e))?);
        let Some(text) = store.fetch_index(&mut out)? else {
            return Ok(false);
        };
        out.flush().map_err(|e| io(&tmp.0, e))?;
        drop(out);
        self.parse(&text, "the index published to the store")?;
        sync(&tmp.0)?;
        tmp.replace(&self.path(INDEX))?;
        self.put_manifest(&text)?;
        Ok(true)
    }

    /// Publish the saved files to `store` for servers that join later,
    /// unless its copy differs from them in fewer than `PUBLISH_AFTER` rows.
    /// The bytes published, if it did. In this embedder's turn: no save
    /// overwrites the file while it is read.
    pub fn publish(&self, store: &mut dyn Store) -> Result<Option<u64>> {
        if !store.shares_index() {
            return Ok(None);
        }
        let _turn = self.turn();
        let ours = self.manifest()?;
        let replace = self.published_bad.load(Ordering::Relaxed);
        if let Some(text) = store.published_manifest()?.filter(|_| !replace) {
            let mine = fs::read_to_string(self.path(PUBLISHED)).ok();
            let theirs = self.parse(&text, "the published index");
            let keep = |t: &Manifest| {
                rows_apart(t, &ours) < PUBLISH_AFTER && !t.holds_gone(&ours, mine.as_deref())
            };
            if theirs.is_ok_and(|t| keep(&t)) {
                return Ok(None);
            }
        }
        let text = fs::read(self.path(MANIFEST)).map_err(|e| io(&self.dir, e))?;
        let path = self.path(INDEX);
        let mut file = File::open(&path).map_err(|e| io(&path, e))?;
        store.publish_index(&text, &mut file)?;
        self.published_bad.store(false, Ordering::Relaxed);
        if let Some(folder) = &ours.folder {
            // Which gallery images this server published (a hint: lost, the
            // next copy of others' is not replaced for its images alone).
            let _ = write_synced(&self.path(PUBLISHED), folder.as_bytes());
        }
        Ok(Some(ours.bytes))
    }

    /// The published copy could not be used (damaged, or not this owner's).
    pub fn published_bad(&self) {
        self.published_bad.store(true, Ordering::Relaxed);
    }
}

impl Manifest {
    /// Whether this (published) copy holds a row `ours` no longer has, one
    /// forgotten since (or one ours has not seen yet), or gallery images this
    /// server published (`mine`, their digest) and has since changed, or of
    /// a build that did not say which: a copy replaced, so that a forgotten
    /// person's vectors (or a photo's taken out of the folder) do not stay
    /// in the store. Another server's images are its to replace: a server
    /// that joined with other photos does not republish a gigabyte at every
    /// erasure pass.
    fn holds_gone(&self, ours: &Manifest, mine: Option<&str>) -> bool {
        let keys: HashSet<u64> = ours.keys().collect();
        let images_gone = self.folder.as_deref() == mine && self.folder != ours.folder;
        self.folder.is_none() || images_gone || self.keys().any(|k| !keys.contains(&k))
    }
}

/// Store rows one manifest holds and the other does not.
fn rows_apart(a: &Manifest, b: &Manifest) -> usize {
    let a: HashSet<u64> = a.keys().collect();
    let b: HashSet<u64> = b.keys().collect();
    a.symmetric_difference(&b).count()
}

impl Saved {
    /// Temporary files of processes that died while writing (a kill -9):
    /// a million people's index is a gigabyte left behind otherwise. With
    /// `all` (in this embedder's turn, which every writer takes), every one
    /// of this embedder's, whatever wrote it: pids are reused (a
    /// container's server is often pid 1 at every start).
    fn remove_orphans(&self, all: bool) {
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return;
        };
        for file in dir.flatten() {
            let name = file.file_name();
            let name = name.to_string_lossy();
            let Some((stem, pid)) = temporary_of(&name) else {
                continue;
            };
            let ours = all && stem == self.stem;
            if ours || !Path::new("/proc").join(pid.to_string()).exists() {
                let _ = erase_file(&file.path());
            }
        }
    }
}

/// A temporary file, removed when dropped unless renamed into place: a
/// save that fails at any step leaves nothing behind (it may hold vectors
/// of people forgotten since).
struct Temporary(PathBuf);

impl Temporary {
    /// Renamed over `to`, a file that held vectors: its bytes overwritten
    /// first, or the rename would free its blocks as they were.
    fn replace(self, to: &Path) -> Result<()> {
        match overwrite(to, 0) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(to, e)),
            _ => self.rename(to),
        }
    }

    fn rename(mut self, to: &Path) -> Result<()> {
        fs::rename(&self.0, to).map_err(|e| io(to, e))?;
        self.0 = PathBuf::new(); // in place: nothing to remove
        Ok(())
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() && erase_file(&self.0).is_err() {
            let _ = fs::remove_file(&self.0);
        }
    }
}

/// The saved-index file a temporary file is written for (`gallery.<tag>`,
/// or an earlier build's `gallery`) and its writer's pid, from its name
/// (`<stem>.index.<pid>.<n>.tmp`, `<stem>.index.json.<pid>.<n>.tmp`).
fn temporary_of(name: &str) -> Option<(&str, u32)> {
    let name = name.strip_suffix(".tmp")?;
    let (head, _n) = name.rsplit_once('.')?;
    let (head, pid) = head.rsplit_once('.')?;
    let stem = head
        .strip_suffix(&format!(".{MANIFEST}"))
        .or_else(|| head.strip_suffix(&format!(".{INDEX}")))?;
    (stem == LEGACY || stem.starts_with(&format!("{LEGACY}."))).then_some((stem, pid.parse().ok()?))
}

fn hash_file(path: &Path) -> Result<(u64, String)> {
    let mut file = File::open(path).map_err(|e| io(path, e))?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(|e| io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok((bytes, hasher.finalize().to_hex().to_string()))
}

fn write_synced(path: &Path, data: &[u8]) -> Result<()> {
    let mut f = File::create(path).map_err(|e| io(path, e))?;
    f.write_all(data).map_err(|e| io(path, e))?;
    f.sync_all().map_err(|e| io(path, e))
}

/// fsync a file or a folder (a rename is durable once its folder is).
fn sync(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io(path, e))
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::unavailable(format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: &str = "0123456789ab";

    fn saved_index(dir: &Path) -> (Saved, VectorIndex) {
        let index = VectorIndex::new(Metric::Euclidean, 2).unwrap();
        for k in [1u64, 2, 3, 7] {
            index.insert(k, &[k as f32, 0.0]).unwrap();
        }
        let saved = Saved::new(dir, "dlib/test".into(), TAG);
        saved.save(&index, 0, String::new()).unwrap();
        (saved, index)
    }

    fn index_file(dir: &Path) -> PathBuf {
        Saved::files(dir, TAG).0
    }

    #[test]
    fn a_saved_index_loads_with_its_keys() {
        let tmp = tempfile::tempdir().unwrap();
        saved_index(tmp.path());
        let (index, m) = Saved::new(tmp.path(), "dlib/test".into(), TAG)
            .load(Metric::Euclidean, 2)
            .unwrap();
        assert_eq!(m.keys, vec![(1, 3), (7, 7)]);
        assert_eq!(m.keys().collect::<Vec<_>>(), vec![1, 2, 3, 7]);
        assert_eq!(index.len(), 4);
        assert_eq!(index.nearest(&[6.9, 0.0], 1).unwrap()[0].key, 7);
    }

    #[test]
    fn embedders_on_one_folder_keep_their_own_files() {
        let tmp = tempfile::tempdir().unwrap();
        let (ours, index) = saved_index(tmp.path());
        let theirs = Saved::new(tmp.path(), "onnx/other".into(), "ba9876543210");
        let other = VectorIndex::new(Metric::Euclidean, 2).unwrap();
        other.insert(9, &[9.0, 9.0]).unwrap();
        theirs.save(&other, 0, String::new()).unwrap();
        ours.save(&index, 0, String::new()).unwrap();
        assert_eq!(
            theirs.load(Metric::Euclidean, 2).unwrap().1.keys,
            vec![(9, 9)]
        );
        assert_eq!(ours.load(Metric::Euclidean, 2).unwrap().0.len(), 4);
    }

    #[test]
    fn an_earlier_builds_file_is_taken_by_its_owner_alone() {
        let tmp = tempfile::tempdir().unwrap();
        saved_index(tmp.path());
        let (index, manifest) = Saved::files(tmp.path(), TAG);
        let legacy = |part: &str| tmp.path().join(format!("{LEGACY}.{part}"));
        fs::rename(&index, legacy(INDEX)).unwrap();
        fs::rename(&manifest, legacy(MANIFEST)).unwrap();
        let stranger = Saved::new(tmp.path(), "onnx/other".into(), "ba9876543210");
        assert!(
            !stranger.exists() && legacy(INDEX).exists(),
            "not its owner's"
        );
        let owner = Saved::new(tmp.path(), "dlib/test".into(), TAG);
        assert!(!legacy(INDEX).exists() && !legacy(MANIFEST).exists());
        assert_eq!(owner.load(Metric::Euclidean, 2).unwrap().0.len(), 4);
    }

    #[test]
    fn a_replaced_index_is_overwritten_before_its_blocks_go() {
        let tmp = tempfile::tempdir().unwrap();
        let (saved, index) = saved_index(tmp.path());
        // A handle on the old file: what its blocks hold once it is replaced.
        let mut old = File::open(index_file(tmp.path())).unwrap();
        index.remove(7).unwrap();
        saved.save(&index, 0, "other images".into()).unwrap();
        let mut bytes = Vec::new();
        old.read_to_end(&mut bytes).unwrap();
        assert!(!bytes.is_empty() && bytes.iter().all(|b| *b == 0));
    }

    #[test]
    fn a_published_copy_is_replaced_for_forgotten_rows_and_its_publishers_images() {
        let tmp = tempfile::tempdir().unwrap();
        let (saved, _) = saved_index(tmp.path());
        let ours = saved.manifest().unwrap();
        let mut theirs = saved.manifest().unwrap();
        assert!(!theirs.holds_gone(&ours, None));
        // Published by this server, its folder changed since: replaced.
        theirs.folder = Some("a photo since taken out".into());
        assert!(theirs.holds_gone(&ours, Some("a photo since taken out")));
        // Another server's images (it joined with other photos): its own.
        assert!(!theirs.holds_gone(&ours, Some("what this server published")));
        assert!(!theirs.holds_gone(&ours, None));
        theirs.folder = None; // an older build's copy
        assert!(theirs.holds_gone(&ours, None));
        // A row ours lacks (forgotten since): replaced, whoever published it.
        theirs.folder = ours.folder.clone();
        theirs.keys.push((1000, 1000));
        assert!(theirs.holds_gone(&ours, None));
    }

    #[test]
    fn temporary_files_of_dead_writers_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let file = |name: String| tmp.path().join(name);
        let stem = format!("{LEGACY}.{TAG}");
        // Ours, by a live pid (1): every writer takes the turn, so at a
        // load it is no one's (pids are reused: a container's server is pid 1).
        let ours_alive = file(format!("{stem}.{MANIFEST}.1.0.tmp"));
        // An earlier build's and another embedder's: only when their pid is dead.
        let legacy_dead = file(format!("{LEGACY}.{INDEX}.{}.0.tmp", u32::MAX - 1));
        let theirs_alive = file(format!("{LEGACY}.ba9876543210.{INDEX}.1.3.tmp"));
        let unknown = file(format!("{LEGACY}.{INDEX}.x.tmp"));
        for f in [&ours_alive, &legacy_dead, &theirs_alive, &unknown] {
            fs::write(f, b"partial").unwrap();
        }
        assert_eq!(
            temporary_of("gallery.index.json.42.0.tmp"),
            Some(("gallery", 42))
        );
        saved_index(tmp.path());
        assert!(!ours_alive.exists() && !legacy_dead.exists());
        assert!(theirs_alive.exists() && unknown.exists(), "not ours: kept");
    }

    #[test]
    fn a_failed_save_leaves_no_temporary_file() {
        let tmp = tempfile::tempdir().unwrap();
        let (saved, index) = saved_index(tmp.path());
        // The rename fails: a folder stands where the index goes.
        let path = index_file(tmp.path());
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        fs::write(path.join("x"), b"x").unwrap();
        assert!(saved.save(&index, 0, String::new()).is_err());
        let left: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_damaged_or_foreign_file_is_not_used() {
        let tmp = tempfile::tempdir().unwrap();
        saved_index(tmp.path());
        let other = Saved::new(tmp.path(), "onnx/other".into(), TAG);
        assert!(
            other.load(Metric::Euclidean, 2).is_err(),
            "another embedder"
        );
        let (path, manifest) = Saved::files(tmp.path(), TAG);
        let whole = fs::read(&path).unwrap();
        for damaged in [whole[..whole.len() / 2].to_vec(), vec![0xAB; whole.len()]] {
            fs::write(&path, &damaged).unwrap();
            let saved = Saved::new(tmp.path(), "dlib/test".into(), TAG);
            let e = saved.load(Metric::Euclidean, 2).err().expect("damaged");
            assert!(e.message().contains("manifest"), "{e}");
        }
        fs::remove_file(manifest).unwrap();
        assert!(Saved::new(tmp.path(), "dlib/test".into(), TAG)
            .load(Metric::Euclidean, 2)
            .is_err());
    }
}
