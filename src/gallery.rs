//! Known people: embeddings with names, shared by a model's instances behind a
//! read-mostly lock. Two sources: images in the gallery folder (read at model
//! load) and run-time enrollments, persisted in `enrolled.json` in the same
//! folder. The store is replaced atomically (temp file, fsync, rename, fsync
//! of the folder), so a crash at any moment leaves either the old or the new
//! store, and an acknowledged enrollment is on disk.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::pipeline::Metric;

pub const STORE_FILE: &str = "enrolled.json";
const STORE_VERSION: u32 = 1;
/// A re-enrollment this close to an existing embedding of the same name is
/// the same photo again and is not stored twice.
const DUPLICATE_DISTANCE: f32 = 0.01;
pub const MAX_NAME_CHARS: usize = 64;

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

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Entry {
    name: String,
    embedding: Vec<f32>,
}

#[derive(Serialize, Deserialize)]
struct StoreFile {
    version: u32,
    engine: String,
    metric: String,
    dim: usize,
    entries: Vec<Entry>,
}

#[derive(Default)]
struct Entries {
    /// From gallery images; rebuilt at every load, never written.
    from_images: Vec<Entry>,
    /// Enrolled at run time; mirrored in the store file.
    enrolled: Vec<Entry>,
}

pub struct Gallery {
    dir: PathBuf,
    engine: String,
    metric: Metric,
    dim: usize,
    threshold: f32,
    max_size: usize,
    entries: RwLock<Entries>,
}

/// Words the JSON answers give a meaning of their own: a person enrolled as
/// "unknown" could not be told from no match.
pub const RESERVED_NAMES: &[&str] = &["unknown", "null"];

/// Validate a person's name: 1-64 characters, letters, digits, space, `_`,
/// `-`, `.`, and not starting with `.` or space (names become file names in
/// user tooling; nothing here may look like a path); not a reserved word.
pub fn validate_name(name: &str) -> Result<()> {
    if let Some(word) = RESERVED_NAMES.iter().find(|w| name.eq_ignore_ascii_case(w)) {
        return Err(Error::invalid(format!(
            "ENROLL: the name {name:?} is reserved (the answers use \"{word}\" for a face that \
             matches nobody); choose another name"
        )));
    }
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_NAME_CHARS {
        return Err(Error::invalid(format!(
            "ENROLL: name must have 1 to {MAX_NAME_CHARS} characters, got {chars}"
        )));
    }
    if name.starts_with(['.', ' ']) || name.ends_with(' ') {
        return Err(Error::invalid(format!(
            "ENROLL: name {name:?} must not start with '.' or start/end with a space"
        )));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_alphanumeric() || matches!(c, ' ' | '_' | '-' | '.')))
    {
        return Err(Error::invalid(format!(
            "ENROLL: name {name:?} has the character {bad:?}; use letters, digits, space, '_', '-', '.'"
        )));
    }
    Ok(())
}

impl Gallery {
    /// An empty gallery living in `dir`, with its enrolled store loaded.
    /// A store that cannot be read is an error, never silently dropped.
    pub fn open(
        dir: &Path,
        engine: &str,
        metric: Metric,
        dim: usize,
        threshold: f32,
        max_size: usize,
    ) -> Result<Self> {
        let gallery = Gallery {
            dir: dir.to_path_buf(),
            engine: engine.to_string(),
            metric,
            dim,
            threshold,
            max_size,
            entries: RwLock::new(Entries::default()),
        };
        let enrolled = gallery.read_store()?;
        if enrolled.len() > max_size {
            return Err(Error::unavailable(format!(
                "{}: {} enrolled faces exceed max_gallery_size = {max_size}",
                gallery.store_path().display(),
                enrolled.len()
            )));
        }
        gallery.write().enrolled = enrolled;
        Ok(gallery)
    }

