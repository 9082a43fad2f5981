#!/usr/bin/env bash
# All the tests, from a fresh machine: set-up, release build, Rust unit tests,
# then the end-to-end suite against the real tritonserver.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
# shellcheck source=/dev/null
source assets/env.sh

bash scripts/build.sh
echo "== unit tests (cargo test --release)"
cargo test --release
echo "== end-to-end tests (pytest, real tritonserver)"
"$PYTHON" -m pytest tests "$@"
