//! One Execute: read every request into frames (or its own error), run the
//! engine on all frames of the batch together, enroll / match against the
//! gallery, render one JSON per image, answer each request once, report
//! statistics. A bad request fails alone; the rest of the batch goes on.

use crate::backend::config::{Control, SequenceConfig, Settings, Truth};
use crate::backend::instance::InstanceState;
use crate::backend::model::ModelState;
use crate::error::{Error, Result};
use crate::gallery::Enrolled;
use crate::pipeline::image::{frame_from_encoded, frame_from_pixels};
use crate::pipeline::{Face, Frame};
use crate::result::{FaceDoc, ImageDoc, SequenceDoc};
use crate::sequence::{CorrId, Observed, Sequences};
use crate::triton::request::CorrelationId;
use crate::triton::request::{decode_bytes_tensor, first_bytes_element};
use crate::triton::time::{now_ns, ExecTimes};
use crate::triton::{guard, log, sys, BytesTensor, Input, InstanceHandle, Request};
use std::time::Instant;

pub const IMAGE: &str = "IMAGE";
pub const ENCODED: &str = "ENCODED";
pub const ENROLL: &str = "ENROLL";
pub const RESULT: &str = "RESULT";

/// What one request asks for.
struct Job {
    frames: Vec<Frame>,
    /// One name per frame, for ENROLL requests.
    enroll: Option<Vec<String>>,
    /// Sequence models: this request's place in its sequence.
    step: Option<Step>,
}

/// The sequence controls of one request.
struct Step {
    ready: bool,
    start: bool,
    end: bool,
    id: CorrId,
}

/// Execute entry: takes ownership of the requests and settles every one of
/// them (answer + release), whatever happens, panics included.
///
/// # Safety
/// `raw` are the requests Triton passed to this instance's Execute.
pub unsafe fn execute(instance: InstanceHandle, raw: &[*mut sys::TRITONBACKEND_Request]) {
    let exec_start = now_ns();
    let requests: Vec<Request> = raw.iter().map(|r| Request::from_raw(*r)).collect();
    let processed = guard::catch(|| {
        // SAFETY: states were attached at (instance) initialize and live until finalize.
        let model = instance.model()?.state::<ModelState>()?;
        let state = instance.state_mut::<InstanceState>()?;
        state.enter()?;
        Ok(process(model, state, &requests))
    });
    let (outcomes, compute_start, compute_end, images) = match processed {
        Ok(p) => p,
        Err(e) => {
            log::error(&format!("execute failed for the whole batch: {e}"));
            let now = now_ns();
            (
                requests.iter().map(|_| Err(e.clone())).collect(),
                now,
                now,
                0,
            )
        }
    };
    let mut times = ExecTimes {
        exec_start,
        compute_start,
        compute_end,
        exec_end: 0,
    };
    for (request, outcome) in requests.into_iter().zip(outcomes) {
        request.respond(outcome, |req, success| {
            times.exec_end = now_ns();
            if let Err(e) = instance.report_request(req, success, &times) {
                log::error(&format!("cannot report request statistics: {e}"));
            }
        });
    }
    times.exec_end = now_ns();
    if images > 0 {
        if let Err(e) = instance.report_batch(images as u64, &times) {
            log::error(&format!("cannot report batch statistics: {e}"));
        }
    }
}

type Outcome = Result<Vec<BytesTensor>>;

/// Requests in, one outcome per request out, plus compute timestamps and the
/// number of images that reached the engine.
fn process(
    model: &ModelState,
    state: &mut InstanceState,
    requests: &[Request],
) -> (Vec<Outcome>, u64, u64, usize) {
    let settings = &model.settings;
    let jobs: Vec<Result<Job>> = requests.iter().map(|r| read_job(r, settings)).collect();

    let compute_start = now_ns();
    let frames: Vec<&Frame> = jobs
        .iter()
        .flatten()
        .flat_map(|j| j.frames.iter())
        .collect();
    let mut analyzed = state
        .engine
        .analyze(&frames, settings.max_faces_per_image)
        .into_iter();
    let image_count = frames.len();

    // Sequence steps run in request order under one lock, after the engine.
    let mut sequences = model
        .sequences
        .as_ref()
        .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
    if let Some(seqs) = sequences.as_deref_mut() {
        let evicted = seqs.evict_idle(Instant::now());
        if evicted > 0 {
            log::info(&format!(
                "model '{}': evicted {evicted} idle sequences",
                model.name
            ));
        }
    }
    let outcomes = jobs
        .into_iter()
        .map(|job| {
            let job = job?;
            // Always drain this job's share of the results, even on error.
            let faces: Vec<Result<Vec<Face>>> = analyzed.by_ref().take(job.frames.len()).collect();
            answer(model, &job, faces, sequences.as_deref_mut())
        })
        .collect();
    if let (Some(seqs), Some(gauge)) = (sequences.as_deref(), &model.live_gauge) {
        gauge.set(seqs.len() as f64);
    }
    (outcomes, compute_start, now_ns(), image_count)
}

