#!/usr/bin/env bash
# `make bench`: server throughput against the engine's own, on one real photo
# (assets/photos/obama_640x480.jpg).
#   1. cargo bench --bench engine: decode / analyze in-process, one thread, for
#      the dlib engine (group "engine") and the ONNX engine with the settings of
#      model_repository/face_onnx (group "onnx"); then examples/tract_kernels and
#      cargo bench --bench decode (each detector family's outputs read);
#   2. serves these models from a temporary model repository with the real
#      tritonserver (one libtriton_face.so in --backend-directory; gallery:
#      obama.jpg + biden.jpg each): `face` (dlib), `face_onnx` (its three
#      .onnx files linked into 1/) and `face_sequence` (dlib, sequence batcher);
#      and, unless BENCH_REFERENCE=0, the same work for comparison in the same
#      server: `face_onnx_tract` (face_onnx with `runtime: tract`) and the
#      Python-backend reference models of benches/python_reference/ (their
#      venv: scripts/bench_setup.sh, ~20 min the first time, to build dlib):
#      `face_onnx_py_expert` and `face_onnx_py_as_deployed` (face_onnx's models
#      with onnxruntime in Python, two profiles), `face_recognition_py`
#      (the face_recognition library: dlib, as `face`) and `face_yunet_py`
#      (face_onnx_yunet's YuNet + SFace through OpenCV's own API);
#   3. perf_analyzer at concurrency 1 and 2 against `face` and `face_onnx`
#      (`face_onnx_yunet` and `face_yunet_py`: 2 and 8),
#      sending the photo once as ENCODED (JPEG bytes) and once as IMAGE
#      (480x640x3 RGB pixels), and against the comparison models with ENCODED;
#      every response is checked against the faces the server found in a first
#      request;
#   4. perf_analyzer in sequence mode against `face_sequence` (ENCODED,
#      sequences of BENCH_SEQUENCE_LENGTH frames; perf_analyzer sets START/END
#      and the correlation ID): at a fixed request rate spread over
#      BENCH_SEQUENCES concurrent sequences, and at concurrency 2 (two
#      sequences in flight). Answers carry their frame number, so they are not
#      compared with a reference; a two-frame sequence is checked first;
#   5. prints the table (scripts/bench_report.py), with the ratios Rust / Python
#      backend, and writes it to out/bench.txt.
# Logs and CSVs: out/bench-*. Takes about 7 minutes on 2 cores (4 without the
# comparison models).
# Environment:
#   BENCH_PROTOCOL=grpc|http       perf_analyzer protocol (default grpc, as issue #8 measures)
#   BENCH_WINDOW_MS=4000           perf_analyzer measurement window (the
#                                  closed-loop runs: split over the rounds)
#   BENCH_ROUNDS=4                 rounds of the closed-loop runs, interleaved
#                                  (even: every model then has the same mean
#                                  position in the run)
#   BENCH_SEQUENCE_RATE=8          requests/s of the sequence run; keep it below
#                                  what the machine sustains (2 cores: ~16/s)
#   BENCH_SEQUENCES=4              concurrent sequences at that rate
#   BENCH_SEQUENCE_LENGTH=10       frames per sequence
#   BENCH_REFERENCE=1              0: leave out the comparison models
#   BENCH_MATCHING=1               0: leave out the gallery's matching bench
#                                  (benches/matching/run.sh, ours vs faiss; its
#                                  own settings are in that file)
#   BENCH_SCALE=1                  0: leave out the end-to-end bench at 1,000,000
#                                  people (benches/gallery_scale/run.py, then
#                                  join.py on PostgreSQL, then run.py for dlib's
#                                  face model; needs the matching bench's
#                                  million-row data sets; the first run builds
#                                  the indexes, ~25 and ~10 min)
#   BENCH_VIDEO=1                  0: leave out the 10 fps streams per machine
#                                  (benches/video_streams.py, each engine)
#   BENCH_LIBRARY=PATH             serve this libtriton_face.so instead of
#                                  building one: no setup.sh (assets/env.sh must
#                                  exist), no cargo build, no in-process bench
# perf_analyzer measures 3 windows per concurrency and reports them merged. It
# does not wait for them to agree (--stability-percentage 1000): on a small
# shared machine they often never come within the default 10% and it gives up.
# (--request-count is no way out: it rounds its window up to whole seconds.)
set -euo pipefail

