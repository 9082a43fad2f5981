//! The face work of one Execute: read every request (a bad one fails alone),
//! run the engine on all frames of the batch together, enroll, manage the
//! gallery (FORGET, LIST), then answer each request in order (sequence steps
//! under one lock).

use std::time::Instant;

use crate::backend::access::{Admitted, Admitting, Defaults};
use crate::backend::answer::{answer, Outcome};
use crate::backend::decode::decode_all;
use crate::backend::enroll::enroll_batch;
use crate::backend::instance::InstanceState;
use crate::backend::job::{read_job, Analyzed, Job};
use crate::backend::manage::manage_batch;
use crate::backend::model::ModelState;
use crate::backend::settings::Settings;
use crate::backend::spread::analyze_spread;
use crate::backend::tracked_requests::{follow_all, settle_cadence};
use crate::error::{Error, Result};
use crate::pipeline::{Analysis, Frame, Wanted};
use crate::sequence::Sequences;
use crate::triton::time::now_ns;
use crate::triton::{log, Request};

/// What one Execute produced: one outcome per request, and for statistics
/// the compute window and the batch size.
pub struct Batch {
    pub outcomes: Vec<Outcome>,
    pub compute_start: u64,
    pub compute_end: u64,
    /// Images (a request without a readable image counts as one).
    pub size: u64,
}

pub fn process(model: &ModelState, state: &mut InstanceState, requests: &[Request]) -> Batch {
    let settings = &model.settings;
    let dim = model.gallery.dim();
    let admitting = Admitting {
        sequence: settings.sequence.as_ref(),
        sequences: model.sequences.as_ref(),
        defaults: Defaults {
            threshold: model.gallery.threshold(),
            return_embeddings: settings.return_embeddings,
        },
        decimals: settings.distance_decimals,
        batched: settings.batched,
    };
    let mut jobs: Vec<Result<Job>> = requests
        .iter()
        .map(|r| {
            let Admitted { by, coarse } = model.access.admit(r, &admitting)?;
            read_job(r, settings, dim).map(|job| Job { by, coarse, ..job })
        })
        .collect();
    let threads = settings.decode_threads(state.on_gpu);
    decode_all(&mut jobs, settings.max_image_pixels, threads);
    if let Some(sequences) = &model.sequences {
        scrub_forgotten(
            model,
            &mut sequences.lock().unwrap_or_else(|e| e.into_inner()),
        );
    }
    settle_cadence(model, &mut jobs);
    let size = jobs
        .iter()
        .map(|j| j.as_ref().map_or(1, |j| j.frames.len().max(1) as u64))
        .sum();
    let compute_start = now_ns();
    let mut batch = analyze(state, jobs, settings);
    charge_faces(model, &mut batch);
    // Followed sequence frames, each on its own sequence's state, together.
    let followed = follow_followed(model, state, &batch);
    let enrolled = enroll_batch(&model.gallery, &mut batch);
    let managed = manage_batch(&model.gallery, &mut batch);

    // Sequence steps run in request order under one lock, after the engine.
    let mut sequences = model
        .sequences
        .as_ref()
        .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
    if let Some(seqs) = sequences.as_deref_mut() {
        evict_idle(model, seqs);
        scrub_forgotten(model, seqs);
    }
    let outcomes = batch
        .into_iter()
        .zip(enrolled)
        .zip(managed)
        .zip(followed)
        .map(|(((item, enrolled), managed), followed)| match followed {
            Some(outcome) => outcome,
            None => answer(model, item?, enrolled, managed, sequences.as_deref_mut()),
        })
        .collect();
    if let (Some(seqs), Some(gauge)) = (sequences.as_deref(), &model.live_gauge) {
        gauge.set(seqs.len() as f64);
    }
    Batch {
        outcomes,
        compute_start,
        compute_end: now_ns(),
        size,
    }
}

