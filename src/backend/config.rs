//! The model configuration, parsed once at model load into typed settings with
//! defaults. A bad or unknown parameter fails the load with a message that
//! names it.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::engine::dlib::DetectorKind;
use crate::error::{Error, Result};
use crate::pipeline::image::PixelFormat;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    Dlib,
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub engine: EngineKind,
    pub detector: DetectorKind,
    /// Absolute: relative values are resolved against the model directory.
    pub weights_dir: PathBuf,
    pub gallery_dir: PathBuf,
    pub pixel_format: PixelFormat,
    /// `None`: the engine's own default (0.6 for dlib's Euclidean distance).
    pub match_threshold: Option<f32>,
    pub max_image_pixels: u64,
    pub max_faces_per_image: usize,
    pub max_gallery_size: usize,
    pub return_embeddings: bool,
    /// Whether inputs carry a leading batch dimension (max_batch_size > 0).
    pub batched: bool,
}

/// Every parameter the backend understands, with its default.
pub const PARAMETERS: &[(&str, &str)] = &[
    ("engine", "dlib"),
    ("detector", "hog"),
    ("weights_dir", "weights"),
    ("gallery_dir", "gallery"),
    ("pixel_format", "RGB"),
    ("match_threshold", "(engine default: 0.6 for dlib)"),
    ("max_image_pixels", "40000000"),
    ("max_faces_per_image", "64"),
    ("max_gallery_size", "10000"),
    ("return_embeddings", "false"),
];

fn bad(key: &str, value: &str, expected: &str) -> Error {
    Error::invalid(format!(
        "model parameter `{key}` = {value:?} is invalid: expected {expected}"
    ))
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
    pub fn from_config(config: &Value, model_dir: &Path) -> Result<Self> {
        let mut s = Settings {
            engine: EngineKind::Dlib,
            detector: DetectorKind::Hog,
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
        };
        for (key, v) in parameters(config)? {
            let value = v.trim();
            match key.as_str() {
                "engine" => {
                    s.engine = match value.to_ascii_lowercase().as_str() {
                        "dlib" => EngineKind::Dlib,
                        _ => return Err(bad(&key, value, "\"dlib\"")),
                    }
                }
                "detector" => {
                    s.detector = DetectorKind::parse(value)
                        .ok_or_else(|| bad(&key, value, "\"hog\" or \"cnn\""))?
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
        let s = Settings::from_config(&json!({}), Path::new("/m")).unwrap();
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
    fn bad_values_name_the_parameter() {
        for (k, v) in [
            ("detector", "fast"),
            ("max_image_pixels", "-1"),
            ("max_image_pixels", "lots"),
            ("match_threshold", "0"),
            ("return_embeddings", "maybe"),
            ("pixel_format", "RGBA"),
            ("engine", "magic"),
            ("colour", "red"),
        ] {
            let e = Settings::from_config(&params(&[(k, v)]), Path::new("/m")).unwrap_err();
            assert!(e.message().contains(k), "{k}: {e}");
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput);
        }
    }
}
