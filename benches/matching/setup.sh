#!/usr/bin/env bash
# Bench-only set-up of the vector-matching benchmark (benches/matching/, issue 22): the venv
# that runs data.py and faiss_bench.py, by default assets/matching-venv. Called by run.sh (and so
# by `make bench`), never by scripts/setup.sh or test.sh: faiss is needed by this benchmark only.
#   pip install -r benches/matching/requirements.txt (faiss-cpu and numpy wheels from PyPI,
#   ~25 MB, well under a minute; nothing builds, nothing else is downloaded)
# Idempotent: skipped when the venv's stamp matches the requirement file. Log:
# assets/logs/matching-setup.log.
# Environment:
#   FACE_MATCHING_VENV=DIR      the venv (default assets/matching-venv)
#   FACE_MATCHING_PYTHON=PATH   the interpreter that creates it (default python3; >= 3.10,
#                               the oldest Python of faiss-cpu's abi3 wheel)
set -euo pipefail

# shellcheck disable=SC2034  # read by lib.sh
LOG_TAG=matching-setup
# shellcheck source=scripts/lib.sh disable=SC1091  # followed with shellcheck -x
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cd "$REPO_ROOT"

mkdir -p assets
# The real path: a venv records its own path (bin/activate), and assets/ may be a link.
VENV="${FACE_MATCHING_VENV:-$(cd assets && pwd -P)/matching-venv}"
BOOT="${FACE_MATCHING_PYTHON:-python3}"
REQ=benches/matching/requirements.txt
LOGS="$REPO_ROOT/assets/logs"
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check --no-input)
STAMP="$VENV/.matching-requirements.sha256"
mkdir -p "$LOGS"

want="$(sha256sum "$REQ" | cut -d' ' -f1)"
if venv_current "$VENV" "$STAMP" "$want"; then
    log "matching venv up to date (${VENV#"$REPO_ROOT"/}; skip)"
    exit 0
fi

command -v "$BOOT" >/dev/null || die "$BOOT not found (set FACE_MATCHING_PYTHON to a Python >= 3.10)"
"$BOOT" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 10))' ||
    die "$BOOT is older than Python 3.10, the oldest that faiss-cpu 1.15.1's wheel supports"

logf="$LOGS/matching-setup.log"
: >"$logf"
venv_create "$BOOT" "$VENV" "$logf"
# Wheels only: a missing wheel must fail here, not start a long source build of faiss.
log "pip install -r $REQ (log: ${logf#"$REPO_ROOT"/})"
run_logged "$logf" nice -n 19 "${PIP[@]}" install --progress-bar off --only-binary=:all: -r "$REQ"
run_logged "$logf" "$PY" -c 'import faiss, numpy; print("faiss", faiss.__version__, "numpy", numpy.__version__)'
printf '%s\n' "$want" >"$STAMP"
log "matching venv ready: ${VENV#"$REPO_ROOT"/} ($(tail -n 1 "$logf"))"
