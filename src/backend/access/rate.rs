//! A rate per key label (`key_rate`, `key_burst`), shared by a model's
//! instances: a stolen key cannot sweep the gallery at the server's speed.
//! governor's GCRA keyed by label (labels are few: the key file's).

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

    /// One request of `label`: taken from its allowance, or refused with
    /// Triton's "unavailable" and when to retry (a refusal takes nothing).
    pub fn take(&self, label: &str) -> Result<()> {
        match self.limiter.check_key(&label.to_string()) {
            Ok(()) => Ok(()),
            Err(not_until) => {
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
        for _ in 0..3 {
            limiter.take("cam").unwrap();
        }
        let e = limiter.take("cam").unwrap_err().to_string();
        assert!(e.contains("retry in 0.0"), "{e}");
        limiter
            .take("other")
            .expect("each label has its own allowance");
        std::thread::sleep(Duration::from_millis(60));
        limiter.take("cam").expect("one request back after 1/20 s");
    }
}
