//! Following faces between detections: a sequence runs the detector on every
//! `detect_every`-th frame and, on the frames between, carries each track's
//! box forward with a visual tracker (engine::tracker). A detection frame
//! re-anchors the tracks by overlap, starts new ones and ends those whose face
//! is gone; a face the detector misses while its tracker still holds it is
//! answered from the tracker for up to `shadow_rounds` detections. A face is embedded and matched only when that tells something new
//! (its track is new or unsettled, its box changed size, it touches another
//! face, or `reidentify_every` frames passed); otherwise it carries its
//! track's name and last distance. Names come from the track's votes, so they
//! do not flicker.

use std::time::{Duration, Instant};

use crate::engine::tracker::{BoxTracker, TrackFrame, LOST_BELOW};
use crate::error::{Error, Result};
use crate::gallery::Match;
use crate::metric::{rounded, Metric};
use crate::pipeline::{BoxPx, Face, Frame, Stages, Wanted};

use super::points_follow::Points;
use super::{majority, overlap, Before, Limits, Observed, SequenceState, Track, MIN_OVERLAP};

/// How a face of a followed frame was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Detected,
    Tracked,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Detected => "detected",
            Source::Tracked => "tracked",
        }
    }
}

/// One face of a followed frame, as answered.
pub struct FollowedFace {
    pub face: Face,
    pub source: Source,
    /// Embedded and matched in this frame (else carried from its track).
    pub embedded: bool,
    /// The track's name; the distance of this frame's match, or the track's
    /// last; candidates only when embedded.
    pub matched: Match,
    pub track: u32,
}

/// One followed frame: its number in the sequence, its faces in answer
/// order, and the time each stage took (matching with recording).
pub struct FollowedFrame {
    pub number: u64,
    pub faces: Vec<FollowedFace>,
    pub stages: Stages,
    pub matching: Duration,
}

/// What following one frame needs from outside the sequence, but the
/// engine (together.rs gives it, shared by the sequences of an Execute).
pub struct Work<'a> {
    /// What the request asks of each detection (embeddings are decided here).
    pub wanted: Wanted,
    /// The gallery's answer for one embedding.
    pub matcher: &'a dyn Fn(&[f32]) -> Result<Match>,
    pub metric: Metric,
    pub threshold: f32,
    /// For a key without `search`: the decimals its answers show distances
    /// to, which every decision an answer reveals is taken at.
    pub decimals: Option<u32>,
    pub limits: Limits,
}

/// A followed track's tracker and what its last embedding saw.
pub(super) struct Follow {
    /// None when every frame is detected: a detection re-finds the face by
    /// its last box, and no tracker is paid for; and when its points carry
    /// it (`track_by: points`).
    tracker: Option<BoxTracker>,
    /// `track_by: points`: what carries it.
    points: Option<Points>,
    /// Box and frame of its last embedding (`None`: not embedded yet).
    embedded: Option<(BoxPx, u64)>,
    /// The gallery's distance at its last embedding.
    distance: Option<f32>,
}

impl Follow {
    /// Its last embedding forgotten: the face is embedded again at its next
    /// frame.
    pub(super) fn forget_embedding(&mut self) {
        (self.embedded, self.distance) = (None, None);
    }
}

/// A box whose area changed by more than this factor since its last
/// embedding is embedded again (the face turned, came closer or went away).
const AREA_CHANGE: f32 = 1.44;

/// `track_by: points`: pixels from the frame's edge within which a box may
/// hold a partial face.
const EDGE: f32 = 2.0;

/// A track whose leading name holds less than this share of its votes, or
/// whose last distance is within this share of the threshold, is unsettled.
const SETTLED_SHARE: f32 = 0.75;
const NEAR_THRESHOLD: f32 = 0.1;

/// What a followed frame asks of the engine first: a detection (landmarks,
/// no embeddings), or the landmarks at its trackers' boxes.
pub enum Ask {
    Detect(Wanted),
    Landmarks(Vec<BoxPx>),
}

/// A followed frame between its engine calls (`begin`, `found`, `finish`).
pub struct Pending {
    image: Option<TrackFrame>,
    detect: bool,
    started: Instant,
    stages: Stages,
    /// Detection frames: each followed track's carried box; others: the
    /// tracks their trackers still hold, with their boxes.
    carried: Vec<(usize, BoxPx, f32)>,
    held: Vec<(usize, BoxPx)>,
    /// Detection frames: tracks the detector missed that their trackers
    /// still hold, with their boxes (their landmarks are asked next).
    shadows: Vec<(usize, BoxPx)>,
    faces: Vec<Face>,
    sources: Vec<Source>,
    track_of: Vec<Option<usize>>,
    due: Vec<bool>,
}

impl Pending {
    /// The frame's faces, once found.
    pub(super) fn faces(&self) -> &[Face] {
        &self.faces
    }

    /// The boxes of the tracks the detector missed and their trackers still
    /// hold: the engine's landmarks at them are asked before the embeddings.
    pub(super) fn shadow_boxes(&self) -> Vec<BoxPx> {
        self.shadows.iter().map(|&(_, b)| b).collect()
    }

    /// Whether the detector missed faces that trackers still hold.
    pub(super) fn has_shadows(&self) -> bool {
        !self.shadows.is_empty()
    }
}

impl SequenceState {
    /// A request's state to go back to if one of its frames fails: only a
    /// request of several frames keeps one.
    pub(super) fn before_request(&self, frames: usize) -> Option<Before> {
        (frames > 1).then(|| self.before())
    }

    /// A frame of the request failed: the sequence is left as it was before
    /// its first (its trackers aside: none is kept, the next frame detects
    /// afresh).
    pub(super) fn undo(&mut self, before: Option<Before>) {
        self.tracks.iter_mut().for_each(|t| t.follow = None);
        self.size = None;
        if let Some(before) = before {
            self.restore(before);
        }
    }

