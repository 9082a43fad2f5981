#!/usr/bin/env bash
# The release build every entry point runs (after scripts/setup.sh, with assets/env.sh
# sourced): the library and examples/ (tools the tests and benches run), its debug
# information split off, the library put into each sample model's folder, and the models made
# from others (scripts/models.sh: dlib's ResNet as ONNX, the int8 copies).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "== cargo build --release --lib --examples"
# The same targets for every script: one set of dependency features, so running one
# script after another rebuilds nothing.
cargo build --release --lib --examples
bash scripts/split_debug.sh target/release/libtriton_face.so
for model in model_repository/*/; do
    [ -f "$model/config.pbtxt" ] && install -m 0755 target/release/libtriton_face.so "$model/libtriton_face.so"
done
bash scripts/models.sh