/// Enroll (if asked), match, follow the sequence (if any), and render one
/// request's documents.
fn answer(
    model: &ModelState,
    job: &Job,
    faces: Vec<Result<Vec<Face>>>,
    sequences: Option<&mut Sequences>,
) -> Outcome {
    if job.step.as_ref().is_some_and(|s| !s.ready) {
        // A request Triton marks not ready (an idle slot): answer, touch nothing.
        return Ok(result_tensor(model, vec![b"{}".to_vec()]));
    }
    let batched = job.frames.len() > 1;
    let label = |i: usize, what: &str| {
        if batched {
            format!("{what}[{i}]")
        } else {
            what.to_string()
        }
    };
    let faces: Vec<Vec<Face>> = faces
        .into_iter()
        .enumerate()
        .map(|(i, f)| f.map_err(|e| e.context(label(i, "image"))))
        .collect::<Result<_>>()?;

    let enrolled: Vec<Option<Enrolled>> = match &job.enroll {
        None => vec![None; job.frames.len()],
        Some(names) => {
            // Check every image first so a bad one enrolls nothing.
            for (i, f) in faces.iter().enumerate() {
                if f.len() != 1 {
                    return Err(Error::invalid(format!(
                        "{}: enrollment needs exactly one face in the image, found {}",
                        label(i, ENROLL),
                        f.len()
                    )));
                }
            }
            names
                .iter()
                .zip(&faces)
                .map(|(name, f)| model.gallery.enroll(name, f[0].embedding.clone()).map(Some))
                .collect::<Result<_>>()?
        }
    };

    let with_embeddings = model.settings.return_embeddings;
    let mut docs: Vec<ImageDoc> = job
        .frames
        .iter()
        .zip(&faces)
        .zip(enrolled)
        .map(|((frame, faces), enrolled)| {
            let docs = faces
                .iter()
                .map(|f| FaceDoc::new(f, &model.gallery.best_match(&f.embedding), with_embeddings))
                .collect();
            let doc = ImageDoc::new(frame, docs);
            match enrolled {
                Some(e) => doc.with_enrolled(&e),
                None => doc,
            }
        })
        .collect();
    if let Some(step) = &job.step {
        let sequences = sequences.ok_or_else(|| Error::internal("sequence state is missing"))?;
        follow_sequence(model, step, &faces, &mut docs, sequences)?;
    }
    Ok(result_tensor(
        model,
        docs.iter().map(ImageDoc::to_json).collect(),
    ))
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
/// gain their `sequence` part; a request without a frame gets one doc.
fn follow_sequence(
    model: &ModelState,
    step: &Step,
    faces: &[Vec<Face>],
    docs: &mut Vec<ImageDoc>,
    sequences: &mut Sequences,
) -> Result<()> {
    let now = Instant::now();
    let limits = *sequences.limits();
    if step.start {
        sequences.start(&step.id, now)?;
    }
    let state = sequences.get(&step.id, now)?;
    let (metric, threshold) = (model.gallery.metric(), model.gallery.threshold());
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
                name: (d.name != crate::result::UNKNOWN).then_some(d.name.as_str()),
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
        docs.push(ImageDoc {
            sequence: Some(SequenceDoc {
                correlation_id: step.id.clone(),
                frame: None,
            }),
            ..Default::default()
        });
    }
    if step.end {
        let summary = state.summary();
        sequences.end(&step.id);
        docs.last_mut().expect("at least one document").summary = Some(summary);
    }
    Ok(())
}

