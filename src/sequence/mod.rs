//! Per-sequence state for stateful models (Triton's sequence batcher): one
//! state per correlation ID, opened by START, dropped at END or when idle too
//! long (Triton sends no signal on its own timeout). Faces are grouped into
//! tracks by embedding (by box overlap with the track's last box for frames
//! sent with `detect_only`, which have none); a track keeps a running
//! centroid and its last box, not every embedding, and the summary keeps at
//! most `max_frames` frames, so memory per sequence is bounded. A sequence
//! whose `Cadence` is not every frame follows its faces between detections
//! (between_detections.rs).

mod between_detections;
mod points_follow;
mod together;

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::metric::Metric;
use crate::pipeline::BoxPx;
use between_detections::Follow;

pub use between_detections::{FollowedFace, FollowedFrame, Source, Work};
pub use together::{follow_together, FollowResult, Stream};

/// A person's name; `None` is a face that matched nobody.
pub type Name = Option<String>;

/// A sequence's correlation ID, as the client sent it (Triton's own, or the
/// CORRID control tensor).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CorrelationId {
    Int(u64),
    Str(String),
}

impl fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorrelationId::Int(n) => write!(f, "{n}"),
            CorrelationId::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// What a sequence saw, for its END answer.
#[derive(Debug)]
pub struct Recap {
    /// Frames seen.
    pub frames: u64,
    /// The faces of the first `max_frames` frames: name and box.
    pub kept: Vec<Vec<(Name, BoxPx)>>,
    pub tracks: Vec<TrackRecap>,
    /// Tracks beyond `max_tracks`, counted only.
    pub unlisted: u64,
}

/// One track: who it most often was, in which frames (the first
/// `max_frames`), and its best distance as a named face.
#[derive(Clone, Debug)]
pub struct TrackRecap {
    pub track: u32,
    pub name: Name,
    pub frames: Vec<u64>,
    pub best_distance: Option<f32>,
}

/// How often a sequence runs the detector and re-embeds a followed face
/// (model parameters `detect_every` and `reidentify_every`, and request
/// parameters of the same names for one sequence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cadence {
    pub detect_every: u32,
    pub reidentify_every: u32,
    /// What carries a face between detections (model parameter `track_by`).
    pub track_by: TrackBy,
}

/// What carries a followed face's box from frame to frame between
/// detections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrackBy {
    /// dlib's correlation tracker (DSST), then the engine's landmarks at
    /// its box.
    Correlation,
    /// The engine's landmarks at the last box, and the box placed around
    /// them as it sat at the face's last detection (points_follow.rs).
    Points,
}

/// The most frames `detect_every` and `reidentify_every` may name.
pub const MAX_CADENCE: u32 = 1000;

impl Cadence {
    /// Detect and embed every face of every frame: no tracker.
    pub const EVERY_FRAME: Cadence = Cadence {
        detect_every: 1,
        reidentify_every: 1,
        track_by: TrackBy::Correlation,
    };

    pub fn every_frame(&self) -> bool {
        (self.detect_every, self.reidentify_every) == (1, 1)
    }

    /// Whether faces are carried between detections by their points.
    pub fn by_points(&self) -> bool {
        self.track_by == TrackBy::Points
    }

