//! One request's answer: name the faces (gallery, within the request's
//! threshold), follow its sequence (if any), and render one JSON document per
//! image (or per gallery change) into RESULT.

use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use crate::backend::controls::Step;
use crate::backend::job::{Analyzed, Job};
use crate::backend::model::ModelState;
use crate::error::{Error, Result};
use crate::gallery::{Enrolled, Match};
use crate::pipeline::image::encode_png;
use crate::pipeline::{Analysis, Face, Stages};
use crate::result::{FaceDoc, ImageDoc, SequenceDoc, TimingsDoc, VerificationDoc};
use crate::sequence::{Observed, Recap, Sequences, Source};
use crate::triton::BytesTensor;

pub const RESULT: &str = "RESULT";

pub type Outcome = Result<Vec<BytesTensor>>;

/// Match, follow the sequence (if any), and render one request's documents
/// (a managing request's come ready in `managed`).
pub fn answer(
    model: &ModelState,
    analyzed: Analyzed,
    enrolled: Option<Vec<Enrolled>>,
    managed: Option<Vec<ImageDoc>>,
    sequences: Option<&mut Sequences>,
) -> Outcome {
    let Analyzed { job, found } = analyzed;
    if job.is_idle() {
        // An idle slot of the sequence batcher: answer, touch nothing.
        return Ok(result_tensor(model, vec![b"{}".to_vec()]));
    }
    let threshold = job.threshold(model.gallery.threshold());
    let named = match job.options.detect_only {
        true => None,
        false => Some(name_faces(model, &job, &found, threshold)?),
    };
    let matches = named.as_ref().map(|n| n.matches.as_slice());
    // The documents first: a request that fails leaves its sequence as it was.
    let mut docs = match managed {
        Some(docs) => docs,
        None => image_docs(model, &job, &found, named.as_ref(), threshold, enrolled)?,
    };
    let followed = match &job.step {
        Some(step) => {
            let sequences =
                sequences.ok_or_else(|| Error::internal("sequence state is missing"))?;
            Some(follow_sequence(
                model, &job, step, &found, matches, threshold, sequences,
            )?)
        }
        None => None,
    };
    if let (Some(step), Some(followed)) = (&job.step, followed) {
        add_sequence(&mut docs, step, followed);
    }
    Ok(render(model, docs))
}

/// The gallery's answer for each face of each item, and the time it took
/// per item.
struct Named {
    matches: Vec<Vec<Match>>,
    took: Vec<Duration>,
}

/// Each face of each item named within `threshold` (the `top_k` nearest
/// people too).
fn name_faces(model: &ModelState, job: &Job, found: &[Analysis], threshold: f32) -> Result<Named> {
    let top_k = job.top_k.unwrap_or(1);
    // An enrolled face is named after its person (no candidates asked).
    let enrolled = job.enroll.as_ref().filter(|_| job.top_k.is_none());
    let mut named = Named {
        matches: Vec::with_capacity(found.len()),
        took: Vec::with_capacity(found.len()),
    };
    for (i, item) in found.iter().enumerate() {
        let started = Instant::now();
        let person = enrolled.and_then(|names| names.get(i));
        let matches = item
            .faces
            .iter()
            .map(|f| match person {
                Some(name) => model.gallery.match_person(&f.embedding, name, threshold),
                None => model.gallery.best_match(&f.embedding, threshold, top_k),
            })
            .collect::<Result<_>>()?;
        named.took.push(started.elapsed());
        named.matches.push(matches);
    }
    Ok(named)
}

/// One document per item: its faces, their names (unless `detect_only`),
/// what the request's options add, and the enrollment's record where there
/// is one.
fn image_docs(
    model: &ModelState,
    job: &Job,
    found: &[Analysis],
    named: Option<&Named>,
    threshold: f32,
    enrolled: Option<Vec<Enrolled>>,
) -> Result<Vec<ImageDoc>> {
    let with_embeddings = job
        .return_embeddings
        .unwrap_or(model.settings.return_embeddings);
    let mut enrolled = enrolled.map(Vec::into_iter);
    let mut docs = Vec::with_capacity(found.len());
    for (i, item) in found.iter().enumerate() {
        let faces = item
            .faces
            .iter()
            .enumerate()
            .map(|(k, face)| {
                let matched = named.map(|n| &n.matches[i][k]);
                let doc = FaceDoc::new(face, matched, with_embeddings, job.top_k.is_some());
                extend_face(model, job, i, face, doc, threshold)
            })
            .collect::<Result<_>>()?;
        let mut doc = ImageDoc::new(job.frames.get(i), faces);
        if job.options.timings {
            doc.timings_ms = Some(timings(job, i, item, named));
        }
        docs.push(match enrolled.as_mut().and_then(Iterator::next) {
            Some(e) => doc.with_enrolled(&e),
            None => doc,
        });
    }
    Ok(docs)
}

