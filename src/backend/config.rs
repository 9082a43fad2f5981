//! The model configuration, parsed once at model load into typed settings with
//! defaults. A bad or unknown parameter fails the load with a message that
//! names it.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::engine::dlib::{DetectorKind, DEFAULT_CNN_MIN_SIDE};
use crate::engine::onnx::OnnxSettings;
use crate::error::{Error, Result};
use crate::gpu::Capability;
use crate::pipeline::image::PixelFormat;
use crate::sequence::Limits;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    Dlib,
    Onnx,
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub engine: EngineKind,
    pub detector: DetectorKind,
    /// The CNN detector skips images with a smaller side (0: runs on all).
    pub cnn_min_side: u32,
    /// Absolute: relative values are resolved against the model directory.
    pub weights_dir: PathBuf,
    pub gallery_dir: PathBuf,
    pub pixel_format: PixelFormat,
    /// `None`: the engine's own default (0.6 for dlib's Euclidean distance, 0.5 for
    /// the onnx engine's 1 - cosine).
    pub match_threshold: Option<f32>,
    pub max_image_pixels: u64,
    pub max_faces_per_image: usize,
    pub max_gallery_size: usize,
    pub return_embeddings: bool,
    /// Whether inputs carry a leading batch dimension (max_batch_size > 0).
    pub batched: bool,
    /// Present when the model uses Triton's sequence batcher.
    pub sequence: Option<SequenceConfig>,
    /// The ONNX engine's models and pre-processing (used when engine = onnx).
    pub onnx: OnnxSettings,
    /// KIND_GPU instances refuse devices below this.
    pub min_compute_capability: Capability,
}

/// How a stateful model receives its sequence controls, from the config's
/// `sequence_batching { control_input [...] }`, plus the state limits.
#[derive(Clone, Debug, PartialEq)]
pub struct SequenceConfig {
    pub start: Option<Control>,
    pub end: Option<Control>,
    pub ready: Option<Control>,
    /// CORRID tensor name and whether it is TYPE_STRING (else TYPE_UINT64).
    pub corrid: Option<(String, bool)>,
    pub limits: Limits,
}

