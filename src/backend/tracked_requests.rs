//! The sequence requests of an Execute whose cadence is not every frame:
//! each one's state is taken out of the model's sequences (their lock is not
//! held while the engine runs), their frames followed together
//! (sequence::follow_together), and each answer rendered as any sequence
//! frame's, each face saying how it was obtained.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::backend::answer::{add_sequence, render, stage_timings, Followed as Answered, Outcome};
use crate::backend::job::Job;
use crate::backend::model::ModelState;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::gallery::Match;
use crate::result::{FaceDoc, ImageDoc};
use crate::sequence::{
    follow_together, Cadence, CorrelationId, FollowResult, FollowedFrame, SequenceState, Sequences,
    Stream, Work,
};

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

/// Answer the followed requests (`Job::follows`) of an Execute with
/// `engine`, one outcome each: their frames go through it together, round
/// by round (sequence::follow_together). Two requests of one sequence are
/// never in one wave, so the later sees the earlier's frames, in order.
pub fn follow_all(model: &ModelState, engine: &mut dyn Engine, jobs: &[&Job]) -> Vec<Outcome> {
    let mut outcomes: Vec<Option<Outcome>> = jobs.iter().map(|_| None).collect();
    for wave in waves(jobs) {
        let wave_jobs: Vec<&Job> = wave.iter().map(|&i| jobs[i]).collect();
        for (i, outcome) in wave.into_iter().zip(follow_wave(model, engine, &wave_jobs)) {
            outcomes[i] = Some(outcome);
        }
    }
    (outcomes.into_iter())
        .map(|o| o.unwrap_or_else(|| Err(Error::internal("a followed request got no answer"))))
        .collect()
}

/// `jobs` by index in waves: each sequence at most once a wave, its
/// requests in the order they came; a START after every END that came
/// before it (an ended sequence counts against `max_sequences` until its
/// wave is done, as one after another it did not).
fn waves(jobs: &[&Job]) -> Vec<Vec<usize>> {
    let mut waves: Vec<Vec<usize>> = Vec::new();
    let mut last: HashMap<&CorrelationId, usize> = HashMap::new();
    let mut last_end: Option<usize> = None;
    for (i, job) in jobs.iter().enumerate() {
        let step = job.step.as_ref();
        let id = step.map(|s| &s.id);
        let mut wave = id.and_then(|id| last.get(id)).map_or(0, |w| w + 1);
        if step.is_some_and(|s| s.start) {
            wave = wave.max(last_end.map_or(0, |e| e + 1));
        }
        if waves.len() <= wave {
            waves.push(Vec::new());
        }
        waves[wave].push(i);
        if let Some(id) = id {
            last.insert(id, wave);
        }
        if step.is_some_and(|s| s.end) {
            last_end = last_end.max(Some(wave));
        }
    }
    waves
}

/// One wave: each request's sequence taken out, all followed together,
/// each answered.
fn follow_wave(model: &ModelState, engine: &mut dyn Engine, jobs: &[&Job]) -> Vec<Outcome> {
    let limits = match model.sequences.as_ref() {
        Some(sequences) => *lock(sequences).limits(),
        None => return jobs.iter().map(|_| Err(missing_state())).collect(),
    };
    let mut taken: Vec<Result<Taken>> = jobs.iter().map(|job| take(model, job)).collect();
    let matchers: Vec<Matcher> = jobs.iter().map(|job| matcher(model, job)).collect();
    let works: Vec<Work> = (jobs.iter().zip(&matchers))
        .map(|(job, matcher)| Work {
            wanted: job.wanted(&model.settings),
            matcher: matcher.as_ref(),
            metric: model.gallery.metric(),
            threshold: threshold(model, job),
            decimals: job.coarse,
            limits,
        })
        .collect();
    let mut streams = Vec::new();
    let mut owners = Vec::new();
    for (k, taken) in taken.iter_mut().enumerate() {
        let Ok(Taken {
            state: Some(state), ..
        }) = taken
        else {
            continue;
        };
        state.cadence = jobs[k].cadence;
        let (frames, work) = (&jobs[k].frames, &works[k]);
        streams.push(Stream {
            state,
            frames,
            work,
        });
        owners.push(k);
    }
    let mut followed: Vec<Option<FollowResult>> = jobs.iter().map(|_| None).collect();
    for (k, result) in owners
        .into_iter()
        .zip(follow_together(engine, &mut streams))
    {
        followed[k] = Some(result);
    }
    drop(streams);
    (jobs.iter().zip(taken).zip(followed))
        .map(|((job, taken), followed)| conclude(model, job, taken?, followed))
        .collect()
}

type Matcher<'a> = Box<dyn Fn(&[f32]) -> Result<Match> + 'a>;

/// The gallery's answer for one embedding, at the request's threshold and
/// `top_k`.
fn matcher<'a>(model: &'a ModelState, job: &Job) -> Matcher<'a> {
    let (threshold, top_k) = (threshold(model, job), job.top_k.unwrap_or(1));
    Box::new(move |e: &[f32]| model.gallery.best_match(e, threshold, top_k))
}

fn threshold(model: &ModelState, job: &Job) -> f32 {
    job.threshold(model.gallery.threshold())
}

/// The request's sequence taken out of the model's sequences (started
/// first at its START).
fn take<'a>(model: &'a ModelState, job: &'a Job) -> Result<Taken<'a>> {
    let step = (job.step.as_ref())
        .ok_or_else(|| Error::internal("a followed request has no sequence step"))?;
    let sequences = model.sequences.as_ref().ok_or_else(missing_state)?;
    let now = Instant::now();
    let mut seqs = lock(sequences);
    model
        .access
        .check_owner(seqs.owner_of(&step.id), job.by.as_deref())?;
    if step.start {
        seqs.start(&step.id, now)?.owner = job.by.clone();
    }
    let state = seqs.take(&step.id, now)?;
    Ok(Taken {
        sequences,
        id: &step.id,
        cadence: state.cadence,
        state: Some(state),
        close: false,
    })
}

fn missing_state() -> Error {
    Error::internal("sequence state is missing")
}

/// A request's answer once its frames are followed: its sequence put back
/// (or closed at END), its documents rendered. A request that failed
/// changed nothing in its sequence (sequence::follow), nor its cadence; it
/// leaves the sequence open, as the every-frame path does, and a START that
/// failed opens none.
fn conclude(
    model: &ModelState,
    job: &Job,
    mut taken: Taken,
    followed: Option<FollowResult>,
) -> Outcome {
    let step = (job.step.as_ref())
        .ok_or_else(|| Error::internal("a followed request has no sequence step"))?;
    let followed = followed.ok_or_else(|| Error::internal("a request was not followed"))?;
    let frames = followed.map_err(|(i, e)| e.context(job.label(i, "image")));
    let state = taken.state.as_mut().ok_or_else(missing_state)?;
    let limits = model.settings.sequence.as_ref().map(|q| q.limits);
    let limits = limits.ok_or_else(|| Error::internal("a followed request has no sequence"))?;
    let recap = (step.end && frames.is_ok()).then(|| state.recap(&limits));
    if frames.is_err() {
        state.cadence = taken.cadence;
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
    let followed = Answered {
        frames: numbers,
        recap,
    };
    add_sequence(&mut docs, step, followed);
    Ok(render(model, docs))
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
    /// The sequence's cadence before this request.
    cadence: Cadence,
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
