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
# Two workers, each taking whole modules (a module's servers and fixtures stay on one
# worker): the suite is half waiting on servers, so two workers on 2 cores take about 60%
# of the serial time. FACE_TEST_WORKERS=0 runs it serially; -n N after it overrides.
# --no-loadscope-reorder: modules in collection order, the longest first (conftest's
# LONGEST_FIRST); xdist's own order (most tests first) left the longest module, a single
# test, to run alone at the end (15 min instead of 11).
"$PYTHON" -m pytest tests -n "${FACE_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
