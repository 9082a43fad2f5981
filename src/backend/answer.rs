//! One request's answer: name the faces (gallery, within the request's
//! threshold), follow its sequence (if any), and render one JSON document per
//! image (or per gallery change) into RESULT.

use std::time::Instant;

use crate::backend::controls::Step;
use crate::backend::job::{Analyzed, Job};
use crate::backend::model::ModelState;
use crate::error::{Error, Result};
use crate::gallery::{Enrolled, Match};
use crate::pipeline::Face;
use crate::result::{FaceDoc, ImageDoc, SequenceDoc};
use crate::sequence::{Observed, Recap, Sequences};
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
    let Analyzed { job, faces } = analyzed;
    if job.is_idle() {
        // An idle slot of the sequence batcher: answer, touch nothing.
        return Ok(result_tensor(model, vec![b"{}".to_vec()]));
    }
    let threshold = job.threshold.unwrap_or_else(|| model.gallery.threshold());
    let matches = name_faces(model, &job, &faces, threshold)?;
    let followed = match &job.step {
        Some(step) => {
            let sequences =
                sequences.ok_or_else(|| Error::internal("sequence state is missing"))?;
            Some(follow_sequence(
                model, step, &faces, &matches, threshold, sequences,
            )?)
        }
        None => None,
    };
    let mut docs = match managed {
        Some(docs) => docs,
        None => image_docs(model, &job, &faces, &matches, enrolled),
    };
    if let (Some(step), Some(followed)) = (&job.step, followed) {
        add_sequence(&mut docs, step, followed);
    }
    Ok(result_tensor(
        model,
        docs.iter().map(ImageDoc::to_json).collect(),
    ))
}

/// Each face of each frame named within `threshold` (the `top_k` nearest
/// people too).
fn name_faces(
    model: &ModelState,
    job: &Job,
    faces: &[Vec<Face>],
    threshold: f32,
) -> Result<Vec<Vec<Match>>> {
    let top_k = job.top_k.unwrap_or(1);
    faces
        .iter()
        .map(|frame| {
            frame
                .iter()
                .map(|f| model.gallery.best_match(&f.embedding, threshold, top_k))
                .collect()
        })
        .collect()
}

/// One document per frame: its faces and their names, and the enrollment's
/// record where there is one.
fn image_docs(
    model: &ModelState,
    job: &Job,
    faces: &[Vec<Face>],
    matches: &[Vec<Match>],
    enrolled: Option<Vec<Enrolled>>,
) -> Vec<ImageDoc> {
    let with_embeddings = job
        .return_embeddings
        .unwrap_or(model.settings.return_embeddings);
    let mut enrolled = enrolled.map(Vec::into_iter);
    job.frames
        .iter()
        .zip(faces.iter().zip(matches))
        .map(|(frame, (faces, matches))| {
            let docs = faces
                .iter()
                .zip(matches)
                .map(|(f, m)| FaceDoc::new(f, m, with_embeddings, job.top_k.is_some()))
                .collect();
            let doc = ImageDoc::new(frame, docs);
            match enrolled.as_mut().and_then(Iterator::next) {
                Some(e) => doc.with_enrolled(&e),
                None => doc,
            }
        })
        .collect()
}

/// RESULT holding one JSON document per image.
fn result_tensor(model: &ModelState, elements: Vec<Vec<u8>>) -> Vec<BytesTensor> {
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
struct Followed {
    frames: Vec<(u64, Vec<u32>)>,
    recap: Option<Recap>,
}

/// Apply one request's sequence step: START opens the state, each frame joins
/// it (faces get tracks), END takes what it saw and drops the state.
fn follow_sequence(
    model: &ModelState,
    step: &Step,
    faces: &[Vec<Face>],
    matches: &[Vec<Match>],
    threshold: f32,
    sequences: &mut Sequences,
) -> Result<Followed> {
    let now = Instant::now();
    let limits = *sequences.limits();
    if step.start {
        sequences.start(&step.id, now)?;
    }
    let state = sequences.get(&step.id, now)?;
    let metric = model.gallery.metric();
    let frames = faces
        .iter()
        .zip(matches)
        .map(|(faces, matches)| {
            let observed: Vec<Observed> = faces
                .iter()
                .zip(matches)
                .map(|(f, m)| Observed {
                    embedding: &f.embedding,
                    name: m.name.as_deref(),
                    distance: m.distance,
                    bbox: f.bbox,
                })
                .collect();
            state.observe(&observed, metric, threshold, &limits)
        })
        .collect();
    let recap = if step.end {
        sequences.end(&step.id).map(|ended| ended.recap())
    } else {
        None
    };
    Ok(Followed { frames, recap })
}

/// The documents' `sequence` part (frame null for those without an image),
/// the faces' tracks, and the summary at END; a request with no document
/// gets one.
fn add_sequence(docs: &mut Vec<ImageDoc>, step: &Step, followed: Followed) {
    let part = |frame| {
        Some(SequenceDoc {
            correlation_id: step.id.clone(),
            frame,
        })
    };
    for (doc, (frame, tracks)) in docs.iter_mut().zip(followed.frames) {
        for (face, track) in doc.faces.iter_mut().flatten().zip(tracks) {
            face.track = Some(track);
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
