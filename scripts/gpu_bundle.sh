#!/usr/bin/env bash
# The offline GPU bundle: everything it takes to run and check the backend on a machine with
# an NVIDIA GPU and nothing else (no network, Docker, apt or Rust there), as parts of at most
# 60 MB each.
#
# Usage: scripts/gpu_bundle.sh --out DIR [--pythons "3.11 3.12"]
#   --pythons  the CPython versions whose client wheels it carries (default both; the GPU
#              machine needs only its own: "3.12" makes the bundle 30 MB smaller)
#   DIR gets triton-face-gpu.tar.xz.part-00, -01, ..., SHA256SUMS and UNPACK.txt. On the GPU
#   machine, in an empty folder holding them:
#     sha256sum -c SHA256SUMS && cat triton-face-gpu.tar.xz.part-* | xz -d | tar -x
#     bash triton-face-gpu/gpu_check.sh            # or --cpu: the same without a GPU
#
# Inside (triton-face-gpu/): tritonserver 2.51.0 (from the nvidia-pytriton wheel) with the
# libraries it needs; backends/face/ with libtriton_face.so, the libraries it needs
# (scripts/portable_lib.sh) and onnxruntime-gpu's CUDA build; the sample ONNX models and dlib
# weights; the sample photos, the sample video's frames and truth; perf_analyzer; wheels of
# tritonclient and its dependencies for CPython 3.11 and 3.12 (--pythons); the check's model
# configs (repos/) and gpu_check.sh with check/check.py, check/sweep.py and check/streams.py.
#
# Runs scripts/setup.sh and scripts/build.sh first (quick when done); downloads, once, into
# assets/gpu/: onnxruntime-gpu's libraries (scripts/gpu_assets.tsv) and the client wheels
# (scripts/gpu_check/requirements.txt). Takes about 3 minutes on 2 cores, most of it xz.
# Environment: GPU_BUNDLE_XZ="-6" (xz's preset; -0 for a quick, bigger bundle in tests);
# GPU_BUNDLE_CUDA_PROVIDER=0 leaves out onnxruntime's CUDA provider (271 MB, most of the
# packing time): a bundle for `gpu_check.sh --cpu` only, as the suite checks it.
set -euo pipefail

# shellcheck disable=SC2034  # read by lib.sh
LOG_TAG=gpu-bundle
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

OUT=
PART_BYTES=60000000
PYTHONS=(3.11 3.12)
NAME=triton-face-gpu
while [ $# -gt 0 ]; do
    case $1 in
        --out) OUT=$2 && shift 2 ;;
        --pythons) read -ra PYTHONS <<<"$2" && shift 2 ;;
        -h | --help) print_usage "${BASH_SOURCE[0]}" && exit 0 ;;
        *) die "unknown argument: $1 (try --help)" ;;
    esac
done
[ -n "$OUT" ] || die "--out DIR is required (try --help)"

bash scripts/setup.sh
# shellcheck source=/dev/null
source assets/env.sh
bash scripts/build.sh >/dev/null
bash scripts/setup.sh --assets scripts/gpu_assets.tsv

LOGS="$REPO_ROOT/assets/logs"
GPU_ASSETS="$REPO_ROOT/assets/gpu"

# The client wheels, per CPython version; fetched again when the requirements change.
client_wheels() {
    local req=scripts/gpu_check/requirements.txt dir="$GPU_ASSETS/wheels" stamp want py
    stamp="$dir/.made-from"
    want="$(cat "$req" <(printf '%s\n' "${PYTHONS[@]}") | sha256sum | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        log "client wheels: up to date (skip)"
        return
    fi
    rm -rf "$dir" && mkdir -p "$dir"
    local platforms=()
    for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
        manylinux_2_17_x86_64 manylinux2014_x86_64 any; do platforms+=(--platform "$p"); done
    for py in "${PYTHONS[@]}"; do
        log "client wheels: CPython $py"
        run_logged "$LOGS/gpu-bundle.log" "$PYTHON" -m pip download --disable-pip-version-check \
            --no-deps --only-binary=:all: --implementation cp --python-version "$py" \
            "${platforms[@]}" -r "$req" -d "$dir"
    done
    # pip itself, run from its wheel on the GPU machine (a python3 without pip works too).
    run_logged "$LOGS/gpu-bundle.log" "$PYTHON" -m pip download --disable-pip-version-check \
        --no-deps --only-binary=:all: pip==24.3.1 -d "$dir"
    echo "$want" >"$stamp"
}

client_wheels
STAGE="$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
B="$STAGE/$NAME"
mkdir -p "$B"

