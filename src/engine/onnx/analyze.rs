//! A batch of frames through the ONNX engine, stage by stage: all frames
//! through the detector, then (with a landmark model) every face found
//! through it, then every face to embed through the embedder (net.rs runs
//! each model over its items in as few runs as it allows). A frame whose
//! detection, one of whose faces, or whose choice of faces fails gets that
//! error alone; the others go on.

use std::time::{Duration, Instant};

use super::detect::{Five, Found};
use super::OnnxEngine;
use crate::error::{Error, Result};
use crate::pipeline::{Analysis, BoxPx, Face, Frame, OwnedFrame, Stages, Wanted};

/// Stage times by the bench's finer names.
pub type StageTimes = Vec<(&'static str, Duration)>;

impl OnnxEngine {
    /// One result per frame, in order.
    pub(super) fn analyze_frames(
        &self,
        frames: &[(&Frame, Wanted)],
        laps: &mut Laps,
    ) -> Vec<Result<Analysis>> {
        let images: Vec<&Frame> = frames.iter().map(|&(f, _)| f).collect();
        let mut faces: Vec<Result<Vec<Face>>> = (self.detector.detect(&images).into_iter())
            .zip(frames)
            .map(|(found, &(_, wanted))| {
                let kept = wanted.choose(found?, |f| f.bbox)?;
                Ok(kept.into_iter().map(detected).collect())
            })
            .collect();
        laps.lap("detector");
        if self.landmarks.is_some() {
            self.add_landmarks(&images, &mut faces);
            laps.lap("landmarks");
        }
        let chips = self.add_chips(frames, &mut faces);
        // No alignment asked (detect_only): no time for it either.
        if frames.iter().any(|(_, w)| w.embeddings || w.crops) {
            laps.lap("align");
        }
        if !chips.is_empty() {
            self.add_embeddings(&chips, &mut faces);
            laps.lap("embedder");
        }
        let stages = laps.stages();
        faces
            .into_iter()
            .map(|faces| {
                Ok(Analysis {
                    faces: faces?,
                    stages,
                })
            })
            .collect()
    }

    /// Every face of the frames still standing through the landmark model
    /// together (its points replace the detector's); a face that fails
    /// fails its frame.
    fn add_landmarks(&self, images: &[&Frame], faces: &mut [Result<Vec<Face>>]) {
        let owners = faces_of(faces);
        let asked: Vec<(&Frame, BoxPx)> = owners
            .iter()
            .map(|&(i, k)| (images[i], face(faces, i, k).bbox))
            .collect();
        let points: Vec<Result<Five>> = self.points_at(&asked);
        settle(faces, &owners, points, |face, five| face.landmarks = five);
    }

    /// The aligned chip of each face whose frame wants embeddings or crops
    /// (kept as the face's crop when asked); which chips to embed, by owner.
    fn add_chips(
        &self,
        frames: &[(&Frame, Wanted)],
        faces: &mut [Result<Vec<Face>>],
    ) -> Vec<((usize, usize), OwnedFrame)> {
        let mut chips = Vec::new();
        for (i, &(frame, wanted)) in frames.iter().enumerate() {
            if !(wanted.embeddings || wanted.crops) {
                continue;
            }
            let Ok(list) = &mut faces[i] else { continue };
            let made: Result<Vec<OwnedFrame>> = list
                .iter()
                .map(|f| self.embedder.chip(frame, &f.landmarks))
                .collect();
            match made {
                Ok(made) => {
                    for (k, chip) in made.into_iter().enumerate() {
                        if wanted.crops {
                            list[k].crop = Some(chip.clone());
                        }
                        if wanted.embeddings {
                            chips.push(((i, k), chip));
                        }
                    }
                }
                Err(e) => fail(faces, i, e),
            }
        }
        chips
    }

    /// Every chip through the embedder together; a face that fails fails
    /// its frame.
    fn add_embeddings(&self, chips: &[((usize, usize), Frame)], faces: &mut [Result<Vec<Face>>]) {
        let images: Vec<&Frame> = chips.iter().map(|(_, chip)| chip).collect();
        let owners: Vec<(usize, usize)> = chips.iter().map(|&(owner, _)| owner).collect();
        let embeddings = self.embedder.embed(&images);
        settle(faces, &owners, embeddings, |face, e| face.embedding = e);
    }

    /// One frame with the bench's finer stage times.
    pub fn analyze_timed(
        &mut self,
        frame: &Frame,
        max_faces: usize,
    ) -> Result<(Vec<Face>, StageTimes)> {
        let _flush = super::FlushDenormals::new(self.settings.flush_denormals);
        let mut laps = Laps::new();
        let mut done = self.analyze_frames(&[(frame, Wanted::all(max_faces))], &mut laps);
        let analysis = done.pop().expect("one result per frame")?;
        Ok((analysis.faces, laps.times))
    }
}

/// Each stage result given to its face (`owners`: frame, face), with `put`;
/// a frame whose face failed takes that face's error (the first, if
/// several). A result missing for a face fails its frame too.
fn settle<T>(
    faces: &mut [Result<Vec<Face>>],
    owners: &[(usize, usize)],
    results: Vec<Result<T>>,
    put: impl Fn(&mut Face, T),
) {
    if results.len() != owners.len() {
        let why = format!(
            "a stage gave {} results for {} faces",
            results.len(),
            owners.len()
        );
        for &(i, _) in owners {
            fail(faces, i, Error::internal(why.clone()));
        }
        return;
    }
    for (&(i, k), result) in owners.iter().zip(results) {
        match (result, &mut faces[i]) {
            (Ok(value), Ok(list)) => put(&mut list[k], value),
            (Err(e), _) => fail(faces, i, e),
            (Ok(_), Err(_)) => {}
        }
    }
}

/// Frame `i` fails with `e`, unless it failed already.
fn fail(faces: &mut [Result<Vec<Face>>], i: usize, e: Error) {
    if faces[i].is_ok() {
        faces[i] = Err(e);
    }
}

/// (frame, face) of every face of the frames that have not failed.
fn faces_of(faces: &[Result<Vec<Face>>]) -> Vec<(usize, usize)> {
    (faces.iter().enumerate())
        .filter_map(|(i, f)| f.as_ref().ok().map(|list| (i, list.len())))
        .flat_map(|(i, n)| (0..n).map(move |k| (i, k)))
        .collect()
}

fn face(faces: &[Result<Vec<Face>>], i: usize, k: usize) -> &Face {
    &faces[i].as_ref().expect("listed by faces_of")[k]
}

/// A detected face, with the detector's points where it has them.
fn detected(found: Found) -> Face {
    Face {
        bbox: found.bbox,
        score: Some(found.score),
        landmarks: found.points.unwrap_or([[0.0; 2]; 5]),
        embedding: Vec::new(),
        crop: None,
    }
}

/// The time each stage of a batch took: each `lap` adds the time since the
/// last one to the stage it names. Every frame of a batch reports its
/// batch's stage times: what it waited for.
pub(super) struct Laps {
    last: Instant,
    times: StageTimes,
}

impl Laps {
    pub(super) fn new() -> Self {
        Laps {
            last: Instant::now(),
            times: Vec::new(),
        }
    }

    pub(super) fn lap(&mut self, stage: &'static str) {
        let now = Instant::now();
        let spent = now - self.last;
        self.last = now;
        match self.times.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, total)) => *total += spent,
            None => self.times.push((stage, spent)),
        }
    }

    /// The answer's stages: the alignment counts as embedding (it makes the
    /// embedder's input).
    fn stages(&self) -> Stages {
        let sum = |names: &[&str]| -> Duration {
            self.times
                .iter()
                .filter(|(s, _)| names.contains(s))
                .map(|(_, d)| *d)
                .sum()
        };
        Stages {
            detection: sum(&["detector"]),
            landmarks: sum(&["landmarks"]),
            embedding: sum(&["align", "embedder"]),
        }
    }
}
