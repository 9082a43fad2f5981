//! The backend's settings for the `face_onnx` model, read from its
//! config.pbtxt through the backend's own parser: the engine bench and the
//! matching bench's real faces embed as the server does.

use std::path::Path;

use serde_json::{json, Map, Value};
use triton_face::backend::settings::{EngineKind, Settings};

/// The model whose parameters configure the ONNX engine here.
pub const ONNX_CONFIG: &str = "model_repository/face_onnx/config.pbtxt";

/// The `parameters { key: "K" value: { string_value: "V" } }` lines of a
/// config.pbtxt, in Triton's JSON form (what the backend parses at load).
pub fn pbtxt_parameters(text: &str) -> Map<String, Value> {
    fn quoted_after<'a>(line: &'a str, tag: &str) -> Option<&'a str> {
        let rest = &line[line.find(tag)? + tag.len()..];
        let rest = &rest[rest.find('"')? + 1..];
        Some(&rest[..rest.find('"')?])
    }
    text.lines()
        .map(str::trim)
        .filter(|line| line.starts_with("parameters"))
        .map(|line| {
            let key = quoted_after(line, "key:");
            let value = quoted_after(line, "string_value:");
            match (key, value) {
                (Some(k), Some(v)) => (k.to_string(), json!({ "string_value": v })),
                _ => panic!("{ONNX_CONFIG}: cannot read the parameter line `{line}`"),
            }
        })
        .collect()
}

/// The backend's settings for the `face_onnx` model, with its .onnx files
/// taken from `onnx_dir` instead of the version folder.
pub fn onnx_settings(onnx_dir: &Path) -> Settings {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = repo.join(ONNX_CONFIG);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let config = json!({ "max_batch_size": 8, "parameters": pbtxt_parameters(&text) });
    let settings = Settings::from_config(&config, path.parent().unwrap(), onnx_dir)
        .unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
    assert_eq!(
        settings.engine,
        EngineKind::Onnx,
        "{ONNX_CONFIG} is not engine onnx"
    );
    settings
}
