//! One Execute: read every request into frames (or its own error), run the
//! engine on all frames of the batch together, enroll / match against the
//! gallery, render one JSON per image, answer each request once, report
//! statistics. A bad request fails alone; the rest of the batch goes on.

use crate::backend::config::Settings;
use crate::backend::instance::InstanceState;
use crate::backend::model::ModelState;
use crate::error::{Error, Result};
use crate::gallery::Enrolled;
use crate::pipeline::image::{frame_from_encoded, frame_from_pixels};
use crate::pipeline::{Face, Frame};
use crate::result::{FaceDoc, ImageDoc};
use crate::triton::request::decode_bytes_tensor;
use crate::triton::time::{now_ns, ExecTimes};
use crate::triton::{guard, log, sys, BytesTensor, Input, InstanceHandle, Request};

pub const IMAGE: &str = "IMAGE";
pub const ENCODED: &str = "ENCODED";
pub const ENROLL: &str = "ENROLL";
pub const RESULT: &str = "RESULT";

/// What one request asks for.
struct Job {
    frames: Vec<Frame>,
    /// One name per frame, for ENROLL requests.
    enroll: Option<Vec<String>>,
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

    let outcomes = jobs
        .into_iter()
        .map(|job| {
            let job = job?;
            // Always drain this job's share of the results, even on error.
            let faces: Vec<Result<Vec<Face>>> = analyzed.by_ref().take(job.frames.len()).collect();
            answer(model, &job, faces)
        })
        .collect();
    (outcomes, compute_start, now_ns(), image_count)
}

/// Enroll (if asked), match, and render one request's documents.
fn answer(model: &ModelState, job: &Job, faces: Vec<Result<Vec<Face>>>) -> Outcome {
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

    let elements = job
        .frames
        .iter()
        .zip(&faces)
        .zip(enrolled)
        .map(|((frame, faces), enrolled)| {
            let docs = faces
                .iter()
                .map(|f| {
                    FaceDoc::new(
                        f,
                        &model.gallery.best_match(&f.embedding),
                        model.settings.return_embeddings,
                    )
                })
                .collect();
            let doc = ImageDoc::new(frame, docs);
            match enrolled {
                Some(e) => doc.with_enrolled(&e),
                None => doc,
            }
            .to_json()
        })
        .collect::<Vec<_>>();
    let shape = if model.settings.batched {
        vec![elements.len() as i64, 1]
    } else {
        vec![1]
    };
    Ok(vec![BytesTensor {
        name: RESULT,
        shape,
        elements,
    }])
}

/// Read one request's inputs into frames (and enrollment names).
fn read_job(request: &Request, settings: &Settings) -> Result<Job> {
    let image = request.input(IMAGE)?;
    let encoded = request.input(ENCODED)?;
    let frames = match (image, encoded) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(format!(
                "send either {IMAGE} or {ENCODED} in a request, not both"
            )))
        }
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
    Ok(Job { frames, enroll })
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
