# shellcheck shell=bash
# Small helpers shared by the scripts in scripts/. Source it; do not run it.
#   REPO_ROOT      absolute path of the repository (set on source)
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
