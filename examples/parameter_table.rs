//! Regenerates docs/parameters.md's model-parameter tables from the one declaration of
//! the parameters (`src/backend/parameters.rs`): `cargo run --release
//! --example parameter_table`. A unit test fails while the file differs.

use std::path::Path;

use triton_face::backend::parameters::readme_with_tables;

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/parameters.md");
    let fail = |e: String| -> ! {
        eprintln!("{}: {e}", path.display());
        std::process::exit(1)
    };
    let readme = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(e.to_string()));
    let updated = readme_with_tables(&readme).unwrap_or_else(|e| fail(e));
    if updated == readme {
        println!("{}: parameter tables already up to date", path.display());
        return;
    }
    std::fs::write(&path, updated).unwrap_or_else(|e| fail(e.to_string()));
    println!("{}: parameter tables regenerated", path.display());
}
