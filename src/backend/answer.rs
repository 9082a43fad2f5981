//! One request's answer: name the faces (gallery, within the request's
//! threshold), follow its sequence (if any), and render one JSON document per
//! image (or per gallery change) into RESULT.

use std::time::Instant;

use crate::backend::controls::Step;
use crate::backend::job::{Analyzed, Job};
use crate::backend::model::ModelState;
use crate::error::{Error, Result};
use crate::gallery::Enrolled;
use crate::pipeline::Face;
use crate::result::{FaceDoc, ImageDoc, SequenceDoc};
use crate::sequence::{Observed, Sequences};
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
    let mut docs = match managed {
        Some(docs) => docs,
        None => image_docs(model, &job, &faces, enrolled, threshold)?,
    };
    if let Some(step) = &job.step {
        let sequences = sequences.ok_or_else(|| Error::internal("sequence state is missing"))?;
        follow_sequence(model, step, &faces, threshold, &mut docs, sequences)?;
    }
    Ok(result_tensor(
        model,
        docs.iter().map(ImageDoc::to_json).collect(),
    ))
}

/// One document per frame: its faces named within `threshold`, and the
/// enrollment's record where there is one.
fn image_docs(
    model: &ModelState,
    job: &Job,
    faces: &[Vec<Face>],
    enrolled: Option<Vec<Enrolled>>,
    threshold: f32,
) -> Result<Vec<ImageDoc>> {
    let with_embeddings = model.settings.return_embeddings;
    let top_k = job.top_k.unwrap_or(1);
    let mut enrolled = enrolled.map(Vec::into_iter);
    job.frames
        .iter()
        .zip(faces)
        .map(|(frame, faces)| {
            let docs = faces
                .iter()
                .map(|f| {
                    let matched = model.gallery.best_match(&f.embedding, threshold, top_k)?;
                    Ok(FaceDoc::new(
                        f,
                        &matched,
                        with_embeddings,
                        job.top_k.is_some(),
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            let doc = ImageDoc::new(frame, docs);
            Ok(match enrolled.as_mut().and_then(Iterator::next) {
                Some(e) => doc.with_enrolled(&e),
                None => doc,
            })
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

/// Apply one request's sequence step: START opens the state, each frame joins
/// it (faces get tracks), END adds the summary and drops the state. The docs
/// gain their `sequence` part (frame null for those without an image); a
/// request with no document gets one.
fn follow_sequence(
    model: &ModelState,
    step: &Step,
    faces: &[Vec<Face>],
    threshold: f32,
    docs: &mut Vec<ImageDoc>,
    sequences: &mut Sequences,
) -> Result<()> {
    let now = Instant::now();
    let limits = *sequences.limits();
    if step.start {
        sequences.start(&step.id, now)?;
    }
    let state = sequences.get(&step.id, now)?;
    let metric = model.gallery.metric();
    for (doc, faces) in docs.iter_mut().zip(faces) {
        let face_docs = doc
            .faces
            .as_mut()
            .expect("frame documents list their faces");
        let observed: Vec<Observed> = faces
            .iter()
            .zip(face_docs.iter())
            .map(|(f, d)| Observed {
                embedding: &f.embedding,
                name: d.name.as_deref(),
                distance: d.distance,
                bbox: f.bbox,
            })
            .collect();
        let (frame, tracks) = state.observe(&observed, metric, threshold, &limits);
        for (d, track) in face_docs.iter_mut().zip(tracks) {
            d.track = Some(track);
        }
        doc.sequence = Some(SequenceDoc {
            correlation_id: step.id.clone(),
            frame: Some(frame),
        });
    }
    if docs.is_empty() {
        docs.push(ImageDoc::default());
    }
    for doc in docs.iter_mut().filter(|d| d.sequence.is_none()) {
        doc.sequence = Some(SequenceDoc {
            correlation_id: step.id.clone(),
            frame: None,
        });
    }
    if step.end {
        let summary = state.summary();
        sequences.end(&step.id);
        docs.last_mut().expect("at least one document").summary = Some(summary);
    }
    Ok(())
}
