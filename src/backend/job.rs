//! What one request asks for: its frames (from IMAGE or ENCODED) or
//! embeddings to match (EMBEDDING), the names to enroll (ENROLL), or a
//! change to the gallery instead (FORGET, LIST); an embedding to verify its
//! faces against (REFERENCE); its request parameters (`match_threshold`,
//! `top_k`, `return_embeddings` and the options of `Options`); and for
//! sequence models its place in the sequence.

use std::time::Duration;

use crate::backend::controls::{read_step, Step};
use crate::backend::settings::Settings;
use crate::backend::tensors::{
    read_encoded, read_pixels, read_strings, read_vectors, Decoded, EMBEDDING, ENCODED, IMAGE,
    REFERENCE,
};
use crate::error::{Error, Result};
use crate::gallery::MAX_TOP_K;
use crate::metric::coarse_threshold;
use crate::pipeline::{Analysis, Frame, Wanted};
use crate::sequence::{Cadence, MAX_CADENCE};
use crate::triton::request::ParameterValue;
use crate::triton::{sys, Input, Request};

pub const ENROLL: &str = "ENROLL";
pub const FORGET: &str = "FORGET";
pub const LIST: &str = "LIST";
pub const MATCH_THRESHOLD: &str = "match_threshold";
pub const TOP_K: &str = "top_k";
pub const RETURN_EMBEDDINGS: &str = "return_embeddings";
pub const DETECT_ONLY: &str = "detect_only";
pub const MIN_FACE_SIZE: &str = "min_face_size";
pub const MAX_FACES: &str = "max_faces";
pub const RETURN_CROPS: &str = "return_crops";
pub const TIMINGS: &str = "timings";
pub const CHANGES: &str = "changes";
pub const CHANGES_LIMIT: &str = "changes_limit";
pub const DETECT_EVERY: &str = "detect_every";
pub const REIDENTIFY_EVERY: &str = "reidentify_every";
/// LIST's record of changes: this many unless the request asks otherwise.
const CHANGES_DEFAULT: usize = 100;
const CHANGES_MAX: usize = 10_000;
/// `min_face_size` above this is surely a mistake (no image is this large).
const MAX_MIN_FACE_SIZE: f64 = 65_536.0;

/// A request that manages the gallery instead of showing an image.
pub enum Manage {
    /// Forget these names (one document each).
    Forget(Vec<String>),
    /// Everyone known; with `changes`, the newest that many recorded changes.
    List { changes: Option<usize> },
}

/// A request after the engine: its job and what the engine found in each
/// of its frames (or, for EMBEDDING, one face per embedding).
pub struct Analyzed<'r> {
    pub job: Job<'r>,
    pub found: Vec<Analysis>,
}

/// The request parameters that shape what is done with each image.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Options {
    pub detect_only: bool,
    pub min_face_size: Option<f32>,
    pub max_faces: Option<usize>,
    pub crops: bool,
    pub timings: bool,
}

/// One request's work; its frames may borrow the request's pixels (`'r`).
pub struct Job<'r> {
    pub frames: Vec<Frame<'r>>,
    /// ENCODED's files until decode.rs decodes them into `frames`.
    pub encoded: Vec<Vec<u8>>,
    /// How long each frame took to decode.
    pub decoded_in: Vec<Duration>,
    /// EMBEDDING's rows, matched instead of frames' faces.
    pub embeddings: Option<Vec<Vec<f32>>>,
    /// REFERENCE's rows: one per item (Triton checks a batch's dimension;
    /// one row for all items is taken where it lets one through).
    pub reference: Option<Vec<Vec<f32>>>,
    pub options: Options,
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
    /// Sequence models: `detect_every` and `reidentify_every` as the request
    /// asks them, for its sequence from now on.
    pub asked: (Option<u32>, Option<u32>),
    /// The cadence in force for its sequence (batch.rs settles it before
    /// the engine runs).
    pub cadence: Cadence,
    /// The label of the gallery key the request brought (access.rs), for
    /// the record of changes; `None` on a model without keys.
    pub by: Option<String>,
    /// For a key without `search`: the decimals its answers show distances
    /// to, which its threshold is compared at too.
    pub coarse: Option<u32>,
}

