//! The JSON documents a client receives, in one place (schema:
//! `schema/result.schema.json`).

use serde::{Serialize, Serializer};

use crate::gallery::{Candidate, Enrolled, Forgotten, Known, Match, Record};
use crate::metric::rounded;
use crate::pipeline::{BoxPx, Face, Frame};
use crate::sequence::{CorrelationId, Recap};

/// What a face that matches nobody is called in the answers; inside the code
/// that is `None`, and the word exists only here, when rendering.
pub const UNKNOWN: &str = "unknown";

fn name_or_unknown<S: Serializer>(name: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(name.as_deref().unwrap_or(UNKNOWN))
}

/// A correlation ID as the client sent it: a number or a string.
fn correlation_id<S: Serializer>(id: &CorrelationId, s: S) -> Result<S::Ok, S::Error> {
    match id {
        CorrelationId::Int(n) => s.serialize_u64(*n),
        CorrelationId::Str(text) => s.serialize_str(text),
    }
}

/// The END document of a sequence.
#[derive(Serialize, Debug)]
pub struct Summary {
    pub result: LegacyResult,
    pub people: Vec<Person>,
    pub frames: u64,
    /// Tracks beyond `max_tracks_per_summary`, counted only.
    #[serde(skip_serializing_if = "is_zero")]
    pub people_not_listed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The original system's END format, kept so its clients still work.
#[derive(Serialize, Debug)]
pub struct LegacyResult {
    pub image_count: usize,
    pub image_infos: Vec<LegacyImage>,
}

#[derive(Serialize, Debug)]
pub struct LegacyImage {
    pub face_count: usize,
    pub face_infos: Vec<FaceInfo>,
}

#[derive(Serialize, Debug)]
pub struct FaceInfo {
    #[serde(serialize_with = "name_or_unknown")]
    pub name: Option<String>,
    #[serde(rename = "box")]
    pub bbox: LegacyBox,
}

#[derive(Serialize, Debug)]
pub struct LegacyBox {
    pub top: i64,
    pub bottom: i64,
    pub left: i64,
    pub right: i64,
}

/// One track of a sequence: who it most often was, and when.
#[derive(Serialize, Debug)]
pub struct Person {
    pub track: u32,
    #[serde(serialize_with = "name_or_unknown")]
    pub name: Option<String>,
    pub frames: Vec<u64>,
    pub best_distance: Option<f32>,
}

/// One answer: an image's faces, and for sequence models the frame's place in
/// its sequence (and the summary at END). A sequence request without a frame
/// has no `image` / `faces`.
#[derive(Serialize, Debug, Default)]
pub struct ImageDoc {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faces: Option<Vec<FaceDoc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enrolled: Option<EnrolledDoc>,
    /// FORGET's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forgotten: Option<ForgottenDoc>,
    /// LIST's answer: everyone known, and the gallery's size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub people: Option<Vec<Known>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gallery_size: Option<usize>,
    /// LIST with `changes: true`: the record of changes, newest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<ChangeDoc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence: Option<SequenceDoc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// With the request parameter `timings`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings_ms: Option<TimingsDoc>,
}

/// Milliseconds this image spent in each stage (its own, never a share of
/// the batch's: each image runs through the engine on its own).
#[derive(Serialize, Debug, PartialEq)]
pub struct TimingsDoc {
    pub decode: f64,
    pub detection: f64,
    pub landmarks: f64,
    pub embedding: f64,
    pub matching: f64,
}

/// A face against the request's REFERENCE embedding.
#[derive(Serialize, Debug, PartialEq)]
pub struct VerificationDoc {
    pub distance: f32,
    pub same_person: bool,
}

/// A face's name in the gallery (none with `detect_only`).
#[derive(Serialize, Debug)]
pub struct NamingDoc {
    #[serde(serialize_with = "name_or_unknown")]
    pub name: Option<String>,
    pub distance: Option<f32>,
}

#[derive(Serialize, Debug)]
pub struct SequenceDoc {
    #[serde(serialize_with = "correlation_id")]
    pub correlation_id: CorrelationId,
    /// 0-based frame number within the sequence; null for a request without a frame.
    pub frame: Option<u64>,
}

#[derive(Serialize, Debug)]
pub struct ImageInfo {
    pub width: u32,
    pub height: u32,
}

#[derive(Serialize, Debug)]
pub struct BoxDoc {
    pub left: i64,
    pub top: i64,
    pub right: i64,
    pub bottom: i64,
}

/// One face. A face of an EMBEDDING request has no box, score or landmarks.
#[derive(Serialize, Debug)]
pub struct FaceDoc {
    #[serde(rename = "box", skip_serializing_if = "Option::is_none")]
    pub bbox: Option<BoxDoc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<Option<f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub landmarks: Option<Vec<[f32; 2]>>,
    #[serde(flatten)]
    pub naming: Option<NamingDoc>,
    /// With the request parameter `top_k`: the nearest people, one entry
    /// each, nearest first, whether within the threshold or not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidates: Option<Vec<CandidateDoc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding: Option<Vec<f32>>,
    /// Sequence models: the face's track, stable within the sequence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub track: Option<u32>,
    /// Sequence models: "detected" (by the detector) or "tracked" (carried
    /// by the tracker between detections).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
    /// Sequence models: embedded and matched in this frame (false: the name
    /// and distance are its track's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded: Option<bool>,
    /// With REFERENCE: this face against it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationDoc>,
    /// With `return_crops`: the aligned face the embedder sees, base64 PNG.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crop: Option<String>,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct CandidateDoc {
    pub name: String,
    pub distance: f32,
}

impl From<&Candidate> for CandidateDoc {
    fn from(c: &Candidate) -> Self {
        CandidateDoc {
            name: c.name.clone(),
            distance: c.distance,
        }
    }
}

#[derive(Serialize, Debug)]
pub struct EnrolledDoc {
    pub name: String,
    pub added: bool,
    pub gallery_size: usize,
}

/// One recorded change: its number, when (ms since the epoch), what, whose
/// name, how many embeddings, and the label of the key that made it.
#[derive(Serialize, Debug)]
pub struct ChangeDoc {
    pub change: i64,
    pub at_ms: i64,
    pub operation: &'static str,
    pub name: String,
    pub count: usize,
    pub key: Option<String>,
}

impl From<Record> for ChangeDoc {
    fn from(r: Record) -> Self {
        ChangeDoc {
            change: r.number,
            at_ms: r.at_ms,
            operation: r.change.operation.as_str(),
            name: r.change.name,
            count: r.change.count,
            key: r.change.by,
        }
    }
}

#[derive(Serialize, Debug)]
pub struct ForgottenDoc {
    pub name: String,
    pub removed: usize,
    pub gallery_size: usize,
    /// Gallery images of that name, still known (relative to the folder).
    pub folder_files: Vec<String>,
}

impl FaceDoc {
    /// A face; `matched` is None with `detect_only`.
    pub fn new(
        face: &Face,
        matched: Option<&Match>,
        with_embedding: bool,
        with_candidates: bool,
    ) -> Self {
        FaceDoc {
            bbox: Some(BoxDoc {
                left: face.bbox.left.round() as i64,
                top: face.bbox.top.round() as i64,
                right: face.bbox.right.round() as i64,
                bottom: face.bbox.bottom.round() as i64,
            }),
            score: Some(face.score),
            landmarks: Some(face.landmarks.to_vec()),
            naming: matched.map(|m| NamingDoc {
                name: m.name.clone(),
                distance: m.distance,
            }),
            candidates: matched
                .filter(|_| with_candidates)
                .map(|m| m.candidates.iter().map(CandidateDoc::from).collect()),
            embedding: (with_embedding && !face.embedding.is_empty())
                .then(|| face.embedding.clone()),
            track: None,
            source: None,
            embedded: None,
            verification: None,
            crop: None,
        }
    }

