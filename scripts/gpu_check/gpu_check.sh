#!/usr/bin/env bash
# Proves triton-face on this machine's NVIDIA GPU, from this bundle alone (under 5 minutes).
#
#   bash gpu_check.sh [--cpu] [--cuda-libs DIR] [--out DIR] [--perf-ms MS] [--skip-check]
#                     [--measure] [--sweep VARIANTS [--sweep-inputs INPUTS] [--sweep-concurrency LIST]
#                     [--sweep-rounds R]] [--streams COUNTS [--streams-instances N]]
#
#   --cpu            every model KIND_CPU: the same check without a GPU
#   --cuda-libs DIR  a site-packages folder holding NVIDIA's CUDA 13 wheels (nvidia/cu13/lib,
#                    nvidia/cudnn/lib, ...); default: found from python3, else LD_LIBRARY_PATH
#   --out DIR        where everything printed goes, with summary.md (default: out/ here)
#   --perf-ms MS     perf_analyzer's measurement window (default 3000; 3 per run)
#   --skip-check     only what --sweep and --streams ask (the check takes about 2.5 minutes:
#                    a second call that stays under a time limit)
#   --measure        instead of the check, the card's figures in two sweeps (about 7
#                    minutes): out/shapes.md, one instance with runs of up to 8 padded to 8
#                    alone, to 1/2/4/8 (a session each), and with cuDNN's exhaustive search, at
#                    concurrency 1 and 8; out/serve.md, the GPU example (YuNet + SFace: two
#                    runs a face) one item a run and in runs of up to 8 and 32 (4 instances
#                    of one engine) against its CPU twin on every core, JPEG and raw pixels,
#                    concurrency 8, 64 and 256
#   --sweep VARIANTS after the check, the ONNX model's throughput per
#                    "[cpu:|gpu:]NxT[bB][+KEY=VALUE...]" (N instances of T batch_threads,
#                    max_engine_batch B, other model parameters; on the GPU unless cpu: or
#                    --cpu), e.g. "4x1b1 2x1 cpu:4x4 1x1b8+run_sizes=8"; out/sweep.md
#                    (check/sweep.py)
#   --sweep-inputs   of the sweep: "image", "image-shm" (IMAGE through system shared memory),
#                    "encoded" (JPEG); default "image-shm encoded"
#   --sweep-concurrency  of the sweep, default "8 32 64 128"
#   --sweep-rounds R every variant measured R times, in serpentine order (default 1)
#   --streams COUNTS after the check (and the sweep), how many 10 fps video streams the
#                    sequence model holds: the sample video's JPEG frames as N sequences at
#                    10 N requests/s, for each N, e.g. "100 200 300"; out/streams.md
#                    (check/streams.py)
#   --streams-instances N  of the streams' model, instances of one engine (default 4)
#
# Needs: x86-64 Linux with glibc 2.35+, python3 (3.11 or 3.12), and for the GPU the NVIDIA
# driver and the CUDA 13 user libraries (cudart, cuBLAS, cuRAND, cuDNN 9) as the
# nvidia-* wheels install them. Everything else is in the bundle: tritonserver, the backend
# and the libraries it needs, onnxruntime with CUDA, the models, photos and video frames,
# perf_analyzer, tritonclient's wheels.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
CPU=0 CUDA_LIBS= OUT="$HERE/out" PERF_MS=3000 CHECK=1 SWEEP= SWEEP_ARGS=() STREAMS= STREAMS_ARGS=()
MEASURE=0
while [ $# -gt 0 ]; do
    case $1 in
        --cpu) CPU=1 && shift ;;
        --cuda-libs) CUDA_LIBS=$2 && shift 2 ;;
        --out) OUT=$2 && shift 2 ;;
        --perf-ms) PERF_MS=$2 && shift 2 ;;
        --skip-check) CHECK=0 && shift ;;
        --measure) MEASURE=1 CHECK=0 && shift ;;
        --sweep) SWEEP=$2 && shift 2 ;;
        --sweep-inputs) SWEEP_ARGS+=(--inputs "$2") && shift 2 ;;
        --sweep-concurrency) SWEEP_ARGS+=(--concurrency "$2") && shift 2 ;;
        --sweep-rounds) SWEEP_ARGS+=(--rounds "$2") && shift 2 ;;
        --streams) STREAMS=$2 && shift 2 ;;
        --streams-instances) STREAMS_ARGS+=(--instances "$2") && shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" && exit 0 ;;
        *) echo "unknown argument: $1 (try --help)" >&2 && exit 2 ;;
    esac
done
if [ "$CHECK" = 0 ] && [ "$MEASURE" = 0 ] && [ -z "$SWEEP$STREAMS" ]; then
    echo "gpu_check: --skip-check with neither --sweep nor --streams: nothing to do" >&2
    exit 1
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd -P)"
# Everything printed from here on also goes to out/check.log.
exec > >(tee "$OUT/check.log") 2>&1

step() { printf '\n== %s\n' "$*"; }
fail() {
    echo "gpu_check: $*" >&2
    exit 1
}

step "machine"
date -u '+%Y-%m-%d %H:%M UTC'
uname -srm
ldd --version 2>&1 | sed -n 1p
grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release || true
grep -m1 'model name' /proc/cpuinfo || true
echo "CPU cores: $(nproc)"

PYTHON="$(command -v python3 || true)"
[ -n "$PYTHON" ] || fail "python3 not found (3.11 or 3.12 is needed)"
echo "python: $("$PYTHON" --version 2>&1) ($PYTHON)"