/// Read one request's inputs into frames (and enrollment names).
fn read_job(request: &Request, settings: &Settings) -> Result<Job> {
    let step = match &settings.sequence {
        None => None,
        Some(config) => Some(read_step(request, config)?),
    };
    if step.as_ref().is_some_and(|s| !s.ready) {
        return Ok(Job {
            frames: Vec::new(),
            enroll: None,
            step,
        });
    }
    let image = request.input(IMAGE)?;
    let encoded = request.input(ENCODED)?;
    // START and END may come without a frame.
    let frameless_ok = step.as_ref().is_some_and(|s| s.start || s.end);
    let frames = match (image, encoded) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(format!(
                "send either {IMAGE} or {ENCODED} in a request, not both"
            )))
        }
        (None, None) if frameless_ok => Vec::new(),
        (None, None) => {
            return Err(Error::invalid(format!(
                "the request has no image: send {IMAGE} (uint8, height x width x 3) or {ENCODED} \
                 (JPEG/PNG/WebP bytes)"
            )))
        }
        (Some(input), None) => read_pixels(&input, settings)?,
        (None, Some(input)) => read_encoded(&input, settings)?,
    };
    let enroll = match request.input(ENROLL)? {
        None => None,
        Some(input) => {
            let names: Vec<String> = read_strings(&input)?
                .into_iter()
                .map(|b| {
                    String::from_utf8(b.to_vec()).map_err(|_| {
                        Error::invalid(format!("{ENROLL}: the name is not valid UTF-8"))
                    })
                })
                .collect::<Result<_>>()?;
            if names.len() != frames.len() {
                return Err(Error::invalid(format!(
                    "{ENROLL}: {} names for {} images; send one name per image",
                    names.len(),
                    frames.len()
                )));
            }
            for name in &names {
                crate::gallery::validate_name(name)?;
            }
            Some(names)
        }
    };
    Ok(Job {
        frames,
        enroll,
        step,
    })
}

/// START / END / READY / CORRID of a request, from the control tensors the
/// config declares, else from the request's own flags and correlation ID.
fn read_step(request: &Request, config: &SequenceConfig) -> Result<Step> {
    let flags = request.flags()?;
    let flag = |control: &Option<Control>, bit: u32, default: bool| -> Result<bool> {
        match control {
            Some(c) => read_control(request, c),
            None if bit != 0 => Ok(flags & bit != 0),
            None => Ok(default),
        }
    };
    let ready = flag(&config.ready, 0, true)?;
    let start = flag(
        &config.start,
        sys::TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        false,
    )?;
    let end = flag(
        &config.end,
        sys::TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
        false,
    )?;
    let id = match &config.corrid {
        Some((name, string)) => read_corrid(request, name, *string)?,
        None => None,
    };
    let id = match id {
        Some(id) => id,
        None => match request.correlation_id()? {
            Some(CorrelationId::Int(n)) => CorrId::Int(n),
            Some(CorrelationId::Str(s)) => CorrId::Str(s),
            None if !ready => CorrId::Int(0),
            None => {
                return Err(Error::invalid(
                    "a sequence request needs a correlation ID (sequence_id)",
                ))
            }
        },
    };
    Ok(Step {
        ready,
        start,
        end,
        id,
    })
}

/// The first element of a control tensor, compared with its "true" value.
fn read_control(request: &Request, control: &Control) -> Result<bool> {
    let Some(input) = request.input(&control.name)? else {
        return Ok(false);
    };
    let data = input.host_bytes()?;
    let first4 = || -> Result<[u8; 4]> {
        data.get(..4)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Error::invalid(format!("{}: control tensor is empty", control.name)))
    };
    Ok(match control.truth {
        Truth::Int32(t) => i32::from_le_bytes(first4()?) == t,
        Truth::Fp32(t) => f32::from_le_bytes(first4()?) == t,
        Truth::Bool(t) => data.first().map(|b| *b != 0) == Some(t),
    })
}