    /// A frame up to its first engine call: the trackers carried, and
    /// whether it is detected.
    pub(super) fn begin(&mut self, frame: &Frame, work: &Work<'_>) -> Result<(Pending, Ask)> {
        let started = Instant::now();
        // Every frame detected, or faces carried by their points: no
        // correlation tracker.
        let image = if self.cadence.detect_every == 1 || self.cadence.by_points() {
            None
        } else {
            Some(TrackFrame::new(frame)?)
        };
        // A frame of another size is another camera or a photo: no box
        // carries over; its faces are detected and found by embedding.
        let size = Some((frame.width, frame.height));
        if self.size != size {
            self.tracks.iter_mut().for_each(|t| t.follow = None);
        }
        // A followed face without a tracker (every frame was detected until
        // now, or its box could not be tracked) is found by a detection.
        let untracked = image.is_some()
            && (self.tracks.iter()).any(|t| t.follow.as_ref().is_some_and(|f| f.tracker.is_none()));
        let carried = self.carry(image.as_ref());
        let resized = self.size != size;
        self.size = size;
        // A face its tracker lost (turned, grew, blurred) is looked for by
        // the detector at once, not left unanswered until the next round.
        let lost = !resized && carried.iter().any(|(_, b, c)| !self.holds(b, *c));
        // Faces carried by their points: every one keeps this frame's look
        // (`|`, not `||`), whether the frame is detected or not.
        let by_points = self.cadence.by_points() && !resized;
        let unsure = by_points && (!self.alike(frame, &carried) | self.unsure(&carried));
        let detect = self
            .frames
            .is_multiple_of(u64::from(self.cadence.detect_every))
            || resized
            || untracked
            || lost
            || unsure;
        let mut pending = Pending {
            image,
            detect,
            started,
            stages: Stages::default(),
            carried,
            held: Vec::new(),
            shadows: Vec::new(),
            faces: Vec::new(),
            sources: Vec::new(),
            track_of: Vec::new(),
            due: Vec::new(),
        };
        let ask = match detect {
            true => Ask::Detect(Wanted {
                embeddings: false,
                crops: false,
                ..work.wanted
            }),
            false => {
                let held = self.held(std::mem::take(&mut pending.carried));
                pending.held = self.as_wanted(held, 0, &work.wanted);
                Ask::Landmarks(pending.held.iter().map(|&(_, b)| b).collect())
            }
        };
        Ok((pending, ask))
    }

    /// The engine's faces for the frame: each joined to its track, and which
    /// of them are embedded (their indices).
    pub(super) fn found(
        &mut self,
        pending: &mut Pending,
        faces: Vec<Face>,
        work: &Work<'_>,
    ) -> Vec<usize> {
        let n = self.frames;
        let carried = std::mem::take(&mut pending.carried);
        (pending.track_of, pending.shadows) = match pending.detect {
            true => self.detected(&faces, carried, work),
            false => (
                pending.held.iter().map(|&(t, _)| Some(t)).collect(),
                Vec::new(),
            ),
        };
        let source = match pending.detect {
            true => Source::Detected,
            false => Source::Tracked,
        };
        let mut faces = faces;
        if !pending.detect && self.cadence.by_points() {
            self.place_by_points(&mut faces, &pending.track_of);
        }
        pending.sources = vec![source; faces.len()];
        // Detection frames: the detector and the trackers' re-anchoring;
        // others: the trackers and the landmarks at their boxes.
        match pending.detect {
            true => pending.stages.detection = pending.started.elapsed(),
            false => pending.stages.landmarks = pending.started.elapsed(),
        }
        pending.started = Instant::now();
        let track_of = &pending.track_of;
        // Points found at a box the face has moved from may align its chip
        // badly: a face carried by its points is embedded at detections.
        let carried_by_points = !pending.detect && self.cadence.by_points();
        pending.due = (0..faces.len())
            .map(|i| {
                if carried_by_points {
                    return false;
                }
                let touching = faces
                    .iter()
                    .enumerate()
                    .any(|(j, o)| j != i && overlap(&o.bbox, &faces[i].bbox) > 0.0);
                touching || track_of[i].is_none_or(|t| self.due(t, &faces[i].bbox, n, work))
            })
            .collect();
        pending.faces = faces;
        (pending.due.iter().enumerate())
            .filter(|(_, d)| **d)
            .map(|(i, _)| i)
            .collect()
    }

    /// The faces of the tracks the detector missed (the engine's landmarks
    /// at their trackers' boxes, in `shadow_boxes` order): answered as
    /// tracked, with their tracks' names, not embedded.
    pub(super) fn shadowed(&mut self, pending: &mut Pending, faces: Vec<Face>) {
        for ((t, _), face) in pending.shadows.drain(..).zip(faces) {
            pending.faces.push(face);
            pending.sources.push(Source::Tracked);
            pending.track_of.push(Some(t));
            pending.due.push(false);
        }
    }

    /// The frame with the embeddings of its chosen faces: matched, answered
    /// and recorded (or, when the gallery fails, nothing recorded).
    pub(super) fn finish(
        &mut self,
        mut pending: Pending,
        embeddings: Vec<Vec<f32>>,
        work: &Work<'_>,
    ) -> Result<FollowedFrame> {
        let n = self.frames;
        let mut embeddings = embeddings.into_iter();
        let chosen = (pending.faces.iter_mut())
            .zip(&pending.due)
            .filter(|(_, d)| **d);
        for (face, _) in chosen {
            face.embedding = embeddings
                .next()
                .ok_or_else(|| Error::internal("one embedding per face"))?;
        }
        pending.stages.embedding = pending.started.elapsed();
        let started = Instant::now();
        // The gallery's answers first: from here on nothing fails, and the
        // frame is recorded whole or not at all.
        let matches = (pending.faces.iter())
            .map(|f| match f.embedding.is_empty() {
                true => Ok(None),
                false => (work.matcher)(&f.embedding).map(Some),
            })
            .collect::<Result<Vec<_>>>()?;
        // Tracks continued by a face of this frame: no other face rejoins them.
        let claimed: Vec<usize> = pending.track_of.iter().flatten().copied().collect();
        let image = pending.image.as_ref();
        let mut answered = Vec::with_capacity(pending.faces.len());
        let faces = std::mem::take(&mut pending.faces).into_iter().zip(matches);
        let of = pending.track_of.into_iter().zip(pending.sources);
        for (found, (continued, source)) in faces.zip(of) {
            answered.push(self.answer(image, found, continued, &claimed, source, work));
        }
        self.keep(
            answered
                .iter()
                .map(|f| (f.matched.name.clone(), f.face.bbox)),
            &work.limits,
        );
        self.frames += 1;
        Ok(FollowedFrame {
            number: n,
            faces: answered,
            stages: pending.stages,
            matching: started.elapsed(),
        })
    }

