//! Vectors and graphs the index's tests share.

use super::VectorIndex;
use crate::metric::Metric;

pub fn unit(seed: u64, dim: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<f32> = (0..dim)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    v.into_iter().map(|a| a / n).collect()
}

/// A random unit vector, each value hashed on its own (splitmix64):
/// `unit`'s values of nearby seeds are alike.
pub fn random_unit(seed: u64, dim: usize) -> Vec<f32> {
    let v: Vec<f32> = (0..dim as u64)
        .map(|i| {
            let mut z = (seed << 20 ^ i).wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    v.into_iter().map(|a| a / n).collect()
}

/// A vector close to `centre`: most of it is the centre.
pub fn near(centre: &[f32], seed: u64) -> Vec<f32> {
    let noise = random_unit(seed, centre.len());
    let v: Vec<f32> = centre
        .iter()
        .zip(&noise)
        .map(|(c, n)| c + 0.3 * n)
        .collect();
    let n = v.iter().map(|a| a * a).sum::<f32>().sqrt();
    v.into_iter().map(|a| a / n).collect()
}

/// A graph (searched through the graph beyond 100 vectors) of `first`,
/// inserted alone, then `crowd`, all at once.
pub fn graph_of(dim: usize, first: &[(u64, Vec<f32>)], crowd: &[(u64, Vec<f32>)]) -> VectorIndex {
    let index = VectorIndex::new(Metric::Cosine, dim)
        .unwrap()
        .with_exact_up_to(100);
    for (k, v) in first {
        index.insert(*k, v).unwrap();
    }
    let items: Vec<(u64, &[f32])> = crowd.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    index.insert_all(&items, &mut |_, _| {}).unwrap();
    index
}

/// A crowd of 4,999 around a centre, 64 values each, and a loner
/// (key 0) opposite, gone in first: the crowd that follows prunes the
/// links to it (the case measured with a real face among a million).
pub fn loner_and_crowd() -> (Vec<f32>, Vec<f32>, VectorIndex) {
    let centre = unit(1, 64);
    let loner: Vec<f32> = centre.iter().map(|c| -c).collect();
    let crowd: Vec<(u64, Vec<f32>)> = (1..5000u64).map(|k| (k, near(&centre, k))).collect();
    let index = graph_of(64, &[(0, loner.clone())], &crowd);
    (centre, loner, index)
}

/// Most of `person`, a little of `photo`: one photo of that person.
pub fn photo_mix(person: &[f32], photo: &[f32]) -> Vec<f32> {
    person.iter().zip(photo).map(|(p, f)| p + f).collect()
}
