//! The gallery folder's images: `name.jpg` or `name/*.jpg`, added at model
//! load. What each photo gave the embedder is kept in the store by content,
//! so a reload embeds only new or changed photos (a removed one is dropped
//! from the cache too).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::store::{PhotoFaces, Photos};
use super::{validate_name, Gallery};
use crate::error::{Error, Result};

/// What loading the folder did.
#[derive(Debug, Default)]
pub struct FolderLoad {
    /// Photos added, one face each.
    pub added: usize,
    /// Photos whose faces came from the store's cache, and those embedded now.
    pub cached: usize,
    pub embedded: usize,
    /// Photos not used, and why.
    pub skipped: Vec<(PathBuf, String)>,
    /// The cache could not be written: the photos are loaded all the same,
    /// and embedded again next time.
    pub cache_error: Option<Error>,
}

/// A photo's cache key: its content and `setup`, what decides the faces an
/// engine finds in it (detector, its settings, the embedder's identity).
pub fn content_key(setup: &str, bytes: &[u8]) -> String {
    let mut h = blake3::Hasher::new();
    h.update(setup.as_bytes()).update(&[0]).update(bytes);
    h.finalize().to_hex().to_string()
}

impl Gallery {
    /// Add the folder's photos. `faces_of` gives the embeddings of the faces
    /// in an encoded photo; it is called only for photos the store has not
    /// seen with this `setup`. Only a full gallery fails the load.
    pub fn load_folder(
        &self,
        setup: &str,
        mut faces_of: impl FnMut(&[u8]) -> Result<Vec<Vec<f32>>>,
    ) -> Result<FolderLoad> {
        let mut load = FolderLoad::default();
        let known = self.writer().photos()?;
        let (mut new, mut keep) = (Photos::new(), HashSet::new());
        for (name, path) in gallery_images(&self.dir)? {
            let faces = validate_name("gallery image", &name).and_then(|()| {
                let bytes =
                    fs::read(&path).map_err(|e| Error::unavailable(format!("cannot read: {e}")))?;
                let key = content_key(setup, &bytes);
                let faces = match known.get(&key) {
                    Some(f) => {
                        load.cached += 1;
                        f.clone()
                    }
                    None => {
                        let f = one_face(faces_of(&bytes)?);
                        load.embedded += 1;
                        new.insert(key.clone(), f.clone());
                        f
                    }
                };
                keep.insert(key);
                Ok(faces)
            });
            match faces {
                Ok(PhotoFaces::One(embedding)) => {
                    self.add_from_image(&name, embedding, &path)?;
                    load.added += 1;
                }
                Ok(PhotoFaces::Count(n)) => load.skipped.push((
                    path,
                    format!("it has {n} faces, a gallery image needs exactly one"),
                )),
                Err(e) => load.skipped.push((path, e.to_string())),
            }
        }
        let gone = known.keys().any(|k| !keep.contains(k));
        if !new.is_empty() || gone {
            load.cache_error = self.writer().keep_photos(&new, &keep).err();
        }
        if gone {
            // A photo taken out of the folder: its cached faces, and its
            // vector in the saved index, are erased (`erase.rs`).
            self.live.removed();
        }
        Ok(load)
    }
}

fn one_face(mut faces: Vec<Vec<f32>>) -> PhotoFaces {
    match faces.len() {
        1 => PhotoFaces::One(faces.remove(0)),
        n => PhotoFaces::Count(n),
    }
}

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

fn read(d: &Path) -> Result<Vec<PathBuf>> {
    let unreadable =
        |e: std::io::Error| Error::unavailable(format!("gallery folder {}: {e}", d.display()));
    fs::read_dir(d)
        .map_err(unreadable)?
        .map(|entry| entry.map(|e| e.path()).map_err(unreadable))
        .collect()
}

/// Gallery images in `dir` as (name, path), sorted for a stable load order.
/// Hidden files and anything not an image (the store among them) are skipped.
pub fn gallery_images(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    for path in read(dir)? {
        let Some(name) = visible(&path) else {
            continue;
        };
        if path.is_dir() {
            for p in read(&path)? {
                if visible(&p).is_some() && is_image(&p) {
                    out.push((name.clone(), p));
                }
            }
        } else if is_image(&path) {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default();
            out.push((stem.to_string(), path));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_gallery_images() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("alice.jpg"), b"").unwrap();
        fs::write(tmp.path().join(".hidden.jpg"), b"").unwrap();
        fs::write(tmp.path().join("enrolled.json"), b"{}").unwrap();
        fs::write(tmp.path().join("gallery.sqlite3"), b"").unwrap();
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
