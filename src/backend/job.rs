//! What one request asks for: its frames (from IMAGE or ENCODED), the names
//! to enroll (ENROLL), or a change to the gallery instead (FORGET, LIST);
//! its own match threshold (request parameter `match_threshold`) and how
//! many nearest people to list (`top_k`), whether to return embeddings
//! (`return_embeddings`); and for sequence models its place
//! in the sequence.

use crate::backend::controls::{read_step, Step};
use crate::backend::settings::Settings;
use crate::backend::tensors::{read_encoded, read_pixels, read_strings, ENCODED, IMAGE};
use crate::error::{Error, Result};
use crate::gallery::MAX_TOP_K;
use crate::pipeline::{Face, Frame};
use crate::triton::request::ParameterValue;
use crate::triton::{sys, Input, Request};

pub const ENROLL: &str = "ENROLL";
pub const FORGET: &str = "FORGET";
pub const LIST: &str = "LIST";
pub const MATCH_THRESHOLD: &str = "match_threshold";
pub const TOP_K: &str = "top_k";
pub const RETURN_EMBEDDINGS: &str = "return_embeddings";

/// A request that manages the gallery instead of showing an image.
pub enum Manage {
    /// Forget these names (one document each).
    Forget(Vec<String>),
    List,
}

/// A request after the engine: its job and the faces of each of its frames.
pub struct Analyzed {
    pub job: Job,
    pub faces: Vec<Vec<Face>>,
}

pub struct Job {
    pub frames: Vec<Frame>,
    /// One name per frame, for ENROLL requests.
    pub enroll: Option<Vec<String>>,
    pub manage: Option<Manage>,
    /// The request's own `match_threshold`, else the model's holds.
    pub threshold: Option<f32>,
    /// The request's `top_k`: each face lists this many nearest people.
    pub top_k: Option<usize>,
    /// The request's `return_embeddings`, else the model's holds.
    pub return_embeddings: Option<bool>,
    /// Sequence models: this request's place in its sequence.
    pub step: Option<Step>,
}

impl Job {
    /// A request Triton marks not ready (an idle slot of the sequence batcher).
    pub fn is_idle(&self) -> bool {
        self.step.as_ref().is_some_and(|s| !s.ready)
    }

    /// Label of image `i` in messages: "image[2]" in a batched request.
    pub fn label(&self, i: usize, what: &str) -> String {
        if self.frames.len() > 1 {
            format!("{what}[{i}]")
        } else {
            what.to_string()
        }
    }
}

/// Read one request's inputs.
pub fn read_job(request: &Request, settings: &Settings) -> Result<Job> {
    let step = match &settings.sequence {
        None => None,
        Some(config) => Some(read_step(request, config)?),
    };
    let mut job = Job {
        frames: Vec::new(),
        enroll: None,
        manage: None,
        threshold: None,
        top_k: None,
        return_embeddings: None,
        step,
    };
    if job.is_idle() {
        return Ok(job);
    }
    job.threshold = read_threshold(request)?;
    job.top_k = read_top_k(request)?;
    job.return_embeddings = read_bool(request, RETURN_EMBEDDINGS)?;
    job.manage = read_manage(request)?;
    if job.manage.is_some() {
        for alone in [IMAGE, ENCODED, ENROLL] {
            if request.input(alone)?.is_some() {
                return Err(Error::invalid(format!(
                    "{FORGET} and {LIST} go alone: send no {alone} with them"
                )));
            }
        }
        return Ok(job);
    }
    // START and END may come without a frame.
    let frameless_ok = job.step.as_ref().is_some_and(|s| s.start || s.end);
    job.frames = read_frames(request, settings, frameless_ok)?;
    job.enroll = read_names(request, job.frames.len())?;
    Ok(job)
}

fn read_frames(request: &Request, settings: &Settings, frameless_ok: bool) -> Result<Vec<Frame>> {
    match (request.input(IMAGE)?, request.input(ENCODED)?) {
        (Some(_), Some(_)) => Err(Error::invalid(format!(
            "send either {IMAGE} or {ENCODED} in a request, not both"
        ))),
        (None, None) if frameless_ok => Ok(Vec::new()),
        (None, None) => Err(Error::invalid(format!(
            "the request has no image: send {IMAGE} (uint8, height x width x 3) or {ENCODED} \
             (JPEG/PNG/WebP bytes)"
        ))),
        (Some(input), None) => read_pixels(&input, settings),
        (None, Some(input)) => read_encoded(&input, settings),
    }
}

