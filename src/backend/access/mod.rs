//! Who may do what with a model: with `gallery_key_file`, every request
//! needs the request parameter `gallery_key` with a key that holds the
//! roles the request uses (needs.rs), at the key label's rate (rate.rs).
//! A live sequence is its START's key's: its requests all bring that key.
//! Without a key file the model is open, and its load says so.
//!
//! No key and no presented value ever reaches a log, an error, an answer or
//! a metric; a refusal's message is the same whichever keys exist.

mod keys;
mod needs;
pub mod rate;
mod shared;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Mutex;

use crate::backend::controls::read_step;
use crate::backend::settings::{SequenceConfig, Settings};
use crate::error::{Error, Result};
use crate::gallery::store::postgres::allowance::Allowances;
use crate::gallery::store::postgres::target::Target;
use crate::gallery::store::Location;
use crate::sequence::Sequences;
use crate::triton::metrics::Counter;
use crate::triton::request::ParameterValue;
use crate::triton::{log, Request};

use keys::{GalleryKeys, Key, Roles};
pub use needs::Defaults;
use needs::Need;

/// The request parameter that carries the key.
pub const GALLERY_KEY: &str = "gallery_key";

/// Why a request was refused: the label of `face_key_refusals`.
#[derive(Clone, Copy)]
enum Reason {
    NoKey,
    WrongKey,
    Role,
    Rate,
}

const REASONS: [(Reason, &str); 4] = [
    (Reason::NoKey, "no_key"),
    (Reason::WrongKey, "wrong_key"),
    (Reason::Role, "role"),
    (Reason::Rate, "rate"),
];

/// A model's access: its keys (none: open), their rate, the refusals' counts.
pub struct Access {
    guarded: Option<Guarded>,
    /// The model's place on its store: the store's limiter.
    store: shared::Registered,
}

struct Guarded {
    keys: GalleryKeys,
    refusals: Vec<Option<Counter>>,
}

impl Access {
    /// From the model's `gallery_key_file`, `key_rate` and `key_burst`, on
    /// the store at `location` with the model's own `threshold`; logs what
    /// holds. On PostgreSQL the rate's allowance is the fleet's (the
    /// gallery's database keeps it).
    pub fn load(
        model: &str,
        settings: &Settings,
        location: &Location,
        threshold: f32,
    ) -> Result<Access> {
        let store = &location.identity()?;
        // The store's DSN was read to open it: should it fail now, the load
        // fails rather than keep the rate per server instead of per fleet.
        let fleet = || match location {
            Location::Postgres { settings, gallery } => {
                let target = Target::from_env(&settings.dsn_env)?;
                Ok(Some(Allowances::new(target, gallery)))
            }
            Location::Sqlite { .. } => Ok(None),
        };
        let Some(path) = settings.gallery_key_file.as_deref() else {
            if settings.key_rate.is_some() || settings.key_burst.is_some() {
                return Err(Error::invalid(
                    "key_rate and key_burst limit each key of gallery_key_file: set the file too",
                ));
            }
            let store = shared::register(model, store, policy(settings, threshold), || Ok(None))?;
            log::warn(&format!(
                "model '{model}': no gallery_key_file: any client may recognize, search, ENROLL, \
                 FORGET and LIST"
            ));
            return Ok(Access {
                guarded: None,
                store,
            });
        };
        let keys = read(path)?;
        if settings.key_burst.is_some() && settings.key_rate.is_none() {
            return Err(Error::invalid("key_burst goes with key_rate: set both"));
        }
        if settings.response_cache {
            return Err(Error::invalid(
                "gallery_key_file with response_cache: Triton's cache keys an answer on the \
                 inputs, not on the gallery_key parameter, and would give one key's answers to \
                 any caller; turn the model's response_cache off",
            ));
        }
        let store = shared::register(model, store, policy(settings, threshold), fleet)?;
        let each: Vec<String> = keys
            .iter()
            .map(|k| format!("{} ({})", k.label, k.roles))
            .collect();
        let fleet_wide = match location {
            Location::Postgres { .. } => ", shared by every server of the gallery",
            Location::Sqlite { .. } => "",
        };
        let limit = settings.key_rate().map_or(String::new(), |r| {
            format!(
                ", each at most {}/s (bursts of {}){fleet_wide}",
                r.per_second, r.burst
            )
        });
        log::info(&format!(
            "model '{model}': every request needs a key of {}: {}{limit}",
            path.display(),
            each.join(", ")
        ));
        let refusals = REASONS
            .iter()
            .map(|(_, reason)| refusal_counter(model, reason))
            .collect();
        let guarded = Guarded { keys, refusals };
        Ok(Access {
            guarded: Some(guarded),
            store,
        })
    }