    /// Each followed track's box in this frame, by its tracker (its last
    /// box where it has none; a tracker that fails lets its track go).
    fn carry(&mut self, image: Option<&TrackFrame>) -> Vec<(usize, BoxPx, f32)> {
        let mut carried = Vec::new();
        for (t, track) in self.tracks.iter_mut().enumerate() {
            let Some(follow) = track.follow.as_mut() else {
                continue;
            };
            match (follow.tracker.as_mut(), image) {
                (Some(tracker), Some(image)) => match tracker.update(image) {
                    Ok((bbox, confidence)) => carried.push((t, bbox, confidence)),
                    Err(_) => track.follow = None,
                },
                _ => {
                    // Points carry a face on at its speed; otherwise it
                    // has none (`points` is None) and stays put.
                    let v = follow.points.as_ref().map_or([0.0; 2], |p| p.velocity);
                    carried.push((t, track.last_box.shifted(v), f32::INFINITY))
                }
            }
        }
        carried
    }

    /// A detection frame's faces, each with the track whose carried box it
    /// overlaps most. A track no face overlaps is shadowed (second, with its
    /// box) while its tracker holds its face, it missed fewer than
    /// `shadow_rounds` detections in a row and the request wants its box
    /// (`as_wanted`); the others end.
    fn detected(
        &mut self,
        faces: &[Face],
        carried: Vec<(usize, BoxPx, f32)>,
        work: &Work<'_>,
    ) -> (Vec<Option<usize>>, Vec<(usize, BoxPx)>) {
        let mut pairs: Vec<(f32, usize, usize)> = Vec::new();
        for (f, face) in faces.iter().enumerate() {
            for &(t, bbox, _) in &carried {
                let o = overlap(&face.bbox, &bbox);
                if o >= MIN_OVERLAP {
                    pairs.push((o, f, t));
                }
            }
        }
        pairs.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut track_of = vec![None; faces.len()];
        let mut kept = vec![false; self.tracks.len()];
        for (_, f, t) in pairs {
            if track_of[f].is_none() && !kept[t] {
                (track_of[f], kept[t]) = (Some(t), true);
            }
        }
        // The unkept (a kept track's shadow rounds start afresh in `answer`).
        let mut shadows = Vec::new();
        for (t, bbox, confidence) in carried.into_iter().filter(|&(t, ..)| !kept[t]) {
            let holds = self.holds(&bbox, confidence);
            let track = &mut self.tracks[t];
            let tracked = track.follow.as_ref().is_some_and(|f| f.tracker.is_some());
            if tracked && holds && track.missed < work.limits.shadow_rounds {
                track.missed += 1;
                shadows.push((t, bbox));
            } else {
                track.follow = None;
            }
        }
        let shadows = self.as_wanted(shadows, faces.len(), &work.wanted);
        (track_of, shadows)
    }

    /// Of the tracked `boxes`, those the request wants beside `detected`
    /// faces: large enough (`min_face_size`), and the largest while there is
    /// room (`max_faces`, else `max_faces_per_image`); largest first with
    /// `max_faces`, as a detection answers, else in their order. The other
    /// tracks let go, their faces dropped as the detector drops them.
    fn as_wanted(
        &mut self,
        boxes: Vec<(usize, BoxPx)>,
        detected: usize,
        wanted: &Wanted,
    ) -> Vec<(usize, BoxPx)> {
        let room = wanted.max_faces.unwrap_or(wanted.limit);
        let room = Wanted {
            max_faces: Some(room.saturating_sub(detected)),
            ..*wanted
        };
        // With `max_faces` set, `choose` keeps the largest, largest first,
        // and cannot fail.
        let mut chosen = room
            .choose((0..boxes.len()).collect(), |&i| boxes[i].1)
            .unwrap_or_default();
        if wanted.max_faces.is_none() {
            chosen.sort_unstable();
        }
        let mut left: Vec<Option<(usize, BoxPx)>> = boxes.into_iter().map(Some).collect();
        let kept = chosen.iter().filter_map(|&i| left[i].take()).collect();
        for (t, _) in left.into_iter().flatten() {
            self.tracks[t].follow = None;
        }
        kept
    }

    /// `track_by: points`: each tracked face's box placed around the points
    /// the engine found at its last box, as its track's box sat around its
    /// points at detection; a face whose points place none keeps its box.
    fn place_by_points(&self, faces: &mut [Face], track_of: &[Option<usize>]) {
        let Some(size) = self.size else { return };
        for (face, t) in faces.iter_mut().zip(track_of) {
            let points = t.and_then(|t| self.tracks[t].follow.as_ref()?.points.as_ref());
            if let Some(placed) = points.and_then(|p| p.place(&face.landmarks, size)) {
                face.bbox = placed;
            }
        }
    }

