#!/usr/bin/env bash
# Bench-only set-up (called by scripts/bench.sh, never by setup.sh, test.sh or run.sh): the
# venv of the Python-backend reference models in benches/python_reference/, by default
# assets/bench-venv, created with the interpreter the tritonserver's Python stub embeds
# (Debian's python3.11; libpython3.11.so), so binary packages built or installed here load
# in the stub.
#   1. pip install -r benches/python_reference/requirements.txt (wheels; ~1 min)
#   2. dlib and face_recognition (benches/python_reference/requirements-dlib.txt): PyPI has no
#      Linux dlib wheel, so pip builds it from source with cmake, with nice -n 19 and
#      CMAKE_BUILD_PARALLEL_LEVEL=1 so the machine stays usable: 21 min on a busy 2-core
#      machine. pip keeps the built wheel in its cache: a recreated venv installs it in seconds.
# Idempotent: skipped when the venv's stamp matches both requirement files. Logs:
# assets/logs/bench-setup*.log.
# Environment:
#   FACE_BENCH_VENV=DIR       the venv (default assets/bench-venv)
#   FACE_BENCH_PYTHON=PATH    the interpreter (default /usr/bin/python3.11: the stub's)
set -euo pipefail

# shellcheck disable=SC2034  # read by lib.sh
LOG_TAG=bench-setup
# shellcheck source=scripts/lib.sh disable=SC1091  # followed with shellcheck -x
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

mkdir -p assets
# The real path: a venv records its own path (bin/activate), and assets/ may be a link.
BENCH_VENV="${FACE_BENCH_VENV:-$(cd assets && pwd -P)/bench-venv}"
BOOT="${FACE_BENCH_PYTHON:-/usr/bin/python3.11}"
REQ=benches/python_reference/requirements.txt
REQ_DLIB=benches/python_reference/requirements-dlib.txt
LOGS="$REPO_ROOT/assets/logs"
PY="$BENCH_VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check --no-input)
STAMP="$BENCH_VENV/.bench-requirements.sha256"
mkdir -p "$LOGS"

want="$(cat "$REQ" "$REQ_DLIB" | sha256sum | cut -d' ' -f1)"
if venv_current "$BENCH_VENV" "$STAMP" "$want"; then
    log "bench venv up to date (${BENCH_VENV#"$REPO_ROOT"/}; skip)"
    exit 0
fi

[ -x "$BOOT" ] || die "$BOOT not found: the Python stub of tritonserver embeds Debian's python3.11 (apt-get install python3.11-venv python3.11-dev)"
"$BOOT" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
    die "$BOOT is not Python 3.11, the version of the tritonserver's Python stub"
[ -f "/usr/include/python3.11/Python.h" ] || die "Python.h not found: dlib's build needs python3.11-dev"

logf="$LOGS/bench-setup.log"
: >"$logf"
venv_create "$BOOT" "$BENCH_VENV" "$logf"
log "pip install -r $REQ (log: ${logf#"$REPO_ROOT"/}; ~1 min)"
run_logged "$logf" "${PIP[@]}" install --progress-bar off -r "$REQ"

dlib_log="$LOGS/bench-setup-dlib.log"
# Appended, not truncated: the one real build log outlives later runs that use the cache.
log "pip install -r $REQ_DLIB: dlib builds from source, ~20 min on 2 cores once (log: ${dlib_log#"$REPO_ROOT"/})"
t0=$SECONDS
# The venv's cmake and setuptools (no build isolation: nothing else is fetched for the build).
# One compile job at the lowest priority: others share this machine.
run_logged "$dlib_log" env PATH="$BENCH_VENV/bin:$PATH" CMAKE_BUILD_PARALLEL_LEVEL=1 \
    nice -n 19 "${PIP[@]}" install --progress-bar off --no-build-isolation --no-deps -r "$REQ_DLIB"
log "dlib and face_recognition installed in $((SECONDS - t0)) s"

run_logged "$logf" "$PY" -c 'import cv2, onnx, onnxruntime, numpy, PIL, dlib; print("dlib", dlib.__version__, "cv2", cv2.__version__, "onnxruntime", onnxruntime.__version__, "numpy", numpy.__version__)'
printf '%s\n' "$want" >"$STAMP"
log "bench venv ready: ${BENCH_VENV#"$REPO_ROOT"/}"
