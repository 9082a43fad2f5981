//! The model configuration, parsed once at model load into typed settings:
//! the parameters through their table (`parameters.rs`), batching and the
//! sequence controls here. Anything malformed fails the load with a message
//! that names it; nothing falls back to a default silently.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::backend::parameters::{self, Draft, PARAMETERS};
use crate::backend::settings::{Control, EngineKind, SequenceConfig, Settings, Truth};
use crate::engine::dlib::DlibSettings;
use crate::engine::onnx::OnnxSettings;
use crate::error::{Error, Result};
use crate::gallery::store::{PgSettings, StoreKind};
use crate::gpu::Capability;
use crate::pipeline::image::PixelFormat;
use crate::sequence::{Cadence, Limits};

/// Triton's own default for max_sequence_idle_microseconds.
const DEFAULT_IDLE_US: u64 = 1_000_000;

/// Protobuf JSON writes 64-bit integers as strings; accept both.
fn json_u64(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// The unsigned integer `config[key]`, 0 when absent (protobuf's default).
fn config_u64(config: &Value, section: &str, key: &str) -> Result<u64> {
    match config.get(key) {
        None => Ok(0),
        Some(v) => json_u64(v).ok_or_else(|| {
            Error::invalid(format!(
                "{section}{key} = {v} is invalid: expected an unsigned integer"
            ))
        }),
    }
}

fn bad_control(name: &str, what: impl std::fmt::Display) -> Error {
    Error::invalid(format!("sequence_batching control_input `{name}`: {what}"))
}

/// The sequence controls declared in `sequence_batching.control_input`.
fn sequence_controls(batching: &Value, limits: Limits, cadence: Cadence) -> Result<SequenceConfig> {
    let mut cfg = SequenceConfig {
        start: None,
        end: None,
        ready: None,
        corrid: None,
        limits,
        cadence,
    };
    let inputs = match batching.get("control_input") {
        None => return Ok(cfg),
        Some(v) => v
            .as_array()
            .ok_or_else(|| Error::invalid("sequence_batching control_input is not a list"))?,
    };
    for input in inputs {
        let name = input
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::invalid("sequence_batching: a control_input has no name"))?;
        let controls = input
            .get("control")
            .and_then(Value::as_array)
            .ok_or_else(|| bad_control(name, "no control list"))?;
        for control in controls {
            add_control(&mut cfg, name, control)?;
        }
    }
    Ok(cfg)
}

/// One `control { kind ... }` of the control input `name`, into `cfg`.
fn add_control(cfg: &mut SequenceConfig, name: &str, control: &Value) -> Result<()> {
    let kind = control
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| bad_control(name, "a control has no kind"))?;
    let slot = match kind {
        "CONTROL_SEQUENCE_START" => &mut cfg.start,
        "CONTROL_SEQUENCE_END" => &mut cfg.end,
        "CONTROL_SEQUENCE_READY" => &mut cfg.ready,
        "CONTROL_SEQUENCE_CORRID" => {
            cfg.corrid = Some((name.to_string(), corrid_is_string(name, kind, control)?));
            return Ok(());
        }
        _ => return Err(bad_control(name, format!("unknown kind {kind}"))),
    };
    *slot = Some(Control {
        name: name.to_string(),
        truth: truth(name, kind, control)?,
    });
    Ok(())
}

/// The value that means true, from the one `*_false_true` pair the control has.
fn truth(name: &str, kind: &str, control: &Value) -> Result<Truth> {
    const PAIRS: [&str; 3] = ["int32_false_true", "fp32_false_true", "bool_false_true"];
    // Triton prints every field: the unused pairs are there, empty.
    let given: Vec<(&str, &Vec<Value>)> = PAIRS
        .iter()
        .filter_map(|&key| Some((key, control.get(key)?.as_array()?)))
        .filter(|(_, pair)| !pair.is_empty())
        .collect();
    let [(key, pair)] = given[..] else {
        let what = format!("{kind} needs exactly one of {}", PAIRS.join(", "));
        return Err(bad_control(name, what));
    };
    let [_, yes] = &pair[..] else {
        return Err(bad_control(
            name,
            format!(
                "{kind} {key} must be [false, true], not {}",
                Value::Array(pair.clone())
            ),
        ));
    };
    let truth = match key {
        "int32_false_true" => yes
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(Truth::Int32),
        "fp32_false_true" => yes.as_f64().map(|x| Truth::Fp32(x as f32)),
        _ => yes.as_bool().map(Truth::Bool),
    };
    truth.ok_or_else(|| {
        bad_control(
            name,
            format!("{kind} {key}: true value {yes} is not of its type"),
        )
    })
}

