//! The images of one Execute spread over the instance's engines
//! (`batch_threads`), one thread each, in contiguous runs so the results
//! come back in order. When Triton's batcher hands one instance two requests
//! while another instance idles, both images still run at once.

use std::sync::{Mutex, MutexGuard};
use std::thread;

use crate::backend::instance::enter;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::gallery::Busy;
use crate::gpu::Gpu;
use crate::pipeline::{Analysis, Frame, Wanted};
use crate::triton::{guard, log};

/// One result per frame, in frame order. A panic or a GPU that cannot be
/// bound fails the frames of that thread alone; a thread the system refuses
/// to start leaves its run to the calling thread.
pub fn analyze_spread(
    engines: &mut [Box<dyn Engine>],
    gpu: Option<&Gpu>,
    frames: &[(&Frame, Wanted)],
) -> Vec<Result<Analysis>> {
    let run = per_thread(frames.len(), engines.len());
    // Each run behind a lock, so the calling thread can still take a run
    // whose thread did not start.
    let lanes: Vec<Mutex<Lane>> = (engines.iter_mut().zip(frames.chunks(run)))
        .map(|(engine, frames)| Mutex::new(Lane { engine, frames }))
        .collect();
    let Some((own, others)) = lanes.split_first() else {
        return failed(frames.len(), "no engine for the batch"); // or no frames
    };
    thread::scope(|scope| {
        let started: Vec<_> = others
            .iter()
            .map(|slot| {
                let thread = thread::Builder::new().name("face-batch".into());
                (
                    slot,
                    thread.spawn_scoped(scope, move || analyze_lane(slot, gpu)),
                )
            })
            .collect();
        // The calling thread takes the first run; its GPU is already bound.
        let mut results = analyze_lane(own, None);
        for (slot, thread) in started {
            let part = match thread {
                // `analyze_lane` catches panics, so a join error is only a panic in
                // the catching itself: still that run's frames alone.
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|_| failed(lock(slot).frames.len(), "a batch thread stopped")),
                Err(e) => {
                    log::warn(&format!(
                        "batch thread not started ({e}): its images run here"
                    ));
                    analyze_lane(slot, None)
                }
            };
            results.extend(part);
        }
        results
    })
}

/// One engine and its contiguous run of the batch's frames.
struct Lane<'a> {
    engine: &'a mut Box<dyn Engine>,
    frames: &'a [(&'a Frame<'a>, Wanted)],
}