    // A panic elsewhere while a lock was held cannot leave the entries half
    // changed (they change only after the store is written), so a poisoned
    // lock is still safe to use.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Entries> {
        self.entries.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Entries> {
        self.entries.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn metric(&self) -> Metric {
        self.metric
    }

    pub fn threshold(&self) -> f32 {
        self.threshold
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn store_path(&self) -> PathBuf {
        self.dir.join(STORE_FILE)
    }

    pub fn len(&self) -> usize {
        let e = self.read();
        e.from_images.len() + e.enrolled.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Add a person seen in a gallery image (model load).
    pub fn add_from_image(&self, name: &str, embedding: Vec<f32>) -> Result<()> {
        self.check_dim(&embedding)?;
        let mut e = self.write();
        if e.from_images.len() + e.enrolled.len() >= self.max_size {
            return Err(Error::unavailable(format!(
                "gallery is full (max_gallery_size = {})",
                self.max_size
            )));
        }
        e.from_images.push(Entry {
            name: name.to_string(),
            embedding,
        });
        Ok(())
    }

    /// The nearest person to `embedding`.
    pub fn best_match(&self, embedding: &[f32]) -> Match {
        let e = self.read();
        let best = e
            .from_images
            .iter()
            .chain(e.enrolled.iter())
            .map(|entry| (entry, self.metric.distance(&entry.embedding, embedding)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        match best {
            None => Match {
                name: None,
                distance: None,
            },
            Some((entry, d)) => Match {
                name: (d <= self.threshold).then(|| entry.name.clone()),
                distance: Some(d),
            },
        }
    }

    /// Enroll `embedding` under `name` and persist it before returning.
    /// On any failure the gallery is unchanged.
    pub fn enroll(&self, name: &str, embedding: Vec<f32>) -> Result<Enrolled> {
        let mut out = self.enroll_batch(vec![vec![(name.to_string(), embedding)]]);
        out.pop()
            .expect("one result per request")
            .map(|mut e| e.remove(0))
    }

    /// Enroll the faces of several requests with ONE store write: each
    /// request's names go in together or not at all (a request that is
    /// invalid or does not fit fails alone), and nothing is acknowledged
    /// before the write. If the write fails, every request that was to be
    /// written fails with it and the gallery is unchanged.
    pub fn enroll_batch(
        &self,
        requests: Vec<Vec<(String, Vec<f32>)>>,
    ) -> Vec<Result<Vec<Enrolled>>> {
        let mut e = self.write();
        let mut next = e.enrolled.clone();
        let mut results: Vec<Result<Vec<Enrolled>>> = requests
            .into_iter()
            .map(|faces| self.stage(&e.from_images, &mut next, faces))
            .collect();
        if next.len() != e.enrolled.len() {
            if let Err(err) = self.write_store(&next) {
                for r in results
                    .iter_mut()
                    .filter(|r| r.as_ref().is_ok_and(|v| v.iter().any(|x| x.added)))
                {
                    *r = Err(err.clone());
                }
                return results;
            }
            e.enrolled = next;
        }
        results
    }

    /// Add one request's faces to `next` (the enrolled list being built), all
    /// or none.
    fn stage(
        &self,
        from_images: &[Entry],
        next: &mut Vec<Entry>,
        faces: Vec<(String, Vec<f32>)>,
    ) -> Result<Vec<Enrolled>> {
        let before = next.len();
        let mut done = Vec::with_capacity(faces.len());
        for (name, embedding) in faces {
            let staged = self.stage_one(from_images, next, name, embedding);
            match staged {
                Ok(enrolled) => done.push(enrolled),
                Err(err) => {
                    next.truncate(before);
                    return Err(err);
                }
            }
        }
        Ok(done)
    }

    fn stage_one(
        &self,
        from_images: &[Entry],
        next: &mut Vec<Entry>,
        name: String,
        embedding: Vec<f32>,
    ) -> Result<Enrolled> {
        validate_name(&name)?;
        self.check_dim(&embedding)?;
        let size = from_images.len() + next.len();
        let duplicate = from_images.iter().chain(next.iter()).any(|x| {
            x.name == name && self.metric.distance(&x.embedding, &embedding) < DUPLICATE_DISTANCE
        });
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
        next.push(Entry {
            name: name.clone(),
            embedding,
        });
        Ok(Enrolled {
            name,
            added: true,
            gallery_size: size + 1,
        })
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

    fn read_store(&self) -> Result<Vec<Entry>> {
        let path = self.store_path();
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::unavailable(format!("{}: {e}", path.display()))),
        };
        let store: StoreFile = serde_json::from_slice(&bytes).map_err(|e| {
            Error::unavailable(format!(
                "{}: not a valid gallery store ({e}); move it away to start with an empty one",
                path.display()
            ))
        })?;
        if store.version != STORE_VERSION
            || store.engine != self.engine
            || store.metric != self.metric.name()
            || store.dim != self.dim
        {
            return Err(Error::unavailable(format!(
                "{}: store is version {} of engine {} ({}, {}-d); this model needs version {STORE_VERSION} \
                 of engine {} ({}, {}-d)",
                path.display(),
                store.version,
                store.engine,
                store.metric,
                store.dim,
                self.engine,
                self.metric.name(),
                self.dim
            )));
        }
        if let Some(bad) = store.entries.iter().find(|e| e.embedding.len() != self.dim) {
            return Err(Error::unavailable(format!(
                "{}: entry {:?} has {} values, expected {}",
                path.display(),
                bad.name,
                bad.embedding.len(),
                self.dim
            )));
        }
        Ok(store.entries)
    }

    fn write_store(&self, entries: &[Entry]) -> Result<()> {
        let store = StoreFile {
            version: STORE_VERSION,
            engine: self.engine.clone(),
            metric: self.metric.name().to_string(),
            dim: self.dim,
            entries: entries.to_vec(),
        };
        let bytes = serde_json::to_vec(&store).map_err(|e| Error::internal(e.to_string()))?;
        write_atomically(&self.store_path(), &bytes)
            .map_err(|e| Error::unavailable(format!("cannot save the gallery store: {e}")))
    }
}

/// Replace `path` with `bytes` so that readers and crashes see the old or the
/// new content, never a mix: temp file in the same folder, fsync, rename,
/// fsync the folder (makes the rename itself durable).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("store");
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Gallery images in `dir`: `name.jpg` or `name/*.jpg`, as (name, path),
/// sorted for a stable load order. Hidden files and the store are skipped.
pub fn gallery_images(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    fn is_image(p: &Path) -> bool {
        p.is_file()
            && p.extension()
                .and_then(|e| e.to_str())
                .map(|e| {
                    matches!(
                        e.to_ascii_lowercase().as_str(),
                        "jpg" | "jpeg" | "png" | "webp" | "bmp"
                    )
                })
                .unwrap_or(false)
    }
    fn visible(p: &Path) -> Option<String> {
        let n = p.file_name()?.to_str()?;
        (!n.starts_with('.')).then(|| n.to_string())
    }
    let mut out = Vec::new();
    let read = |d: &Path| {
        fs::read_dir(d)
            .map_err(|e| Error::unavailable(format!("gallery folder {}: {e}", d.display())))
    };
    if !dir.exists() {
        return Ok(out);
    }
    for entry in read(dir)? {
        let path = entry.map_err(|e| Error::unavailable(e.to_string()))?.path();
        let Some(name) = visible(&path) else {
            continue;
        };
        if path.is_dir() {
            for inner in read(&path)? {
                let p = inner.map_err(|e| Error::unavailable(e.to_string()))?.path();
                if visible(&p).is_some() && is_image(&p) {
                    out.push((name.clone(), p));
                }
            }
        } else if is_image(&path) {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_string();
            out.push((stem, path));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gallery(dir: &Path, max: usize) -> Gallery {
        Gallery::open(dir, "dlib", Metric::Euclidean, 2, 0.6, max).unwrap()
    }

    #[test]
    fn names() {
        for ok in [
            "alice",
            "Bob Smith",
            "o'neil".replace('\'', "_").as_str(),
            "jean-luc.p",
            "Zoë",
        ] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".hidden",
            "../etc",
            "a/b",
            " pad",
            "x\u{0}",
            &"n".repeat(65),
            "tab\t",
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reserved_words_are_refused() {
        for word in ["unknown", "Unknown", "NULL"] {
            let e = validate_name(word).unwrap_err();
            assert!(e.message().contains("reserved"), "{e}");
        }
        assert!(validate_name("unknown person").is_ok());
    }

    #[test]
    fn a_batch_is_one_write_and_a_bad_request_fails_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let g = gallery(tmp.path(), 3);
        let one = |n: &str, x: f32| (n.to_string(), vec![x, x]);
        let out = g.enroll_batch(vec![
            vec![one("a", 0.0), one("b", 1.0)],
            vec![one("c", 2.0), one("unknown", 3.0)],
            vec![one("d", 4.0), one("e", 5.0)],
        ]);
        assert_eq!(out[0].as_ref().unwrap().len(), 2);
        assert!(out[1].is_err(), "a reserved name fails its whole request");
        let full = out[2].as_ref().unwrap_err();
        assert_eq!(full.kind(), crate::error::ErrorKind::Unavailable);
        // Only the first request is stored, and it survives a reload.
        assert_eq!(g.len(), 2);
        assert_eq!(gallery(tmp.path(), 3).len(), 2);
    }

    #[test]
    fn a_failed_batch_write_stores_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let g = gallery(&tmp.path().join("gone"), 10);
        std::fs::write(
            tmp.path().join("gone"),
            b"a file where the folder should be",
        )
        .unwrap();
        let out = g.enroll_batch(vec![
            vec![("a".into(), vec![0.0, 0.0])],
            vec![("b".into(), vec![1.0, 1.0])],
        ]);
        assert!(out.iter().all(|r| r.is_err()));
        assert_eq!(g.len(), 0);
    }

    #[test]
    fn match_enroll_persist_reload() {
        let tmp = tempfile::tempdir().unwrap();
        let g = gallery(tmp.path(), 10);
        assert_eq!(
            g.best_match(&[0.0, 0.0]),
            Match {
                name: None,
                distance: None
            }
        );
        g.add_from_image("biden", vec![5.0, 5.0]).unwrap();
        let r = g.enroll("obama", vec![0.0, 0.0]).unwrap();
        assert!(r.added);
        assert_eq!(r.gallery_size, 2);
        // The same face again is not stored twice.
        assert!(!g.enroll("obama", vec![0.001, 0.0]).unwrap().added);
        let m = g.best_match(&[0.3, 0.0]);
        assert_eq!(m.name.as_deref(), Some("obama"));
        assert!((m.distance.unwrap() - 0.3).abs() < 1e-6);
        assert_eq!(g.best_match(&[2.0, 2.0]).name, None);

        // Reload: enrollments survive, image entries are rebuilt by the loader.
        let again = gallery(tmp.path(), 10);
        assert_eq!(again.len(), 1);
        assert_eq!(again.best_match(&[0.0, 0.1]).name.as_deref(), Some("obama"));
        // No temp files left behind.
        let names: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(STORE_FILE)]);
    }

    #[test]
    fn full_gallery_refuses_and_keeps_state() {
        let tmp = tempfile::tempdir().unwrap();
        let g = gallery(tmp.path(), 1);
        g.enroll("a", vec![0.0, 0.0]).unwrap();
        let e = g.enroll("b", vec![3.0, 3.0]).unwrap_err();
        assert!(e.message().contains("max_gallery_size"));
        assert_eq!(g.len(), 1);
    }

    #[test]
    fn failed_write_leaves_gallery_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let g = gallery(tmp.path(), 10);
        g.enroll("a", vec![0.0, 0.0]).unwrap();
        // Make the store path a directory so the rename fails.
        fs::remove_file(g.store_path()).unwrap();
        fs::create_dir(g.store_path()).unwrap();
        fs::write(g.store_path().join("x"), b"x").unwrap();
        assert!(g.enroll("b", vec![3.0, 3.0]).is_err());
        assert_eq!(g.len(), 1);
        assert_eq!(g.best_match(&[3.0, 3.0]).name, None);
    }

    #[test]
    fn corrupt_or_foreign_store_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join(STORE_FILE), b"{ half").unwrap();
        let e = Gallery::open(tmp.path(), "dlib", Metric::Euclidean, 2, 0.6, 10)
            .err()
            .unwrap();
        assert!(e.message().contains("not a valid gallery store"));
        let tmp2 = tempfile::tempdir().unwrap();
        gallery(tmp2.path(), 10)
            .enroll("a", vec![1.0, 1.0])
            .unwrap();
        let e = Gallery::open(tmp2.path(), "onnx", Metric::Cosine, 2, 0.6, 10)
            .err()
            .unwrap();
        assert!(e.message().contains("engine dlib"));
    }

    #[test]
    fn finds_gallery_images() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("alice.jpg"), b"").unwrap();
        fs::write(tmp.path().join(".hidden.jpg"), b"").unwrap();
        fs::write(tmp.path().join(STORE_FILE), b"{}").unwrap();
        fs::create_dir(tmp.path().join("bob")).unwrap();
        fs::write(tmp.path().join("bob/1.PNG"), b"").unwrap();
        fs::write(tmp.path().join("bob/notes.txt"), b"").unwrap();
        let found: Vec<_> = gallery_images(tmp.path())
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(found, vec!["alice", "bob"]);
        assert!(gallery_images(&tmp.path().join("missing"))
            .unwrap()
            .is_empty());
    }
}