/// The CORRID control tensor: a UINT64 (or other integer) or a string.
fn read_corrid(request: &Request, name: &str, string: bool) -> Result<Option<CorrId>> {
    let Some(input) = request.input(name)? else {
        return Ok(None);
    };
    let data = input.host_bytes()?;
    if string {
        // Triton hands string CORRIDs over in a fixed-size buffer (length
        // prefix, the id, then padding), so only the first element counts.
        let first = first_bytes_element(&data)?;
        return Ok(first
            .filter(|b| !b.is_empty())
            .map(|b| CorrId::Str(String::from_utf8_lossy(b).into_owned())));
    }
    let width = match input.datatype {
        sys::TRITONSERVER_TYPE_UINT64 | sys::TRITONSERVER_TYPE_INT64 => 8,
        sys::TRITONSERVER_TYPE_UINT32 | sys::TRITONSERVER_TYPE_INT32 => 4,
        other => {
            return Err(Error::invalid(format!(
                "{name}: unsupported CORRID type code {other}"
            )))
        }
    };
    let bytes = data
        .get(..width)
        .ok_or_else(|| Error::invalid(format!("{name}: control tensor is empty")))?;
    let mut buf = [0u8; 8];
    buf[..width].copy_from_slice(bytes);
    let id = u64::from_le_bytes(buf);
    Ok((id != 0).then_some(CorrId::Int(id)))
}

fn dims_text(shape: &[i64]) -> String {
    format!("{shape:?}")
}

fn read_pixels(input: &Input, settings: &Settings) -> Result<Vec<Frame>> {
    if input.datatype != sys::TRITONSERVER_TYPE_UINT8 {
        return Err(Error::invalid(format!(
            "{IMAGE}: expected data type UINT8, got type code {}",
            input.datatype
        )));
    }
    let shape = &input.shape;
    let (batch, hwc) = match (settings.batched, shape.len()) {
        (true, 4) => (shape[0], &shape[1..]),
        (false, 3) => (1, &shape[..]),
        _ => {
            return Err(Error::invalid(format!(
                "{IMAGE}: expected shape {}height x width x 3, got {}",
                if settings.batched { "batch x " } else { "" },
                dims_text(shape)
            )))
        }
    };
    if hwc[2] != 3 {
        return Err(Error::invalid(format!(
            "{IMAGE}: expected 3 channels ({:?}), got {} in shape {}",
            settings.pixel_format,
            hwc[2],
            dims_text(shape)
        )));
    }
    if batch <= 0 || hwc[0] < 0 || hwc[1] < 0 {
        return Err(Error::invalid(format!(
            "{IMAGE}: empty image, shape {}",
            dims_text(shape)
        )));
    }
    let (h, w) = (hwc[0] as u64, hwc[1] as u64);
    let data = input.host_bytes()?;
    let per_image = (h * w * 3) as usize;
    if per_image == 0 {
        return Err(Error::invalid(format!("{IMAGE}: empty image ({w}x{h})")));
    }
    if data.len() != per_image * batch as usize {
        return Err(Error::invalid(format!(
            "{IMAGE}: {} bytes do not match shape {}",
            data.len(),
            dims_text(shape)
        )));
    }
    data.chunks_exact(per_image)
        .map(|pixels| {
            frame_from_pixels(
                IMAGE,
                pixels,
                h,
                w,
                settings.pixel_format,
                settings.max_image_pixels,
            )
        })
        .collect()
}

fn read_encoded(input: &Input, settings: &Settings) -> Result<Vec<Frame>> {
    let images = read_strings(input)?;
    if images.is_empty() {
        return Err(Error::invalid(format!(
            "{ENCODED}: no image bytes in the request"
        )));
    }
    images
        .iter()
        .map(|bytes| frame_from_encoded(ENCODED, bytes, settings.max_image_pixels))
        .collect()
}

/// The elements of a TYPE_STRING input, checked against its shape.
fn read_strings<'r>(input: &Input<'r>) -> Result<Vec<Vec<u8>>> {
    if input.datatype != sys::TRITONSERVER_TYPE_BYTES {
        return Err(Error::invalid(format!(
            "{}: expected data type BYTES (TYPE_STRING), got type code {}",
            input.name, input.datatype
        )));
    }
    let data = input.host_bytes()?;
    let elements = decode_bytes_tensor(&data).map_err(|e| e.context(&input.name))?;
    let expected: i64 = input.shape.iter().product();
    if expected < 0 || elements.len() as i64 != expected {
        return Err(Error::invalid(format!(
            "{}: shape {} holds {} elements, the data has {}",
            input.name,
            dims_text(&input.shape),
            expected,
            elements.len()
        )));
    }
    Ok(elements.into_iter().map(<[u8]>::to_vec).collect())
}