/// A boolean control tensor and the value that means true.
#[derive(Clone, Debug, PartialEq)]
pub struct Control {
    pub name: String,
    pub truth: Truth,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Truth {
    Int32(i32),
    Fp32(f32),
    Bool(bool),
}

/// Every parameter the backend understands, with its default.
pub const PARAMETERS: &[(&str, &str)] = &[
    ("engine", "dlib"),
    ("detector", "hog"),
    (
        "cnn_min_side",
        "32 (detector cnn; 0 = run the CNN on every image)",
    ),
    ("weights_dir", "weights"),
    ("gallery_dir", "gallery"),
    ("pixel_format", "RGB"),
    ("match_threshold", "(engine default: 0.6 dlib, 0.5 onnx)"),
    ("max_image_pixels", "40000000"),
    ("max_faces_per_image", "64"),
    ("max_gallery_size", "10000"),
    ("return_embeddings", "false"),
    (
        "detector_model",
        "(onnx) detector.onnx, relative to the version folder",
    ),
    ("landmark_model", "(onnx) none"),
    ("embedder_model", "(onnx) embedder.onnx"),
    ("detector_family", "(onnx) ultraface"),
    ("detector_input_size", "(onnx) from the model, e.g. 320x240"),
    ("detector_mean", "(onnx) 127"),
    ("detector_scale", "(onnx) 0.0078125"),
    ("detector_channels", "(onnx) RGB"),
    ("detector_threshold", "(onnx) 0.7"),
    ("nms_iou", "(onnx) 0.3"),
    ("embedder_mean", "(onnx) 127"),
    ("embedder_scale", "(onnx) 0.0078125"),
    ("embedder_channels", "(onnx) BGR"),
    ("max_sequences", "1024 (sequence models)"),
    ("max_frames_per_sequence", "1000 (sequence models)"),
    ("min_compute_capability", "6.0 (KIND_GPU instances)"),
];

/// Triton's own default for max_sequence_idle_microseconds.
const DEFAULT_IDLE_US: u64 = 1_000_000;

/// Protobuf JSON writes 64-bit integers as strings; accept both.
fn json_u64(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// The sequence controls declared in `sequence_batching.control_input`.
fn sequence_controls(batching: &Value, limits: Limits) -> Result<SequenceConfig> {
    let mut cfg = SequenceConfig {
        start: None,
        end: None,
        ready: None,
        corrid: None,
        limits,
    };
    let inputs = batching.get("control_input").and_then(Value::as_array);
    for input in inputs.into_iter().flatten() {
        let name = input
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        for control in input
            .get("control")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let kind = control
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let truth = || -> Result<Control> {
                let pick = |key: &str| {
                    control
                        .get(key)
                        .and_then(Value::as_array)
                        .filter(|a| a.len() == 2)
                        .map(|a| a[1].clone())
                };
                let truth = if let Some(v) = pick("int32_false_true") {
                    Truth::Int32(v.as_i64().unwrap_or(1) as i32)
                } else if let Some(v) = pick("fp32_false_true") {
                    Truth::Fp32(v.as_f64().unwrap_or(1.0) as f32)
                } else if let Some(v) = pick("bool_false_true") {
                    Truth::Bool(v.as_bool().unwrap_or(true))
                } else {
                    return Err(Error::invalid(format!(
                        "sequence control `{name}` ({kind}) needs int32_false_true, fp32_false_true or bool_false_true"
                    )));
                };
                Ok(Control {
                    name: name.clone(),
                    truth,
                })
            };
            match kind {
                "CONTROL_SEQUENCE_START" => cfg.start = Some(truth()?),
                "CONTROL_SEQUENCE_END" => cfg.end = Some(truth()?),
                "CONTROL_SEQUENCE_READY" => cfg.ready = Some(truth()?),
                "CONTROL_SEQUENCE_CORRID" => {
                    let dtype = control
                        .get("data_type")
                        .and_then(Value::as_str)
                        .unwrap_or("TYPE_UINT64");
                    let string = match dtype {
                        "TYPE_STRING" => true,
                        "TYPE_UINT64" | "TYPE_INT64" | "TYPE_UINT32" | "TYPE_INT32" => false,
                        _ => {
                            return Err(Error::invalid(format!(
                                "sequence control `{name}` (CORRID) has data_type {dtype}; use TYPE_UINT64 or TYPE_STRING"
                            )))
                        }
                    };
                    cfg.corrid = Some((name.clone(), string));
                }
                _ => {}
            }
        }
    }
    Ok(cfg)
}

fn bad(key: &str, value: &str, expected: &str) -> Error {
    Error::invalid(format!(
        "model parameter `{key}` = {value:?} is invalid: expected {expected}"
    ))
}

fn parse_number(key: &str, v: &str) -> Result<f32> {
    v.trim()
        .parse::<f32>()
        .ok()
        .filter(|n| n.is_finite())
        .ok_or_else(|| bad(key, v, "a number"))
}

fn parse_channels(key: &str, v: &str) -> Result<bool> {
    PixelFormat::parse(v)
        .map(|f| f == PixelFormat::Rgb)
        .ok_or_else(|| bad(key, v, "\"RGB\" or \"BGR\""))
}

/// "320x240" -> (320, 240).
fn parse_size(key: &str, v: &str) -> Result<(usize, usize)> {
    let (w, h) = v
        .trim()
        .split_once(['x', 'X'])
        .ok_or_else(|| bad(key, v, "WIDTHxHEIGHT"))?;
    match (w.parse::<usize>(), h.parse::<usize>()) {
        (Ok(w), Ok(h)) if w > 0 && h > 0 => Ok((w, h)),
        _ => Err(bad(key, v, "WIDTHxHEIGHT")),
    }
}

fn parse_positive<T: std::str::FromStr + PartialOrd + Default>(key: &str, v: &str) -> Result<T> {
    match v.trim().parse::<T>() {
        Ok(n) if n > T::default() => Ok(n),
        _ => Err(bad(key, v, "a positive number")),
    }
}

/// `parameters { key: "k" value: { string_value: "v" } }` as (k, v) pairs.
fn parameters(config: &Value) -> Result<Vec<(String, String)>> {
    let Some(map) = config.get("parameters").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    map.iter()
        .map(|(k, v)| {
            v.get("string_value")
                .and_then(Value::as_str)
                .map(|s| (k.clone(), s.to_string()))
                .ok_or_else(|| Error::invalid(format!("model parameter `{k}` has no string_value")))
        })
        .collect()
}

impl Settings {
    /// `model_dir` holds config.pbtxt; `version_dir` is the version folder
    /// that ONNX model paths are relative to.
    pub fn from_config(config: &Value, model_dir: &Path, version_dir: &Path) -> Result<Self> {
        let mut s = Settings {
            engine: EngineKind::Dlib,
            detector: DetectorKind::Hog,
            cnn_min_side: DEFAULT_CNN_MIN_SIDE,
            weights_dir: model_dir.join("weights"),
            gallery_dir: model_dir.join("gallery"),
            pixel_format: PixelFormat::Rgb,
            match_threshold: None,
            max_image_pixels: 40_000_000,
            max_faces_per_image: 64,
            max_gallery_size: 10_000,
            return_embeddings: false,
            batched: config
                .get("max_batch_size")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                > 0,
            sequence: None,
            onnx: OnnxSettings::defaults(version_dir),
            min_compute_capability: Capability::DEFAULT_MIN,
        };
        let mut limits = Limits {
            max_sequences: 1024,
            max_frames: 1000,
            idle_timeout: std::time::Duration::from_micros(DEFAULT_IDLE_US),
        };
        for (key, v) in parameters(config)? {
            let value = v.trim();
            match key.as_str() {
                "engine" => {
                    s.engine = match value.to_ascii_lowercase().as_str() {
                        "dlib" => EngineKind::Dlib,
                        "onnx" => EngineKind::Onnx,
                        _ => return Err(bad(&key, value, "\"dlib\" or \"onnx\"")),
                    }
                }
                "detector" => {
                    s.detector = DetectorKind::parse(value)
                        .ok_or_else(|| bad(&key, value, "\"hog\" or \"cnn\""))?
                }
                "cnn_min_side" => {
                    s.cnn_min_side = value
                        .parse()
                        .map_err(|_| bad(&key, value, "a number of pixels (0: no minimum)"))?
                }
                "weights_dir" => s.weights_dir = model_dir.join(value),
                "gallery_dir" => s.gallery_dir = model_dir.join(value),
                "pixel_format" => {
                    s.pixel_format = PixelFormat::parse(value)
                        .ok_or_else(|| bad(&key, value, "\"RGB\" or \"BGR\""))?
                }
                "match_threshold" => s.match_threshold = Some(parse_positive(&key, value)?),
                "max_image_pixels" => s.max_image_pixels = parse_positive(&key, value)?,
                "max_faces_per_image" => s.max_faces_per_image = parse_positive(&key, value)?,
                "max_gallery_size" => s.max_gallery_size = parse_positive(&key, value)?,
                "detector_model" => s.onnx.detector_model = version_dir.join(value),
                "landmark_model" => s.onnx.landmark_model = Some(version_dir.join(value)),
                "embedder_model" => s.onnx.embedder_model = version_dir.join(value),
                "detector_family" => {
                    if !value.eq_ignore_ascii_case("ultraface") {
                        return Err(bad(
                            &key,
                            value,
                            "\"ultraface\" (UltraFace / RFB detectors)",
                        ));
                    }
                }
                "detector_input_size" => s.onnx.detector_size = Some(parse_size(&key, value)?),
                "detector_mean" => s.onnx.detector_norm.mean = parse_number(&key, value)?,
                "detector_scale" => s.onnx.detector_norm.scale = parse_number(&key, value)?,
                "detector_channels" => s.onnx.detector_norm.rgb = parse_channels(&key, value)?,
                "detector_threshold" => s.onnx.score_threshold = parse_positive(&key, value)?,
                "nms_iou" => s.onnx.nms_iou = parse_positive(&key, value)?,
                "embedder_mean" => s.onnx.embedder_norm.mean = parse_number(&key, value)?,
                "embedder_scale" => s.onnx.embedder_norm.scale = parse_number(&key, value)?,
                "embedder_channels" => s.onnx.embedder_norm.rgb = parse_channels(&key, value)?,
                "max_sequences" => limits.max_sequences = parse_positive(&key, value)?,
                "max_frames_per_sequence" => limits.max_frames = parse_positive(&key, value)?,
                "min_compute_capability" => {
                    s.min_compute_capability = value
                        .parse()
                        .map_err(|()| bad(&key, value, "MAJOR.MINOR, e.g. \"6.0\""))?
                }
                "return_embeddings" => {
                    s.return_embeddings = match value.to_ascii_lowercase().as_str() {
                        "true" | "1" | "yes" => true,
                        "false" | "0" | "no" => false,
                        _ => return Err(bad(&key, value, "true or false")),
                    }
                }
                _ => {
                    let known: Vec<_> = PARAMETERS.iter().map(|(k, _)| *k).collect();
                    return Err(Error::invalid(format!(
                        "unknown model parameter `{key}`; known parameters: {}",
                        known.join(", ")
                    )));
                }
            }
        }
        if let Some(batching) = config.get("sequence_batching") {
            let idle = batching
                .get("max_sequence_idle_microseconds")
                .and_then(json_u64)
                .filter(|us| *us > 0)
                .unwrap_or(DEFAULT_IDLE_US);
            limits.idle_timeout = std::time::Duration::from_micros(idle);
            s.sequence = Some(sequence_controls(batching, limits)?);
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(pairs: &[(&str, &str)]) -> Value {
        let mut p = serde_json::Map::new();
        for (k, v) in pairs {
            p.insert(k.to_string(), json!({ "string_value": v }));
        }
        json!({ "max_batch_size": 8, "parameters": p })
    }

    #[test]
    fn defaults() {
        let s = Settings::from_config(&json!({}), Path::new("/m"), Path::new("/m/1")).unwrap();
        assert_eq!(s.weights_dir, Path::new("/m/weights"));
        assert_eq!(s.gallery_dir, Path::new("/m/gallery"));
        assert_eq!(s.detector, DetectorKind::Hog);
        assert_eq!(s.max_image_pixels, 40_000_000);
        assert!(!s.batched);
        assert!(s.match_threshold.is_none());
    }

    #[test]
    fn values_and_paths() {
        let s = Settings::from_config(
            &params(&[
                ("detector", "cnn"),
                ("weights_dir", "/abs/w"),
                ("gallery_dir", "g2"),
                ("pixel_format", "bgr"),
                ("match_threshold", "0.5"),
                ("return_embeddings", "true"),
                ("max_faces_per_image", "3"),
            ]),
            Path::new("/m"),
            Path::new("/m/1"),
        )
        .unwrap();
        assert_eq!(s.detector, DetectorKind::Cnn);
        assert_eq!(s.weights_dir, Path::new("/abs/w"));
        assert_eq!(s.gallery_dir, Path::new("/m/g2"));
        assert_eq!(s.pixel_format, PixelFormat::Bgr);
        assert_eq!(s.match_threshold, Some(0.5));
        assert!(s.return_embeddings && s.batched);
        assert_eq!(s.max_faces_per_image, 3);
    }

    #[test]
    fn onnx_engine_parameters() {
        let s = Settings::from_config(
            &params(&[
                ("engine", "onnx"),
                ("detector_model", "det.onnx"),
                ("landmark_model", "lm.onnx"),
                ("embedder_model", "/abs/emb.onnx"),
                ("detector_input_size", "640x480"),
                ("embedder_channels", "rgb"),
                ("detector_threshold", "0.5"),
            ]),
            Path::new("/m"),
            Path::new("/m/1"),
        )
        .unwrap();
        assert_eq!(s.engine, EngineKind::Onnx);
        assert_eq!(s.onnx.detector_model, Path::new("/m/1/det.onnx"));
        assert_eq!(
            s.onnx.landmark_model.as_deref(),
            Some(Path::new("/m/1/lm.onnx"))
        );
        assert_eq!(s.onnx.embedder_model, Path::new("/abs/emb.onnx"));
        assert_eq!(s.onnx.detector_size, Some((640, 480)));
        assert!(s.onnx.embedder_norm.rgb && s.onnx.detector_norm.rgb);
        assert_eq!(s.onnx.score_threshold, 0.5);
        let e = Settings::from_config(
            &params(&[("detector_input_size", "big")]),
            Path::new("/m"),
            Path::new("/m/1"),
        )
        .unwrap_err();
        assert!(e.message().contains("detector_input_size"));
    }

    #[test]
    fn sequence_batching_controls() {
        let config = json!({
            "max_batch_size": 4,
            "parameters": { "max_sequences": { "string_value": "7" } },
            "sequence_batching": {
                "max_sequence_idle_microseconds": "2500000",
                "control_input": [
                    { "name": "START", "control": [{ "kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1] }] },
                    { "name": "END", "control": [{ "kind": "CONTROL_SEQUENCE_END", "int32_false_true": [0, 1] }] },
                    { "name": "READY", "control": [{ "kind": "CONTROL_SEQUENCE_READY", "bool_false_true": [false, true] }] },
                    { "name": "CORRID", "control": [{ "kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_STRING" }] }
                ]
            }
        });
        let s = Settings::from_config(&config, Path::new("/m"), Path::new("/m/1")).unwrap();
        let q = s.sequence.unwrap();
        assert_eq!(
            q.start.unwrap(),
            Control {
                name: "START".into(),
                truth: Truth::Int32(1)
            }
        );
        assert_eq!(q.ready.unwrap().truth, Truth::Bool(true));
        assert_eq!(q.end.unwrap().name, "END");
        assert_eq!(q.corrid, Some(("CORRID".into(), true)));
        assert_eq!(q.limits.max_sequences, 7);
        assert_eq!(
            q.limits.idle_timeout,
            std::time::Duration::from_micros(2_500_000)
        );
        assert!(
            Settings::from_config(&json!({}), Path::new("/m"), Path::new("/m/1"))
                .unwrap()
                .sequence
                .is_none()
        );
    }

    #[test]
    fn min_compute_capability() {
        let at = |v: &str| {
            let config = params(&[("min_compute_capability", v)]);
            Settings::from_config(&config, Path::new("/m"), Path::new("/m/1"))
                .unwrap()
                .min_compute_capability
                .to_string()
        };
        let default = Settings::from_config(&json!({}), Path::new("/m"), Path::new("/m/1"));
        assert_eq!(default.unwrap().min_compute_capability.to_string(), "6.0");
        assert_eq!(at("7.5"), "7.5");
        assert_eq!(at("8"), "8.0");
    }

    #[test]
    fn bad_values_name_the_parameter() {
        for (k, v) in [
            ("detector", "fast"),
            ("max_image_pixels", "-1"),
            ("max_image_pixels", "lots"),
            ("match_threshold", "0"),
            ("return_embeddings", "maybe"),
            ("pixel_format", "RGBA"),
            ("engine", "magic"),
            ("min_compute_capability", "pascal"),
            ("colour", "red"),
        ] {
            let e = Settings::from_config(&params(&[(k, v)]), Path::new("/m"), Path::new("/m/1"))
                .unwrap_err();
            assert!(e.message().contains(k), "{k}: {e}");
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput);
        }
    }
}
