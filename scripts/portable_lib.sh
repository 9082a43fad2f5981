#!/usr/bin/env bash
# The backend as it travels: libtriton_face.so and, in triton_face.libs/ beside it, every
# shared library it needs beyond glibc and the C++ runtime (dlib, OpenBLAS and its Fortran
# runtime, libpng, libjpeg, libjpeg-turbo, zlib: about 48 MB). The library's RPATH
# ($ORIGIN/triton_face.libs, set by build.rs) finds them there first, on any x86-64 Linux
# with glibc 2.35 or newer (Ubuntu 22.04, the NGC Triton containers), with no apt.
#
# Usage: scripts/portable_lib.sh [--lib PATH] --out DIR
#   --lib PATH   the built library (default target/release/libtriton_face.so, after
#                scripts/build.sh split its debug information off)
#   --out DIR    gets DIR/libtriton_face.so and DIR/triton_face.libs/; DIR can be a model
#                folder or <backend-directory>/face
# Fails when a library it would carry needs a newer glibc or libstdc++ than Ubuntu 22.04
# has (GLIBC_2.35, GLIBCXX_3.4.30 is too new), or when anything stays unresolved.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

LIB=target/release/libtriton_face.so
OUT=
while [ $# -gt 0 ]; do
    case $1 in
        --lib) LIB=$2 && shift 2 ;;
        --out) OUT=$2 && shift 2 ;;
        -h | --help) print_usage "${BASH_SOURCE[0]}" && exit 0 ;;
        *) die "unknown argument: $1 (try --help)" ;;
    esac
done
[ -n "$OUT" ] || die "--out DIR is required (try --help)"
[ -f "$LIB" ] || die "$LIB not found: build it first (bash scripts/build.sh)"

# The newest symbol versions Ubuntu 22.04 provides.
MAX_GLIBC=2.35
MAX_GLIBCXX=3.4.29

# newest_version FILE PREFIX: the highest PREFIX_x.y.z symbol version FILE asks for.
newest_version() {
    { objdump -T "$1" | grep -o "$2_[0-9][0-9.]*" || true; } | sed "s/^$2_//" | sort -uV | tail -n 1
}

# check_versions FILE: FILE asks for nothing newer than MAX_GLIBC / MAX_GLIBCXX.
check_versions() {
    local glibc glibcxx
    glibc="$(newest_version "$1" GLIBC)"
    glibcxx="$(newest_version "$1" GLIBCXX)"
    if [ -n "$glibc" ] && [ "$(printf '%s\n%s\n' "$glibc" "$MAX_GLIBC" | sort -V | tail -n 1)" != "$MAX_GLIBC" ]; then
        die "$1 needs GLIBC_$glibc, newer than Ubuntu 22.04's $MAX_GLIBC"
    fi
    if [ -n "$glibcxx" ] && [ "$(printf '%s\n%s\n' "$glibcxx" "$MAX_GLIBCXX" | sort -V | tail -n 1)" != "$MAX_GLIBCXX" ]; then
        die "$1 needs GLIBCXX_$glibcxx, newer than Ubuntu 22.04's $MAX_GLIBCXX"
    fi
}

rpath="$(readelf -d "$LIB" | sed -n 's/.*(RPATH).*\[\(.*\)\]/\1/p')"
[ "$rpath" = '$ORIGIN/triton_face.libs' ] ||
    die "$LIB has RPATH '$rpath', expected \$ORIGIN/triton_face.libs (set by build.rs): rebuild it"

rm -rf "$OUT/triton_face.libs"
mkdir -p "$OUT/triton_face.libs"
install -m 0755 "$LIB" "$OUT/libtriton_face.so"
check_versions "$LIB"

# The whole closure beyond the base (what the library needs, and what those need), each
# under its soname.
carry_libs "$LIB" "$OUT/triton_face.libs"
for carried in "$OUT"/triton_face.libs/*; do
    check_versions "$carried"
done

# Once copied, every library must resolve inside the folder or to the base.
outside="$(ldd "$OUT/libtriton_face.so" | awk '$2 == "=>" {print $1, $3}' |
    grep -Ev "^[^ ]+ $(realpath "$OUT")/triton_face\.libs/" | awk '{print $1}' | grep -Ev "$BASE_LIBS" || true)"
[ -z "$outside" ] || die "$OUT/libtriton_face.so still resolves outside its folder: $outside"
log "portable: $OUT/libtriton_face.so with $(ls "$OUT/triton_face.libs" | wc -l) libraries in triton_face.libs/ ($(du -sh "$OUT/triton_face.libs" | cut -f1))"
