//! A rate per key label (`key_rate`, `key_burst`), shared by the models on
//! one store (shared.rs): a stolen key cannot sweep the gallery at the
//! server's speed. A request costs its work, not one token (needs.rs:
//! `cost`). governor's GCRA keyed by label (labels are few: the key file's).

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::error::{Error, Result};
use crate::gallery::store::postgres::allowance::{Allowances, Taken};
use crate::triton::log;

/// The highest `key_rate` and `key_burst` taken.
pub const MAX_RATE: f64 = 1_000_000.0;

/// Requests per second and burst, per label.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyRate {
    pub per_second: f64,
    pub burst: u32,
}

impl KeyRate {
    /// The burst a rate has when `key_burst` is not set: one second's
    /// worth, at least one request.
    pub fn default_burst(per_second: f64) -> u32 {
        per_second.ceil().clamp(1.0, MAX_RATE) as u32
    }
}

pub struct Limiter {
    rate: KeyRate,
    /// This process's allowance: the only one on SQLite, the stand-in for
    /// the fleet's while its database is out of reach.
    limiter: DefaultKeyedRateLimiter<String>,
    clock: DefaultClock,
    /// On PostgreSQL, the allowance every server of the gallery shares.
    fleet: Option<Allowances>,
    /// The fleet's allowance could not be read (logged once an outage).
    out_of_reach: AtomicBool,
}

impl Limiter {
    /// A limiter at `rate`, its allowance kept in the gallery's database
    /// where `fleet` is given.
    pub fn new(rate: KeyRate, fleet: Option<Allowances>) -> Result<Limiter> {
        let bad = || Error::invalid(format!("key_rate {} is out of range", rate.per_second));
        let period = Duration::try_from_secs_f64(1.0 / rate.per_second).map_err(|_| bad())?;
        let burst = NonZeroU32::new(rate.burst).ok_or_else(bad)?;
        let quota = Quota::with_period(period)
            .ok_or_else(bad)?
            .allow_burst(burst);
        Ok(Limiter {
            rate,
            limiter: RateLimiter::keyed(quota),
            clock: DefaultClock::default(),
            fleet,
            out_of_reach: AtomicBool::new(false),
        })
    }

    pub fn rate(&self) -> KeyRate {
        self.rate
    }

    /// `cost` tokens of `label`: taken from its allowance, or refused with
    /// Triton's "unavailable" and when to retry (a refusal takes nothing);
    /// a cost above the burst can never be taken: refused as the request's
    /// own error.
    pub fn take(&self, label: &str, cost: u32) -> Result<()> {
        self.take_part(label, cost, cost)
    }

    /// `tokens` of `label`, the part still to take of a request that costs
    /// `whole` in all: refused as `take` refuses, the whole judged against
    /// the burst.
    pub fn take_part(&self, label: &str, tokens: u32, whole: u32) -> Result<()> {
        if whole > self.rate.burst {
            return Err(self.beyond_burst(label, whole));
        }
        if let Some(fleet) = &self.fleet {
            match fleet.take(label, tokens, self.rate.per_second, self.rate.burst) {
                Taken::Yes => return self.reached(fleet),
                Taken::Wait(wait) => return Err(self.over(label, wait)),
                Taken::Unknown(why) => self.lost(fleet, &why),
            }
        }
        let n = NonZeroU32::new(tokens).unwrap_or(NonZeroU32::MIN);
        match self.limiter.check_key_n(&label.to_string(), n) {
            Ok(Ok(())) => Ok(()),
            Err(_) => Err(self.beyond_burst(label, whole)),
            Ok(Err(not_until)) => Err(self.over(label, not_until.wait_time_from(self.clock.now()))),
        }
    }

    fn over(&self, label: &str, wait: Duration) -> Error {
        Error::unavailable(format!(
            "key '{label}' is over its rate (key_rate {}/s, key_burst {}): retry in {:.3} s",
            self.rate.per_second,
            self.rate.burst,
            wait.as_secs_f64().max(0.001)
        ))
    }

    /// The fleet's allowance was read: an outage, if any, is over.
    fn reached(&self, fleet: &Allowances) -> Result<()> {
        if self.out_of_reach.swap(false, Ordering::Relaxed) {
            log::info(&format!(
                "key rates: back on the allowance {} shares with the fleet",
                fleet.describe()
            ));
        }
        Ok(())
    }

    fn lost(&self, fleet: &Allowances, why: &str) {
        if !self.out_of_reach.swap(true, Ordering::Relaxed) {
            log::warn(&format!(
                "key rates: the allowance {} shares with the fleet is out of reach ({why}); \
                 this server limits each key on its own until it is back",
                fleet.describe()
            ));
        }
    }
}

impl Limiter {
    fn beyond_burst(&self, label: &str, cost: u32) -> Error {
        Error::invalid(format!(
            "this request costs {cost} of key '{label}''s rate (its images, frames or rows, one \
             per face matched, times top_k), more than its key_burst {}: send fewer or smaller \
             groups of faces, or a smaller top_k",
            self.rate.burst
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_refusals_with_a_hint_then_served_again() {
        let rate = KeyRate {
            per_second: 20.0,
            burst: 3,
        };
        let limiter = Limiter::new(rate, None).unwrap();
        limiter.take("cam", 1).unwrap();
        limiter.take("cam", 2).unwrap();
        let e = limiter.take("cam", 1).unwrap_err().to_string();
        assert!(e.contains("retry in 0.0"), "{e}");
        limiter
            .take("other", 3)
            .expect("each label has its own allowance");
        let e = limiter.take("other", 4).unwrap_err().to_string();
        assert!(e.contains("costs 4") && e.contains("key_burst 3"), "{e}");
        std::thread::sleep(Duration::from_millis(60));
        limiter
            .take("cam", 1)
            .expect("one request back after 1/20 s");
    }

    #[test]
    fn the_fleets_allowance_out_of_reach_limits_on_this_server() {
        use crate::gallery::store::postgres::target::Target;
        // Port 1 on loopback: refused at once.
        let target = Target::parse("postgresql://face@127.0.0.1:1/face", "TEST_DSN").unwrap();
        let fleet = Allowances::new(target, "g");
        let rate = KeyRate {
            per_second: 0.01,
            burst: 2,
        };
        let limiter = Limiter::new(rate, Some(fleet)).unwrap();
        limiter.take("cam", 2).unwrap();
        let e = limiter.take("cam", 1).unwrap_err().to_string();
        assert!(e.contains("over its rate"), "{e}");
    }
}
