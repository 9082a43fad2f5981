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

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::index::VectorIndex;
use crate::error::{Error, Result};
use crate::pipeline::Metric;

pub const INDEX_FILE: &str = "gallery.index";
pub const MANIFEST_FILE: &str = "gallery.index.json";
const FORMAT: u32 = 1;

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

pub struct Saved {
    dir: PathBuf,
    owner: String,
}

impl Saved {
    pub fn new(dir: &Path, owner: String) -> Self {
        Saved {
            dir: dir.to_path_buf(),
            owner,
        }
    }

    /// Whether a saved index (or its manifest) is there at all.
    pub fn exists(&self) -> bool {
        self.dir.join(INDEX_FILE).exists() || self.dir.join(MANIFEST_FILE).exists()
    }

    /// The saved index and its manifest, when both are there and sound;
    /// `Err` says why the file is not used (for the log).
    pub fn load(&self, metric: Metric, dim: usize) -> Result<(VectorIndex, Manifest)> {
        let manifest = self.manifest()?;
        let path = self.dir.join(INDEX_FILE);
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
        let path = self.dir.join(MANIFEST_FILE);
        let text = fs::read(&path).map_err(|e| io(&path, e))?;
        let m: Manifest = serde_json::from_slice(&text)
            .map_err(|e| Error::unavailable(format!("{}: {e}", path.display())))?;
        if m.format != FORMAT || m.owner != self.owner {
            return Err(Error::unavailable(format!(
                "{} belongs to another embedder or store ({})",
                path.display(),
                m.owner
            )));
        }
        Ok(m)
    }

    /// Write `index` holding `keys` (and gallery-image keys below
    /// `folder_keys_below`): the index first, the manifest last.
    pub fn save(&self, index: &VectorIndex, keys: Vec<u64>, folder_keys_below: u64) -> Result<()> {
        self.remove_orphans();
        let path = self.dir.join(INDEX_FILE);
        // Named per process: two servers on one folder never write one file.
        let tmp = self
            .dir
            .join(format!("{INDEX_FILE}.{}.tmp", std::process::id()));
        index.save(&tmp)?;
        sync(&tmp)?;
        let (bytes, blake3) = hash_file(&tmp)?;
        fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
        let manifest = Manifest {
            format: FORMAT,
            owner: self.owner.clone(),
            bytes,
            blake3,
            keys: runs(keys),
            folder_keys_below,
        };
        let text = serde_json::to_vec(&manifest).map_err(|e| Error::internal(e.to_string()))?;
        let path = self.dir.join(MANIFEST_FILE);
        let tmp = self
            .dir
            .join(format!("{MANIFEST_FILE}.{}.tmp", std::process::id()));
        write_synced(&tmp, &text)?;
        fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
        sync(&self.dir)
    }
}

impl Saved {
    /// Temporary files of processes that died while writing (a kill -9):
    /// a million people's index is a gigabyte left behind otherwise.
    fn remove_orphans(&self) {
        let Ok(dir) = fs::read_dir(&self.dir) else {
            return;
        };
        for file in dir.flatten() {
            let name = file.file_name();
            let Some(pid) = orphan_pid(&name.to_string_lossy()) else {
                continue;
            };
            if !Path::new("/proc").join(pid.to_string()).exists() {
                let _ = fs::remove_file(file.path());
            }
        }
    }
}

/// The writer's pid in a temporary file's name (`gallery.index.<pid>.tmp`).
fn orphan_pid(name: &str) -> Option<u32> {
    [INDEX_FILE, MANIFEST_FILE].iter().find_map(|f| {
        let middle = name
            .strip_prefix(f)?
            .strip_prefix('.')?
            .strip_suffix(".tmp")?;
        middle.parse().ok()
    })
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

    fn saved_index(dir: &Path) -> (Saved, VectorIndex) {
        let index = VectorIndex::new(Metric::Euclidean, 2).unwrap();
        for k in [1u64, 2, 3, 7] {
            index.insert(k, &[k as f32, 0.0]).unwrap();
        }
        let saved = Saved::new(dir, "dlib/test".into());
        saved.save(&index, vec![7, 1, 3, 2], 0).unwrap();
        (saved, index)
    }

    #[test]
    fn a_saved_index_loads_with_its_keys() {
        let tmp = tempfile::tempdir().unwrap();
        saved_index(tmp.path());
        let (index, m) = Saved::new(tmp.path(), "dlib/test".into())
            .load(Metric::Euclidean, 2)
            .unwrap();
        assert_eq!(m.keys, vec![(1, 3), (7, 7)]);
        assert_eq!(m.keys().collect::<Vec<_>>(), vec![1, 2, 3, 7]);
        assert_eq!(index.len(), 4);
        assert_eq!(index.nearest(&[6.9, 0.0], 1).unwrap()[0].key, 7);
    }

    #[test]
    fn temporary_files_of_dead_writers_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let dead = tmp
            .path()
            .join(format!("{INDEX_FILE}.{}.tmp", u32::MAX - 1));
        let alive = tmp.path().join(format!("{MANIFEST_FILE}.1.tmp"));
        let other = tmp.path().join("gallery.index.x.tmp");
        for f in [&dead, &alive, &other] {
            fs::write(f, b"partial").unwrap();
        }
        saved_index(tmp.path());
        assert!(!dead.exists() && alive.exists() && other.exists());
        assert_eq!(orphan_pid("gallery.index.json.42.tmp"), Some(42));
    }

    #[test]
    fn a_damaged_or_foreign_file_is_not_used() {
        let tmp = tempfile::tempdir().unwrap();
        saved_index(tmp.path());
        let other = Saved::new(tmp.path(), "onnx/other".into());
        assert!(
            other.load(Metric::Euclidean, 2).is_err(),
            "another embedder"
        );
        let path = tmp.path().join(INDEX_FILE);
        let whole = fs::read(&path).unwrap();
        for damaged in [whole[..whole.len() / 2].to_vec(), vec![0xAB; whole.len()]] {
            fs::write(&path, &damaged).unwrap();
            let saved = Saved::new(tmp.path(), "dlib/test".into());
            let e = saved.load(Metric::Euclidean, 2).err().expect("damaged");
            assert!(e.message().contains("manifest"), "{e}");
        }
        fs::remove_file(tmp.path().join(MANIFEST_FILE)).unwrap();
        assert!(Saved::new(tmp.path(), "dlib/test".into())
            .load(Metric::Euclidean, 2)
            .is_err());
    }
}
