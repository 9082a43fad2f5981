//! The index in its file: usearch's own bytes, then the fine half bytes of
//! split vectors; the sign bits made again at load.

use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::Path;

use usearch::{Index, ScalarKind};

use super::{failed, options_shaped, shape, threads, Graph, VectorIndex, FIRST_CAPACITY};
use crate::error::Result;
use crate::gallery::huge_pages::Deferred;
use crate::gallery::split::Fine;
use crate::gallery::wipe;
use crate::metric::Metric;

impl VectorIndex {
    /// An index saved by `save`; an error when the file is not one of
    /// `metric` and `dim` vectors in this build's shape.
    pub fn load(path: &Path, metric: Metric, dim: usize) -> Result<Self> {
        let shown = path.display();
        let path_str = path
            .to_str()
            .ok_or_else(|| failed("load", "path is not UTF-8"))?;
        let meta =
            Index::metadata(path_str).map_err(|e| failed("load", format!("{shown}: {e}")))?;
        let ours = options_shaped(metric, dim, shape(metric))?;
        if meta.dimensions != dim as u64
            || meta.metric != ours.metric
            || meta.quantization != ours.quantization
            || meta.multi
        {
            return Err(failed(
                "load",
                format!("{shown} holds another kind of index"),
            ));
        }
        // Small pages while reading, huge ones after (`huge_pages.rs`).
        let deferred = Deferred::begin();
        let index = Index::new(&ours).map_err(|e| failed("create", e))?;
        index
            .load(path_str)
            .map_err(|e| failed("load", format!("{shown}: {e}")))?;
        let capacity = index.size().max(FIRST_CAPACITY);
        index
            .reserve_capacity_and_threads(capacity, threads())
            .map_err(|e| failed("reserve", e))?;
        // usearch reads its own bytes and stops: the fine bytes follow them.
        let fine = match ours.quantization {
            ScalarKind::I8 => {
                let fine = File::open(path)
                    .and_then(|mut f| Fine::read_from(&mut f, dim))
                    .map_err(|e| failed("load", format!("{shown}: {e}")))?;
                if fine.len() != index.size() {
                    return Err(failed(
                        "load",
                        format!("{shown}: fine bytes of another index"),
                    ));
                }
                let mut fine = fine;
                fine.make_signs(|key, coarse| matches!(index.get(key, coarse), Ok(1)))
                    .map_err(|e| failed("load", format!("{shown}: sign bits: {e}")))?;
                Some(fine)
            }
            _ => None,
        };
        let mut loaded = Self::around(Graph { index, fine }, metric, dim, &ours)?;
        loaded.collapsing = deferred.collapse();
        Ok(loaded)
    }