fn lock<'m, 'a>(slot: &'m Mutex<Lane<'a>>) -> MutexGuard<'m, Lane<'a>> {
    // `analyze_lane` catches panics: a poisoned lock still holds a usable lane.
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The lane's engine over its frames, on the calling thread (binding `gpu`
/// first, if given): exactly one result per frame.
fn analyze_lane(slot: &Mutex<Lane>, gpu: Option<&Gpu>) -> Vec<Result<Analysis>> {
    // Counted at work: a search then leaves this thread's core alone.
    let _busy = Busy::enter();
    let mut held = lock(slot);
    let Lane { engine, frames } = &mut *held;
    let results = guard::catch(|| {
        enter(gpu)?;
        Ok(engine.analyze(frames))
    })
    .unwrap_or_else(|e| vec![Err(e); frames.len()]);
    // Exactly one result per frame, or the runs after this one would hand
    // their results to other requests' images.
    if results.len() != frames.len() {
        let why = format!(
            "the engine gave {} results for {} images",
            results.len(),
            frames.len()
        );
        return failed(frames.len(), &why);
    }
    results
}

/// Frames per thread: as even as contiguous runs allow, never 0 (fewer
/// frames than engines leave the extra engines idle).
fn per_thread(frames: usize, engines: usize) -> usize {
    frames.div_ceil(engines.max(1)).max(1)
}

fn failed(n: usize, why: &str) -> Vec<Result<Analysis>> {
    vec![Err(Error::internal(why)); n]
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::thread::ThreadId;

    use super::*;
    use crate::error::ErrorKind;
    use crate::metric::Metric;
    use crate::pipeline::{BoxPx, Face, OwnedFrame};

    /// Answers each frame with one face whose score is the frame's width,
    /// records which thread ran it, and panics on a frame of width 0.
    struct Probe {
        id: usize,
        seen: Arc<Mutex<Vec<(usize, u32, ThreadId)>>>,
    }

    impl Engine for Probe {
        fn name(&self) -> &str {
            "probe"
        }
        fn metric(&self) -> Metric {
            Metric::Cosine
        }
        fn describe(&self) -> String {
            String::new()
        }
        fn embedding_len(&self) -> usize {
            0
        }
        fn analyze(&mut self, frames: &[(&Frame, Wanted)]) -> Vec<Result<Analysis>> {
            let here = thread::current().id();
            frames
                .iter()
                .filter(|(f, _)| f.width != 99) // width 99: no result (a broken engine)
                .map(|(f, _)| {
                    assert!(f.width > 0, "probe: a frame of width 0");
                    self.seen.lock().unwrap().push((self.id, f.width, here));
                    Ok(Analysis {
                        faces: vec![face(f.width)],
                        ..Default::default()
                    })
                })
                .collect()
        }
        fn faces_at(&mut self, _: &Frame, _: &[BoxPx]) -> crate::error::Result<Vec<Face>> {
            Err(Error::internal("probe: no landmarks"))
        }
        fn embed(&mut self, _: &Frame, _: &[&Face]) -> crate::error::Result<Vec<Vec<f32>>> {
            Err(Error::internal("probe: no embeddings"))
        }
    }

    fn face(width: u32) -> Face {
        let zero = BoxPx {
            left: 0.0,
            top: 0.0,
            right: 0.0,
            bottom: 0.0,
        };
        Face {
            bbox: zero,
            score: Some(width as f32),
            landmarks: [[0.0; 2]; 5],
            embedding: Vec::new(),
            crop: None,
        }
    }

    type Seen = Arc<Mutex<Vec<(usize, u32, ThreadId)>>>;

    fn probes(n: usize) -> (Vec<Box<dyn Engine>>, Seen) {
        let seen = Seen::default();
        let engines = (0..n)
            .map(|id| {
                Box::new(Probe {
                    id,
                    seen: seen.clone(),
                }) as Box<dyn Engine>
            })
            .collect();
        (engines, seen)
    }

    fn frames(widths: &[u32]) -> Vec<OwnedFrame> {
        widths
            .iter()
            .map(|&width| Frame {
                width,
                height: 1,
                rgb: Vec::new().into(),
            })
            .collect()
    }

    /// Frames of these widths through `analyze_spread`.
    fn spread(engines: &mut [Box<dyn Engine>], widths: &[u32]) -> Vec<Result<Analysis>> {
        let owned = frames(widths);
        let refs: Vec<(&Frame, Wanted)> = owned.iter().map(|f| (f, Wanted::all(8))).collect();
        analyze_spread(engines, None, &refs)
    }

    fn scores(results: &[Result<Analysis>]) -> Vec<Option<f32>> {
        results
            .iter()
            .map(|r| r.as_ref().ok().map(|a| a.faces[0].score.unwrap()))
            .collect()
    }

    #[test]
    fn frames_run_in_contiguous_runs_on_their_own_threads_and_keep_their_order() {
        let (mut engines, seen) = probes(2);
        let results = spread(&mut engines, &[1, 2, 3, 4, 5]);
        let expected: Vec<Option<f32>> = (1..=5).map(|w| Some(w as f32)).collect();
        assert_eq!(scores(&results), expected);

        let mut seen = seen.lock().unwrap().clone();
        seen.sort_by_key(|&(_, width, _)| width);
        let engine_of: Vec<usize> = seen.iter().map(|&(id, _, _)| id).collect();
        assert_eq!(engine_of, [0, 0, 0, 1, 1], "runs of 3 and 2 frames");
        assert_eq!(
            seen[0].2,
            thread::current().id(),
            "the first run on the caller"
        );
        assert_ne!(seen[3].2, seen[0].2, "the second run on another thread");
    }

    #[test]
    fn a_panic_fails_only_the_frames_of_its_thread() {
        let (mut engines, _) = probes(2);
        let results = spread(&mut engines, &[1, 2, 0, 4]);
        assert_eq!(scores(&results), [Some(1.0), Some(2.0), None, None]);
        for failed in &results[2..] {
            let e = failed.as_ref().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Internal);
            assert!(e.message().contains("width 0"), "{}", e.message());
        }
        // The engines stay usable for the next batch.
        let again = spread(&mut engines, &[1, 2]);
        assert_eq!(scores(&again), [Some(1.0), Some(2.0)]);
    }

    #[test]
    fn a_panic_on_the_calling_thread_fails_only_its_frames() {
        let (mut engines, _) = probes(2);
        let results = spread(&mut engines, &[0, 2, 3, 4]);
        assert_eq!(scores(&results), [None, None, Some(3.0), Some(4.0)]);
    }

    #[test]
    fn a_wrong_result_count_fails_its_run_and_shifts_nothing() {
        let (mut engines, _) = probes(2);
        let results = spread(&mut engines, &[1, 99, 3, 4]);
        assert_eq!(scores(&results), [None, None, Some(3.0), Some(4.0)]);
        let e = results[0].as_ref().unwrap_err();
        assert!(
            e.message().contains("1 results for 2 images"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn one_engine_or_one_frame_stays_on_the_calling_thread() {
        for (engine_count, widths) in [(1, &[1, 2, 3][..]), (3, &[7][..])] {
            let (mut engines, seen) = probes(engine_count);
            let results = spread(&mut engines, widths);
            assert_eq!(results.len(), widths.len());
            let here = thread::current().id();
            assert!(seen
                .lock()
                .unwrap()
                .iter()
                .all(|&(id, _, t)| id == 0 && t == here));
        }
        let (mut engines, _) = probes(2);
        assert!(analyze_spread(&mut engines, None, &[]).is_empty());
    }

    #[test]
    fn more_engines_than_frames_use_one_thread_per_frame() {
        let (mut engines, seen) = probes(4);
        let results = spread(&mut engines, &[1, 2]);
        assert_eq!(scores(&results), [Some(1.0), Some(2.0)]);
        let mut ids: Vec<usize> = seen.lock().unwrap().iter().map(|&(id, _, _)| id).collect();
        ids.sort();
        assert_eq!(ids, [0, 1]);
    }
}
