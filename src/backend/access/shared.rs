//! Models that share a store share its keys: a second model on the same
//! SQLite folder or PostgreSQL gallery must name the same `gallery_key_file`
//! (or none, if the first names none), or its load is refused. Otherwise
//! the one without keys would leave the gallery open.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::backend::settings::Settings;
use crate::error::{Error, Result};
use crate::gallery::store::StoreKind;

/// A model and its key file (none: open).
type Loaded = (String, Option<PathBuf>);

/// Store -> the models loaded on it.
static LOADED: Mutex<Option<HashMap<String, Vec<Loaded>>>> = Mutex::new(None);

/// A model's place on its store, held while the model is loaded.
pub struct Registered {
    store: String,
    model: String,
    keys: Option<PathBuf>,
}

/// Records `model` on its store; refused when another model on that store
/// names another key file.
pub fn register(model: &str, settings: &Settings) -> Result<Registered> {
    let store = store_of(model, settings);
    let keys = settings.gallery_key_file.as_deref().map(canonical);
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    let models = loaded
        .get_or_insert_with(HashMap::new)
        .entry(store.clone())
        .or_default();
    if let Some((other, theirs)) = models.iter().find(|(m, k)| m != model && *k != keys) {
        let shown = |k: &Option<PathBuf>| match k {
            Some(path) => format!("gallery_key_file {}", path.display()),
            None => "no gallery_key_file".to_string(),
        };
        return Err(Error::invalid(format!(
            "models '{other}' and '{model}' share one gallery store but not its keys: \
             '{other}' has {}, '{model}' has {}; name the same file in both",
            shown(theirs),
            shown(&keys)
        )));
    }
    models.push((model.to_string(), keys.clone()));
    Ok(Registered {
        store,
        model: model.to_string(),
        keys,
    })
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(models) = loaded.as_mut().and_then(|l| l.get_mut(&self.store)) {
            let mine = (self.model.clone(), self.keys.clone());
            if let Some(i) = models.iter().position(|m| *m == mine) {
                models.remove(i);
            }
        }
    }
}

/// The store a model's gallery lives in: its SQLite folder, or its
/// PostgreSQL gallery in the database its DSN names (the DSN only hashed).
fn store_of(model: &str, s: &Settings) -> String {
    match s.gallery_store {
        StoreKind::Sqlite => format!("sqlite {}", canonical(&s.gallery_dir).display()),
        StoreKind::Postgres => {
            let dsn = std::env::var(&s.postgres.dsn_env).unwrap_or_default();
            let gallery = s.postgres.gallery_name.as_deref().unwrap_or(model);
            format!("postgres {gallery} {}", blake3::hash(dsn.as_bytes()))
        }
    }
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}