    /// Whether `request` may run, before anything of it is decoded, and
    /// what its key settles for it.
    pub fn admit(&self, request: &Request, model: &Admitting<'_>) -> Result<Admitted> {
        let Some(g) = &self.guarded else {
            return Ok(Admitted::default());
        };
        let step = match model.sequence {
            Some(config) => Some(read_step(request, config)?),
            None => None,
        };
        if step.as_ref().is_some_and(|s| !s.ready) {
            return Ok(Admitted::default()); // an idle slot of the sequence batcher
        }
        let needs = needs::needs(request, &model.defaults)?;
        let key = match presented(request)? {
            Some(p) => g.keys.find(&p).ok_or(Reason::WrongKey),
            None => Err(Reason::NoKey),
        };
        // A live sequence is its START's key's alone (checked again when
        // the request reaches it: answer.rs, tracked_requests.rs).
        let held = step.as_ref().and_then(|s| owner_of(model, &s.id));
        let key = key.and_then(|k| match another_owner(held.as_deref(), Some(&k.label)) {
            true => Err(Reason::WrongKey),
            false => Ok(k),
        });
        let missing = |k: &Key| needs.iter().find(|n| !k.roles.holds(n.role));
        let key = match key {
            Ok(k) => match missing(k) {
                None => k,
                Some(need) => return Err(g.refuse(Reason::Role, need)),
            },
            Err(reason) => return Err(g.refuse(reason, &needs[0])),
        };
        if let Some(limiter) = &self.store.limiter {
            let cost = needs::cost(request, model.batched)?;
            limiter
                .take(&key.label, cost)
                .inspect_err(|_| g.count(Reason::Rate))?;
        }
        Ok(Admitted {
            by: Some(key.label.clone()),
            coarse: (!key.roles.holds(Roles::SEARCH)).then_some(model.decimals),
        })
    }

    /// What a request's faces cost beyond what admission took (one token
    /// per image, frame or row, times `top_k`: `needs::cost`): one per face
    /// matched past the first of its image, times `top_k`, each a distance
    /// learned. Taken once the faces are found, before any is matched, from
    /// the key `by` (none on an open model), and refused as admission
    /// refuses; a request whose whole cost (`faces` times `top_k`) is over
    /// the burst is its own error.
    pub fn charge_faces(
        &self,
        by: Option<&str>,
        (images, faces): (usize, usize),
        top_k: usize,
    ) -> Result<()> {
        let (Some(g), Some(limiter), Some(label)) = (&self.guarded, &self.store.limiter, by) else {
            return Ok(());
        };
        let tokens = |n: usize| u32::try_from(n.saturating_mul(top_k.max(1))).unwrap_or(u32::MAX);
        let extra = faces.saturating_sub(images.max(1));
        if extra == 0 {
            return Ok(());
        }
        limiter
            .take_part(label, tokens(extra), tokens(faces))
            .inspect_err(|_| g.count(Reason::Rate))
    }

    /// A sequence request whose key is not its live sequence's (`owner`,
    /// the label its START brought, if it is live): refused and counted, as
    /// at admission (which a request of the same batch may have passed
    /// before a START in it took the sequence). A START cannot take over a
    /// live sequence of another key.
    pub fn check_owner(&self, owner: Option<&str>, by: Option<&str>) -> Result<()> {
        match &self.guarded {
            Some(g) if another_owner(owner, by) => {
                g.count(Reason::WrongKey);
                Err(refusal(Roles::RECOGNIZE, SEQUENCE_WHY))
            }
            _ => Ok(()),
        }
    }
}

