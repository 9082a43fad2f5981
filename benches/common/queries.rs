//! Queries for the in-process gallery examples: reproducible noise, and
//! vectors made unit length (a random unit vector is an unknown face; a
//! stored one plus a little noise, a known face); and their times' percentiles.

/// Uniform noise in -0.5..0.5 (xorshift), `dim` values.
pub fn noise(seed: u64, dim: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f32 / (1u64 << 53) as f32 - 0.5
    };
    (0..dim).map(|_| next()).collect()
}

/// `v` scaled to length 1.
pub fn unit(v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

/// The `q` quantile of `t` (0.5: the median), sorting `t`.
pub fn percentile(t: &mut [f64], q: f64) -> f64 {
    t.sort_by(|a, b| a.total_cmp(b));
    t[((t.len() - 1) as f64 * q) as usize]
}
