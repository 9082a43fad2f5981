#!/usr/bin/env bash
# The inner loop, after scripts/test.sh (or setup.sh) ran once: the release build
# (incremental), the Rust unit tests, then the test module you name against a
# server that keeps running between calls (tests/dev_server.py), for one engine.
#   bash scripts/quick.sh tests/test_face.py -k names   # ONNX engine (the default)
#   bash scripts/quick.sh --engine dlib tests/test_top_k.py
#   bash scripts/quick.sh                               # build, unit tests, server only
#   bash scripts/quick.sh --stop                        # stop the dev servers
# The server is started again when the library changed since it started. Tests that
# need their own config or gallery still start their own servers. Arguments after
# the options go to pytest (one worker: -n 0).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ ! -f assets/env.sh ]; then
    echo "quick.sh: assets/env.sh missing: run bash scripts/test.sh (or scripts/setup.sh) once first" >&2
    exit 2
fi
# shellcheck source=/dev/null
source assets/env.sh

engine=onnx
action=run
while [ $# -gt 0 ]; do
    case "$1" in
        --engine) engine="$2"; shift 2 ;;
        --stop) action=stop; shift ;;
        *) break ;;
    esac
done
FACE_TEST_SERVER="$(realpath -m "${FACE_TEST_SERVER:-out/dev_server}")"
export FACE_TEST_SERVER

if [ "$action" = stop ]; then
    exec "$PYTHON" tests/dev_server.py stop --all
fi

echo "== cargo build --release --lib --examples"
cargo build --release --lib --examples  # the targets of scripts/build.sh: nothing rebuilt twice
bash scripts/split_debug.sh target/release/libtriton_face.so
echo "== unit tests (cargo test --release --lib)"
cargo test --release --lib
echo "== dev server ($engine)"
"$PYTHON" tests/dev_server.py start --engine "$engine"
if [ $# -gt 0 ]; then
    echo "== pytest $* (engine $engine, the dev server for the module-wide server)"
    FACE_TEST_ENGINES="${FACE_TEST_ENGINES:-$engine}" "$PYTHON" -m pytest -n 0 "$@"
fi
