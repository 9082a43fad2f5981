//! The followed requests of one Execute, several sequences' at once: round
//! by round, frame r of every request, each round's engine work in two calls
//! over all of them (the detections and the trackers' landmarks, then the
//! embeddings), so that an engine that batches runs each model once a round
//! instead of once a sequence. Each sequence's own steps (between_detections.rs) run in
//! between, on its own state.

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::pipeline::{BoxPx, Face, Frame, Wanted};

use super::between_detections::{Ask, FollowedFrame, Pending, Work};
use super::{Before, SequenceState};

/// One request of one sequence.
pub struct Stream<'a> {
    pub state: &'a mut SequenceState,
    pub frames: &'a [Frame<'a>],
    pub work: &'a Work<'a>,
}

/// A request's followed frames, or the index of the frame that failed and
/// why: a request that fails changes nothing in its sequence (its
/// trackers aside: the next frame detects afresh).
pub type FollowResult = std::result::Result<Vec<FollowedFrame>, (usize, Error)>;

/// Follow every stream's frames with `engine`; one result per stream.
pub fn follow_together(engine: &mut dyn Engine, streams: &mut [Stream<'_>]) -> Vec<FollowResult> {
    // Between requests: tracks gone long enough retire (never inside one).
    for s in streams.iter_mut() {
        s.state.retire(&s.work.limits);
    }
    let before: Vec<Option<Before>> = (streams.iter())
        .map(|s| s.state.before_request(s.frames.len()))
        .collect();
    let mut results: Vec<FollowResult> = (streams.iter())
        .map(|s| Ok(Vec::with_capacity(s.frames.len())))
        .collect();
    let rounds = streams.iter().map(|s| s.frames.len()).max().unwrap_or(0);
    for r in 0..rounds {
        let active: Vec<usize> = (0..streams.len())
            .filter(|&i| results[i].is_ok() && r < streams[i].frames.len())
            .collect();
        if active.is_empty() {
            break;
        }
        for (i, done) in round(engine, streams, &active, r) {
            match (done, &mut results[i]) {
                (Ok(frame), Ok(frames)) => frames.push(frame),
                (Err(e), result) => *result = Err((r, e)),
                (Ok(_), Err(_)) => {}
            }
        }
    }
    for ((stream, before), result) in streams.iter_mut().zip(before).zip(&results) {
        if result.is_err() {
            stream.state.undo(before);
        }
    }
    results
}

/// Frame `r` of each `active` stream: its followed frame, or why not.
fn round(
    engine: &mut dyn Engine,
    streams: &mut [Stream<'_>],
    active: &[usize],
    r: usize,
) -> Vec<(usize, Result<FollowedFrame>)> {
    let mut done = Vec::new();
    let mut begun = Vec::new();
    for &i in active {
        let s = &mut streams[i];
        match s.state.begin(&s.frames[r], s.work) {
            Ok((pending, ask)) => begun.push((i, pending, ask)),
            Err(e) => done.push((i, Err(e))),
        }
    }
    let faces = faces_of(engine, streams, &begun, r);
    let mut chosen = Vec::new();
    for ((i, mut pending, _), faces) in begun.into_iter().zip(faces) {
        match faces {
            Ok(faces) => {
                let s = &mut streams[i];
                let picked = s.state.found(&mut pending, faces, s.work);
                chosen.push((i, pending, picked));
            }
            Err(e) => done.push((i, Err(e))),
        }
    }
    let chosen = shadows(engine, streams, chosen, r, &mut done);
    let asked: Vec<(&Frame, Vec<&Face>)> = (chosen.iter())
        .map(|(i, pending, picked)| {
            let faces = picked.iter().map(|&k| &pending.faces()[k]).collect();
            (&streams[*i].frames[r], faces)
        })
        .collect();
    let mut embeddings = shielded(asked.len(), || engine.embed_many(&asked)).into_iter();
    drop(asked);
    for (i, pending, _) in chosen {
        let missing = || Err(Error::internal("one result per frame"));
        let embedded = embeddings.next().unwrap_or_else(missing);
        let s = &mut streams[i];
        done.push((i, embedded.and_then(|e| s.state.finish(pending, e, s.work))));
    }
    done
}

/// Each chosen detection frame whose detector missed faces its trackers
/// still hold, with the engine's landmarks at those boxes (one call for all);
/// a frame whose call failed goes to `done` with its error.
fn shadows(
    engine: &mut dyn Engine,
    streams: &mut [Stream<'_>],
    chosen: Vec<(usize, Pending, Vec<usize>)>,
    r: usize,
    done: &mut Vec<(usize, Result<FollowedFrame>)>,
) -> Vec<(usize, Pending, Vec<usize>)> {
    // Nearly every round: no detection missed a held face, nothing to do.
    if !chosen.iter().any(|(_, pending, _)| pending.has_shadows()) {
        return chosen;
    }
    let locate: Vec<(&Frame, Vec<BoxPx>)> = (chosen.iter())
        .filter(|(_, pending, _)| pending.has_shadows())
        .map(|(i, pending, _)| (&streams[*i].frames[r], pending.shadow_boxes()))
        .collect();
    let mut located = shielded(locate.len(), || engine.faces_at_many(&locate)).into_iter();
    drop(locate);
    let mut kept = Vec::with_capacity(chosen.len());
    for (i, mut pending, picked) in chosen {
        if !pending.has_shadows() {
            kept.push((i, pending, picked));
            continue;
        }
        let missing = || Err(Error::internal("one result per frame"));
        match located.next().unwrap_or_else(missing) {
            Ok(faces) => {
                streams[i].state.shadowed(&mut pending, faces);
                kept.push((i, pending, picked));
            }
            Err(e) => done.push((i, Err(e))),
        }
    }
    kept
}

/// The engine's faces for each begun frame: the detections together, the
/// trackers' landmarks together; one result per frame, in order.
fn faces_of(
    engine: &mut dyn Engine,
    streams: &[Stream<'_>],
    begun: &[(usize, Pending, Ask)],
    r: usize,
) -> Vec<Result<Vec<Face>>> {
    let mut detect: Vec<(&Frame, Wanted)> = Vec::new();
    let mut locate: Vec<(&Frame, Vec<BoxPx>)> = Vec::new();
    for (i, _, ask) in begun {
        let frame = &streams[*i].frames[r];
        match ask {
            Ask::Detect(wanted) => detect.push((frame, *wanted)),
            Ask::Landmarks(boxes) => locate.push((frame, boxes.clone())),
        }
    }
    let mut detected = shielded(detect.len(), || engine.analyze(&detect)).into_iter();
    let mut located = shielded(locate.len(), || engine.faces_at_many(&locate)).into_iter();
    let missing = || Err(Error::internal("one result per frame"));
    (begun.iter())
        .map(|(_, _, ask)| match ask {
            Ask::Detect(_) => detected.next().map_or_else(missing, |a| a.map(|a| a.faces)),
            Ask::Landmarks(_) => located.next().unwrap_or_else(missing),
        })
        .collect()
}

/// An engine call for `n` frames (none: not made), a panic in it an error
/// for each: the sequences are then undone like any that failed, and the
/// rest of the Execute goes on.
fn shielded<T>(n: usize, call: impl FnOnce() -> Vec<Result<T>>) -> Vec<Result<T>> {
    if n == 0 {
        return Vec::new();
    }
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or_else(|panic| {
        let why = (panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        let error = Error::internal(format!("the engine panicked: {why}"));
        (0..n).map(|_| Err(error.clone())).collect()
    })
}