impl Job<'_> {
    /// The threshold this request's faces are named within: its own
    /// `match_threshold`, else the model's. A key without `search` compares
    /// rounded distances with its rounded threshold (so no answer tells a
    /// distance more precisely than answers show it), never above the
    /// model's own.
    pub fn threshold(&self, model: f32) -> f32 {
        match (self.threshold, self.coarse) {
            (Some(t), Some(decimals)) => coarse_threshold(t, decimals).min(model),
            (Some(t), None) => t,
            (None, _) => model,
        }
    }

    /// A request Triton marks not ready (an idle slot of the sequence batcher).
    pub fn is_idle(&self) -> bool {
        self.step.as_ref().is_some_and(|s| !s.ready)
    }

    /// A sequence frame followed between detections (its cadence is not
    /// every frame). What needs every face embedded, or none (ENROLL,
    /// REFERENCE, `return_crops`, `detect_only`), is answered every frame.
    pub fn follows(&self) -> bool {
        let o = &self.options;
        let every_face =
            o.detect_only || o.crops || self.enroll.is_some() || self.reference.is_some();
        self.step.is_some() && !self.cadence.every_frame() && !self.frames.is_empty() && !every_face
    }

    /// What the engine is asked for each frame of this request.
    pub fn wanted(&self, settings: &Settings) -> Wanted {
        let o = &self.options;
        Wanted {
            embeddings: !o.detect_only,
            min_face_size: o.min_face_size.unwrap_or(settings.min_face_size as f32),
            max_faces: o.max_faces,
            crops: o.crops,
            limit: settings.max_faces_per_image,
        }
    }

    /// The reference embedding of item `i`, if the request sent one.
    pub fn reference_of(&self, i: usize) -> Option<&[f32]> {
        let rows = self.reference.as_ref()?;
        rows.get(i).or_else(|| rows.first()).map(Vec::as_slice)
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

/// Read one request's inputs (`dim`: the length of this model's embeddings).
pub fn read_job<'r>(request: &'r Request, settings: &Settings, dim: usize) -> Result<Job<'r>> {
    let step = match &settings.sequence {
        None => None,
        Some(config) => Some(read_step(request, config)?),
    };
    let mut job = Job {
        frames: Vec::new(),
        encoded: Vec::new(),
        decoded_in: Vec::new(),
        embeddings: None,
        reference: None,
        options: Options::default(),
        enroll: None,
        manage: None,
        threshold: None,
        top_k: None,
        return_embeddings: None,
        step,
        asked: (None, None),
        cadence: Cadence::EVERY_FRAME,
        by: None,
        coarse: None,
    };
    if job.is_idle() {
        return Ok(job);
    }
    job.threshold = read_threshold(request)?;
    job.top_k = read_top_k(request)?;
    job.return_embeddings = read_bool(request, RETURN_EMBEDDINGS)?;
    job.options = read_options(request, settings)?;
    job.asked = read_cadence(request, job.step.is_some())?;
    job.manage = read_manage(request)?;
    if job.manage.is_some() {
        for alone in [IMAGE, ENCODED, ENROLL, EMBEDDING, REFERENCE] {
            if request.input(alone)?.is_some() {
                return Err(Error::invalid(format!(
                    "{FORGET} and {LIST} go alone: send no {alone} with them"
                )));
            }
        }
        return Ok(job);
    }
    let items = match request.input(EMBEDDING)? {
        Some(input) => {
            check_embedding_request(request, &job)?;
            let rows = read_vectors(&input, settings, dim)?;
            let n = rows.len();
            job.embeddings = Some(rows);
            n
        }
        None => {
            // START and END may come without a frame.
            let frameless_ok = job.step.as_ref().is_some_and(|s| s.start || s.end);
            match read_frames(request, settings, frameless_ok)? {
                Images::Decoded(decoded) => {
                    (job.frames, job.decoded_in) = decoded.into_iter().unzip()
                }
                Images::Encoded(files) => job.encoded = files,
            }
            let images = job.frames.len() + job.encoded.len();
            job.enroll = read_names(request, images)?;
            images
        }
    };
    if let Some(input) = request.input(REFERENCE)? {
        let rows = read_vectors(&input, settings, dim)?;
        if rows.len() != 1 && rows.len() != items {
            return Err(Error::invalid(format!(
                "{REFERENCE}: {} embeddings for {items} images; send one per image",
                rows.len()
            )));
        }
        job.reference = Some(rows);
    }
    check_detect_only(&job)?;
    Ok(job)
}

