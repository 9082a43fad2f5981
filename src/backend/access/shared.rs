//! One store, one policy: models on one gallery store (the same folder or
//! PostgreSQL gallery, however its path or DSN is spelt) must name the same
//! `gallery_key_file` (or none), and with keys agree on what a key may
//! learn: `distance_decimals`, `key_rate`/`key_burst` and the model's own
//! threshold (the highest a `recognize` key may use). Otherwise the most
//! open model would be the store's policy. The rate limiter is the store's,
//! shared by its models, and outlives them: a reload does not refill a
//! spent burst.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::backend::access::rate::{KeyRate, Limiter};
use crate::error::{Error, Result};
use crate::gallery::store::postgres::allowance::Allowances;

/// What models on one store must agree on.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// The key file, canonical (none: the model is open).
    pub keys: Option<PathBuf>,
    pub decimals: u32,
    pub rate: Option<KeyRate>,
    /// The model's own `match_threshold`.
    pub threshold: f32,
}

impl Policy {
    /// The first setting in which `self` and `other` differ, as each has
    /// it. Without keys only the key file counts: an open model answers
    /// anything anyway.
    fn differs(&self, other: &Policy) -> Option<(&'static str, String, String)> {
        let shown_keys = |k: &Option<PathBuf>| match k {
            Some(path) => format!("gallery_key_file {}", path.display()),
            None => "no gallery_key_file".to_string(),
        };
        let shown_rate = |r: &Option<KeyRate>| match r {
            Some(r) => format!("key_rate {} key_burst {}", r.per_second, r.burst),
            None => "no key_rate".to_string(),
        };
        if self.keys != other.keys {
            return Some(("keys", shown_keys(&self.keys), shown_keys(&other.keys)));
        }
        self.keys.as_ref()?;
        let pairs = [
            (
                "distance_decimals",
                format!("distance_decimals {}", self.decimals),
                format!("distance_decimals {}", other.decimals),
            ),
            ("key rate", shown_rate(&self.rate), shown_rate(&other.rate)),
            (
                "match_threshold",
                format!("match_threshold {}", self.threshold),
                format!("match_threshold {}", other.threshold),
            ),
        ];
        pairs.into_iter().find(|(_, a, b)| a != b)
    }
}

/// A store's models, and its rate limiter (kept when they all unload).
#[derive(Default)]
struct Shared {
    models: Vec<(String, Policy)>,
    limiter: Option<Arc<Limiter>>,
}

/// Store identity -> what is shared on it.
static STORES: Mutex<Option<HashMap<String, Shared>>> = Mutex::new(None);

/// A model's place on its store, held while the model is loaded.
pub struct Registered {
    store: String,
    model: String,
    policy: Policy,
    /// The store's limiter, when the policy has a rate.
    pub limiter: Option<Arc<Limiter>>,
}

/// Records `model` with `policy` on the store `store` (its identity);
/// refused when another model on it has another policy. A new limiter keeps
/// its allowance in `fleet` where given (a PostgreSQL gallery).
pub fn register(
    model: &str,
    store: &str,
    policy: Policy,
    fleet: impl FnOnce() -> Result<Option<Allowances>>,
) -> Result<Registered> {
    let mut stores = STORES.lock().unwrap_or_else(|e| e.into_inner());
    let shared = (stores.get_or_insert_with(HashMap::new))
        .entry(store.to_string())
        .or_default();
    let other = (shared.models.iter()).find_map(|(m, p)| {
        let differs = p.differs(&policy).filter(|_| m != model)?;
        Some((m, differs))
    });
    if let Some((other, (what, theirs, mine))) = other {
        let hint = match what {
            "keys" => "name the same file in both",
            _ => "set the same in both",
        };
        return Err(Error::invalid(format!(
            "models '{other}' and '{model}' share one gallery store but not its {what}: \
             '{other}' has {theirs}, '{model}' has {mine}; {hint}"
        )));
    }
    let limiter = match policy.rate {
        Some(rate) => Some(match &shared.limiter {
            Some(kept) if kept.rate() == rate => kept.clone(),
            _ => Arc::new(Limiter::new(rate, fleet()?)?),
        }),
        None => None,
    };
    shared.limiter = limiter.clone().or(shared.limiter.take());
    shared.models.push((model.to_string(), policy.clone()));
    Ok(Registered {
        store: store.to_string(),
        model: model.to_string(),
        policy,
        limiter,
    })
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut stores = STORES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(shared) = stores.as_mut().and_then(|s| s.get_mut(&self.store)) {
            let mine = (self.model.clone(), self.policy.clone());
            if let Some(i) = shared.models.iter().position(|m| *m == mine) {
                shared.models.remove(i);
            }
        }
    }
}

/// A key file's path, canonical where it exists.
pub fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(decimals: u32, rate: Option<f64>) -> Policy {
        Policy {
            keys: Some(PathBuf::from("/k")),
            decimals,
            rate: rate.map(|per_second| KeyRate {
                per_second,
                burst: 2,
            }),
            threshold: 0.5,
        }
    }

    #[test]
    fn one_policy_per_store_and_its_limiter_outlives_its_models() {
        let a = register("a", "store 1", policy(2, Some(1.0)), || Ok(None)).unwrap();
        let e = register("b", "store 1", policy(3, Some(1.0)), || Ok(None))
            .err()
            .unwrap();
        assert!(
            e.message().contains("not its distance_decimals")
                && e.message().contains("'a' has distance_decimals 2"),
            "{e}"
        );
        let e = register("b", "store 1", policy(2, None), || Ok(None))
            .err()
            .unwrap();
        assert!(e.message().contains("not its key rate"), "{e}");
        let open = Policy {
            keys: None,
            ..policy(2, None)
        };
        assert!(register("b", "store 1", open.clone(), || Ok(None)).is_err());
        let b = register("b", "store 1", policy(2, Some(1.0)), || Ok(None)).unwrap();
        let limiter = a.limiter.clone().unwrap();
        assert!(
            Arc::ptr_eq(&limiter, b.limiter.as_ref().unwrap()),
            "one limiter"
        );
        limiter.take("cam", 2).unwrap();
        drop((a, b));
        let again = register("a", "store 1", policy(2, Some(1.0)), || Ok(None)).unwrap();
        let e = again.limiter.as_ref().unwrap().take("cam", 1).unwrap_err();
        assert!(
            e.message().contains("retry in"),
            "a reload keeps the spent burst: {e}"
        );
        let _other = register("c", "store 2", open.clone(), || Ok(None)).unwrap();
        let _same = register(
            "d",
            "store 2",
            Policy {
                threshold: 0.7,
                ..open
            },
            || Ok(None),
        )
        .unwrap();
    }
}