/// Whether the CORRID tensor is TYPE_STRING (else an integer).
fn corrid_is_string(name: &str, kind: &str, control: &Value) -> Result<bool> {
    match control.get("data_type").and_then(Value::as_str) {
        Some("TYPE_STRING") => Ok(true),
        Some("TYPE_UINT64" | "TYPE_INT64" | "TYPE_UINT32" | "TYPE_INT32") => Ok(false),
        other => Err(bad_control(
            name,
            format!(
                "{kind} data_type {}; use TYPE_UINT64 or TYPE_STRING",
                other.unwrap_or("missing")
            ),
        )),
    }
}

/// `parameters { key: "k" value: { string_value: "v" } }` as (k, v) pairs.
fn config_parameters(config: &Value) -> Result<Vec<(String, String)>> {
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
        let mut draft = Draft {
            settings: Settings::unset(version_dir),
            limits: Limits {
                max_sequences: 0,
                max_frames: 0,
                idle_timeout: Duration::from_micros(DEFAULT_IDLE_US),
                retire_after: 0,
                max_tracks: 0,
                shadow_rounds: 0,
            },
            cadence: Cadence::EVERY_FRAME,
            model_dir,
            version_dir,
        };
        for p in PARAMETERS {
            if let parameters::Default::Value(v) = p.default {
                p.apply(&mut draft, v)
                    .map_err(|e| Error::internal(format!("default of {}", e.message())))?;
            }
        }
        for (key, value) in config_parameters(config)? {
            let p = parameters::find(&key)?;
            p.apply(&mut draft, &value)?;
            draft
                .settings
                .given
                .push((p.name, value.trim().to_string()));
        }
        let Draft {
            mut settings,
            mut limits,
            cadence,
            ..
        } = draft;
        if settings.engine == EngineKind::Onnx && settings.onnx.int8 {
            settings.onnx.take_int8_copies()?;
        }
        let max_batch = config_u64(config, "", "max_batch_size")?;
        settings.batched = max_batch > 0;
        settings.response_cache = (config.get("response_cache"))
            .and_then(|c| c.get("enable"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        // An Execute holds at most max_batch_size images: threads beyond that
        // would never get work, and each holds a copy of the engine.
        let most = usize::try_from(max_batch.max(1)).unwrap_or(usize::MAX);
        settings.batch_threads = settings.batch_threads.clamp(1, most);
        settings.onnx.max_frames = most.div_ceil(settings.batch_threads);
        if let Some(batching) = config.get("sequence_batching") {
            let key = "max_sequence_idle_microseconds";
            // 0 (or absent) is Triton's "unset": its own default holds.
            let idle = config_u64(batching, "sequence_batching.", key)?;
            if idle > 0 {
                limits.idle_timeout = Duration::from_micros(idle);
            }
            settings.sequence = Some(sequence_controls(batching, limits, cadence)?);
        }
        Ok(settings)
    }

    /// Before any parameter: the table's defaults overwrite every field that
    /// a parameter sets, so the values here are placeholders.
    fn unset(version_dir: &Path) -> Self {
        Settings {
            engine: EngineKind::Dlib,
            dlib: DlibSettings::default(),
            weights_dir: PathBuf::new(),
            gallery_dir: PathBuf::new(),
            gallery_store: StoreKind::Sqlite,
            gallery_key_file: None,
            key_rate: None,
            key_burst: None,
            distance_decimals: 0,
            postgres: PgSettings::default(),
            pixel_format: PixelFormat::Rgb,
            match_threshold: None,
            max_image_pixels: 0,
            max_faces_per_image: 0,
            min_face_size: 0,
            batch_threads: 0,
            decode_threads: None,
            max_gallery_size: 0,
            retention_days: None,
            return_embeddings: false,
            batched: false,
            response_cache: false,
            sequence: None,
            onnx: OnnxSettings::defaults(version_dir),
            min_compute_capability: Capability::DEFAULT_MIN,
            given: Vec::new(),
        }
    }

    /// Every parameter's value, `(default)` marking those the config does
    /// not set: `engine=onnx; detector=hog (default); ...`.
    pub fn describe_parameters(&self) -> String {
        let values: Vec<String> = PARAMETERS
            .iter()
            .map(
                |p| match self.given.iter().find(|(name, _)| *name == p.name) {
                    Some((_, value)) => format!("{}={value}", p.name),
                    None => {
                        let (parameters::Default::Value(v) | parameters::Default::Unset(v)) =
                            p.default;
                        format!("{}={} (default)", p.name, v.replace('`', ""))
                    }
                },
            )
            .collect();
        values.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::parameters::Kind;
    use crate::engine::dlib::DetectorKind;
    use crate::error::ErrorKind;
    use serde_json::json;

    fn params(pairs: &[(&str, &str)]) -> Value {
        let mut p = serde_json::Map::new();
        for (k, v) in pairs {
            p.insert(k.to_string(), json!({ "string_value": v }));
        }
        json!({ "max_batch_size": 8, "parameters": p })
    }

    fn load(config: &Value) -> Result<Settings> {
        Settings::from_config(config, Path::new("/m"), Path::new("/m/1"))
    }

    #[test]
    fn batch_threads_never_exceed_the_batch() {
        let threads = |n: &str, max_batch: u64| {
            let mut config = params(&[("batch_threads", n)]);
            config["max_batch_size"] = json!(max_batch);
            load(&config).unwrap().batch_threads
        };
        assert_eq!(threads("2", 8), 2);
        assert_eq!(threads("16", 4), 4);
        assert_eq!(
            threads("3", 0),
            1,
            "an unbatched model gets one image per Execute"
        );
        assert_eq!(load(&json!({})).unwrap().batch_threads, 1);
    }

    #[test]
    fn defaults() {
        let s = load(&json!({})).unwrap();
        assert_eq!(s.engine, EngineKind::Dlib);
        assert_eq!(s.dlib.detector, DetectorKind::Hog);
        assert_eq!(s.dlib.cnn_min_side, 32);
        assert_eq!(s.weights_dir, Path::new("/m/weights"));
        assert_eq!(s.gallery_dir, Path::new("/m/gallery"));
        assert_eq!(s.gallery_store, StoreKind::Sqlite);
        assert_eq!(s.pixel_format, PixelFormat::Rgb);
        assert!(s.match_threshold.is_none());
        assert_eq!(s.max_image_pixels, 40_000_000);
        assert_eq!(s.max_faces_per_image, 64);
        assert_eq!(s.max_gallery_size, 1_000_000);
        assert!(!s.return_embeddings && !s.batched && s.sequence.is_none());
        assert_eq!(s.min_compute_capability, Capability::DEFAULT_MIN);
        // The ONNX engine's own defaults and the table's agree; an Execute
        // without a batch dimension brings one frame.
        let one_frame = OnnxSettings {
            max_frames: 1,
            ..OnnxSettings::defaults(Path::new("/m/1"))
        };
        assert_eq!(s.onnx, one_frame);
    }

    #[test]
    fn described_parameters_mark_defaults() {
        let s = load(&params(&[("detector", " cnn "), ("max_sequences", "7")])).unwrap();
        let text = s.describe_parameters();
        assert!(
            text.starts_with("engine=dlib (default); detector=cnn; "),
            "{text}"
        );
        assert!(text.contains("; max_sequences=7; "), "{text}");
        assert!(text.contains("; landmark_model=none (default); "), "{text}");
        assert!(text.contains("match_threshold=the engine's: 0.6 (dlib), 0.5 (onnx) (default)"));
        assert_eq!(text.matches(" (default)").count(), PARAMETERS.len() - 2);
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
        assert_eq!(s.dlib.detector, DetectorKind::Cnn);
        assert_eq!(s.weights_dir, Path::new("/abs/w"));
        assert_eq!(s.gallery_dir, Path::new("/m/g2"));
        assert_eq!(s.pixel_format, PixelFormat::Bgr);
        assert_eq!(s.match_threshold, Some(0.5));
        assert!(s.return_embeddings && s.batched);
        assert_eq!(s.max_faces_per_image, 3);
    }

    #[test]
    fn int8_takes_the_copies_there_are_and_refuses_none() {
        let dir = tempfile::tempdir().unwrap();
        let version = dir.path().join("1");
        std::fs::create_dir(&version).unwrap();
        let load = || {
            Settings::from_config(
                &params(&[
                    ("engine", "onnx"),
                    ("detector_model", "det.onnx"),
                    ("landmark_model", "lm.onnx"),
                    ("embedder_model", "emb.onnx"),
                    ("model_precision", "int8"),
                ]),
                dir.path(),
                &version,
            )
        };
        let e = load().err().unwrap().to_string();
        assert!(
            e.contains("no int8 copy") && e.contains("emb.int8.onnx"),
            "{e}"
        );
        std::fs::write(version.join("emb.int8.onnx"), b"").unwrap();
        let s = load().unwrap();
        assert_eq!(s.onnx.embedder_model, version.join("emb.int8.onnx"));
        assert_eq!(
            s.onnx.detector_model,
            version.join("det.onnx"),
            "no copy: float"
        );
        let tract = Settings::from_config(
            &params(&[
                ("engine", "onnx"),
                ("embedder_model", "emb.onnx"),
                ("model_precision", "int8"),
                ("runtime", "tract"),
            ]),
            dir.path(),
            &version,
        );
        assert!(tract
            .err()
            .unwrap()
            .to_string()
            .contains("runs on onnxruntime"));
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
        assert_eq!(s.onnx.detector.size, Some((640, 480)));
        assert!(s.onnx.embedder.norm.rgb && s.onnx.detector.rgb.is_none());
        assert_eq!(s.onnx.detector.threshold, Some(0.5));
        assert_eq!(s.onnx.detector_family, None);
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

    /// A value that is not of `kind`, and one that is.
    fn bad_and_good(kind: Kind) -> (&'static str, &'static str) {
        match kind {
            Kind::Choice(words) => ("magic", words[0]),
            Kind::PositiveInteger => ("0", "12"),
            Kind::PositiveIntegers => ("1,0", "1,4, 8"),
            Kind::UnsignedInteger => ("-1", "0"),
            Kind::PositiveNumber => ("0", "0.25"),
            Kind::Number => ("lots", "-1.5"),
            Kind::Numbers => ("1,2", "104,117,123"),
            Kind::Points => ("1,2,3", "47,46,100,46,74,76,50,103,97,103"),
            Kind::Bool => ("maybe", "no"),
            Kind::Path => ("", "a/b"),
            Kind::Size => ("640x", "640x480"),
            Kind::Version => ("pascal", "7.5"),
            Kind::EnvName => ("1-DSN", "MY_DSN"),
            Kind::Text => ("", "shared"),
        }
    }

    #[test]
    fn every_parameter_refuses_a_bad_value_naming_it() {
        for p in PARAMETERS {
            let (bad, good) = bad_and_good(p.kind);
            let e = load(&params(&[(p.name, bad)])).unwrap_err();
            assert!(
                e.message().contains(&format!("`{}`", p.name)),
                "{}: {e}",
                p.name
            );
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{}", p.name);
            load(&params(&[(p.name, good)])).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        }
    }

    #[test]
    fn choices_are_accepted_in_any_case() {
        for p in PARAMETERS {
            if let Kind::Choice(words) = p.kind {
                for word in words {
                    for v in [word.to_string(), word.to_ascii_uppercase()] {
                        load(&params(&[(p.name, v.as_str())])).unwrap_or_else(|e| panic!("{e}"));
                    }
                }
            }
        }
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
            ("cnn_min_side", "4294967296"),
            ("weights_dir", "  "),
            ("detector_input_size", "0x240"),
            ("detector_mean", "inf"),
            ("colour", "red"),
        ] {
            let e = load(&params(&[(k, v)])).unwrap_err();
            assert!(e.message().contains(k), "{k}: {e}");
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
        }
        let e = load(&params(&[("colour", "red")])).unwrap_err();
        assert!(
            e.message()
                .contains("known parameters: engine, detector, cnn_min_side"),
            "{e}"
        );
    }

    fn with_controls(controls: Value) -> Result<Settings> {
        load(&json!({ "sequence_batching": { "control_input": controls } }))
    }

    #[test]
    fn malformed_sequence_controls_fail_naming_the_control() {
        let start = |control: Value| json!([{ "name": "START", "control": [control] }]);
        for (controls, says) in [
            (
                start(json!({ "kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, "one"] })),
                "START",
            ),
            (
                start(json!({ "kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 5e9] })),
                "START",
            ),
            (
                start(json!({ "kind": "CONTROL_SEQUENCE_START", "fp32_false_true": [0.0, true] })),
                "fp32_false_true",
            ),
            (
                start(json!({ "kind": "CONTROL_SEQUENCE_START", "bool_false_true": [false, 1] })),
                "bool_false_true",
            ),
            (
                start(json!({ "kind": "CONTROL_SEQUENCE_START", "int32_false_true": [1] })),
                "[false, true]",
            ),
            (
                start(json!({ "kind": "CONTROL_SEQUENCE_START" })),
                "needs exactly one",
            ),
            (
                start(
                    json!({ "kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1], "bool_false_true": [false, true] }),
                ),
                "needs exactly one",
            ),
            (start(json!({ "int32_false_true": [0, 1] })), "has no kind"),
            (
                start(json!({ "kind": "CONTROL_SEQUENCE_LATER", "int32_false_true": [0, 1] })),
                "unknown kind",
            ),
            (
                start(json!({ "kind": "CONTROL_SEQUENCE_CORRID" })),
                "data_type missing",
            ),
            (
                start(json!({ "kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_FP32" })),
                "TYPE_FP32",
            ),
            (json!([{ "name": "START" }]), "no control list"),
            (json!([{ "control": [] }]), "has no name"),
            (json!({ "name": "START" }), "not a list"),
        ] {
            let e = with_controls(controls.clone()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert!(e.message().contains(says), "{controls}: {e}");
            if says != "has no name" && says != "not a list" {
                assert!(e.message().contains("`START`"), "{controls}: {e}");
            }
        }
    }

    #[test]
    fn malformed_batching_numbers_fail() {
        let e = load(&json!({ "max_batch_size": "eight" })).unwrap_err();
        assert!(e.message().contains("max_batch_size"), "{e}");
        let config = json!({ "sequence_batching": { "max_sequence_idle_microseconds": -3 } });
        let e = load(&config).unwrap_err();
        assert!(
            e.message().contains("max_sequence_idle_microseconds"),
            "{e}"
        );
    }

    #[test]
    fn triton_prints_unused_pairs_empty() {
        // As the server's config JSON has them: every field present.
        let control = |kind: &str, int32: Value, fp32: Value, data_type: &str| {
            json!({ "kind": kind, "int32_false_true": int32, "fp32_false_true": fp32,
                    "bool_false_true": [], "data_type": data_type })
        };
        let s = with_controls(json!([
            { "name": "START", "control": [control("CONTROL_SEQUENCE_START", json!([]), json!([0.0, 2.5]), "TYPE_INVALID")] },
            { "name": "CORRID", "control": [control("CONTROL_SEQUENCE_CORRID", json!([]), json!([]), "TYPE_UINT64")] }
        ]))
        .unwrap();
        let q = s.sequence.unwrap();
        assert_eq!(q.start.unwrap().truth, Truth::Fp32(2.5));
        assert_eq!(q.corrid, Some(("CORRID".into(), false)));
        assert_eq!(
            q.limits.idle_timeout,
            Duration::from_micros(DEFAULT_IDLE_US)
        );
    }
}
