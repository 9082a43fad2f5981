//! What one request asks for: its frames (from IMAGE or ENCODED), the names
//! to enroll (ENROLL), and for sequence models its place in the sequence.

use crate::backend::config::Settings;
use crate::backend::controls::{read_step, Step};
use crate::backend::tensors::{read_encoded, read_pixels, read_strings, ENCODED, IMAGE};
use crate::error::{Error, Result};
use crate::pipeline::Frame;
use crate::triton::Request;

pub const ENROLL: &str = "ENROLL";

pub struct Job {
    pub frames: Vec<Frame>,
    /// One name per frame, for ENROLL requests.
    pub enroll: Option<Vec<String>>,
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
        step,
    };
    if job.is_idle() {
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
    let names: Vec<String> = read_strings(&input)?
        .into_iter()
        .map(|b| {
            String::from_utf8(b)
                .map_err(|_| Error::invalid(format!("{ENROLL}: the name is not valid UTF-8")))
        })
        .collect::<Result<_>>()?;
    if names.len() != images {
        return Err(Error::invalid(format!(
            "{ENROLL}: {} names for {images} images; send one name per image",
            names.len(),
        )));
    }
    for name in &names {
        crate::gallery::validate_name(ENROLL, name)?;
    }
    Ok(Some(names))
}