/// What models on one store must agree on (shared.rs).
fn policy(settings: &Settings, threshold: f32) -> shared::Policy {
    shared::Policy {
        keys: settings.gallery_key_file.as_deref().map(shared::canonical),
        decimals: settings.distance_decimals,
        rate: settings.key_rate(),
        threshold,
    }
}

/// A live sequence (`owner`: its START's key label) that is not `by`'s.
fn another_owner(owner: Option<&str>, by: Option<&str>) -> bool {
    owner.is_some() && owner != by
}

impl Guarded {
    fn count(&self, reason: Reason) {
        if let Some(Some(counter)) = self.refusals.get(reason as usize) {
            counter.increment();
        }
    }

    /// Counted; one message whichever key was sent, if any.
    fn refuse(&self, reason: Reason, need: &Need) -> Error {
        self.count(reason);
        refusal(need.role, need.why)
    }
}

/// What a sequence request is refused for when its key is not its START's.
const SEQUENCE_WHY: &str = "a sequence's requests all bring the key of its START";

/// One message whichever key was sent, if any: the role and what needs it.
fn refusal(role: Roles, why: &str) -> Error {
    Error::invalid(format!(
        "this request needs the request parameter {GALLERY_KEY} with a key that holds the role \
         '{role}': {why}"
    ))
}

/// The key file: its keys, refused when group or others may read it.
fn read(path: &Path) -> Result<GalleryKeys> {
    let shown = path.display();
    let bad = |e: String| Error::invalid(format!("gallery_key_file {shown}: {e}"));
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot be read: {e}")))?;
    let mode = std::fs::metadata(path)
        .map_err(|e| bad(e.to_string()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(bad(format!(
            "group or others may use it (mode {:o}): chmod 600 {shown}",
            mode & 0o777
        )));
    }
    GalleryKeys::parse(&text).map_err(bad)
}

/// The key a request sent (a value that is not text is no key).
fn presented(request: &Request) -> Result<Option<String>> {
    Ok(match request.parameter(GALLERY_KEY)? {
        Some(ParameterValue::Str(key)) => Some(key),
        Some(_) => Some(String::new()),
        None => None,
    })
}

/// What admission settles for a request.
#[derive(Default)]
pub struct Admitted {
    /// Its key's label (for the record of changes); `None` on an open model.
    pub by: Option<String>,
    /// A key without `search`: the model's `distance_decimals`, which its
    /// distances are compared at as well as shown (job.rs).
    pub coarse: Option<u32>,
}

/// What admission reads of its model: the sequence settings and live
/// sequences (whose START's key owns each), and the defaults a request's
/// needs are judged by.
pub struct Admitting<'a> {
    pub sequence: Option<&'a SequenceConfig>,
    pub sequences: Option<&'a Mutex<Sequences>>,
    pub defaults: Defaults,
    pub decimals: u32,
    /// Whether the model's inputs have a batch dimension (a request's cost).
    pub batched: bool,
}

/// The label of the key a live sequence's START brought.
fn owner_of(model: &Admitting<'_>, id: &crate::sequence::CorrelationId) -> Option<String> {
    let sequences = model.sequences?;
    let sequences = sequences.lock().unwrap_or_else(|e| e.into_inner());
    sequences.owner_of(id).map(str::to_string)
}

fn refusal_counter(model: &str, reason: &str) -> Option<Counter> {
    Counter::with_label(
        "face_key_refusals",
        "Requests refused for their gallery_key: no key, a wrong key, a role the key lacks, \
         or over the key's rate",
        model,
        ("reason", reason),
    )
    .inspect_err(|e| log::warn(&format!("model '{model}': no refusals metric: {e}")))
    .ok()
}