    /// The face of an EMBEDDING request: where it is, nobody knows.
    pub fn without_image(mut self) -> Self {
        (self.bbox, self.score, self.landmarks) = (None, None, None);
        self
    }
}

impl ImageDoc {
    /// An image's faces (an EMBEDDING request's have no image).
    pub fn new(frame: Option<&Frame>, faces: Vec<FaceDoc>) -> Self {
        ImageDoc {
            image: frame.map(|frame| ImageInfo {
                width: frame.width,
                height: frame.height,
            }),
            faces: Some(faces),
            ..Default::default()
        }
    }

    pub fn with_enrolled(mut self, e: &Enrolled) -> Self {
        self.enrolled = Some(EnrolledDoc {
            name: e.name.clone(),
            added: e.added,
            gallery_size: e.gallery_size,
        });
        self
    }

    /// LIST's answer, with the record of changes when asked.
    pub fn listing(people: Vec<Known>, gallery_size: usize, changes: Option<Vec<Record>>) -> Self {
        ImageDoc {
            people: Some(people),
            gallery_size: Some(gallery_size),
            changes: changes.map(|c| c.into_iter().map(ChangeDoc::from).collect()),
            ..Default::default()
        }
    }

    /// FORGET's answer for one name.
    pub fn forgotten(f: &Forgotten) -> Self {
        ImageDoc {
            forgotten: Some(ForgottenDoc {
                name: f.name.clone(),
                removed: f.removed,
                gallery_size: f.gallery_size,
                folder_files: f.folder_files.clone(),
            }),
            ..Default::default()
        }
    }