/// EMBEDDING is matched as a face would be: nothing that needs an image.
fn check_embedding_request(request: &Request, job: &Job) -> Result<()> {
    for other in [IMAGE, ENCODED, ENROLL] {
        if request.input(other)?.is_some() {
            return Err(Error::invalid(format!(
                "{EMBEDDING} is matched against the gallery instead of an image's faces: send \
                 no {other} with it"
            )));
        }
    }
    if job.step.is_some() {
        return Err(Error::invalid(format!(
            "a sequence follows the faces of frames: send {IMAGE} or {ENCODED}, not {EMBEDDING}"
        )));
    }
    let o = &job.options;
    let image_options = [
        (DETECT_ONLY, o.detect_only),
        (MIN_FACE_SIZE, o.min_face_size.is_some()),
        (MAX_FACES, o.max_faces.is_some()),
        (RETURN_CROPS, o.crops),
    ];
    if let Some((name, _)) = image_options.iter().find(|(_, set)| *set) {
        return Err(Error::invalid(format!(
            "request parameter {name} applies to an image's faces; an {EMBEDDING} request has \
             no image"
        )));
    }
    Ok(())
}

/// `detect_only` computes no embedding: nothing that needs one goes with it.
fn check_detect_only(job: &Job) -> Result<()> {
    if !job.options.detect_only {
        return Ok(());
    }
    let needs_embeddings = [
        (ENROLL, job.enroll.is_some()),
        (REFERENCE, job.reference.is_some()),
        (TOP_K, job.top_k.is_some()),
        (RETURN_EMBEDDINGS, job.return_embeddings == Some(true)),
    ];
    match needs_embeddings.iter().find(|(_, set)| *set) {
        Some((what, _)) => Err(Error::invalid(format!(
            "{DETECT_ONLY} computes no embedding, which {what} needs: send one or the other"
        ))),
        None => Ok(()),
    }
}

/// The request parameters of `Options`, each checked.
fn read_options(request: &Request, settings: &Settings) -> Result<Options> {
    Ok(Options {
        detect_only: read_bool(request, DETECT_ONLY)?.unwrap_or(false),
        min_face_size: read_min_face_size(request)?,
        max_faces: read_max_faces(request, settings.max_faces_per_image)?,
        crops: read_bool(request, RETURN_CROPS)?.unwrap_or(false),
        timings: read_bool(request, TIMINGS)?.unwrap_or(false),
    })
}

/// `min_face_size`: pixels, 0 or more.
fn read_min_face_size(request: &Request) -> Result<Option<f32>> {
    let expected = format!(
        "a number of pixels from 0 to {MAX_MIN_FACE_SIZE} (the shorter side of a face's box)"
    );
    read_number(request, MIN_FACE_SIZE, &expected, |x| {
        (0.0..=MAX_MIN_FACE_SIZE).contains(&x)
    })
}

/// A request parameter that is a number (an integer or a double) that
/// `fits`; else INVALID_ARG saying what was `expected`.
fn read_number(
    request: &Request,
    name: &str,
    expected: &str,
    fits: impl Fn(f64) -> bool,
) -> Result<Option<f32>> {
    let Some(value) = request.parameter(name)? else {
        return Ok(None);
    };
    let number = match value {
        ParameterValue::Double(x) => Some(x),
        ParameterValue::Int(n) => Some(n as f64),
        _ => None,
    };
    match number.filter(|&x| fits(x)) {
        Some(x) => Ok(Some(x as f32)),
        None => Err(Error::invalid(format!(
            "request parameter {name} = {value} is invalid: expected {expected}"
        ))),
    }
}