log "backend: libtriton_face.so, its libraries, onnxruntime-gpu"
bash scripts/portable_lib.sh --out "$B/backends/face"
for lib in "$GPU_ASSETS"/onnxruntime/*; do
    if [ "${GPU_BUNDLE_CUDA_PROVIDER:-1}" = 0 ] && [[ $lib == *providers_cuda* ]]; then
        log "left out (GPU_BUNDLE_CUDA_PROVIDER=0, a bundle for gpu_check.sh --cpu): ${lib##*/}"
        continue
    fi
    install -m 0644 "$lib" "$B/backends/face/"
done

log "tritonserver and its libraries"
server_dir="$(dirname "$(dirname "$TRITONSERVER")")"
install -D -m 0755 "$TRITONSERVER" "$B/tritonserver/bin/tritonserver"
carry_libs "$TRITONSERVER" "$B/tritonserver/lib"

log "perf_analyzer"
install -D -m 0755 "$FACE_ASSETS/perf_analyzer/perf_analyzer" "$B/perf_analyzer/perf_analyzer"
# Its libcudart and libb64 are pytriton's, linked under the names it asks for by setup.sh.
LD_LIBRARY_PATH="$FACE_ASSETS/perf_analyzer/lib" carry_libs "$FACE_ASSETS/perf_analyzer/perf_analyzer" "$B/perf_analyzer/lib"
install -m 0755 "$FACE_ASSETS/perf_analyzer/run" "$B/perf_analyzer/run"

log "models, photos, the sample video's frames, perf_analyzer's input"
mkdir -p "$B/models/onnx" "$B/models/dlib" "$B/photos" "$B/repos"
# The files the bundle's models name (face_onnx's three, the GPU example's YuNet and SFace),
# not every model set-up fetched.
install -m 0644 "$FACE_ASSETS"/onnx/fr_*.onnx "$FACE_ASSETS"/onnx/face_detection_yunet_2023mar.onnx \
    "$FACE_ASSETS"/onnx/face_recognition_sface_2021dec.onnx "$B/models/onnx/"
install -m 0644 "$FACE_WEIGHTS/dlib_face_recognition_resnet_model_v1.dat" \
    "$FACE_WEIGHTS/shape_predictor_5_face_landmarks.dat" "$B/models/dlib/"
install -m 0644 "$FACE_PHOTOS"/* "$B/photos/"
for model in face face_onnx face_onnx_sequence face_onnx_yunet; do
    install -m 0644 "model_repository/$model/config.pbtxt" "$B/repos/$model.pbtxt"
done
run_logged "$LOGS/gpu-bundle.log" "$PYTHON" scripts/gpu_check/inputs.py \
    --video "$FACE_VIDEO" --photo "$FACE_PHOTOS/obama_640x480.jpg" --out "$B"

log "the check and the client wheels"
install -D -m 0755 scripts/gpu_check/gpu_check.sh "$B/gpu_check.sh"
install -D -m 0644 scripts/gpu_check/check.py scripts/gpu_check/sweep.py scripts/gpu_check/streams.py \
    scripts/gpu_check/requirements.txt -t "$B/check/"
install -D -m 0644 "$GPU_ASSETS"/wheels/*.whl -t "$B/wheels/"
install -m 0644 scripts/gpu_check/README.txt "$B/README.txt"
git rev-parse HEAD >"$B/COMMIT" 2>/dev/null || true
log "bundle: $(du -sh "$B" | cut -f1) before compression (tritonserver from ${server_dir#"$REPO_ROOT"/})"

mkdir -p "$OUT"
rm -f "$OUT/$NAME".tar.xz.part-* "$OUT/SHA256SUMS"
log "packing: tar | xz ${GPU_BUNDLE_XZ:--6} | split into parts of $PART_BYTES bytes"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$STAGE" -cf - "$NAME" |
    xz -T2 "${GPU_BUNDLE_XZ:--6}" |
    split -b "$PART_BYTES" -d -a 2 - "$OUT/$NAME.tar.xz.part-"
(cd "$OUT" && sha256sum "$NAME".tar.xz.part-* >SHA256SUMS)
cat >"$OUT/UNPACK.txt" <<EOF
triton-face GPU bundle ($(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%F)).
In an empty folder holding these files:

  sha256sum -c SHA256SUMS && cat $NAME.tar.xz.part-* | xz -d | tar -x
  bash $NAME/gpu_check.sh --cuda-libs SITE_PACKAGES   # or --cpu, without a GPU

SITE_PACKAGES: where pip installed NVIDIA's CUDA 13 wheels (its nvidia/ folder); without
--cuda-libs the check asks python3 for them, then LD_LIBRARY_PATH. Results: $NAME/out/.
EOF
log "done: $(ls "$OUT"/"$NAME".tar.xz.part-* | wc -l) parts, $(du -ch "$OUT"/"$NAME".tar.xz.part-* | tail -n 1 | cut -f1) in $OUT"
