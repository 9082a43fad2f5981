//! How wide a match looks. First the graph, as the index is set; when that
//! finds no one within the threshold and the search may miss, once more,
//! wider, before the face is called unknown: a face far from everyone it
//! was compared with is where a graph search strays (the hardest case for
//! HNSW). So a known face pays the first look only, and the wider one
//! brings the names the first one missed (docs/gallery.md, "Matching a
//! large gallery"). Beyond `EXACT_RETRY_UP_TO` the index takes both looks
//! in one search: the second one's scan may begin beside the first's walk.

use crate::error::Result;

/// How many hits wide the graph is searched the second time (dlib's `f16`
/// galleries): at a million, wider found no more planted faces and took
/// about twice as long.
pub const WIDER_SEARCH: usize = 256;
/// Up to this many vectors, the second look is an exact scan instead: over
/// uniform random vectors the graph missed planted faces even 512 wide
/// (docs/gallery.md, "Matching a large gallery").
pub const EXACT_RETRY_UP_TO: usize = 200_000;

/// How wide a search looks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Breadth {
    /// The graph, at least this many hits wide (0: as the index is set).
    Graph(usize),
    /// A scan of every vector.
    Exact,
    /// The graph as set, then, when its nearest is farther than this, a
    /// scan of every vector's sign bits, the nearest re-ranked
    /// (`VectorIndex::nearest_then_signs`; f16 vectors: the graph
    /// `WIDER_SEARCH` wide).
    GraphThenSigns(f32),
}

/// What `search` finds, nearest first, looked for a second time, wider,
/// when its nearest is not within `threshold` (by `distance`) and the
/// search may miss (`approximate`); `size`: the vectors searched.
pub fn look<T>(
    size: usize,
    approximate: bool,
    threshold: f32,
    distance: impl Fn(&T) -> f32,
    mut search: impl FnMut(Breadth) -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    if approximate && size > EXACT_RETRY_UP_TO {
        return search(Breadth::GraphThenSigns(threshold));
    }
    let found = search(Breadth::Graph(0))?;
    let named = found
        .first()
        .is_some_and(|nearest| distance(nearest) <= threshold);
    if named || !approximate {
        return Ok(found);
    }
    search(Breadth::Exact)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn looks(approximate: bool, size: usize, first: f32) -> Vec<Breadth> {
        let mut asked = Vec::new();
        look(
            size,
            approximate,
            0.5,
            |d: &f32| *d,
            |b| {
                asked.push(b);
                Ok(vec![if asked.len() == 1 { first } else { 0.1 }])
            },
        )
        .unwrap();
        asked
    }

    #[test]
    fn a_named_face_is_looked_for_once() {
        assert_eq!(looks(true, 1_000, 0.4), [Breadth::Graph(0)]);
    }

    #[test]
    fn an_unnamed_face_is_looked_for_again_wider() {
        let both = [Breadth::GraphThenSigns(0.5)];
        assert_eq!(looks(true, 1_000_000, 0.6), both);
        assert_eq!(looks(true, 1_000, 0.6), [Breadth::Graph(0), Breadth::Exact]);
    }

    #[test]
    fn an_exact_search_is_not_repeated() {
        assert_eq!(looks(false, 1_000, 0.9), [Breadth::Graph(0)]);
    }
}
