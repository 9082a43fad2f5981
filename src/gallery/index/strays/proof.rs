//! When a stray alone answers a query, without the walk. A stray is a node
//! far from the others (an out-of-place photo among a million bulk-loaded
//! people: `strays/`), which the walk does not reach: a query that matches
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
//! `apart` comes from one exact scan of the stored vectors, its first
//! `WINDOW_KEYS` re-ranked by the full distance: the nearest of those, and,
//! for anyone the stored form put beyond them, the last one's distance less
//! twice how far the stored form's ranking can be from the full distance
//! (`ranking_error`). A bound, not an estimate: a proof never names anyone
//! a scan of every full vector would not put first.

use super::super::{failed, split, Graph, Hit, VectorIndex};
use super::strays_near;
use crate::error::Result;
use crate::metric::Metric;

/// How many of the exact scan's nearest are re-ranked by the full distance.
const WINDOW_KEYS: usize = 1024;
/// f16 vectors are ranked by their own values, widened: only the sum's
/// rounding is left.
const F16_RANKING_ERROR: f32 = 1e-3;
/// Slack in the measure for the full distance's own rounding (about 1e-4).
const SLACK: f32 = 1e-3;
/// A split vector's coarse step (`split.rs`).
const STEP: f32 = 127.0;
/// A split vector's fine step within a coarse one (`split.rs`).
const FINE_STEP: f32 = 14.0;

/// `d` (the gallery's distance) as a metric: the angle for cosine.
fn measure(metric: Metric, d: f32) -> f32 {
    match metric {
        Metric::Cosine => (1.0 - d).clamp(-1.0, 1.0).acos(),
        Metric::Euclidean => d,
    }
}

/// How far, at most, usearch's ranking of split vectors against `s` (by
/// the integer dot product of coarse bytes, c = 127 f - g, |g| <= 0.5 per
/// value) is from the cosine distance of the restored vectors `f`, for
/// any other vector: c_s.c_x = 127^2 f_s.f_x - 127 g_s.f_x - c_s.g_x, so
/// the dot is off by at most (127 |g_s| |f_x| + 0.5 |c_s|_1) / 127^2; and
/// a restored vector's length is 1 within 0.5 sqrt(dim) / (127 x 14), which
/// turns a dot into a cosine within 3 times that. About 0.14 at 512 values.
fn ranking_error(coarse: &[i8], full: &[f32]) -> f32 {
    let length_error = 0.5 * (full.len() as f32).sqrt() / (STEP * FINE_STEP);
    let g = full
        .iter()
        .zip(coarse)
        .map(|(f, &c)| (STEP * f - c as f32).powi(2))
        .sum::<f32>()
        .sqrt();
    let c1: f32 = coarse.iter().map(|&c| (c as f32).abs()).sum();
    g * (1.0 + length_error) / STEP + 0.5 * c1 / (STEP * STEP) + 3.0 * length_error
}

/// The distance from a stray to every other entry is at least this, given
/// the full distances of the exact scan's window (the stray itself left
/// out) and, when the scan held more entries than the window, the least
/// any of those can be (`beyond`).
fn apart_from(window: &[f32], beyond: Option<f32>) -> f32 {
    let nearest = window.iter().copied().fold(f32::INFINITY, f32::min);
    nearest.min(beyond.unwrap_or(f32::INFINITY)).max(0.0)
}

/// Whether a stray at `to_query` from a query, and at least `apart` from
/// every other entry, is nearer to the query than any other entry.
fn proves_nearest(metric: Metric, to_query: f32, apart: f32) -> bool {
    2.0 * measure(metric, to_query) + SLACK < measure(metric, apart)
}

/// Whether any `apart` could prove a stray at `to_query` the nearest (an
/// angle over half a turn cannot): measuring it is worth its scan.
fn may_prove(metric: Metric, to_query: f32) -> bool {
    proves_nearest(metric, to_query, f32::INFINITY)
}