    /// This cadence with what a request asks instead.
    pub fn asked(self, detect_every: Option<u32>, reidentify_every: Option<u32>) -> Cadence {
        Cadence {
            detect_every: detect_every.unwrap_or(self.detect_every),
            reidentify_every: reidentify_every.unwrap_or(self.reidentify_every),
            track_by: self.track_by,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub max_sequences: usize,
    pub max_frames: usize,
    pub idle_timeout: Duration,
    /// A track not seen for this many frames is retired: its recap kept
    /// for the summary, its tracker and centroid gone, no face compared
    /// with it again.
    pub retire_after: u64,
    /// Tracks a summary lists (live and retired, in track order); the rest
    /// are counted.
    pub max_tracks: usize,
    /// Detection rounds in a row the detector may miss a face its tracker
    /// still holds (sure enough, in the frame) before its track ends: the
    /// face is answered from the tracker meanwhile (`source` "tracked").
    pub shadow_rounds: u32,
}

/// What the sequence code needs to know about one face of a frame.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    pub embedding: &'a [f32],
    /// Gallery match (None: unknown) and its distance.
    pub name: Option<&'a str>,
    pub distance: Option<f32>,
    pub bbox: BoxPx,
}

struct Track {
    id: u32,
    /// Mean of its embeddings (empty until it has one).
    centroid: Vec<f32>,
    embedded: u32,
    last_box: BoxPx,
    seen: u32,
    /// The last frame it was seen in.
    last_frame: u64,
    votes: HashMap<Name, u32>,
    best_distance: Option<f32>,
    frames: Vec<u64>,
    /// While its face is followed between detections: the tracker.
    follow: Option<Follow>,
    /// Detection rounds in a row that missed its face while the tracker
    /// held it (`Limits::shadow_rounds`).
    missed: u32,
}

struct KeptFrame {
    faces: Vec<(Name, BoxPx)>,
}

pub struct SequenceState {
    /// Set at START, changed by any request that names it.
    pub cadence: Cadence,
    frames: u64,
    /// The size of the last followed frame.
    size: Option<(u32, u32)>,
    /// Live tracks: seen in the last `retire_after` frames.
    tracks: Vec<Track>,
    /// Retired tracks' recaps, up to `max_tracks`, and how many more.
    retired: Vec<TrackRecap>,
    unlisted: u64,
    /// The next track's id (ids are never reused within a sequence).
    next_id: u32,
    kept: Vec<KeptFrame>,
    last_seen: Instant,
    /// The label of the key its START brought (models with keys): its
    /// frames hold that key.
    pub owner: Option<String>,
}

impl Track {
    fn recap(&self) -> TrackRecap {
        TrackRecap {
            track: self.id,
            name: majority(&self.votes),
            frames: self.frames.clone(),
            best_distance: self.best_distance,
        }
    }

    /// One more sighting: running centroid, a vote for its name, the best
    /// distance of a named sighting, the frame (up to the limit).
    fn record(&mut self, face: &Observed<'_>, frame: u64, limits: &Limits) {
        self.sighted(face.bbox, frame, limits);
        self.identified(face);
    }

    /// Seen at `bbox` in `frame`.
    fn sighted(&mut self, bbox: BoxPx, frame: u64, limits: &Limits) {
        self.seen += 1;
        self.last_box = bbox;
        self.last_frame = frame;
        if self.frames.len() < limits.max_frames {
            self.frames.push(frame);
        }
    }

    /// What the gallery said of one of its sightings: running centroid, a
    /// vote for the name, the best distance as a named face. A face without
    /// an embedding (`detect_only`, or carried between embeddings) was not
    /// asked: it does not vote.
    fn identified(&mut self, face: &Observed<'_>) {
        if face.embedding.is_empty() {
            return;
        }
        if self.centroid.len() != face.embedding.len() {
            (self.centroid, self.embedded) = (vec![0.0; face.embedding.len()], 0);
        }
        self.embedded += 1;
        let n = self.embedded as f32;
        for (c, e) in self.centroid.iter_mut().zip(face.embedding) {
            *c += (e - *c) / n;
        }
        *self.votes.entry(face.name.map(str::to_string)).or_default() += 1;
        if face.name.is_some() {
            self.best_distance = match (self.best_distance, face.distance) {
                (Some(b), Some(d)) => Some(b.min(d)),
                (b, d) => b.or(d),
            };
        }
    }
}

/// What a request of several frames may change in its sequence, kept to put
/// back if it fails partway: the tracks as they were (without their
/// trackers; their frame lists, which only grow, by length) and how many
/// frames were counted and kept.
pub(super) struct Before {
    frames: u64,
    tracks: Vec<(Track, usize)>,
    kept: usize,
    next_id: u32,
}

impl SequenceState {
    fn before(&self) -> Before {
        let copy = |t: &Track| Track {
            centroid: t.centroid.clone(),
            votes: t.votes.clone(),
            frames: Vec::new(),
            follow: None,
            ..*t
        };
        Before {
            frames: self.frames,
            tracks: self
                .tracks
                .iter()
                .map(|t| (copy(t), t.frames.len()))
                .collect(),
            kept: self.kept.len(),
            next_id: self.next_id,
        }
    }