    /// `track_by: points`: whether every carried face's box still looks as
    /// it did a frame ago (all are looked at: each keeps this frame's look).
    fn alike(&mut self, frame: &Frame, carried: &[(usize, BoxPx, f32)]) -> bool {
        let mut alike = true;
        for (t, b, _) in carried {
            if let Some(points) = self.tracks[*t]
                .follow
                .as_mut()
                .and_then(|f| f.points.as_mut())
            {
                alike &= points.looks_alike(frame, b);
            }
        }
        alike
    }

    /// `track_by: points`: whether a carried face may be partial, so that
    /// its points would place its box badly: a face seen in too few frames
    /// in a row (`Points::young`), its box at the frame's edge or touching
    /// another's. Such frames are detected.
    fn unsure(&self, carried: &[(usize, BoxPx, f32)]) -> bool {
        let Some((w, h)) = self.size.map(|(w, h)| (w as f32, h as f32)) else {
            return false;
        };
        let at_edge = |b: &BoxPx| {
            b.left <= EDGE || b.top <= EDGE || b.right >= w - EDGE || b.bottom >= h - EDGE
        };
        let young = |t: usize| {
            let follow = self.tracks[t].follow.as_ref();
            follow
                .and_then(|f| f.points.as_ref())
                .is_some_and(|p| p.young(self.frames))
        };
        carried.iter().enumerate().any(|(i, (t, b, _))| {
            young(*t) || at_edge(b) || carried[i + 1..].iter().any(|(_, o, _)| overlap(b, o) > 0.0)
        })
    }

    /// Whether a tracker's box still holds its face: sure enough, its centre
    /// in the frame.
    fn holds(&self, b: &BoxPx, confidence: f32) -> bool {
        let (w, h) = self.size.map_or((0.0, 0.0), |(w, h)| (w as f32, h as f32));
        let [cx, cy] = b.centre();
        let inside = (0.0..w).contains(&cx) && (0.0..h).contains(&cy);
        confidence >= LOST_BELOW && inside && b.shorter_side() >= 1.0
    }

    /// A frame between detections: each track its tracker still holds (sure
    /// enough, its box's centre in the frame), to have the engine's
    /// landmarks at that box; the others let go.
    fn held(&mut self, carried: Vec<(usize, BoxPx, f32)>) -> Vec<(usize, BoxPx)> {
        let mut held = Vec::with_capacity(carried.len());
        for (t, b, confidence) in carried {
            if self.holds(&b, confidence) {
                held.push((t, b));
            } else {
                self.tracks[t].follow = None;
            }
        }
        held
    }

    /// Whether track `t`'s face at `bbox` in frame `n` is embedded again.
    fn due(&self, t: usize, bbox: &BoxPx, n: u64, work: &Work<'_>) -> bool {
        let track = &self.tracks[t];
        let Some((at, when)) = track.follow.as_ref().and_then(|f| f.embedded) else {
            return true;
        };
        let ratio = bbox.area() / at.area().max(1.0);
        let resized = !(1.0 / AREA_CHANGE..=AREA_CHANGE).contains(&ratio);
        let stale = n - when >= u64::from(self.cadence.reidentify_every);
        let near = (track.follow.as_ref().and_then(|f| f.distance))
            .is_some_and(|d| near(d, work.threshold, work.decimals));
        resized || stale || near || !settled(track)
    }

    /// Record one face (with the gallery's answer when it was embedded) in
    /// its track (a new one when it has none, or when its embedding is no
    /// longer its track's person), restart its tracker on a detected box,
    /// and answer it with the track's name.
    fn answer(
        &mut self,
        image: Option<&TrackFrame>,
        (face, matched): (Face, Option<Match>),
        mut track_of: Option<usize>,
        claimed: &[usize],
        source: Source,
        work: &Work<'_>,
    ) -> FollowedFace {
        let n = self.frames;
        let embedded = matched.is_some();
        if let Some(t) = track_of {
            let centroid = &self.tracks[t].centroid;
            let other = embedded
                && centroid.len() == face.embedding.len()
                && work.metric.distance(centroid, &face.embedding) > work.threshold;
            if other {
                // The tracker slid onto someone else: that face starts anew.
                self.tracks[t].follow = None;
                track_of = None;
            }
        }
        if track_of.is_none() && embedded {
            track_of = self.rejoin(&face.embedding, claimed, work);
        }
        let t = track_of.unwrap_or_else(|| self.new_track(face.bbox));
        let restart = source == Source::Detected || self.tracks[t].follow.is_none();
        let track = &mut self.tracks[t];
        let in_a_row = track.seen > 0 && track.last_frame + 1 == n;
        track.sighted(face.bbox, n, &work.limits);
        if source == Source::Detected {
            // Found again (by overlap or by its embedding): its shadow
            // rounds start afresh.
            track.missed = 0;
        }
        if restart {
            // A box the tracker refuses (under 1 px a side) is found again
            // by the next detection.
            let tracker = image.and_then(|i| BoxTracker::start(i, face.bbox).ok());
            let mut before = track.follow.take();
            let carried = (before.as_mut())
                .and_then(|f| f.points.take())
                .filter(|_| in_a_row);
            let points = self
                .cadence
                .by_points()
                .then(|| Points::detected(carried, &face.bbox, &face.landmarks, n));
            track.follow = Some(Follow {
                tracker,
                points,
                embedded: before.as_ref().and_then(|f| f.embedded),
                distance: before.and_then(|f| f.distance),
            });
        }
        if let Some(m) = &matched {
            let follow = track.follow.as_mut().expect("set above");
            (follow.embedded, follow.distance) = (Some((face.bbox, n)), m.distance);
            track.identified(&Observed {
                embedding: &face.embedding,
                name: m.name.as_deref(),
                distance: m.distance,
                bbox: face.bbox,
            });
        }
        let distance = track.follow.as_ref().and_then(|f| f.distance);
        FollowedFace {
            matched: Match {
                name: majority(&track.votes),
                distance,
                candidates: matched.map(|m| m.candidates).unwrap_or_default(),
            },
            embedded,
            source,
            track: track.id,
            face,
        }
    }
}