/// `detect_every` and `reidentify_every`: sequence models only, 1 to
/// `MAX_CADENCE`.
fn read_cadence(request: &Request, sequence: bool) -> Result<(Option<u32>, Option<u32>)> {
    let why = "frames of the sequence";
    let max = MAX_CADENCE as usize;
    let asked = (
        read_count(request, DETECT_EVERY, max, why)?,
        read_count(request, REIDENTIFY_EVERY, max, why)?,
    );
    let named = [(DETECT_EVERY, asked.0), (REIDENTIFY_EVERY, asked.1)];
    if let Some((name, _)) = named.iter().find(|(_, v)| v.is_some() && !sequence) {
        return Err(Error::invalid(format!(
            "request parameter {name} applies to a sequence model's frames; this model has no \
             sequence batching"
        )));
    }
    Ok((asked.0.map(|n| n as u32), asked.1.map(|n| n as u32)))
}

/// `max_faces`: from 1 to the model's `max_faces_per_image`.
fn read_max_faces(request: &Request, limit: usize) -> Result<Option<usize>> {
    read_count(
        request,
        MAX_FACES,
        limit,
        "this model's max_faces_per_image",
    )
}

/// A request parameter that is an integer from 1 to `max` (`why` says
/// what bounds it).
fn read_count(request: &Request, name: &str, max: usize, why: &str) -> Result<Option<usize>> {
    let Some(value) = request.parameter(name)? else {
        return Ok(None);
    };
    match value {
        ParameterValue::Int(n) if (1..=max as i64).contains(&n) => Ok(Some(n as usize)),
        _ => Err(Error::invalid(format!(
            "request parameter {name} = {value} is invalid: expected an integer from 1 to \
             {max} ({why})"
        ))),
    }
}

/// A request's images: IMAGE's pixels as frames, ENCODED's files as sent
/// (decoded with the whole Execute's: decode.rs).
enum Images<'r> {
    Decoded(Vec<Decoded<'r>>),
    Encoded(Vec<Vec<u8>>),
}

fn read_frames<'r>(
    request: &'r Request,
    settings: &Settings,
    frameless_ok: bool,
) -> Result<Images<'r>> {
    match (request.input(IMAGE)?, request.input(ENCODED)?) {
        (Some(_), Some(_)) => Err(Error::invalid(format!(
            "send either {IMAGE} or {ENCODED} in a request, not both"
        ))),
        (None, None) if frameless_ok => Ok(Images::Decoded(Vec::new())),
        (None, None) => Err(Error::invalid(format!(
            "the request has no image: send {IMAGE} (uint8, height x width x 3) or {ENCODED} \
             (JPEG/PNG/WebP bytes), or {EMBEDDING} to match an embedding"
        ))),
        (Some(input), None) => read_pixels(&input, settings).map(Images::Decoded),
        (None, Some(input)) => read_encoded(&input).map(Images::Encoded),
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
        (None, Some(input)) => match read_flag(&input)? {
            true => Ok(Some(Manage::List {
                changes: read_changes(request)?,
            })),
            false => Ok(None),
        },
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
    let expected = "a positive number (the same-person distance: Euclidean for dlib, 1 - \
                    cosine for onnx)";
    read_number(request, MATCH_THRESHOLD, expected, |x| {
        x.is_finite() && x as f32 > 0.0
    })
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

/// LIST's `changes` (bool) and `changes_limit`: how many recorded changes
/// to answer with, if any.
fn read_changes(request: &Request) -> Result<Option<usize>> {
    let why = "the newest recorded changes LIST answers with";
    let limit = read_count(request, CHANGES_LIMIT, CHANGES_MAX, why)?;
    match read_bool(request, CHANGES)? {
        Some(true) => Ok(Some(limit.unwrap_or(CHANGES_DEFAULT))),
        _ if limit.is_some() => Err(Error::invalid(format!(
            "request parameter {CHANGES_LIMIT} goes with {CHANGES}: true"
        ))),
        _ => Ok(None),
    }
}

/// The request parameter `top_k`: an integer from 1 to `MAX_TOP_K`.
fn read_top_k(request: &Request) -> Result<Option<usize>> {
    read_count(
        request,
        TOP_K,
        MAX_TOP_K,
        "the nearest people listed per face",
    )
}
