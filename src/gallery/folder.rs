//! The gallery folder's images: `name.jpg` or `name/*.jpg`.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

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