impl SequenceState {
    /// The track, neither seen nor `claimed` in this frame, whose centroid
    /// is nearest to a face no box continued (within the threshold): a face
    /// the tracker or the overlap lost, found again by its embedding.
    fn rejoin(&self, embedding: &[f32], claimed: &[usize], work: &Work<'_>) -> Option<usize> {
        let n = self.frames;
        self.tracks
            .iter()
            .enumerate()
            .filter(|(i, t)| !claimed.contains(i) && (t.seen == 0 || t.last_frame != n))
            .filter(|(_, t)| t.centroid.len() == embedding.len())
            .map(|(i, t)| (work.metric.distance(&t.centroid, embedding), i))
            .filter(|(d, _)| *d <= work.threshold)
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, i)| i)
    }
}

/// Whether a distance is near the threshold, so that its face is embedded
/// again (the answer says so): on the answers' grid where `decimals` is set,
/// so the flag tells nothing finer of the distance than the answer shows.
fn near(distance: f32, threshold: f32, decimals: Option<u32>) -> bool {
    let grid = |x: f32| decimals.map_or(x, |k| rounded(x, k));
    let (d, t) = (grid(distance), grid(threshold));
    (d - t).abs() < NEAR_THRESHOLD * t
}

/// Whether a track's name is settled: its leading name holds most votes.
fn settled(track: &Track) -> bool {
    let total: u32 = track.votes.values().sum();
    let top = track.votes.values().max().copied().unwrap_or(0);
    total > 0 && top as f32 >= SETTLED_SHARE * total as f32
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::engine::Engine;
    use crate::pipeline::{Analysis, OwnedFrame};
    use crate::sequence::{follow_together, Cadence, Sequences, Stream};

    /// On the grid, whether a face is embedded again depends on its distance
    /// and the threshold as answers show them, never on more.
    #[test]
    fn near_on_the_grid_tells_no_more_than_the_rounded_distance() {
        use crate::metric::coarse_threshold;
        for decimals in [0, 1, 2] {
            let values: Vec<f32> = (1..400).map(|i| i as f32 * 0.0025).collect();
            let mut seen = std::collections::HashMap::new();
            for &d in &values {
                for &t in &values {
                    let key = (
                        rounded(d, decimals).to_bits(),
                        rounded(t, decimals).to_bits(),
                    );
                    let flag = near(d, coarse_threshold(t, decimals), Some(decimals));
                    let first = *seen.entry(key).or_insert(flag);
                    assert_eq!(flag, first, "d {d} t {t} at {decimals} decimals");
                }
            }
        }
        // Exact where a key may search: 0.46 is within 10% of 0.5, 0.44 is not.
        assert!(near(0.46, 0.5, None) && !near(0.44, 0.5, None));
    }

    fn limits(max_sequences: usize) -> Limits {
        Limits {
            max_sequences,
            max_frames: 10,
            idle_timeout: Duration::from_secs(10),
            retire_after: 300,
            max_tracks: 1000,
            shadow_rounds: 2,
        }
    }

    /// What the tests ask of each frame, `matcher` answering for the gallery.
    fn work<'a>(matcher: &'a dyn Fn(&[f32]) -> Result<Match>, limits: Limits) -> Work<'a> {
        Work {
            wanted: Wanted::all(10),
            matcher,
            metric: Metric::Euclidean,
            threshold: 0.6,
            decimals: None,
            limits,
        }
    }

    fn obama() -> Match {
        Match {
            name: Some("obama".into()),
            distance: Some(0.1),
            candidates: Vec::new(),
        }
    }

    /// One face on every frame (box and embedding from the frame's height);
    /// a frame of width 99 fails, a call with one of width 98 panics. It
    /// counts how many frames each detection and embedding call takes.
    #[derive(Default)]
    struct Scripted {
        analyzed: Vec<usize>,
        embedded: Vec<usize>,
    }

    impl Engine for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }
        fn metric(&self) -> Metric {
            Metric::Euclidean
        }
        fn describe(&self) -> String {
            String::new()
        }
        fn embedding_len(&self) -> usize {
            2
        }
        fn analyze(&mut self, frames: &[(&Frame, Wanted)]) -> Vec<Result<Analysis>> {
            self.analyzed.push(frames.len());
            assert!(
                frames.iter().all(|(f, _)| f.width != 98),
                "scripted: width 98"
            );
            let one = |f: &Frame| match f.width {
                99 => Err(Error::internal("scripted: a broken frame")),
                _ => Ok(Analysis {
                    faces: vec![Face {
                        bbox: BoxPx {
                            left: 0.0,
                            top: 0.0,
                            right: 10.0,
                            bottom: 10.0,
                        },
                        score: None,
                        landmarks: [[0.0; 2]; 5],
                        embedding: Vec::new(),
                        crop: None,
                    }],
                    ..Default::default()
                }),
            };
            frames.iter().map(|(f, _)| one(f)).collect()
        }
        fn faces_at(&mut self, _: &Frame, _: &[BoxPx]) -> Result<Vec<Face>> {
            Err(Error::internal("scripted: every frame is detected"))
        }
        fn embed(&mut self, frame: &Frame, faces: &[&Face]) -> Result<Vec<Vec<f32>>> {
            Ok(faces
                .iter()
                .map(|_| vec![frame.height as f32, 0.0])
                .collect())
        }
        fn embed_many(&mut self, asked: &[(&Frame, Vec<&Face>)]) -> Vec<Result<Vec<Vec<f32>>>> {
            self.embedded.push(asked.len());
            (asked.iter())
                .map(|(frame, faces)| self.embed(frame, faces))
                .collect()
        }
    }

    fn frame(width: u32, height: u32) -> OwnedFrame {
        Frame {
            width,
            height,
            rgb: Vec::new().into(),
        }
    }

    /// A grey 320x240 frame with a dark checked square (a "face") at `x`
    /// (none: `None`); `missed`: the detector is made to miss it.
    fn square_frame(x: Option<u32>, missed: bool) -> OwnedFrame {
        let square: Vec<(u32, u32)> = x.map(|x| (x, 60)).into_iter().collect();
        squares_frame(&square, missed)
    }

    /// `square_frame` with a square at each `(x, side)`, its top at 80.
    fn squares_frame(squares: &[(u32, u32)], missed: bool) -> OwnedFrame {
        let (w, h) = (320u32, 240u32);
        let mut rgb = vec![200u8; (w * h * 3) as usize];
        for &(x, side) in squares {
            for (y, dx) in (80..80 + side).flat_map(|y| (0..side).map(move |dx| (y, dx))) {
                let v = if (dx / 10 + y / 10) % 2 == 0 { 20 } else { 90 };
                let i = ((y * w + x + dx) * 3) as usize;
                rgb[i..i + 3].fill(v);
            }
        }
        rgb[0] = if missed { 1 } else { 200 };
        Frame {
            width: w,
            height: h,
            rgb: rgb.into(),
        }
    }

    /// Finds `squares_frame`'s squares (those the request wants), unless
    /// the frame says to miss them; landmarks at any box; one embedding for
    /// every face.
    struct Squares;

    impl Engine for Squares {
        fn name(&self) -> &str {
            "squares"
        }
        fn metric(&self) -> Metric {
            Metric::Euclidean
        }
        fn describe(&self) -> String {
            String::new()
        }
        fn embedding_len(&self) -> usize {
            2
        }
        fn analyze(&mut self, frames: &[(&Frame, Wanted)]) -> Vec<Result<Analysis>> {
            let found = |f: &Frame| -> Vec<Face> {
                let row = &f.rgb[(100 * f.width as usize) * 3..(101 * f.width as usize) * 3];
                let dark: Vec<bool> = row.chunks(3).map(|p| p[0] < 100).collect();
                let starts = (0..dark.len()).filter(|&x| dark[x] && (x == 0 || !dark[x - 1]));
                let side = |x: usize| dark[x..].iter().take_while(|d| **d).count() as f32;
                match f.rgb[0] {
                    1 => Vec::new(),
                    _ => starts.map(|x| square_of(x as f32, side(x))).collect(),
                }
            };
            (frames.iter())
                .map(|(f, wanted)| {
                    Ok(Analysis {
                        faces: wanted.choose(found(f), |face| face.bbox)?,
                        ..Default::default()
                    })
                })
                .collect()
        }
        fn faces_at(&mut self, _: &Frame, boxes: &[BoxPx]) -> Result<Vec<Face>> {
            Ok(boxes
                .iter()
                .map(|b| square_of(b.left, b.right - b.left))
                .collect())
        }
        fn embed(&mut self, _: &Frame, faces: &[&Face]) -> Result<Vec<Vec<f32>>> {
            Ok(faces.iter().map(|_| vec![1.0, 0.0]).collect())
        }
    }

    fn square_of(left: f32, side: f32) -> Face {
        Face {
            bbox: BoxPx {
                left,
                top: 80.0,
                right: left + side,
                bottom: 80.0 + side,
            },
            score: None,
            landmarks: [[0.0; 2]; 5],
            embedding: Vec::new(),
            crop: None,
        }
    }

    /// The detector misses a face its tracker holds: the track goes on, its
    /// face answered as tracked with its name, for up to `shadow_rounds`
    /// detections in a row; a face the tracker loses too ends its track.
    #[test]
    fn a_missed_detection_keeps_a_tracked_face() {
        let matcher = |_: &[f32]| Ok(obama());
        // Each frame's (square at, detector misses); detections on even frames.
        let script: Vec<(Option<u32>, bool)> = vec![
            (Some(100), false),
            (Some(104), false),
            (Some(108), true), // missed: shadowed
            (Some(112), false),
            (Some(116), false), // found again: the same track
            (Some(120), false),
            (Some(124), true),
            (Some(128), false),
            (Some(132), true),
            (Some(136), false),
            (Some(140), true), // a third miss in a row: the track ends
            (Some(144), false),
            (Some(148), false),
            (Some(152), false),
            (Some(156), true), // missed again: shadowed afresh
            (Some(160), false),
            (None, true), // gone, and the tracker loses it too
        ];
        for shadow_rounds in [0, 2] {
            let limits = Limits {
                shadow_rounds,
                ..limits(1)
            };
            let work = work(&matcher, limits);
            let mut state = SequenceState::new(Instant::now());
            state.cadence = Cadence {
                detect_every: 2,
                reidentify_every: 10,
                ..Cadence::EVERY_FRAME
            };
            let frames: Vec<Frame> = script.iter().map(|&(x, m)| square_frame(x, m)).collect();
            let stream = Stream {
                state: &mut state,
                frames: &frames,
                work: &work,
            };
            let followed = follow_together(&mut Squares, &mut [stream]).pop().unwrap();
            let seen: Vec<Option<(Source, u32)>> = (followed.ok().unwrap().iter())
                .map(|f| f.faces.first().map(|face| (face.source, face.track)))
                .collect();
            let (d, t) = (Source::Detected, Source::Tracked);
            let want: Vec<Option<(Source, u32)>> = match shadow_rounds {
                2 => vec![
                    Some((d, 0)),
                    Some((t, 0)),
                    Some((t, 0)),
                    Some((t, 0)),
                    Some((d, 0)),
                    Some((t, 0)),
                    Some((t, 0)),
                    Some((t, 0)),
                    Some((t, 0)),
                    Some((t, 0)),
                    None,
                    None,
                    Some((d, 0)), // found again by its embedding
                    Some((t, 0)),
                    Some((t, 0)),
                    Some((t, 0)),
                    None,
                ],
                _ => vec![
                    Some((d, 0)),
                    Some((t, 0)),
                    None,
                    None,
                    Some((d, 0)),
                    Some((t, 0)),
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    Some((d, 0)),
                    Some((t, 0)),
                    None,
                    None,
                    None,
                ],
            };
            assert_eq!(seen, want, "shadow_rounds {shadow_rounds}");
        }
    }

    /// `min_face_size` and `max_faces` hold on every frame, not only on
    /// detections: a tracked face the request does not want (too small, or
    /// beyond the largest `max_faces`) is dropped as the detector drops it,
    /// and its track lets go.
    #[test]
    fn tracked_faces_are_dropped_as_detected_ones_are() {
        let matcher = |_: &[f32]| Ok(obama());
        // Each request's frames, the faces it wants (`min_face_size`,
        // `max_faces`), and the tracks each frame answers.
        type Step = (Vec<OwnedFrame>, f32, Option<usize>, Vec<Vec<u32>>);
        let follow = |steps: Vec<Step>| {
            let mut state = SequenceState::new(Instant::now());
            state.cadence = Cadence {
                detect_every: 2,
                reidentify_every: 10,
                ..Cadence::EVERY_FRAME
            };
            for (at, (frames, min_face_size, max_faces, want)) in steps.iter().enumerate() {
                let mut work = work(&matcher, limits(1));
                (work.wanted.min_face_size, work.wanted.max_faces) = (*min_face_size, *max_faces);
                let stream = Stream {
                    state: &mut state,
                    frames,
                    work: &work,
                };
                let followed = follow_together(&mut Squares, &mut [stream]).pop().unwrap();
                let seen: Vec<Vec<u32>> = (followed.ok().unwrap().iter())
                    .map(|f| f.faces.iter().map(|face| face.track).collect())
                    .collect();
                assert_eq!(&seen, want, "request {at}");
            }
        };
        // A square of 60 px and one of 50 (their faces embed alike, so a
        // face back is its track's again); detections on even frames.
        let two = |x: u32, missed: bool| squares_frame(&[(x, 60), (x + 150, 50)], missed);
        follow(vec![
            (
                vec![two(20, false), two(22, false)],
                0.0,
                None,
                vec![vec![0, 1], vec![0, 1]],
            ),
            // A detection keeping the largest: the other is not shadowed.
            (vec![two(24, false)], 0.0, Some(1), vec![vec![0]]),
            (
                vec![two(26, false), two(28, false)],
                0.0,
                None,
                vec![vec![0], vec![0, 1]],
            ),
            // Between detections, the largest only.
            (vec![two(30, false)], 0.0, Some(1), vec![vec![0]]),
            (
                vec![two(32, false), two(34, false)],
                0.0,
                None,
                vec![vec![0, 1], vec![0, 1]],
            ),
            // A detection dropping the small one: it is not shadowed; and
            // between detections, the small one dropped.
            (vec![two(36, false)], 55.0, None, vec![vec![0]]),
            (
                vec![two(38, false), two(40, false)],
                0.0,
                None,
                vec![vec![0], vec![0, 1]],
            ),
            (vec![two(42, false)], 55.0, None, vec![vec![0]]),
            // A detection missing both: the largest one shadowed.
            (
                vec![two(44, false), two(46, false)],
                0.0,
                None,
                vec![vec![0, 1], vec![0, 1]],
            ),
            (vec![two(48, true)], 0.0, Some(1), vec![vec![0]]),
        ]);
        // The small one first: with `max_faces` the largest answers first
        // between detections too, as a detection answers.
        let small_first = |x: u32| squares_frame(&[(x, 50), (x + 150, 60)], false);
        follow(vec![
            (vec![small_first(20)], 0.0, None, vec![vec![0, 1]]),
            (vec![small_first(22)], 0.0, Some(2), vec![vec![1, 0]]),
        ]);
    }

    /// A face the tracker loses between detections (it jumped: turned,
    /// grew, blurred in a real video) sends that frame to the detector at
    /// once, instead of going unanswered until the next detection round.
    #[test]
    fn a_face_the_tracker_loses_is_detected_at_once() {
        let matcher = |_: &[f32]| Ok(obama());
        let work = work(&matcher, limits(1));
        let mut state = SequenceState::new(Instant::now());
        state.cadence = Cadence {
            detect_every: 10,
            reidentify_every: 10,
            ..Cadence::EVERY_FRAME
        };
        let xs = [100, 104, 108, 220, 224, 228];
        let frames: Vec<Frame> = xs.iter().map(|&x| square_frame(Some(x), false)).collect();
        let stream = Stream {
            state: &mut state,
            frames: &frames,
            work: &work,
        };
        let followed = follow_together(&mut Squares, &mut [stream]).pop().unwrap();
        let seen: Vec<Vec<(Source, u32, i32)>> = (followed.ok().unwrap().iter())
            .map(|f| {
                (f.faces.iter())
                    .map(|face| (face.source, face.track, face.face.bbox.left.round() as i32))
                    .collect()
            })
            .collect();
        let (d, t) = (Source::Detected, Source::Tracked);
        assert_eq!(seen[0], [(d, 0, 100)]);
        assert_eq!(seen[2].len(), 1);
        assert_eq!(seen[2][0].0, t);
        // The jump: detected where it is, its track found again by its embedding.
        assert_eq!(seen[3], [(d, 0, 220)], "{seen:?}");
        assert!(
            seen[4..].iter().all(|f| f.len() == 1 && f[0].0 == t),
            "{seen:?}"
        );
    }

    #[test]
    fn a_request_that_fails_partway_changes_nothing() {
        let limits = limits(1);
        let id = crate::sequence::CorrelationId::Int(1);
        let mut seqs = Sequences::new(limits);
        let state = seqs.start(&id, Instant::now()).unwrap();
        state.cadence = Cadence::EVERY_FRAME;
        // A face of a frame 77 px high: the gallery fails.
        let matcher = |e: &[f32]| match e[0] {
            77.0 => Err(Error::internal("scripted: the gallery failed")),
            _ => Ok(obama()),
        };
        let work = work(&matcher, limits);
        let follow = |state: &mut SequenceState, frames: &[Frame]| {
            let stream = Stream {
                state,
                frames,
                work: &work,
            };
            follow_together(&mut Scripted::default(), &mut [stream])
                .pop()
                .unwrap()
        };
        let done = follow(state, &[frame(8, 8), frame(8, 8)]).ok();
        assert_eq!(done.map(|f| f.len()), Some(2));
        // The second frame of three fails: the first is not counted either,
        // and no face of it joined a track.
        let failed = follow(state, &[frame(8, 8), frame(99, 8), frame(8, 8)]);
        assert_eq!(failed.err().map(|(i, _)| i), Some(1));
        assert_eq!(state.frames(), 2);
        // A new face, then a failure: its track goes too.
        let failed = follow(state, &[frame(8, 30), frame(99, 8)]);
        assert_eq!(failed.err().map(|(i, _)| i), Some(1));
        // One frame whose face the gallery cannot answer: not recorded.
        let failed = follow(state, &[frame(8, 77)]);
        assert_eq!(failed.err().map(|(i, _)| i), Some(0));
        assert_eq!(state.frames(), 2);
        let next = follow(state, &[frame(8, 8)]).ok().unwrap();
        assert_eq!(next[0].number, 2);
        assert_eq!(next[0].faces[0].track, 0);
        let recap = state.recap(&limits);
        assert_eq!(recap.kept.len(), 3);
        assert_eq!(recap.tracks.len(), 1);
        assert_eq!(recap.tracks[0].frames, vec![0, 1, 2]);
    }

    /// Three sequences' requests of two frames in one call: each round's
    /// detections in one engine call and its embeddings in another; the
    /// sequence whose second frame fails fails alone, and the others answer
    /// as each followed alone.
    #[test]
    fn sequences_followed_together_share_each_rounds_engine_calls() {
        let limits = limits(6);
        let matcher = |_: &[f32]| Ok(obama());
        let work = work(&matcher, limits);
        let requests = [
            vec![frame(8, 8), frame(8, 9)],
            vec![frame(8, 20), frame(99, 8)],
            vec![frame(8, 30), frame(8, 31)],
        ];
        let mut seqs = Sequences::new(limits);
        let now = Instant::now();
        let ids: Vec<_> = (0..6).map(crate::sequence::CorrelationId::Int).collect();
        for id in &ids {
            seqs.start(id, now).unwrap().cadence = Cadence::EVERY_FRAME;
        }
        let mut together: Vec<SequenceState> = ids[..3]
            .iter()
            .map(|id| seqs.take(id, now).unwrap())
            .collect();
        let mut engine = Scripted::default();
        let mut streams: Vec<Stream> = (together.iter_mut().zip(&requests))
            .map(|(state, frames)| Stream {
                state,
                frames,
                work: &work,
            })
            .collect();
        let got = follow_together(&mut engine, &mut streams);
        assert_eq!(
            engine.analyzed,
            [3, 3],
            "each round's detections in one call"
        );
        assert_eq!(
            engine.embedded,
            [3, 2],
            "each round's embeddings in one call"
        );
        assert_eq!(got[1].as_ref().err().map(|(i, _)| *i), Some(1));
        for k in [0, 2] {
            let mut alone = seqs.take(&ids[3 + k / 2], now).unwrap();
            let stream = Stream {
                state: &mut alone,
                frames: &requests[k],
                work: &work,
            };
            let want = follow_together(&mut Scripted::default(), &mut [stream])
                .pop()
                .unwrap();
            let (got, want) = (got[k].as_ref().ok().unwrap(), want.ok().unwrap());
            let faces = |f: &[FollowedFrame]| -> Vec<(u64, Vec<u32>, Vec<Vec<f32>>)> {
                f.iter()
                    .map(|f| {
                        let tracks = f.faces.iter().map(|x| x.track).collect();
                        let embeddings = f.faces.iter().map(|x| x.face.embedding.clone()).collect();
                        (f.number, tracks, embeddings)
                    })
                    .collect()
            };
            assert_eq!(faces(got), faces(&want), "sequence {k}");
        }
        assert_eq!(
            together[1].frames(),
            0,
            "the failed request changed nothing"
        );
        assert_eq!(together[0].frames(), 2);
    }

    /// A panic in a round's engine call fails that round's frames (every
    /// sequence in the call), each sequence undone; nothing unwinds further.
    #[test]
    fn an_engine_panic_fails_its_rounds_requests_and_undoes_them() {
        let limits = limits(2);
        let matcher = |_: &[f32]| Ok(Match::default());
        let work = work(&matcher, limits);
        let mut seqs = Sequences::new(limits);
        let now = Instant::now();
        let ids: Vec<_> = (0..2).map(crate::sequence::CorrelationId::Int).collect();
        let mut states: Vec<SequenceState> = (ids.iter())
            .map(|id| {
                seqs.start(id, now).unwrap().cadence = Cadence::EVERY_FRAME;
                seqs.take(id, now).unwrap()
            })
            .collect();
        let requests = [
            vec![frame(8, 8), frame(98, 8)],
            vec![frame(8, 9), frame(8, 9)],
        ];
        let mut streams: Vec<Stream> = (states.iter_mut().zip(&requests))
            .map(|(state, frames)| Stream {
                state,
                frames,
                work: &work,
            })
            .collect();
        let got = follow_together(&mut Scripted::default(), &mut streams);
        for result in &got {
            let (i, e) = result.as_ref().err().unwrap();
            assert_eq!(*i, 1);
            assert!(
                e.message().contains("scripted: width 98"),
                "{}",
                e.message()
            );
        }
        assert!(states.iter().all(|s| s.frames() == 0));
    }
}