    /// Every distance of the answer (a face's name, its `top_k` candidates,
    /// its verification against REFERENCE, a summary's best) to `decimals`:
    /// an answer then tells little of a stored vector or of the face's own
    /// (docs/gallery.md).
    pub fn round_distances(&mut self, decimals: u32) {
        let round = |d: &mut f32| *d = rounded(*d, decimals);
        for face in self.faces.iter_mut().flatten() {
            if let Some(d) = face.naming.as_mut().and_then(|n| n.distance.as_mut()) {
                round(d);
            }
            if let Some(v) = face.verification.as_mut() {
                round(&mut v.distance);
            }
            for c in face.candidates.iter_mut().flatten() {
                round(&mut c.distance);
            }
        }
        let people = self.summary.iter_mut().flat_map(|s| s.people.iter_mut());
        for d in people.filter_map(|p| p.best_distance.as_mut()) {
            round(d);
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        // Serializing these plain structs cannot fail (no maps with non-string keys).
        serde_json::to_vec(self).expect("result documents always serialize")
    }
}

impl From<Recap> for Summary {
    fn from(recap: Recap) -> Self {
        let image_infos: Vec<LegacyImage> = recap
            .kept
            .into_iter()
            .map(|faces| LegacyImage {
                face_count: faces.len(),
                face_infos: faces
                    .into_iter()
                    .map(|(name, b)| FaceInfo {
                        name,
                        bbox: legacy_box(&b),
                    })
                    .collect(),
            })
            .collect();
        Summary {
            result: LegacyResult {
                image_count: image_infos.len(),
                image_infos,
            },
            people: recap
                .tracks
                .into_iter()
                .map(|t| Person {
                    track: t.track,
                    name: t.name,
                    frames: t.frames,
                    best_distance: t.best_distance,
                })
                .collect(),
            frames: recap.frames,
            people_not_listed: recap.unlisted,
        }
    }
}

fn legacy_box(b: &BoxPx) -> LegacyBox {
    LegacyBox {
        top: b.top.round() as i64,
        bottom: b.bottom.round() as i64,
        left: b.left.round() as i64,
        right: b.right.round() as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::BoxPx;

    #[test]
    fn renders_the_documented_shape() {
        let frame = Frame {
            width: 4,
            height: 3,
            rgb: vec![0; 36].into(),
        };
        let face = Face {
            bbox: BoxPx {
                left: 0.4,
                top: 1.0,
                right: 3.6,
                bottom: 2.0,
            },
            score: None,
            landmarks: [[1.0, 1.0]; 5],
            embedding: vec![0.5, 0.25],
            crop: None,
        };
        let m = Match {
            name: None,
            distance: Some(0.7),
            candidates: vec![Candidate {
                name: "bob".into(),
                distance: 0.7,
            }],
        };
        let doc = ImageDoc::new(
            Some(&frame),
            vec![FaceDoc::new(&face, Some(&m), false, false)],
        );
        let v: serde_json::Value = serde_json::from_slice(&doc.to_json()).unwrap();
        assert_eq!(v["image"], serde_json::json!({"width": 4, "height": 3}));
        let f = &v["faces"][0];
        assert_eq!(
            f["box"],
            serde_json::json!({"left": 0, "top": 1, "right": 4, "bottom": 2})
        );
        assert_eq!(f["name"], "unknown");
        assert!(f["score"].is_null());
        assert!(f.get("embedding").is_none());
        assert!(
            f.get("candidates").is_none(),
            "only when the request asks top_k"
        );
        assert!(v.get("enrolled").is_none());
        assert_eq!(f["landmarks"].as_array().unwrap().len(), 5);

        let e = Enrolled {
            name: "a".into(),
            added: true,
            gallery_size: 3,
        };
        let doc = ImageDoc::new(
            Some(&frame),
            vec![FaceDoc::new(&face, Some(&m), true, true)],
        )
        .with_enrolled(&e);
        let mut doc = doc;
        doc.faces.as_mut().unwrap()[0].candidates.as_mut().unwrap()[0].distance = 0.123456;
        doc.faces.as_mut().unwrap()[0].verification = Some(VerificationDoc {
            distance: 0.123456,
            same_person: true,
        });
        doc.round_distances(2);
        let v: serde_json::Value = serde_json::from_slice(&doc.to_json()).unwrap();
        assert_eq!(v["faces"][0]["candidates"][0]["distance"], 0.12);
        assert_eq!(
            v["faces"][0]["verification"]["distance"], 0.12,
            "every distance"
        );
        doc.faces.as_mut().unwrap()[0].candidates.as_mut().unwrap()[0].distance = 0.7;
        let v: serde_json::Value = serde_json::from_slice(&doc.to_json()).unwrap();
        assert_eq!(v["enrolled"]["gallery_size"], 3);
        assert_eq!(
            v["faces"][0]["candidates"],
            serde_json::json!([{"name": "bob", "distance": 0.7}])
        );
        assert_eq!(v["faces"][0]["embedding"], serde_json::json!([0.5, 0.25]));

        // detect_only: no name, no distance; an EMBEDDING request: no box.
        let v: serde_json::Value = serde_json::from_slice(
            &ImageDoc::new(Some(&frame), vec![FaceDoc::new(&face, None, false, true)]).to_json(),
        )
        .unwrap();
        let f = &v["faces"][0];
        assert!(
            f.get("name").is_none() && f.get("distance").is_none() && f.get("candidates").is_none()
        );
        assert_eq!(f["landmarks"].as_array().unwrap().len(), 5);
        let alone = FaceDoc::new(&face, Some(&m), false, false).without_image();
        let v: serde_json::Value =
            serde_json::from_slice(&ImageDoc::new(None, vec![alone]).to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"faces": [{"name": "unknown", "distance": 0.7}]})
        );
    }

    #[test]
    fn management_answers_carry_only_their_part() {
        let people = vec![Known {
            name: "bob".into(),
            embeddings: 2,
            source: crate::gallery::Source::Folder,
        }];
        let v: serde_json::Value =
            serde_json::from_slice(&ImageDoc::listing(people, 2, None).to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"people": [{"name": "bob", "embeddings": 2, "source": "folder"}],
                               "gallery_size": 2})
        );
        let f = Forgotten {
            name: "al".into(),
            removed: 1,
            gallery_size: 0,
            folder_files: vec![],
        };
        let v: serde_json::Value =
            serde_json::from_slice(&ImageDoc::forgotten(&f).to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"forgotten": {"name": "al", "removed": 1, "gallery_size": 0,
                                             "folder_files": []}})
        );
    }
}
