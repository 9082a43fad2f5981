//! When a stray alone answers a query, without the walk. A stray is a node
//! far from the others (an out-of-place photo among a million bulk-loaded
//! people: `index.rs`), which the walk does not reach: a query that matches
//! one paid for a walk that could not find it (about 1 ms cold at a
//! million) before the stray scan named it.
//!
//! The triangle inequality proves a stray `s` the nearest of all: with
//! `apart` no other entry closer to `s` than that, and the query `q` at `a`
//! from `s`, every other entry `x` is at least `apart - a` from `q`, so
//! when `2 a < apart` no entry is nearer to `q` than `s`. The measure must
//! be a metric: the angle between two directions for cosine galleries (1 -
//! cos is not one), the distance itself for Euclidean ones.
//!
//! `apart` comes from one exact scan of the stored (i8 or f16) vectors, its
//! first `WINDOW_KEYS` re-ranked by the full distance: the nearest of those,
//! and, for anyone the stored form put beyond them, the last one's distance
//! less `STORED_ERROR`.

use crate::pipeline::Metric;

/// How many of the exact scan's nearest are re-ranked by the full distance.
pub const WINDOW_KEYS: usize = 1024;
/// How far a full distance (as 1 - cos, or Euclidean) may be below the one
/// the stored form ranked by, and by more: i8 values (rounded to 1/127) put
/// a cosine 2e-3 off (one standard deviation, 512 values), f16 1e-4.
/// Counted twice, for the entry and the last of the window.
pub const STORED_ERROR: f32 = 0.05;
/// Slack in the measure for the full distance's own rounding (about 1e-4).
const SLACK: f32 = 1e-3;

/// `d` (the gallery's distance) as a metric: the angle for cosine.
fn measure(metric: Metric, d: f32) -> f32 {
    match metric {
        Metric::Cosine => (1.0 - d).clamp(-1.0, 1.0).acos(),
        Metric::Euclidean => d,
    }
}

/// The distance from a stray to every other entry is at least this, given
/// the full distances of the exact scan's window (the stray itself left
/// out), the window's last `last` and whether the scan held more entries
/// than the window.
pub fn apart_from(window: &[f32], last: f32, more: bool) -> f32 {
    let nearest = window.iter().copied().fold(f32::INFINITY, f32::min);
    match more {
        true => nearest.min(last - 2.0 * STORED_ERROR).max(0.0),
        false => nearest,
    }
}

/// Whether a stray at `to_query` from a query, and at least `apart` from
/// every other entry, is nearer to the query than any other entry.
pub fn proves_nearest(metric: Metric, to_query: f32, apart: f32) -> bool {
    2.0 * measure(metric, to_query) + SLACK < measure(metric, apart)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_closer_than_half_the_gap_is_proven() {
        // 1 - cos 0.77: 76.6 degrees apart; a query 0.011 off is 8.5.
        assert!(proves_nearest(Metric::Cosine, 0.011, 0.77));
        assert!(!proves_nearest(Metric::Cosine, 0.5, 0.77));
        assert!(proves_nearest(Metric::Euclidean, 0.29, 0.6));
        assert!(!proves_nearest(Metric::Euclidean, 0.3, 0.6));
    }

    #[test]
    fn cosine_is_judged_by_angle_not_by_one_minus_cos() {
        // 1 - cos is not a metric: 0.25 is less than half of 0.77, but
        // 41.4 degrees is more than half of 76.6.
        assert!(!proves_nearest(Metric::Cosine, 0.25, 0.77));
        // 0.2: 36.9 degrees, less than half.
        assert!(proves_nearest(Metric::Cosine, 0.2, 0.77));
    }

    #[test]
    fn no_one_beyond_the_window_is_taken_nearer_than_the_stored_form_allows() {
        assert_eq!(apart_from(&[0.8, 0.9], 0.95, false), 0.8);
        assert!((apart_from(&[0.8, 0.9], 0.85, true) - 0.75).abs() < 1e-6);
        assert_eq!(apart_from(&[], 0.0, true), 0.0);
        assert_eq!(apart_from(&[], 0.0, false), f32::INFINITY);
    }
}