# shellcheck disable=SC2034  # read by lib.sh
LOG_TAG=bench
# shellcheck source=scripts/lib.sh disable=SC1091  # followed with shellcheck -x
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
# This checkout: assets/env.sh (sourced below) sets REPO_ROOT to the checkout that
# ran setup.sh, which differs when assets/ is shared (a git worktree linking it).
ROOT="$REPO_ROOT"

PROTOCOL="${BENCH_PROTOCOL:-grpc}"
case "$PROTOCOL" in
    http | grpc) ;;
    *) die "BENCH_PROTOCOL must be http or grpc, not $PROTOCOL" ;;
esac
WINDOW_MS="${BENCH_WINDOW_MS:-4000}"
ROUNDS="${BENCH_ROUNDS:-4}"
SEQ_RATE="${BENCH_SEQUENCE_RATE:-8}"
SEQ_COUNT="${BENCH_SEQUENCES:-4}"
SEQ_LENGTH="${BENCH_SEQUENCE_LENGTH:-10}"
REFERENCE="${BENCH_REFERENCE:-1}"
LIBRARY="${BENCH_LIBRARY:-}"
case "$REFERENCE" in
    0 | 1) ;;
    *) die "BENCH_REFERENCE must be 0 or 1, not $REFERENCE" ;;
esac
if [ -n "$LIBRARY" ]; then
    LIBRARY="$(realpath -e "$LIBRARY")" || die "BENCH_LIBRARY: $BENCH_LIBRARY not found"
fi
for v in WINDOW_MS ROUNDS SEQ_COUNT SEQ_LENGTH; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, not ${!v}"
done
[ $((ROUNDS % 2)) = 0 ] || die "BENCH_ROUNDS must be even (forward and backward rounds), not $ROUNDS"
[ $((WINDOW_MS / ROUNDS)) -ge 500 ] ||
    die "BENCH_WINDOW_MS / BENCH_ROUNDS must be at least 500 ms, not $((WINDOW_MS / ROUNDS))"
if [[ ! "$SEQ_RATE" =~ ^[0-9]*\.?[0-9]+$ || "$SEQ_RATE" =~ ^[0.]+$ ]]; then
    die "BENCH_SEQUENCE_RATE must be a positive number, not $SEQ_RATE"
fi
T0=$SECONDS
START_EPOCH="$(date +%s)"

if [ -z "$LIBRARY" ]; then
    bash scripts/setup.sh
else
    [ -f assets/env.sh ] || die "BENCH_LIBRARY needs assets/env.sh (run scripts/setup.sh once)"
    log "serving $LIBRARY (BENCH_LIBRARY): no set-up, no build, no in-process bench"
fi
# shellcheck source=/dev/null
source assets/env.sh
PHOTO="$FACE_PHOTOS/obama_640x480.jpg"
ONNX_DIR="${FACE_ONNX_DIR:-$FACE_ASSETS/onnx}"
OUT="$ROOT/out"
mkdir -p "$OUT"
if [ "$REFERENCE" = 1 ]; then
    bash scripts/bench_setup.sh
    BENCH_VENV="${FACE_BENCH_VENV:-$(cd assets && pwd -P)/bench-venv}"
fi