impl VectorIndex {
    /// The nearest entry of all, when it is a stray within `within` of
    /// `query` that is proven the nearest (above): no walk needed.
    /// `None`: search (the strays scanned again with the walk: 0.03 ms at
    /// a million's 1,135). The first time a stray is asked for, how far it
    /// is from the others is measured: an exact scan, 80 ms at a million,
    /// under the read lock (an insertion, and the searches after it, wait).
    pub fn proven_nearest(&self, query: &[f32], within: f32) -> Result<Option<Hit>> {
        self.check(query)?;
        let index = self.read();
        if index.size() <= self.exact_up_to {
            return Ok(None);
        }
        let (mut coarse, mut fine) = split::buffers(self.dim);
        if index.fine.is_some() {
            split::split(query, &mut coarse, &mut fine);
        }
        let strays = self.strays.read().unwrap_or_else(|e| e.into_inner());
        let nearest = strays_near(&index, &strays, query, &coarse, 1)?;
        let Some(&key) = nearest.first() else {
            return Ok(None);
        };
        let Some(hit) = self.rerank(&index, &[key], query)?.pop() else {
            return Ok(None);
        };
        if hit.distance > within {
            return Ok(None);
        }
        let apart = match strays.apart(key) {
            Some(apart) => apart,
            None if !may_prove(self.metric, hit.distance) => return Ok(None),
            None => {
                let apart = self.measure_apart(&index, key)?;
                strays.set_apart(key, apart);
                apart
            }
        };
        Ok(proves_nearest(self.metric, hit.distance, apart).then_some(hit))
    }

    /// How far `key` is from every other entry, at least: the exact scan's
    /// nearest `WINDOW_KEYS` by the stored form, re-ranked (above).
    fn measure_apart(&self, index: &Graph, key: u64) -> Result<f32> {
        let (mut own, mut coarse) = (vec![0.0f32; self.dim], vec![0i8; self.dim]);
        if !index.full(key, &mut own, &mut coarse) {
            return Ok(0.0); // gone: proves nothing
        }
        let (found, error) = match index.fine {
            Some(_) => (
                index.exact_search(&coarse, WINDOW_KEYS + 1),
                ranking_error(&coarse, &own),
            ),
            None => (index.exact_search(&own, WINDOW_KEYS + 1), F16_RANKING_ERROR),
        };
        let found = found.map_err(|e| failed("search", e))?;
        let others: Vec<u64> = found.keys.iter().copied().filter(|&k| k != key).collect();
        let window = self.rerank(index, &others, &own)?;
        // Whoever the scan put after its last is at least that far, less
        // the ranking's error for both (the stray itself last: nothing).
        let beyond = (index.size() > found.keys.len()).then(|| {
            let last = found.keys.last();
            let last = last.and_then(|&k| window.iter().find(|h| h.key == k));
            last.map_or(0.0, |h| h.distance - 2.0 * error)
        });
        let distances: Vec<f32> = window.iter().map(|h| h.distance).collect();
        Ok(apart_from(&distances, beyond))
    }