    /// Write the index to `path` (searches go on; changes wait).
    pub fn save(&self, path: &Path) -> Result<()> {
        let shown = path.display();
        let path_str = path
            .to_str()
            .ok_or_else(|| failed("save", "path is not UTF-8"))?;
        let graph = self.read();
        graph
            .save(path_str)
            .map_err(|e| failed("save", format!("{shown}: {e}")))?;
        wipe::zero_free_rows(path)
            .map_err(|e| failed("save", format!("{shown}: {e}: removed vectors not zeroed")))?;
        if let Some(fine) = &graph.fine {
            let appended = OpenOptions::new().append(true).open(path).and_then(|f| {
                let mut out = BufWriter::new(f);
                fine.write_to(&mut out)?;
                out.into_inner().map_err(|e| e.into_error())?.sync_all()
            });
            appended.map_err(|e| failed("save", format!("{shown}: {e}")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_vectors::random_unit;
    use super::super::VectorIndex;
    use crate::gallery::split;
    use crate::metric::Metric;

    #[test]
    fn a_split_index_saves_and_loads_whole_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("tf-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("index");
        let index = VectorIndex::new(Metric::Cosine, 64).unwrap();
        for k in 0..500u64 {
            index.insert(k, &random_unit(k, 64)).unwrap();
        }
        index.remove(7).unwrap();
        index.save(&path).unwrap();
        let back = VectorIndex::load(&path, Metric::Cosine, 64).unwrap();
        assert_eq!(back.len(), 499);
        let v = random_unit(42, 64);
        let hit = back.nearest(&v, 1).unwrap()[0];
        assert_eq!(hit.key, 42);
        assert!(hit.distance < 1e-4, "{hit:?}");
        assert_eq!(back.vector(7), None);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(VectorIndex::load(&path, Metric::Cosine, 64).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A 64-d index of `n` random unit vectors, keys 0 to `n - 1`.
    fn filled(metric: Metric, n: u64) -> VectorIndex {
        let index = VectorIndex::new(metric, 64).unwrap();
        for k in 0..n {
            index.insert(k, &random_unit(k, 64)).unwrap();
        }
        index
    }

    /// A removed vector's bytes are zeroed in memory as it is removed (the
    /// vendored usearch's patch): usearch's own save, without the wipe that
    /// `save` adds, holds no copy of it; the strays' flat copy is the same
    /// kind of usearch index.
    #[test]
    fn a_removed_vector_is_zeroed_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raw");
        for metric in [Metric::Cosine, Metric::Euclidean] {
            let index = filled(metric, 200);
            // Each vector as usearch stores it: i8 (cosine), f16 (Euclidean).
            let raw = |k: u64| -> Vec<u8> {
                match metric {
                    Metric::Cosine => {
                        let (mut coarse, mut fine) = split::buffers(64);
                        split::split(&random_unit(k, 64), &mut coarse, &mut fine);
                        coarse.iter().map(|q| *q as u8).collect()
                    }
                    Metric::Euclidean => (index.vector(k).unwrap().iter())
                        .flat_map(|x| f16_bits(*x).to_le_bytes())
                        .collect(),
                }
            };
            let (gone, kept) = (raw(77), raw(78));
            index.remove(77).unwrap();
            index.read().save(path.to_str().unwrap()).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            let within = |form: &[u8]| bytes.windows(form.len()).any(|w| w == form);
            assert!(
                !within(&gone),
                "{metric:?}: the removed vector is still in memory"
            );
            assert!(
                within(&kept),
                "{metric:?}: a kept one is found the same way"
            );
        }
    }

    /// A removed vector leaves no copy in the saved file, in any of its
    /// forms (i8 and fine half bytes of a split index, f16 of a Euclidean
    /// one), and what stays is found as before.
    #[test]
    fn a_saved_index_holds_no_removed_vector() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        for metric in [Metric::Cosine, Metric::Euclidean] {
            let index = filled(metric, 300);
            let stored: Vec<Vec<f32>> = (0..300).map(|k| index.vector(k).unwrap()).collect();
            let forms = |k: u64| -> Vec<Vec<u8>> {
                let v = random_unit(k, 64);
                let (mut coarse, mut fine) = split::buffers(64);
                split::split(&v, &mut coarse, &mut fine);
                let f16: Vec<u8> = stored[k as usize]
                    .iter()
                    .flat_map(|x| f16_bits(*x).to_le_bytes())
                    .collect();
                let coarse: Vec<u8> = coarse.iter().map(|q| *q as u8).collect();
                match metric {
                    Metric::Cosine => vec![coarse[..32].to_vec(), fine],
                    Metric::Euclidean => vec![f16[..64].to_vec()],
                }
            };
            let within = |bytes: &[u8], form: &[u8]| bytes.windows(form.len()).any(|w| w == form);
            for k in [3, 150, 299] {
                index.remove(k).unwrap();
            }
            index.save(&path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            for k in [3, 150, 299] {
                assert!(
                    !forms(k).iter().any(|f| within(&bytes, f)),
                    "{metric:?} {k}"
                );
            }
            assert!(
                forms(4).iter().all(|f| within(&bytes, f)),
                "{metric:?}: a kept one"
            );
            let back = VectorIndex::load(&path, metric, 64).unwrap();
            assert_eq!(back.len(), 297);
            assert_eq!(back.nearest(&random_unit(4, 64), 1).unwrap()[0].key, 4);
        }
    }

    /// The f16 bits of `x`, a value an f16 holds exactly.
    fn f16_bits(x: f32) -> u16 {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let exponent = ((bits >> 23) & 0xff) as i32 - 127 + 15;
        match x {
            0.0 => sign,
            _ if exponent <= 0 => sign | (x.abs() * 2f32.powi(24)).round() as u16,
            _ => sign | ((exponent as u16) << 10) | ((bits >> 13) & 0x3ff) as u16,
        }
    }
}
