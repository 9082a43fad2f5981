#!/usr/bin/env bash
# The models made from others once the backend is built (scripts/build.sh runs this; each is
# made again only when what it is made from changes):
#   assets/onnx/dlib_resnet.onnx       dlib's ResNet face encoder as ONNX (scripts/dlib_onnx.py,
#                                      from examples/dlib_xml): face_onnx_resnet's embedder
#   assets/onnx/<model>.int8.onnx      the int8 copies face_onnx_int8 serves (linked into its
#                                      version folder here): scripts/quantize.py on
#                                      face_onnx_resnet's pipeline, written only when its check
#                                      passes (a copy that fails leaves that stage float)
# Logs: assets/logs/models.log.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LOG_TAG=models
ONNX="$REPO_ROOT/assets/onnx"
LOGFILE="$REPO_ROOT/assets/logs/models.log"
PY="${PYTHON:-$REPO_ROOT/.venv/bin/python}"
RESNET_DAT="$REPO_ROOT/assets/dlib/dlib_face_recognition_resnet_model_v1.dat"
# The stages whose int8 copy face_onnx_int8 serves: the embedder. The detector stays float (no
# faster in int8, and it finds fewer faces), so do the landmarks (a 0.3 ms model: its int8 copy
# failed the speed check in one of four runs, and through the server the stage is the crop's
# work either way): docs/engines.md.
INT8=(embedder:dlib_resnet)
SERVED="$REPO_ROOT/model_repository/face_onnx_int8/1"

# stamp_of FILE...: one hash of the files' contents.
stamp_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

# current OUT WANT: OUT exists and was made from WANT.
current() { [ -f "$1" ] && [ "$(cat "$1.made-by" 2>/dev/null)" = "$2" ]; }

want="$(stamp_of "$RESNET_DAT" "$REPO_ROOT/scripts/dlib_onnx.py")"
out="$ONNX/dlib_resnet.onnx"
if current "$out" "$want"; then
    log "dlib's ResNet as ONNX: up to date (skip)"
else
    log "dlib's ResNet as ONNX: converting (about 15 s)"
    xml="$(mktemp --suffix=.xml)"
    trap 'rm -f "$xml"' EXIT
    run_logged "$LOGFILE" "$REPO_ROOT/target/release/examples/dlib_xml" "$RESNET_DAT" "$xml"
    run_logged "$LOGFILE" "$PY" "$REPO_ROOT/scripts/dlib_onnx.py" "$xml" "$out"
    echo "$want" >"$out.made-by"
fi

config="$REPO_ROOT/model_repository/face_onnx_resnet/config.pbtxt"
rm -f "$SERVED"/*.int8.onnx
for stage in "${INT8[@]}"; do
    role=${stage%%:*} model=${stage##*:}
    copy="$ONNX/$model.int8.onnx"
    want="$(stamp_of "$ONNX/$model.onnx" "$config" "$REPO_ROOT/scripts/quantize.py")"
    if current "$copy" "$want"; then
        log "int8 $role ($model): up to date (skip)"
        ln -sfn "../../../assets/onnx/$model.int8.onnx" "$SERVED/$model.int8.onnx"
        continue
    fi
    if [ "$(cat "$copy.failed" 2>/dev/null)" = "$want" ]; then
        log "int8 $role ($model): failed its check before (skip; assets/logs/models.log)"
        continue
    fi
    rm -f "$copy" "$copy.made-by" "$copy.failed"
    log "int8 $role ($model): quantizing and checking through the server (about a minute)"
    if "$PY" "$REPO_ROOT/scripts/quantize.py" "$ONNX/$model.onnx" "$copy" --role "$role" \
        --config "$config" >>"$LOGFILE" 2>&1 </dev/null; then
        echo "$want" >"$copy.made-by"
        ln -sfn "../../../assets/onnx/$model.int8.onnx" "$SERVED/$model.int8.onnx"
        log "int8 $role: $(grep -E '^in process' "$LOGFILE" | tail -1)"
    else
        echo "$want" >"$copy.failed"
        warn "int8 $role ($model): $(grep -E '^quantize:' "$LOGFILE" | tail -1) -- face_onnx_int8 runs this stage in float"
    fi
done