DEVICE="no GPU (--cpu)"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
if [ "$CPU" = 0 ]; then
    step "nvidia-smi"
    command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: is the NVIDIA driver installed?"
    nvidia-smi
    DEVICE="$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader | head -n 1)"

    step "CUDA 13 libraries"
    if [ -z "$CUDA_LIBS" ]; then
        CUDA_LIBS="$("$PYTHON" -c 'import os, nvidia; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null || true)"
    fi
    dirs=()
    if [ -n "$CUDA_LIBS" ]; then
        [ -d "$CUDA_LIBS/nvidia" ] || fail "--cuda-libs $CUDA_LIBS holds no nvidia/ folder"
        mapfile -t dirs < <(find "$CUDA_LIBS/nvidia" -name 'lib*.so*' -printf '%h\n' | sort -u)
    fi
    LD_LIBRARY_PATH="$(IFS=:; echo "${dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # What onnxruntime-gpu's CUDA provider links (cudart, cuBLAS, cuRAND) and opens (cuDNN).
    missing=()
    for soname in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcudnn.so.9; do
        found=
        IFS=: read -ra path <<<"$LD_LIBRARY_PATH"
        for dir in "${path[@]}"; do
            [ -n "$dir" ] && [ -e "$dir/$soname" ] && found="$dir/$soname" && break
        done
        if [ -z "$found" ]; then
            found="$(ldconfig -p 2>/dev/null | awk -v s="$soname" '$1 == s {print $NF; exit}')"
        fi
        echo "$soname: ${found:-NOT FOUND}"
        [ -n "$found" ] || missing+=("$soname")
    done
    [ ${#missing[@]} -eq 0 ] || fail "missing ${missing[*]}: pass --cuda-libs SITE_PACKAGES (where pip put the nvidia-* CUDA 13 wheels) or put them on LD_LIBRARY_PATH"
    [ -e "$HERE/backends/face/libonnxruntime_providers_cuda.so" ] ||
        fail "this bundle has no CUDA provider (built with GPU_BUNDLE_CUDA_PROVIDER=0, for --cpu only): build it again without"
    echo "onnxruntime's CUDA provider resolves:"
    LD_LIBRARY_PATH="$HERE/backends/face:$LD_LIBRARY_PATH" ldd "$HERE/backends/face/libonnxruntime_providers_cuda.so" |
        grep -E 'cu|not found' || true
fi

step "the backend's libraries (ldd, nothing from the system but glibc and libstdc++)"
ldd "$HERE/backends/face/libtriton_face.so"

step "Python client (tritonclient from the bundle's wheels)"
CLIENT="$OUT/python"
rm -rf "$CLIENT"
pip_wheel="$(ls "$HERE"/wheels/pip-*.whl)"
"$PYTHON" "$pip_wheel/pip" install --quiet --disable-pip-version-check --no-index \
    --find-links "$HERE/wheels" --target "$CLIENT" -r "$HERE/check/requirements.txt"
export PYTHONPATH="$CLIENT"

rc=0
if [ "$CHECK" = 1 ]; then
    step "check"
    args=(--out "$OUT" --perf-ms "$PERF_MS" --device "$DEVICE")
    [ "$CPU" = 0 ] || args+=(--cpu)
    "$PYTHON" "$HERE/check/check.py" "${args[@]}" || rc=$?
fi
if [ "$MEASURE" = 1 ]; then
    kind=KIND_GPU && [ "$CPU" = 0 ] || kind=KIND_CPU
    step "measure 1/2: one session per run size, or one size for all (one instance)"
    "$PYTHON" "$HERE/check/sweep.py" --out "$OUT" --kind "$kind" --name shapes --perf-ms 2000 \
        --variants "1x1b8+run_sizes=8 1x1b8 1x1b8+cudnn_conv_algo_search=exhaustive" \
        --inputs image-shm --concurrency "1 8" || rc=1
    step "measure 2/2: the GPU example (YuNet + SFace) against its CPU twin on every core"
    cpu_instances=$(( $(nproc) / 4 > 0 ? $(nproc) / 4 : 1 ))
    "$PYTHON" "$HERE/check/sweep.py" --out "$OUT" --kind "$kind" --name serve --perf-ms 2000 \
        --pipeline face_onnx_yunet --variants "4x1 4x1b8 4x1b32 cpu:${cpu_instances}x4" \
        --inputs "image-shm encoded" --concurrency "8 64 256" || rc=1
fi
if [ -n "$SWEEP" ]; then
    step "sweep: instances x batch_threads x max_engine_batch"
    kind=KIND_GPU && [ "$CPU" = 0 ] || kind=KIND_CPU
    "$PYTHON" "$HERE/check/sweep.py" --out "$OUT" --kind "$kind" --variants "$SWEEP" \
        --perf-ms "$PERF_MS" "${SWEEP_ARGS[@]}" || rc=1
fi
if [ -n "$STREAMS" ]; then
    step "streams: 10 fps video streams through the sequence model"
    kind=KIND_GPU && [ "$CPU" = 0 ] || kind=KIND_CPU
    "$PYTHON" "$HERE/check/streams.py" --out "$OUT" --kind "$kind" --streams "$STREAMS" \
        --perf-ms "$PERF_MS" "${STREAMS_ARGS[@]}" || rc=1
fi
exit "$rc"
