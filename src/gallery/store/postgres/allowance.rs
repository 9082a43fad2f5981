//! Each key label's allowance (`key_rate`, `key_burst`) kept in the
//! database, so that the servers of a fleet share one limit instead of
//! granting N times it. GCRA, as governor does in one process: a label's row
//! holds its theoretical arrival time (seconds since the epoch, by the
//! database's clock), moved on by `tokens / rate` in one statement per
//! request, which the row's lock makes atomic across servers.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ::postgres::Client;

use super::target::{why, Target};

/// After a failure, the database is tried again this long after (each try
/// may wait for its connect timeout); the caller limits on its own meanwhile.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// Takes `$3` seconds of allowance (tokens / rate) from label `$2` of gallery
/// `$1` unless that leaves it more than `$4` (burst / rate) ahead of now.
const TAKE: &str = "INSERT INTO triton_face.key_allowances AS a (gallery, label, tat) \
     SELECT $1, $2, extract(epoch FROM clock_timestamp())::float8 + $3 \
     ON CONFLICT (gallery, label) DO UPDATE SET tat = greatest(a.tat + $3, EXCLUDED.tat) \
     WHERE greatest(a.tat + $3, EXCLUDED.tat) - EXCLUDED.tat + $3 <= $4 \
     RETURNING tat";

/// How long until `$3` seconds of allowance would fit under `$4`.
const WAIT: &str = "SELECT greatest(tat - extract(epoch FROM clock_timestamp())::float8 + $3, $3) \
     - $4 FROM triton_face.key_allowances WHERE gallery = $1 AND label = $2";

pub struct Allowances {
    target: Target,
    gallery: String,
    session: Mutex<Session>,
}

#[derive(Default)]
struct Session {
    client: Option<Client>,
    /// Not before then, after a failure.
    retry_at: Option<Instant>,
}

/// What the database said of a take.
pub enum Taken {
    Yes,
    /// Refused: this long until it would fit.
    Wait(Duration),
    /// The database is out of reach (or was lately): why.
    Unknown(String),
}

impl Allowances {
    /// The allowances of `gallery` in the database of `target` (connected at
    /// the first take: the store's load has made the table by then).
    pub fn new(target: Target, gallery: &str) -> Self {
        Allowances {
            target,
            gallery: gallery.to_string(),
            session: Mutex::new(Session::default()),
        }
    }

    /// `tokens` of `label`'s allowance at `per_second`, at most `burst` ahead.
    pub fn take(&self, label: &str, tokens: u32, per_second: f64, burst: u32) -> Taken {
        let mut session = self.session.lock().unwrap_or_else(|e| e.into_inner());
        if session.retry_at.is_some_and(|at| Instant::now() < at) {
            return Taken::Unknown("out of reach lately".into());
        }
        let seconds = |n: u32| f64::from(n) / per_second;
        let (cost, ahead) = (seconds(tokens), seconds(burst));
        let result = (|| {
            if session.client.as_ref().is_none_or(Client::is_closed) {
                session.client = Some(self.target.connect()?);
            }
            let client = session.client.as_mut().expect("connected above");
            let args: [&(dyn ::postgres::types::ToSql + Sync); 4] =
                [&self.gallery, &label, &cost, &ahead];
            if client.query_opt(TAKE, &args)?.is_some() {
                return Ok(Taken::Yes);
            }
            let wait: f64 = client.query_one(WAIT, &args)?.get(0);
            Ok(Taken::Wait(Duration::from_secs_f64(wait.clamp(0.001, 1e9))))
        })();
        result.unwrap_or_else(|e: ::postgres::Error| {
            *session = Session {
                client: None,
                retry_at: Some(Instant::now() + RETRY_AFTER),
            };
            Taken::Unknown(why(&e))
        })
    }

    /// "postgres@db:5432/face (DSN from $FACE_GALLERY_DSN)", gallery name.
    pub fn describe(&self) -> String {
        format!("{}, gallery {:?}", self.target.shown(), self.gallery)
    }
}