    /// Back to `before` (tracks started since are dropped, and no track
    /// keeps a tracker).
    fn restore(&mut self, before: Before) {
        let mut now = std::mem::take(&mut self.tracks).into_iter();
        for (mut track, seen_in) in before.tracks {
            track.frames = now.next().map(|t| t.frames).unwrap_or_default();
            track.frames.truncate(seen_in);
            self.tracks.push(track);
        }
        self.frames = before.frames;
        self.kept.truncate(before.kept);
        self.next_id = before.next_id;
    }

    fn new(now: Instant) -> Self {
        SequenceState {
            cadence: Cadence::EVERY_FRAME,
            frames: 0,
            size: None,
            tracks: Vec::new(),
            retired: Vec::new(),
            unlisted: 0,
            next_id: 0,
            kept: Vec::new(),
            last_seen: now,
            owner: None,
        }
    }

    /// Frames seen so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Record one frame; returns its number (0-based) and each face's track.
    pub fn observe(
        &mut self,
        faces: &[Observed<'_>],
        metric: Metric,
        threshold: f32,
        limits: &Limits,
    ) -> (u64, Vec<u32>) {
        let frame = self.frames;
        self.frames += 1;
        let assigned = self.assign(faces, metric, threshold);
        let ids = faces
            .iter()
            .zip(assigned)
            .map(|(face, track)| {
                let ti = track.unwrap_or_else(|| self.new_track(face.bbox));
                self.tracks[ti].record(face, frame, limits);
                self.tracks[ti].id
            })
            .collect();
        self.keep(
            faces.iter().map(|f| (f.name.map(str::to_string), f.bbox)),
            limits,
        );
        (frame, ids)
    }

    /// The frame's faces for the summary (the first `max_frames` frames).
    fn keep(&mut self, faces: impl Iterator<Item = (Name, BoxPx)>, limits: &Limits) {
        if self.kept.len() < limits.max_frames {
            self.kept.push(KeptFrame {
                faces: faces.collect(),
            });
        }
    }

    /// The existing track of each face, if any: a face joins the nearest
    /// track within `threshold` (a face without an embedding: the track
    /// whose last box it overlaps most, by at least `MIN_OVERLAP`); two
    /// faces of one frame never share a track (closest pairs first).
    fn assign(&self, faces: &[Observed<'_>], metric: Metric, threshold: f32) -> Vec<Option<usize>> {
        let mut pairs: Vec<(f32, usize, usize)> = Vec::new();
        for (fi, face) in faces.iter().enumerate() {
            for (ti, track) in self.tracks.iter().enumerate() {
                if face.embedding.is_empty() {
                    let overlap = overlap(&track.last_box, &face.bbox);
                    if overlap >= MIN_OVERLAP {
                        pairs.push((1.0 - overlap, fi, ti));
                    }
                } else if track.centroid.len() == face.embedding.len() {
                    let d = metric.distance(&track.centroid, face.embedding);
                    if d <= threshold {
                        pairs.push((d, fi, ti));
                    }
                }
            }
        }
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut face_track: Vec<Option<usize>> = vec![None; faces.len()];
        let mut taken = vec![false; self.tracks.len()];
        for (_, fi, ti) in pairs {
            if face_track[fi].is_none() && !taken[ti] {
                face_track[fi] = Some(ti);
                taken[ti] = true;
            }
        }
        face_track
    }

    fn new_track(&mut self, bbox: BoxPx) -> usize {
        self.next_id += 1;
        self.tracks.push(Track {
            id: self.next_id - 1,
            centroid: Vec::new(),
            embedded: 0,
            last_box: bbox,
            seen: 0,
            last_frame: 0,
            votes: HashMap::new(),
            best_distance: None,
            frames: Vec::new(),
            follow: None,
            missed: 0,
        });
        self.tracks.len() - 1
    }

    pub fn recap(&self, limits: &Limits) -> Recap {
        let mut tracks = self.retired.clone();
        tracks.extend(self.tracks.iter().map(Track::recap));
        tracks.sort_by_key(|t| t.track);
        let over = tracks.len().saturating_sub(limits.max_tracks);
        tracks.truncate(limits.max_tracks);
        Recap {
            frames: self.frames,
            kept: self.kept.iter().map(|k| k.faces.clone()).collect(),
            tracks,
            unlisted: self.unlisted + over as u64,
        }
    }

    /// Retire the tracks not seen for `retire_after` frames: their recaps
    /// kept for the summary (up to `max_tracks`, the rest counted), the
    /// rest of them dropped. Called between requests, never inside one
    /// (tracks are named by position within a request).
    pub fn retire(&mut self, limits: &Limits) {
        let now = self.frames;
        let gone = |t: &Track| now.saturating_sub(t.last_frame) > limits.retire_after;
        if !self.tracks.iter().any(gone) {
            return;
        }
        let (old, live): (Vec<Track>, Vec<Track>) =
            std::mem::take(&mut self.tracks).into_iter().partition(gone);
        self.tracks = live;
        for track in old {
            match self.retired.len() < limits.max_tracks {
                true => self.retired.push(track.recap()),
                false => self.unlisted += 1,
            }
        }
    }

    /// Live tracks (bounded by what `retire_after` frames can show).
    pub fn live_tracks(&self) -> usize {
        self.tracks.len()
    }

    /// Everything it holds of people `knows` no longer knows (forgotten,
    /// expired): their votes; the best distance, embedding mean and last
    /// embedding of each track that voted for them (the face is embedded
    /// again at its next frame, and answered as the gallery now says);
    /// their names in kept frames and retired tracks' recaps (unknown, no
    /// distance). Returns whether anything went.
    pub fn scrub(&mut self, knows: &dyn Fn(&str) -> bool) -> bool {
        let gone = |name: &Name| name.as_deref().is_some_and(|n| !knows(n));
        let mut any = false;
        for track in &mut self.tracks {
            let before = track.votes.len();
            track.votes.retain(|name, _| !gone(name));
            if track.votes.len() < before {
                track.best_distance = None;
                (track.centroid, track.embedded) = (Vec::new(), 0);
                if let Some(follow) = &mut track.follow {
                    follow.forget_embedding();
                }
                any = true;
            }
        }
        for recap in &mut self.retired {
            if gone(&recap.name) {
                (recap.name, recap.best_distance) = (None, None);
                any = true;
            }
        }
        for (name, _) in self.kept.iter_mut().flat_map(|k| k.faces.iter_mut()) {
            if gone(name) {
                *name = None;
                any = true;
            }
        }
        any
    }
}

/// Intersection over union of two boxes (0 when either is empty).
fn overlap(a: &BoxPx, b: &BoxPx) -> f32 {
    let w = (a.right.min(b.right) - a.left.max(b.left)).max(0.0);
    let h = (a.bottom.min(b.bottom) - a.top.max(b.top)).max(0.0);
    let both = w * h;
    let union = a.area() + b.area() - both;
    if union > 0.0 {
        both / union
    } else {
        0.0
    }
}

/// A face without an embedding continues a track whose last box it
/// overlaps at least this much (intersection over union).
const MIN_OVERLAP: f32 = 0.3;

/// The most frequent name; ties go to a known name, then alphabetical order.
fn majority(votes: &HashMap<Name, u32>) -> Name {
    votes
        .iter()
        .max_by(|a, b| {
            a.1.cmp(b.1)
                .then_with(|| a.0.is_some().cmp(&b.0.is_some()))
                .then_with(|| b.0.cmp(a.0))
        })
        .and_then(|(n, _)| n.clone())
}

/// All live sequences of a model.
pub struct Sequences {
    live: HashMap<CorrelationId, SequenceState>,
    /// States taken out while their frame is followed (`take`), counted
    /// against `max_sequences`.
    away: usize,
    limits: Limits,
    /// The gallery's removal count the live states were last scrubbed at.
    scrubbed_at: u64,
}

impl Sequences {
    pub fn new(limits: Limits) -> Self {
        Sequences {
            live: HashMap::new(),
            away: 0,
            limits,
            scrubbed_at: 0,
        }
    }

    /// Every live state scrubbed of people `knows` no longer knows, when
    /// `removals` (a count that grows whenever the gallery loses an entry)
    /// moved since the last time; how many states held any.
    pub fn scrub(&mut self, removals: u64, knows: &dyn Fn(&str) -> bool) -> usize {
        if removals == self.scrubbed_at {
            return 0;
        }
        self.scrubbed_at = removals;
        let scrubbed = self.live.values_mut().map(|s| s.scrub(knows));
        scrubbed.filter(|&any| any).count()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Drop sequences idle longer than the timeout; returns how many.
    pub fn evict_idle(&mut self, now: Instant) -> usize {
        let timeout = self.limits.idle_timeout;
        let before = self.live.len();
        self.live
            .retain(|_, s| now.saturating_duration_since(s.last_seen) <= timeout);
        before - self.live.len()
    }

    /// Open (or restart) the state of `id`.
    pub fn start(&mut self, id: &CorrelationId, now: Instant) -> Result<&mut SequenceState> {
        let full = |s: &Self| s.live.len() + s.away >= s.limits.max_sequences;
        if !self.live.contains_key(id) && full(self) {
            self.evict_idle(now);
            if full(self) {
                return Err(Error::unavailable(format!(
                    "cannot start sequence {id}: {} sequences are live, the limit is max_sequences = {}",
                    self.live.len(),
                    self.limits.max_sequences
                )));
            }
        }
        self.live.insert(id.clone(), SequenceState::new(now));
        Ok(self.live.get_mut(id).expect("just inserted"))
    }

    /// The live state of `id`, touched as used now.
    pub fn get(&mut self, id: &CorrelationId, now: Instant) -> Result<&mut SequenceState> {
        let state = self.live.get_mut(id).ok_or_else(|| {
            Error::invalid(format!(
                "sequence {id} has no live state: start it with START (it may have ended or been \
                 evicted after being idle longer than max_sequence_idle_microseconds)"
            ))
        })?;
        state.last_seen = now;
        Ok(state)
    }

    /// The cadence of `id`'s live state, if it has one.
    pub fn cadence_of(&self, id: &CorrelationId) -> Option<Cadence> {
        self.live.get(id).map(|s| s.cadence)
    }

    /// The label of the key `id`'s START brought, if it is live.
    pub fn owner_of(&self, id: &CorrelationId) -> Option<&str> {
        self.live.get(id)?.owner.as_deref()
    }

    /// Close `id`, returning its state.
    pub fn end(&mut self, id: &CorrelationId) -> Option<SequenceState> {
        self.live.remove(id)
    }

    /// Take the live state of `id` out to work on it without this lock
    /// (its sequence's frames come one at a time); `put_back` returns it.
    pub fn take(&mut self, id: &CorrelationId, now: Instant) -> Result<SequenceState> {
        self.get(id, now)?;
        self.away += 1;
        Ok(self.live.remove(id).expect("checked by get"))
    }

    /// Return a state from `take` (dropped instead when its sequence ended).
    pub fn put_back(&mut self, id: &CorrelationId, state: Option<SequenceState>) {
        self.away = self.away.saturating_sub(1);
        if let Some(state) = state {
            self.live.insert(id.clone(), state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_sequences: 2,
        max_frames: 3,
        idle_timeout: Duration::from_secs(10),
        retire_after: 300,
        max_tracks: 1000,
        shadow_rounds: 2,
    };

    fn bx() -> BoxPx {
        BoxPx {
            left: 1.0,
            top: 2.0,
            right: 3.0,
            bottom: 4.0,
        }
    }

    fn face<'a>(e: &'a [f32], name: Option<&'a str>) -> Observed<'a> {
        Observed {
            embedding: e,
            name,
            distance: name.map(|_| 0.3),
            bbox: bx(),
        }
    }

    #[test]
    fn tracks_follow_faces_and_never_share_a_frame() {
        let mut s = SequenceState::new(Instant::now());
        let (a, b) = ([0.0, 0.0], [5.0, 0.0]);
        let (f0, t0) = s.observe(&[face(&a, Some("obama"))], Metric::Euclidean, 0.6, &LIMITS);
        assert_eq!((f0, t0), (0, vec![0]));
        let (_, t1) = s.observe(
            &[face(&b, Some("biden")), face(&[0.1, 0.0], None)],
            Metric::Euclidean,
            0.6,
            &LIMITS,
        );
        assert_eq!(t1, vec![1, 0]);
        // Two faces both near track 0: only the closer joins it.
        let (_, t2) = s.observe(
            &[face(&[0.3, 0.0], None), face(&[0.05, 0.0], Some("obama"))],
            Metric::Euclidean,
            0.6,
            &LIMITS,
        );
        assert_eq!(t2, vec![2, 0]);
        let sum = s.recap(&LIMITS);
        assert_eq!(sum.frames, 3);
        assert_eq!(sum.kept.len(), 3);
        assert_eq!(sum.kept[1].len(), 2);
        assert_eq!(sum.tracks[0].name.as_deref(), Some("obama")); // 2 obama votes, 1 unknown
        assert_eq!(sum.tracks[0].frames, vec![0, 1, 2]);
        assert_eq!(sum.tracks[1].name.as_deref(), Some("biden"));
        assert_eq!(sum.tracks[2].name, None);
        assert_eq!(sum.tracks[2].best_distance, None);
    }

    #[test]
    fn faces_without_embeddings_follow_their_box() {
        let mut s = SequenceState::new(Instant::now());
        let at = |left: f32| Observed {
            embedding: &[],
            name: None,
            distance: None,
            bbox: BoxPx {
                left,
                top: 0.0,
                right: left + 10.0,
                bottom: 10.0,
            },
        };
        let (_, t0) = s.observe(&[at(0.0), at(50.0)], Metric::Cosine, 0.5, &LIMITS);
        assert_eq!(t0, vec![0, 1]);
        // Both moved a little; a third face appears far from both.
        let (_, t1) = s.observe(
            &[at(52.0), at(2.0), at(100.0)],
            Metric::Cosine,
            0.5,
            &LIMITS,
        );
        assert_eq!(t1, vec![1, 0, 2]);
        // A face with an embedding later starts the track's centroid.
        let e = [1.0, 0.0];
        let with = Observed {
            embedding: &e,
            ..at(2.0)
        };
        let (_, t2) = s.observe(&[with], Metric::Cosine, 0.5, &LIMITS);
        assert_eq!(t2, vec![3], "no centroid yet to compare with");
        let (_, t3) = s.observe(&[face(&[0.9, 0.1], None)], Metric::Cosine, 0.5, &LIMITS);
        assert_eq!(t3, vec![3]);
    }

    #[test]
    fn summary_is_capped() {
        let mut s = SequenceState::new(Instant::now());
        for _ in 0..10 {
            s.observe(&[face(&[0.0], None)], Metric::Euclidean, 0.6, &LIMITS);
        }
        let sum = s.recap(&LIMITS);
        assert_eq!(sum.frames, 10);
        assert_eq!(sum.kept.len(), 3);
        assert_eq!(sum.tracks[0].frames.len(), 3);
    }

    /// A camera that never stops: 100,000 frames, two people in view at a
    /// time, each for 20 frames, never seen again (5,001 people). The live
    /// tracks (what each frame's faces are compared with), the retired
    /// recaps and the kept frames stay bounded; the summary lists
    /// `max_tracks` and counts the rest.
    #[test]
    fn a_stream_that_never_ends_keeps_its_state_bounded() {
        let limits = Limits {
            max_frames: 50,
            retire_after: 30,
            max_tracks: 100,
            ..LIMITS
        };
        let mut s = SequenceState::new(Instant::now());
        let mut most_live = 0;
        let name = Some("passer-by");
        for f in 0..100_000u32 {
            s.retire(&limits); // between requests
            let p = (f / 20) as f32;
            let (a, b) = ([p, 0.0], [p + 1.0, 5.0]);
            s.observe(
                &[face(&a, name), face(&b, name)],
                Metric::Euclidean,
                0.6,
                &limits,
            );
            most_live = most_live.max(s.live_tracks());
            assert!(s.retired.len() <= limits.max_tracks && s.kept.len() <= limits.max_frames);
        }
        assert!(most_live <= 6, "live tracks: {most_live}");
        let recap = s.recap(&limits);
        assert_eq!(recap.frames, 100_000);
        assert_eq!(recap.tracks.len(), limits.max_tracks);
        let tracks = u64::from(s.next_id);
        assert!(tracks > 5_000, "a track per person and side: {tracks}");
        assert_eq!(recap.unlisted, tracks - limits.max_tracks as u64);
        assert!(recap
            .tracks
            .iter()
            .all(|t| t.frames.len() <= limits.max_frames));
        assert_eq!(recap.tracks[0].frames[..3], [0, 1, 2]);
    }

    #[test]
    fn a_forgotten_person_leaves_votes_means_kept_frames_and_recaps() {
        let mut seqs = Sequences::new(LIMITS);
        let id = CorrelationId::Int(7);
        let s = seqs.start(&id, Instant::now()).unwrap();
        let (a, b) = ([0.0, 0.0], [5.0, 0.0]);
        s.observe(
            &[face(&a, Some("obama")), face(&b, Some("biden"))],
            Metric::Euclidean,
            0.6,
            &LIMITS,
        );
        s.observe(&[face(&a, Some("obama"))], Metric::Euclidean, 0.6, &LIMITS);
        let knows = |n: &str| n != "obama";
        assert_eq!(seqs.scrub(0, &knows), 0, "nothing removed since");
        assert_eq!(seqs.scrub(3, &knows), 1);
        assert_eq!(seqs.scrub(3, &|_| false), 0, "scrubbed at 3 already");
        let s = seqs.get(&id, Instant::now()).unwrap();
        let sum = s.recap(&LIMITS);
        assert_eq!(
            (sum.tracks[0].name.clone(), sum.tracks[0].best_distance),
            (None, None)
        );
        assert_eq!(sum.tracks[1].name.as_deref(), Some("biden"));
        let names: Vec<Name> = sum.kept.iter().flatten().map(|(n, _)| n.clone()).collect();
        assert_eq!(names, [None, Some("biden".into()), None]);
        assert!(s.tracks[0].centroid.is_empty() && s.tracks[0].votes.is_empty());
        assert_eq!(s.tracks[1].centroid, b);
        // The face comes back: a new track, named as the gallery now says.
        let (_, t) = s.observe(&[face(&a, None)], Metric::Euclidean, 0.6, &LIMITS);
        assert_eq!(t, vec![2]);
    }

    #[test]
    fn a_track_away_shorter_than_retire_after_continues() {
        let limits = Limits {
            retire_after: 30,
            ..LIMITS
        };
        let mut s = SequenceState::new(Instant::now());
        let (obama, other) = ([0.0], [10.0]);
        for f in 0..100 {
            s.retire(&limits);
            // obama leaves the view for 25 frames at frame 10.
            let faces = match (10..35).contains(&f) {
                true => vec![face(&other, None)],
                false => vec![face(&obama, Some("obama")), face(&other, None)],
            };
            s.observe(&faces, Metric::Euclidean, 0.6, &limits);
        }
        let recap = s.recap(&limits);
        assert_eq!(
            recap.tracks.len(),
            2,
            "obama's track went on after 25 frames away"
        );
        assert_eq!(recap.tracks[0].name.as_deref(), Some("obama"));
        // Away for longer: retired, and a new track when back.
        for _ in 0..40 {
            s.retire(&limits);
            s.observe(&[face(&other, None)], Metric::Euclidean, 0.6, &limits);
        }
        s.retire(&limits);
        let (_, ids) = s.observe(
            &[face(&obama, Some("obama"))],
            Metric::Euclidean,
            0.6,
            &limits,
        );
        assert_eq!(ids, vec![2], "a new track");
        assert_eq!(s.recap(&limits).tracks.len(), 3);
    }

    #[test]
    fn majority_prefers_known_on_ties() {
        let obama = Some("obama".to_string());
        let votes = HashMap::from([(None, 2), (obama.clone(), 2)]);
        assert_eq!(majority(&votes), obama);
        let votes = HashMap::from([(None, 3), (obama, 2)]);
        assert_eq!(majority(&votes), None);
    }

    #[test]
    fn a_state_taken_out_still_counts_until_put_back_or_ended() {
        let t0 = Instant::now();
        let mut seqs = Sequences::new(LIMITS);
        let (a, b, c) = (
            CorrelationId::Int(1),
            CorrelationId::Int(2),
            CorrelationId::Int(3),
        );
        seqs.start(&a, t0).unwrap();
        seqs.start(&b, t0).unwrap();
        let state = seqs.take(&a, t0).unwrap();
        assert!(seqs.start(&c, t0).is_err(), "a is away, not gone");
        assert!(seqs.get(&a, t0).is_err(), "a is being worked on");
        seqs.put_back(&a, Some(state));
        assert!(seqs.get(&a, t0).is_ok());
        seqs.take(&a, t0).unwrap();
        seqs.put_back(&a, None); // its END came with the frame
        seqs.start(&c, t0).unwrap();
        assert!(seqs.get(&a, t0).is_err());
    }

    #[test]
    fn lifecycle_limits_and_eviction() {
        let t0 = Instant::now();
        let mut seqs = Sequences::new(LIMITS);
        let (a, b, c) = (
            CorrelationId::Int(1),
            CorrelationId::Str("cam-2".into()),
            CorrelationId::Int(3),
        );
        let e = seqs.get(&a, t0).err().unwrap();
        assert!(e.message().contains("sequence 1"));
        seqs.start(&a, t0).unwrap();
        seqs.start(&b, t0).unwrap();
        let e = seqs.start(&c, t0).err().unwrap();
        assert_eq!(e.kind(), crate::error::ErrorKind::Unavailable);
        // Restarting a live ID is allowed at the limit and resets it.
        seqs.get(&a, t0)
            .unwrap()
            .observe(&[], Metric::Euclidean, 0.6, &LIMITS);
        assert_eq!(seqs.start(&a, t0).unwrap().frames(), 0);
        // Idle ones are evicted to make room.
        let later = t0 + Duration::from_secs(11);
        seqs.get(&b, later).unwrap();
        seqs.start(&c, later).unwrap();
        assert!(seqs.get(&a, later).is_err());
        assert!(seqs.end(&b).is_some());
        assert!(seqs.end(&b).is_none());
        assert_eq!(seqs.evict_idle(later + Duration::from_secs(11)), 1);
        assert!(seqs.is_empty());
    }
}