/// The batch's followed requests, together on the instance's first engine
/// (on the calling thread, whose GPU, if any, is bound): an outcome for
/// each of them, none for the others.
fn follow_followed(
    model: &ModelState,
    state: &mut InstanceState,
    batch: &[Result<Analyzed>],
) -> Vec<Option<Outcome>> {
    let jobs: Vec<&Job> = (batch.iter().flatten())
        .map(|a| &a.job)
        .filter(|j| j.follows())
        .collect();
    let mut outcomes = match (jobs.is_empty(), state.engines.first_mut()) {
        (true, _) => Vec::new(),
        (false, Some(engine)) => follow_all(model, engine.as_mut(), &jobs),
        (false, None) => jobs
            .iter()
            .map(|_| Err(Error::internal("no engine")))
            .collect(),
    }
    .into_iter();
    (batch.iter())
        .map(|item| match item {
            Ok(a) if a.job.follows() => Some(
                outcomes
                    .next()
                    .unwrap_or_else(|| Err(Error::internal("a followed request got no answer"))),
            ),
            _ => None,
        })
        .collect()
}

/// All frames of the batch through the engine at once (but followed
/// sequence frames: tracked_requests.rs); each request gets its share back (an image
/// the engine failed on fails its request). An EMBEDDING request's rows
/// become one face each.
fn analyze<'r>(
    state: &mut InstanceState,
    jobs: Vec<Result<Job<'r>>>,
    settings: &Settings,
) -> Vec<Result<Analyzed<'r>>> {
    let frames: Vec<(&Frame, Wanted)> = jobs
        .iter()
        .flatten()
        .filter(|j| !j.follows())
        .flat_map(|j| {
            let wanted = j.wanted(settings);
            j.frames.iter().map(move |f| (f, wanted))
        })
        .collect();
    let mut results = analyze_spread(&mut state.engines, state.gpu.as_ref(), &frames).into_iter();
    jobs.into_iter()
        .map(|job| {
            let job = job?;
            if job.follows() {
                return Ok(Analyzed {
                    job,
                    found: Vec::new(),
                });
            }
            // Always drain this job's share of the results, even on error.
            let found: Vec<Result<Analysis>> = results.by_ref().take(job.frames.len()).collect();
            let mut found = found
                .into_iter()
                .enumerate()
                .map(|(i, f)| f.map_err(|e| e.context(job.label(i, "image"))))
                .collect::<Result<Vec<_>>>()?;
            if let Some(rows) = &job.embeddings {
                found = rows.iter().map(|e| Analysis::of_embedding(e)).collect();
            }
            Ok(Analyzed { job, found })
        })
        .collect()
}

/// Each request's faces charged to its key's rate before any is matched
/// (access: `charge_faces`); a request refused fails alone.
fn charge_faces(model: &ModelState, batch: &mut [Result<Analyzed>]) {
    for item in batch.iter_mut() {
        let Ok(a) = item else { continue };
        let matched = |f: &Analysis| f.faces.iter().filter(|x| !x.embedding.is_empty()).count();
        let faces = a.found.iter().map(|f| matched(f).max(1)).sum();
        let top_k = a.job.top_k.unwrap_or(1);
        let counted = (a.found.len(), faces);
        if let Err(e) = model
            .access
            .charge_faces(a.job.by.as_deref(), counted, top_k)
        {
            *item = Err(e);
        }
    }
}

/// People gone from the gallery since the last look (a FORGET here or on
/// another server of the store, an expiry) leave every live sequence before
/// any frame is answered: no track, kept frame or summary names them again.
fn scrub_forgotten(model: &ModelState, sequences: &mut Sequences) {
    let gallery = &model.gallery;
    let scrubbed = sequences.scrub(gallery.removals(), &|name| gallery.knows(name));
    if scrubbed > 0 {
        log::info(&format!(
            "model '{}': people gone from the gallery dropped from {scrubbed} live sequences",
            model.name
        ));
    }
}

fn evict_idle(model: &ModelState, sequences: &mut Sequences) {
    let evicted = sequences.evict_idle(Instant::now());
    if evicted > 0 {
        log::info(&format!(
            "model '{}': evicted {evicted} idle sequences",
            model.name
        ));
    }
}