/// What item `i`'s options add to one of its faces: no box for an
/// EMBEDDING, the verification against REFERENCE, the crop.
fn extend_face(
    model: &ModelState,
    job: &Job,
    i: usize,
    face: &Face,
    mut doc: FaceDoc,
    threshold: f32,
) -> Result<FaceDoc> {
    if job.embeddings.is_some() {
        doc = doc.without_image();
    }
    if let Some(reference) = job.reference_of(i) {
        let distance = model.gallery.metric().distance(&face.embedding, reference);
        doc.verification = Some(VerificationDoc {
            distance,
            same_person: distance <= threshold,
        });
    }
    if let Some(crop) = &face.crop {
        let png = encode_png(crop).map_err(|e| e.context("return_crops"))?;
        doc.crop = Some(BASE64.encode(png));
    }
    Ok(doc)
}

/// Item `i`'s own times: its decoding, its run through the engine, its
/// faces' matching.
fn timings(job: &Job, i: usize, item: &Analysis, named: Option<&Named>) -> TimingsDoc {
    stage_timings(
        job.decoded_in.get(i).copied(),
        &item.stages,
        named.and_then(|n| n.took.get(i).copied()),
    )
}

/// Milliseconds (to the microsecond) of each stage.
pub(super) fn stage_timings(
    decode: Option<Duration>,
    stages: &Stages,
    matching: Option<Duration>,
) -> TimingsDoc {
    let ms = |d: Option<Duration>| d.map_or(0.0, |d| (d.as_secs_f64() * 1e6).round() / 1e3);
    TimingsDoc {
        decode: ms(decode),
        detection: ms(Some(stages.detection)),
        landmarks: ms(Some(stages.landmarks)),
        embedding: ms(Some(stages.embedding)),
        matching: ms(matching),
    }
}

/// RESULT holding `docs`, their gallery distances rounded to the model's
/// `distance_decimals`.
pub(super) fn render(model: &ModelState, mut docs: Vec<ImageDoc>) -> Vec<BytesTensor> {
    let decimals = model.settings.distance_decimals;
    for doc in &mut docs {
        doc.round_distances(decimals);
    }
    result_tensor(model, docs.iter().map(ImageDoc::to_json).collect())
}

/// RESULT holding one JSON document per image.
pub(super) fn result_tensor(model: &ModelState, elements: Vec<Vec<u8>>) -> Vec<BytesTensor> {
    let shape = if model.settings.batched {
        vec![elements.len() as i64, 1]
    } else {
        vec![1]
    };
    vec![BytesTensor {
        name: RESULT,
        shape,
        elements,
    }]
}

/// What one request did to its sequence: each frame's number and its faces'
/// tracks, and at END what the sequence saw.
pub(super) struct Followed {
    pub frames: Vec<(u64, Vec<u32>)>,
    pub recap: Option<Recap>,
}

/// Apply one request's sequence step: START opens the state, each frame joins
/// it (faces get tracks), END takes what it saw and drops the state.
fn follow_sequence(
    model: &ModelState,
    job: &Job,
    step: &Step,
    found: &[Analysis],
    matches: Option<&[Vec<Match>]>,
    threshold: f32,
    sequences: &mut Sequences,
) -> Result<Followed> {
    let now = Instant::now();
    let limits = *sequences.limits();
    let by = job.by.as_deref();
    model.access.check_owner(sequences.owner_of(&step.id), by)?;
    if step.start {
        sequences.start(&step.id, now)?.owner = job.by.clone();
    }
    let state = sequences.get(&step.id, now)?;
    state.cadence = job.cadence;
    state.retire(&limits);
    let metric = model.gallery.metric();
    let frames = found
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let observed: Vec<Observed> = item
                .faces
                .iter()
                .enumerate()
                .map(|(k, f)| {
                    let m = matches.map(|m| &m[i][k]);
                    Observed {
                        embedding: &f.embedding,
                        name: m.and_then(|m| m.name.as_deref()),
                        distance: m.and_then(|m| m.distance),
                        bbox: f.bbox,
                    }
                })
                .collect();
            state.observe(&observed, metric, threshold, &limits)
        })
        .collect();
    let recap = if step.end {
        sequences.end(&step.id).map(|ended| ended.recap(&limits))
    } else {
        None
    };
    Ok(Followed { frames, recap })
}

/// The documents' `sequence` part (frame null for those without an image),
/// the faces' tracks (detected and, unless `detect_only`, embedded where
/// not said otherwise), and the summary at END; a request with no document
/// gets one.
pub(super) fn add_sequence(docs: &mut Vec<ImageDoc>, step: &Step, followed: Followed) {
    let part = |frame| {
        Some(SequenceDoc {
            correlation_id: step.id.clone(),
            frame,
        })
    };
    for (doc, (frame, tracks)) in docs.iter_mut().zip(followed.frames) {
        for (face, track) in doc.faces.iter_mut().flatten().zip(tracks) {
            face.track = Some(track);
            face.source = face.source.or(Some(Source::Detected.as_str()));
            face.embedded = face.embedded.or(Some(face.naming.is_some()));
        }
        doc.sequence = part(Some(frame));
    }
    if docs.is_empty() {
        docs.push(ImageDoc::default());
    }
    for doc in docs.iter_mut().filter(|d| d.sequence.is_none()) {
        doc.sequence = part(None);
    }
    if let Some(recap) = followed.recap {
        docs.last_mut().expect("at least one document").summary = Some(recap.into());
    }
}