/// ENROLL's names, one per image, each a valid name.
fn read_names(request: &Request, images: usize) -> Result<Option<Vec<String>>> {
    let Some(input) = request.input(ENROLL)? else {
        return Ok(None);
    };
    let names = names_of(&input, ENROLL)?;
    if names.len() != images {
        return Err(Error::invalid(format!(
            "{ENROLL}: {} names for {images} images; send one name per image",
            names.len(),
        )));
    }
    Ok(Some(names))
}

/// The valid names of a TYPE_STRING input (`what` names it in messages).
fn names_of(input: &Input, what: &str) -> Result<Vec<String>> {
    let names: Vec<String> = read_strings(input)?
        .into_iter()
        .map(|b| {
            String::from_utf8(b)
                .map_err(|_| Error::invalid(format!("{what}: the name is not valid UTF-8")))
        })
        .collect::<Result<_>>()?;
    for name in &names {
        crate::gallery::validate_name(what, name)?;
    }
    Ok(names)
}

/// FORGET (its names) or LIST (when true); not both.
fn read_manage(request: &Request) -> Result<Option<Manage>> {
    match (request.input(FORGET)?, request.input(LIST)?) {
        (Some(_), Some(_)) => Err(Error::invalid(format!(
            "send {FORGET} or {LIST} in a request, not both"
        ))),
        (Some(input), None) => {
            let names = names_of(&input, FORGET)?;
            if names.is_empty() {
                return Err(Error::invalid(format!("{FORGET}: no name in the request")));
            }
            Ok(Some(Manage::Forget(names)))
        }
        (None, Some(input)) => Ok(read_flag(&input)?.then_some(Manage::List)),
        (None, None) => Ok(None),
    }
}

/// A TYPE_BOOL input holding one element.
fn read_flag(input: &Input) -> Result<bool> {
    if input.datatype != sys::TRITONSERVER_TYPE_BOOL {
        return Err(Error::invalid(format!(
            "{}: expected data type BOOL, got type code {}",
            input.name, input.datatype
        )));
    }
    let data = input.host_bytes()?;
    match (input.shape.iter().product::<i64>(), &data[..]) {
        (1, [byte]) => Ok(*byte != 0),
        _ => Err(Error::invalid(format!(
            "{}: expected one element, got shape {:?}",
            input.name, input.shape
        ))),
    }
}

/// The request parameter `match_threshold`: a positive number, as the model
/// parameter of the same name takes (for either metric).
fn read_threshold(request: &Request) -> Result<Option<f32>> {
    let Some(value) = request.parameter(MATCH_THRESHOLD)? else {
        return Ok(None);
    };
    let number = match value {
        ParameterValue::Double(x) => Some(x as f32),
        ParameterValue::Int(n) => Some(n as f32),
        _ => None,
    };
    match number.filter(|x| x.is_finite() && *x > 0.0) {
        Some(x) => Ok(Some(x)),
        None => Err(Error::invalid(format!(
            "request parameter {MATCH_THRESHOLD} = {value} is invalid: expected a positive \
             number (the same-person distance: Euclidean for dlib, 1 - cosine for onnx)"
        ))),
    }
}

/// A request parameter that is true or false.
fn read_bool(request: &Request, name: &str) -> Result<Option<bool>> {
    match request.parameter(name)? {
        None => Ok(None),
        Some(ParameterValue::Bool(b)) => Ok(Some(b)),
        Some(value) => Err(Error::invalid(format!(
            "request parameter {name} = {value} is invalid: expected true or false"
        ))),
    }
}

/// The request parameter `top_k`: an integer from 1 to `MAX_TOP_K`.
fn read_top_k(request: &Request) -> Result<Option<usize>> {
    let Some(value) = request.parameter(TOP_K)? else {
        return Ok(None);
    };
    match value {
        ParameterValue::Int(n) if (1..=MAX_TOP_K as i64).contains(&n) => Ok(Some(n as usize)),
        _ => Err(Error::invalid(format!(
            "request parameter {TOP_K} = {value} is invalid: expected an integer from 1 to \
             {MAX_TOP_K} (the nearest people listed per face)"
        ))),
    }
}
