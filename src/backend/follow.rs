//! A sequence request whose cadence is not every frame: its state is taken
//! out of the model's sequences (their lock is not held while the engine
//! runs), its frames followed one by one (sequence::follow), and its answer
//! rendered as any sequence frame's, each face saying how it was obtained.

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::backend::answer::{add_sequence, result_tensor, stage_timings, Followed, Outcome};
use crate::backend::job::Job;
use crate::backend::model::ModelState;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::result::{FaceDoc, ImageDoc};
use crate::sequence::{CorrelationId, FollowedFrame, SequenceState, Sequences, Work};

/// Decide, under the sequences' lock, the cadence in force for each
/// sequence request of the batch: what it asks, else its sequence's, else
/// the model's (a START starts from the model's).
pub fn settle_cadence(model: &ModelState, jobs: &mut [Result<Job>]) {
    let (Some(config), Some(sequences)) = (&model.settings.sequence, &model.sequences) else {
        return;
    };
    let seqs = lock(sequences);
    for job in jobs.iter_mut().flatten() {
        let Some(step) = &job.step else { continue };
        let current = match step.start {
            true => None,
            false => seqs.cadence_of(&step.id),
        };
        let (detect, reidentify) = job.asked;
        job.cadence = current.unwrap_or(config.cadence).asked(detect, reidentify);
    }
}

/// Answer one followed request (`Job::follows`) with `engine`.
pub fn follow(model: &ModelState, engine: &mut dyn Engine, job: &Job) -> Outcome {
    let step = job
        .step
        .as_ref()
        .ok_or_else(|| Error::internal("a followed request has no sequence step"))?;
    let sequences = model
        .sequences
        .as_ref()
        .ok_or_else(|| Error::internal("sequence state is missing"))?;
    let now = Instant::now();
    let state = {
        let mut seqs = lock(sequences);
        if step.start {
            seqs.start(&step.id, now)?;
        }
        seqs.take(&step.id, now)?
    };
    let mut taken = Taken {
        sequences,
        id: &step.id,
        state: Some(state),
        close: false,
    };
    let state = taken.state.as_mut().expect("just taken");
    let cadence = std::mem::replace(&mut state.cadence, job.cadence);
    let frames = follow_frames(model, engine, job, state);
    let recap = (step.end && frames.is_ok()).then(|| state.recap());
    if frames.is_err() {
        // A request that failed changed nothing in its sequence
        // (sequence::follow), nor its cadence; it leaves the sequence open,
        // as the every-frame path does, and a START that failed opens none.
        state.cadence = cadence;
        taken.close = step.start;
    } else {
        taken.close = step.end;
    }
    drop(taken);
    let frames = frames?;
    let mut docs = Vec::with_capacity(frames.len());
    let mut numbers = Vec::with_capacity(frames.len());
    for (i, frame) in frames.into_iter().enumerate() {
        numbers.push((frame.number, frame.faces.iter().map(|f| f.track).collect()));
        docs.push(frame_doc(model, job, i, frame));
    }
    let followed = Followed {
        frames: numbers,
        recap,
    };
    add_sequence(&mut docs, step, followed);
    Ok(result_tensor(
        model,
        docs.iter().map(ImageDoc::to_json).collect(),
    ))
}

fn follow_frames(
    model: &ModelState,
    engine: &mut dyn Engine,
    job: &Job,
    state: &mut SequenceState,
) -> Result<Vec<FollowedFrame>> {
    let threshold = job.threshold.unwrap_or_else(|| model.gallery.threshold());
    let top_k = job.top_k.unwrap_or(1);
    let matcher = |e: &[f32]| model.gallery.best_match(e, threshold, top_k);
    let limits = model
        .sequences
        .as_ref()
        .map(|s| *lock(s).limits())
        .ok_or_else(|| Error::internal("sequence state is missing"))?;
    let mut work = Work {
        engine,
        wanted: job.wanted(&model.settings),
        matcher: &matcher,
        metric: model.gallery.metric(),
        threshold,
        limits,
    };
    state
        .follow(&job.frames, &mut work)
        .map_err(|(i, e)| e.context(job.label(i, "image")))
}

/// Frame `i`'s document: its faces, each saying whether it was detected or
/// tracked and embedded.
fn frame_doc(model: &ModelState, job: &Job, i: usize, frame: FollowedFrame) -> ImageDoc {
    let with_embeddings = job
        .return_embeddings
        .unwrap_or(model.settings.return_embeddings);
    let faces = frame
        .faces
        .iter()
        .map(|f| FaceDoc {
            source: Some(f.source.as_str()),
            embedded: Some(f.embedded),
            ..FaceDoc::new(
                &f.face,
                Some(&f.matched),
                with_embeddings,
                job.top_k.is_some(),
            )
        })
        .collect();
    let mut doc = ImageDoc::new(job.frames.get(i), faces);
    if job.options.timings {
        doc.timings_ms = Some(stage_timings(
            job.decoded_in.get(i).copied(),
            &frame.stages,
            Some(frame.matching),
        ));
    }
    doc
}

/// A sequence's state taken out of the model's sequences while its frames
/// are followed: put back (dropped instead when `close`: its END, or a START
/// that failed) however the work ends, a panic included, so no state is
/// lost and `max_sequences` keeps its room.
struct Taken<'a> {
    sequences: &'a Mutex<Sequences>,
    id: &'a CorrelationId,
    state: Option<SequenceState>,
    close: bool,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let state = self.state.take().filter(|_| !self.close);
        lock(self.sequences).put_back(self.id, state);
    }
}

fn lock(sequences: &Mutex<Sequences>) -> MutexGuard<'_, Sequences> {
    sequences.lock().unwrap_or_else(|e| e.into_inner())
}
