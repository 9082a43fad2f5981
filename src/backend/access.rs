//! Who may change or read the gallery: with `gallery_key_file`, `ENROLL`,
//! `FORGET` and `LIST` need the request parameter `gallery_key` equal to one
//! of the file's keys. Recognition needs none.
//!
//! Keys are held as BLAKE3 hashes and compared with `blake3::Hash`'s
//! constant-time equality, against every key whatever matched: the time of
//! a refusal tells nothing about the keys. No key and no presented value
//! ever reaches a log, an error or an answer.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::backend::job::{ENROLL, FORGET, LIST};
use crate::error::{Error, Result};
use crate::triton::metrics::Counter;
use crate::triton::request::ParameterValue;
use crate::triton::{log, Request};

/// The request parameter that carries the key.
pub const GALLERY_KEY: &str = "gallery_key";
/// A bare key's label.
const DEFAULT_LABEL: &str = "default";
/// One message for every refusal: it names no key and no label.
const REFUSED: &str = "ENROLL, FORGET and LIST on this model need the request parameter \
                       gallery_key with a valid key";

/// The keys of a `gallery_key_file`: (label, hash of the key).
pub struct GalleryKeys {
    keys: Vec<(String, blake3::Hash)>,
}

impl GalleryKeys {
    /// Reads `path`: one key per line, `label:key` or a bare key; blank lines
    /// and lines starting with `#` are skipped. A file without keys is an
    /// error (it would lock every client out).
    pub fn read(path: &Path) -> Result<GalleryKeys> {
        let shown = path.display();
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::invalid(format!("gallery_key_file {shown}: cannot be read: {e}"))
        })?;
        let keys = GalleryKeys::parse(&text)
            .map_err(|e| Error::invalid(format!("gallery_key_file {shown}: {e}")))?;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.permissions().mode() & 0o077 != 0 {
                log::warn(&format!(
                    "gallery_key_file {shown} can be read by other users than the server's: \
                     chmod 600 it"
                ));
            }
        }
        Ok(keys)
    }

    /// The keys of a file's text; errors say the line, never its key.
    pub fn parse(text: &str) -> std::result::Result<GalleryKeys, String> {
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // `label:key` only where the part before the first `:` is a
            // label: a bare key may hold a `:` too.
            let (label, key) = match line.split_once(':') {
                Some((label, key)) if is_label(label.trim()) => (label.trim(), key.trim()),
                _ => (DEFAULT_LABEL, line),
            };
            if label.is_empty() || key.is_empty() {
                return Err(format!("line {}: expected label:key or a key", n + 1));
            }
            keys.push((label.to_string(), blake3::hash(key.as_bytes())));
        }
        if keys.is_empty() {
            return Err("no key in the file: it would refuse every gallery change".into());
        }
        Ok(GalleryKeys { keys })
    }

    /// The label of the key `presented` equals, if any. Every key is compared.
    pub fn label_of(&self, presented: &str) -> Option<&str> {
        let hash = blake3::hash(presented.as_bytes());
        let mut found = None;
        for (label, key) in &self.keys {
            if *key == hash && found.is_none() {
                found = Some(label.as_str());
            }
        }
        found
    }

    /// How many keys (never 0: `parse` refuses a file without keys).
    pub fn count(&self) -> usize {
        self.keys.len()
    }
}

/// A label: 1 to 64 letters, digits, `_`, `-`, `.`.
fn is_label(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// A model's gallery access: its keys (none: open) and the refusals' count.
pub struct Access {
    keys: Option<GalleryKeys>,
    refusals: Option<Counter>,
}

impl Access {
    /// From the model's `gallery_key_file`; logs what holds.
    pub fn load(model: &str, key_file: Option<&Path>) -> Result<Access> {
        let Some(path) = key_file else {
            log::warn(&format!(
                "model '{model}': no gallery_key_file: any client may ENROLL, FORGET and LIST"
            ));
            return Ok(Access {
                keys: None,
                refusals: None,
            });
        };
        let keys = GalleryKeys::read(path)?;
        log::info(&format!(
            "model '{model}': ENROLL, FORGET and LIST need one of the {} keys of {}",
            keys.count(),
            path.display()
        ));
        let refusals = Counter::new(
            "face_gallery_refusals",
            "Gallery changes and listings refused for a missing or wrong gallery_key",
            model,
        )
        .inspect_err(|e| log::warn(&format!("model '{model}': no refusals metric: {e}")))
        .ok();
        Ok(Access {
            keys: Some(keys),
            refusals,
        })
    }

    /// Whether `request` may run, before anything of it is read: one that
    /// sends `ENROLL`, `FORGET` or `LIST` needs a valid key when the model
    /// has keys (no image is decoded, no other check answers, without it).
    /// The key's label, for the record of changes.
    pub fn admit(&self, request: &Request) -> Result<Option<String>> {
        let Some(keys) = &self.keys else {
            return Ok(None);
        };
        let mut manages = false;
        for input in [ENROLL, FORGET, LIST] {
            manages |= request.input(input)?.is_some();
        }
        if !manages {
            return Ok(None);
        }
        let presented = match request.parameter(GALLERY_KEY)? {
            Some(ParameterValue::Str(key)) => Some(key),
            _ => None,
        };
        match presented.as_deref().and_then(|k| keys.label_of(k)) {
            Some(label) => Ok(Some(label.to_string())),
            None => {
                if let Some(counter) = &self.refusals {
                    counter.increment();
                }
                Err(Error::invalid(REFUSED))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_bare_keys_comments_and_blank_lines() {
        let keys = GalleryKeys::parse("# ops\n\nops:s3cret\n  k2  \nci : k3\nx/y:4\n").unwrap();
        assert_eq!(keys.count(), 4);
        assert_eq!(
            keys.label_of("x/y:4"),
            Some("default"),
            "not a label before the colon"
        );
        assert_eq!(keys.label_of("4"), None);
        assert_eq!(keys.label_of("s3cret"), Some("ops"));
        assert_eq!(keys.label_of("k2"), Some("default"));
        assert_eq!(keys.label_of("k3"), Some("ci"));
        assert_eq!(keys.label_of("ops:s3cret"), None);
        assert_eq!(keys.label_of(""), None);
        assert_eq!(keys.label_of("s3cre"), None);
    }

    #[test]
    fn a_file_without_keys_or_with_a_bad_line_is_refused_without_its_keys() {
        assert!(GalleryKeys::parse("# nothing\n\n").is_err());
        let e = GalleryKeys::parse("ok:k1\nlabel-only:\n").err().unwrap();
        assert!(e.contains("line 2") && !e.contains("k1"), "{e}");
    }
}
