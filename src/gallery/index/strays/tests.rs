use super::super::test_vectors::{graph_of, loner_and_crowd, near, photo_mix, unit};
use super::STALE_STRAYS_MIN;

#[test]
fn a_vector_far_from_all_others_is_still_found() {
    let (centre, loner, index) = loner_and_crowd();
    let keys: Vec<u64> = (0..5000).collect();
    let strays = index.find_strays(&keys).unwrap();
    assert!(strays < 50, "{strays} strays in a well-linked crowd");
    let hits = index.nearest(&near(&loner, 9), 4).unwrap();
    assert_eq!(hits[0].key, 0, "{hits:?}, {strays} strays");
    // Counted over this graph: saved with it, taken back instead of counting.
    let (counted, limit) = index.counted_strays().expect("just counted");
    assert!(counted.contains(&0) && limit > 0.0);
    assert_eq!(
        index.set_strays(&[0, 123_456], limit, 0).unwrap(),
        1,
        "only keys it holds"
    );
    // Inserted one at a time after the crowd: checked as it goes in.
    let other: Vec<f32> = near(&loner, 10).iter().map(|x| -x * 0.5 + 0.1).collect();
    index.insert(9999, &other).unwrap();
    assert_eq!(index.nearest(&other, 1).unwrap()[0].key, 9999);
    assert_eq!(index.counted_strays(), None, "an insertion may cut links");
    // Saved all the same (the sign scan finds what the record lacks),
    // with how many vectors changed since the count.
    let (kept, kept_limit, changed) = index.strays_to_save().expect("sign bits");
    assert!(
        kept.contains(&0) && kept_limit == limit && changed == 1,
        "{kept:?}"
    );
    index.remove(0).unwrap();
    assert_ne!(index.nearest(&loner, 1).unwrap()[0].key, 0);
    let (kept, _, changed) = index.strays_to_save().unwrap();
    assert!(
        !kept.contains(&0) && changed == 2,
        "a removed vector is not recorded"
    );
    // Taken back from a manifest with its changes: too many, and they
    // are no longer recorded (the next load counts them again).
    index.set_strays(&kept, limit, STALE_STRAYS_MIN).unwrap();
    assert_eq!(index.strays_to_save().map(|s| s.2), Some(STALE_STRAYS_MIN));
    index.insert(10_000, &near(&centre, 10_000)).unwrap();
    assert_eq!(
        index.strays_to_save(),
        None,
        "more than 1,000 and 1% changed"
    );
}

#[test]
fn photos_of_one_person_far_from_the_crowd_are_strays() {
    // Four photos of one person, each other's nearest, all far from a
    // crowd of another kind of face: their links out are long, so no
    // walk from the crowd needs to reach them. Their nearest neighbour
    // is close, and links from the others lead to each: their reach
    // tells.
    let dim = 64;
    let centre = unit(1, dim);
    let person: Vec<f32> = centre.iter().map(|c| -c).collect();
    let mut vectors: Vec<(u64, Vec<f32>)> = (0..6000u64).map(|k| (k, near(&centre, k))).collect();
    for k in 0..4u64 {
        let photo: Vec<f32> = near(&person, 100 + k).iter().map(|x| x * 0.2).collect();
        vectors.push((10_000 + k, near(&photo_mix(&person, &photo), 200 + k)));
    }
    let index = graph_of(dim, &[], &vectors);
    let keys: Vec<u64> = vectors.iter().map(|(k, _)| *k).collect();
    let strays = index.find_strays(&keys).unwrap();
    let (counted, limit) = index.counted_strays().unwrap();
    for k in 10_000..10_004 {
        assert!(counted.contains(&k), "{k} not among the {strays} strays");
    }
    // Whatever else marks them (few links may lead to some), each one's
    // links are longer than nearly every node's.
    let photos: Vec<u64> = (10_000..10_004).collect();
    let reach = index.reach(&index.read(), &photos, Some(limit));
    assert!(
        reach.iter().all(|r| r.is_some_and(|r| r > limit)),
        "{reach:?} {limit}"
    );
    assert!(strays <= 6000 / 100, "{strays} strays");
    assert_eq!(
        index.nearest(&near(&person, 300), 1).unwrap()[0].key / 10_000,
        1
    );
}

#[test]
fn more_searches_at_once_than_cores_all_scan_the_strays() {
    let dim = 32;
    let loner: Vec<f32> = unit(1, dim).iter().map(|c| -c).collect();
    let crowd: Vec<(u64, Vec<f32>)> = (1..3000u64).map(|k| (k, near(&unit(1, dim), k))).collect();
    let index = graph_of(dim, &[(0, loner.clone())], &crowd);
    let keys: Vec<u64> = (0..3000).collect();
    assert!(index.find_strays(&keys).unwrap() > 0);
    std::thread::scope(|scope| {
        for t in 0..16u64 {
            let (index, loner) = (&index, &loner);
            scope.spawn(move || {
                for i in 0..50 {
                    let hits = index.nearest(&near(loner, t * 100 + i), 4).unwrap();
                    assert_eq!(hits[0].key, 0);
                }
            });
        }
    });
}
