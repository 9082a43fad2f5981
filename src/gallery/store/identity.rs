//! Which embedder made an embedding. Embeddings of two embedders are not
//! comparable (another engine, metric or length, or the same engine with
//! other weights), so every stored row carries its embedder and a model only
//! ever matches against its own.

use std::fmt;
use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};
use crate::metric::Metric;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The engine's name ("dlib", "onnx").
    pub engine: String,
    /// "euclidean" or "cosine".
    pub metric: String,
    pub dim: usize,
    /// BLAKE3 (hex) over the model files the engine loaded, in order (and
    /// the conventions that change what they give, where any is set).
    pub model_hash: String,
}

impl Identity {
    /// The identity of an engine that loaded `files`; reads every file once.
    pub fn of_files(engine: &str, metric: Metric, dim: usize, files: &[&Path]) -> Result<Self> {
        let mut hasher = blake3::Hasher::new();
        for path in files {
            let mut file = File::open(path).map_err(|e| unreadable(path, e))?;
            let len = std::io::copy(&mut file, &mut hasher).map_err(|e| unreadable(path, e))?;
            // The length after each file: two files never hash like their concatenation.
            hasher.update(&len.to_le_bytes());
        }
        Ok(Identity {
            engine: engine.to_string(),
            metric: metric.name().to_string(),
            dim,
            model_hash: hasher.finalize().to_hex().to_string(),
        })
    }

    /// The same files run with `conventions` that change their embeddings
    /// (the ONNX embedder's `standardize`, `flip`): another identity; none
    /// (empty) leaves it as it is.
    pub fn with_conventions(mut self, conventions: &str) -> Self {
        if !conventions.is_empty() {
            let mut hasher = blake3::Hasher::new();
            hasher.update(self.model_hash.as_bytes());
            hasher.update(b"\0");
            hasher.update(conventions.as_bytes());
            self.model_hash = hasher.finalize().to_hex().to_string();
        }
        self
    }

    /// A short name for this embedder in file names (the saved index of
    /// each embedder on one folder is its own file).
    pub fn tag(&self) -> String {
        let mut hasher = blake3::Hasher::new();
        for part in [
            &self.engine,
            &self.metric,
            &self.dim.to_string(),
            &self.model_hash,
        ] {
            hasher.update(part.as_bytes());
            hasher.update(b"\0");
        }
        hasher.finalize().to_hex()[..12].to_string()
    }

    #[cfg(test)]
    pub fn for_tests(engine: &str, dim: usize) -> Self {
        Identity {
            engine: engine.to_string(),
            metric: "euclidean".into(),
            dim,
            model_hash: format!("hash-of-{engine}"),
        }
    }
}

fn unreadable(path: &Path, e: std::io::Error) -> Error {
    Error::unavailable(format!("model file {}: {e}", path.display()))
}

impl fmt::Display for Identity {
    /// "dlib (euclidean, 128-d, models 1f2e3d4c5b6a)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = self.model_hash.get(..12).unwrap_or(&self.model_hash);
        write!(
            f,
            "{} ({}, {}-d, models {short})",
            self.engine, self.metric, self.dim
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_follows_the_files_contents_and_order() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"weights a").unwrap();
        std::fs::write(&b, b"weights b").unwrap();
        let id = |files: &[&Path]| Identity::of_files("onnx", Metric::Cosine, 4, files).unwrap();
        let ab = id(&[&a, &b]);
        assert_eq!(ab, id(&[&a, &b]));
        assert_ne!(ab.model_hash, id(&[&b, &a]).model_hash);
        assert_eq!(ab.metric, "cosine");
        std::fs::write(&b, b"weights B").unwrap();
        assert_ne!(ab.model_hash, id(&[&a, &b]).model_hash);
        let e = Identity::of_files("onnx", Metric::Cosine, 4, &[&dir.path().join("gone")]);
        assert!(e.unwrap_err().message().contains("gone"));
    }
}
