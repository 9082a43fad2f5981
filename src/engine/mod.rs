//! Face engines behind `pipeline::Engine`. They know nothing of Triton.

pub mod dlib;
pub mod onnx;

use std::path::Path;

use crate::error::{Error, Result};

/// A weights file that must exist; the error names it and how to get it.
pub(crate) fn require_file(dir: &Path, file: &str) -> Result<std::path::PathBuf> {
    let path = dir.join(file);
    if !path.is_file() {
        return Err(Error::unavailable(format!(
            "model file {} not found (scripts/setup.sh installs the sample weights; \
             set the `weights_dir` parameter to the folder holding them)",
            path.display()
        )));
    }
    Ok(path)
}
