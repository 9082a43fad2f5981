#!/usr/bin/env bash
# `make bench`: server throughput against the engine's own, on one real photo
# (assets/photos/obama_640x480.jpg).
#   1. cargo bench --bench engine: decode / analyze in-process, one thread;
#   2. serves the `face` model from a temporary model repository (weights from
#      assets/, gallery: obama.jpg + biden.jpg) with the real tritonserver;
#   3. perf_analyzer at concurrency 1 and 2 sending the photo once as ENCODED
#      (JPEG bytes) and once as IMAGE (480x640x3 RGB pixels); every response is
#      checked against the face the server found in a first request;
#   4. prints the table (scripts/bench_report.py) and writes it to out/bench.txt.
# Logs and CSVs: out/bench-*. Takes about 2 minutes.
# Environment:
#   BENCH_PROTOCOL=http|grpc       perf_analyzer protocol (default http)
#   BENCH_WINDOW_MS=4000           perf_analyzer measurement window
# perf_analyzer measures 3 windows per concurrency and reports them merged. It
# does not wait for them to agree (--stability-percentage 1000): on a small
# shared machine they often never come within the default 10% and it gives up.
# (--request-count is no way out: it rounds its window up to whole seconds.)
set -euo pipefail

LOG_TAG=bench
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

PROTOCOL="${BENCH_PROTOCOL:-http}"
case "$PROTOCOL" in
    http | grpc) ;;
    *) die "BENCH_PROTOCOL must be http or grpc, not $PROTOCOL" ;;
esac
T0=$SECONDS

bash scripts/setup.sh
# shellcheck source=/dev/null
source assets/env.sh
PHOTO="$FACE_PHOTOS/obama_640x480.jpg"
OUT="$REPO_ROOT/out"
mkdir -p "$OUT"

log "cargo build --release"
cargo build --release

# In-process first: it builds from the same sources as the library just built.
log "cargo bench --bench engine (log: out/bench-engine.log; ~1 min)"
export FACE_BENCH_PHOTO="$PHOTO"
: >"$OUT/bench-engine.log"
LOAD_ENGINE="$(cut -d' ' -f1 /proc/loadavg)"
run_logged "$OUT/bench-engine.log" cargo bench --bench engine

WORK="$(mktemp -d "${TMPDIR:-/tmp}/triton-face-bench.XXXXXX")"
SERVER_PID=
stop_server() {
    [ -n "$SERVER_PID" ] || return 0
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}
cleanup() {
    stop_server
    rm -rf "$WORK"
}
trap cleanup EXIT

# Model repository: the shipped config with an absolute weights_dir.
MODEL="$WORK/models/face"
mkdir -p "$MODEL/1" "$MODEL/gallery"
sed "s|\(key: \"weights_dir\" *value: { string_value: \"\)[^\"]*\"|\1$FACE_WEIGHTS\"|" \
    model_repository/face/config.pbtxt >"$MODEL/config.pbtxt"
grep -qF "string_value: \"$FACE_WEIGHTS\"" "$MODEL/config.pbtxt" ||
    die "could not set weights_dir in $MODEL/config.pbtxt"
cp "$FACE_PHOTOS/obama.jpg" "$FACE_PHOTOS/biden.jpg" "$MODEL/gallery/"
install -m 0755 target/release/libtriton_face.so "$MODEL/libtriton_face.so"

read -r HTTP_PORT GRPC_PORT METRICS_PORT < <("$PYTHON" -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')

SERVER_LOG="$OUT/bench-tritonserver.log"
log "tritonserver on ports $HTTP_PORT/$GRPC_PORT/$METRICS_PORT (log: ${SERVER_LOG#"$REPO_ROOT"/})"
"$TRITONSERVER" --model-repository="$WORK/models" \
    --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" --metrics-port="$METRICS_PORT" \
    >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
"$PYTHON" scripts/wait_ready.py "localhost:$HTTP_PORT" --pid "$SERVER_PID" --log "$SERVER_LOG"

"$PYTHON" scripts/perf_input.py --url "localhost:$HTTP_PORT" --photo "$PHOTO" --out "$WORK"

URL="localhost:$HTTP_PORT"
[ "$PROTOCOL" = http ] || URL="localhost:$GRPC_PORT"
# The in-process benchmark doing the same work as a request of each variant.
declare -A BENCH_OF=([encoded]=decode+analyze [image]=analyze)
WINDOW_MS="${BENCH_WINDOW_MS:-4000}"
LOAD_SERVER="$(cut -d' ' -f1 /proc/loadavg)"
report_args=()
for variant in encoded image; do
    name="bench-$variant"
    log "perf_analyzer: $variant, concurrency 1 and 2, 3 x $WINDOW_MS ms each (log: out/$name.log)"
    rm -f "$OUT/$name.csv"
    if ! "$PERF_ANALYZER" -m face -u "$URL" -i "$PROTOCOL" -v \
        --input-data "$WORK/$variant.json" --concurrency-range 1:2 --warmup-request-count 4 \
        --measurement-interval "$WINDOW_MS" --max-trials 3 --stability-percentage 1000 \
        -f "$OUT/$name.csv" >"$OUT/$name.log" 2>&1; then
        tail -n 20 "$OUT/$name.log" | sed 's/^/    /' >&2
        if grep -q "failed to find the requested model version" "$OUT/$name.log"; then
            warn "the backend reported no statistics (TRITONBACKEND_ModelInstanceReport*Statistics)"
        fi
        die "perf_analyzer failed ($variant)"
    fi
    report_args+=(--server "${variant^^}=$OUT/$name.csv:${BENCH_OF[$variant]}")
done
stop_server

title="triton-face bench: $(basename "$PHOTO"), $PROTOCOL, 3 x $WINDOW_MS ms per concurrency"
load="1-min load average before: in-process bench $LOAD_ENGINE, server bench $LOAD_SERVER"
"$PYTHON" scripts/bench_report.py "${report_args[@]}" --criterion target/criterion/engine \
    --title "$title, $(date '+%F %T')" --note "$load ($(nproc) CPUs)." --out "$OUT/bench.txt"
log "done in $((SECONDS - T0)) s: out/bench.txt"
