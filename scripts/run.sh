#!/usr/bin/env bash
# The main job, from a fresh machine: install what is needed, build the
# backend, serve model_repository/ with the real tritonserver, run the demo
# client on the sample photos (JSON printed, annotated copies in out/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
# shellcheck source=/dev/null
source assets/env.sh

bash scripts/build.sh

HTTP_PORT="${HTTP_PORT:-8000}"
GRPC_PORT="${GRPC_PORT:-8001}"
METRICS_PORT="${METRICS_PORT:-8002}"
mkdir -p out
echo "== tritonserver --model-store=model_repository (log: out/tritonserver.log)"
"$TRITONSERVER" --model-store=model_repository \
    --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" --metrics-port="$METRICS_PORT" \
    >out/tritonserver.log 2>&1 &
server=$!
stop_server() {
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
}
trap stop_server EXIT

"$PYTHON" scripts/wait_ready.py "localhost:$HTTP_PORT" --pid "$server" --log out/tritonserver.log
"$PYTHON" scripts/demo.py --url "localhost:$HTTP_PORT" --photos "$FACE_PHOTOS" --out out
echo "== done: annotated photos in out/, server log in out/tritonserver.log"
