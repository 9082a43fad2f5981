//! A rate per key label (`key_rate`, `key_burst`), shared by the models on
//! one store (shared.rs): a stolen key cannot sweep the gallery at the
//! server's speed. A request costs its work, not one token (needs.rs:
//! `cost`). governor's GCRA keyed by label (labels are few: the key file's).

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::error::{Error, Result};

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
    limiter: DefaultKeyedRateLimiter<String>,
    clock: DefaultClock,
}

impl Limiter {
    pub fn new(rate: KeyRate) -> Result<Limiter> {
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
        let n = NonZeroU32::new(tokens).unwrap_or(NonZeroU32::MIN);
        match self.limiter.check_key_n(&label.to_string(), n) {
            Ok(Ok(())) => Ok(()),
            Err(_) => Err(self.beyond_burst(label, whole)),
            Ok(Err(not_until)) => {
                let wait = not_until.wait_time_from(self.clock.now());
                Err(Error::unavailable(format!(
                    "key '{label}' is over its rate (key_rate {}/s, key_burst {}): retry in \
                     {:.3} s",
                    self.rate.per_second,
                    self.rate.burst,
                    wait.as_secs_f64().max(0.001)
                )))
            }
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
        let limiter = Limiter::new(KeyRate {
            per_second: 20.0,
            burst: 3,
        })
        .unwrap();
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
}