    /// `key` went in: each stray measured apart is at most its distance
    /// to it away from every other entry (a distance per stray measured:
    /// at most MAX_STRAYS, under the write lock).
    pub(in crate::gallery::index) fn lower_apart(&self, index: &Graph, key: u64) {
        let (mut arrived, mut stray, mut coarse) = (
            vec![0.0f32; self.dim],
            vec![0.0f32; self.dim],
            vec![0i8; self.dim],
        );
        let strays = self.strays.read().unwrap_or_else(|e| e.into_inner());
        if !strays.any_apart() {
            return;
        }
        if !index.full(key, &mut arrived, &mut coarse) {
            return strays.forget_apart();
        }
        // A stray's own key again (its copy was left among the strays when
        // it went): its bound was another vector's.
        strays.arrived(|s| {
            (s != key && index.full(s, &mut stray, &mut coarse))
                .then(|| self.metric.distance(&stray, &arrived))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gallery::index::test_vectors::{loner_and_crowd, near};
    use crate::gallery::index::VectorIndex;

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
    fn no_one_beyond_the_window_is_taken_nearer_than_the_ranking_allows() {
        assert_eq!(apart_from(&[0.8, 0.9], None), 0.8);
        assert_eq!(apart_from(&[0.8, 0.9], Some(0.75)), 0.75);
        assert_eq!(apart_from(&[0.8, 0.9], Some(0.85)), 0.8);
        assert_eq!(apart_from(&[], Some(-0.2)), 0.0);
        assert_eq!(apart_from(&[], None), f32::INFINITY);
    }

    #[test]
    fn the_ranking_error_bounds_the_worst_case() {
        // Every value rounded by half a step the same way: the bound's own
        // worst case, for a vector of 512 values 1 / sqrt(512) each.
        let dim = 512;
        let u = 1.0 / (dim as f32).sqrt();
        let coarse = vec![(STEP * u).round() as i8; dim];
        let full = vec![u; dim];
        let e = ranking_error(&coarse, &full);
        let g = (STEP * u - (STEP * u).round()).abs() * (dim as f32).sqrt();
        assert!(e >= g / STEP, "{e} {g}");
        assert!(e > 0.05 && e < 0.3, "{e}");
    }

    #[test]
    fn a_half_turn_away_proves_nothing() {
        assert!(may_prove(Metric::Cosine, 0.5));
        assert!(!may_prove(Metric::Cosine, 1.0));
        assert!(may_prove(Metric::Euclidean, 10.0));
    }

    /// Whatever `index` proves the nearest of `q` is what a scan of all
    /// finds first; whether it proved one.
    fn proven_right(index: &VectorIndex, q: &[f32]) -> bool {
        let proven = index.proven_nearest(q, 2.0).unwrap();
        if let Some(hit) = proven {
            assert_eq!(hit, index.nearest_exact(q, 1).unwrap()[0]);
        }
        proven.is_some()
    }

    /// `a` turned `t` of the way towards `b`, unit length.
    fn between(a: &[f32], b: &[f32], t: f32) -> Vec<f32> {
        let v: Vec<f32> = a
            .iter()
            .zip(b)
            .map(|(x, y)| (1.0 - t) * x + t * y)
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / n).collect()
    }

    #[test]
    fn a_stray_proven_nearest_is_the_exact_nearest() {
        let (centre, loner, index) = loner_and_crowd();
        index.find_strays(&(0..5000).collect::<Vec<u64>>()).unwrap();
        let query = near(&loner, 9);
        let exact = index.nearest_exact(&query, 1).unwrap()[0];
        assert_eq!(index.proven_nearest(&query, 0.5).unwrap(), Some(exact));
        assert_eq!(exact.key, 0);
        let closer = exact.distance / 2.0;
        assert_eq!(index.proven_nearest(&query, closer).unwrap(), None);
        for seed in 0..200u64 {
            let around = if seed % 2 == 0 { &centre } else { &loner };
            proven_right(&index, &near(around, 20_000 + seed));
        }
        // Another arrives near the loner, alone: the loner's bound falls
        // (kept, it would prove the loner for faces nearer the newcomer).
        let newcomer = near(&loner, 30);
        index.insert(7000, &newcomer).unwrap();
        let sweep = |index: &VectorIndex| {
            (0..=10)
                .filter(|&t| proven_right(index, &between(&loner, &newcomer, t as f32 / 10.0)))
                .count()
        };
        assert!(sweep(&index) > 0, "the ends are proven");
        // A stray removed is not proven; its bound goes with it.
        index.remove(0).unwrap();
        assert_ne!(
            index.proven_nearest(&loner, 0.5).unwrap().map(|h| h.key),
            Some(0)
        );
        sweep(&index);
        // A twin: neither of the two is proven the nearest.
        index.insert(7777, &newcomer).unwrap();
        assert_eq!(index.proven_nearest(&newcomer, 0.5).unwrap(), None);
        index
            .insert_all(&[(7778, loner.as_slice())], &mut |_, _| {})
            .unwrap();
        sweep(&index);
        assert_eq!(index.proven_nearest(&newcomer, 0.5).unwrap(), None);
    }
}
