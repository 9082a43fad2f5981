# shellcheck shell=bash
# Small helpers shared by the scripts in scripts/. Source it; do not run it.
#   REPO_ROOT      absolute path of the repository (set on source)
#   print_usage SCRIPT, BASE_LIBS, carry_libs ELF DEST: see each below
#   log MSG...     one progress line on stderr
#   warn MSG...    a warning line on stderr
#   die MSG...     an error line on stderr, then exit 1
#   run_logged LOGFILE CMD [ARGS...]
#                  run CMD with stdout+stderr appended to LOGFILE; on failure
#                  print the tail of LOGFILE and exit with CMD's status.
#                  CMD should be a program, not a shell function (errexit is
#                  off inside functions run in this context).

# shellcheck disable=SC2034  # used by the scripts that source this file
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"

# print_usage SCRIPT: the comment block at the top of SCRIPT, as its --help.
print_usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$1"; }

# What every x86-64 Linux has (glibc's libraries, the GCC C++ runtime): never carried.
BASE_LIBS='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libresolv\.so\.2|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$'

# carry_libs ELF DEST: every library ELF loads (its ldd closure) that is not in BASE_LIBS,
# copied into DEST under the name ELF's side asks for; fails on one that is not found.
carry_libs() {
    local soname path
    mkdir -p "$2"
    while read -r soname path; do
        [[ $soname =~ $BASE_LIBS ]] && continue
        [ -f "$path" ] || die "$1: $soname not found on this machine (ldd: $path)"
        install -m 0644 "$(readlink -f "$path")" "$2/$soname"
    done < <(ldd "$1" | awk '$2 == "=>" {print $1, $3}')
}

log() { printf '[%s] %s\n' "${LOG_TAG:-face}" "$*" >&2; }
warn() { printf '[%s] WARNING: %s\n' "${LOG_TAG:-face}" "$*" >&2; }
die() {
    printf '[%s] ERROR: %s\n' "${LOG_TAG:-face}" "$*" >&2
    exit 1
}

run_logged() {
    local logfile=$1 rc=0
    shift
    mkdir -p "$(dirname "$logfile")"
    printf '\n### %s  $ %s\n' "$(date '+%F %T')" "$*" >>"$logfile"
    "$@" >>"$logfile" 2>&1 </dev/null || rc=$?
    if [ "$rc" -ne 0 ]; then
        printf '[%s] ERROR: command failed (exit %s): %s\n' "${LOG_TAG:-face}" "$rc" "$*" >&2
        printf '[%s] last lines of %s:\n' "${LOG_TAG:-face}" "$logfile" >&2
        tail -n 30 "$logfile" | sed 's/^/    /' >&2
        exit "$rc"
    fi
}

# venv_current VENV STAMP WANT: the venv at VENV exists and its STAMP file
# holds WANT (the hash of the requirement files it was set up from).
venv_current() {
    [ -x "$1/bin/python" ] && [ "$(cat "$2" 2>/dev/null)" = "$3" ]
}

# venv_create BOOT VENV LOGFILE: create the venv with the interpreter BOOT,
# unless it is there already.
venv_create() {
    [ -x "$2/bin/python" ] && return 0
    log "creating ${2#"$REPO_ROOT"/} with $("$1" --version 2>&1)"
    run_logged "$3" "$1" -m venv "$2"
}