LOAD_ENGINE=-
if [ -z "$LIBRARY" ]; then
    log "cargo build --release --lib --examples"
    cargo build --release --lib --examples
    bash scripts/split_debug.sh target/release/libtriton_face.so
    LIBRARY=target/release/libtriton_face.so

    # In-process first: it builds from the same sources as the library just built.
    log "cargo bench --bench engine: dlib and onnx (log: out/bench-engine.log; ~2 min)"
    export FACE_BENCH_PHOTO="$PHOTO" FACE_ONNX_DIR="$ONNX_DIR"
    : >"$OUT/bench-engine.log"
    LOAD_ENGINE="$(cut -d' ' -f1 /proc/loadavg)"
    run_logged "$OUT/bench-engine.log" cargo bench --bench engine
    log "examples/tract_kernels: each of our tract ops against tract's own (log: out/bench-tract-kernels.txt; ~15 s)"
    run_logged "$OUT/bench-tract-kernels.txt" target/release/examples/tract_kernels "$ONNX_DIR" 100
    log "cargo bench --bench decode: each detector family's outputs read, against UltraFace's (log: out/bench-decode.log; ~30 s)"
    run_logged "$OUT/bench-decode.log" cargo bench --bench decode
fi

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

# Model repository: the shipped configs, weights_dir made absolute; one copy
# of the library for all the `face` models.
mkdir -p "$WORK/backends/face"
install -m 0755 "$LIBRARY" "$WORK/backends/face/libtriton_face.so"
MODELS=(face face_onnx face_sequence face_onnx_yunet)
ONNX_MODELS=(face_onnx)
YUNET_MODELS=(face_onnx_yunet)
# The same work for comparison (BENCH_REFERENCE=1).
COMPARED=()
if [ "$REFERENCE" = 1 ]; then
    MODELS+=(face_onnx_tract face_onnx_py_expert face_onnx_py_as_deployed face_recognition_py
        face_yunet_py)
    ONNX_MODELS+=(face_onnx_tract face_onnx_py_expert face_onnx_py_as_deployed)
    YUNET_MODELS+=(face_yunet_py)
    COMPARED=(face_onnx_tract face_onnx_py_expert face_onnx_py_as_deployed face_recognition_py
        face_yunet_py)
    # The python backend of the wheel's server, with the stub for its Python (3.11):
    # the wheel keeps the stubs apart (pytriton copies one in at run time).
    TRITON_DIST="$(dirname "$(dirname "$TRITONSERVER")")"
    mkdir -p "$WORK/backends/python"
    for f in "$TRITON_DIST"/backends/python/libtriton_python.so \
        "$TRITON_DIST"/backends/python/triton_python_backend_utils.py \
        "$TRITON_DIST"/python_backend_stubs/3.11/triton_python_backend_stub; do
        [ -f "$f" ] || die "python backend: $f not found (nvidia-pytriton in .venv)"
        ln -s "$f" "$WORK/backends/python/"
    done
fi
# model_config NAME: where the config of model NAME comes from, and what changes.
model_config() {
    local model=$1 py=benches/python_reference
    case "$model" in
        face_onnx_tract)
            sed 's/^name: .*/name: "face_onnx_tract"/' model_repository/face_onnx/config.pbtxt
            echo 'parameters { key: "runtime" value: { string_value: "tract" } }'
            ;;
        face_onnx_py_*)
            sed -e "s/^name: .*/name: \"$model\"/" \
                -e "s/\(key: \"profile\" *value: { string_value: \"\)[^\"]*/\1${model#face_onnx_py_}/" \
                "$py/face_onnx_py/config.pbtxt"
            ;;
        face_recognition_py | face_yunet_py) cat "$py/$model/config.pbtxt" ;;
        *) cat "model_repository/$model/config.pbtxt" ;;
    esac
}
for model in "${MODELS[@]}"; do
    dir="$WORK/models/$model"
    mkdir -p "$dir/1" "$dir/gallery"
    model_config "$model" |
        sed -e "s|\(key: \"weights_dir\" *value: { string_value: \"\)[^\"]*\"|\1$FACE_WEIGHTS\"|" \
            -e "s|@BENCH_VENV@|${BENCH_VENV:-}|" >"$dir/config.pbtxt"
    if grep -qF @BENCH_VENV@ "$dir/config.pbtxt"; then
        die "$dir/config.pbtxt: EXECUTION_ENV_PATH not set (no bench venv)"
    fi
    if grep -q weights_dir "$dir/config.pbtxt"; then
        grep -qF "string_value: \"$FACE_WEIGHTS\"" "$dir/config.pbtxt" ||
            die "could not set weights_dir in $dir/config.pbtxt"
    fi
    case "$model" in
        face_onnx_py_*) cp benches/python_reference/face_onnx_py/1/model.py "$dir/1/" ;;
        face_recognition_py | face_yunet_py) cp "benches/python_reference/$model/1/model.py" "$dir/1/" ;;
    esac
    case "$model" in
        *_py*) cp benches/python_reference/reference_common.py "$dir/1/" ;;
    esac
    cp "$FACE_PHOTOS/obama.jpg" "$FACE_PHOTOS/biden.jpg" "$dir/gallery/"
done
# link_onnx MODEL FILE...: the files of assets/onnx in MODEL's version folder.
link_onnx() {
    local model=$1 f
    shift
    for f; do
        [ -f "$ONNX_DIR/$f" ] || die "$ONNX_DIR/$f not found (run scripts/setup.sh)"
        ln -s "$ONNX_DIR/$f" "$WORK/models/$model/1/$f"
    done
}
for model in "${ONNX_MODELS[@]}"; do
    link_onnx "$model" fr_detect.onnx fr_landmark.onnx fr_feature.onnx
done
for model in "${YUNET_MODELS[@]}"; do
    link_onnx "$model" face_detection_yunet_2023mar.onnx face_recognition_sface_2021dec.onnx
done

read -r HTTP_PORT GRPC_PORT METRICS_PORT < <("$PYTHON" -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')

SERVER_LOG="$OUT/bench-tritonserver.log"
log "tritonserver on ports $HTTP_PORT/$GRPC_PORT/$METRICS_PORT (log: ${SERVER_LOG#"$ROOT"/})"
"$TRITONSERVER" --model-repository="$WORK/models" --backend-directory="$WORK/backends" \
    --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" --metrics-port="$METRICS_PORT" \
    >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
"$PYTHON" scripts/wait_ready.py "localhost:$HTTP_PORT" --pid "$SERVER_PID" --log "$SERVER_LOG"

for model in face face_onnx; do
    "$PYTHON" scripts/perf_input.py --url "localhost:$HTTP_PORT" --model "$model" \
        --photo "$PHOTO" --out "$WORK"
done
for model in face_onnx_yunet "${COMPARED[@]}"; do
    "$PYTHON" scripts/perf_input.py --url "localhost:$HTTP_PORT" --model "$model" \
        --variants encoded --photo "$PHOTO" --out "$WORK"
done
"$PYTHON" scripts/perf_input.py --url "localhost:$HTTP_PORT" --model face_sequence --sequence \
    --variants encoded --photo "$PHOTO" --out "$WORK"

URL="localhost:$HTTP_PORT"
[ "$PROTOCOL" = http ] || URL="localhost:$GRPC_PORT"
# The in-process benchmark (criterion group/name) doing the same work as a
# request of each model and variant; `-`: none (the Python models).
declare -A BENCH_OF=(
    [face/encoded]=engine/decode+analyze [face/image]=engine/analyze
    [face_onnx/encoded]=onnx/decode+analyze [face_onnx/image]=onnx/analyze
    [face_sequence/encoded]=engine/decode+analyze
    [face_onnx_tract/encoded]=onnx-tract/decode+analyze
    [face_onnx_py_expert/encoded]=- [face_onnx_py_as_deployed/encoded]=-
    [face_recognition_py/encoded]=-
    [face_onnx_yunet/encoded]=- [face_yunet_py/encoded]=-
)
# The concurrencies of each closed-loop run (perf_analyzer's start:end:step): the YuNet pair
# at 2 and 8, as issue 83 compares them with OpenCV's own API.
declare -A LEVELS_OF=([face_onnx_yunet/encoded]=2:8:6 [face_yunet_py/encoded]=2:8:6)
LOAD_SERVER="$(cut -d' ' -f1 /proc/loadavg)"
rm -f "$OUT"/bench-*.csv
report_args=()

# measure MODEL VARIANT NAME WINDOW_MS "WHAT" PERF_ANALYZER_ARGS...: one
# perf_analyzer run of 3 windows into out/NAME.{csv,log}.
measure() {
    local model=$1 variant=$2 name=$3 window=$4 what=$5
    shift 5
    log "perf_analyzer: $model $variant, $what, 3 x $window ms each (log: out/$name.log)"
    # The warm-up sends at least as many requests as the highest concurrency: perf_analyzer
    # 2.51 waits forever at concurrency 8 after a warm-up of 4.
    # perf_analyzer once hung in the warm-up of the sequence run with the
    # server idle and every request answered: a run that overstays its
    # windows by far is killed and tried once more.
    local limit=$((60 + 20 * window / 1000)) try rc
    for try in 1 2; do
        rc=0
        timeout --kill-after=10 "$limit" "$PERF_ANALYZER" -m "$model" -u "$URL" -i "$PROTOCOL" \
            -v --input-data "$WORK/$model-$variant.json" --warmup-request-count 8 \
            --measurement-interval "$window" --max-trials 3 --stability-percentage 1000 \
            -f "$OUT/$name.csv" "$@" >"$OUT/$name.log" 2>&1 || rc=$?
        [ "$rc" = 124 ] || [ "$rc" = 137 ] || break
        warn "perf_analyzer did not finish in $limit s ($model $variant, try $try of 2)"
    done
    if [ "$rc" != 0 ]; then
        tail -n 20 "$OUT/$name.log" | sed 's/^/    /' >&2
        if grep -q "failed to find the requested model version" "$OUT/$name.log"; then
            warn "the backend reported no statistics (TRITONBACKEND_ModelInstanceReport*Statistics)"
        fi
        die "perf_analyzer failed ($model $variant, $what)"
    fi
}

# perf MODEL VARIANT RUN "WHAT" PERF_ANALYZER_ARGS...: one perf_analyzer run
# into out/bench-MODEL-RUN.{csv,log}, added to the report.
perf() {
    local model=$1 variant=$2 run=$3 what=$4
    shift 4
    measure "$model" "$variant" "bench-$model-$run" "$WINDOW_MS" "$what" "$@"
    report_args+=(--server "$model:${variant^^}=$OUT/bench-$model-$run.csv:${BENCH_OF[$model/$variant]}")
}

# The closed-loop runs (concurrency 1 and 2) in ROUNDS (even) rounds of 3
# windows of WINDOW_MS / ROUNDS, the models in serpentine order (forward, then
# backward, so each model's mean position in the run is the same):
# this machine speeds up and slows down by 15% over minutes, and measured one
# model after another that drift went into the A/B ratios. Interleaved, it
# falls on every model alike; the report averages each model's rounds.
RUNS=()
for model in face face_onnx; do
    RUNS+=("$model/encoded" "$model/image")
done
RUNS+=(face_onnx_yunet/encoded)
for model in "${COMPARED[@]}"; do
    RUNS+=("$model/encoded")
done
declare -A ROUND_CSVS=()
for round in $(seq 1 "$ROUNDS"); do
    order=("${RUNS[@]}")
    if [ $((round % 2)) = 0 ]; then
        for ((i = 0; i < ${#RUNS[@]}; i++)); do
            order[i]="${RUNS[${#RUNS[@]} - 1 - i]}"
        done
    fi
    for run in "${order[@]}"; do
        model="${run%/*}" variant="${run#*/}"
        name="bench-$model-$variant-r$round"
        levels="${LEVELS_OF[$run]:-1:2}"
        measure "$model" "$variant" "$name" "$((WINDOW_MS / ROUNDS))" \
            "round $round of $ROUNDS, concurrency $levels" --concurrency-range "$levels"
        ROUND_CSVS[$run]+="${ROUND_CSVS[$run]:+,}$OUT/$name.csv"
    done
done
for run in "${RUNS[@]}"; do
    variant="${run#*/}"
    report_args+=(--server "${run%/*}:${variant^^}=${ROUND_CSVS[$run]}:${BENCH_OF[$run]}")
done
SEQ_ARGS=(--sequence-length "$SEQ_LENGTH" --sequence-length-variation 0)
perf face_sequence encoded rate \
    "$SEQ_RATE req/s over $SEQ_COUNT sequences of $SEQ_LENGTH" \
    --request-rate-range "$SEQ_RATE" --num-of-sequences "$SEQ_COUNT" "${SEQ_ARGS[@]}"
perf face_sequence encoded concurrency "concurrency 2, sequences of $SEQ_LENGTH" \
    --concurrency-range 2:2 "${SEQ_ARGS[@]}"
# perf_analyzer ends the sequences it started: none should be left open.
LIVE="$("$PYTHON" -c '
import sys, urllib.request
text = urllib.request.urlopen(f"http://localhost:{sys.argv[1]}/metrics", timeout=5).read().decode()
print(next((l.split()[-1] for l in text.splitlines()
            if l.startswith("face_live_sequences{") and "face_sequence" in l), "?"))' \
    "$METRICS_PORT")" || LIVE="?"
stop_server

title="triton-face bench: $(basename "$PHOTO"), $PROTOCOL, $ROUNDS interleaved rounds x 3 x"
title+=" $((WINDOW_MS / ROUNDS)) ms per load level (sequences: 3 x $WINDOW_MS ms)"
load="1-min load average before: in-process bench $LOAD_ENGINE, server bench $LOAD_SERVER"
seq="face_sequence: sequences of $SEQ_LENGTH frames; rate row: $SEQ_COUNT concurrent"
seq+=" sequences; live sequences left after the runs: $LIVE."
if [ "$LOAD_ENGINE" != - ]; then
    report_args+=(--criterion target/criterion --fresh-after "$START_EPOCH")
fi
# Rust backend / its Python-backend (or tract) counterpart, same input, same run.
if [ "$REFERENCE" = 1 ]; then
    report_args+=(
        --ratio face_onnx:ENCODED/face_onnx_py_expert:ENCODED
        --ratio face_onnx:ENCODED/face_onnx_py_as_deployed:ENCODED
        --ratio face_onnx_tract:ENCODED/face_onnx_py_as_deployed:ENCODED
        --ratio face:ENCODED/face_recognition_py:ENCODED
        --ratio face_onnx_yunet:ENCODED/face_yunet_py:ENCODED
    )
fi
"$PYTHON" scripts/bench_report.py "${report_args[@]}" \
    --title "$title, $(date '+%F %T')" --note "$seq" --note "$load ($(nproc) CPUs)." \
    --out "$OUT/bench.txt"
log "done in $((SECONDS - T0)) s: out/bench.txt"
if [ "${BENCH_MATCHING:-1}" = 1 ]; then
    log "gallery matching: benches/matching/run.sh (out/bench-matching.txt)"
    bash benches/matching/run.sh
fi
if [ "${BENCH_SCALE:-1}" = 1 ]; then
    log "gallery at scale, end to end: benches/gallery_scale/run.py (out/bench-gallery-scale.txt)"
    "$PYTHON" benches/gallery_scale/run.py --library "$LIBRARY" --window-ms 8000
    log "a server joining a PostgreSQL gallery of a million: benches/gallery_scale/join.py (out/bench-gallery-join.txt)"
    "$PYTHON" benches/gallery_scale/join.py --library "$LIBRARY"
    log "the same for dlib's face model (out/bench-gallery-scale-face.txt)"
    "$PYTHON" benches/gallery_scale/run.py --model face --library "$LIBRARY" --window-ms 8000 \
        --photos 100
fi
if [ "${BENCH_VIDEO:-1}" = 1 ]; then
    log "10 fps video streams per machine: benches/video_streams.py (out/bench-video-streams.txt)"
    FACE_BACKEND_LIB="$LIBRARY" "$PYTHON" benches/video_streams.py
fi
